"""The backend interface in two parts: the core operations every backend implements, and the
optional fast path (attntrace.backends.base.FastPath) that numpy and torch add. A backend of the
core alone traces every algorithm, through the same operations made of its core ones."""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np
import pytest

from attntrace import AttentionConfig, trace_attention
from attntrace.backends import get_backend
from attntrace.backends.base import Backend, CoreFastPath, FastPath, fast_path
from attntrace.backends.numpy_backend import NumpyBackend

#: The speed variants: none of them is a core operation.
FAST_PATH = {
    "softmax_",
    "empty",
    "stand_in",
    "contiguous",
    "transposed_copy",
    "matmul_into",
    "scale_",
    "softmax_into",
    "softmax_sums_",
    "divide_into",
    "unshifted_range",
    "slices_exactly",
    "fused_attention",
    "one_thread_each",
}


def _is_operation(name: str, member: object) -> bool:
    """A public method or property (``softmax_`` is one; ``__init__`` is not)."""
    public = not name.startswith("_") or (name.endswith("_") and not name.endswith("__"))
    return public and (callable(member) or isinstance(member, property))


def _operations(cls: type) -> set[str]:
    """The operations a class defines or inherits."""
    return {name for name, member in inspect.getmembers(cls) if _is_operation(name, member)}


def _core_only() -> Backend[np.ndarray]:
    """A computing backend of the core operations alone: each abstract method of
    :class:`Backend` handed to numpy's backend, nothing more."""
    numpy = NumpyBackend()

    def hand_over(name: str) -> Any:
        return lambda self, *args, **kwargs: getattr(numpy, name)(*args, **kwargs)

    methods = {name: hand_over(name) for name in Backend.__abstractmethods__}
    cls = type("CoreOnly", (Backend,), {"name": "core", "dtypes": numpy.dtypes, **methods})
    backend: Backend[np.ndarray] = cls()
    return backend


def test_the_core_and_the_fast_path_share_no_operation() -> None:
    core = _operations(Backend)
    assert not core & FAST_PATH
    assert 20 <= len(core) <= 30  # the handful of operations the algorithm is written with
    assert {name for name, member in vars(FastPath).items() if _is_operation(name, member)} == (
        FAST_PATH
    )


@pytest.mark.parametrize("name", ["numpy", "torch"])
def test_numpy_and_torch_implement_the_fast_path(name: str) -> None:
    if name == "torch":
        pytest.importorskip("torch")
    backend = get_backend(name)
    assert isinstance(backend, FastPath)
    assert fast_path(backend) is backend


def test_the_shape_backend_implements_the_core_alone() -> None:
    shape = get_backend("shape")
    assert not isinstance(shape, FastPath)
    assert not FAST_PATH & _operations(type(shape))
    assert isinstance(fast_path(shape), CoreFastPath)


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"causal": True, "softcap": 20.0},
        {"key_lengths": (40, 23), "kv_heads": 2},
        {"causal": True, "algorithm": "flash", "block_size": 16},
    ],
)
def test_a_backend_of_the_core_alone_traces_what_numpy_traces(options: dict[str, Any]) -> None:
    core = _core_only()
    assert not isinstance(core, FastPath)
    cfg = AttentionConfig(batch=2, seq=40, hidden=32, heads=4, **options)
    got, want = trace_attention(cfg, core, threads=2), trace_attention(cfg)
    assert [(s.name, s.shape, s.op, s.flops, s.inputs) for s in got] == [
        (s.name, s.shape, s.op, s.flops, s.inputs) for s in want
    ]
    for step in want:  # the same maths, some of it in other kernels (the fast path's)
        np.testing.assert_allclose(got[step.name].value, step.value, rtol=2e-5, atol=1e-6)


def test_the_core_fallback_keeps_the_bits_of_the_core_operations() -> None:
    numpy = NumpyBackend()
    fast = CoreFastPath(numpy)
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((2, 5, 3), np.float32), rng.standard_normal((2, 3, 4), np.float32)
    out = fast.empty((2, 5, 4), "float32")
    fast.matmul_into(a, b, out)
    np.testing.assert_array_equal(out, numpy.matmul(a, b))
    weights = fast.empty((2, 5, 4), "float32")
    fast.softmax_into(out.copy(), weights)
    np.testing.assert_array_equal(weights, numpy.softmax(out))
    np.testing.assert_array_equal(fast.softmax_(out.copy(), 0.5), numpy.softmax(out * 0.5))
    np.testing.assert_array_equal(fast.transposed_copy(b), np.swapaxes(b, -2, -1))
    assert fast.transposed_copy(b).flags.c_contiguous
    assert fast.softmax_sums_(out) is None
    assert fast.fused_attention(a, a, a, 1.0, None, False) is None
    assert fast.unshifted_range("float32", 4) == 0.0
    assert not fast.slices_exactly
    with fast.one_thread_each():
        pass
