"""The backward's compute against torch autograd's, a ratio in one run.

    python benchmarks/bench_backward.py            # (B, S, H, h) = (1, 2048, 1024, 16)
    python benchmarks/bench_backward.py --quick    # (1, 256, 128, 4), a smoke test
    python benchmarks/bench_backward.py --shape    # llama-3-70b at 131072 tokens, shape backend

``--shape``: ``attntrace run --backend shape --preset llama-3-70b --seq 131072`` with and
without ``--backward`` in fresh processes, interleaved: the time ratio (target <= 1.5) and the
peak resident memory of each (target < 80 MiB).

Candidate: ``attntrace.engine.backward.backward_steps`` on the numpy backend (keeping no
values: autograd keeps none either), from a forward
trace that kept its values (the backward alone is timed). Baseline: torch autograd's backward
through ``F.linear`` + ``F.scaled_dot_product_attention`` (math kernel on CPU) on the same
arrays and the same d_output (the forward alone is not timed). Interleaved runs; medians.
Target: ratio <= 1.5.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--shape", action="store_true")
    args = parser.parse_args()
    if args.shape:
        shape_backend(args.repeats)
        return
    import torch
    import torch.nn.functional as fn

    from attntrace import AttentionConfig, trace_attention
    from attntrace.backends import get_backend
    from attntrace.engine.backward import backward_steps

    B, S, H, h = (1, 256, 128, 4) if args.quick else (1, 2048, 1024, 16)
    config = AttentionConfig(batch=B, seq=S, hidden=H, heads=h)
    forward = trace_attention(config)
    numpy = get_backend("numpy")
    d_out = np.random.default_rng(0).standard_normal((B, S, H)).astype(np.float32)

    def ours() -> None:
        backward_steps(forward, numpy, d_output=d_out, keep_values=False)

    leaves = {"x": forward["x"].value, **forward.params}

    def torch_backward() -> float:
        p = {n: torch.tensor(v, requires_grad=True) for n, v in leaves.items()}
        d = H // h

        def heads(t: torch.Tensor) -> torch.Tensor:
            return t.view(B, S, h, d).transpose(1, 2)

        q = heads(fn.linear(p["x"], p["w_q"], p["b_q"]))
        k = heads(fn.linear(p["x"], p["w_k"], p["b_k"]))
        v = heads(fn.linear(p["x"], p["w_v"], p["b_v"]))
        ctx = fn.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(B, S, H)
        out = fn.linear(ctx, p["w_o"], p["b_o"])
        grad = torch.from_numpy(d_out)
        start = time.perf_counter()
        out.backward(grad)
        return time.perf_counter() - start

    def timed(fn_: object) -> float:
        start = time.perf_counter()
        fn_()  # type: ignore[operator]
        return time.perf_counter() - start

    ours()
    torch_backward()  # warm-up
    mine, base = [], []
    for _ in range(args.repeats):
        base.append(torch_backward())
        mine.append(timed(ours))
    ratio = statistics.median(mine) / statistics.median(base)
    print(f"(B, S, H, h) = {(B, S, H, h)}, torch {torch.__version__}, {args.repeats} runs each")
    print(f"torch autograd backward (F.linear + SDPA): median {statistics.median(base):.3f} s")
    print(f"attntrace numpy backward steps:            median {statistics.median(mine):.3f} s")
    print(f"ratio {ratio:.2f} (target <= 1.5)")


def shape_backend(repeats: int) -> None:
    """The shape backend's backward at llama-3-70b, 131072 tokens: time and memory."""
    from bench_decode import one_process  # the same fresh-process timing (this folder)

    base = ["run", "--backend", "shape", "--preset", "llama-3-70b", "--seq", "131072"]
    base += ["--format", "json"]

    def one(extra: list[str]) -> tuple[float, float]:
        return one_process([*base, *extra])

    plain, backward = [], []
    for _ in range(repeats):
        plain.append(one([]))
        backward.append(one(["--backward"]))
    t0 = statistics.median(p[0] for p in plain)
    t1 = statistics.median(p[0] for p in backward)
    print(f"llama-3-70b, S=131072, shape backend, {repeats} fresh processes each")
    print(f"run:            median {t0:.2f} s, peak {max(p[1] for p in plain):.1f} MiB")
    print(f"run --backward: median {t1:.2f} s, peak {max(p[1] for p in backward):.1f} MiB")
    print(f"ratio {t1 / t0:.2f} (target <= 1.5; memory target < 80 MiB)")


if __name__ == "__main__":
    main()
