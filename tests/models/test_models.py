"""--model DIR --layer N against transformers itself: for every family, a small random-init
model is built from a config object (no downloads), saved with save_pretrained, traced by
attntrace from its folder, and compared with the attention module's own forward on the same
hidden states (float32: within 1e-5)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from attntrace.cli import app
from hf_models import Captured, build, capture, randomize_norms

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

BASE = {
    "vocab_size": 32,
    "hidden_size": 16,
    "intermediate_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "max_position_embeddings": 64,
}
IDS = np.array([[3, 1, 4, 1, 5, 9], [2, 7, 1, 8, 2, 8]])
PAD = np.array(
    [[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]]
)  # batch item 1: 4 real tokens, right padding


def invoke(*args: object) -> Any:
    return CliRunner().invoke(app, [str(a) for a in args])


def trace_folder(folder: Path, x: np.ndarray, *args: object) -> dict[str, np.ndarray]:
    np.save(folder / "x.npy", x.astype(np.float32))
    result = invoke(
        "run", "--model", folder, "--input", folder / "x.npy", "--save", folder / "o.npz", *args
    )
    assert result.exit_code == 0, result.output
    with np.load(folder / "o.npz", allow_pickle=False) as npz:
        return {k: npz[k] for k in npz.files}


def assert_same(
    out: dict[str, np.ndarray],
    got: Captured,
    real: tuple[int, ...] | None = None,
    atol: float = 1e-5,
) -> None:
    """Output and weights agree on every row of a real token (all rows when ``real`` is None)."""
    rows = real or (out["output"].shape[-2],) * out["output"].shape[0]
    for b, n in enumerate(rows):
        np.testing.assert_allclose(out["weights"][b, :, :n], got.weights[b, :, :n], atol=atol)
        np.testing.assert_allclose(out["output"][b, :n], got.output[b, :n], atol=atol)


#: family -> (config class, sizes, the attention module of layer i)
FAMILIES: dict[str, tuple[str, dict[str, Any], Callable[[Any, int], Any]]] = {
    "llama-gqa": (
        "Llama",
        {**BASE, "num_key_value_heads": 2},
        lambda m, i: m.model.layers[i].self_attn,
    ),
    "llama-mqa": (
        "Llama",
        {**BASE, "num_key_value_heads": 1},
        lambda m, i: m.model.layers[i].self_attn,
    ),
    "mistral-window": (
        "Mistral",
        {**BASE, "num_key_value_heads": 2, "sliding_window": 3},
        lambda m, i: m.model.layers[i].self_attn,
    ),
    "qwen2-bias": (
        "Qwen2",
        {**BASE, "num_key_value_heads": 2},
        lambda m, i: m.model.layers[i].self_attn,
    ),
    "gemma-head-dim": (
        "Gemma",
        {**BASE, "num_key_value_heads": 2, "head_dim": 8},
        lambda m, i: m.model.layers[i].self_attn,
    ),
    "phi3-qkv-proj": (
        "Phi3",
        {**BASE, "num_key_value_heads": 2, "pad_token_id": 0},
        lambda m, i: m.model.layers[i].self_attn,
    ),
    "gpt2-conv1d": (
        "GPT2",
        {"vocab_size": 32, "n_embd": 16, "n_head": 4, "n_layer": 2, "n_positions": 64},
        lambda m, i: m.transformer.h[i].attn,
    ),
    "neox-fused": (
        "GPTNeoX",
        {
            **BASE,
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": 10000.0,
                "partial_rotary_factor": 1.0,
            },
        },
        lambda m, i: m.gpt_neox.layers[i].attention,
    ),
    "falcon-multi-query": (
        "Falcon",
        {
            "vocab_size": 32,
            "hidden_size": 16,
            "num_attention_heads": 4,
            "num_hidden_layers": 2,
            "multi_query": True,
        },
        lambda m, i: m.transformer.h[i].self_attention,
    ),
    "falcon-per-head": (
        "Falcon",
        {
            "vocab_size": 32,
            "hidden_size": 16,
            "num_attention_heads": 4,
            "num_hidden_layers": 2,
            "multi_query": False,
            "bias": True,
        },
        lambda m, i: m.transformer.h[i].self_attention,
    ),
    "falcon-new-architecture": (
        "Falcon",
        {
            "vocab_size": 32,
            "hidden_size": 16,
            "num_attention_heads": 4,
            "num_hidden_layers": 2,
            "new_decoder_architecture": True,
            "num_kv_heads": 2,
        },
        lambda m, i: m.transformer.h[i].self_attention,
    ),
    "neox-partial-rotary": (
        "GPTNeoX",
        {**BASE, "hidden_size": 32},  # d = 8, rotary_pct 0.25: R = 2
        lambda m, i: m.gpt_neox.layers[i].attention,
    ),
    "gemma2-softcap-window": (
        "Gemma2",
        {
            **BASE,
            "num_key_value_heads": 2,
            "head_dim": 8,
            "sliding_window": 3,
            "attn_logit_softcapping": 0.5,
            "query_pre_attn_scalar": 6,
        },
        lambda m, i: m.model.layers[i].self_attn,
    ),
    "qwen3-qk-norm": (
        "Qwen3",
        {**BASE, "num_key_value_heads": 2, "head_dim": 8},
        lambda m, i: m.model.layers[i].self_attn,
    ),
    "olmo2-qk-norm-full": (
        "Olmo2",
        {**BASE, "num_key_value_heads": 2},
        lambda m, i: m.model.layers[i].self_attn,
    ),
    **{
        f"llama-rope-{kind}": (
            "Llama",
            {
                **BASE,
                "num_key_value_heads": 2,
                "max_position_embeddings": 4,
                "rope_parameters": {"rope_type": kind, "rope_theta": 100.0, **params},
            },
            lambda m, i: m.model.layers[i].self_attn,
        )
        for kind, params in {
            "linear": {"factor": 3.0},
            "dynamic": {"factor": 2.0},  # S = 6 > max_position_embeddings 4: a larger base
            "llama3": {
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 4,
            },
            "yarn": {"factor": 4.0, "original_max_position_embeddings": 2, "beta_fast": 8.0},
        }.items()
    },
}


@pytest.mark.slow
@pytest.mark.parametrize("family", list(FAMILIES))
def test_layer_of_a_saved_model_gives_its_forward(tmp_path: Path, family: str) -> None:
    kind, sizes, module = FAMILIES[family]
    model = build(kind, tmp_path, **sizes)
    got = capture(model, module(model, 1), IDS, PAD)
    out = trace_folder(tmp_path, got.x, "--layer", 1, "--key-lengths", "6,4")
    assert_same(out, got, real=(6, 4))


def test_bert_layer_and_a_bare_bert_self_attention(tmp_path: Path) -> None:
    """BertModel: bidirectional, biases; the layer's output is attention.output.dense of the
    context (its residual and LayerNorm belong to the block). A bare BertSelfAttention state
    dict has no output layer: the trace's output is the merged context."""
    model = build(
        "Bert",
        tmp_path,
        vocab_size=32,
        hidden_size=16,
        num_attention_heads=4,
        num_hidden_layers=2,
        intermediate_size=32,
    )
    layer = model.encoder.layer[1].attention
    got = capture(model, layer.self, IDS)
    dense = layer.output.dense
    with torch.no_grad():
        expected = dense(torch.from_numpy(got.output).float()).double().numpy()
    out = trace_folder(tmp_path, got.x, "--layer", 1)
    np.testing.assert_allclose(out["output"], expected, atol=1e-5)
    np.testing.assert_allclose(out["weights"], got.weights, atol=1e-5)
    torch.save(layer.self.state_dict(), tmp_path / "self.pt")
    result = invoke(
        "run",
        "--weights",
        tmp_path / "self.pt",
        "--heads",
        4,
        "--input",
        tmp_path / "x.npy",
        "--save",
        tmp_path / "bare.npz",
    )
    assert result.exit_code == 0, result.output
    with np.load(tmp_path / "bare.npz") as npz:
        np.testing.assert_allclose(npz["output"], got.output, atol=1e-5)


