"""``run --past N --page-size P``: the paged KV cache (vLLM's blocks of P tokens) as steps of
the trace, after the step's own: where each sequence's keys and values live, and the gather
that rebuilds them.

=============  ========================  ====================================================
step           shape                     what
=============  ========================  ====================================================
block_table    (B, ⌈(N+S)/P⌉) int32      the pool blocks of each sequence, in order
k_pool         (num_blocks, P, g, d)     every sequence's keys (k_all) in blocks of P tokens
v_pool         (num_blocks, P, g, d)     the values alike
k_paged        (B, g, N+S, d)            k_pool[block_table[b]] flattened to tokens, cut to
                                         the sequence's length: equal to k_all
v_paged        (B, g, N+S, d)            the values alike: equal to v_all
=============  ========================  ====================================================

With ``--key-lengths`` each sequence keeps its own length L_b (⌈L_b/P⌉ blocks; the table's
unused entries are -1) and its gathered keys beyond L_b are zeros. Blocks are handed out in
order: sequence 0's first, then sequence 1's.

Every command that takes ``--page-size`` (run, report, check, verify) checks it with
:func:`check_page_size` before tracing and adds the steps with :func:`paged_steps`.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from attntrace.engine.serving import MAX_PAGE_SIZE, NEEDS_PAST, check_page_size, paged_figures

if TYPE_CHECKING:
    import numpy as np

    from attntrace.trace import Trace

__all__ = [
    "MAX_PAGE_SIZE",
    "NEEDS_PAST",
    "PAGED_STEPS",
    "check_page_size",
    "paged_steps",
    "with_paged_steps",
]

#: The steps --page-size adds, in order.
PAGED_STEPS: tuple[str, ...] = ("block_table", "k_pool", "v_pool", "k_paged", "v_paged")


def paged_steps(trace: Trace, page_size: int | None) -> Trace:
    """``trace`` with the paged cache's steps when ``page_size`` is given (else ``trace``):
    the one call run, report, check and verify make.

    >>> from attntrace import AttentionConfig, trace_attention
    >>> t = trace_attention(AttentionConfig(seq=1, past=5, hidden=8, heads=2), "shape")
    >>> paged_steps(t, None) is t, paged_steps(t, 4)["block_table"].shape
    (True, (2,))
    """
    return trace if page_size is None else with_paged_steps(trace, page_size)


def with_paged_steps(trace: Trace, page_size: int) -> Trace:
    """``trace`` (a ``--past`` step) with the paged cache's steps appended.

    >>> from attntrace import AttentionConfig, trace_attention
    >>> config = AttentionConfig(batch=2, seq=1, past=9, hidden=16, heads=2, causal=True)
    >>> paged = with_paged_steps(trace_attention(config), 4)
    >>> [(s.name, s.shape) for s in paged.steps[-5:]]  # doctest: +NORMALIZE_WHITESPACE
    [('block_table', (2, 3)), ('k_pool', (6, 4, 2, 8)), ('v_pool', (6, 4, 2, 8)),
     ('k_paged', (2, 2, 10, 8)), ('v_paged', (2, 2, 10, 8))]
    >>> paged["block_table"].value.tolist()
    [[0, 1, 2], [3, 4, 5]]
    """
    from attntrace.trace import Step

    config = trace.config
    check_page_size(page_size, config)
    figures = paged_figures(config, page_size)
    k_all, v_all = trace["k_all"], trace["v_all"]
    batched = config.batch is not None
    lead = ("B",) if batched else ()
    table_shape = figures.table_shape if batched else figures.table_shape[1:]
    gathered = tuple(k_all.shape)
    values = _values(figures, k_all.value, v_all.value, batched)
    keys_ax = k_all.axes
    pool_ax = ("num_blocks", "P", keys_ax[-3], "d")  # g, or h without GQA
    made = [
        ("block_table", table_shape, "int32", (*lead, "blocks"), "blocks of each sequence", ()),
        ("k_pool", figures.pool_shape, k_all.dtype, pool_ax, "k_all in blocks of P", ("k_all",)),
        ("v_pool", figures.pool_shape, v_all.dtype, pool_ax, "v_all in blocks of P", ("v_all",)),
        ("k_paged", gathered, k_all.dtype, keys_ax, _GATHER.format("k"), ("block_table", "k_pool")),
        ("v_paged", gathered, v_all.dtype, keys_ax, _GATHER.format("v"), ("block_table", "v_pool")),
    ]
    start = len(trace.steps)
    steps = tuple(
        Step(
            name,
            tuple(shape),
            dtype,
            values.get(name),
            index=start + i,
            op=op,
            axes=axes,
            inputs=inputs,
        )
        for i, (name, shape, dtype, axes, op, inputs) in enumerate(made)
    )
    return dataclasses.replace(trace, steps=(*trace.steps, *steps))


_GATHER = "gather({0}_pool, block_table) -> (B, g, L_b, d)"


def _values(
    figures: Any, k: np.ndarray | None, v: np.ndarray | None, batched: bool
) -> dict[str, np.ndarray]:
    """The values of the paged steps from k_all and v_all (none on the shape backend)."""
    import numpy as np

    if k is None or v is None:
        return {}
    P, blocks, lengths = figures.page_size, figures.blocks, figures.lengths
    k4, v4 = (a if batched else a[None] for a in (k, v))  # (B, g, N+S, d)
    table = np.full(figures.table_shape, -1, dtype=np.int32)  # (B, ⌈L/P⌉)
    k_pool = np.zeros(figures.pool_shape, dtype=k.dtype)  # (num_blocks, P, g, d)
    v_pool = np.zeros(figures.pool_shape, dtype=v.dtype)  # (num_blocks, P, g, d)
    first = 0
    for b, (n, length) in enumerate(zip(blocks, lengths, strict=True)):
        table[b, :n] = np.arange(first, first + n)
        for pool, src in ((k_pool, k4), (v_pool, v4)):
            tokens = src[b, :, :length].transpose(1, 0, 2)  # (L_b, g, d)
            flat = pool[first : first + n].reshape(n * P, *pool.shape[2:])  # (n·P, g, d) view
            flat[:length] = tokens
        first += n
    gathered = []
    for pool in (k_pool, v_pool):
        out = np.zeros_like(k4)  # (B, g, N+S, d)
        for b, (n, length) in enumerate(zip(blocks, lengths, strict=True)):
            tokens = pool[table[b, :n]].reshape(n * P, *pool.shape[2:])[:length]  # (L_b, g, d)
            out[b, :, :length] = tokens.transpose(1, 0, 2)  # (g, L_b, d)
        gathered.append(out if batched else out[0])
    return {
        "block_table": table if batched else table[0],
        "k_pool": k_pool,
        "v_pool": v_pool,
        "k_paged": gathered[0],
        "v_paged": gathered[1],
    }
