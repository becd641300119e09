"""Shared pieces of the hostile-input tests: an in-process runner of the real entry point and
a corpus of hostile files, generated on demand (nothing hostile is stored in the repository)."""

from __future__ import annotations

import importlib.util
import json
import os
import pickle
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from typer.testing import CliRunner

from attntrace.cli import main


@dataclass(frozen=True)
class Outcome:
    """What one command line did: its exit code and what it printed."""

    code: int
    out: str
    err: str

    def assert_contained(self) -> None:
        """The promise: exit 0, 1, 2 or 4 (diff cannot tell), no traceback, one stderr line for
        2 (in English or, under --lang zh, in Chinese), no escape code."""
        context = f"exit {self.code}\nstdout: {self.out[-2000:]}\nstderr: {self.err[-2000:]}"
        assert self.code in (0, 1, 2, 4), context
        assert "Traceback" not in self.err + self.out, context
        assert "\x1b" not in self.out + self.err, context
        if self.code == 2:
            assert len(self.err.splitlines()) == 1, context
            assert self.err.startswith(("attntrace: error: ", "attntrace：错误：")), context


def invoke(*args: str) -> Outcome:
    """Run ``attntrace ARGS`` in this process through :func:`attntrace.cli.main`."""
    runner = CliRunner()
    argv = sys.argv
    code: object = 0
    with runner.isolation(env={"COLUMNS": "100", "NO_COLOR": "1"}) as (out, err, _):
        sys.argv = ["attntrace", *args]
        try:
            main()
        except SystemExit as exc:
            code = exc.code
        finally:
            sys.argv = argv
            sys.stdout.flush()
            sys.stderr.flush()
        stdout, stderr = out.getvalue(), err.getvalue()
    return Outcome(
        code if isinstance(code, int) else 1,
        stdout.decode("utf-8", "replace"),
        stderr.decode("utf-8", "replace"),
    )


ESC = "\x1b]8;;https://evil.example\x07[link=https://evil.example]x[/link]\x1b[2J\r"