def test_meta_checkpoint_with_interleaved_pairs_gives_the_transformers_forward(
    tmp_path: Path,
) -> None:
    """Meta's params.json + consolidated.00.pth: wq/wk rows pair neighbours; transformers' own
    converter permutes them into halves, and so does attntrace on loading."""
    model = build("Llama", tmp_path / "hf", **{**BASE, "num_key_value_heads": 2})
    got = capture(model, model.model.layers[1].self_attn, IDS)
    meta = tmp_path / "meta"
    meta.mkdir()
    d = 4

    def interleave(w: Any) -> Any:  # the inverse of transformers' permute: halves -> pairs
        return w.reshape(-1, 2, d // 2, w.shape[1]).transpose(1, 2).reshape(w.shape).contiguous()

    state = {}
    for i, layer in enumerate(model.model.layers):
        a = layer.self_attn
        state |= {
            f"layers.{i}.attention.wq.weight": interleave(a.q_proj.weight.detach()),
            f"layers.{i}.attention.wk.weight": interleave(a.k_proj.weight.detach()),
            f"layers.{i}.attention.wv.weight": a.v_proj.weight.detach().clone(),
            f"layers.{i}.attention.wo.weight": a.o_proj.weight.detach().clone(),
        }
    torch.save(state, meta / "consolidated.00.pth")
    (meta / "params.json").write_text(
        json.dumps(
            {
                "dim": 16,
                "n_heads": 4,
                "n_kv_heads": 2,
                "n_layers": 2,
                "rope_theta": 10000.0,
                "norm_eps": 1e-5,
            }
        )
    )
    out = trace_folder(meta, got.x, "--layer", 1)
    assert_same(out, got)


def test_float64_agrees_as_closely_as_float32_rope_tables_allow(tmp_path: Path) -> None:
    """In float64, transformers still computes its RoPE angles in float32 (inv_freq is a float32
    buffer), so a float64 trace (angles in float64) agrees to about 1e-7, not 1e-15."""
    model = build("Llama", tmp_path, dtype="float64", **{**BASE, "num_key_value_heads": 2})
    got = capture(model, model.model.layers[0].self_attn, IDS)
    np.save(tmp_path / "x.npy", got.x)
    result = invoke(
        "run",
        "--model",
        tmp_path,
        "--input",
        tmp_path / "x.npy",
        "--dtype",
        "float64",
        "--save",
        tmp_path / "o.npz",
    )
    assert result.exit_code == 0, result.output
    with np.load(tmp_path / "o.npz") as npz:
        assert npz["output"].dtype == np.float64
        np.testing.assert_allclose(npz["output"], got.output, atol=1e-6)
        np.testing.assert_allclose(npz["weights"], got.weights, atol=1e-6)


def test_sharded_model_reads_only_the_layers_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model saved in 4 shards: layer 3 is read from its one shard, tensor by tensor; no other
    tensor is read, and the memory allocated stays near the layer's own bytes."""
    import tracemalloc

    from attntrace.files import readers
    from attntrace.models.load import load_model_layer

    sizes = {
        **BASE,
        "hidden_size": 64,
        "num_hidden_layers": 4,
        "num_key_value_heads": 2,
        "vocab_size": 256,
    }
    model = build("Llama", tmp_path, shard="60KB", **sizes)
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) >= 4
    read: list[tuple[str, str]] = []
    original = readers._safetensor
    monkeypatch.setattr(
        readers,
        "_safetensor",
        lambda path, name: read.append((path.name, name)) or original(path, name),
    )
    tracemalloc.start()
    loaded = load_model_layer(tmp_path, 3)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    prefix = "model.layers.3.self_attn."
    assert loaded.prefix == prefix
    assert sorted(n for _, n in read) == sorted(f"{prefix}{c}_proj.weight" for c in "kqvo")
    assert {shard for shard, _ in read} == {index["weight_map"][f"{prefix}q_proj.weight"]}
    layer_bytes = sum(p.nbytes for p in loaded.params.values() if p is not None)
    model_bytes = sum(p.numel() * 4 for p in model.parameters())
    assert peak < 3 * layer_bytes + 256 * 1024 < model_bytes
    np.testing.assert_array_equal(
        loaded.params["w_k"], model.model.layers[3].self_attn.k_proj.weight.detach().numpy()
    )


