"""``attntrace trace --input`` and ``--dtype``: files read by the guarded reader of ``run`` and
``diff`` (one line, exit 2, nothing unpickled), the module converted to the dtype."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from attntrace.cli import app

pytestmark = pytest.mark.slow  # real processes or seconds per test

runner = CliRunner()

VIT = """\
import torch.nn as nn

class Attention(nn.Module):
    def __init__(self, dim=64, num_heads=4):
        super().__init__()
        self.num_heads, self.head_dim = num_heads, dim // num_heads
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        attn = (q @ k.transpose(-2, -1) * self.head_dim ** -0.5).softmax(dim=-1)
        return self.proj((attn @ v).transpose(1, 2).reshape(B, N, C))

inst = Attention()
"""

NUMPY_FN = """\
import numpy as np

def attend(x):
    return x @ x.T
"""


class _Evil:
    """Pickles to a call of os.mkdir: unpickling the file would make the folder."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return os.mkdir, (str(self.marker),)


def _invoke(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args), env={"COLUMNS": "160"})
    return result.exit_code, result.stdout, result.stderr


def _files(tmp: Path) -> dict[str, Path]:
    """One file of each kind the QA run fed to trace --input."""
    marker = tmp / "unpickled"
    files = {
        "empty.npy": b"",
        "evil.pt": pickle.dumps(_Evil(marker)),
        "evil.npy": pickle.dumps(_Evil(marker)),
        "garbage.npy": b"not numpy at all",
    }
    for name, data in files.items():
        (tmp / name).write_bytes(data)
    np.savez(tmp / "w.npz", q_proj=np.zeros((4, 4), np.float32))
    np.save(tmp / "int.npy", np.arange(2 * 5 * 64).reshape(2, 5, 64))
    np.savez(tmp / "int.npz", x=np.arange(2 * 5 * 64).reshape(2, 5, 64))
    np.save(tmp / "obj.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    np.save(tmp / "trunc.npy", np.zeros((2, 5, 64), np.float32))
    (tmp / "trunc.npy").write_bytes((tmp / "trunc.npy").read_bytes()[:300])
    return {p.name: p for p in tmp.iterdir()}


KINDS = {  # file: what the one line says
    "empty.npy": "is not a .npy file",
    "evil.pt": "--input takes a .npy file",
    "evil.npy": "is a raw pickle",
    "garbage.npy": "is not a .npy file",
    "w.npz": "has no array named 'x'",
    "int.npy": "x is int64, not floating point",
    "int.npz": "x is int64, not floating point",
    "obj.npy": "never unpickles",
    "trunc.npy": "truncated",
}


@pytest.mark.parametrize("name", sorted(KINDS))
def test_a_bad_input_file_is_one_line_exit_2_as_run_says_it(tmp_path: Path, name: str) -> None:
    pytest.importorskip("torch")
    files = _files(tmp_path)
    (tmp_path / "vit.py").write_text(VIT)
    code, out, err = _invoke(
        "trace", f"{tmp_path / 'vit.py'}:Attention", "--input", str(files[name])
    )
    assert code == 2, err
    assert out == ""  # nothing half-written
    assert err.count("\n") == 1
    assert err.startswith("attntrace: error: ")
    assert KINDS[name] in err
    assert "internal error" not in err
    assert not (tmp_path / "unpickled").exists()
    if name != "int.npz":  # run's error for the same file, word for word
        run_code, _, run_err = _invoke("run", "--input", str(files[name]))
        assert run_code == 2
        assert run_err == err


def test_a_good_input_file_is_traced_with_its_shape(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    (tmp_path / "vit.py").write_text(VIT)
    np.save(tmp_path / "x.npy", np.ones((2, 7, 64), np.float64))
    code, out, err = _invoke(
        "trace",
        f"{tmp_path / 'vit.py'}:Attention",
        "--input",
        str(tmp_path / "x.npy"),
        "-f",
        "csv",
    )
    assert code == 0, err
    assert out.splitlines()[1].startswith("0,x,input,2x7x64,B S H,float32,")


@pytest.mark.parametrize("dtype", ["float64", "float16", "bfloat16"])
@pytest.mark.parametrize("name", ["Attention", "inst"])
def test_dtype_converts_the_module_class_or_instance(tmp_path: Path, dtype: str, name: str) -> None:
    pytest.importorskip("torch")
    (tmp_path / "vit.py").write_text(VIT)
    code, out, err = _invoke(
        "trace",
        f"{tmp_path / 'vit.py'}:{name}",
        "--batch",
        "2",
        "--seq",
        "5",
        "--dtype",
        dtype,
        "-f",
        "csv",
    )
    assert code == 0, err
    rows = [line.split(",") for line in out.splitlines()[1:]]
    assert len(rows) > 10
    assert {row[5] for row in rows} == {dtype}  # every step, the weights' too, in the dtype


def test_dtype_leaves_the_users_module_instance_as_it_is(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from attntrace.capturing.runner import Inputs, parse_target, run_target

    (tmp_path / "vit.py").write_text(VIT)
    outcome = run_target(
        parse_target(f"{tmp_path / 'vit.py'}:inst"),
        {},
        Inputs(2, 5, dtype="float64"),
        keep_values=False,
    )
    assert outcome.error is None
    assert {s.dtype for s in outcome.capture.steps} == {"float64"}
    import sys

    module = next(m for n, m in sys.modules.items() if n.endswith("_target_vit"))
    assert module.inst.qkv.weight.dtype == torch.float32


def test_bfloat16_on_a_numpy_function_is_refused_naming_array_torch(tmp_path: Path) -> None:
    (tmp_path / "fn.py").write_text(NUMPY_FN)
    code, out, err = _invoke("trace", f"{tmp_path / 'fn.py'}:attend", "--dtype", "bfloat16")
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1
    assert err.startswith("attntrace: error: ")
    assert "--array torch" in err


def test_float16_on_a_numpy_function_is_kept(tmp_path: Path) -> None:
    (tmp_path / "fn.py").write_text(NUMPY_FN)
    code, out, _ = _invoke(
        "trace", f"{tmp_path / 'fn.py'}:attend", "--dtype", "float16", "-f", "csv"
    )
    assert code == 0
    assert {line.split(",")[5] for line in out.splitlines()[1:]} == {"float16"}


def test_dtype_help_names_what_trace_converts() -> None:
    result = runner.invoke(app, ["trace", "--help"], env={"COLUMNS": "200"})
    assert "--backend torch" not in result.stdout
    assert "--array torch" in result.stdout


def test_a_dtype_mismatch_in_a_function_is_not_called_a_shape_error(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    (tmp_path / "fn.py").write_text(
        "import torch\nlin = torch.nn.Linear(64, 64)\n\ndef f(x):\n    return lin(x)\n"
    )
    code, out, _ = _invoke(
        "trace", f"{tmp_path / 'fn.py'}:f", "--batch", "2", "--seq", "5", "--dtype", "float64"
    )
    assert code == 1
    assert "same dtype" in out
    assert "shape error" not in out
    assert "rule:" not in out


MHA = """\
import torch.nn as nn

inst = nn.MultiheadAttention(64, 4, batch_first=True)

class Wrap(nn.Module):
    def __init__(self, embed_dim=64, num_heads=4):
        super().__init__()
        self.mha = nn.MultiheadAttention(embed_dim, num_heads, batch_first=True)

    def forward(self, x):
        return self.mha(x, x, x)[0]
"""

PARAMS_FN = """\
import numpy as np

def attend(x, params):
    q = x @ params["w_q"].T + params["b_q"]
    k = x @ params["w_k"].T + params["b_k"]
    return q @ k.T
"""


def test_multihead_attention_instance_is_called_as_self_attention(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    (tmp_path / "mha.py").write_text(MHA)
    code, out, err = _invoke(
        "trace", f"{tmp_path / 'mha.py'}:inst", "--batch", "2", "--seq", "5", "-f", "json"
    )
    assert code == 0, err
    doc = json.loads(out)
    assert doc["failure"] is None
    assert doc["steps"][0]["shape"] == [2, 5, 64]
    assert doc["config"]["axis_sizes"]["H"] == 64


def test_a_wrapper_of_multihead_attention_gets_h_as_diff_reads_it(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from attntrace.capturing.runner import _width
    from attntrace.diffing.layer import as_layer

    (tmp_path / "mha.py").write_text(MHA)
    code, out, err = _invoke(
        "trace", f"{tmp_path / 'mha.py'}:Wrap", "--batch", "2", "--seq", "5", "-f", "json"
    )
    assert code == 0, err
    assert json.loads(out)["steps"][0]["shape"] == [2, 5, 64]
    wrap = torch.nn.Sequential(torch.nn.MultiheadAttention(32, 4))  # no width attribute
    layer = as_layer(wrap)
    assert layer.weights is not None
    assert _width(wrap) == layer.weights.params["w_q"].shape[1] == 32


@pytest.mark.parametrize("array", ["numpy", "torch"])
def test_a_function_of_x_and_params_gets_seeded_weights_as_diff_gives(
    tmp_path: Path, array: str
) -> None:
    if array == "torch":
        pytest.importorskip("torch")
    (tmp_path / "fn.py").write_text(PARAMS_FN)
    code, out, err = _invoke(
        "trace",
        f"{tmp_path / 'fn.py'}:attend",
        "--seq",
        "5",
        "--hidden",
        "16",
        "--array",
        array,
        "-f",
        "json",
    )
    assert code == 0, err
    steps = json.loads(out)["steps"]
    assert steps[-1]["shape"] == [5, 5]
    assert steps[-1]["role"] == "scores"
