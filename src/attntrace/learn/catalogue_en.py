"""The English messages: what each step does and why its shape is what it is.

Keys are step names (``scores``), a step name and its variant (``scaled.none``), an extra
sentence a variant adds to a step (``extra.grouped``), or a word of the interface (``ui.step``).
Placeholders are the run's figures (:func:`attntrace.learn.words.step_facts`). Every key here
exists in every other catalogue, with the same placeholders (a test checks).
"""

from __future__ import annotations

MESSAGES: dict[str, str] = {
    # --- the chain of the study notes ----------------------------------------------------------
    "x": "The input: each of the {S} tokens is a vector of {H} numbers (its embedding), one row "
    "per token: {shape}.",
    "x_kv": "The sequence the queries read from (cross-attention): {N} tokens of {M} numbers "
    "each, {shape}. Keys and values are made from it, queries from x.",
    "q_proj": "Multiplies each token's {H} numbers by the weight w_q (one linear layer for every "
    "token at once) to make its query, what the token looks for: {src} → {shape}.",
    "k_proj": "Makes each token's key, what the token offers to be found by, with the weight "
    "w_k: {src} → {shape}.",
    "v_proj": "Makes each token's value, the content it passes on when it is attended to, with "
    "the weight w_v: {src} → {shape}.",
    "q_heads": "Splits the {hd} features of each of the {S} tokens into {h} heads of {d} "
    "({h} × {d} = {hd}): {src} → {shape}. A view: no number moves.",
    "k_heads": "Splits each token's key into {g} heads of {d}: {src} → {shape}. A view: no "
    "number moves.",
    "v_heads": "Splits each token's value into {g} heads of {d}: {src} → {shape}. A view: no "
    "number moves.",
    "q": "Swaps the token and head axes so that each of the {h} heads holds its own {S} × {d} "
    "matrix and works like a separate batch: {src} → {shape}.",
    "k": "Swaps the token and head axes: each of the {g} key heads holds its own {N} × {d} "
    "matrix: {src} → {shape}.",
    "v": "Swaps the token and head axes: each of the {g} value heads holds its own {N} × {d} "
    "matrix: {src} → {shape}.",
    "k_t": "Transposes the last two axes of every key head, {N} × {d} → {d} × {N}, so that "
    "q @ k_t multiplies each query row by each key column: {src} → {shape}.",
    "scores": "The similarity scores: the dot product of every query with every key, {d} "
    "products summed per pair. Row i, column j: how well token i's query matches token j's "
    "key. {in0} @ {in1} → {shape}.",
    "scaled": "Divides every score by √{d} = {sqrt_d} so that the dot products of {d} numbers "
    "keep a variance near 1 and the softmax does not saturate: {shape}, shape unchanged.",
    "scaled.none": "Multiplies the scores by 1: unscaled, as the study notes' example. With "
    "d = {d} they spread about √{d} = {sqrt_d} times wider than scaled ones: {shape}.",
    "scaled.custom": "Multiplies every score by the model's scale {scale} (instead of 1/√{d} = "
    "{inv_sqrt_d}): {shape}, shape unchanged.",
    "weights": "Softmax along each row (normalisation): the exponential of every score "
    "divided by the sum of the exponentials of its row. Row i: how much token i attends to "
    "each of the {N} tokens; every row sums to 1: {shape}.",
    "context": "The weighted sum of the values: row i of each head is token i's {N} weights "
    "times the {N} value rows, a mix of what every token offers. {in0} @ {in1} → {shape}.",
    "context.flash": "The heads' output, {shape}, filled block of {Br} query rows by block by "
    "o_block: flash attention never holds the whole {S} × {N} weight matrix.",
    "context_heads": "Swaps heads and tokens back, so that each token holds its {h} heads "
    "again: {src} → {shape}.",
    "merged": "Concatenates the {h} heads of {d} numbers of each token into one vector of {hd}: "
    "{src} → {shape}.",
    "output": "The output layer w_o mixes the heads' results into each token's new {H} numbers: "
    "{src} → {shape}, the shape of x.",
    # --- variants ------------------------------------------------------------------------------
    "k_rep": "Grouped-query attention: each of the {g} key heads serves {r} query heads, so it "
    "is repeated {r} times to line up with the {h} query heads: {src} → {shape}.",
    "v_rep": "Each of the {g} value heads is repeated {r} times, one copy per query head it "
    "serves: {src} → {shape}.",
    "rope_cos": "RoPE's cosines: position p turns pair i of a head by the angle "
    "p · {base}^(-2i/{d}); one row per position: {shape}.",
    "rope_sin": "RoPE's sines of the same angles, one row per position: {shape}.",
    "q_rot": "Rotates every query by its position's angles (RoPE), so that q · k depends on how "
    "far apart two tokens are: {src} → {shape}, shape unchanged.",
    "k_rot": "Rotates every key by its position's angles (RoPE), as the queries: {src} → "
    "{shape}, shape unchanged.",
    "q_norm": "RMS-normalises each query head over its {d} numbers and multiplies by the learned "
    "weight n_q, which keeps the scores from growing large: {shape}.",
    "q_norm.full": "RMS-normalises each token's whole query projection of {hd} numbers and "
    "multiplies by the learned weight n_q, before the split into heads: {shape}.",
    "k_norm": "RMS-normalises each key head over its {d} numbers and multiplies by the learned "
    "weight n_k: {shape}.",
    "k_norm.full": "RMS-normalises each token's whole key projection of {kvw} numbers and "
    "multiplies by the learned weight n_k, before the split into heads: {shape}.",
    "capped": "Soft-caps the scores: {C} · tanh(score / {C}) keeps every score between -{C} and "
    "{C}, so that no single score dominates the softmax: {shape}.",
    "position_bias": "T5's relative position bias: each head learns one number per distance "
    "bucket ({buckets} buckets, up to distance {max_distance}); entry (i, j) is the bias of "
    "distance j - i: {shape}.",
    "position_bias.alibi": "ALiBi's position bias: head h adds slope_h · (j - i), a fixed "
    "penalty that grows with the distance of key j behind query i (slopes {slope_first} for the "
    "first head down to {slope_last} for the last, nothing learned): {shape}.",
    "biased": "Adds the position bias to the scores, so that attention depends on how far apart "
    "two tokens are: {in0} + {in1} → {shape}.",
    "mask": "The mask says which keys each query may see ({op}): {shape}, the same for every head.",
    "masked": "Puts -inf where the mask hides a key, so that the softmax gives that key a "
    "weight of exactly 0: {shape}.",
    "masked.additive": "Adds the mask's numbers to the scores (0 keeps a key, a large negative "
    "number hides it): {shape}.",
    # --- flash attention: tile by tile ---------------------------------------------------------
    "q_block": "Flash attention takes {Br} query rows at a time ({blocks} blocks): {shape}.",
    "q_scaled": "The query block multiplied by the scale {scale} once, before the products, "
    "instead of scaling every score: {shape}.",
    "k_block": "A block of {Bc} keys; every query block meets every key block ({tiles} tiles "
    "in all): {shape}.",
    "v_block": "The block of {Bc} values that goes with the key block: {shape}.",
    "k_block_t": "The key block transposed, {Bc} × {d} → {d} × {Bc}: {shape}.",
    "s_tile": "One tile of the scores, {Br} queries × {Bc} keys: {shape}. Only one tile lives at "
    "a time, never the whole {S} × {N} matrix ({tiles} tiles).",
    "s_capped": "Soft-caps the tile's scores to between -{C} and {C}: {shape}.",
    "bias_tile": "The position bias of this tile's (query, key) pairs: {shape}.",
    "s_biased": "The tile's scores plus their position bias: {shape}.",
    "mask_tile": "The part of the mask for this tile, made from the rules ({op}): {shape}.",
    "s_masked": "-inf where the tile's mask hides a key: {shape}.",
    "m": "The running maximum of each query row over the key blocks seen so far: {shape}. The "
    "softmax subtracts it, so that exp never overflows.",
    "p_tile": "exp(score − running maximum) for the tile: the softmax's numerators, not yet "
    "divided: {shape}.",
    "alpha": "exp(old maximum − new maximum): rescales what was summed before when a larger "
    "maximum appears: {shape}.",
    "l": "The running sum of each row's numerators, the softmax's denominator: {shape}.",
    "o_acc": "The running weighted sum of the values: the old sum times alpha plus "
    "p_tile @ v_block: {shape}.",
    "o_block": "The block's output: the weighted sum divided by the row sums l, which is "
    "softmax(scores) @ v exactly: {shape}.",
    # --- sentences a variant adds to a step ----------------------------------------------------
    "extra.batch": "The leading {B} is the batch: {B} sequences go through at once, each on its "
    "own.",
    "extra.grouped": "With {g} key/value heads for {h} query heads, keys and values are {kvw} "
    "wide, {r} times narrower than the queries (a smaller KV cache).",
    "extra.cross": "Keys and values come from x_kv, {N} tokens, not from x.",
    "extra.causal": "Causal: token i sees tokens 0 to i only, never a later one.",
    "extra.window": "Sliding window: token i sees only the last {W} tokens (j > i − {W}).",
    "extra.padding": "Key padding: batch item b sees only its first lengths[b] keys, "
    "lengths = {lengths}; the rest is padding.",
    "extra.mask_file": "The user's mask file decides for the rest.",
    "extra.weights_masked": "Hidden keys get a weight of exactly 0.",
    "extra.partial_rope": "Only the first {R} of the {d} numbers of a head rotate; the rest "
    "pass unchanged.",
    "extra.interleaved": "The rotated pairs are neighbours (2i, 2i + 1).",
    "extra.tiles": "Runs {tiles} times, once per tile; the shape is one tile's.",
    # --- demo: the notes' worked example ------------------------------------------------------
    "demo.title_plain": "1. As the notes compute it: weights = softmax(Query @ Key.T), no scaling",
    "demo.title_scaled": "2. Scaled as in the Transformer: softmax(Query @ Key.T / √{d}), factor "
    "{factor}",
    "demo.why_title": "What the scaling changes, and why",
    "demo.given": "given",
    "demo.Query": "Row i: what token i looks for ({S} tokens × {d} numbers).",
    "demo.Key": "Row j: what token j offers to be found by ({N} tokens × {d} numbers).",
    "demo.Value": "Row j: what token j passes on when attended to ({N} tokens × {dv} numbers).",
    "demo.scores": "Row i, column j: query i · key j, the similarity score: ({S}, {d}) @ "
    "({d}, {N}) → ({S}, {N}).",
    "demo.scaled": "Every score times 1/√{d} = {factor}: the order in a row stays, the spread "
    "shrinks.",
    "demo.weights": "Softmax of each row: exp(score) divided by the row's sum of exp; every row "
    "sums to 1.",
    "demo.output": "Row i: token i's weights times the Value rows, a weighted average: "
    "({S}, {N}) @ ({N}, {dv}) → ({S}, {dv}).",
    "demo.divided": "Every score is divided by √d = √{d} = {sqrt_d}; the order of the scores in "
    "a row stays the same.",
    "demo.peaked": "The softmax becomes less peaked: the largest weight of each row goes "
    "{changes}, so each output mixes more of the other Value rows.",
    "demo.why": "Why it exists: with query and key entries of variance 1, a dot product of d of "
    "them has variance d. For d = 64 the scores spread about ±8, softmax saturates to nearly "
    "one-hot and its gradients vanish. Dividing by √d brings the variance back to 1 whatever d "
    "is.",
    "demo.overflow": "The notes' soft_max computes exp(z) directly: for the row [1000, 1000] it "
    "gives {note} (exp overflows to inf, inf/inf = nan). attntrace subtracts the row maximum "
    "first and gives {ours}.",
    # --- the interface -------------------------------------------------------------------------
    # --- a decode step (--past N): the KV cache -------------------------------------------------
    "k.past": "Swaps the token and head axes of the {S} new tokens' keys: each of the {g} key "
    "heads holds a {S} × {d} matrix, which goes after the cache: {src} → {shape}.",
    "v.past": "Swaps the token and head axes of the {S} new tokens' values: each of the {g} "
    "value heads holds a {S} × {d} matrix, which goes after the cache: {src} → {shape}.",
    "k_cache": "The key cache: the keys of the {P} earlier tokens, computed in earlier steps "
    "and kept, one {P} × {d} matrix per key head: {shape}. Nothing is computed for them again.",
    "v_cache": "The value cache: the values of the {P} earlier tokens, one {P} × {d} matrix "
    "per value head: {shape}.",
    "k_all": "Appends the {S} new keys after the {P} cached ones on the token axis: {in0} and "
    "{in1} → {shape}. This is the cache after the step; the new tokens sit at positions {P} "
    "and on.",
    "v_all": "Appends the {S} new values after the {P} cached ones: {in0} and {in1} → {shape}.",
    # --- the backward (--backward) ---------------------------------------------------------------
    "backward": "Backward pass: the gradient of the loss with respect to {of}, the same shape "
    "as {of}: {shape}, computed as {op}.",
    "lse": "Flash keeps, for its backward, the log-sum-exp of each query row's scores, "
    "m + log(l): {shape}, one number per row instead of the {S} × {N} weights.",
    "delta": "Backward pass (flash): each query row's sum of d_context ⊙ context, {shape}; "
    "it stands for rowsum(d_weights ⊙ weights) of the softmax backward without the weights.",
    "s_again": "Backward pass (flash): one tile of scores made again from q and k, {Br} queries "
    "× {Bc} keys: {shape}, computed as {op}.",
    "p_again": "Backward pass (flash): the weights of that tile made again from the kept "
    "log-sum-exp, no row max or sum needed: {shape}, computed as {op}.",
    "ui.report_flow": "Data flow",
    "ui.report_steps": "Steps",
    "ui.report_weights": "Attention weights",
    "ui.report_costs": "Costs",
    "ui.report_config": "Config",
    "ui.where_head": "head {head}",
    "ui.where_item": "head {head} of batch item {item}",
    "ui.weights_rule": "each row sums to 1",
    "ui.weights_rule_masked": "masked keys: ·; each row sums to 1, or 0 if every key is masked",
    "ui.weights_title": "attention weights, {where} (rows: queries, columns: keys; {rule})",
    "ui.weights_none": "attention weights, {where}: {why}",
    "ui.weights_no_values": "no values on the {backend} backend",
    "ui.weights_tiled": "never formed whole by --algorithm {algorithm} (tile by tile)",
    "ui.unknown": "{name} = {op}: {shape}, axes {axes}.",
    "ui.explanations": "what each step does",
    "ui.explanation": "explanation",
    "ui.step": "step",
    "ui.op": "op",
    "ui.shape": "shape",
    "ui.axes": "axes",
    "ui.dtype": "dtype",
    "ui.steps_title": "steps (every tensor {dtype})",
    "ui.steps_title_mixed": "steps ({dtype} unless the dtype column says otherwise)",
    "ui.attention_weights": "attention weights",
    "ui.head": "head",
    "ui.query": "query",
    "ui.key": "key",
    "ui.role": "role",
    "ui.line": "line",
    "ui.costs_title": "costs ({unit}; 1 MAC = 2 FLOPs)",
    "ui.costs_caption": "peak: activations alive at once; parameters {params}; KV cache {kv} per "
    "token ({dtype})",
    "ui.peak": "peak {bytes}",
    "ui.total": "total",
    "ui.formula": "formula",
    "ui.bytes": "bytes",
    "ui.tiles": "tiles",
    "ui.parameters": "parameters",
    "ui.name": "name",
    "ui.count": "count",
    # --- across devices (issue 43): the figures are one rank's ----------------------------------
    "x_all_gather": "Sequence parallelism: each of the {TP} ranks of the tensor-parallel group "
    "holds 1/{TP} of the tokens; the all-gather hands every rank all of them before the "
    "column-parallel projections: {src} → {shape}.",
    "o_partial": "The row-parallel output layer: this rank multiplies its {h} heads' {hd} numbers "
    "by its columns of w_o, a partial sum of the output: {src} → {shape}. The {TP} ranks' partial "
    "sums add up to the output.",
    "o_all_reduce": "All-reduce over the {TP} ranks of the tensor-parallel group: every rank gets "
    "the sum of their partial outputs, the layer's output for its tokens: {shape}.",
    "o_reduce_scatter": "Reduce-scatter over the {TP} ranks: the partial outputs are summed and "
    "each rank keeps 1/{TP} of the tokens (sequence parallelism): {src} → {shape}.",
    "k_all_gather": "Context parallelism by all-gather: every rank gets the keys of the tokens "
    "of all {CP} ranks: {src} → {shape}.",
    "v_all_gather": "Context parallelism by all-gather: every rank gets the values of the tokens "
    "of all {CP} ranks: {src} → {shape}.",
    "k_ring_recv": "Ring attention: the block of keys moves one rank along the ring of {CP} "
    "ranks (sent to the next, received from the previous) before each round: {shape}.",
    "v_ring_recv": "Ring attention: the block of values moves one rank along the ring of {CP} "
    "ranks, beside the keys: {shape}.",
    "q_all_to_all": "Ulysses: an all-to-all over the {CP} ranks swaps the sequence shard for a "
    "head shard, this rank's tokens of its heads for every token of 1/{CP} of them: "
    "{src} → {shape}.",
    "k_all_to_all": "Ulysses: the keys' all-to-all, every token of 1/{CP} of the kv-heads: "
    "{src} → {shape}.",
    "v_all_to_all": "Ulysses: the values' all-to-all, every token of 1/{CP} of the kv-heads: "
    "{src} → {shape}.",
    "k_rep_a2a": "Fewer kv-heads than the {CP} ranks: each is copied so that the all-to-all hands "
    "every rank the one its query heads read: {src} → {shape}.",
    "v_rep_a2a": "The values' kv-heads copied as the keys' are, for the all-to-all: "
    "{src} → {shape}.",
    "context_full": "The weighted sum of the values for every token, on this rank's share of the "
    "heads (Ulysses): {in0} @ {in1} → {shape}.",
    "context_all_to_all": "Ulysses' second all-to-all: the context goes back to this rank's own "
    "tokens and all its heads: {src} → {shape}.",
    "lse.ring": "The log-sum-exp of each query row's scores in this block, "
    "max + log(sum(exp(s - max))): {shape}, what merging the blocks' results needs.",
    "lse_merged": "The running log-sum-exp after this round: the logaddexp of the one so far and "
    "the block's, {shape}.",
    "context_merged": "The running context after this round: each result weighted by the exp of "
    "its log-sum-exp minus the merged one, which equals attention over every key seen so far: "
    "{shape}.",
    "output.tp": "The layer's output for this rank's tokens: the sum of the {TP} ranks' partial "
    "outputs, with the bias b_o added once, after the sum: {shape}.",
    "context_all_gather": "Decoding across ranks: every rank's partial context, the new "
    "tokens attended to its share of the cache, gathered from the {CP} ranks: {src} → {shape}.",
    "lse_all_gather": "The log-sum-exps of the {CP} ranks' partial results, gathered beside "
    "them: {src} → {shape}; merging by them gives attention over the whole cache.",
}
