"""The shape backend's time and memory do not grow with S or with the layer count: every variant
at S = 2³¹ − 1, and configs of 2³¹ − 1 layers, in a child process whose time (of the command,
after the interpreter starts) and peak RSS (VmHWM, else ru_maxrss, which may keep the forking
parent's mark) are measured. The bounds are the issue's: < 1 s of CPU time (the work, not the
wall clock, which a busy machine stretches) and < 80 MiB; the runs take 0.1-0.6 s and 22-35 MiB."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from paths import SRC

pytestmark = pytest.mark.slow  # real processes or seconds per test

BIG = str(2**31 - 1)

#: A child that runs one command line through the real entry point and reports its figures.
CHILD = """
import io, json, resource, sys, time
from attntrace.cli import main
args = json.loads(sys.argv[1])
sys.argv = ["attntrace", *args]
sys.stdout = io.StringIO()
start = time.process_time()  # CPU time: the work done, whatever else the machine runs
try:
    main()
except SystemExit as exc:
    code = exc.code
else:
    code = 0
took = time.process_time() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
try:  # ru_maxrss may keep the forking parent's high-water mark; VmHWM is this image's own
    with open("/proc/self/status") as status:
        hwm = [line for line in status if line.startswith("VmHWM:")]
    peak = int(hwm[0].split()[1]) * 1024 if hwm else peak
except OSError:
    pass
sys.__stdout__.write(json.dumps({"code": code, "seconds": took, "peak": peak}))
"""

VARIANTS: list[tuple[str, ...]] = [
    (),
    ("--algorithm", "flash", "--causal", "--window", "4096"),
    ("--algorithm", "flash", "--block-size", "1", "--causal"),
    ("--causal", "--window", "4096"),
    ("--rope", "--rope-scaling", "llama3", "--qk-norm", "head"),
    ("--relative-bias", "32,128", "--algorithm", "flash"),
    ("--softcap", "50", "--algorithm", "flash", "--causal", "--window", "4096"),
    ("--kv-seq", BIG, "--algorithm", "flash"),
    ("--batch", "2", "--key-lengths", f"3,{BIG}", "--algorithm", "flash", "--causal"),
    ("--preset", "gemma-2-9b", "--algorithm", "flash", "--layers", BIG),
    ("--preset", "llama-3-8b", "--layers", BIG, "-f", "json"),
]


def _measure(*args: str) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(list(args))],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(SRC), "COLUMNS": "100", "NO_COLOR": "1", "PATH": "/usr/bin:/bin"},
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    figures: dict[str, float] = json.loads(done.stdout)
    return figures


def _assert_bounded(figures: dict[str, float]) -> None:
    assert figures["code"] == 0, figures
    assert figures["seconds"] < 1.0, figures
    assert figures["peak"] < 80 * 2**20, figures


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: " ".join(v) or "eager")
def test_the_shape_backend_at_s_2_31_is_bounded(variant: tuple[str, ...]) -> None:
    _assert_bounded(_measure("run", "--backend", "shape", "--seq", BIG, *variant))


@pytest.mark.parametrize(
    "config",
    [
        {"model_type": "gemma2", "sliding_window": 4096, "query_pre_attn_scalar": 256},
        {"model_type": "gemma3_text", "sliding_window": 1024, "sliding_window_pattern": 6},
        {"model_type": "qwen2", "use_sliding_window": True, "sliding_window": 4096},
        {"model_type": "llama"},
    ],
    ids=lambda c: c["model_type"],
)
def test_a_config_of_2_31_layers_is_bounded(tmp_path: Path, config: dict[str, object]) -> None:
    path = tmp_path / "config.json"
    sizes = {"hidden_size": 3584, "num_attention_heads": 16, "num_key_value_heads": 8}
    path.write_text(
        json.dumps({**sizes, "head_dim": 256, "num_hidden_layers": 2**31 - 1, **config})
    )
    for layer in ("0", str(2**31 - 2)):
        args = ("--hf-config", str(path), "--layer", layer, "--algorithm", "flash", "--causal")
        _assert_bounded(_measure("run", "--backend", "shape", "--seq", BIG, *args))
