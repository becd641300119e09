"""attntrace performance figures, each beside its named baseline, measured in one run.

    python benchmarks/bench.py [--repeat 7] [--only startup,compute,memory,recording]

Timings are interleaved (baseline, candidate, baseline, ...) and reported as the median and the
best of --repeat runs; ratios use the medians. Memory is the growth of the peak RSS of a fresh
process during one call (inputs and weights already allocated and warmed up).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(REPO / "src")}
sys.path.insert(0, str(REPO / "src"))  # this checkout, not an installed attntrace
B, S, H, HEADS = 1, 2048, 1024, 16


def interleaved(fns: dict[str, Callable[[], object]], repeat: int) -> dict[str, list[float]]:
    """Run each function ``repeat`` times, round-robin, and return the wall times."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return times


def report(title: str, times: dict[str, list[float]], baseline: str, target: float | None = None) -> dict[str, object]:
    base = statistics.median(times[baseline])
    print(f"\n{title}")
    rows = {}
    for name, ts in times.items():
        med = statistics.median(ts)
        ratio = med / base
        mark = "" if name == baseline or target is None else ("  ok" if ratio <= target else f"  MISSED (target <= {target}x)")
        print(f"  {name:<44} median {med * 1000:8.1f} ms  best {min(ts) * 1000:8.1f} ms  {ratio:5.2f}x{mark}")
        rows[name] = {"median_s": med, "best_s": min(ts), "ratio": ratio}
    return rows


