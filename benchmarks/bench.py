"""attntrace performance figures, each a ratio against a baseline measured in the same run.

    python benchmarks/bench.py                   # every section, (B, S, H, h) = (1, 2048, 1024, 16)
    python benchmarks/bench.py --quick           # small sizes, one repeat: a smoke test (< 1 min)
    python benchmarks/bench.py --markdown > docs/benchmarks.md   # regenerate the docs page

Sections: machine facts; start-up (fresh processes, wall and CPU time); ``attntrace run`` with
no tuning flags against a torch script doing the same work (fresh processes, and in process);
compute through the API's defaults (``trace_attention(cfg)`` keeps every value) against torch
``F.linear`` + SDPA on the same arrays; the same under contention (a busy process this script
starts and stops); peak memory of one call in a fresh process (VmHWM reset through
/proc/self/clear_refs, so torch's and numpy's allocations both count), for every mask. Timings
are interleaved (baseline, candidate, baseline, ...); ratios use medians, the best run is shown
too.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(REPO / "src")}
# Fresh processes get bytecode caches, as an installed package (pip compiles at install) and a
# second run of any script have: without them every run compiles attntrace's sources again.
ENV.pop("PYTHONDONTWRITEBYTECODE", None)
sys.path.insert(0, str(REPO / "src"))  # this checkout, not an installed attntrace
#: The start-up floor: a hand-written run, same output kind (Rich draws its four tables), and a
#: Typer script whose --help Typer draws.
MINIMAL = REPO / "benchmarks" / "minimal_run.py"
#: The floor of a shape-backend run: the same tables drawn by Rich from a JSON file (issue 40).
MINIMAL_TABLES = REPO / "benchmarks" / "minimal_tables.py"
FULL, QUICK = (1, 2048, 1024, 16), (1, 256, 256, 4)
MASKS = ("none", "causal", "key padding", "window")
STARTUP_RUNS = 15  # the least number of runs of each start-up command (not with --quick)


def cpu_details() -> str:
    """Family and model numbers, the vector units numpy's and torch's kernels may use and the
    caches of CPU 0 (the same model name covers machines whose figures differ by 40 %)."""
    info = Path("/proc/cpuinfo")
    if not info.exists():
        return platform.machine()
    fields = dict(
        line.split(":", 1) for line in info.read_text().split("\n\n")[0].splitlines() if ":" in line
    )
    fields = {k.strip(): v.strip() for k, v in fields.items()}
    flags = set(fields.get("flags", "").split())
    units = [
        name
        for name, flag in (("AVX2", "avx2"), ("AVX-512", "avx512f"), ("AMX", "amx_tile"))
        if flag in flags
    ]
    caches = []
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            level, kind = (
                (index / "level").read_text().strip(),
                (index / "type").read_text().strip(),
            )
            size = (index / "size").read_text().strip()
        except OSError:
            continue
        if kind != "Instruction":
            caches.append(f"L{level} {size}")
    return ", ".join(
        [
            f"family {fields.get('cpu family', '?')} model {fields.get('model', '?')}",
            *units,
            *caches,
        ]
    )


@dataclass
class Report:
    """Every figure of the run, printed as text and collected as markdown rows."""

    markdown: bool
    rows: list[str] = field(default_factory=list)

    def say(self, line: str = "") -> None:
        if not self.markdown:
            print(line, flush=True)
        else:
            print(line, file=sys.stderr, flush=True)  # progress; stdout is the page

    def row(self, *cells: str) -> None:
        self.rows.append("| " + " | ".join(cells) + " |")


#: Seconds of rest before each timed call in process: the threads of the call before it
#: (OpenBLAS's and OpenMP's spin for up to ~0.1 s after their work) go back to sleep, so
#: that no call is timed against the spinning threads of another (they slowed the next call
#: by up to 20 %, the torch baseline as much as attntrace).
SETTLE = 0.3


def interleaved(fns: dict[str, Callable[[], object]], repeat: int) -> dict[str, list[float]]:
    """Run each function ``repeat`` times, round-robin, each after :data:`SETTLE` seconds of
    rest (none for a single repeat, the smoke test); wall times per name."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            time.sleep(SETTLE if repeat > 1 else 0.0)
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return times


