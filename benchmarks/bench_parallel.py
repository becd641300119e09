"""One rank's view across devices (issue 43) against the plain shape run, ratios in one run.

    python benchmarks/bench_parallel.py            # Llama 3.1 405B, S = 1,048,576, T = 8, C = 16
    python benchmarks/bench_parallel.py --quick    # one repeat: a smoke test

Issue 43's bar: ``attntrace run --backend shape`` with Llama 3.1 405B's attention sizes at
S = 1,048,576 tokens, ``--tp 8 --cp 16 --causal`` (ring attention, the load-balanced order,
rank 0 of 128), against the same run without the layout, fresh processes, interleaved: the
time ratio (target <= 1.2) and the peak resident memory of each (target < 80 MiB). Then the
same with ``--cp-kind ulysses`` and with ``--sp``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_decode import machine, one_process

#: Llama 3.1 405B's attention (meta-llama/Llama-3.1-405B's config.json), in bfloat16.
LLAMA_405B = ["--hidden", "16384", "--heads", "128", "--kv-heads", "8", "--head-dim", "128"]
LLAMA_405B += ["--no-bias", "--rope", "--rope-base", "500000", "--dtype", "bfloat16"]
SEQ = 1_048_576


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    repeats = 1 if args.quick else args.repeats
    print(machine())
    base = ["run", "--backend", "shape", *LLAMA_405B, "--batch", "1", "--causal"]
    base += ["--seq", str(SEQ), "--format", "json"]
    runs: dict[str, list[str]] = {
        "plain (one device)": base,
        "--tp 8 --cp 16 (ring)": [*base, "--tp", "8", "--cp", "16"],
        "--tp 8 --cp 16 --cp-kind ulysses": [
            *base,
            "--tp",
            "8",
            "--cp",
            "16",
            "--cp-kind",
            "ulysses",
        ],
        "--tp 8 --sp --cp 16 (ring)": [*base, "--tp", "8", "--sp", "--cp", "16"],
    }
    got: dict[str, list[tuple[float, float]]] = {name: [] for name in runs}
    for _ in range(repeats):
        for name, argv in runs.items():
            got[name].append(one_process(argv))
    plain = statistics.median(t for t, _ in got["plain (one device)"])
    print(f"\nLlama 3.1 405B, S = {SEQ:,}, shape backend, {repeats} fresh processes each")
    for name, rows in got.items():
        t = statistics.median(r[0] for r in rows)
        peak = max(r[1] for r in rows)
        print(f"  {name:<34} median {t:.3f} s ({t / plain:.2f}×), peak {peak:.1f} MiB")
    print("  targets: the rank view ≤ 1.2× the plain shape run; peak < 80 MiB")


if __name__ == "__main__":
    main()