def _npz_bomb(path: Path, declared: int) -> None:
    """A zip whose one .npy entry declares and inflates to ``declared`` bytes of zeros."""
    header = np.lib.format.header_data_from_array_1_0(np.zeros(1, dtype=np.float32))
    header["shape"] = (declared // 4,)
    with (
        zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as z,
        z.open("x.npy", "w", force_zip64=True) as f,
    ):
        np.lib.format.write_array_header_1_0(f, header)
        chunk = bytes(1 << 20)
        for _ in range(declared // len(chunk)):
            f.write(chunk)


def _npz_declaring(path: Path, shape: tuple[int, ...]) -> None:
    """A small zip whose .npy entry's header declares ``shape`` (float32) over 1 MiB of data."""
    header = np.lib.format.header_data_from_array_1_0(np.zeros(1, dtype=np.float32))
    header["shape"] = shape
    with (
        zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as z,
        z.open("x.npy", "w") as f,
    ):
        np.lib.format.write_array_header_1_0(f, header)
        f.write(bytes(1 << 20))


def _sparse(path: Path, head: bytes, size: int) -> None:
    with path.open("wb") as f:
        f.write(head)
        f.truncate(size)


def _npy_declaring(path: Path, shape: tuple[int, ...]) -> None:
    header = np.lib.format.header_data_from_array_1_0(np.zeros(1, dtype=np.float32))
    header["shape"] = shape
    with path.open("wb") as f:
        np.lib.format.write_array_header_1_0(f, header)
        f.write(bytes(64))


def _safetensors(path: Path, header: object, body: bytes = b"") -> None:
    raw = json.dumps(header).encode()
    path.write_bytes(len(raw).to_bytes(8, "little") + raw + body)


class _Payload:
    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, ("touch /tmp/attntrace-pwned",))


#: The files :func:`hostile_files` makes under its root (the fuzz test draws paths from these).
HOSTILE_NAMES: tuple[str, ...] = (
    "bad-config.npz",
    "bad-meta.safetensors",
    "big-ints.json",
    "bomb.npz",
    "declares-huge.npy",
    "declares-huge.npz",
    "declares-tib.npy",
    "declares-tib.safetensors",
    "deep.json",
    "deep.pt",
    "deep.toml",
    "dict-bomb.pt",
    "empty.npz",
    "esc-keys.npz",
    "esc-keys.safetensors",
    "esc.json",
    "esc.toml",
    "fifo.json",
    "fifo.npy",
    "huge-numbers.json",
    "latin1.json",
    "missing.npy",
    "nan-config.npz",
    "nan-input.npy",
    "nan.json",
    "objects.npy",
    "payload.npy",
    "payload.pt",
    "sparse.json",
    "sparse.npy",
    "sparse.safetensors",
    "truncated.npz",
    "wrong-types.json",
    "zero-size.npy",
)


#: The files of the corpus that torch.save writes: made only where torch is installed.
TORCH_FILES = ("dict-bomb.pt", "deep.pt")


def hostile_files(root: Path) -> dict[str, Path]:
    """Every kind of hostile file, by a short name (created once under ``root``)."""
    root.mkdir(parents=True, exist_ok=True)
    files: dict[str, Path] = {}

    def add(name: str) -> Path:
        files[name] = root / name
        return files[name]

    os.mkfifo(add("fifo.npy"))
    os.mkfifo(add("fifo.json"))
    files["dev-zero"] = Path("/dev/zero")
    files["dev-null"] = Path("/dev/null")
    files["directory"] = root
    files["missing"] = root / "missing.npy"
    _npz_bomb(add("bomb.npz"), 256 << 20)  # honest: 256 MiB inflated from 256 KiB
    _npz_declaring(add("declares-huge.npz"), (1 << 40,))  # 4 TiB declared inside a small zip
    _npy_declaring(add("sparse.npy"), (1 << 28, 16))  # 16 GiB declared, and the file is that long
    os.truncate(files["sparse.npy"], (1 << 34) + 128)
    _npy_declaring(add("declares-tib.npy"), (1 << 20, 1 << 18))
    _npy_declaring(add("declares-huge.npy"), (2**62, 2**62))
    _sparse(add("sparse.json"), b"{", 1 << 34)
    _sparse(add("sparse.safetensors"), (2**40).to_bytes(8, "little"), 1 << 34)
    _safetensors(
        add("declares-tib.safetensors"),
        {"w_q": {"dtype": "F32", "shape": [1 << 20, 1 << 20], "data_offsets": [0, 1 << 42]}},
    )
    _safetensors(
        add("bad-meta.safetensors"),
        {
            "__metadata__": {"config": 7},
            "w": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]},
        },
    )
    _safetensors(
        add("esc-keys.safetensors"),
        {f"{ESC}w_q": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}},
        bytes(16),
    )
    np.savez(add("esc-keys.npz"), **{f"{ESC}w": np.eye(2, dtype=np.float32)})
    four = {f"w_{c}": np.eye(4, dtype=np.float32) for c in "qkvo"}
    np.savez(add("bad-config.npz"), **four, config=np.array('{"heads": "\\u001b[2J"}'))
    np.savez(add("nan-config.npz"), **four, config=np.array('{"heads": NaN, "x": 1e999}'))
    np.save(add("nan-input.npy"), np.array([[np.nan, 1.0, np.inf, -np.inf]] * 3, dtype=np.float32))
    np.save(add("zero-size.npy"), np.zeros((0, 4), dtype=np.float32))
    np.save(add("objects.npy"), np.array([{"a": 1}], dtype=object), allow_pickle=True)
    add("deep.json").write_text("[" * 100_000 + "]" * 100_000)
    add("deep.toml").write_text("a = " + "[" * 100_000 + "]" * 100_000)
    add("nan.json").write_text('{"hidden_size": NaN, "num_attention_heads": Infinity}')
    add("wrong-types.json").write_text(
        json.dumps(
            {
                "hidden_size": "768",
                "num_attention_heads": True,
                "attention_bias": "false",
                "rope_theta": True,
            }
        )
    )
    add("huge-numbers.json").write_text(
        '{"hidden_size": 1' + "0" * 5000 + ', "num_attention_heads": 1e999}'
    )
    add("big-ints.json").write_text(
        json.dumps({"hidden_size": 2**70, "num_attention_heads": 2**64 + 1})
    )
    add("esc.json").write_text(
        json.dumps({"schema": "attntrace.trace/1", "steps": [{"name": ESC, "shape": [1]}]})
    )
    add("esc.toml").write_text(
        f'[config.{json.dumps(ESC)}]\nseq = 3\nexpect = {{ {json.dumps(ESC)} = "1,2" }}\n'
    )
    add("latin1.json").write_bytes(b'{"caf\xe9": 1}')
    add("payload.pt").write_bytes(pickle.dumps({"w": _Payload()}))
    np.save(add("payload.npy"), np.array([_Payload()], dtype=object), allow_pickle=True)
    if importlib.util.find_spec("torch") is not None:  # only torch.save writes them
        _torch_files(*(add(name) for name in TORCH_FILES))
    add("empty.npz").write_bytes(b"")
    add("truncated.npz").write_bytes(b"PK\x03\x04" + bytes(40))
    return files


def _torch_files(bomb: Path, deep: Path) -> None:
    """Small PyTorch files: dicts that share their children (2**60 paths when walked naively)
    and dicts nested 50 deep."""
    import torch

    shared: dict[str, object] = {"w": torch.zeros(1)}
    for _ in range(60):
        shared = {"a": shared, "b": shared}
    torch.save(shared, bomb)
    nested: dict[str, object] = {"w": torch.zeros(1)}
    for _ in range(50):
        nested = {"x": nested}
    torch.save(nested, deep)
