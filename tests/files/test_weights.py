"""run --weights / --input: four naming schemes give the output of torch's own forward; a file
with a pickled payload is refused and its payload never runs; every broken file is exit 2."""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

import hostile
from attntrace import AttentionConfig, trace_attention
from attntrace.cli import app
from attntrace.files import load_weights

torch = pytest.importorskip("torch")
H, h, S = 8, 2, 3


def invoke(*args: object) -> Any:
    return CliRunner().invoke(app, [str(a) for a in args])


def saved_output(path: Path) -> np.ndarray:
    with np.load(path, allow_pickle=False) as npz:
        return npz["output"]


def write_x(tmp_path: Path, shape: tuple[int, ...] = (S, H)) -> tuple[Path, np.ndarray]:
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    return tmp_path / "x.npy", x


def mha_forward(mha: Any, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    with torch.no_grad():
        t = torch.from_numpy(x)
        out, weights = mha(t, t, t, need_weights=True, average_attn_weights=False)
    return out.numpy(), weights.numpy()


def test_multihead_attention_state_dict_gives_torch_forward(tmp_path: Path) -> None:
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(H, h, batch_first=True).eval()
    torch.nn.init.normal_(mha.in_proj_bias)  # non-zero biases, so a lost bias shows
    torch.save(mha.state_dict(), tmp_path / "mha.pt")
    x_file, x = write_x(tmp_path, (2, S, H))
    result = invoke(
        "run",
        "--weights",
        tmp_path / "mha.pt",
        "--heads",
        h,
        "--input",
        x_file,
        "--save",
        tmp_path / "o.npz",
    )
    assert result.exit_code == 0, result.output
    out, weights = mha_forward(mha, x)
    np.testing.assert_allclose(saved_output(tmp_path / "o.npz"), out, rtol=1e-5, atol=1e-6)
    with np.load(tmp_path / "o.npz", allow_pickle=False) as npz:
        np.testing.assert_allclose(npz["weights"], weights, rtol=1e-5, atol=1e-6)
        assert npz["x"].shape == (2, S, H)


#: A Llama-family layer's weights cannot say how positions and masks work: these tests say "none".
PLAIN = ("--no-rope", "--no-causal")


def llama_file(
    tmp_path: Path, layers: int = 2, metadata: dict[str, str] | None = None
) -> tuple[Path, list[Any]]:
    """A Llama-style safetensors checkpoint: q/k/v/o_proj without biases, several layers."""
    from safetensors.numpy import save_file

    torch.manual_seed(1)
    mhas, tensors = [], {}
    for i in range(layers):
        mha = torch.nn.MultiheadAttention(H, h, bias=False, batch_first=True).eval()
        w_q, w_k, w_v = mha.in_proj_weight.detach().numpy().reshape(3, H, H)
        for name, w in {
            "q_proj": w_q,
            "k_proj": w_k,
            "v_proj": w_v,
            "o_proj": mha.out_proj.weight.detach().numpy(),
        }.items():
            tensors[f"model.layers.{i}.self_attn.{name}.weight"] = np.ascontiguousarray(w)
        mhas.append(mha)
    tensors["model.embed_tokens.weight"] = np.zeros((10, H), np.float32)
    path = tmp_path / "llama.safetensors"
    save_file(tensors, str(path), metadata=metadata)
    return path, mhas


def test_llama_safetensors_layer_gives_torch_forward(tmp_path: Path) -> None:
    path, mhas = llama_file(tmp_path)
    x_file, x = write_x(tmp_path)
    result = invoke(
        "run",
        "--weights",
        path,
        "--layer-prefix",
        "model.layers.1.self_attn.",
        "--heads",
        h,
        "--input",
        x_file,
        "--save",
        tmp_path / "o.npz",
        *PLAIN,
    )
    assert result.exit_code == 0, result.output
    np.testing.assert_allclose(
        saved_output(tmp_path / "o.npz"), mha_forward(mhas[1], x)[0], rtol=1e-5, atol=1e-6
    )
    assert "x @ w_q.T " in result.stdout
    assert "b_q" not in result.stdout  # no bias in the file: no bias in the trace


@pytest.mark.parametrize(
    ("heads", "kv_heads", "head_dim", "hidden"),
    [(8, 2, 4, 32), (4, 1, 8, 32), (4, 2, 16, 32)],
    ids=["gqa", "mqa", "gemma-like-head-dim"],
)
def test_grouped_query_safetensors_gives_torch_sdpa(
    tmp_path: Path, heads: int, kv_heads: int, head_dim: int, hidden: int
) -> None:
    """A Llama/Mistral/Qwen-style layer with fewer k/v heads (and a decoupled head_dim): the
    sizes come from the weight shapes, and the output equals torch's own SDPA with enable_gqa."""
    from safetensors.numpy import save_file

    rng = np.random.default_rng(3)
    shapes = {
        "q_proj": (heads * head_dim, hidden),
        "k_proj": (kv_heads * head_dim, hidden),
        "v_proj": (kv_heads * head_dim, hidden),
        "o_proj": (hidden, heads * head_dim),
    }
    w = {
        name: (rng.standard_normal(shape) / np.sqrt(shape[1])).astype(np.float32)
        for name, shape in shapes.items()
    }
    save_file(
        {f"model.layers.0.self_attn.{n}.weight": a for n, a in w.items()},
        str(tmp_path / "gqa.safetensors"),
    )
    x_file, x = write_x(tmp_path, (2, 5, hidden))
    result = invoke(
        "run",
        "--weights",
        tmp_path / "gqa.safetensors",
        "--heads",
        heads,
        "--causal",
        "--no-rope",
        "--input",
        x_file,
        "--save",
        tmp_path / "o.npz",
    )
    assert result.exit_code == 0, result.output
    F = torch.nn.functional
    t = {n: torch.from_numpy(a) for n, a in w.items()}
    xt = torch.from_numpy(x)
    q, k, v = (F.linear(xt, t[f"{c}_proj"]).view(2, 5, -1, head_dim).transpose(1, 2) for c in "qkv")
    context = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    expected = F.linear(context.transpose(1, 2).reshape(2, 5, heads * head_dim), t["o_proj"])
    np.testing.assert_allclose(
        saved_output(tmp_path / "o.npz"), expected.numpy(), rtol=1e-5, atol=1e-5
    )
    with np.load(tmp_path / "o.npz", allow_pickle=False) as npz:
        assert npz["k"].shape == (2, kv_heads, 5, head_dim)
        assert "b_q" not in npz.files  # no biases in the file: none in the trace
    conflict = invoke(
        "run",
        "--weights",
        tmp_path / "gqa.safetensors",
        "--heads",
        heads,
        "--kv-heads",
        heads,
        *PLAIN,
    )
    assert conflict.exit_code == 2
    assert (
        f"--kv-heads {heads} conflicts with the weights (gqa.safetensors), which give"
        in conflict.stderr
    )


def test_layer_prefix_without_the_trailing_dot(tmp_path: Path) -> None:
    path, _ = llama_file(tmp_path)
    assert load_weights(path, "model.layers.0.self_attn").prefix == "model.layers.0.self_attn."


def test_several_layers_without_a_prefix_list_the_candidates(tmp_path: Path) -> None:
    path, _ = llama_file(tmp_path)
    result = invoke("run", "--weights", path, "--heads", h, *PLAIN)
    assert result.exit_code == 2
    assert "holds 2 attention layers; pick one with --layer-prefix" in result.stderr
    assert "'model.layers.0.self_attn.', 'model.layers.1.self_attn.'" in result.stderr
    result = invoke(
        "run", "--weights", path, "--heads", h, "--layer-prefix", "model.layers.7.", *PLAIN
    )
    assert result.exit_code == 2
    assert "no attention layer under --layer-prefix 'model.layers.7.'" in result.stderr


def test_heads_come_from_the_file_or_must_be_given(tmp_path: Path) -> None:
    path, _ = llama_file(tmp_path, layers=1)
    result = invoke("run", "--weights", path, *PLAIN)
    assert result.exit_code == 2
    assert "pass --heads" in result.stderr
    path, _ = llama_file(tmp_path, layers=1, metadata={"num_attention_heads": "4"})
    result = invoke("run", "--weights", path, *PLAIN)
    assert result.exit_code == 0, result.output
    assert "H=8  h=4  d=2" in result.stdout
    result = invoke("run", "--weights", path, "--heads", 2, *PLAIN)
    assert result.exit_code == 2
    assert "--heads 2 conflicts with the weights file" in result.stderr


def test_bert_names(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    ours = {
        f"{k}_{c}": rng.standard_normal((H, H) if k == "w" else (H,)) for c in "qkvo" for k in "wb"
    }
    module = {
        "q": "attention.self.query",
        "k": "attention.self.key",
        "v": "attention.self.value",
        "o": "attention.output.dense",
    }
    bert = {
        f"bert.encoder.layer.0.{module[n[2]]}.{'weight' if n[0] == 'w' else 'bias'}": v
        for n, v in ours.items()
    }
    np.savez(tmp_path / "bert.npz", **bert)
    loaded = load_weights(tmp_path / "bert.npz")
    assert (loaded.scheme, loaded.prefix, loaded.hidden) == ("BERT", "bert.encoder.layer.0.", H)
    for name, value in ours.items():
        np.testing.assert_array_equal(loaded.params[name], value)


def test_loaded_weights_replace_the_seeded_ones(tmp_path: Path) -> None:
    mha = torch.nn.MultiheadAttention(H, h)
    torch.save({"model": mha.state_dict()}, tmp_path / "nested.pth")  # nested dicts are flattened
    loaded = load_weights(tmp_path / "nested.pth")
    assert (loaded.scheme, loaded.prefix) == ("nn.MultiheadAttention", "model.")
    trace = trace_attention(AttentionConfig(seq=S, hidden=H, heads=h), tensors=loaded.params)
    np.testing.assert_array_equal(trace.params["w_v"], mha.in_proj_weight.detach().numpy()[2 * H :])


def test_size_conflicts_are_clear_errors(tmp_path: Path) -> None:
    torch.save(torch.nn.MultiheadAttention(H, h).state_dict(), tmp_path / "mha.pt")
    x_file, _ = write_x(tmp_path)
    cases = {
        ("--hidden", 16): "--hidden 16 conflicts with the weights (mha.pt), which gives 8",
        ("--seq", 5): "--seq 5 conflicts with the input (x (3, 8)), which gives 3",
        ("--batch", 2): "--batch 2 conflicts with the input (x (3, 8)), which gives (none)",
    }
    for option, message in cases.items():
        result = invoke(
            "run", "--weights", tmp_path / "mha.pt", "--heads", h, "--input", x_file, *option
        )
        assert result.exit_code == 2
        assert message in result.stderr
    np.save(tmp_path / "wide.npy", np.zeros((S, 16), np.float32))
    result = invoke(
        "run", "--weights", tmp_path / "mha.pt", "--heads", h, "--input", tmp_path / "wide.npy"
    )
    assert result.exit_code == 2
    assert (
        "the input (x (3, 16)) gives hidden 16, but the weights (mha.pt) gives 8" in result.stderr
    )
    result = invoke("run", "--layer-prefix", "model.")
    assert result.exit_code == 2
    assert "add --weights FILE" in result.stderr


def test_input_alone_sets_seq_and_batch(tmp_path: Path) -> None:
    x_file, x = write_x(tmp_path, (2, 5, H))
    result = invoke("run", "--input", x_file, "--heads", h, "--save", tmp_path / "o.npz")
    assert result.exit_code == 0, result.output
    with np.load(tmp_path / "o.npz", allow_pickle=False) as npz:
        np.testing.assert_array_equal(npz["x"], x)


# --- safety: nothing in a file ever runs ------------------------------------------------------


class Payload:
    """Unpickling this would run a shell command that creates the marker file."""

    marker: Path

    def __reduce__(self) -> tuple[Callable[..., Any], tuple[str]]:
        return os.system, (f"touch {self.marker}",)


def _payload(marker: Path) -> Payload:
    p = Payload()
    p.marker = marker
    return p


@pytest.mark.filterwarnings("ignore:Detected pickle protocol:UserWarning")
@pytest.mark.parametrize("suffix", [".pt", ".bin", ".npz", ".npy", "legacy.pth"])
def test_pickled_payload_is_refused_and_never_runs(tmp_path: Path, suffix: str) -> None:
    marker = tmp_path / "PWNED"
    path = tmp_path / f"evil{suffix}" if suffix.startswith(".") else tmp_path / suffix
    payload = _payload(marker)
    if suffix == ".pt":
        torch.save({"w_q": torch.eye(H), "evil": payload}, path)
    elif suffix == "legacy.pth":
        torch.save({"evil": payload}, path, _use_new_zipfile_serialization=False)
    elif suffix == ".bin":
        path.write_bytes(pickle.dumps({"evil": payload}))
    elif suffix == ".npz":
        np.savez(path, w_q=np.eye(H), evil=np.array([payload], dtype=object))
    else:
        path.write_bytes(pickle.dumps(payload))
    option = "--input" if suffix == ".npy" else "--weights"
    result = invoke("run", option, path, "--heads", h)
    assert result.exit_code == 2
    assert "refused" in result.stderr
    assert "nothing in it ran" in result.stderr
    assert not marker.exists()


def _truncated(data: bytes) -> bytes:
    return data[: len(data) // 2]


def _make_broken(tmp_path: Path, case: str) -> Path:
    torch.save(torch.nn.MultiheadAttention(H, h).state_dict(), tmp_path / "good.pt")
    np.savez(tmp_path / "good.npz", w_q=np.eye(H), w_k=np.eye(H), w_v=np.eye(H), w_o=np.eye(H))
    llama_file(tmp_path, layers=1)
    makers: dict[str, Callable[[Path], None]] = {
        "empty.npz": lambda p: p.write_bytes(b""),
        "garbage.npz": lambda p: p.write_bytes(b"not a zip file at all" * 10),
        "truncated.npz": lambda p: p.write_bytes(_truncated((tmp_path / "good.npz").read_bytes())),
        "truncated.pt": lambda p: p.write_bytes(_truncated((tmp_path / "good.pt").read_bytes())),
        "garbage.pt": lambda p: p.write_bytes(b"garbage" * 50),
        "truncated.safetensors": lambda p: p.write_bytes(
            _truncated((tmp_path / "llama.safetensors").read_bytes())
        ),
        "garbage.safetensors": lambda p: p.write_bytes(b"\xff" * 64),
        "wrong_shape.npz": lambda p: np.savez(
            p, w_q=np.eye(H), w_k=np.zeros((4, H)), w_v=np.eye(H), w_o=np.eye(H)
        ),
        "missing_weight.npz": lambda p: np.savez(p, w_q=np.eye(H), w_k=np.eye(H), w_v=np.eye(H)),
        "integer.npz": lambda p: np.savez(
            p, w_q=np.eye(H, dtype=np.int64), w_k=np.eye(H), w_v=np.eye(H), w_o=np.eye(H)
        ),
        "no_attention.npz": lambda p: np.savez(p, embedding=np.eye(H)),
        "weights.txt": lambda p: p.write_text("w_q"),
        "dir.npz": lambda p: p.mkdir(),
    }
    path = tmp_path / case
    if case != "missing.npz":
        makers[case](path)
    return path


BROKEN = {
    "missing.npz": "no such file",
    "empty.npz": "is not a .npz file",
    "garbage.npz": "is not a .npz file",
    "truncated.npz": "truncated or damaged .npz file",
    "truncated.pt": "not a readable PyTorch state dict",
    "garbage.pt": "not a readable PyTorch state dict",
    "truncated.safetensors": "not a valid .safetensors file",
    "garbage.safetensors": "not a valid .safetensors file",
    "wrong_shape.npz": "w_v is (8, 8), expected (4, 8) from w_q (8, 8) and w_k (4, 8)",
    "missing_weight.npz": "w_o is missing",
    "integer.npz": "w_q is int64, not floating point",
    "no_attention.npz": "no attention weights in a known naming scheme",
    "weights.txt": "unknown weights format '.txt'",
    "dir.npz": "is a directory",
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(BROKEN))
def test_broken_weights_file_is_one_line_and_exit_2(tmp_path: Path, case: str) -> None:
    path = _make_broken(tmp_path, case)
    result = invoke("run", "--weights", path, "--heads", h)
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"attntrace: error: {path}")
    assert BROKEN[case] in result.stderr
    assert result.stderr.count("\n") == 1
    assert result.stdout == ""


def test_unreadable_file_is_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "locked.npz"
    np.savez(path, w_q=np.eye(H))
    path.chmod(0)
    if os.geteuid() == 0:  # root reads any file: make the open fail as it would for a user
        real_open = os.open

        def locked_open(name: Any, *args: Any, **kwargs: Any) -> Any:
            if os.fspath(name) == str(path):
                raise PermissionError(13, "Permission denied")
            return real_open(name, *args, **kwargs)

        monkeypatch.setattr(os, "open", locked_open)
    # through the real entry point: a user gets Click's readable check ("is not readable"), root
    # (who passes it) attntrace's guarded open ("permission denied"): one line either way
    outcome = hostile.invoke("run", "--weights", str(path), "--heads", str(h))
    assert outcome.code == 2, outcome
    assert outcome.err.count("\n") == 1, outcome.err
    assert "locked.npz" in outcome.err, outcome.err
    assert "permission denied" in outcome.err.lower() or "not readable" in outcome.err


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (lambda p: np.save(p, np.zeros(H, np.float32)), "it must be (S, H) or (B, S, H)"),
        (lambda p: np.save(p, np.zeros((S, H), np.int32)), "x is int32, not floating point"),
        (lambda p: p.write_bytes(b"\x93NUMPY" + b"\x00" * 4), "damaged numpy data"),
        (lambda p: p.write_bytes(b"hello"), "is not a .npy file"),
    ],
)
def test_broken_input_file_is_exit_2(
    tmp_path: Path, content: Callable[[Path], None], message: str
) -> None:
    path = tmp_path / "x.npy"
    content(path)
    result = invoke("run", "--input", path, "--heads", h)
    assert result.exit_code == 2
    assert message in result.stderr
    assert result.stderr.count("\n") == 1


