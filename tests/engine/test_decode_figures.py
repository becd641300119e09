"""The serving figures of a --past step, counted by hand: FLOPs, bytes read and written (fused
and as traced), arithmetic intensity against the ridge, and the KV cache per token, request and
memory budget."""

from __future__ import annotations

import pytest

from attntrace import AttentionConfig, trace_attention
from attntrace.engine.serving import (
    DEFAULT_BANDWIDTH,
    DEFAULT_PEAK_FLOPS,
    Machine,
    Traffic,
    cache_figures,
    fused_traffic,
    machine,
    paged_figures,
    serving_figures,
    step_traffic,
)
from attntrace.errors import ConfigError

# B=2, S=1, N=8, H=8, h=2, g=1, d=4, float32, no bias, no mask
SMALL = AttentionConfig(batch=2, seq=1, past=8, hidden=8, heads=2, kv_heads=1, bias=False)


def test_fused_figures_of_a_decode_step_by_hand() -> None:
    layer, linear, attention = fused_traffic(trace_attention(SMALL, "shape"))
    f = 4  # bytes of a float32
    x, merged = 2 * 1 * 8 * f, 2 * 1 * 8 * f  # (B, S, H), (B, S, h·d)
    params = (8 * 8 + 4 * 8 + 4 * 8 + 8 * 8) * f  # w_q, w_k, w_v, w_o
    q, k, v, out = 2 * 8 * f, 2 * 4 * f, 2 * 4 * f, 2 * 8 * f  # q_proj, k_proj, v_proj, output
    cache = 2 * (2 * 1 * 8 * 4) * f  # k_cache and v_cache (B, g, N, d)
    assert (linear.read, linear.written) == (x + params + merged, q + k + v + out)
    assert (attention.read, attention.written) == (q + k + v + cache, merged + k + v)
    # 2·B·S·H·(h·d) + 2 x 2·B·S·H·(g·d) + 2·B·S·(h·d)·H
    assert linear.flops == 2 * 2 * 8 * 8 + 2 * (2 * 2 * 8 * 4) + 2 * 2 * 8 * 8
    keys = 8 + 1  # N + S
    scores = 2 * 2 * 2 * 1 * keys * 4  # 2·B·h·S·(N+S)·d, and the same for weights @ v
    assert attention.flops == 2 * scores + 2 * 2 * keys + 5 * 2 * 2 * keys  # + scale + softmax
    assert layer.flops == linear.flops + attention.flops
    assert layer.moved == linear.moved + attention.moved
    assert attention.intensity == attention.flops / (attention.read + attention.written)


def test_each_step_as_traced_reads_its_inputs_and_writes_itself() -> None:
    steps = {t.name: t for t in step_traffic(trace_attention(SMALL, "shape"))}
    f = 4
    # scores reads q (B, h, S, d) and k_t (B, h, d, N+S), writes (B, h, S, N+S)
    assert steps["scores"].read == (2 * 2 * 1 * 4 + 2 * 2 * 4 * 9) * f
    assert steps["scores"].written == 2 * 2 * 1 * 9 * f
    # the append reads the cache (B, g, N, d) and the new key (B, g, S, d), writes (B, g, N+S, d)
    assert steps["k_all"].read == (2 * 8 * 4 + 2 * 1 * 4) * f
    assert steps["k_all"].written == 2 * 9 * 4 * f
    assert steps["k_cache"].written == 0  # an input: counted where it is read
    assert (steps["k_t"].read, steps["k_t"].written) == (0, 0)  # a view moves nothing
    assert steps["q_proj"].read == 2 * 8 * f + 8 * 8 * f  # x and w_q


def test_decode_is_memory_bound_and_prefill_compute_bound() -> None:
    config = AttentionConfig(
        seq=1, past=4095, hidden=4096, heads=32, kv_heads=8, bias=False, dtype="float16"
    )
    f = serving_figures(trace_attention(config, "shape"))
    decode, prefill = f.step[2], f.prefill[2]
    # one query row against the cache: 2 FLOPs per multiply-add, h/g query heads per kv head,
    # 2 bytes an element: about h/g = 4 FLOPs per byte
    assert 3.9 < decode.intensity < 4.2  # (the softmax adds a little)
    assert f.machine.bound(decode) == "memory-bound"
    assert f.machine.bound(prefill) == "compute-bound"
    assert prefill.flops > 4000 * decode.flops