def paired_ratio(times: list[float], base: list[float]) -> float:
    """The median of the round-by-round ratios: each round runs the two moments apart, so a
    slow stretch of the host (its load drifts over seconds here) counts against both alike.
    Reported beside the ratio of the medians, which the verdicts use.

    >>> paired_ratio([2.0, 3.0, 9.0], [1.0, 2.0, 3.0])
    2.0
    """
    return statistics.median(t / b for t, b in zip(times, base, strict=True))


def ratios(
    rep: Report,
    section: str,
    times: dict[str, list[float]],
    baseline: str,
    targets: dict[str, float],
) -> dict[str, float]:
    base = statistics.median(times[baseline])
    out = {}
    for name, ts in times.items():
        med, ratio = statistics.median(ts), statistics.median(ts) / base
        out[name] = ratio
        target = targets.get(name)
        verdict = "" if target is None else "ok" if ratio <= target else "MISSED"
        timing = f"median {med * 1e3:8.1f} ms  best {min(ts) * 1e3:8.1f} ms"
        rep.say(f"  {name:<52} {timing}  {ratio:5.2f}x  {verdict}")
        if name != baseline:  # best against best too: a busy moment moves a median by 10 % here
            best = min(ts) / min(times[baseline])
            paired = paired_ratio(ts, times[baseline])
            rep.row(
                section,
                name,
                f"{baseline}: {base * 1e3:.0f} ms",
                f"{med * 1e3:.0f} ms: **{ratio:.2f}×** (best against best {best:.2f}×, "
                f"paired {paired:.2f}×)",
                f"≤ {target}× {verdict}" if target else "—",
            )
    return out


def machine(rep: Report) -> None:
    import numpy as np
    from threadpoolctl import threadpool_info

    model = (
        next(
            (
                line.split(":", 1)[1].strip()
                for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")
            ),
            platform.processor(),
        )
        if Path("/proc/cpuinfo").exists()
        else "?"
    )
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    blas = ", ".join(
        f"{i.get('internal_api')} {i.get('version')} ({i.get('num_threads')} threads, "
        f"{i.get('architecture') or '?'} kernels)"
        for i in threadpool_info()
        if i.get("user_api") == "blas"
    )
    try:
        import torch

        tv = f"torch {torch.__version__} ({torch.get_num_threads()} threads)"
    except ImportError:
        tv = "no torch"
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    model = f"{model} ({cpu_details()})"
    rep.say(f"machine: {model}; {os.cpu_count()} CPUs, {usable} usable; load average {load}")
    rep.say(f"python {sys.version.split()[0]}, numpy {np.__version__}, BLAS {blas}; {tv}")
    rep.rows.append(
        f"**Machine.** {model}, {os.cpu_count()} CPUs ({usable} usable), load average "
        f"{load} (1, 5, 15 min) at the start; Python {sys.version.split()[0]}, numpy "
        f"{np.__version__}, BLAS {blas}; {tv}.\n"
    )


@dataclass
class Runs:
    """Wall and CPU (user + system) seconds of each run of fresh processes, per name."""

    wall: dict[str, list[float]] = field(default_factory=dict)
    cpu: dict[str, list[float]] = field(default_factory=dict)