def command(*args: str) -> Callable[[], object]:
    return lambda: subprocess.run(args, env=ENV, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def startup(repeat: int) -> dict[str, object]:
    probe = "import sys, runpy; sys.argv=['attntrace','--help'];\ntry: runpy.run_module('attntrace', run_name='__main__')\nexcept SystemExit: pass\nprint(sorted(m for m in ('numpy','torch') if m in sys.modules), file=sys.stderr)"
    heavy = subprocess.run([sys.executable, "-c", probe], env=ENV, capture_output=True, text=True, check=True).stderr.strip().splitlines()[-1]
    print(f"\nattntrace --help imports of numpy/torch: {heavy}  (target: [])")
    py = sys.executable
    times = interleaved({
        "python -c 'import numpy, rich.table, typer'": command(py, "-c", "import numpy, rich.table, typer"),
        "attntrace run --heads 12 --hidden 768": command(py, "-m", "attntrace", "run", "--heads", "12", "--hidden", "768"),
        "attntrace run --heads 64 --hidden 8192 --seq 131072 --backend shape": command(
            py, "-m", "attntrace", "run", "--heads", "64", "--hidden", "8192", "--seq", "131072", "--backend", "shape"),
    }, repeat)
    rows = report("startup (wall time of a fresh process)", times, "python -c 'import numpy, rich.table, typer'", 1.3)
    rss = subprocess.run(["/usr/bin/time", "-f", "%M", py, "-m", "attntrace", "run", "--heads", "64", "--hidden", "8192",
                          "--seq", "131072", "--backend", "shape"], env=ENV, capture_output=True, text=True, check=True)
    kib = int(rss.stderr.strip().splitlines()[-1])
    print(f"  shape run at S=131072 (scores 4 TiB): max RSS {kib / 1024:.1f} MiB (target < 80 MiB)")
    return {"help_imports": heavy, "times": rows, "shape_rss_mib": kib / 1024}


def compute_fns() -> dict[str, Callable[[], object]]:
    """torch F.linear + SDPA (the baseline), attntrace numpy eager and flash, on the same values."""
    import torch
    import torch.nn.functional as F  # noqa: N812  (the name in the torch docs)

    from attntrace import AttentionConfig, trace_attention

    eager = AttentionConfig(batch=B, seq=S, hidden=H, heads=HEADS)
    flash = AttentionConfig(batch=B, seq=S, hidden=H, heads=HEADS, algorithm="flash", block_size=FLASH_BLOCK)
    ref = trace_attention(AttentionConfig(batch=B, seq=S, hidden=H, heads=HEADS), "shape")
    x = torch.randn(B, S, H)
    w = {n: torch.randn(p.shape) * H**-0.5 for n, p in ((p.name, p) for p in ref.parameters)}
    d = H // HEADS

    def sdpa() -> object:
        q, k, v = (F.linear(x, w[f"w_{c}"], w[f"b_{c}"]).view(B, S, HEADS, d).transpose(1, 2) for c in "qkv")
        ctx = F.scaled_dot_product_attention(q, k, v)
        return F.linear(ctx.transpose(1, 2).reshape(B, S, H), w["w_o"], w["b_o"])

    # both sides start from the same x and weights, already in memory (no random draws timed)
    arrays = {"x": x.numpy(), **{name: t.numpy() for name, t in w.items()}}
    return {
        "torch F.linear + scaled_dot_product_attention": sdpa,
        "attntrace numpy eager": lambda: trace_attention(eager, "numpy", keep_values=False, tensors=arrays),
        f"attntrace numpy flash (block {FLASH_BLOCK})": lambda: trace_attention(flash, "numpy", keep_values=False, tensors=arrays),
    }


FLASH_BLOCK = 256


def compute(repeat: int) -> dict[str, object]:
    fns = compute_fns()
    for fn in fns.values():  # warm up: thread pools, allocator
        fn()
    times = interleaved(fns, repeat)
    return report(f"compute (B={B}, S={S}, H={H}, h={HEADS}, float32, projections included)", times,
                  "torch F.linear + scaled_dot_product_attention", 1.3)


def memory() -> dict[str, object]:
    """Peak RSS growth of one call in a fresh process, per candidate."""
    print(f"\npeak extra memory of one call (B={B}, S={S}, H={H}, h={HEADS}), fresh process each")
    rows: dict[str, object] = {}
    for name in compute_fns():
        code = (f"import sys; sys.path.insert(0, {str(REPO / 'benchmarks')!r}); import bench, resource; "
                f"fn = bench.compute_fns()[{name!r}]; import gc; gc.collect(); "
                "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss; fn(); "
                "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)")
        out = subprocess.run([sys.executable, "-c", code], env=ENV, capture_output=True, text=True, check=True)
        rows[name] = int(out.stdout.strip().splitlines()[-1]) / 1024
    base = rows["torch F.linear + scaled_dot_product_attention"]
    for name, mib in rows.items():
        print(f"  {name:<44} {mib:8.1f} MiB  {mib / base if base else float('nan'):5.2f}x")
    return rows


def recording(repeat: int) -> dict[str, object]:
    """trace_attention (numpy, values not kept) against the same numpy maths written plainly
    (inputs drawn in both; the traced side also makes its shape pre-pass and memory check)."""
    import numpy as np

    from attntrace import AttentionConfig, trace_attention
    from attntrace.inputs import random_sources

    cfg = AttentionConfig(batch=B, seq=S, hidden=H, heads=HEADS)
    src = random_sources(cfg)
    d = H // HEADS

    def plain() -> object:  # draws the same seeded inputs, as trace_attention does
        x = src["x"].make()
        p = {n: src[n].make() for n in src if n != "x"}
        q, k, v = ((x @ p[f"w_{c}"].T + p[f"b_{c}"]).reshape(B, S, HEADS, d).swapaxes(1, 2) for c in "qkv")
        s = np.matmul(q * np.float32(d**-0.5), k.swapaxes(-2, -1))
        s -= s.max(axis=-1, keepdims=True)
        np.exp(s, out=s)
        s /= s.sum(axis=-1, keepdims=True)
        ctx = np.matmul(s, v).swapaxes(1, 2).reshape(B, S, H)
        return ctx @ p["w_o"].T + p["b_o"]

    def traced() -> object:
        return trace_attention(cfg, "numpy", keep_values=False)

    plain()
    traced()
    times = interleaved({"plain numpy, same maths": plain, "trace_attention(numpy, keep_values=False)": traced}, repeat)
    return report("recording overhead (target <= 1.05x)", times, "plain numpy, same maths", 1.05)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--only", default="startup,memory,compute,recording")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args()
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}; python {sys.version.split()[0]}")
    results = {}
    for part in args.only.split(","):
        results[part] = startup(args.repeat) if part == "startup" else memory() if part == "memory" else \
            compute(args.repeat) if part == "compute" else recording(args.repeat)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
