"""The paged layout's figures against a hand count (issue 34): a batch of 2 with grouped-query
attention and sequences of different lengths (--key-lengths) in blocks of P tokens: blocks per
sequence, the block table (-1 for unused entries), the waste in each last block, pool and
table bytes, and the pool's contents slot by slot."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from attntrace import AttentionConfig, trace_attention
from attntrace.engine.masks import MaskWarning
from attntrace.engine.paged import MAX_PAGE_SIZE, NEEDS_PAST, check_page_size, paged_steps
from attntrace.engine.serving import paged_figures
from attntrace.errors import ConfigError

# h=4 query heads over g=2 key/value heads, d=16/4=4; N+S = 9+1 = 10 keys; lengths 10 and 3
GQA = AttentionConfig(
    batch=2, seq=1, past=9, hidden=16, heads=4, kv_heads=2, causal=True, key_lengths=(10, 3)
)


def test_blocks_table_waste_and_bytes_by_hand() -> None:
    p = paged_figures(GQA, 4)
    assert p.lengths == (10, 3)
    assert p.blocks == (3, 1)  # ⌈10/4⌉, ⌈3/4⌉
    assert p.table_shape == (2, 3)  # B rows of the longest sequence's blocks
    assert p.pool_shape == (4, 4, 2, 4)  # 3 + 1 blocks of P=4 tokens, g=2, d=4
    assert p.gathered_shape == (2, 2, 10, 4)
    assert p.waste_tokens == (12 - 10) + (4 - 3) == 3
    slot = 2 * 2 * 4 * 4  # k and v, g=2, d=4, float32: 64 bytes a token
    assert p.pool_bytes == 4 * 4 * slot == 1024
    assert p.waste_bytes == 3 * slot == 192
    assert p.padded_bytes == 2 * 10 * slot == 1280  # contiguous, padded to 10 tokens
    assert p.table_bytes == 2 * 3 * 4 == 24  # int32
    assert p.pool_bytes - p.waste_bytes == (10 + 3) * slot  # what the tokens hold


@pytest.mark.parametrize(
    ("page", "blocks", "waste"),
    [
        (1, (10, 3), 0),  # one token a block: no waste, a table as long as the sequence
        (3, (4, 1), (12 - 10) + (3 - 3)),
        (10, (1, 1), 0 + 7),
        (16, (1, 1), 6 + 13),  # a block longer than every sequence
    ],
)
def test_every_page_size_by_hand(page: int, blocks: tuple[int, int], waste: int) -> None:
    p = paged_figures(GQA, page)
    assert (p.blocks, p.waste_tokens) == (blocks, waste)
    assert p.pool_shape == (sum(blocks), page, 2, 4)
    assert p.table_shape == (2, max(blocks))


def test_float16_halves_the_bytes() -> None:
    half = paged_figures(dataclasses.replace(GQA, dtype="float16"), 4)
    assert half.pool_bytes == 1024 // 2
    assert half.table_bytes == 24  # int32 whatever the cache's dtype


def test_the_steps_hold_what_the_hand_count_says() -> None:
    t = paged_steps(trace_attention(GQA), 4)
    assert t["block_table"].value.tolist() == [[0, 1, 2], [3, -1, -1]]
    assert t["block_table"].dtype == "int32"
    assert t["k_pool"].shape == t["v_pool"].shape == (4, 4, 2, 4)
    assert t["k_pool"].nbytes + t["v_pool"].nbytes == paged_figures(GQA, 4).pool_bytes
    assert t["block_table"].nbytes == paged_figures(GQA, 4).table_bytes
    k, pool = t["k_all"].value, t["k_pool"].value  # (B, g, N+S, d), (blocks, P, g, d)
    for block, (b, first) in enumerate([(0, 0), (0, 4), (0, 8), (1, 0)]):
        length = (10, 3)[b]
        held = min(4, length - first)  # tokens in this block: 4, 4, 2, 3
        np.testing.assert_array_equal(
            pool[block, :held], k[b, :, first : first + held].swapaxes(0, 1)
        )
        assert not pool[block, held:].any()  # the empty slots of a last block
    assert sum(not pool[i, j].any() for i in range(4) for j in range(4)) == 3  # waste_tokens


def test_page_size_is_checked_once_for_every_command() -> None:
    check_page_size(None)
    check_page_size(MAX_PAGE_SIZE, GQA)
    for bad in (0, -1, MAX_PAGE_SIZE + 1, 10**20, True, 2.0):
        with pytest.raises(
            ConfigError, match="--page-size must be a whole number from 1 to 65,536"
        ):
            check_page_size(bad)
    with pytest.raises(ConfigError, match=NEEDS_PAST):
        check_page_size(4, AttentionConfig(seq=3))
    with pytest.raises(ConfigError, match="from 1 to 65,536"):
        paged_figures(GQA, 0)


def test_a_sliding_cache_pages_the_keys_it_holds() -> None:
    # W=3, N=7, S=2: k_all holds W-1+S = 4 keys, positions 5..8; sequences of 9, 6 and 4 tokens
    # hold 4, 1 and none of them (a bug once: the lengths were the positions, 9 > 4 keys)
    config = AttentionConfig(
        batch=3, seq=2, past=7, hidden=16, heads=4, kv_heads=2, window=3, key_lengths=(9, 6, 4)
    )
    p = paged_figures(config, 2)
    assert (p.lengths, p.blocks, p.waste_tokens) == ((4, 1, 0), (2, 1, 0), 1)
    with pytest.warns(MaskWarning, match="attend to no key"):  # the third sequence's rows
        t = paged_steps(trace_attention(config), 2)
    assert t["block_table"].value.tolist() == [[0, 1], [2, -1], [-1, -1]]
    assert t["k_pool"].shape == (3, 2, 2, 4)
    paged, full = t["k_paged"].value, t["k_all"].value  # (B, g, 4, d)
    np.testing.assert_array_equal(paged[0], full[0])
    np.testing.assert_array_equal(paged[1, :, :1], full[1, :, :1])
    assert not paged[1, :, 1:].any()
    assert not paged[2].any()