def test_bfloat16_safetensors_is_widened_to_float32(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    w = torch.randn(4, H, H).to(torch.bfloat16)
    save_file(
        {f"{c}_proj.weight": w[i].contiguous() for i, c in enumerate("qkvo")},
        str(tmp_path / "bf.safetensors"),
    )
    loaded = load_weights(tmp_path / "bf.safetensors")
    assert loaded.params["w_k"] is not None
    assert loaded.params["w_k"].dtype == np.float32
    np.testing.assert_array_equal(loaded.params["w_k"], w[1].float().numpy())


def test_verify_takes_the_same_weights(tmp_path: Path) -> None:
    torch.save(torch.nn.MultiheadAttention(H, h).state_dict(), tmp_path / "mha.pt")
    result = invoke("verify", "--weights", tmp_path / "mha.pt", "--heads", h, "--seq", 4)
    assert result.exit_code == 0, result.output
    assert "S=4  H=8  h=2" in result.stdout
    assert "PASS" in result.stdout


def test_input_kv_gives_torch_cross_attention(tmp_path: Path) -> None:
    """--input-kv: x_kv from a file (an encoder's output); N and the batch come from it."""
    torch.manual_seed(3)
    mha = torch.nn.MultiheadAttention(H, h, batch_first=True).eval()
    torch.save(mha.state_dict(), tmp_path / "mha.pt")
    x_file, x = write_x(tmp_path, (2, S, H))
    x_kv = np.random.default_rng(2).standard_normal((2, 5, H)).astype(np.float32)
    np.save(tmp_path / "x_kv.npy", x_kv)
    result = invoke(
        "run",
        "--weights",
        tmp_path / "mha.pt",
        "--heads",
        h,
        "--input",
        x_file,
        "--input-kv",
        tmp_path / "x_kv.npy",
        "--save",
        tmp_path / "o.npz",
    )
    assert result.exit_code == 0, result.output
    with torch.no_grad():
        kv = torch.from_numpy(x_kv)
        out, weights = mha(torch.from_numpy(x), kv, kv, average_attn_weights=False)
    with np.load(tmp_path / "o.npz", allow_pickle=False) as npz:
        np.testing.assert_array_equal(npz["x_kv"], x_kv)
        np.testing.assert_allclose(npz["weights"], weights.numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(npz["output"], out.numpy(), rtol=1e-5, atol=1e-6)
    assert (
        invoke(
            "verify",
            "--heads",
            h,
            "--input",
            x_file,
            "--input-kv",
            tmp_path / "x_kv.npy",
            "--dtype",
            "float64",
        ).exit_code
        == 0
    )


@pytest.mark.parametrize(
    ("shape", "extra", "message"),
    [
        (
            (3, 5, H),
            [],
            "--input-kv (x_kv (3, 5, 8)) gives batch 3, but the input (x (2, 3, 8)) gives 2",
        ),
        ((2, 5, H), ["--kv-seq", "4"], "--kv-seq 4 conflicts with --input-kv (x_kv (2, 5, 8))"),
        ((5,), [], "--input-kv is (5,); it must be (N, M) or (B, N, M)"),
    ],
)
def test_input_kv_that_disagrees_is_one_line(
    tmp_path: Path, shape: tuple[int, ...], extra: list[str], message: str
) -> None:
    x_file, _ = write_x(tmp_path, (2, S, H))
    np.save(tmp_path / "x_kv.npy", np.zeros(shape, np.float32))
    result = invoke(
        "run", "--heads", h, "--input", x_file, "--input-kv", tmp_path / "x_kv.npy", *extra
    )
    assert result.exit_code == 2
    assert message in result.stderr