def test_header_names_the_model_and_the_typed_overrides(tmp_path: Path) -> None:
    build("Llama", tmp_path, **{**BASE, "num_key_value_heads": 2})
    result = invoke(
        "run",
        "--model",
        tmp_path,
        "--layer",
        1,
        "--kv-heads",
        1,
        "--backend",
        "shape",
        "--no-color",
    )
    assert result.exit_code == 2  # the weights hold 2 kv-heads: an override cannot change them
    assert "conflicts with the weights" in result.stderr
    result = invoke(
        "check", "--model", tmp_path, "--layer", 1, "-e", "k=2,3,4", "-e", "q_rot=h,S,d"
    )
    assert result.exit_code == 0, result.output  # check takes the model's config: g = 2, RoPE
    result = invoke("run", "--model", tmp_path, "--layer", 1, "--no-causal", "--format", "json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert (
        doc["origin"]
        == f"from --model {tmp_path.name} (layer 1); typed over it: --causal false (was true)"
    )
    assert doc["config"]["causal"] is False


@pytest.mark.parametrize(
    ("kind", "sizes"),
    [
        ("Qwen3", {**BASE, "num_key_value_heads": 2, "head_dim": 8}),
        ("Olmo2", {**BASE, "num_key_value_heads": 2}),
        (
            "Gemma3Text",
            {
                **BASE,
                "num_key_value_heads": 2,
                "head_dim": 8,
                "sliding_window": 3,
                "layer_types": ["sliding_attention", "full_attention"],
                "query_pre_attn_scalar": 6,
                "rope_parameters": {
                    "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
                    "sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
                },
            },
        ),
    ],
)
@pytest.mark.parametrize("layer", [0, 1])
def test_qk_norm_weights_are_read(
    tmp_path: Path, kind: str, sizes: dict[str, Any], layer: int
) -> None:
    """Qwen3 and Gemma 3 normalise q and k per head (Gemma 3 by 1 + weight), OLMo 2 over the
    whole projection; Gemma 3's layer 0 slides with θ 10000, layer 1 is global with linear x8."""
    model = build(kind, tmp_path, **sizes)
    randomize_norms(model, tmp_path)
    got = capture(model, model.model.layers[layer].self_attn, IDS, PAD)
    out = trace_folder(tmp_path, got.x, "--layer", layer, "--key-lengths", "6,4")
    assert_same(out, got, real=(6, 4))


