"""--rope-style half|interleaved: the two pairings of RoPE's dims. Interleaved (Meta's Llama code,
GPT-J) equals half (Hugging Face, GPT-NeoX) once the rows of w_q and w_k are permuted within
each head; its values agree with Meta's complex-number formulation written here, with
transformers' own GPT-J rotary function and a saved GPT-J model; a Meta checkpoint is read with
its own pairing and unpermuted weights, and gives what the converted load gives."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from attntrace import AttentionConfig, trace_attention
from attntrace.cli import app
from attntrace.errors import ConfigError

IDS = np.array([[3, 1, 4, 1, 5, 9], [2, 7, 1, 8, 2, 8]])
PAD = np.array([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]])


def invoke(*args: object) -> Any:
    return CliRunner().invoke(app, [str(a) for a in args])


def pairs_order(d: int, r: int | None = None) -> np.ndarray:
    """Index of the half-style dim that lands at each interleaved dim of one head: (0, R/2, 1,
    R/2 + 1, ...) over the first R dims, the rest in place."""
    r = r or d
    first = np.arange(r).reshape(2, r // 2).T.flatten()  # (R,)
    return np.concatenate((first, np.arange(r, d)))  # (d,)


def to_pairs(w: np.ndarray, d: int, r: int | None = None) -> np.ndarray:
    """Rows of w (heads·d, ...) reordered within each head from halves to interleaved pairs."""
    heads = w.shape[0] // d
    return w.reshape(heads, d, *w.shape[1:])[:, pairs_order(d, r)].reshape(w.shape)


def f64(**fields: Any) -> AttentionConfig:
    return AttentionConfig(dtype="float64", rope=True, **fields)


@pytest.mark.parametrize("backend", ["numpy", "torch"])
@pytest.mark.parametrize(
    "extra",
    [
        {},
        {"rotary_dims": 4},
        {"kv_heads": 1, "causal": True},
        {"rope_scaling": "yarn:factor=4,original_max_position_embeddings=2"},
    ],
    ids=["full", "partial", "mqa-causal", "yarn"],
)
def test_interleaved_equals_half_after_permuting_the_rows_of_w_q_and_w_k(
    backend: str, extra: dict[str, Any]
) -> None:
    if backend == "torch":
        pytest.importorskip("torch")
    sizes = {"batch": 2, "seq": 7, "hidden": 16, "heads": 2, **extra}
    half = trace_attention(f64(**sizes), backend)
    d, r = half.config.head_dim, extra.get("rotary_dims")
    given = {**half.params, "x": half["x"].value}
    given |= {name: to_pairs(given[name], d, r) for name in ("w_q", "b_q", "w_k", "b_k")}
    pairs = trace_attention(f64(rope_style="interleaved", **sizes), backend, tensors=given)
    np.testing.assert_allclose(pairs["output"].value, half["output"].value, rtol=0, atol=1e-12)
    np.testing.assert_allclose(pairs["weights"].value, half["weights"].value, rtol=0, atol=1e-12)
    order = pairs_order(d, r)
    np.testing.assert_allclose(pairs["q_rot"].value, half["q_rot"].value[..., order], atol=1e-12)
    assert not np.allclose(pairs["rope_cos"].value, half["rope_cos"].value)


def meta_rope(x: Any, base: float, rotary: int | None = None) -> Any:
    """Meta's apply_rotary_emb (llama/model.py), written out here: neighbours as complex numbers
    times exp(1j * pos * base^(-2i/R)), the first R dims only; x (..., S, d) in float64."""
    import torch

    seq, d = x.shape[-2], x.shape[-1]
    r = rotary or d
    freqs = 1.0 / (base ** (torch.arange(0, r, 2, dtype=torch.float64) / r))  # (R/2,)
    t = torch.arange(seq, dtype=torch.float64)
    freqs_cis = torch.polar(torch.ones(seq, r // 2, dtype=torch.float64), torch.outer(t, freqs))
    x_ = torch.view_as_complex(x[..., :r].reshape(*x.shape[:-1], -1, 2).contiguous())
    return torch.cat((torch.view_as_real(x_ * freqs_cis).flatten(-2), x[..., r:]), dim=-1)


@pytest.mark.parametrize("backend", ["numpy", "torch"])
@pytest.mark.parametrize("rotary", [None, 4])
def test_interleaved_values_match_metas_complex_formulation(
    backend: str, rotary: int | None
) -> None:
    torch = pytest.importorskip("torch")
    t = trace_attention(
        f64(
            batch=2,
            seq=6,
            hidden=24,
            heads=2,
            kv_heads=1,
            rope_base=500.0,
            rope_style="interleaved",
            rotary_dims=rotary,
        ),
        backend,
    )
    for c in "qk":
        expected = meta_rope(torch.from_numpy(t[c].value), 500.0, rotary).numpy()
        np.testing.assert_allclose(t[f"{c}_rot"].value, expected, rtol=1e-12, atol=1e-12)


def test_interleaved_values_match_transformers_gptj_rotary() -> None:
    """transformers' GPT-J: sin/cos tables of float32 angles, repeat_interleave, rotate_every_two
    on the first rotary_dim dims of (B, S, h, d)."""
    torch = pytest.importorskip("torch")
    gptj = pytest.importorskip("transformers.models.gptj.modeling_gptj")
    t = trace_attention(
        AttentionConfig(
            batch=2, seq=6, hidden=32, heads=2, rope=True, rope_style="interleaved", rotary_dims=6
        ),
        "torch",
    )
    sincos = gptj.create_sinusoidal_positions(6, 6)[None]  # (1, S, R)
    sin, cos = torch.split(sincos, 3, dim=-1)  # (1, S, R/2) each
    q = torch.from_numpy(t["q"].value).transpose(1, 2)  # (B, S, h, d)
    rotated = torch.cat((gptj.apply_rotary_pos_emb(q[..., :6], sin, cos), q[..., 6:]), dim=-1)
    np.testing.assert_allclose(t["q_rot"].value, rotated.transpose(1, 2).numpy(), atol=2e-6)


@pytest.mark.parametrize("backend", ["shape", "numpy", "torch"])
def test_interleaved_steps_ops_and_costs_on_every_backend(backend: str) -> None:
    if backend == "torch":
        pytest.importorskip("torch")
    config = AttentionConfig(
        batch=2, seq=5, hidden=16, heads=2, rope=True, rope_style="interleaved", rotary_dims=4
    )
    trace = trace_attention(config, backend)
    assert trace.names[9:14] == ("v", "rope_cos", "rope_sin", "q_rot", "k_rot")
    assert trace["q_rot"].op == "q * cos + rotate_pairs(q[..., :4]) * sin"
    assert trace["k_rot"].shape == (2, 2, 5, 8)
    half = trace_attention(
        AttentionConfig(batch=2, seq=5, hidden=16, heads=2, rope=True, rotary_dims=4), "shape"
    )
    assert trace.total_flops == half.total_flops  # the pairing moves entries, no extra maths
    assert trace_attention(
        AttentionConfig(seq=3, hidden=8, heads=2, rope=True, rope_style="interleaved"), backend
    )["q_rot"].op == ("q * cos + rotate_pairs(q) * sin")


@pytest.mark.parametrize(
    "args",
    [
        (),
        ("--rotary-dims", 2),
        ("--kv-heads", 1, "--causal"),
        ("--rope-scaling", "linear:factor=2"),
        ("--algorithm", "flash", "--block-size", 2),
    ],
    ids=lambda a: " ".join(map(str, a)) or "plain",
)
def test_verify_passes_with_interleaved_pairs(args: tuple[object, ...]) -> None:
    pytest.importorskip("torch")
    result = invoke(
        "verify",
        "--hidden",
        8,
        "--heads",
        2,
        "--seq",
        5,
        "--rope",
        "--rope-style",
        "interleaved",
        *args,
    )
    assert result.exit_code == 0, result.output
    assert "PASS" in result.stdout


def test_rope_style_errors_config_contract_and_json(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="add --rope"):
        AttentionConfig(rope_style="interleaved")
    with pytest.raises(ConfigError, match="half or interleaved"):
        AttentionConfig(rope=True, rope_style="pairs")
    assert "rope_style" not in AttentionConfig(rope=True).to_dict()  # the default: left out
    assert AttentionConfig(rope=True, rope_style="interleaved").to_dict()["rope_style"] == (
        "interleaved"
    )
    result = invoke("run", "--rope-style", "interleaved")
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        "attntrace: error: --rope-style interleaved pairs the dims RoPE rotates; add --rope"
    )
    result = invoke(
        "run", "--rope", "--rope-style", "interleaved", "-f", "json", "--hidden", 8, "--heads", 2
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["config"]["rope_style"] == "interleaved"
    assert doc["steps"][12]["op"] == "q * cos + rotate_pairs(q) * sin"
    result = invoke("check", "--rope", "--rope-style", "interleaved", "-e", "q_rot=h,S,d")
    assert result.exit_code == 0, result.output
    spec = tmp_path / "spec.toml"
    spec.write_text(
        '[config.a]\nrope = true\nrope_style = "interleaved"\n[config.a.expect]\nq_rot = "h,S,d"\n'
    )
    assert invoke("check", "--spec", spec).exit_code == 0
    spec.write_text('[config.a]\nrope = true\nrope_style = "pairs"\n')
    result = invoke("check", "--spec", spec)
    assert result.exit_code == 2
    assert "--rope-style must be half or interleaved" in result.stderr


BASE = {
    "vocab_size": 32,
    "hidden_size": 16,
    "intermediate_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "max_position_embeddings": 64,
}


def trace_folder(folder: Path, x: np.ndarray, name: str, *args: object) -> dict[str, np.ndarray]:
    np.save(folder / "x.npy", x.astype(np.float32))
    result = invoke("run", "--input", folder / "x.npy", "--save", folder / name, *args)
    assert result.exit_code == 0, result.output
    with np.load(folder / name, allow_pickle=False) as npz:
        return {k: npz[k] for k in npz.files}


@pytest.mark.slow
@pytest.mark.parametrize("layer", [0, 1])
def test_saved_gptj_model_with_interleaved_partial_rotary_gives_its_forward(
    tmp_path: Path, layer: int
) -> None:
    """GPT-J: rotary_dim 4 of d = 8, interleaved; read from config.json (model_type gptj)."""
    pytest.importorskip("transformers")
    from hf_models import build, capture

    model = build(
        "GPTJ",
        tmp_path,
        vocab_size=32,
        n_embd=32,
        n_head=4,
        n_layer=2,
        n_positions=64,
        rotary_dim=4,
        bos_token_id=0,
        eos_token_id=0,
    )
    got = capture(model, model.transformer.h[layer].attn, IDS, PAD)
    out = trace_folder(
        tmp_path, got.x, "o.npz", "--model", tmp_path, "--layer", layer, "--key-lengths", "6,4"
    )
    assert out["q_rot"].shape == (2, 4, 6, 8)
    for b, n in enumerate((6, 4)):
        np.testing.assert_allclose(out["weights"][b, :, :n], got.weights[b, :, :n], atol=1e-5)
        np.testing.assert_allclose(out["output"][b, :n], got.output[b, :n], atol=1e-5)
    half = trace_folder(
        tmp_path,
        got.x,
        "h.npz",
        "--model",
        tmp_path,
        "--layer",
        layer,
        "--key-lengths",
        "6,4",
        "--rope-style",
        "half",
    )
    assert not np.allclose(half["output"][0], got.output[0], atol=1e-5)  # the pairing matters


def meta_folder(tmp_path: Path) -> tuple[Any, Path]:
    """A Llama model and the same weights as Meta's own folder (params.json, wq..wo with the
    rows of wq and wk in Meta's interleaved order: the inverse of transformers' permute)."""
    from hf_models import build

    model = build("Llama", tmp_path / "hf", **{**BASE, "num_key_value_heads": 2})
    meta = tmp_path / "meta"
    meta.mkdir()
    state = {}
    for i, layer in enumerate(model.model.layers):
        a = layer.self_attn
        state |= {
            f"layers.{i}.attention.wq.weight": to_pairs(a.q_proj.weight.detach().numpy(), 4),
            f"layers.{i}.attention.wk.weight": to_pairs(a.k_proj.weight.detach().numpy(), 4),
            f"layers.{i}.attention.wv.weight": a.v_proj.weight.detach().numpy(),
            f"layers.{i}.attention.wo.weight": a.o_proj.weight.detach().numpy(),
        }
    import torch

    torch.save(
        {k: torch.from_numpy(v.copy()) for k, v in state.items()}, meta / "consolidated.00.pth"
    )
    params = {"dim": 16, "n_heads": 4, "n_kv_heads": 2, "n_layers": 2, "rope_theta": 10000.0}
    (meta / "params.json").write_text(json.dumps(params))
    return model, meta


@pytest.mark.slow
def test_meta_checkpoint_read_interleaved_and_unpermuted_gives_the_converted_load(
    tmp_path: Path,
) -> None:
    """Meta's folder: by default read as Meta computes it (interleaved, wq as stored); with
    --rope-style half the rows are permuted as transformers' converter does. Both give the
    transformers forward; --weights consolidated.00.pth with --rope-style interleaved too."""
    pytest.importorskip("transformers")
    from hf_models import capture

    model, meta = meta_folder(tmp_path)
    got = capture(model, model.model.layers[1].self_attn, IDS)
    own = trace_folder(meta, got.x, "own.npz", "--model", meta, "--layer", 1)
    converted = trace_folder(
        meta, got.x, "conv.npz", "--model", meta, "--layer", 1, "--rope-style", "half"
    )
    stored = torch_load(meta / "consolidated.00.pth")["layers.1.attention.wq.weight"]
    np.testing.assert_array_equal(own["w_q"], stored)  # unpermuted
    np.testing.assert_array_equal(
        converted["w_q"], model.model.layers[1].self_attn.q_proj.weight.detach().numpy()
    )
    np.testing.assert_allclose(own["output"], converted["output"], atol=1e-6)
    np.testing.assert_allclose(own["weights"], converted["weights"], atol=1e-6)
    np.testing.assert_allclose(own["output"], got.output, atol=1e-5)
    np.testing.assert_allclose(own["weights"], got.weights, atol=1e-5)
    d = 4
    np.testing.assert_allclose(own["q_rot"], converted["q_rot"][..., pairs_order(d)], atol=1e-6)
    bare = trace_folder(
        meta,
        got.x,
        "bare.npz",
        "--weights",
        meta / "consolidated.00.pth",
        "--layer-prefix",
        "layers.1.",
        "--heads",
        4,
        "--kv-heads",
        2,
        "--rope",
        "--causal",
        "--no-bias",
        "--rope-style",
        "interleaved",
    )
    np.testing.assert_allclose(bare["output"], own["output"], atol=1e-6)
    result = invoke(
        "run",
        "--model",
        meta,
        "--layer",
        1,
        "--rope-style",
        "half",
        "-f",
        "json",
        "--backend",
        "shape",
    )
    assert result.exit_code == 0, result.output
    assert "--rope-style half (was interleaved)" in json.loads(result.stdout)["origin"]
    result = invoke("verify", "--model", meta, "--layer", 1, "--seq", 5)  # SDPA, Meta's pairs
    assert result.exit_code == 0, result.output
    assert "PASS" in result.stdout


def torch_load(path: Path) -> dict[str, np.ndarray]:
    import torch

    return {k: v.numpy() for k, v in torch.load(path, weights_only=True).items()}


@settings(max_examples=25, deadline=None)
@given(
    heads=st.integers(1, 3),
    half_d=st.integers(1, 4),
    groups=st.sampled_from([1, None]),
    seq=st.integers(1, 6),
    data=st.data(),
)
def test_pairings_agree_after_the_permutation_for_any_sizes(
    heads: int, half_d: int, groups: int | None, seq: int, data: Any
) -> None:
    """The invariant over random configs: permute the rows of w_q, b_q, w_k, b_k within each
    head (over the first R dims) and the interleaved output is the half one."""
    d = 2 * half_d
    rotary = data.draw(st.sampled_from([None, *range(2, d, 2)]))
    sizes = {
        "seq": seq,
        "hidden": heads * d,
        "heads": heads,
        "kv_heads": groups,
        "rotary_dims": rotary,
        "causal": True,
    }
    half = trace_attention(f64(**sizes), "numpy")
    given_ = {**half.params, "x": half["x"].value}
    given_ |= {n: to_pairs(given_[n], d, rotary) for n in ("w_q", "b_q", "w_k", "b_k")}
    pairs = trace_attention(f64(rope_style="interleaved", **sizes), "numpy", tensors=given_)
    np.testing.assert_allclose(pairs["output"].value, half["output"].value, atol=1e-12)
