"""``--cache FILE``: the KV cache a --past step reads, from a ``.npz`` (read with
``allow_pickle=False``) or a ``.safetensors`` file; never unpickled.

Names, tried in order for layer L (``--layer``, default 0): ``k_all``/``v_all`` (``run --save``
of the previous step: the keys after its append are the next step's cache), ``k_cache``/
``v_cache``, ``k_cache.L``/``v_cache.L``, ``layers.L.k_cache``/``layers.L.v_cache``,
``key_cache.L``/``value_cache.L`` (a Hugging Face ``DynamicCache``'s layers saved with
``save_file``). Each is (B, g, N, d), or (g, N, d) without --batch.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from attntrace.errors import InputFileError

if TYPE_CHECKING:
    import numpy as np

#: The suffixes --cache reads.
CACHE_SUFFIXES = (".npz", ".safetensors")


def cache_names(layer: int = 0) -> list[tuple[str, str]]:
    """The (key, value) names looked for, in order.

    >>> cache_names(2)[2:4]
    [('k_cache.2', 'v_cache.2'), ('layers.2.k_cache', 'layers.2.v_cache')]
    """
    return [
        ("k_all", "v_all"),  # a --save'd step: the cache after its append, not the one it read
        ("k_cache", "v_cache"),
        (f"k_cache.{layer}", f"v_cache.{layer}"),
        (f"layers.{layer}.k_cache", f"layers.{layer}.v_cache"),
        (f"key_cache.{layer}", f"value_cache.{layer}"),
    ]


def read_cache(path: Path, layer: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The keys and values of layer ``layer`` in the cache file ``path``.

    >>> import numpy as np, tempfile, pathlib
    >>> f = pathlib.Path(tempfile.mkdtemp()) / "c.npz"
    >>> np.savez(f, **{"key_cache.0": np.ones((2, 5, 4)), "value_cache.0": np.zeros((2, 5, 4))})
    >>> k, v = read_cache(f)
    >>> k.shape, float(v.sum())
    ((2, 5, 4), 0.0)
    """
    from attntrace.files.readers import read_arrays

    if path.suffix.lower() not in CACHE_SUFFIXES:
        raise InputFileError(
            f"--cache {path}: give a .npz or .safetensors file with k_cache and v_cache"
        )
    arrays, _ = read_arrays(path)
    for k_name, v_name in cache_names(layer):
        if k_name in arrays and v_name in arrays:
            k, v = arrays[k_name], arrays[v_name]
            if k.shape != v.shape or k.ndim not in (3, 4):
                raise InputFileError(
                    f"--cache {path}: {k_name} {tuple(k.shape)} and {v_name} {tuple(v.shape)} "
                    "must both be (B, g, N, d), or (g, N, d) without --batch"
                )
            for name, a in ((k_name, k), (v_name, v)):
                if a.dtype.kind not in "fiu":  # strings, complex, dates, bools: no keys
                    raise InputFileError(
                        f"--cache {path}: {name} holds {a.dtype.name}; save the keys and "
                        "values as floating-point arrays (float32, float16, bfloat16)"
                    )
            return k, v
    wanted = ", ".join(f"{k}/{v}" for k, v in cache_names(layer))
    raise InputFileError(f"--cache {path}: no keys and values of layer {layer}; name them {wanted}")