@pytest.mark.slow
@pytest.mark.parametrize("layer", [0, 1])
def test_t5_layers_with_the_relative_bias_of_block_0(tmp_path: Path, layer: int) -> None:
    """T5: unscaled scores plus a bias per bucket of j - i; block 0 holds the table and every
    layer uses it. Layer 1's file has no table: it is read from block 0."""
    model = build(
        "T5",
        tmp_path,
        vocab_size=32,
        d_model=16,
        d_kv=4,
        num_heads=4,
        num_layers=2,
        d_ff=32,
        relative_attention_num_buckets=8,
        relative_attention_max_distance=16,
    )
    module = model.encoder.block[layer].layer[0].SelfAttention
    seen: dict[str, Any] = {}

    def hook(_mod: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
        seen["x"], seen["out"], seen["weights"] = (
            kwargs.get("hidden_states", args[0] if args else None),
            out[0],
            out[-1],
        )

    handle = module.register_forward_hook(hook, with_kwargs=True)
    with torch.no_grad():
        model(
            input_ids=torch.from_numpy(IDS),
            attention_mask=torch.from_numpy(PAD),
            output_attentions=True,
        )
    handle.remove()
    got = Captured(*(seen[k].double().numpy() for k in ("x", "out", "weights")))
    out = trace_folder(tmp_path, got.x, "--layer", layer, "--key-lengths", "6,4")
    assert "position_bias" in out
    assert out["position_bias"].shape == (4, 6, 6)
    assert_same(out, got)  # every row: T5's padding mask leaves each query some key
