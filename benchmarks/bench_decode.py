"""A decode step (``--past N``) against its baselines, ratios in one run.

    python benchmarks/bench_decode.py              # both sections
    python benchmarks/bench_decode.py --shape      # llama-3-70b at N = 1,048,575, shape backend
    python benchmarks/bench_decode.py --compute    # (B, N, S, H, h) = (1, 8191, 1, 1024, 16)
    python benchmarks/bench_decode.py --quick      # small sizes, one repeat: a smoke test

``--shape`` (issue 34's bar): ``attntrace run --backend shape --preset llama-3-70b --seq 1
--past 1048575`` against the plain shape run ``--seq 1`` (no cache), fresh processes,
interleaved: the time ratio (target <= 1.5) and the peak resident memory of each (target
< 80 MiB); the same with ``--page-size 16`` (the paged cache's steps and figures).

``--compute``: one decode step through the API's defaults, ``trace_attention(cfg)`` with
``cfg.past = N`` (numpy, every value kept, the cache seeded as a user gets it), against torch
``F.linear`` + ``torch.cat`` of the cache + ``F.scaled_dot_product_attention`` on the same
arrays (the cache handed ready-made). Interleaved runs; medians. No target: the figure says
what a traced decode step costs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
PRESET = "llama-3-70b"
PAST = 1_048_575


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--shape", action="store_true")
    parser.add_argument("--compute", action="store_true")
    args = parser.parse_args()
    both = not (args.shape or args.compute)
    repeats = 1 if args.quick else args.repeats
    print(machine())
    if args.shape or both:
        shape_backend(repeats)
    if args.compute or both:
        compute(repeats, quick=args.quick)


def machine() -> str:
    """The CPU, cores and load the figures were taken on."""
    name = "unknown CPU"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            name = line.split(":", 1)[1].strip()
            break
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return f"{name}, {os.cpu_count()} CPUs, load average {load} (1, 5, 15 min)"


def one_process(argv: list[str]) -> tuple[float, float]:
    """Wall seconds and peak resident MiB of ``attntrace`` with ``argv``, a fresh process."""
    code = (
        "import resource, subprocess, sys, time; t = time.perf_counter(); "
        "subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL); "
        "print(time.perf_counter() - t, "
        "resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, sys.executable, "-m", "attntrace", *argv],
        env={**os.environ, "PYTHONPATH": str(SRC)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return float(out[0]), float(out[1])


def shape_backend(repeats: int) -> None:
    """A decode step of llama-3-70b at N = 1,048,575 on the shape backend: time and memory."""
    base = ["run", "--backend", "shape", "--preset", PRESET, "--seq", "1", "--format", "json"]
    runs: dict[str, list[str]] = {
        "plain --seq 1": base,
        f"--past {PAST}": [*base, "--past", str(PAST)],
        f"--past {PAST} --page-size 16": [*base, "--past", str(PAST), "--page-size", "16"],
    }
    got: dict[str, list[tuple[float, float]]] = {name: [] for name in runs}
    for _ in range(repeats):
        for name, argv in runs.items():
            got[name].append(one_process(argv))
    plain = statistics.median(t for t, _ in got["plain --seq 1"])
    print(f"\n{PRESET}, shape backend, --seq 1, {repeats} fresh processes each, interleaved")
    for name, rows in got.items():
        t = statistics.median(r[0] for r in rows)
        peak = max(r[1] for r in rows)
        print(f"  {name:<34} median {t:.3f} s ({t / plain:.2f}×), peak {peak:.1f} MiB")
    print("  targets: decode ≤ 1.5× the plain shape run; peak < 80 MiB")


def compute(repeats: int, *, quick: bool) -> None:
    """One traced decode step (numpy, API defaults) against torch on the same arrays."""
    import torch
    import torch.nn.functional as fn

    from attntrace import AttentionConfig, trace_attention

    B, N, S, H, h = (1, 255, 1, 128, 4) if quick else (1, 8191, 1, 1024, 16)
    config = AttentionConfig(batch=B, seq=S, past=N, hidden=H, heads=h)
    first = trace_attention(config)
    x = torch.from_numpy(first["x"].value)  # (B, S, H)
    k_cache = torch.from_numpy(first["k_cache"].value)  # (B, h, N, d)
    v_cache = torch.from_numpy(first["v_cache"].value)  # (B, h, N, d)
    w = {name: torch.from_numpy(value) for name, value in first.params.items()}
    d = H // h

    def heads(t: torch.Tensor) -> torch.Tensor:
        return t.view(B, S, h, d).transpose(1, 2)  # (B, h, S, d)

    def torch_step() -> None:
        q, k, v = (heads(fn.linear(x, w[f"w_{c}"], w[f"b_{c}"])) for c in "qkv")  # (B, h, S, d)
        k_all = torch.cat((k_cache, k), dim=-2)  # (B, h, N+S, d)
        v_all = torch.cat((v_cache, v), dim=-2)  # (B, h, N+S, d)
        context = fn.scaled_dot_product_attention(q, k_all, v_all)  # (B, h, S, d)
        fn.linear(context.transpose(1, 2).reshape(B, S, H), w["w_o"], w["b_o"])  # (B, S, H)

    given = {name: first[name].value for name in ("x", "k_cache", "v_cache")}
    given |= first.params

    def ours() -> None:
        trace_attention(config)  # the cache seeded, as a user gets it

    def ours_given() -> None:
        trace_attention(config, tensors=given)  # the same arrays as torch's

    rows: dict[str, list[float]] = {"torch": [], "defaults": [], "given": []}
    with torch.no_grad():
        for step in (torch_step, ours, ours_given):  # warm-up
            step()
        for _ in range(max(repeats, 3) * 3):
            rows["torch"].append(timed(torch_step))
            rows["defaults"].append(timed(ours))
            rows["given"].append(timed(ours_given))
    t = {name: statistics.median(times) for name, times in rows.items()}
    print(f"\ndecode step (B, N, S, H, h) = {(B, N, S, H, h)}, torch {torch.__version__}")
    print(f"  torch F.linear + cat + SDPA, same arrays:     median {t['torch'] * 1e3:.2f} ms")
    for name, label in (
        ("defaults", "trace_attention(cfg), cache seeded"),
        ("given", "trace_attention(cfg, tensors=same arrays)"),
    ):
        ratio = t[name] / t["torch"]
        print(f"  {label:<45} median {t[name] * 1e3:.2f} ms: {ratio:.2f}×")
    print("  no target: what a traced decode step costs beside the bare computation")


def timed(step: Callable[[], object]) -> float:
    start = time.perf_counter()
    step()
    return time.perf_counter() - start


if __name__ == "__main__":
    main()