def processes(cmds: dict[str, list[str]], repeat: int) -> Runs:
    """Run each command ``repeat`` times, round-robin, after one warm-up round (file caches,
    bytecode caches; none for a single repeat, the smoke test); wall and the child's CPU time."""
    runs = Runs({n: [] for n in cmds}, {n: [] for n in cmds})
    warm = int(repeat > 1)
    for round_ in range(repeat + warm):
        for name, argv in cmds.items():
            start = time.perf_counter()
            proc = subprocess.Popen(
                argv, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
            _, status, usage = os.wait4(proc.pid, 0)
            wall = time.perf_counter() - start
            if os.waitstatus_to_exitcode(status) != 0:
                raise SystemExit(f"bench: {' '.join(argv)} failed")
            if round_ >= warm:
                runs.wall[name].append(wall)
                runs.cpu[name].append(usage.ru_utime + usage.ru_stime)
    return runs


def process_ratios(
    rep: Report, section: str, runs: Runs, baseline: str, targets: dict[str, float]
) -> None:
    """Candidate / baseline of fresh processes: wall time (the verdict) and CPU time (steadier
    on a busy machine: time spent waiting for a core does not count)."""
    med = {n: statistics.median(ts) for n, ts in runs.wall.items()}
    cpu = {n: statistics.median(ts) for n, ts in runs.cpu.items()}
    for name in runs.wall:
        ratio, cpu_ratio = med[name] / med[baseline], cpu[name] / cpu[baseline]
        target = targets.get(name)
        verdict = "" if target is None else "ok" if ratio <= target else "MISSED"
        best = min(runs.wall[name])
        rep.say(
            f"  {name:<62} median {med[name] * 1e3:7.0f} ms  best {best * 1e3:7.0f} ms"
            f"  {ratio:5.2f}x  (CPU {cpu[name] * 1e3:6.0f} ms {cpu_ratio:5.2f}x)"
            + (f"  (target <= {target}) {verdict}" if target else "")
        )
        if name != baseline:
            rep.row(
                section,
                name,
                f"{baseline}: {med[baseline] * 1e3:.0f} ms",
                f"{med[name] * 1e3:.0f} ms: **{ratio:.2f}×** (CPU time {cpu_ratio:.2f}×)",
                f"≤ {target}× {verdict}" if target else "—",
            )


def attntrace_command() -> list[str]:
    """``attntrace`` as a user runs it: the console script beside this Python (which imports
    this checkout: PYTHONPATH comes first), else ``python -m attntrace``."""
    script = Path(sys.executable).with_name("attntrace")
    return [str(script)] if script.exists() else [sys.executable, "-m", "attntrace"]


#: Start-up targets (issue 28): the top-level help against a Typer script's --help (Typer and
#: Rich drawing it), a small run against the hand-written floor (Rich drawing its tables).
HELP_TARGET, RUN_TARGET = 0.2, 1.2


def startup(rep: Report, repeat: int) -> None:
    """Fresh processes: ``attntrace --help`` against minimal_run.py's ``--help`` (a Typer script:
    Typer draws it), ``attntrace run`` against minimal_run.py's run; ``import typer`` and
    Typer's Rich help module for scale."""
    py, at = sys.executable, attntrace_command()
    rep.say("\nstart-up (wall time of a fresh process; CPU time in brackets)")
    typer_help = "minimal_run.py --help (a Typer script)"
    rich_help = "import typer, typer.rich_utils"  # what Typer's own Rich help needs
    runs = processes(
        {
            typer_help: [py, str(MINIMAL), "--help"],
            "python -c 'import typer'": [py, "-c", "import typer"],
            f"python -c '{rich_help}'": [py, "-c", rich_help],
            "attntrace --help": [*at, "--help"],
        },
        repeat,
    )
    process_ratios(rep, "start-up", runs, typer_help, {"attntrace --help": HELP_TARGET})
    args = ["--heads", "12", "--hidden", "768"]
    runs = processes(
        {
            "minimal_run.py --heads 12 --hidden 768": [py, str(MINIMAL), *args],
            "attntrace run --heads 12 --hidden 768": [*at, "run", *args],
        },
        repeat,
    )
    process_ratios(
        rep,
        "start-up",
        runs,
        "minimal_run.py --heads 12 --hidden 768",
        {"attntrace run --heads 12 --hidden 768": RUN_TARGET},
    )


#: The shape backend at a size no other backend reaches, against the floor that draws its tables.
SHAPE_RUN = ["--backend", "shape", "--preset", "llama-3-70b", "--seq", "131072"]
SHAPE_TARGET = 1.2


def piece_json(piece: Any, width: int) -> object:
    """A piece of the table view as minimal_tables.py reads it: a table's title, columns and
    cells as plain text, anything else as the lines it prints."""
    from rich.console import Console
    from rich.table import Table

    if not isinstance(piece, Table):
        console = Console(width=width, record=True, file=io.StringIO())
        console.print(piece)
        return console.export_text().rstrip("\n")
    columns = [
        {"header": str(c.header), "justify": c.justify, "no_wrap": c.no_wrap} for c in piece.columns
    ]
    cells = [[getattr(cell, "plain", str(cell)) for cell in c.cells] for c in piece.columns]
    return {
        "title": str(piece.title or ""),
        "box": "SIMPLE_HEAD" if piece.box else None,  # a rule under the header, as RULE_BOX
        "show_edge": piece.show_edge,
        "show_header": piece.show_header,
        "padding": list(piece.padding),
        "pad_edge": piece.pad_edge,
        "title_justify": piece.title_justify,
        "columns": columns,
        "rows": [list(row) for row in zip(*cells, strict=True)],
    }


def shape_tables(path: Path, width: int = 80) -> None:
    """Write the pieces ``attntrace run`` prints for SHAPE_RUN (made in process, not timed)."""
    from attntrace import trace_attention
    from attntrace.config.presets import resolve_config
    from attntrace.render.table import trace_pieces

    cfg = resolve_config(preset="llama-3-70b", seq=int(SHAPE_RUN[-1]))
    pieces = trace_pieces(trace_attention(cfg, "shape"), width)
    path.write_text(json.dumps([piece_json(p, width) for p in pieces]), encoding="utf-8")


def shape_run(rep: Report, repeat: int) -> None:
    """``attntrace run --backend shape`` at llama-3-70b / 128k tokens against a script that only
    imports numpy, Typer and Rich and draws the same tables (issue 40: Rich's drawing, about
    0.1 s, is in both; what is left is attntrace's own work)."""
    with tempfile.TemporaryDirectory() as folder:
        tables = Path(folder) / "tables.json"
        shape_tables(tables)
        floor = "minimal_tables.py (the same tables, drawn by Rich)"
        run = f"attntrace run {' '.join(SHAPE_RUN)}"
        runs = processes(
            {
                floor: [sys.executable, str(MINIMAL_TABLES), str(tables)],
                run: [*attntrace_command(), "run", *SHAPE_RUN],
            },
            repeat,
        )
    process_ratios(rep, "shape backend", runs, floor, {run: SHAPE_TARGET})


TORCH_SCRIPT = """
import torch
import torch.nn.functional as F
B, S, H, h = {sizes!r}
d = H // h
gen = torch.Generator().manual_seed(0)
x = torch.randn(B, S, H, generator=gen)
w = {{c: torch.randn(H, H, generator=gen) * H ** -0.5 for c in "qkvo"}}
b = {{c: torch.randn(H, generator=gen) * 0.1 for c in "qkvo"}}
q, k, v = (F.linear(x, w[c], b[c]).view(B, S, h, d).transpose(1, 2) for c in "qkv")
ctx = F.scaled_dot_product_attention(q, k, v)
out = F.linear(ctx.transpose(1, 2).reshape(B, S, H), w["o"], b["o"])
print(*(tuple(t.shape) for t in (x, q, ctx, out)))
"""


def cli_compute(rep: Report, sizes: tuple[int, int, int, int], repeat: int) -> None:
    """``attntrace run`` as typed, no tuning flags, against the same work as a hand-written
    torch script (F.linear + SDPA, printing the shapes); both fresh processes, imports included."""
    B, S, H, h = sizes
    run = [
        *attntrace_command(),
        "run",
        "--batch",
        str(B),
        "--seq",
        str(S),
        "--hidden",
        str(H),
        "--heads",
        str(h),
    ]
    name = f"attntrace run --batch {B} --seq {S} --hidden {H} --heads {h}"
    torch_name = "python torch script: F.linear + SDPA, same sizes"
    rep.say(f"\ncommand line, (B, S, H, h) = {sizes}: fresh processes, imports included")
    runs = processes(
        {
            torch_name: [sys.executable, "-c", TORCH_SCRIPT.format(sizes=sizes)],
            name: run,
            f"{name} --algorithm flash": [*run, "--algorithm", "flash"],
        },
        repeat,
    )
    process_ratios(
        rep, "command line", runs, torch_name, {name: 1.2, f"{name} --algorithm flash": 1.3}
    )


#: The torch script's work in process: its own seeded inputs, F.linear + SDPA, shapes printed.
SAME_WORK = "torch script in process: seeded inputs, F.linear + SDPA, shapes printed"
RUN_IN_PROCESS = "attntrace run, no tuning flags (in process)"


def compute_fns(
    sizes: tuple[int, int, int, int], mask: str = "none", names: tuple[str, ...] | None = None
) -> dict[str, Callable[[], object]]:
    """torch F.linear + SDPA (the baseline) and attntrace through its defaults, on the same
    arrays."""
    import torch
    import torch.nn.functional as F  # noqa: N812  (the name in the torch docs)

    from attntrace import AttentionConfig, trace_attention
    from attntrace.tools.reference import reference_mask

    B, S, H, h = sizes
    lengths = (max(1, S // 2),) * B if mask == "key padding" else None
    window = max(1, S // 4) if mask == "window" else None
    cfg = AttentionConfig(
        batch=B,
        seq=S,
        hidden=H,
        heads=h,
        causal=mask == "causal",
        key_lengths=lengths,
        window=window,
    )
    flash = AttentionConfig(**{**cfg.__dict__, "algorithm": "flash"})
    params = trace_attention(AttentionConfig(batch=1, seq=1, hidden=H, heads=h), "shape").parameters
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(B, S, H, generator=gen)
    w = {
        p.name: torch.randn(p.shape, generator=gen) * (H**-0.5 if p.name.startswith("w") else 0.1)
        for p in params
    }
    keep, is_causal = reference_mask(
        cfg, None
    )  # None, (B, 1, 1, N) or (S, N): what a torch user passes
    d = H // h

    def sdpa() -> object:
        q, k, v = (
            F.linear(x, w[f"w_{c}"], w[f"b_{c}"]).view(B, S, h, d).transpose(1, 2) for c in "qkv"
        )
        ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=keep, is_causal=is_causal)
        return F.linear(ctx.transpose(1, 2).reshape(B, S, H), w["w_o"], w["b_o"])

    arrays = {"x": x.numpy(), **{name: t.numpy() for name, t in w.items()}}
    floor = numpy_floor(arrays, sizes, cfg.score_scale) if mask == "none" else None
    fns: dict[str, Callable[[], object]] = {
        "torch F.linear + SDPA": sdpa,
        "trace_attention(cfg) numpy eager": lambda: trace_attention(cfg, tensors=arrays),
        "trace_attention(cfg) numpy flash": lambda: trace_attention(flash, tensors=arrays),
        "numpy eager, keep_values=False": lambda: trace_attention(
            cfg, keep_values=False, tensors=arrays
        ),
        "numpy flash, keep_values=False": lambda: trace_attention(
            flash, keep_values=False, tensors=arrays
        ),
        "trace_attention(cfg, 'torch') eager": lambda: trace_attention(
            cfg, "torch", tensors=arrays
        ),
        RUN_IN_PROCESS: lambda: cli_in_process(sizes, mask),
        **({NUMPY_FLOOR: floor} if floor else {}),
    }
    return {n: f for n, f in fns.items() if names is None or n in names}


#: The same chain as numpy eager with ``keep_values=False``, written by hand: what numpy and its
#: BLAS can do on this machine, with none of attntrace's steps, checks or bookkeeping.
NUMPY_FLOOR = "numpy floor: the same chain by hand, nothing kept"


@functools.cache
def floor_pool(threads: int) -> ThreadPoolExecutor:
    """The floor's own pool of ``threads`` workers (not attntrace's), made once per size."""
    from concurrent.futures import ThreadPoolExecutor

    return ThreadPoolExecutor(threads, thread_name_prefix="floor")


def numpy_floor(
    arrays: dict[str, np.ndarray], sizes: tuple[int, int, int, int], factor: float
) -> Callable[[], np.ndarray]:
    """numpy's floor for eager attention without a mask, in attntrace's own design (which it
    matches bit for bit): projections in row blocks on a pool of one thread per core, then for
    each (head, 256 query rows) ``s = q @ k_t``, ``s *= scale``, ``exp(s)`` (every score is in
    range for these inputs), the row sums, ``(exp @ v) / sums``; one BLAS thread per block."""
    import threading

    import numpy as np
    from threadpoolctl import threadpool_limits

    B, S, H, h = sizes
    d, n, rows = H // h, len(os.sched_getaffinity(0)), 256
    workers = floor_pool(n)

    def linear(a: np.ndarray, c: str) -> np.ndarray:  # (B·S, H) @ (H, H) + (H,)
        out = np.empty((a.shape[0], H), np.float32)
        cuts = [a.shape[0] * i // n for i in range(n + 1)]

        def part(i: int) -> None:
            r = slice(cuts[i], cuts[i + 1])
            np.matmul(a[r], arrays[f"w_{c}"].T, out=out[r])
            out[r] += arrays[f"b_{c}"]

        list(workers.map(part, range(n)))
        return out

    def run() -> np.ndarray:
        x = arrays["x"].reshape(B * S, H)
        with threadpool_limits(1):
            q, k, v = (linear(x, c).reshape(B, S, h, d).transpose(0, 2, 1, 3) for c in "qkv")
            heads = [(b, i) for b in range(B) for i in range(h)]
            k_t = np.empty((B, h, d, S), np.float32)  # (B, h, d, S), as attntrace copies it

            def turn(at: tuple[int, int]) -> None:  # one head: its rows gathered, transposed
                np.copyto(k_t[at], np.ascontiguousarray(k[at]).T)

            list(workers.map(turn, heads))
            context = np.empty((B, S, h, d), np.float32).transpose(0, 2, 1, 3)  # (B, h, S, d)
            blocks = iter([(b, i, r) for b, i in heads for r in range(0, S, rows)])
            lock = threading.Lock()

            def drain(_: int) -> None:
                s = np.empty((rows, S), np.float32)
                while True:
                    with lock:
                        block = next(blocks, None)
                    if block is None:
                        return
                    b, i, r = block
                    e = s[: min(rows, S - r)]  # (Br, S)
                    np.matmul(q[b, i, r : r + rows], k_t[b, i], out=e)
                    e *= factor
                    np.exp(e, out=e)
                    sums = np.einsum("...i->...", e)[:, None]  # (Br, 1)
                    c = context[b, i, r : r + rows]  # (Br, d)
                    np.matmul(e, v[b, i], out=c)
                    c /= sums

            list(workers.map(drain, range(n)))
            return linear(context.transpose(0, 2, 1, 3).reshape(B * S, H), "o")

    return run


@functools.cache
def attntrace_click_command() -> Any:
    """attntrace's Click command, built once as a process builds it once at start-up (~4 ms
    here): like the imports, it belongs to the start-up rows, not to a run's work."""
    import typer.main

    from attntrace.cli import app

    return typer.main.get_command(app)


def cli_in_process(sizes: tuple[int, int, int, int], mask: str) -> None:
    """``attntrace run`` with the sizes and no tuning flags, its table to /dev/null: the
    command's own work (its seeded weights, the trace, the table) without the imports and
    the building of the command (start-up, measured by the start-up rows)."""
    B, S, H, h = sizes
    flags = {
        "none": [],
        "causal": ["--causal"],
        "key padding": ["--key-lengths", ",".join([str(max(1, S // 2))] * B)],
        "window": ["--window", str(max(1, S // 4))],
    }[mask]
    args = [
        "run",
        "--batch",
        str(B),
        "--seq",
        str(S),
        "--hidden",
        str(H),
        "--heads",
        str(h),
        *flags,
    ]
    with open(os.devnull, "w") as devnull, contextlib.redirect_stdout(devnull):
        attntrace_click_command().main(args, prog_name="attntrace", standalone_mode=False)


COMPUTE_TARGETS = {
    RUN_IN_PROCESS: 1.2,
    "trace_attention(cfg) numpy eager": 1.2,
    "trace_attention(cfg) numpy flash": 1.3,
    "trace_attention(cfg, 'torch') eager": 1.1,
}


def torch_script_in_process(sizes: tuple[int, int, int, int]) -> Callable[[], object]:
    """:data:`TORCH_SCRIPT` (the command line's baseline) run in this process, its output to
    /dev/null: the same kind of work as ``attntrace run`` (inputs made, attention, output
    written), without the imports."""
    import torch  # noqa: F401  (imported once here, as attntrace's modules are)

    code = compile(TORCH_SCRIPT.format(sizes=sizes), "<torch script>", "exec")

    def run() -> None:
        with open(os.devnull, "w") as devnull, contextlib.redirect_stdout(devnull):
            exec(code, {})  # our own script, defined above

    return run


def compute(rep: Report, sizes: tuple[int, int, int, int], repeat: int) -> None:
    fns = compute_fns(sizes)
    fns[SAME_WORK] = torch_script_in_process(sizes)
    for fn in fns.values():  # warm up: thread pools, allocator, lazy imports
        fn()
    rep.say(f"\ncompute (B, S, H, h) = {sizes}, float32, projections included, same arrays")
    times = interleaved(fns, repeat)
    same = times.pop(SAME_WORK)
    ratios(rep, "compute", times, "torch F.linear + SDPA", COMPUTE_TARGETS)
    if NUMPY_FLOOR in times:
        rep.say("attntrace's numpy eager against numpy's floor (what attntrace itself costs)")
        names = (NUMPY_FLOOR, "numpy eager, keep_values=False", "trace_attention(cfg) numpy eager")
        ratios(
            rep, "compute, numpy floor", {n: times[n] for n in names if n in times}, NUMPY_FLOOR, {}
        )
    rep.say("the run against the same kind of work in torch (inputs made, output printed)")
    ratios(
        rep,
        "compute, same work",
        {SAME_WORK: same, RUN_IN_PROCESS: times[RUN_IN_PROCESS]},
        SAME_WORK,
        {RUN_IN_PROCESS: 1.2},
    )


@contextlib.contextmanager
def busy(seconds: float) -> Iterator[None]:
    """One CPU-bound process beside us, ending by itself after ``seconds`` at most."""
    spin = f"import time\nend = time.monotonic() + {seconds}\nwhile time.monotonic() < end: pass"
    proc = subprocess.Popen([sys.executable, "-c", spin])
    try:
        time.sleep(0.2)  # let it start spinning
        yield
    finally:
        proc.terminate()
        proc.wait()


def contended(rep: Report, sizes: tuple[int, int, int, int], repeat: int) -> None:
    names = ("numpy eager, keep_values=False", "numpy flash, keep_values=False")
    fns = compute_fns(sizes, names=names)
    for fn in fns.values():
        fn()
    quiet = interleaved(fns, repeat)
    with busy(120):
        loaded = interleaved(fns, repeat)
    slow = {n: statistics.median(loaded[n]) / statistics.median(quiet[n]) for n in names}
    rep.say("\ncontended: the same calls with one CPU-bound process beside them")
    for n in names:
        rep.say(
            f"  {n:<52} alone {statistics.median(quiet[n]) * 1e3:8.1f} ms  busy "
            f"{statistics.median(loaded[n]) * 1e3:8.1f} ms  slowdown {slow[n]:5.2f}x"
        )
    ratio = slow[names[1]] / slow[names[0]]
    verdict = "ok" if ratio <= 1.3 else "MISSED"
    rep.say(f"  flash slowdown / eager slowdown: {ratio:.2f}  (target <= 1.3) {verdict}")
    rep.row(
        "contended",
        "flash slowdown / eager slowdown, one busy process beside",
        f"eager {slow[names[0]]:.2f}× slower",
        f"flash {slow[names[1]]:.2f}× slower: **{ratio:.2f}**",
        f"≤ 1.3 {verdict}",
    )


PROBE = """
import gc, sys
sys.path.insert(0, {bench!r})
import bench
fn = bench.compute_fns({sizes!r}, {mask!r}, ({name!r},))[{name!r}]
fn()
gc.collect()
def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1])
before = status("VmRSS:")
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # reset the peak (VmHWM) to the current RSS
fn()
print(status("VmHWM:") - before)
"""


# glibc keeps freed blocks of up to 32 MiB in the heap once a block that size was freed: with a
# fixed mmap threshold every large array goes back to the system when freed, so the warm-up call
# leaves nothing behind that the measured call could reuse unseen.
PROBE_ENV = {**ENV, "MALLOC_MMAP_THRESHOLD_": "131072", "MALLOC_TRIM_THRESHOLD_": "131072"}


def memory(rep: Report, sizes: tuple[int, int, int, int], quick: bool = False) -> None:
    """Peak RSS growth of one call (after a warm-up call) in a fresh process, per mask."""
    rep.say(f"\npeak extra memory of one call, (B, S, H, h) = {sizes}, fresh process each")
    names: tuple[str, ...] = (
        "torch F.linear + SDPA",
        "numpy eager, keep_values=False",
        "numpy flash, keep_values=False",
        "trace_attention(cfg) numpy flash",
    )
    names, masks = ((names[0], names[2]), ("causal",)) if quick else (names, MASKS)
    for mask in masks:
        mib = {}
        for name in names:
            code = PROBE.format(bench=str(REPO / "benchmarks"), sizes=sizes, mask=mask, name=name)
            out = subprocess.run(
                [sys.executable, "-c", code],
                env=PROBE_ENV,
                capture_output=True,
                text=True,
                check=True,
            )
            mib[name] = max(int(out.stdout.split()[-1]), 0) / 1024
        base = mib[names[0]]
        for name in names[1:]:
            target = 1.5 if "flash" in name else None
            if base <= 0:  # nothing measurable: say so rather than print inf or nan
                ratio_text, verdict = "no baseline peak", "" if target is None else "not measured"
            else:
                ratio = mib[name] / base
                ratio_text = f"{ratio:.2f}×"
                verdict = "" if target is None else "ok" if ratio <= target else "MISSED"
            peaks = f"{size(mib[name]):>10}  SDPA {size(base):>10}"
            rep.say(f"  mask {mask:<12} {name:<40} {peaks}  {ratio_text:>8}  {verdict}")
            rep.row(
                f"memory, mask {mask}",
                name,
                f"SDPA: {size(base)}",
                f"{size(mib[name])}: **{ratio_text}**",
                f"≤ {target}× {verdict}" if target else "—",
            )


def size(mib: float) -> str:
    """MiB with enough digits that a small peak never reads 0.0."""
    return (
        f"{mib:.1f} MiB"
        if mib >= 10
        else f"{mib:.2f} MiB"
        if mib >= 0.1
        else f"{mib * 1024:.0f} KiB"
    )


def markdown_page(rep: Report, argv: list[str]) -> str:
    head, table = (
        [r for r in rep.rows if not r.startswith("|")],
        [r for r in rep.rows if r.startswith("|")],
    )
    doc = Path(__file__).with_name("benchmarks_notes.md")
    return "\n".join(
        [
            "# Benchmarks",
            "",
            "Generated by `python benchmarks/bench.py --markdown > docs/benchmarks.md`"
            + (f" (`{' '.join(argv)}`)" if argv else "")
            + "; every figure is a ratio against a baseline",
            "measured in the same run (interleaved runs, medians).",
            "",
            *head,
            "| section | candidate | baseline | result | target |",
            "|---|---|---|---|---|",
            *table,
            "",
            doc.read_text() if doc.exists() else "",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument(
        "--quick", action="store_true", help="small sizes, one repeat: a smoke test"
    )
    parser.add_argument("--only", default="startup,shape,cli,compute,contended,memory")
    parser.add_argument(
        "--markdown", action="store_true", help="print docs/benchmarks.md (progress on stderr)"
    )
    args = parser.parse_args()
    sizes, repeat = (QUICK, 1) if args.quick else (FULL, args.repeat)
    rep = Report(args.markdown)
    machine(rep)
    # fresh processes are cheap and their times scatter on a shared machine: 15 runs at least
    parts = {
        "startup": lambda: startup(rep, repeat if args.quick else max(repeat, STARTUP_RUNS)),
        "shape": lambda: shape_run(rep, repeat if args.quick else max(repeat, STARTUP_RUNS)),
        "cli": lambda: cli_compute(rep, sizes, repeat),
        "compute": lambda: compute(rep, sizes, repeat),
        "contended": lambda: contended(rep, sizes, repeat),
        "memory": lambda: memory(rep, sizes, args.quick),
    }
    for part in args.only.split(","):
        parts[part]()
    end = f"Load average at the end: {', '.join(f'{x:.2f}' for x in os.getloadavg())}."
    rep.say(end)
    if args.markdown:
        print(markdown_page(rep, sys.argv[1:]).replace("\n\n| section", f"\n{end}\n\n| section", 1))


if __name__ == "__main__":
    main()
