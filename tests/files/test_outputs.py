"""Outputs never replace an input or a non-regular file (issue 29): --save, --out, --plot,
--plot-flow and --output refuse, in one line with exit code 2 and before any work, a path that
is one of the command's inputs (by device and inode: another spelling, a hard link), a FIFO, a
device, a socket, a directory or a symbolic link, and leave it exactly as it was."""

from __future__ import annotations

import os
import socket
import stat
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from attntrace.errors import InputFileError
from attntrace.files.output import refuse_inputs, refuse_replacing, write_output
from hostile import invoke


def _regular(tmp: Path) -> Path:
    (tmp / "kept.txt").write_text("kept\n")
    return tmp / "kept.txt"


def _link_to_file(tmp: Path) -> Path:
    (tmp / "out").symlink_to(_regular(tmp))
    return tmp / "out"


def _dangling_link(tmp: Path) -> Path:
    (tmp / "out").symlink_to(tmp / "nowhere.json")
    return tmp / "out"


def _link_to_dir(tmp: Path) -> Path:
    (tmp / "d").mkdir()
    (tmp / "out").symlink_to(tmp / "d")
    return tmp / "out"


def _directory(tmp: Path) -> Path:
    (tmp / "out").mkdir()
    (tmp / "out" / "inside.txt").write_text("inside\n")
    return tmp / "out"


def _fifo(tmp: Path) -> Path:
    os.mkfifo(tmp / "out")
    return tmp / "out"


def _socket(tmp: Path) -> Path:
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(tmp / "out"))
    sock.close()
    return tmp / "out"


def _device(_tmp: Path) -> Path:
    return Path("/dev/null")


#: Paths no output may replace, each with the word the refusal uses.
NOT_REGULAR: dict[str, tuple[Callable[[Path], Path], str]] = {
    "link-to-file": (_link_to_file, "a symbolic link"),
    "dangling-link": (_dangling_link, "a symbolic link"),
    "link-to-dir": (_link_to_dir, "a symbolic link"),
    "directory": (_directory, "directory"),
    "fifo": (_fifo, "a FIFO"),
    "socket": (_socket, "a socket"),
    "device": (_device, "a device"),
}

#: Every writing option of every command, as a command line taking the output path last.
WRITERS: dict[str, tuple[str, ...]] = {
    "run --save": ("run", "--save"),
    "run --plot": ("run", "--plot"),
    "run --plot-flow": ("run", "--plot-flow"),
    "run --output": ("run", "-f", "json", "--output"),
    "report --out": ("report", "--out"),
    "check --output": ("check", "-f", "junit", "-e", "scores=h,S,S", "-o"),
    "verify --output": ("verify", "-f", "json", "--output"),
    "presets --output": ("presets", "-f", "json", "--output"),
    "sweep --output": ("sweep", "--seq", "4,8", "--output"),
}


def _state(path: Path) -> tuple[object, ...]:
    """What must not change: the entry itself (not followed), its link target, its bytes."""
    st = os.lstat(path)
    target = os.readlink(path) if stat.S_ISLNK(st.st_mode) else None
    content = path.read_bytes() if stat.S_ISREG(st.st_mode) else None
    listing = sorted(os.listdir(path)) if stat.S_ISDIR(st.st_mode) else None
    return (stat.S_IFMT(st.st_mode), st.st_ino, target, content, listing, st.st_mtime_ns)


def _refused(args: tuple[str, ...], *words: str) -> None:
    result = invoke(*args)
    result.assert_contained()
    assert result.code == 2, result.err
    assert result.out == ""
    for word in words:
        assert word in result.err, result.err


def _no_temporary(folder: Path) -> None:
    assert [p.name for p in folder.iterdir() if p.name.endswith(".tmp")] == []


