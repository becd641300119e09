"""``diff --nproc 2`` of a tensor-parallel attention against ``verify --tp 2 --nproc 2``, the
same sizes, measured in the same run (issue 44's bar: the ratio <= 3).

    python benchmarks/bench_rank_diff.py            # (B, S, H, h) = (1, 512, 1024, 16), 3 repeats
    python benchmarks/bench_rank_diff.py --quick    # one repeat, small sizes: a smoke test

Both start two gloo processes. ``verify`` runs the reference's rank view in them and compares
every step with the simulation; ``diff`` runs the user's Megatron-style code
(tests/data/distributed/megatron_tp.py) in them under capture, every value kept, then joins the
ranks' weights, simulates the reference's ranks from them and aligns every rank's tensors by
value. Fresh processes, interleaved; the median of each.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_decode import machine, one_process

ROOT = Path(__file__).resolve().parents[1]
TARGET = f"{ROOT / 'tests' / 'data' / 'distributed' / 'megatron_tp.py'}:ParallelSelfAttention"
TARGET_RATIO = 3.0


def commands(seq: int, hidden: int, heads: int) -> dict[str, list[str]]:
    """The two commands at (1, seq, hidden, heads)."""
    sizes = ["--batch", "1", "--seq", str(seq), "--hidden", str(hidden), "--heads", str(heads)]
    init = ["--init", f"hidden={hidden}", "--init", f"heads={heads}"]
    return {
        "verify --tp 2 --nproc 2": ["verify", "--tp", "2", "--nproc", "2", *sizes],
        "diff --nproc 2 (megatron_tp.py)": ["diff", TARGET, *init, "--nproc", "2", *sizes],
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    repeats = 1 if args.quick else args.repeats
    sizes = (64, 64, 4) if args.quick else (512, 1024, 16)
    print(machine())
    runs = commands(*sizes)
    got: dict[str, list[tuple[float, float]]] = {name: [] for name in runs}
    for _ in range(repeats):
        for name, argv in runs.items():
            got[name].append(one_process(argv))
    seq, hidden, heads = sizes
    print(f"\n(B, S, H, h) = (1, {seq}, {hidden}, {heads}), float32, {repeats} runs each")
    base = statistics.median(t for t, _ in got["verify --tp 2 --nproc 2"])
    ratio = 0.0
    for name, rows in got.items():
        t = statistics.median(r[0] for r in rows)
        ratio = t / base
        print(f"  {name:34} {t:7.2f} s  {ratio:5.2f}×")
    verdict = "met" if ratio <= TARGET_RATIO else "NOT met"
    print(f"diff / verify = {ratio:.2f}× (target <= {TARGET_RATIO:g}×: {verdict})")


if __name__ == "__main__":
    main()
