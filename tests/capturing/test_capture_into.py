"""``attntrace trace --into PACKAGE``: the ops inside an installed package's attention code
(Hugging Face transformers, random-init from config objects) get the reference roles and axes;
HF's idioms on the way: Conv1D's addmm, repeat_kv's ``k[:, :, None].expand(…).reshape(…)``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import attntrace
from attntrace import AttentionConfig, trace_attention
from attntrace.cli import app

# transformers classes traced in the sandbox child: the e2e tier (.ci/run), -m e2e
pytestmark = [pytest.mark.slow, pytest.mark.e2e]

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

runner = CliRunner()

#: One attention layer of a transformers model, called as its decoder layer calls it.
WRAPPER = """
import torch
from transformers import {config}
from transformers.models.{module} import {imports}

config = {config}(hidden_size=64, num_attention_heads=8, num_key_value_heads=2,
                  num_hidden_layers=1, intermediate_size=128, attn_implementation="eager",
                  {extra})


class Attn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = {attention}(config{layer})
{body}
"""

#: RoPE models: the cos and sin of the positions, made as the model makes them.
ROTARY = """
        self.rope = {rope}(config)

    def forward(self, x):
        pos = torch.arange(x.shape[1])[None]
        return self.attn(x, self.rope(x, pos), None)[0]
