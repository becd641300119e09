"""A correct multi-head attention in numpy, the way the study notes (001) write it: reshape to
(S, h, d), transpose to (h, S, d), scores @ values, transpose back, reshape to (S, H).
Called as attention(x, params) with params in attntrace's names (weights (out, in))."""

import numpy as np


def soft_max(z):
    t = np.exp(z - np.max(z, axis=-1, keepdims=True))
    a = t / np.expand_dims(np.sum(t, axis=-1), -1)
    return a


def attention(x, params):
    values_length, hidden = x.shape
    num_attention_heads = 4
    attention_head_size = hidden // num_attention_heads
    Query = x @ params["w_q"].T + params["b_q"]
    Key = x @ params["w_k"].T + params["b_k"]
    Value = x @ params["w_v"].T + params["b_v"]
    Query = np.reshape(Query, [values_length, num_attention_heads, attention_head_size])
    Key = np.reshape(Key, [values_length, num_attention_heads, attention_head_size])
    Value = np.reshape(Value, [values_length, num_attention_heads, attention_head_size])
    Query = np.transpose(Query, [1, 0, 2])
    Key = np.transpose(Key, [1, 0, 2])
    Value = np.transpose(Value, [1, 0, 2])
    Key_t = np.transpose(Key, [0, 2, 1])
    scores = Query @ Key_t
    scores = scores / np.sqrt(attention_head_size)
    scores = soft_max(scores)
    out = scores @ Value
    out = np.transpose(out, [1, 0, 2])
    out = np.reshape(out, [values_length, hidden])
    return out @ params["w_o"].T + params["b_o"]



def attention_batched(x, params):
    batch, values_length, hidden = x.shape
    num_attention_heads = 4
    attention_head_size = hidden // num_attention_heads
    shape = [batch, values_length, num_attention_heads, attention_head_size]
    Query = np.reshape(x @ params["w_q"].T + params["b_q"], shape).transpose(0, 2, 1, 3)
    Key = np.reshape(x @ params["w_k"].T + params["b_k"], shape).transpose(0, 2, 1, 3)
    Value = np.reshape(x @ params["w_v"].T + params["b_v"], shape).transpose(0, 2, 1, 3)
    scores = Query @ np.swapaxes(Key, -1, -2) / np.sqrt(attention_head_size)
    weights = soft_max(scores)
    out = np.swapaxes(weights @ Value, 1, 2)
    out = np.reshape(out, [batch, values_length, hidden])
    output = out @ params["w_o"].T + params["b_o"]
    return output
