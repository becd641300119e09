"""Tiny random-init transformers models for parity tests: build one from a config object (no
downloads), save it with save_pretrained, run it once and capture what one attention layer saw
and gave (its input hidden states, its output and its attention weights)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing may come from the hub
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@dataclass
class Captured:
    """One attention layer's input x (B, S, H), output (B, S, H) and weights (B, h, S, N)."""

    x: np.ndarray
    output: np.ndarray
    weights: np.ndarray


def build(
    kind: str,
    folder: Path,
    dtype: str = "float32",
    seed: int = 0,
    shard: str | None = None,
    **sizes: Any,
) -> Any:
    """A random-init model of ``kind`` (a transformers config class name without ``Config``),
    saved to ``folder`` (safetensors, config.json), eager attention, in eval mode."""
    import torch
    import transformers

    torch.manual_seed(seed)
    config = getattr(transformers, f"{kind}Config")(**sizes)
    config._attn_implementation = "eager"
    model = getattr(transformers, _MODEL_CLASS.get(kind, f"{kind}ForCausalLM"))(config).eval()
    model.save_pretrained(folder, **({"max_shard_size": shard} if shard else {}))
    return model.to(getattr(torch, dtype))


_MODEL_CLASS = {
    "GPT2": "GPT2LMHeadModel",
    "Bert": "BertModel",
    "T5": "T5EncoderModel",
    "Gemma3Text": "Gemma3ForCausalLM",
}


def randomize_norms(model: Any, folder: Path, seed: int = 1) -> None:
    """Give every q_norm / k_norm weight random values (they start at one or zero) and save
    the model again, so that a test sees whether the weights are read."""
    import torch

    torch.manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "q_norm" in name or "k_norm" in name:
                param.copy_(torch.rand_like(param) + 0.5)
    model.save_pretrained(folder)


def capture(model: Any, module: Any, ids: np.ndarray, mask: np.ndarray | None = None) -> Captured:
    """Run ``model`` on token ids (B, S) and keep what ``module`` (an attention layer) saw."""
    import torch

    seen: dict[str, Any] = {}

    def hook(_mod: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
        seen["x"] = kwargs.get("hidden_states", args[0] if args else None)
        seen["out"], seen["weights"] = out[0], out[1]

    handle = module.register_forward_hook(hook, with_kwargs=True)
    try:
        with torch.no_grad():
            extra = {"attention_mask": torch.from_numpy(mask)} if mask is not None else {}
            model(input_ids=torch.from_numpy(ids), output_attentions=True, **extra)
    finally:
        handle.remove()
    return Captured(*(seen[k].detach().to(torch.float64).numpy() for k in ("x", "out", "weights")))
