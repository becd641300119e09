"""中文消息：每一步做什么，以及它的形状为什么是这样（用学习笔记里的词：相似度分数、缩放、
归一化、加权求和、拼接、多头）。

The Chinese messages, key for key as :mod:`attntrace.learn.catalogue_en` (a test checks that
every key and every placeholder exists in both).
"""

from __future__ import annotations

MESSAGES: dict[str, str] = {
    # --- 笔记里的主链 ----------------------------------------------------------------------------
    "x": "输入：{S} 个词，每个词编码为 {H} 维的向量（词嵌入），每行一个词：{shape}。",
    "x_kv": "查询要读取的另一个序列（交叉注意力）：{N} 个词，每个 {M} 维，{shape}。K 和 V 由它"
    "计算，Q 由 x 计算。",
    "q_proj": "通过线性层 w_q 把每个词的 {H} 维特征转换为 Q 向量（查询：这个词在找什么），所有词"
    "一次算完：{src} → {shape}。",
    "k_proj": "通过线性层 w_k 计算每个词的 K 向量（键：这个词能被什么找到）：{src} → {shape}。",
    "v_proj": "通过线性层 w_v 计算每个词的 V 向量（值：被关注时传出去的内容）：{src} → {shape}。",
    "q_heads": "将 Q 分割成 {h} 个头：{S} 个词中每个词的 {hd} 维特征拆成 {h} 个头，每个头 {d} 维"
    "（{h} × {d} = {hd}）：{src} → {shape}。只是 view 维度转换，数据不移动。",
    "k_heads": "将 K 分割成 {g} 个头，每个头 {d} 维：{src} → {shape}。只是 view，数据不移动。",
    "v_heads": "将 V 分割成 {g} 个头，每个头 {d} 维：{src} → {shape}。只是 view，数据不移动。",
    "q": "交换词和头两个维度（transpose），让 {h} 个头各自拥有一个 {S} × {d} 的矩阵，像 "
    "batch 一样分开计算：{src} → {shape}。",
    "k": "交换词和头两个维度：{g} 个 K 头各自拥有一个 {N} × {d} 的矩阵：{src} → {shape}。",
    "v": "交换词和头两个维度：{g} 个 V 头各自拥有一个 {N} × {d} 的矩阵：{src} → {shape}。",
    "k_t": "转置每个 K 头的最后两个维度，{N} × {d} → {d} × {N}，这样 q @ k_t 就是每个查询行乘"
    "每个键列：{src} → {shape}。",
    "scores": "计算 Q 和 K 的点积，作为相似度分数：每对词把 {d} 个乘积相加。第 i 行第 j 列：第 "
    "i 个词对第 j 个词的关注程度（原始权重）。{in0} @ {in1} → {shape}。",
    "scaled": "对相似度分数进行缩放：除以 √{d} = {sqrt_d}，让 {d} 个数的点积方差保持在 1 左右，"
    "softmax 不会饱和（防止梯度消失）：{shape}，形状不变。",
    "scaled.none": "分数乘以 1：不缩放，和笔记里的例子一样。d = {d} 时，分数的分布比缩放后宽约 "
    "√{d} = {sqrt_d} 倍：{shape}。",
    "scaled.custom": "每个分数乘以模型自己的缩放系数 {scale}（而不是 1/√{d} = {inv_sqrt_d}）："
    "{shape}，形状不变。",
    "weights": "对缩放后的分数按行进行 softmax 归一化，得到注意力权重：每个分数取指数，再除以"
    "这一行的指数之和。第 i 行：第 i 个词对 {N} 个词各自的关注程度，每行之和为 1：{shape}。",
    "context": "将注意力权重应用于 V，计算加权求和：每个头的第 i 行 = 第 i 个词的 {N} 个权重乘 "
    "{N} 行 Value，即该词对所有 Value 的加权平均。{in0} @ {in1} → {shape}。",
    "context.flash": "各个头的输出 {shape}，由 o_block 每次填入 {Br} 行查询：flash attention "
    "从不保存完整的 {S} × {N} 权重矩阵。",
    "context_heads": "把头和词两个维度换回来，让每个词重新拥有它的 {h} 个头：{src} → {shape}。",
    "merged": "拼接多头：把每个词的 {h} 个头（每个 {d} 维）拼接成一个 {hd} 维的向量："
    "{src} → {shape}。",
    "output": "对拼接后的结果进行线性变换（w_o），把各个头的结果融合成每个词新的 {H} 维特征："
    "{src} → {shape}，和 x 的形状相同。",
    # --- 变体 ----------------------------------------------------------------------------------
    "k_rep": "分组查询注意力（GQA）：{g} 个 K 头中的每一个服务 {r} 个查询头，所以重复 {r} 次，"
    "和 {h} 个查询头对齐：{src} → {shape}。",
    "v_rep": "{g} 个 V 头中的每一个重复 {r} 次，每个它服务的查询头一份：{src} → {shape}。",
    "rope_cos": "RoPE 的余弦表：位置 p 把一个头的第 i 对维度旋转角度 p · {base}^(-2i/{d})；每个"
    "位置一行：{shape}。",
    "rope_sin": "RoPE 的正弦表，角度相同，每个位置一行：{shape}。",
    "q_rot": "按每个位置的角度旋转 Q（RoPE），让 q · k 取决于两个词相距多远：{src} → {shape}，"
    "形状不变。",
    "k_rot": "按每个位置的角度旋转 K（RoPE），和 Q 一样：{src} → {shape}，形状不变。",
    "q_norm": "对每个 Q 头的 {d} 个数做 RMS 归一化，再乘以学到的权重 n_q，防止分数变得过大："
    "{shape}。",
    "q_norm.full": "在分头之前，对每个词完整的 {hd} 维 Q 投影做 RMS 归一化，再乘以学到的权重 "
    "n_q：{shape}。",
    "k_norm": "对每个 K 头的 {d} 个数做 RMS 归一化，再乘以学到的权重 n_k：{shape}。",
    "k_norm.full": "在分头之前，对每个词完整的 {kvw} 维 K 投影做 RMS 归一化，再乘以学到的权重 "
    "n_k：{shape}。",
    "capped": "对分数做软截断：{C} · tanh(分数 / {C}) 让每个分数保持在 -{C} 到 {C} 之间，没有"
    "一个分数能主导 softmax：{shape}。",
    "position_bias": "T5 的相对位置偏置：每个头为每个距离桶学一个数（{buckets} 个桶，最远距离 "
    "{max_distance}）；第 (i, j) 项是距离 j - i 的偏置：{shape}。",
    "position_bias.alibi": "ALiBi 的位置偏置：第 h 个头加上 slope_h · (j - i)，一个固定的惩罚，"
    "键 j 在查询 i 之前越远惩罚越大（斜率从第一个头的 {slope_first} 到最后一个头的 "
    "{slope_last}，不需学习）：{shape}。",
    "biased": "把位置偏置加到分数上，让注意力取决于两个词相距多远：{in0} + {in1} → {shape}。",
    "mask": "掩码决定每个查询能看到哪些键（{op}）：{shape}，所有头相同。",
    "masked": "在掩码遮住的位置填入 -inf，softmax 之后这些键的权重正好是 0：{shape}。",
    "masked.additive": "把掩码的数值加到分数上（0 保留一个键，很大的负数遮住它）：{shape}。",
    # --- flash attention：逐块计算 ---------------------------------------------------------------
    "q_block": "flash attention 每次取 {Br} 行查询（共 {blocks} 块）：{shape}。",
    "q_scaled": "在乘积之前把查询块乘以缩放系数 {scale} 一次，而不是缩放每个分数：{shape}。",
    "k_block": "一块 {Bc} 个键；每个查询块都会遇到每个键块（共 {tiles} 个块对）：{shape}。",
    "v_block": "和键块对应的 {Bc} 个值：{shape}。",
    "k_block_t": "转置的键块，{Bc} × {d} → {d} × {Bc}：{shape}。",
    "s_tile": "一块相似度分数，{Br} 个查询 × {Bc} 个键：{shape}。同一时间只有一块，从不保存完整"
    "的 {S} × {N} 矩阵（共 {tiles} 块）。",
    "s_capped": "把这一块的分数软截断到 -{C} 和 {C} 之间：{shape}。",
    "bias_tile": "这一块 (查询, 键) 对的位置偏置：{shape}。",
    "s_biased": "这一块的分数加上位置偏置：{shape}。",
    "mask_tile": "这一块用到的掩码，由规则生成（{op}）：{shape}。",
    "s_masked": "在这一块掩码遮住的位置填入 -inf：{shape}。",
    "m": "每一行查询到目前为止见过的键块里的最大值（滚动最大值）：{shape}。softmax 先减去它，"
    "指数就不会溢出。",
    "p_tile": "这一块的 exp(分数 − 滚动最大值)：softmax 的分子，还没有除以总和：{shape}。",
    "alpha": "exp(旧最大值 − 新最大值)：出现更大的最大值时，重新缩放之前的累加：{shape}。",
    "l": "每行分子的滚动总和，也就是 softmax 的分母：{shape}。",
    "o_acc": "Value 的滚动加权求和：旧的和乘以 alpha，再加上 p_tile @ v_block：{shape}。",
    "o_block": "这一块的输出：加权和除以每行总和 l，正好等于 softmax(分数) @ v：{shape}。",
    # --- 变体给一步加的句子 -----------------------------------------------------------------------
    "extra.batch": "最前面的 {B} 是 batch：{B} 个样本一起计算，互不影响。",
    "extra.grouped": "{h} 个查询头只用 {g} 个 K/V 头，所以 K 和 V 是 {kvw} 维，比 Q 窄 {r} 倍"
    "（KV cache 更小）。",
    "extra.cross": "K 和 V 来自 x_kv 的 {N} 个词，不是 x。",
    "extra.causal": "因果掩码：第 i 个词只能看到第 0 到第 i 个词，看不到后面的词。",
    "extra.window": "滑动窗口：第 i 个词只能看到最近的 {W} 个词（j > i − {W}）。",
    "extra.padding": "键填充掩码：第 b 个样本只能看到前 lengths[b] 个键，lengths = {lengths}；"
    "其余是填充。",
    "extra.mask_file": "其余由用户的掩码文件决定。",
    "extra.weights_masked": "被遮住的键权重正好是 0。",
    "extra.partial_rope": "一个头的 {d} 个数里只有前 {R} 个旋转，其余不变。",
    "extra.interleaved": "旋转的是相邻的两个数 (2i, 2i + 1)。",
    "extra.tiles": "运行 {tiles} 次，每块一次；形状是一块的。",
    # --- demo：笔记里的例子 ---------------------------------------------------------------------
    "demo.title_plain": "1. 和笔记一样计算：weights = softmax(Query @ Key.T)，不缩放",
    "demo.title_scaled": "2. 和 Transformer 一样缩放：softmax(Query @ Key.T / √{d})，系数 {factor}",
    "demo.why_title": "缩放改变了什么，为什么要缩放",
    "demo.given": "给定",
    "demo.Query": "第 i 行：第 i 个词在找什么（{S} 个词 × {d} 个数）。",
    "demo.Key": "第 j 行：第 j 个词能被什么找到（{N} 个词 × {d} 个数）。",
    "demo.Value": "第 j 行：第 j 个词被关注时传出去的内容（{N} 个词 × {dv} 个数）。",
    "demo.scores": "第 i 行第 j 列：查询 i · 键 j，即相似度分数：({S}, {d}) @ ({d}, {N}) → "
    "({S}, {N})。",
    "demo.scaled": "每个分数乘以 1/√{d} = {factor}：每行的大小顺序不变，差距变小。",
    "demo.weights": "对每一行做 softmax 归一化：exp(分数) 除以这一行 exp 的总和；每行之和为 1。",
    "demo.output": "第 i 行：第 i 个词的权重乘以各行 Value，即加权平均（加权求和）：({S}, {N}) @ "
    "({N}, {dv}) → ({S}, {dv})。",
    "demo.divided": "每个分数除以 √d = √{d} = {sqrt_d}；每一行分数的大小顺序不变。",
    "demo.peaked": "softmax 变得不那么尖锐：每行最大的权重从 {changes}，所以每个输出混入更多其他"
    "行的 Value。",
    "demo.why": "为什么要缩放：如果查询和键的每个数方差为 1，d 个数的点积方差为 d。d = 64 时分数"
    "大约分布在 ±8，softmax 饱和成几乎 one-hot，梯度消失。除以 √d 让方差无论 d 多大都回到 1。",
    "demo.overflow": "笔记里的 soft_max 直接计算 exp(z)：对 [1000, 1000] 这一行得到 {note}"
    "（exp 溢出为 inf，inf/inf = nan）。attntrace 先减去每行的最大值，得到 {ours}。",
    # --- 界面 ----------------------------------------------------------------------------------
    # --- 解码一步（--past N）：KV 缓存 ---
    "k.past": "交换 {S} 个新词的 K 的词和头两个维度：{g} 个 K 头各自拥有一个 {S} × {d} 的矩阵，"
    "随后接到缓存后面：{src} → {shape}。",
    "v.past": "交换 {S} 个新词的 V 的词和头两个维度：{g} 个 V 头各自拥有一个 {S} × {d} 的矩阵，"
    "随后接到缓存后面：{src} → {shape}。",
    "k_cache": "K 缓存（KV cache）：之前 {P} 个词的 K 向量，在前面的步骤中已经算好并保存，"
    "每个 K 头一个 {P} × {d} 的矩阵：{shape}。不需要重新计算。",
    "v_cache": "V 缓存：之前 {P} 个词的 V 向量，每个 V 头一个 {P} × {d} 的矩阵：{shape}。",
    "k_all": "把 {S} 个新词的 K 沿词的维度拼接到缓存的 {P} 个 K 后面：{in0} 和 {in1} → {shape}。"
    "这就是这一步之后的缓存；新词的位置从 {P} 开始。",
    "v_all": "把 {S} 个新词的 V 拼接到缓存的 {P} 个 V 后面：{in0} 和 {in1} → {shape}。",
    # --- 反向传播（--backward） ---
    "backward": "反向传播：损失对 {of} 的梯度，形状与 {of} 相同：{shape}，计算方式为 {op}。",
    "lse": "flash 为反向传播保存每个查询行分数的 log-sum-exp，"
    "即 m + log(l)：{shape}，"
    "每行一个数，而不是 {S} × {N} 的注意力权重。",
    "delta": "反向传播（flash）：每个查询行 d_context ⊙ context 之和，{shape}；"
    "它代替 softmax 反向中的 rowsum(d_weights ⊙ weights)，无需权重矩阵。",
    "s_again": "反向传播（flash）：由 q 和 k 重新计算的一块相似度分数，"
    "{Br} 个查询 × {Bc} 个键："
    "{shape}，计算方式为 {op}。",
    "p_again": "反向传播（flash）：由保存的 log-sum-exp "
    "重新得到这一块的注意力权重，"
    "无需行最大值和行和：{shape}，计算方式为 {op}。",
    "ui.report_flow": "数据流",
    "ui.report_steps": "步骤",
    "ui.report_weights": "注意力权重",
    "ui.report_costs": "计算量与内存",
    "ui.report_config": "配置",
    "ui.where_head": "第 {head} 个头",
    "ui.where_item": "第 {item} 个样本的第 {head} 个头",
    "ui.weights_rule": "每行之和为 1",
    "ui.weights_rule_masked": "被遮盖的键：·；每行之和为 1，若整行都被遮盖则为 0",
    "ui.weights_title": "注意力权重，{where}（行：查询，列：键；{rule}）",
    "ui.weights_none": "注意力权重，{where}：{why}",
    "ui.weights_no_values": "{backend} 后端不计算数值",
    "ui.weights_tiled": "--algorithm {algorithm} 逐块计算，从不形成完整的矩阵",
    "ui.unknown": "{name} = {op}：{shape}，维度 {axes}。",
    "ui.explanations": "每一步做什么",
    "ui.explanation": "解释",
    "ui.step": "步骤",
    "ui.op": "运算",
    "ui.shape": "形状",
    "ui.axes": "维度",
    "ui.dtype": "类型",
    "ui.steps_title": "步骤（所有张量均为 {dtype}）",
    "ui.steps_title_mixed": "步骤（除类型列注明外均为 {dtype}）",
    "ui.attention_weights": "注意力权重",
    "ui.head": "头",
    "ui.query": "查询",
    "ui.key": "键",
    "ui.role": "角色",
    "ui.line": "位置",
    "ui.costs_title": "计算量（{unit}；1 MAC = 2 FLOPs）",
    "ui.costs_caption": "峰值：同时存在的激活；参数 {params}；每个词的 KV cache {kv}（{dtype}）",
    "ui.peak": "峰值 {bytes}",
    "ui.total": "总计",
    "ui.formula": "公式",
    "ui.bytes": "字节",
    "ui.tiles": "块数",
    "ui.parameters": "参数",
    "ui.name": "名称",
    "ui.count": "个数",
    # --- 跨设备（issue 43）：数字都是一个 rank 的 ------------------------------------------------
    "x_all_gather": "序列并行：张量并行组的 {TP} 个 rank 各持有 1/{TP} 的词；"
    "all-gather 在列并行投影之前把所有词交给每个 rank：{src} → {shape}。",
    "o_partial": "行并行的输出层：这个 rank 用它的 w_o 列乘以它的 {h} 个头的 {hd} 个数，"
    "得到输出的部分和：{src} → {shape}。{TP} 个 rank 的部分和相加才是输出。",
    "o_all_reduce": "在张量并行组的 {TP} 个 rank 上做 all-reduce：每个 rank 得到部分输出之和，"
    "即它的词在这一层的输出：{shape}。",
    "o_reduce_scatter": "在 {TP} 个 rank 上做 reduce-scatter：部分输出相加，"
    "每个 rank 保留 1/{TP} 的词（序列并行）：{src} → {shape}。",
    "k_all_gather": "用 all-gather 做上下文并行：每个 rank 得到全部 {CP} 个 rank 的词的键："
    "{src} → {shape}。",
    "v_all_gather": "用 all-gather 做上下文并行：每个 rank 得到全部 {CP} 个 rank 的词的值："
    "{src} → {shape}。",
    "k_ring_recv": "环形注意力：每一轮之前，键块沿着 {CP} 个 rank 的环移动一个 rank"
    "（发给下一个，从上一个接收）：{shape}。",
    "v_ring_recv": "环形注意力：值块和键块一起沿着 {CP} 个 rank 的环移动：{shape}。",
    "q_all_to_all": "Ulysses：在 {CP} 个 rank 上做 all-to-all，把序列切分换成头切分，"
    "即用这个 rank 的词的所有头换取 1/{CP} 的头的所有词：{src} → {shape}。",
    "k_all_to_all": "Ulysses：键的 all-to-all，1/{CP} 的 kv 头的所有词：{src} → {shape}。",
    "v_all_to_all": "Ulysses：值的 all-to-all，1/{CP} 的 kv 头的所有词：{src} → {shape}。",
    "k_rep_a2a": "kv 头比 {CP} 个 rank 少：每个先被复制，"
    "让 all-to-all 给每个 rank 它的查询头要读的那一个：{src} → {shape}。",
    "v_rep_a2a": "值的 kv 头和键的一样被复制，供 all-to-all 使用：{src} → {shape}。",
    "context_full": "在这个 rank 分到的头上，所有词的值的加权和（Ulysses）："
    "{in0} @ {in1} → {shape}。",
    "context_all_to_all": "Ulysses 的第二次 all-to-all：context 回到这个 rank 自己的词"
    "和它的所有头：{src} → {shape}。",
    "lse.ring": "这一块里每个查询行分数的 log-sum-exp，max + log(sum(exp(s - max)))：{shape}，"
    "合并各块结果时需要它。",
    "lse_merged": "这一轮之后的累计 log-sum-exp：之前的和这一块的做 logaddexp，{shape}。",
    "context_merged": "这一轮之后的累计 context：每个结果乘以 exp(它的 log-sum-exp 减去合并后的)，"
    "等于对目前见过的所有键做注意力：{shape}。",
    "output.tp": "这个 rank 的词在这一层的输出：{TP} 个 rank 的部分输出之和，"
    "偏置 b_o 在求和之后只加一次：{shape}。",
    "context_all_gather": "跨 rank 解码：每个 rank 的部分 context（新词对它那一份缓存的注意力），"
    "从 {CP} 个 rank 收集而来：{src} → {shape}。",
    "lse_all_gather": "{CP} 个 rank 部分结果的 log-sum-exp，和它们一起收集：{src} → {shape}；"
    "按它们合并就得到对整个缓存的注意力。",
}