def test_the_ridge_and_the_roofline_time() -> None:
    m = Machine(peak_flops=100.0, bandwidth=10.0)
    assert m.ridge == 10.0
    slow_memory = Traffic(name="a", flops=50, read=20, written=10)  # 2.5 FLOPs/B
    assert m.bound(slow_memory) == "memory-bound"
    assert m.seconds(slow_memory) == 3.0  # 30 B at 10 B/s, over 50 FLOPs at 100 FLOP/s
    busy = Traffic(name="b", flops=1000, read=5, written=5)
    assert (m.bound(busy), m.seconds(busy)) == ("compute-bound", 10.0)
    assert machine() == Machine(
        peak_flops=DEFAULT_PEAK_FLOPS, bandwidth=DEFAULT_BANDWIDTH, name="H100 SXM"
    )


def test_the_kv_cache_of_a_server_by_hand() -> None:
    # llama-3-8b: g=8, d=128, 32 layers; 4,096 tokens a request; float16 = 2 bytes
    config = AttentionConfig(seq=1, past=4095, hidden=4096, heads=32, kv_heads=8)
    c = cache_figures(config, layers=32, memory=80 * 2**30)
    rows = {r.dtype: r for r in c.rows}
    per_token = 32 * 2 * 8 * 128 * 2  # L x (k, v) x g x d x bytes
    assert rows["float16"].per_token == per_token == 131072
    assert rows["float16"].per_request == 4096 * per_token
    assert rows["float16"].fits == 80 * 2**30 // (4096 * per_token) == 160
    assert rows["bfloat16"].per_request == rows["float16"].per_request
    assert rows["float8"].per_token == per_token // 2
    assert rows["float8"].fits == 320


def test_a_sliding_window_caps_what_a_request_holds() -> None:
    config = AttentionConfig(seq=1, past=100_000, hidden=64, heads=4, window=4096)
    (row,) = cache_figures(config, dtypes=("float16",)).rows
    assert row.per_request == 4096 * row.per_token  # W - 1 cached + 1 new


def test_an_unknown_cache_dtype_is_one_line() -> None:
    with pytest.raises(ConfigError, match="--cache-dtype 'int4' is not a cache dtype; use one"):
        cache_figures(SMALL, dtypes=("int4",))


def test_a_paged_cache_by_hand() -> None:
    # a ragged batch of 4,096, 1,000 and 17 tokens in blocks of 16; g=8, d=128, float32
    config = AttentionConfig(
        batch=3, seq=1, past=4095, hidden=4096, heads=32, kv_heads=8, key_lengths=(4096, 1000, 17)
    )
    p = paged_figures(config, 16)
    assert p.blocks == (256, 63, 2)  # ⌈4096/16⌉, ⌈1000/16⌉, ⌈17/16⌉
    assert p.table_shape == (3, 256)
    assert p.pool_shape == (321, 16, 8, 128)
    assert p.gathered_shape == (3, 8, 4096, 128)
    assert p.waste_tokens == (1008 - 1000) + (32 - 17) == 23
    slot = 2 * 8 * 128 * 4  # k and v of one token
    assert p.pool_bytes == 321 * 16 * slot
    assert p.waste_bytes == 23 * slot
    assert p.padded_bytes == 3 * 4096 * slot
    assert p.table_bytes == 3 * 256 * 4
    assert p.pool_bytes == (4096 + 1000 + 17 + 23) * slot


def test_without_key_lengths_every_sequence_holds_n_plus_s() -> None:
    p = paged_figures(AttentionConfig(batch=2, seq=1, past=40, hidden=8, heads=2), 16)
    assert (p.blocks, p.waste_tokens, p.table_shape) == ((3, 3), 2 * 7, (2, 3))
    with pytest.raises(ConfigError, match="--page-size must be a whole number from 1 to 65,536"):
        paged_figures(SMALL, 0)