@pytest.mark.slow
@pytest.mark.parametrize("kind", NOT_REGULAR)
@pytest.mark.parametrize("writer", WRITERS)
def test_no_output_replaces_a_file_that_is_not_regular(
    writer: str, kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    make, word = NOT_REGULAR[kind]
    path = make(tmp_path)
    before = _state(path)
    result = invoke(*WRITERS[writer], str(path))
    result.assert_contained()
    assert result.code == 2, result.err
    assert result.out == ""
    # click's own check of a directory for dir_okay=False options says it first, in one line
    assert word in result.err or "is a directory" in result.err, result.err
    assert _state(path) == before
    if kind == "link-to-file":
        assert (tmp_path / "kept.txt").read_text() == "kept\n"
    if kind == "dangling-link":
        assert not (tmp_path / "nowhere.json").exists()
    _no_temporary(tmp_path)


def _weights(tmp: Path) -> Path:
    rng = np.random.default_rng(0)
    names = ("w_q", "w_k", "w_v", "w_o")
    np.savez(tmp / "w.npz", **{n: rng.standard_normal((8, 8)).astype("f4") for n in names})
    return tmp / "w.npz"


def _npy(tmp: Path, name: str, array: np.ndarray) -> Path:
    np.save(tmp / name, array)
    return tmp / name


def _spellings(tmp: Path, path: Path) -> list[str]:
    """The same file named differently: relative, absolute, through ./ and .., a hard link."""
    (tmp / "sub").mkdir(exist_ok=True)
    os.link(path, tmp / f"hard-{path.name}")
    return [path.name, str(path), f"./{path.name}", f"sub/../{path.name}", f"hard-{path.name}"]


def _inputs(tmp: Path) -> dict[str, tuple[Path, Callable[[str], tuple[str, ...]], str]]:
    """Commands reading a file, each with a command line writing to a given path."""
    weights = _weights(tmp)
    x = _npy(tmp, "x.npy", np.zeros((3, 8), "f4"))
    mask = _npy(tmp, "m.npy", np.ones((3, 3), bool))
    config = tmp / "config.json"
    config.write_text('{"hidden_size": 8, "num_attention_heads": 2}\n')
    golden = tmp / "golden.json"
    golden.write_text('{"schema": "attntrace.trace/1"}\n')
    spec = tmp / "spec.toml"
    spec.write_text("[config.a]\nseq = 4\n")
    folder = tmp / "model"
    folder.mkdir()
    (folder / "config.json").write_text("{}\n")
    script = tmp / "script.py"
    script.write_text("import numpy as np\nx = np.zeros((2, 3)) @ np.zeros((3, 4))\n")
    fn = tmp / "fn.py"
    fn.write_text("def f(x, params):\n    return x\n")
    return {
        "run --weights / --save": (
            weights,
            lambda o: ("run", "--weights", "w.npz", "--save", o),
            "--weights",
        ),
        "run --input / --output": (
            x,
            lambda o: ("run", "--input", "x.npy", "-f", "json", "-o", o),
            "--input",
        ),
        "run --mask / --plot-flow": (
            mask,
            lambda o: ("run", "--mask", "m.npy", "--plot-flow", o),
            "--mask",
        ),
        "run --hf-config / --plot": (
            config,
            lambda o: ("run", "--hf-config", "config.json", "--plot", o),
            "--hf-config",
        ),
        "report --weights / --out": (
            weights,
            lambda o: ("report", "--weights", "w.npz", "--out", o),
            "--weights",
        ),
        "check --golden / --output": (
            golden,
            lambda o: ("check", "--golden", "golden.json", "-o", o),
            "--golden",
        ),
        "check --spec / --output": (
            spec,
            lambda o: ("check", "--spec", "spec.toml", "-o", o),
            "--spec",
        ),
        "run --model / --save": (
            folder / "config.json",
            lambda o: ("run", "--model", "model", "--save", o),
            "--model",
        ),
        "trace SCRIPT / --output": (
            script,
            lambda o: ("trace", "script.py", "-f", "json", "-o", o),
            "TARGET",
        ),
        "diff FILE:NAME / --output": (
            fn,
            lambda o: ("diff", "fn.py:f", "-f", "json", "-o", o),
            "TARGET",
        ),
    }


INPUT_CASES = [
    "run --weights / --save",
    "run --input / --output",
    "run --mask / --plot-flow",
    "run --hf-config / --plot",
    "report --weights / --out",
    "check --golden / --output",
    "check --spec / --output",
    "run --model / --save",
    "trace SCRIPT / --output",
    "diff FILE:NAME / --output",
]


@pytest.mark.slow
@pytest.mark.parametrize("spelling", range(5))
@pytest.mark.parametrize("case", INPUT_CASES)
def test_no_output_replaces_an_input(
    case: str, spelling: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    path, command, option = _inputs(tmp_path)[case]
    name = (
        _spellings(tmp_path, path)[spelling]
        if path.parent == tmp_path
        else [f"model/{path.name}", str(path), f"./model/{path.name}", f"sub/../model/{path.name}"][
            spelling % 4
        ]
    )
    (tmp_path / "sub").mkdir(exist_ok=True)
    before = path.read_bytes(), os.stat(path).st_mtime_ns
    _refused(command(name), f"is the {option} input")
    assert (path.read_bytes(), os.stat(path).st_mtime_ns) == before
    _no_temporary(tmp_path)


def test_two_outputs_of_one_command_cannot_share_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    _refused(("run", "--save", "a.npz", "-f", "json", "-o", "./a.npz"), "names the same file")
    assert list(tmp_path.iterdir()) == []


def test_an_output_beside_its_inputs_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    _weights(tmp_path)
    result = invoke(
        "run", "--weights", "w.npz", "--heads", "2", "--save", "t.npz", "-f", "json", "-o", "t.json"
    )
    assert result.code == 0, result.err
    assert result.out == ""
    assert (tmp_path / "t.json").read_text().startswith("{")
    with np.load(tmp_path / "t.npz", allow_pickle=False) as npz:
        assert "output" in npz


def test_an_existing_regular_output_is_replaced_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "g.json").write_text("old\n")
    assert invoke("run", "-f", "json", "-o", "g.json").code == 0
    assert (tmp_path / "g.json").read_text().startswith('{\n  "schema": "attntrace.trace/1"')


@pytest.mark.parametrize("kind", NOT_REGULAR)
def test_write_output_itself_refuses(kind: str, tmp_path: Path) -> None:
    make, word = NOT_REGULAR[kind]
    path = make(tmp_path)
    before = _state(path)
    with pytest.raises(InputFileError, match=word):
        write_output(path, b"new")
    with pytest.raises(InputFileError, match=word):
        refuse_replacing(path, "--out")
    assert _state(path) == before
    _no_temporary(tmp_path)


def test_refuse_inputs_compares_files_not_names(tmp_path: Path) -> None:
    data = tmp_path / "data.bin"
    data.write_bytes(b"x")
    os.link(data, tmp_path / "other-name.bin")
    with pytest.raises(InputFileError, match="is the --input input"):
        refuse_inputs({"--save": tmp_path / "other-name.bin"}, {"--input": [data]})
    refuse_inputs({"--save": tmp_path / "new.bin"}, {"--input": [data]})  # nothing to replace


def test_output_dash_is_stdout_and_writes_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``-o -`` prints to stdout, as for every tool that takes a file name; no file ``-``."""
    monkeypatch.chdir(tmp_path)
    outcome = invoke("run", "--seq", "2", "--hidden", "8", "--heads", "2", "-f", "csv", "-o", "-")
    assert outcome.code == 0, outcome.err
    assert outcome.out.splitlines()[0].startswith("index,name,op,shape")
    assert list(tmp_path.iterdir()) == []
