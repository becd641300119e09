"""``attntrace run --model DIR --prompt TEXT --layer 11`` against a plain transformers script.

    python benchmarks/bench_prompt.py            # GPT-2 small's shape: 12 layers, H = 768, h = 12
    python benchmarks/bench_prompt.py --quick    # a 2-layer H = 64 folder, one repeat (smoke test)

The folder is built once in a temporary directory from a ``GPT2Config`` (random weights, the
real vocabulary size 50,257, safetensors) with a byte-level BPE tokenizer trained here by the
``tokenizers`` library and saved as transformers saves one (tokenizer.json and
tokenizer_config.json). Both sides run as fresh processes, interleaved, and the medians are
compared (issue 46's bar: attntrace <= 1.5x the script):

- **attntrace**: ``python -m attntrace run --model DIR --prompt TEXT --layer 11`` (tokenize,
  run the model up to layer 11's attention, trace that layer, print the table);
- **transformers**: ``AutoTokenizer`` and ``AutoModel`` from the folder, the forward on the
  prompt with ``output_hidden_states=True`` (the same 12 layers), layer 11's input read.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
PROMPT = (
    "The quick brown fox jumps over the lazy dog, and the student asks which word each "
    "attention head looks at when it reads this sentence."
)
SCRIPT = """
import sys, torch
from transformers import AutoModel, AutoTokenizer
folder, prompt, layer = sys.argv[1], sys.argv[2], int(sys.argv[3])
ids = AutoTokenizer.from_pretrained(folder)(prompt, return_tensors="pt")["input_ids"]
model = AutoModel.from_pretrained(folder, dtype=torch.float32).eval()
with torch.inference_mode():
    hidden = model(input_ids=ids, output_hidden_states=True).hidden_states[layer]
print(tuple(hidden.shape))
"""


def build_folder(folder: Path, layers: int, hidden: int, heads: int) -> None:
    """A GPT-2-shaped random-init model and a byte-level BPE tokenizer, saved to ``folder``."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    torch.manual_seed(0)
    config = GPT2Config(n_layer=layers, n_embd=hidden, n_head=heads)
    GPT2LMHeadModel(config).save_pretrained(folder)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator([PROMPT] * 4, trainer)
    PreTrainedTokenizerFast(tokenizer_object=tok).save_pretrained(folder)


def seconds(argv: list[str]) -> float:
    """Wall seconds of one fresh process."""
    start = time.perf_counter()
    subprocess.run(
        argv,
        env={**os.environ, "PYTHONPATH": str(SRC), "HF_HUB_OFFLINE": "1"},
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return time.perf_counter() - start


def compare(folder: Path, layer: int, repeats: int) -> float:
    """Median seconds of each side and their ratio (printed); the ratio returned."""
    runs = {
        "attntrace run --prompt": [
            *(sys.executable, "-m", "attntrace", "run", "--model", str(folder)),
            *("--prompt", PROMPT, "--layer", str(layer)),
        ],
        "transformers script": [sys.executable, "-c", SCRIPT, str(folder), PROMPT, str(layer)],
    }
    got: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeats):
        for name, argv in runs.items():
            got[name].append(seconds(argv))
    ours, theirs = (statistics.median(got[name]) for name in runs)
    for name, times in got.items():
        print(f"{name:26} median {statistics.median(times):6.2f} s  ({len(times)} runs)")
    ratio = ours / theirs
    print(f"ratio attntrace / transformers: {ratio:.2f} (target <= 1.5)")
    return ratio


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    layers, hidden, heads = (2, 64, 4) if args.quick else (12, 768, 12)
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    shape = f"GPT-2 shape L={layers} H={hidden} h={heads}"
    print(f"{os.cpu_count()} CPUs, load average {load}; {shape}")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        build_folder(folder, layers, hidden, heads)
        compare(folder, layers - 1, 1 if args.quick else args.repeats)


if __name__ == "__main__":
    main()
