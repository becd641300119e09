"""Recording overhead of ``attntrace trace`` / ``attntrace.capture()``, beside the untraced run.

    python benchmarks/bench_capture.py [--repeat 7]

At (B, S, H, h) = (1, 512, 1024, 16): a torch attention module's forward, and a numpy
attention function, each run plain and under ``attntrace.capture()`` (values kept, the
default, and shapes only), interleaved; ratios of the medians. Target: ≤ 1.5× the plain run.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # this checkout

import attntrace

B, S, H, HEADS = 1, 512, 1024, 16
TARGET = 1.5


def numpy_attention(x: np.ndarray, w: dict[str, np.ndarray], heads: int) -> np.ndarray:
    """Multi-head attention as a learner writes it in numpy (x (B, S, H))."""
    b, s, h = x.shape
    d = h // heads
    q = (x @ w["q"].T).reshape(b, s, heads, d).transpose(0, 2, 1, 3)  # (B, h, S, d)
    k = (x @ w["k"].T).reshape(b, s, heads, d).transpose(0, 2, 1, 3)  # (B, h, S, d)
    v = (x @ w["v"].T).reshape(b, s, heads, d).transpose(0, 2, 1, 3)  # (B, h, S, d)
    scores = q @ k.swapaxes(-1, -2) / math.sqrt(d)  # (B, h, S, S)
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))  # (B, h, S, S)
    weights = e / e.sum(axis=-1, keepdims=True)  # (B, h, S, S)
    context = weights @ v  # (B, h, S, d)
    merged = context.transpose(0, 2, 1, 3).reshape(b, s, h)  # (B, S, H)
    return merged @ w["o"].T  # (B, S, H)


def torch_module() -> tuple[Callable[[], object], ...]:
    import torch

    class Attention(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.q, self.k, self.v, self.o = (torch.nn.Linear(H, H) for _ in range(4))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, s, _ = x.shape
            d = H // HEADS
            q = self.q(x).view(b, s, HEADS, d).transpose(1, 2)  # (B, h, S, d)
            k = self.k(x).view(b, s, HEADS, d).transpose(1, 2)  # (B, h, S, d)
            v = self.v(x).view(b, s, HEADS, d).transpose(1, 2)  # (B, h, S, d)
            scores = q @ k.transpose(-2, -1) / math.sqrt(d)  # (B, h, S, S)
            weights = torch.softmax(scores, dim=-1)  # (B, h, S, S)
            merged = (weights @ v).transpose(1, 2).reshape(b, s, H)  # (B, S, H)
            return self.o(merged)  # (B, S, H)

    torch.manual_seed(0)
    model, x = Attention().eval(), torch.randn(B, S, H)

    def plain() -> object:
        with torch.no_grad():
            return model(x)

    def traced(keep: bool) -> Callable[[], object]:
        def run() -> object:
            with torch.no_grad(), attntrace.capture(keep_values=keep) as t:
                model(x)
            return t.steps

        return run

    return plain, traced(True), traced(False)


def numpy_function() -> tuple[Callable[[], object], ...]:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((B, S, H)).astype(np.float32)
    w = {n: rng.standard_normal((H, H)).astype(np.float32) / math.sqrt(H) for n in "qkvo"}

    def plain() -> object:
        return numpy_attention(x, w, HEADS)

    def traced(keep: bool) -> Callable[[], object]:
        def run() -> object:
            with attntrace.capture(keep_values=keep) as t:
                numpy_attention(t.track(x), w, HEADS)
            return t.steps

        return run

    return plain, traced(True), traced(False)


def measure(name: str, fns: tuple[Callable[[], object], ...], repeat: int) -> bool:
    labels = ("plain", "capture (values kept)", "capture (shapes only)")
    for fn in fns:
        fn()  # warm-up
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeat):
        for k, fn in enumerate(fns):
            start = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - start)
    base = statistics.median(times[0])
    ok = True
    print(f"{name} at (B, S, H, h) = ({B}, {S}, {H}, {HEADS}), median of {repeat}:")
    for label, t in zip(labels, times, strict=True):
        ratio = statistics.median(t) / base
        ok &= ratio <= TARGET or label == labels[0]
        print(f"  {label:<24} {statistics.median(t) * 1e3:8.1f} ms   {ratio:5.2f}x")
    return ok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    ok = measure("torch module forward", torch_module(), args.repeat)
    ok &= measure("numpy function", numpy_function(), args.repeat)
    print(f"target ≤ {TARGET}x: {'met' if ok else 'NOT met'}")


if __name__ == "__main__":
    main()