"""

MODELS = {
    "gpt2": {
        "config": "GPT2Config",
        "module": "gpt2.modeling_gpt2",
        "layer": "",
        "attention": "GPT2Attention",
        "imports": "GPT2Attention",
        "extra": "n_embd=64, n_head=8",
        "body": "\n    def forward(self, x):\n        return self.attn(x)[0]\n",
    },
    **{
        model: {
            "config": f"{name}Config",
            "module": f"{model}.modeling_{model}",
            "attention": f"{name}Attention",
            "layer": ", layer_idx=0",
            "imports": f"{name}Attention, {name}RotaryEmbedding",
            "extra": "",
            "body": ROTARY.format(rope=f"{name}RotaryEmbedding"),
        }
        for model, name in (("llama", "Llama"), ("phi3", "Phi3"))
    },
}


def _wrapper(tmp_path: Path, model: str) -> Path:
    path = tmp_path / f"{model}_attn.py"
    path.write_text(WRAPPER.format(**MODELS[model]))
    return path


def _trace(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["trace", *args], env={"COLUMNS": "160"})
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.parametrize("model", sorted(MODELS))
def test_the_attention_of_a_transformers_model_gets_the_reference_roles(
    tmp_path: Path, model: str
) -> None:
    path = _wrapper(tmp_path, model)
    code, out, err = _trace(
        f"{path}:Attn",
        "--batch",
        "2",
        "--seq",
        "5",
        "--hidden",
        "64",
        "--into",
        "transformers",
        "--format",
        "json",
    )
    assert code == 0, err
    steps = json.loads(out)["steps"]
    roles = {s["role"]: s for s in steps if s["role"]}
    gqa = model != "gpt2"  # GPT-2: 8 heads, one fused c_attn (Conv1D: addmm) of width 3·H
    reference = trace_attention(
        AttentionConfig(batch=2, seq=5, hidden=64, heads=8, kv_heads=2 if gqa else None), "shape"
    )
    want = {
        "x",
        "q_proj",
        "k_proj",
        "v_proj",
        "q",
        "k",
        "v",
        "k_t",
        "scores",
        "scaled",
        "weights",
        "context",
        "context_heads",
        "merged",
        "output",
    }
    want |= {"k_rep", "v_rep"} if gqa else set()
    assert want <= set(roles), sorted(want - set(roles))
    flat = {"output"} if not gqa else set()  # Conv1D: addmm on x.view(-1, H), (B·S, H)
    for name in want - flat:
        assert tuple(roles[name]["axes"]) == reference[name].axes, (name, roles[name])
    if flat:
        assert (roles["output"]["op"], roles["output"]["axes"]) == ("addmm", ["B·S", "H"])
    assert {s["location"].split(":")[0] for s in steps} >= {f"modeling_{model}.py"}


def test_a_held_library_module_is_followed_and_no_into_makes_it_one_row(tmp_path: Path) -> None:
    target = f"{_wrapper(tmp_path, 'llama')}:Attn"
    sizes = ("--batch", "2", "--seq", "5", "--hidden", "64", "--format", "json")
    code, out, _ = _trace(target, *sizes)  # held by the user's module: its steps, as named
    assert code == 0
    steps = json.loads(out)["steps"]
    roles = {s["role"]: s for s in steps if s.get("role")}
    assert {"q_proj", "k_proj", "v_proj", "scores", "weights", "context", "output"} <= set(roles)
    assert roles["scores"]["location"].startswith("modeling_llama.py:")
    code, out, _ = _trace(target, *sizes, "--no-into")
    assert code == 0
    steps = json.loads(out)["steps"]
    assert [s["source"] for s in steps if "modeling" in s["location"]] == []
    assert "llamaattention" in {s["op"] for s in steps}


@pytest.mark.parametrize(
    ("package", "message"),
    [
        ("no_such_package_xyz", "--into no_such_package_xyz: no installed package"),
        ("torch", "--into torch would record torch's own internals"),
        ("numpy.linalg", "--into numpy.linalg would record numpy's own internals"),
    ],
)
def test_into_an_unknown_or_internal_package_is_refused(package: str, message: str) -> None:
    code, out, err = _trace("examples/seed_001_numpy.py", "--into", package)
    assert code == 2
    assert err.startswith(f"attntrace: error: {message}")
    assert len(err.strip().splitlines()) == 1
    assert out == ""


def test_capture_into_ends_with_the_block() -> None:
    from transformers.models.gpt2.modeling_gpt2 import GPT2Attention

    from attntrace.capturing.source import is_user_file

    inside = GPT2Attention.forward.__code__.co_filename
    with attntrace.capture(into=["transformers"]):
        assert is_user_file(inside)
    assert not is_user_file(inside)


def test_repeat_kv_by_indexing_and_expand_plays_k_rep() -> None:
    """HF's repeat_kv written in the user's own file: (B, g, S, d) -> (B, g, 1, S, d) by a
    None index, expanded to (B, g, h / g, S, d), merged to (B, h, S, d)."""

    class Attn(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.q_proj = torch.nn.Linear(64, 64)
            self.k_proj = torch.nn.Linear(64, 16)
            self.v_proj = torch.nn.Linear(64, 16)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            B, S, _ = x.shape
            q = self.q_proj(x).view(B, S, 8, 8).transpose(1, 2)
            k = self.k_proj(x).view(B, S, 2, 8).transpose(1, 2)
            v = self.v_proj(x).view(B, S, 2, 8).transpose(1, 2)
            k = k[:, :, None, :, :].expand(B, 2, 4, S, 8).reshape(B, 8, S, 8)
            v = v[:, :, None, :, :].expand(B, 2, 4, S, 8).reshape(B, 8, S, 8)
            return torch.softmax(q @ k.transpose(2, 3), dim=-1) @ v

    with attntrace.capture() as t:
        Attn()(torch.randn(2, 5, 64))
    roles = {s.role: s for s in t.steps if s.role}
    assert roles["k_rep"].axes == roles["v_rep"].axes == ("B", "h", "S", "d")
    unsqueezed = next(s for s in t.steps if s.op == "getitem")
    assert unsqueezed.axes == ("B", "g", "1", "S", "d")
    assert roles["weights"].axes == ("B", "h", "S", "S")


def test_check_trace_into_checks_the_steps_inside_the_package(tmp_path: Path) -> None:
    path = _wrapper(tmp_path, "llama")
    args = [
        "check",
        "--trace",
        f"{path}:Attn",
        "--batch",
        "2",
        "--seq",
        "5",
        "--hidden",
        "64",
        "--into",
        "transformers",
        "--expect",
        "k_rep=B,h,S,d",
    ]
    ok = runner.invoke(app, [*args, "--expect", "weights=B,h,S,S"])
    assert ok.exit_code == 0, ok.stderr
    wrong = runner.invoke(app, [*args, "--expect", "weights=B,h,S,d"])
    assert wrong.exit_code == 1
    alone = runner.invoke(app, ["check", "--into", "transformers", "--expect", "weights=h,S,S"])
    assert alone.exit_code == 2
    assert alone.stderr == (
        "attntrace: error: --into needs --trace: it names a package whose code --trace records\n"
    )
