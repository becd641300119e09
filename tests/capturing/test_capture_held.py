"""trace of a library attention held by the user's code: the packages it holds are followed
(transformers, torch's MultiheadAttention), nn.Sequential is seen through, a function of x
alone is traced with the width of the modules it reaches, and a transformers class states its
h and d so that a size two axes share is named right (GPT-NeoX's rotary part of d equal to h)."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from attntrace.capturing.held import function_module, held_into  # noqa: E402
from attntrace.capturing.library import build, find_class, known_axes  # noqa: E402
from attntrace.capturing.runner import Inputs, parse_target, run_target  # noqa: E402
from attntrace.capturing.session import capture  # noqa: E402
from attntrace.capturing.torch_inside import MHA  # noqa: E402


def _roles(steps: Any) -> dict[str, Any]:
    return {s.role: s for s in steps if getattr(s, "role", "")}


def test_the_packages_held_are_followed() -> None:
    llama = build(find_class("transformers", "LlamaAttention"), {}, {"hidden": 64, "heads": 4})
    block = torch.nn.Sequential(torch.nn.LayerNorm(64), llama)
    assert held_into(block) == ("transformers",)
    assert held_into(torch.nn.TransformerEncoderLayer(64, 4)) == (MHA,)
    assert held_into(torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())) == ()
    with capture(into=held_into(block)) as t:
        block(torch.randn(2, 5, 64))
    roles = _roles(t.steps)
    assert {"q_proj", "q_rot", "scores", "weights", "context", "output"} <= set(roles)
    assert roles["scores"].location.startswith("modeling_llama.py:")
    assert tuple(roles["weights"].shape) == (2, 4, 5, 5)


def test_a_function_of_x_holds_the_modules_it_reaches() -> None:
    mha = torch.nn.MultiheadAttention(32, 4, batch_first=True)

    def attend(x: torch.Tensor) -> torch.Tensor:
        return mha(x, x, x)[0]  # type: ignore[no-any-return]

    module = function_module(attend)
    assert module is not None
    assert dict(module.named_children()) == {"mha": mha}
    assert torch.equal(module(torch.ones(1, 2, 32)), attend(torch.ones(1, 2, 32)))
    assert function_module(lambda x: x) is None


def test_a_transformers_class_states_h_and_d() -> None:
    neox = build(find_class("transformers", "GPTNeoXAttention"), {}, {"hidden": 64, "heads": 4})
    assert known_axes(neox) == {"h": 4, "d": 16}
    assert known_axes(torch.nn.Linear(2, 2)) == {}
    outcome = run_target(
        parse_target("transformers:GPTNeoXAttention"), {}, Inputs(batch=2, seq=5, hidden=64)
    )
    assert outcome.error is None
    roles = _roles(outcome.capture.steps)  # the rotary part of d is 4 = h: told apart
    assert {"q_rot", "scores", "weights", "context", "merged", "output"} <= set(roles)
    assert tuple(roles["context"].axes) == ("B", "h", "S", "d")


def test_einops_layers_stay_the_users_ops() -> None:
    einops_torch = pytest.importorskip("einops.layers.torch")
    block = torch.nn.Sequential(einops_torch.Rearrange("b s (h d) -> b h s d", h=4))
    assert held_into(block) == ()  # einops' ops are recorded at the user's line already


def test_a_module_given_as_a_default_argument_is_held() -> None:
    proj, last = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)

    def run(x: Any, attn: Any = proj, *, scale: float = 1.0, out: Any = last) -> Any:
        return out(attn(x)) * scale

    wrapped = function_module(run)
    assert wrapped is not None
    assert sorted(n for n, _ in wrapped.named_children()) == ["attn", "out"]
