"""``attntrace trace``: scripts, FILE.py:NAME targets, exit codes, formats, lazy torch."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from attntrace.cli import app
from attntrace.errors import install_hint
from paths import DATA, REPO

pytestmark = pytest.mark.slow  # real processes or seconds per test

EXAMPLES = REPO / "examples"
runner = CliRunner()


def _run(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, ["trace", *args], env={"COLUMNS": "160"})
    return result.exit_code, result.stdout


def test_numpy_notes_print_the_chain_of_the_notes() -> None:
    code, out = _run(str(EXAMPLES / "seed_001_numpy.py"))
    assert code == 0
    chain = "(3, 768) → (3, 8, 96) → (8, 3, 96) → (8, 3, 3) → (8, 3, 96) → (3, 8, 96) → (3, 768)"
    assert chain in out
    assert "S=3  H=768  h=8  d=96" in out


def test_torch_notes_print_their_chain_and_roles() -> None:
    pytest.importorskip("torch")
    code, out = _run(str(EXAMPLES / "seed_000_torch.py"), "--format", "json")
    assert code == 0
    doc = json.loads(out)
    roles = {s["role"]: s for s in doc["steps"] if s["role"]}
    assert roles["q_proj"]["name"] == "Q"
    assert roles["q_proj"]["source"] == "linear_q(x)"
    assert roles["scores"]["shape"] == [2, 2, 3, 3]
    assert roles["scores"]["axes"] == ["B", "h", "S", "S"]
    assert roles["output"]["shape"] == [2, 3, 4]


def test_broken_script_exits_1_with_the_rule(tmp_path: Path) -> None:
    code, out = _run(str(DATA / "broken" / "n01_k_not_transposed.py"))
    assert code == 1
    assert "shape error at n01_k_not_transposed.py:7" in out
    assert "K is not transposed" in out
    assert "ValueError" in out
    assert "attntrace/capture" not in out  # no attntrace traceback


def test_other_errors_show_the_users_frames_only(tmp_path: Path) -> None:
    script = tmp_path / "oops.py"
    script.write_text("import numpy as np\nx = np.ones((2, 3))\ndef f():\n    return 1 / 0\nf()\n")
    code, out = _run(str(script))
    assert code == 1
    assert "ZeroDivisionError" in out
    assert "oops.py" in out
    assert "line 4" in out
    assert "runpy" not in out


def test_script_arguments_and_folder_on_path(tmp_path: Path) -> None:
    (tmp_path / "helper.py").write_text("N = 5\n")
    script = tmp_path / "main.py"
    script.write_text(
        "import sys\nimport numpy as np\nimport helper\n"
        "x = np.zeros((int(sys.argv[1]), helper.N))\ny = x.T\n"
    )
    code, out = _run(str(script), "--", "4")
    assert code == 0
    assert "(4, 5)" in out
    assert "(5, 4)" in out


def test_function_target_with_numpy(tmp_path: Path) -> None:
    module = tmp_path / "attn.py"
    module.write_text(
        "import numpy as np\n\ndef attend(x):\n    q = x.reshape(3, 4, 8).transpose(1, 0, 2)\n"
        "    scores = q @ q.swapaxes(-1, -2)\n    return scores\n"
    )
    code, out = _run(f"{module}:attend", "--hidden", "32", "--axes", "h=4", "--format", "csv")
    assert code == 0
    assert "scores" in out
    assert "4x3x3" in out
    assert "h S S" in out


def test_module_class_target_with_init(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    module = tmp_path / "mha.py"
    module.write_text(
        "import torch\n\nclass Attn(torch.nn.Module):\n"
        "    def __init__(self, embed_dim, num_heads):\n        super().__init__()\n"
        "        self.embed_dim, self.h = embed_dim, num_heads\n"
        "        self.qkv = torch.nn.Linear(embed_dim, 3 * embed_dim)\n"
        "    def forward(self, x):\n        B, S, H = x.shape\n"
        "        q, k, v = self.qkv(x).chunk(3, dim=-1)\n"
        "        q = q.view(B, S, self.h, H // self.h).transpose(1, 2)\n"
        "        return q\n"
    )
    code, out = _run(
        f"{module}:Attn",
        "--init",
        "embed_dim=64",
        "--init",
        "num_heads=4",
        "--batch",
        "2",
        "--format",
        "json",
    )
    assert code == 0, out
    doc = json.loads(out)
    assert doc["steps"][0]["shape"] == [2, 3, 64]
    assert doc["steps"][0]["axes"] == ["B", "S", "H"]
    assert doc["steps"][-1]["shape"] == [2, 4, 3, 16]
    assert doc["steps"][-1]["axes"] == ["B", "h", "S", "d"]


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["no_such_file.py"], "no such file"),
        (["{examples}/seed_001_numpy.py:nothing"], "has no 'nothing'"),
        (["{examples}/seed_001_numpy.py:values_length"], "not callable"),
        (["{examples}/seed_001_numpy.py", "--init", "a=1"], "--init needs"),
        (["pkg.mod:fn", "--init", "=3"], "cannot read --init"),
        (["{examples}/seed_001_numpy.py", "--axes", "h:12"], "cannot read --axes"),
        pytest.param(  # a transformers class is built from its config (issue 30)
            ["transformers:LlamaAttention", "--init", "no_such=1"],
            "--init no_such: neither an argument of the class nor a field of LlamaConfig",
            marks=pytest.mark.skipif(
                importlib.util.find_spec("transformers") is None, reason="needs transformers"
            ),
        ),
        (
            ["{examples}/seed_001_numpy.py", "--axes", "x=4"],
            "x is not an axis letter; the letters are B",
        ),
        (["{examples}/seed_001_numpy.py", "--axes", "D=96"], "(did you mean d: head size?)"),
        (
            ["{examples}/seed_001_numpy.py", "--axes", "h=0"],
            "a size is a whole number of at least 1",
        ),
    ],
)
def test_bad_usage_is_one_line_exit_2(args: list[str], words: str) -> None:
    args = [a.replace("{examples}", str(EXAMPLES)) for a in args]
    result = subprocess.run(
        [sys.executable, "-m", "attntrace", "trace", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        cwd=REPO,
    )
    assert result.returncode == 2, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert words in result.stderr


def test_numpy_trace_never_imports_torch() -> None:
    probe = (
        "import sys\nfrom attntrace.cli import main\nsys.argv = ['attntrace', 'trace', "
        f"{str(EXAMPLES / 'seed_001_numpy.py')!r}]\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\nprint('TORCH', 'torch' in sys.modules)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False
    )
    assert "TORCH False" in result.stdout


def test_check_trace_by_role_and_golden(tmp_path: Path) -> None:
    notes = str(EXAMPLES / "seed_001_numpy.py")
    code, out = _run(notes, "--format", "json")
    assert code == 0
    golden = tmp_path / "golden.json"
    golden.write_text(out)
    result = runner.invoke(
        app,
        [
            "check",
            "--trace",
            notes,
            "--golden",
            str(golden),
            "--expect",
            "scores_3=h,S,S",  # scores_2 is the note's scores = soft_max(scores)
            "--expect",
            "weights=S,S",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "ok: 32 passed, 0 failed" in result.output
    result = runner.invoke(app, ["check", "--trace", notes, "--expect", "out_4=S,h,d"])
    assert result.exit_code == 1
    assert "(3, 768) (S, H)" in result.output


def test_markdown_and_csv_documents() -> None:
    code, out = _run(str(EXAMPLES / "seed_001_numpy.py"), "--format", "markdown")
    assert code == 0
    assert (
        "| 14 | Query_3 |  | seed_001_numpy.py:45 | `np.reshape(Query, [values_length, "
        "num_attention_heads, attention_head_size])` | (3, 768) | (3, 8, 96) | (S, h, d) "
        "| float64 |" in out
    )


MODS = """import torch
import torch.nn.functional as F


