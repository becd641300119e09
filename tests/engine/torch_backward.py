"""Eager attention written in plain torch for the backward tests: the same computation as a
traced config, differentiated by autograd, with the bytes autograd saves counted by
``torch.autograd.graph.saved_tensors_hooks``."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
import torch.nn.functional as fn

from attntrace import AttentionConfig
from attntrace.trace import Trace


def _rotate_half(x: torch.Tensor, dims: int, pairs: bool) -> torch.Tensor:
    """rotate_half (or rotate_pairs) of the first ``dims`` entries of the last axis, zeros after."""
    part, rest = x[..., :dims], x[..., dims:]
    if pairs:
        even, odd = part[..., 0::2], part[..., 1::2]
        turned = torch.stack((-odd, even), dim=-1).flatten(-2)
    else:
        half = dims // 2
        turned = torch.cat((-part[..., half:], part[..., :half]), dim=-1)
    return torch.cat((turned, torch.zeros_like(rest)), dim=-1)


def autograd_of(trace: Trace, wide: bool = False) -> tuple[dict[str, np.ndarray], int]:
    """Gradients of x (x_kv) and every parameter by autograd, from the trace's own inputs,
    parameters and d_output; and the bytes autograd saves that are not parameters (one count
    per storage). ``wide``: in float64 whatever the trace's dtype."""
    cast = np.float64 if wide else None
    cfg: AttentionConfig = trace.config
    leaves = {
        name: torch.tensor(np.asarray(trace[name].value, dtype=cast), requires_grad=True)
        for name in ("x", "x_kv")
        if name in trace
    }
    leaves |= {
        n: torch.tensor(np.asarray(v, dtype=cast), requires_grad=True)
        for n, v in trace.params.items()
    }
    param_ptrs = {
        t.untyped_storage().data_ptr() for n, t in leaves.items() if n not in ("x", "x_kv")
    }
    saved: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in param_ptrs:
            saved[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = _forward(cfg, trace, leaves)
    out.backward(torch.tensor(np.asarray(trace["d_output"].value, dtype=cast)))
    grads = {f"d_{n}": t.grad.numpy() for n, t in leaves.items() if t.grad is not None}
    return grads, sum(saved.values())


def _forward(cfg: AttentionConfig, trace: Trace, p: dict[str, Any]) -> torch.Tensor:
    lead = (cfg.batch,) if cfg.batch is not None else ()
    n = len(lead)
    d = cfg.head_dim
    x, x_kv = p["x"], p.get("x_kv", p["x"])
    q = fn.linear(x, p["w_q"], p.get("b_q"))
    k = fn.linear(x_kv, p["w_k"], p.get("b_k"))
    v = fn.linear(x_kv, p["w_v"], p.get("b_v"))
    q = q.view(*lead, cfg.seq, cfg.heads, d).transpose(n, n + 1)
    k = k.view(*lead, cfg.keys, cfg.groups, d).transpose(n, n + 1)
    v = v.view(*lead, cfg.keys, cfg.groups, d).transpose(n, n + 1)
    if cfg.rope:
        cos = torch.tensor(trace["rope_cos"].value).to(x.dtype)
        sin = torch.tensor(trace["rope_sin"].value).to(x.dtype)
        dims, pairs = cfg.rotary_dims or d, cfg.rope_style == "interleaved"
        q = q * cos + _rotate_half(q, dims, pairs) * sin
        k = k * cos + _rotate_half(k, dims, pairs) * sin
    r = cfg.heads // cfg.groups
    if r > 1:  # as the traced forward: a copy of each kv head per query head
        k, v = k.repeat_interleave(r, dim=n), v.repeat_interleave(r, dim=n)
    scores = q @ k.transpose(-2, -1)
    s = scores * cfg.score_scale
    if cfg.softcap is not None:
        s = cfg.softcap * torch.tanh(s / cfg.softcap)
    if "mask" in trace:
        mask = torch.tensor(trace["mask"].value)
        mask = mask if mask.dtype == torch.bool else mask.to(x.dtype)
        s = torch.where(mask, s, -math.inf) if mask.dtype == torch.bool else s + mask
    weights = torch.softmax(s, dim=-1)
    context = weights @ v
    merged = context.transpose(n, n + 1).reshape(*lead, cfg.seq, cfg.heads * d)
    return fn.linear(merged, p["w_o"], p.get("b_o"))
