"""Real checkpoints: Hugging Face model folders, their config.json and their weight layouts.
Nothing here imports torch or safetensors until a file needs it."""