class Attn(torch.nn.Module):
    def __init__(self, embed_dim=64, num_heads=4):
        super().__init__()
        self.embed_dim, self.h = embed_dim, num_heads
        self.q_proj = torch.nn.Linear(embed_dim, embed_dim)

    def forward(self, x):
        *lead, S, H = x.shape
        q = self.q_proj(x).view(*lead, S, self.h, H // self.h).transpose(-3, -2)
        out = F.scaled_dot_product_attention(q, q, q)
        return out.transpose(-3, -2).reshape(*lead, S, H)


model = Attn(32, 4)


def fn(x):
    return torch.softmax(x @ x.transpose(-2, -1), dim=-1)
"""


def test_module_instance_and_torch_function_targets(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    (tmp_path / "mods.py").write_text(MODS)
    code, out = _run(f"{tmp_path / 'mods.py'}:model", "--format", "json")
    assert code == 0
    steps = json.loads(out)["steps"]
    assert steps[0]["shape"] == [3, 32]  # H from the module's embed_dim, (S, H) without --batch
    inside = [s["role"] for s in steps if s["location"] == "mods.py:14"]  # the SDPA call, opened
    assert inside == ["k_t", "scores", "scaled", "weights", "context"]
    assert steps[-1]["axes"] == ["S", "H"]
    assert steps[-1]["role"] == "merged"
    code, out = _run(f"{tmp_path / 'mods.py'}:fn", "--hidden", "8", "--format", "json")
    assert code == 0
    assert [s["dtype"] for s in json.loads(out)["steps"]][-1] == "float32"  # a torch tensor
    result = runner.invoke(app, ["trace", f"{tmp_path / 'mods.py'}:Attn", "--init", "heads=3"])
    assert result.exit_code == 2


def test_opaque_keeps_the_kernel_one_row_and_json_lists_the_opened_call(tmp_path: Path) -> None:
    """Without --opaque the SDPA call of mods.py:14 is opened (its steps, a ``kernels`` entry
    whose total is the sum of its steps); with it, one row and no kernels (the schema's /2)."""
    pytest.importorskip("torch")
    (tmp_path / "mods.py").write_text(MODS)
    code, out = _run(f"{tmp_path / 'mods.py'}:model", "--format", "json")
    assert code == 0
    (kernel,) = json.loads(out)["kernels"]
    assert kernel["location"] == "mods.py:14"
    assert kernel["source"] == "F.scaled_dot_product_attention(q, q, q)"
    assert kernel["total_flops"] == sum(s["flops"] for s in kernel["steps"]) > 0
    assert kernel["replay"]["agrees"] is True
    code, out = _run(f"{tmp_path / 'mods.py'}:model", "--format", "json", "--opaque")
    assert code == 0
    doc = json.loads(out)
    assert doc["kernels"] == []
    rows = [(s["op"], s["role"]) for s in doc["steps"] if s["location"] == "mods.py:14"]
    assert rows == [("scaled_dot_product_attention", "context")]


@pytest.mark.parametrize(("status", "code"), [(0, 0), (None, 0), (7, 1), ("bye", 1)])
@pytest.mark.parametrize("as_function", [False, True])
def test_sys_exit_in_the_traced_code_shows_what_ran(
    tmp_path: Path,
    status: object,
    code: int,
    as_function: bool,
) -> None:
    user = tmp_path / "ends.py"
    user.write_text(
        "import sys\nimport numpy as np\n\n"
        "def attention(x):\n"
        "    scores = x @ x.T\n"
        f"    sys.exit({status!r})\n\n"
        + ("" if as_function else "attention(np.ones((3, 4), np.float32))\n")
    )
    result = runner.invoke(
        app,
        [
            "trace",
            f"{user}:attention" if as_function else str(user),
            "--array",
            "numpy",
            "--hidden",
            "4",
        ],
        env={"COLUMNS": "160"},
    )
    assert result.exit_code == code, result.output
    assert "scores" in result.stdout  # the ops before sys.exit are shown
    assert ("called sys.exit" in result.stderr) == (code == 1)


def test_sys_exit_on_import_is_one_error_line(tmp_path: Path) -> None:
    user = tmp_path / "bye.py"
    user.write_text("raise SystemExit(4)\n")
    result = runner.invoke(app, ["trace", f"{user}:attention"])
    assert result.exit_code == 2
    assert (
        result.stderr.strip()
        == f"attntrace: error: importing {user} failed: SystemExit: 4 at bye.py:1"
    )


def test_an_edited_file_is_read_again_by_the_next_trace(tmp_path: Path) -> None:
    """Names come from the file as it is at each trace (a long-lived process, e.g. a notebook)."""
    user = tmp_path / "edited.py"
    user.write_text("def attention(x):\n    first = x @ x.T\n    return first\n")
    result = runner.invoke(
        app, ["trace", f"{user}:attention", "--array", "numpy", "--hidden", "4", "--format", "json"]
    )
    assert '"name": "first"' in result.stdout
    user.write_text("def attention(x):\n    second = x @ x.T\n    return second\n\n\n")
    result = runner.invoke(
        app, ["trace", f"{user}:attention", "--array", "numpy", "--hidden", "4", "--format", "json"]
    )
    assert '"name": "second"' in result.stdout, result.stdout


def test_a_recursion_in_the_users_code_is_one_frame_and_a_count(tmp_path: Path) -> None:
    (tmp_path / "recurses.py").write_text("def attention(x):\n    return attention(x)\n")
    code, out = _run(f"{tmp_path / 'recurses.py'}:attention", "--array", "numpy")
    assert code == 1
    assert out.count('recurses.py", line 2, in attention') == 1
    assert re.search(r"\[Previous line repeated \d{3} more times\]", out)
    assert out.rstrip().endswith("RecursionError: maximum recursion depth exceeded")


def test_a_reshape_that_mixes_axes_is_a_warning_under_the_table(tmp_path: Path) -> None:
    (tmp_path / "silent.py").write_text(
        "import numpy as np\nx = np.random.rand(2, 5, 64)\nq = x.reshape(2, 4, 5, 16)\n"
        "k = x.reshape(2, 5, 4, 16).transpose(0, 2, 1, 3)\n"
    )
    code, out = _run(str(tmp_path / "silent.py"))
    assert code == 0  # the code ran: a warning, not a failure
    warning = out[out.index("warning: ") :].replace("\n", " ")
    assert (
        "silent.py:3: x.reshape(2, 4, 5, 16) reshapes (S, h, d) (5, 4, 16) to (4, 5, 16)" in warning
    )


def test_a_size_the_code_contradicts_is_a_warning_and_brackets_print_as_written() -> None:
    """``--axes h=12`` on code that makes 8 heads: the code's size names the axis, a warning
    says where; the warning's source, with its ``[values_length, …]``, prints as written
    (plain Text, not markup: no ``\\[``)."""
    code, out = _run(str(EXAMPLES / "seed_001_numpy.py"), "--axes", "h=12")
    assert code == 0
    assert "S=3  H=768  h=8  d=96" in out  # the header: the code's sizes
    warning = " ".join(out[out.index("warning: ") :].split())
    assert warning.startswith(
        "warning: --axes h=12, but h is 8 at seed_001_numpy.py:45: "
        "np.reshape(Query, [values_length, num_attention_heads, "
    )
    assert "\\[" not in out
    assert "warning" not in _run(str(EXAMPLES / "seed_001_numpy.py"), "--axes", "h=8")[1]


def test_the_api_checks_axis_letters_too() -> None:
    import attntrace
    from attntrace.errors import ConfigError

    with (
        pytest.raises(ConfigError, match="axes=k=4: k is not an axis letter"),
        attntrace.capture(axes={"k": 4}),
    ):
        pass


def test_an_allocation_the_machine_cannot_give_is_told_with_its_size(tmp_path: Path) -> None:
    """numpy's MemoryError and torch's allocator error: "out of memory", the size asked for
    and the sizes to lower, not a shape error (the allocation is refused at once: 298 GiB and
    1.16 TiB are far beyond this machine, so nothing is filled)."""
    (tmp_path / "big.py").write_text(
        "import numpy as np\nx = np.random.randn(200000, 8)\ns = x @ x.T\n"
    )
    code, out = _run(str(tmp_path / "big.py"))
    assert code == 1
    text = " ".join(out.split())
    assert "out of memory at big.py:3 x @ x.T" in text
    assert "rule: matmul asked for 298 GiB, more than this machine can give" in text
    code, out = _run(str(tmp_path / "big.py"), "--format", "json")
    failure = json.loads(out)["failure"]
    assert failure["shape_error"] is False
    assert failure["fix"].startswith("use smaller sizes (--seq, --batch")
    pytest.importorskip("torch")
    (tmp_path / "big_torch.py").write_text(
        "import torch\nq = torch.ones(2, 4, 200000, 4)\ns = q @ q.transpose(-2, -1)\n"
    )
    code, out = _run(str(tmp_path / "big_torch.py"))
    assert code == 1
    assert "matmul asked for 1.16 TiB, more than this machine can give" in " ".join(out.split())


def test_a_torch_script_without_torch_is_one_line_naming_the_install() -> None:
    """Where torch is not installed (blocked here), a script that imports it is refused in one
    line with exit 2, before it runs: not an internal error."""
    script = DATA / "broken" / "t01_k_not_transposed.py"
    code = (
        "import sys; sys.modules['torch'] = None; "
        f"sys.argv = ['attntrace', 'trace', {str(script)!r}]; "
        "from attntrace.cli import main; main()"
    )
    env = {"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin"}
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False
    )
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        "attntrace: error: t01_k_not_transposed.py imports torch, which is not installed; "
        + install_hint("torch")
    ]
