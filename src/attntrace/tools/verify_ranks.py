"""``attntrace verify --tp T --cp C --nproc N``: the ranks of a layout run as N local processes
with torch.distributed (gloo), compared with the ranks simulated in one process and with the
single device.

Every step of every rank is compared with the same step of the simulated rank (worst rank
shown); the output gathered from the processes is compared with the single-device trace. The
processes are started on a free local port with a timeout, and stopped (killed, if they
overrun); their files live in a temporary folder removed at the end. Sizes and the process
count are checked before any process starts.
"""

from __future__ import annotations

import os
import pickle
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attntrace.config.attention_config import AttentionConfig
from attntrace.errors import AttntraceError, ConfigError
from attntrace.tools.verify import Comparison, VerifyReport, compare, tolerance

if TYPE_CHECKING:
    import numpy as np

#: Seconds the processes may take together before they are killed.
DEFAULT_TIMEOUT_S = 120.0
#: The most processes verify starts (local ranks on one machine).
MAX_NPROC = 16


def check_nproc(config: AttentionConfig, nproc: int) -> None:
    """``nproc`` must be the layout's T·C ranks (and few enough for one machine).

    >>> from attntrace.config.parallel_layout import ParallelLayout
    >>> cfg = AttentionConfig(seq=8, hidden=16, heads=4, parallel=ParallelLayout(tp=2, cp=2))
    >>> try:
    ...     check_nproc(cfg, 2)
    ... except ConfigError as e:
    ...     print(e)
    --nproc 2 does not match --tp 2 × --cp 2 = 4 ranks; use --nproc 4
    """
    layout = config.parallel
    if layout is None:
        raise ConfigError("--nproc starts one process a rank; add --tp T and/or --cp C")
    if nproc != layout.ranks:
        raise ConfigError(
            f"--nproc {nproc} does not match --tp {layout.tp} × --cp {layout.cp} = "
            f"{layout.ranks} ranks; use --nproc {layout.ranks}"
        )
    if nproc > MAX_NPROC:
        raise ConfigError(f"--nproc {nproc}: at most {MAX_NPROC} local processes; lower --tp/--cp")


def verify_ranks(
    config: AttentionConfig, nproc: int, *, timeout: float = DEFAULT_TIMEOUT_S
) -> VerifyReport:
    """Run the ranks as ``nproc`` processes and compare them (see the module docstring)."""
    check_nproc(config, nproc)
    from attntrace.backends import get_backend
    from attntrace.sharding.simulate import check_memory

    check_memory(replace(config, parallel=None), None)  # the simulation it is compared with

    be = get_backend("torch")  # a one-line error when torch is missing, before any process
    be.check_dtype(config.dtype)
    with tempfile.TemporaryDirectory(prefix="attntrace-ranks-") as folder:
        out = Path(folder)
        _start_and_wait(config, nproc, out, timeout)
        got = [_load(out / f"rank-{r}.npz") for r in range(nproc)]
    return _report(config, be, got, nproc)


def verify_simulated(config: AttentionConfig) -> VerifyReport:
    """The ranks simulated in one process on torch: the gathered output against one device
    (no process started; ``verify --tp/--cp`` without ``--nproc``)."""
    from attntrace.backends import get_backend
    from attntrace.engine.attention import trace_attention
    from attntrace.engine.inputs import random_sources
    from attntrace.engine.rope import rope_sources
    from attntrace.sharding.simulate import check_memory, gathered_output, simulate

    check_memory(replace(config, parallel=None), None)
    be = get_backend("torch")
    be.check_dtype(config.dtype)
    tol = tolerance(config)
    single = replace(config, parallel=None)
    seeded = {**random_sources(single), **rope_sources(single)}
    runs = simulate(config, be, {name: be.tensor(s) for name, s in seeded.items()})
    one = trace_attention(single, be, keep_values={"output"})["output"].value
    layout = config.parallel
    assert layout is not None
    left = f"{layout.ranks} ranks simulated (torch)"
    c = compare("output", left, "one device", gathered_output(config, be, runs), one, tol)
    return VerifyReport(config, tol, (), (c,), ("add --nproc N to run the ranks as processes",))


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _start_and_wait(config: AttentionConfig, nproc: int, out: Path, timeout: float) -> None:
    """Start one process a rank; wait for all; kill them all past ``timeout``."""
    (out / "config.pkl").write_bytes(pickle.dumps(config))
    import attntrace

    root = str(Path(attntrace.__file__).resolve().parents[1])
    env = {
        **os.environ,
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
        "WORLD_SIZE": str(nproc),
        "ATTNTRACE_CONFIG": str(out / "config.pkl"),
        "ATTNTRACE_OUT": str(out),
        "PYTHONPATH": os.pathsep.join([root, *filter(None, [os.environ.get("PYTHONPATH")])]),
        "OMP_NUM_THREADS": "1",
    }
    procs = []
    for rank in range(nproc):
        log = (out / f"rank-{rank}.log").open("wb")
        cmd = [sys.executable, "-m", "attntrace.sharding.distributed"]
        procs.append(subprocess.Popen(cmd, env={**env, "RANK": str(rank)}, stdout=log, stderr=log))
        log.close()
    deadline = time.monotonic() + timeout
    try:
        for p in procs:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        raise AttntraceError(
            f"the {nproc} processes did not finish in {timeout:g} s; they were stopped "
            "(raise --timeout, or lower --seq)"
        ) from None
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for rank, p in enumerate(procs):
        if p.returncode:
            lines = (out / f"rank-{rank}.log").read_text(errors="replace").strip().splitlines()
            raise AttntraceError(
                f"rank {rank}'s process failed (exit {p.returncode}): "
                + (lines[-1] if lines else "no message")
            )


def _load(path: Path) -> dict[str, np.ndarray]:
    import numpy as np

    with np.load(path) as data:
        return {name: data[name] for name in data.files}


def _report(
    config: AttentionConfig, be: Any, got: list[dict[str, np.ndarray]], n: int
) -> VerifyReport:
    """Every step against the simulated ranks; the gathered output against one device."""
    from attntrace.engine.attention import trace_attention
    from attntrace.engine.inputs import random_sources
    from attntrace.engine.rope import rope_sources
    from attntrace.sharding.simulate import gather_outputs, simulate

    tol = tolerance(config)
    single = replace(config, parallel=None)
    seeded = {**random_sources(single), **rope_sources(single)}
    sources = {name: be.tensor(s) for name, s in seeded.items()}
    runs = simulate(config, be, sources, keep_all=True)
    left = f"torch.distributed ({n} processes)"
    worst: dict[str, Comparison] = {}  # each step's worst rank, in the order of the steps
    for r, run in enumerate(runs):
        for step in run.rec.finish():  # the steps this rank has (ring ranks differ)
            c = compare(step.name, left, "simulated", got[r].get(step.name), step.value, tol)
            held = worst.get(step.name)
            if held is None or (not c.ok, c.max_rel) > (not held.ok, held.max_rel):
                worst[step.name] = c
    steps = list(worst.values())
    gathered = gather_outputs(config, [g["__output__"] for g in got])
    one = trace_attention(single, be, keep_values={"output"})["output"].value
    reference = compare("output", left, "one device", gathered, one, tol)
    notes = (f"{n} ranks on torch.distributed (gloo), each step's worst rank shown",)
    return VerifyReport(config, tol, tuple(steps), (reference,), notes)
