"""Every command's ``--help`` in both languages: key → (English, Chinese), side by side.

The English side is the help text exactly as the command declares it (whitespace aside):
under ``--lang zh`` or a zh_* locale each paragraph and option help is looked up by its
English words (:func:`attntrace.learn.lang.translate`), so a help that changes in the code and
not here stays English, and tests/learn/test_chinese_everywhere.py names it. Option, step and
axis names, metavars, shapes and the example command lines stay as they are.
"""

from __future__ import annotations

MESSAGES: dict[str, tuple[str, str]] = {
    # --- Typer's own words ------------------------------------------------------------------
    "help.help": ("Show this message and exit.", "显示本帮助并退出。"),
    "help.usage": ("Usage: ", "用法："),
    "help.epilog": (
        "Exit codes: 0 success, 1 a check failed, 2 bad input or usage, 3 an internal error "
        "(a bug: please report it), 4 diff cannot tell; 128 + N when stopped by signal N.",
        "退出码：0 成功，1 检查未通过，2 输入或用法有误，3 内部错误（attntrace 的 bug：请报告），"
        "4 diff 无法判断；被信号 N 停止时为 128 + N。",
    ),
    "help.panel.sizes": ("Sizes", "尺寸"),
    "help.panel.parallel": (
        "Across devices (tensor, sequence and context parallelism)",
        "跨设备（张量、序列与上下文并行）",
    ),
    "help.panel.variants": ("Attention variants", "注意力变体"),
    "help.panel.models": ("Real models", "真实模型"),
    "help.panel.output": ("Output", "输出"),
    "help.panel.files": ("Files", "文件"),
    "help.panel.cost": ("Cost and scale", "计算量与规模"),
    "help.panel.serving": (
        "Serving (prefill, decode and the KV cache)",
        "推理服务（预填充、解码与 KV 缓存）",
    ),
    "help.panel.code": ("Your code", "你的代码"),
    "help.panel.checks": ("Checks", "检查"),
    "help.panel.options": ("Options", "选项"),
    "help.panel.arguments": ("Arguments", "参数"),
    "help.panel.commands": ("Commands", "命令"),
    "help.default": ("[default: {value}]", "[默认：{value}]"),
    "help.required": ("[required]", "[必填]"),
    # --- run ----------------------------------------------------------------------------------
    "help.run": (
        "Run multi-head attention and print the shape of every step.",
        "运行多头注意力，打印每一步的形状。",
    ),
    "help.run.what": (
        "[bold]attntrace run --heads 12 --hidden 768[/] prints (3, 768) -> (3, 12, 64) -> "
        "(12, 3, 64) -> (12, 3, 3) -> ... -> (3, 768), the weight matrices and the attention "
        "weights of one head.",
        "[bold]attntrace run --heads 12 --hidden 768[/] 打印 (3, 768) -> (3, 12, 64) -> "
        "(12, 3, 64) -> (12, 3, 3) -> ... -> (3, 768)，以及权重矩阵和一个头的注意力权重。",
    ),
    "help.run.examples": (
        "--batch 2                       a leading batch axis\n"
        "--backend torch                 run on PyTorch\n"
        "--hidden 4 --heads 2 --values   every number\n"
        "--causal, --kv-heads 4, --rope  the variants of real models\n"
        "--preset llama-3-8b             a real model's sizes\n"
        "--backend shape                 any size, no arrays (--seq 131072)\n"
        "--past 4096 --seq 1             one decode step against a KV cache\n"
        "--weights model.safetensors     real weights\n"
        "--save trace.npz                keep every tensor\n"
        "--explain --lang zh             every step in words (English or Chinese)\n"
        "--model DIR --prompt TEXT       a real model on real words (--token I: a row)",
        "--batch 2                       最前面加一个 batch 维度\n"
        "--backend torch                 在 PyTorch 上运行\n"
        "--hidden 4 --heads 2 --values   打印每一个数\n"
        "--causal, --kv-heads 4, --rope  真实模型的各种变体\n"
        "--preset llama-3-8b             真实模型的尺寸\n"
        "--backend shape                 任意尺寸，不分配数组（--seq 131072）\n"
        "--past 4096 --seq 1             对着 KV 缓存解码一步\n"
        "--weights model.safetensors     真实的权重\n"
        "--save trace.npz                保存每一个张量\n"
        "--explain --lang zh             用文字解释每一步（英文或中文）\n"
        "--model DIR --prompt TEXT       真实模型读真实的文字（--token I：看一行）",
    ),
    "help.run.scripts": (
        "For scripts:\n  [bold]attntrace run --format json | jq -c '.steps[] | [.name, .shape]'[/]",
        "给脚本用：\n  [bold]attntrace run --format json | jq -c '.steps[] | [.name, .shape]'[/]",
    ),
    "help.batch": (
        "B, batch size; omit for the unbatched (S, H) layout.",
        "B，批大小（batch_size）；省略时为不带 batch 的 (S, H) 布局。",
    ),
    "help.seq": ("S, sequence length (tokens).", "S，序列长度（词的个数，seq_len）。"),
    "help.hidden": (
        "H, model width; must be divisible by --heads unless --head-dim is set \\[default: "
        "768, or the preset's].",
        "H，模型宽度（feature_dim）；必须是 --heads 的整数倍，除非设置了 --head-dim "
        "\\[默认：768，或预设模型的值]。",
    ),
    "help.heads": (
        "h, number of attention heads; head_dim d = H / h \\[default: 12, or the preset's].",
        "h，注意力头数（num_heads）；每个头的维度 head_dim d = H / h \\[默认：12，或预设模型的值]"
        "。",
    ),
    "help.mask": (
        "A .npy mask broadcasting to the scores (B, h, S, N): booleans, True = attend (as "
        "SDPA; nn.MultiheadAttention's key_padding_mask is the opposite), or floats added to "
        "the scores.",
        "一个 .npy 掩码，可广播到分数 (B, h, S, N)：布尔值，True = 可以关注（与 SDPA 相同；"
        "nn.MultiheadAttention 的 key_padding_mask 正好相反），或者加到分数上的浮点数。",
    ),
    "help.backend": (
        "numpy (default), torch (the torch extra, attntrace\\[torch]; on Linux its CPU wheel: "
        "docs/getting-started.md#pytorch), or shape (shapes only, any size).",
        "numpy（默认）、torch（需要 torch 扩展 attntrace\\[torch]；Linux 上用它的 CPU 版："
        "docs/getting-started.md#pytorch）或 shape（只算形状，任意尺寸）。",
    ),
    "help.dtype": (
        "Element type; bfloat16 needs --backend torch.",
        "元素类型；bfloat16 需要 --backend torch。",
    ),
    "help.seed": (
        "Seed of x and the weights; the same seed gives the same values on every backend.",
        "x 和权重的随机种子；同一个种子在每个后端上得到相同的数值。",
    ),
    "help.scale": (
        "Factor on the scores: sqrt (1/√d, the paper), none (unscaled, as the study notes' "
        "worked example) or a number.",
        "分数的缩放系数：sqrt（1/√d，论文的做法）、none（不缩放，和学习笔记里的例子一样）或一个数"
        "。",
    ),
    "help.max_memory": (
        "Refuse runs (and input files) needing more than this, e.g. 8GiB \\[default: half the "
        "available memory].",
        "拒绝需要超过这么多内存的运行（和输入文件），例如 8GiB \\[默认：可用内存的一半]。",
    ),
    "help.head": ("Which head's attention weights to show.", "显示第几个头的注意力权重。"),
    "help.batch_item": (
        "Which batch item's attention weights to show (with --batch).",
        "显示第几个样本的注意力权重（与 --batch 一起使用）。",
    ),
    "help.values": (
        "Also print the numbers of every tensor small enough to read.",
        "同时打印每个小到可以阅读的张量的数值。",
    ),
    "help.values_limit": (
        "--values prints tensors of at most this many elements and names the others.",
        "--values 只打印元素个数不超过这个数的张量，其余的只列出名字。",
    ),
    "help.run.fmt": (
        "table (Rich, for people), or one document on stdout for scripts: json (schema "
        "attntrace.trace/1), csv (one row per step), markdown; svg or html: the table view as "
        "a picture (100 columns).",
        "table（Rich 表格，给人看），或在标准输出上给脚本的一个文档：json（schema "
        "attntrace.trace/1）、csv（每一步一行）、markdown；svg 或 html：把表格画成图片（100 列）。",
    ),
    "help.output_file": (
        "Write what the command prints (any --format) to FILE instead of stdout (- is stdout), "
        "atomically: FILE is complete or as it was, never half-written.",
        "把命令的输出（任何 --format）原子地写入 FILE 而不是标准输出（- 即标准输出）：FILE "
        "要么完整，要么保持原样，绝不会只写一半。",
    ),
    "help.no_color": (
        "No colours (also when NO_COLOR is set); output that is not a terminal never has any.",
        "不用颜色（设置了 NO_COLOR 时也是）；不是终端的输出从来没有颜色。",
    ),
    "help.algorithm": (
        "eager (the whole (S, S) matrix) or flash (tile by tile, online softmax).",
        "eager（完整的 (S, S) 矩阵）或 flash（逐块计算，在线 softmax）。",
    ),
    "help.block_size": (
        "flash: rows of a query block (Br) and of a key/value block (Bc) \\[default: Br = 128, "
        "Bc as many keys as fit a 2 MiB tile].",
        "flash：查询块的行数 (Br) 和键/值块的行数 (Bc) \\[默认：Br = 128，Bc 为 2 MiB 的块能放下的"
        "键数]。",
    ),
    "help.threads": (
        "flash: threads splitting the query blocks, each block's maths on one thread "
        "\\[default: the cores].",
        "flash：分担查询块的线程数，每一块的计算在一个线程上 \\[默认：CPU 核数]。",
    ),
    "help.count": (
        "Count arithmetic in flops or macs (1 MAC = 2 FLOPs).",
        "用 flops 或 macs 计算运算量（1 MAC = 2 FLOPs）。",
    ),
    "help.layers": (
        "L: also show the attention of a whole model of L layers like this one: parameters, "
        "KV cache of every layer at --batch and --seq (in --dtype), FLOPs of one forward "
        "\\[default: the layer count of --model, --hf-config or --preset, when known].",
        "L：同时显示由 L 个这样的层组成的整个模型的注意力：参数、在 --batch 和 --seq 下每一层的 "
        "KV 缓存（按 --dtype）、一次前向的 FLOPs \\[默认：--model、--hf-config 或 --preset 的层数，"
        "如果已知]。",
    ),
    "help.weights": (
        "Projection weights: .npz, .safetensors, .pt/.pth/.bin (attntrace, "
        "nn.MultiheadAttention, q_proj/o_proj or BERT names); sets --hidden.",
        "投影权重：.npz、.safetensors、.pt/.pth/.bin（attntrace、nn.MultiheadAttention、"
        "q_proj/o_proj 或 BERT 的命名）；同时设定 --hidden。",
    ),
    "help.layer_prefix": (
        "Which layer of --weights or --model, by the prefix of its tensor names, e.g. "
        "model.layers.0.self_attn. (T5: decoder.block.0.layer.0.).",
        "按张量名的前缀选择 --weights 或 --model 的哪一层，例如 model.layers.0.self_attn."
        "（T5：decoder.block.0.layer.0.）。",
    ),
    "help.input_file": (
        "x from a .npy file, (S, H) or (B, S, H); sets --seq and --batch.",
        "从 .npy 文件读取 x，(S, H) 或 (B, S, H)；同时设定 --seq 和 --batch。",
    ),
    "help.input_kv": (
        "x_kv of cross-attention from a .npy file, (N, M) or (B, N, M), e.g. an encoder's "
        "output; sets --kv-seq and --kv-hidden.",
        "从 .npy 文件读取交叉注意力的 x_kv，(N, M) 或 (B, N, M)，例如编码器的输出；同时设定 "
        "--kv-seq 和 --kv-hidden。",
    ),
    "help.cache_file": (
        "The KV cache a --past step reads: a .npz or .safetensors with k_cache and v_cache "
        "(B, g, N, d) (or key_cache.L, layers.L.k_cache, a --save'd step's k_all); --past "
        "defaults to its N.",
        "--past 一步读取的 KV 缓存：包含 k_cache 和 v_cache (B, g, N, d) 的 .npz 或 "
        ".safetensors（或 key_cache.L、layers.L.k_cache、--save 保存的一步的 k_all）；--past "
        "默认取它的 N。",
    ),
    "help.save": (
        "Write every step and parameter to FILE.npz (atomically).",
        "把每一步和每个参数（原子地）写入 FILE.npz。",
    ),
    "help.plot": (
        "Also draw the attention weights of every head as a grid of heat maps (matplotlib: "
        "the plot extra, attntrace\\[plot]).",
        "同时把每个头的注意力权重画成一组热力图（matplotlib：plot 扩展，attntrace\\[plot]）。",
    ),
    "help.plot_flow": (
        "Also draw the data flow of the trace (x into the q, k, v paths, each step with its "
        "shape) as SVG.",
        "同时把数据流画成 SVG（x 进入 q、k、v 三条路径，每一步带着它的形状）。",
    ),
    "help.kv_seq": (
        "N: cross-attention, keys and values from a second input of N tokens; scores (h, S, N).",
        "N：交叉注意力，K 和 V 来自另一个有 N 个词的输入；分数为 (h, S, N)。",
    ),
    "help.kv_hidden": (
        "M: width of the key/value input (kdim/vdim of nn.MultiheadAttention); implies "
        "cross-attention.",
        "M：键/值输入的宽度（nn.MultiheadAttention 的 kdim/vdim）；意味着交叉注意力。",
    ),
    "help.kv_heads": (
        "g: key/value heads, dividing --heads (grouped-query; 1 = multi-query); adds k_rep, "
        "v_rep and the KV-cache bytes per token.",
        "g：K/V 头数，须整除 --heads（分组查询注意力；1 = 多查询注意力）；增加 k_rep、v_rep "
        "和每个词的 KV 缓存字节数。",
    ),
    "help.head_dim": (
        "d decoupled from H / h, as in T5 and Gemma: q_proj (S, h·d), w_o (H, h·d).",
        "d 不再等于 H / h，和 T5、Gemma 一样：q_proj (S, h·d)，w_o (H, h·d)。",
    ),
    "help.bias": (
        "Biases on the q, k, v and output layers \\[default: bias, or the preset's].",
        "q、k、v 和输出层的偏置 \\[默认：有偏置，或预设模型的值]。",
    ),
    "help.causal": (
        "Query i attends keys 0..i (top-left aligned, as SDPA's is_causal); adds mask, masked.",
        "因果掩码：第 i 个查询只关注第 0..i 个键（左上对齐，与 SDPA 的 is_causal 相同）；增加 "
        "mask、masked。",
    ),
    "help.key_lengths": (
        "Valid keys per batch item, e.g. 3,2 (needs --batch): a key padding mask (B, 1, 1, N).",
        "每个样本的有效键数，例如 3,2（需要 --batch）：键填充掩码 (B, 1, 1, N)。",
    ),
    "help.rope": (
        "Rotary position embedding on q and k (Llama convention); adds rope_cos, rope_sin, "
        "q_rot, k_rot.",
        "对 q 和 k 做旋转位置编码 RoPE（Llama 的约定）；增加 rope_cos、rope_sin、q_rot、k_rot。",
    ),
    "help.rope_base": (
        "theta of --rope (rope_theta) \\[default: 10000, or the preset's].",
        "--rope 的 theta（rope_theta）\\[默认：10000，或预设模型的值]。",
    ),
    "help.rope_style": (
        "How --rope pairs the dims of a head: half rotates i with i + d/2 (Hugging Face "
        "rotate_half, GPT-NeoX) or interleaved rotates 2i with 2i + 1 (Meta's Llama "
        "checkpoints, GPT-J) \\[default: half, or the model's].",
        "--rope 如何给一个头的维度配对：half 把 i 和 i + d/2 一起旋转（Hugging Face 的 "
        "rotate_half、GPT-NeoX），interleaved 把 2i 和 2i + 1 一起旋转（Meta 的 Llama 检查点、"
        "GPT-J）\\[默认：half，或模型的值]。",
    ),
    "help.preset": (
        "Sizes of a real model, e.g. llama-3-8b (list: attntrace presets); explicit flags "
        "override it.",
        "真实模型的尺寸，例如 llama-3-8b（列表：attntrace presets）；显式给出的选项优先。",
    ),
    "help.hf_config": (
        "Read the sizes from a Hugging Face config.json; explicit flags override it.",
        "从 Hugging Face 的 config.json 读取尺寸；显式给出的选项优先。",
    ),
    "help.window": (
        "W, sliding window: query i sees keys j > i - W (Mistral, Gemma 2; with --causal also "
        "j <= i); adds window(W) to the mask.",
        "W，滑动窗口：第 i 个查询只看到 j > i - W 的键（Mistral、Gemma 2；加上 --causal 时还要 "
        "j <= i）；在掩码中加入 window(W)。",
    ),
    "help.model_dir": (
        "A saved Hugging Face model folder (config.json + model.safetensors, a sharded index "
        "or pytorch_model.bin): sizes and variants of --layer from its config, weights from "
        "the shard that holds them; typed options override it.",
        "一个保存好的 Hugging Face 模型文件夹（config.json + model.safetensors、分片索引或 "
        "pytorch_model.bin）：--layer 的尺寸和变体来自它的 config，权重来自存放它们的分片；"
        "命令行给出的选项优先。",
    ),
    "help.layer": (
        "Which layer of --model (or of an --hf-config whose layers differ) \\[default: 0].",
        "--model 的第几层（或各层不同的 --hf-config 的第几层）\\[默认：0]。",
    ),
    "help.rope_scaling": (
        "RoPE scaling: llama3 (Llama 3.1 defaults), linear:factor=F, "
        "dynamic:factor=F,max_position_embeddings=P, "
        "yarn:factor=F,original_max_position_embeddings=P (key=value as in a config's "
        "rope_scaling).",
        "RoPE 缩放：llama3（Llama 3.1 的默认值）、linear:factor=F、"
        "dynamic:factor=F,max_position_embeddings=P、"
        "yarn:factor=F,original_max_position_embeddings=P（key=value 与 config 的 rope_scaling "
        "相同）。",
    ),
    "help.rotary_dims": (
        "R: partial RoPE, only the first R dims of each head rotate (GPT-NeoX rotary_pct, Phi "
        "partial_rotary_factor).",
        "R：部分 RoPE，每个头只有前 R 个维度旋转（GPT-NeoX 的 rotary_pct，Phi 的 "
        "partial_rotary_factor）。",
    ),
    "help.softcap": (
        "C: logit soft-capping, scores -> C*tanh(scores/C) before the mask (Gemma 2); adds capped.",
        "C：分数软截断，在掩码之前 scores -> C*tanh(scores/C)（Gemma 2）；增加 capped。",
    ),
    "help.qk_norm": (
        "RMSNorm of q and k with weights n_q, n_k: head (over d, Qwen3 and Gemma 3) or full "
        "(over the projection width, OLMo 2); adds q_norm, k_norm.",
        "对 q 和 k 做 RMSNorm，权重为 n_q、n_k：head（在 d 上，Qwen3 和 Gemma 3）或 full"
        "（在整个投影宽度上，OLMo 2）；增加 q_norm、k_norm。",
    ),
    "help.relative_bias": (
        "T5's relative position bias: BUCKETS,MAX_DISTANCE[,causal] (from the config's "
        "relative_attention_num_buckets and _max_distance); a table rel_bias (buckets, h); "
        "adds position_bias, biased.",
        "T5 的相对位置偏置：BUCKETS,MAX_DISTANCE[,causal]（来自 config 的 "
        "relative_attention_num_buckets 和 _max_distance）；一个表 rel_bias (buckets, h)；增加 "
        "position_bias、biased。",
    ),
    "help.past": (
        "N, tokens already in the KV cache: the S new tokens (--seq 1: one decode step) sit "
        "at positions N..N+S-1; the steps read k_cache, v_cache (B, g, N, d) and attend to "
        "N+S keys (the causal mask aligned bottom-right).",
        "N，已经在 KV 缓存中的词数：S 个新词（--seq 1：解码一步）位于位置 N..N+S-1；各步读取 "
        "k_cache、v_cache (B, g, N, d)，关注 N+S 个键（因果掩码右下对齐）。",
    ),
    "help.peak_flops": (
        "The machine's peak arithmetic, e.g. 989T or 1.98PFLOP/s, for the roofline of the "
        "serving figures \\[default: H100 SXM, 989 TFLOP/s dense bf16].",
        "机器的峰值算力，例如 989T 或 1.98PFLOP/s，用于推理数字的 roofline \\[默认：H100 SXM，"
        "989 TFLOP/s 稠密 bf16]。",
    ),
    "help.bandwidth": (
        "The machine's memory bandwidth, e.g. 3.35TB/s, for the roofline of the serving "
        "figures \\[default: H100 SXM, 3.35 TB/s HBM3].",
        "机器的内存带宽，例如 3.35TB/s，用于推理数字的 roofline \\[默认：H100 SXM，3.35 TB/s "
        "HBM3]。",
    ),
    "help.memory": (
        "Memory the KV cache may take, e.g. 80GiB: how many requests of N+S tokens fit "
        "(every layer: --layers, --preset, --model).",
        "KV 缓存可以占用的内存，例如 80GiB：能放下多少个 N+S 个词的请求（所有层：--layers、"
        "--preset、--model）。",
    ),
    "help.cache_dtype": (
        "The KV cache's dtypes for the serving figures, e.g. float8 or float16,float8 "
        "\\[default: float16, bfloat16, float8].",
        "推理数字所用的 KV 缓存类型，例如 float8 或 float16,float8 \\[默认：float16、bfloat16、"
        "float8]。",
    ),
    "help.page_size": (
        "P: a paged KV cache (vLLM's blocks of P tokens): block table, pool, gather and the "
        "waste in last blocks, as steps and figures; needs --past; a ragged batch with "
        "--key-lengths.",
        "P：分页 KV 缓存（vLLM 的每块 P 个词）：块表、缓存池、gather 以及最后一块浪费的空间，"
        "作为步骤和数字显示；需要 --past；用 --key-lengths 给出长度不一的 batch。",
    ),
    "help.backward": (
        "Also the backward pass: every gradient step from d_output back to d_x and each "
        "weight, what the forward keeps for it (eager, flash, --recompute) and its FLOPs.",
        "同时显示反向传播：从 d_output 回到 d_x 和每个权重的每一步梯度、前向为它保存了什么"
        "（eager、flash、--recompute）以及它的 FLOPs。",
    ),
    "help.recompute": (
        "With --backward: activation recomputation; the forward keeps x alone and runs again "
        "in the backward.",
        "与 --backward 一起使用：激活重计算；前向只保存 x，在反向时再算一遍。",
    ),
    "help.grad_output": (
        "With --backward: d_output, the gradient the backward starts from, of the output's "
        "shape \\[default: standard normal drawn from --seed].",
        "与 --backward 一起使用：d_output，反向传播的起点梯度，形状与输出相同 \\[默认：由 "
        "--seed 生成的标准正态分布]。",
    ),
    "help.explain": (
        "Say in words what each step does and why its shape is what it is, with this run's "
        "numbers (JSON: an explanation per step).",
        "用文字说明每一步做什么、它的形状为什么是这样，带上这次运行的数字（JSON：每一步一段解释）"
        "。",
    ),
    "help.lang": (
        "Language of the words (explanations, headers, verdicts, errors): en or zh (default: "
        "zh when LC_ALL, LC_MESSAGES or LANG is zh_*, else en). Step names, JSON keys and "
        "shapes stay as they are.",
        "文字的语言（解释、表头、结论、错误信息）：en 或 zh（默认：LC_ALL、LC_MESSAGES 或 LANG "
        "为 zh_* 时是 zh，否则是 en）。步骤名、JSON 键和形状保持不变。",
    ),
    # --- trace --------------------------------------------------------------------------------
    "help.trace": (
        "Run your attention code and print the shape of every tensor op in your files.",
        "运行你自己的注意力代码，打印你的文件里每个张量运算的形状。",
    ),
    "help.trace.what": (
        "A wrong shape is explained: the failing line, its operands' axes, the rule and a fix "
        "(exit 1).",
        "形状出错时会给出解释：出错的那一行、操作数的各个维度、规则和修改方法（退出码 1）。",
    ),
    "help.trace.examples": (
        "[bold]attntrace trace examples/seed_001_numpy.py[/]   a script, run as python would\n"
        "[bold]attntrace trace attn.py:Attention --init embed_dim=768 --batch 2[/]\n"
        "[bold]attntrace trace attn.py:Attention --format json[/]   for scripts",
        "[bold]attntrace trace examples/seed_001_numpy.py[/]   一个脚本，像 python 一样运行\n"
        "[bold]attntrace trace attn.py:Attention --init embed_dim=768 --batch 2[/]\n"
        "[bold]attntrace trace attn.py:Attention --format json[/]   给脚本用",
    ),
    "help.trace.target": (
        "script.py, FILE.py:NAME or package.module:NAME (an nn.Module class, a module, or a "
        "function of one array).",
        "script.py、FILE.py:NAME 或 package.module:NAME（一个 nn.Module 类、一个模块，或一个"
        "接受一个数组的函数）。",
    ),
    "help.trace.args": ("Arguments of the script (after --).", "脚本的参数（写在 -- 之后）。"),
    "help.trace.init": (
        "Constructor argument of an nn.Module class NAME, repeatable; values are Python literals.",
        "nn.Module 类 NAME 的构造参数，可重复；值是 Python 字面量。",
    ),
    "help.trace.hidden": (
        "H of the input x \\[default: the module's embed_dim / hidden_size / first Linear, "
        "else 768].",
        "输入 x 的 H \\[默认：模块的 embed_dim / hidden_size / 第一个 Linear，否则 768]。",
    ),
    "help.trace.dtype": (
        "Element type of x; an nn.Module target's weights are converted to it (a module "
        "instance is copied first). bfloat16 needs a torch tensor: a module, a torch function "
        "or --array torch.",
        "x 的元素类型；nn.Module 目标的权重会转换成这个类型（模块实例会先复制一份）。bfloat16 "
        "需要 torch 张量：一个模块、一个 torch 函数或 --array torch。",
    ),
    "help.trace.past": (
        "Call a NAME module as a decode step: after a prefill of N seeded tokens (not traced) "
        "made its KV cache, the traced call passes it (a (k, v) argument layer_past, "
        "past_key_value, kv_cache …, or a transformers class's DynamicCache).",
        "把 NAME 模块当作解码一步来调用：先对 N 个随机词做预填充（不追踪）得到它的 KV 缓存，"
        "被追踪的那次调用再把缓存传进去（一个 (k, v) 参数 layer_past、past_key_value、"
        "kv_cache …，或 transformers 类的 DynamicCache）。",
    ),
    "help.trace.array": (
        "Call NAME with a numpy array or a torch tensor \\[default: torch for modules and for "
        "functions whose file imports torch].",
        "用 numpy 数组还是 torch 张量调用 NAME \\[默认：模块和所在文件导入了 torch 的函数用 torch]"
        "。",
    ),
    "help.trace.input_file": (
        "x from a .npy file for a NAME target.",
        "NAME 目标的 x 从 .npy 文件读取。",
    ),
    "help.trace.axes": (
        "Sizes of axis letters that the sizes alone cannot tell apart, e.g. h=12,d=64.",
        "只凭尺寸分不清的维度字母的大小，例如 h=12,d=64。",
    ),
    "help.trace.into": (
        "Also record the ops inside this installed package (repeatable), e.g. --into "
        "transformers: the lines of its attention modules instead of one row per call.",
        "同时记录这个已安装的包内部的运算（可重复），例如 --into transformers：显示它的注意力"
        "模块里的每一行，而不是每次调用一行。",
    ),
    "help.trace.no_into": (
        "A library's class (transformers:LlamaAttention) as one row: do not record the ops "
        "inside its package (recorded by default for such a target).",
        "把库里的类（transformers:LlamaAttention）当作一行：不记录它所在包内部的运算（这种目标"
        "默认会记录）。",
    ),
    "help.trace.opaque": (
        "Keep each fused attention kernel (F.scaled_dot_product_attention, flex_attention) "
        "one row per call, as it runs; without it its steps are replayed from its arguments and "
        "shown at the line of the call (k_t, scores, scaled, mask, masked, weights, context).",
        "把每次融合注意力 kernel（F.scaled_dot_product_attention、flex_attention）的调用保持为"
        "一行，按它原样运行；不加这个选项时，会用它的参数逐步重放它的各个步骤，并显示在调用所在的"
        "那一行（k_t、scores、scaled、mask、masked、weights、context）。",
    ),
    "help.trace.fmt": (
        "table (Rich, for people), or one document on stdout for scripts (the code's own "
        "prints go to stderr): json (schema attntrace.capture/2: steps, axis sizes and the "
        "failure, null when none), csv (run's columns, the costs left empty, then role), "
        "markdown.",
        "table（Rich 表格，给人看），或在标准输出上给脚本的一个文档（代码自己的 print 输出到 "
        "stderr）：json（schema attntrace.capture/2：步骤、维度大小和出错信息，没有出错时为 "
        "null）、csv（run 的各列，计算量留空，再加 role）、markdown。",
    ),
    "help.trace.timeout": (
        "Stop the code under test after this many seconds (it runs in a child process, its "
        "memory limited to --max-memory or the default budget); what it ran is shown, exit 1 "
        "\\[default: 60].",
        "被测代码运行这么多秒后停止（它在子进程中运行，内存限制为 --max-memory 或默认预算）；"
        "显示已经运行的部分，退出码 1 \\[默认：60]。",
    ),
    # --- check --------------------------------------------------------------------------------
    "help.check": (
        "Check the shapes of a trace: exit 1 when one is not what you expect.",
        "检查一次追踪的形状：与预期不符时退出码为 1。",
    ),
    "help.check.what": (
        "Exit 2 when a config of a --spec cannot be checked (the others still are). Takes the "
        "size, variant and preset options of run.",
        "--spec 里的某个配置无法检查时退出码为 2（其余的照常检查）。接受 run 的尺寸、变体和预设选"
        "项。",
    ),
    "help.check.examples": (
        "[bold]attntrace check --heads 12 --hidden 768 --expect scores=h,S,S[/]\n"
        "[bold]attntrace check --preset llama-3-8b --seq 16 --expect k_proj=S,g*d[/]\n"
        "[bold]attntrace check --golden trace.json[/]   saved by run --format json > trace.json\n"
        "[bold]attntrace check --spec shapes.toml[/]    many configs: N passed, M failed\n"
        "[bold]attntrace check --trace attn.py:Attn --expect weights=h,S,S[/]   your code\n"
        "[bold]attntrace check --spec shapes.toml --format junit > report.xml[/]\n"
        "[bold]attntrace check --past 9 --seq 1 --page-size 4 --expect k_paged=g,N+S,d[/]\n"
        "[bold]attntrace check --heads 8 --seq 8 --tp 4 --cp 2 --expect q=h/T,S/C,d[/]",
        "[bold]attntrace check --heads 12 --hidden 768 --expect scores=h,S,S[/]\n"
        "[bold]attntrace check --preset llama-3-8b --seq 16 --expect k_proj=S,g*d[/]\n"
        "[bold]attntrace check --golden trace.json[/]   由 run --format json > trace.json 保存\n"
        "[bold]attntrace check --spec shapes.toml[/]    多个配置：N 个通过，M 个失败\n"
        "[bold]attntrace check --trace attn.py:Attn --expect weights=h,S,S[/]   你的代码\n"
        "[bold]attntrace check --spec shapes.toml --format junit > report.xml[/]\n"
        "[bold]attntrace check --past 9 --seq 1 --page-size 4 --expect k_paged=g,N+S,d[/]\n"
        "[bold]attntrace check --heads 8 --seq 8 --tp 4 --cp 2 --expect q=h/T,S/C,d[/]",
    ),
    "help.check.ci": (
        "With GITHUB_ACTIONS=true, failures are also annotations on the spec's lines.",
        "设置 GITHUB_ACTIONS=true 时，失败也会作为注解标在 spec 的对应行上。",
    ),
    "help.check.backend": (
        "shape (default: no compute, any size, same shapes), numpy or torch.",
        "shape（默认：不计算，任意尺寸，形状相同）、numpy 或 torch。",
    ),
    "help.check.expect": (
        "Expected shape of a step, repeatable: scores=12,3,3, scores=12x3x3 or with axis "
        "letters scores=h,S,S (B S N M H h g d, Br Bc with flash) and products k_proj=S,g*d.",
        "某一步预期的形状，可重复：scores=12,3,3、scores=12x3x3，或用维度字母 scores=h,S,S"
        "（B S N M H h g d，flash 还有 Br Bc）以及乘积 k_proj=S,g*d。",
    ),
    "help.check.golden": (
        "Compare the shapes and dtypes of every step and parameter with a trace saved by: "
        "attntrace run --format json > FILE.json. With --trace: a golden of your code "
        "(attntrace trace --format json) step by step, or one of run by role.",
        "把每一步和每个参数的形状和类型与保存的追踪比较，保存方法：attntrace run --format json "
        "> FILE.json。与 --trace 一起使用时：你的代码的 golden（attntrace trace --format json）"
        "逐步比较，或 run 的 golden 按角色比较。",
    ),
    "help.check.spec": (
        "Check many configs at once; each \\[config.NAME] table gives sizes, variants or a "
        "preset, and an expect table. Replaces the size options.",
        "一次检查多个配置；每个 \\[config.NAME] 表给出尺寸、变体或预设，以及一个 expect 表。"
        "取代尺寸选项。",
    ),
    "help.check.trace_target": (
        "Check the shapes of your own code instead: script.py, FILE.py:NAME or "
        "package.module:NAME, as attntrace trace runs it; steps by name or by role.",
        "改为检查你自己代码的形状：script.py、FILE.py:NAME 或 package.module:NAME，和 attntrace "
        "trace 的运行方式一样；步骤按名字或按角色。",
    ),
    "help.check.fmt": (
        "table (for people), json (schema attntrace.check/1) or junit (JUnit XML for CI: one "
        "testcase per check).",
        "table（给人看）、json（schema attntrace.check/1）或 junit（给 CI 的 JUnit XML：每项检查"
        "一个 testcase）。",
    ),
    "help.check.verbose": ("Also list every check that passed.", "同时列出每一项通过的检查。"),
    # --- report -------------------------------------------------------------------------------
    "help.report": (
        "Write one self-contained HTML page: steps, flow diagram, heat maps, costs, config.",
        "写出一个独立的 HTML 页面：步骤、数据流图、热力图、计算量、配置。",
    ),
    "help.report.what": (
        "Takes run's size, variant, preset, file, serving, --tp/--cp and --layers options (the "
        "whole model's figures: --layers, else the layer count of --preset, --hf-config or "
        "--model; with --past, the serving figures, and --page-size's paged cache; with "
        "--tp/--cp, one rank's steps, its cost and its collectives). The page fetches "
        "nothing (no scripts, fonts or links), so it opens offline and can be kept as a CI "
        "artifact.",
        "接受 run 的尺寸、变体、预设、文件、推理服务、--tp/--cp 和 --layers 选项（整个模型的数字："
        "--layers，否则取 --preset、--hf-config 或 --model 的层数；有 --past 时还有推理数字和 "
        "--page-size 的分页缓存；有 --tp/--cp 时是一个 rank 的步骤、开销和集合通信）。"
        "页面不从外部获取任何东西（没有脚本、字体或链接），所以可以离线打开，也可以"
        "作为 CI 产物保存。",
    ),
    "help.report.example": (
        "Example:\n  [bold]attntrace report --out report.html --preset llama-3-8b --seq 16[/]",
        "例子：\n  [bold]attntrace report --out report.html --preset llama-3-8b --seq 16[/]",
    ),
    "help.report.out": ("Where to write the page.", "页面写到哪里。"),
    # --- presets ------------------------------------------------------------------------------
    "help.presets": (
        "List the real models --preset knows, with their attention sizes.",
        "列出 --preset 认识的真实模型及其注意力尺寸。",
    ),
    "help.presets.what": (
        "Heads, kv-heads, hidden, head_dim, RoPE theta and the KV-cache bytes per token and "
        "layer in float16, each from the model's config.json; for models with a known layer "
        "count L, the KV cache of all layers at the context length (batch 1, float16); "
        "--backward: what all layers keep for the backward (eager), their backward FLOPs and "
        "FLOPs per training token.",
        "头数、K/V 头数、hidden、head_dim、RoPE theta 以及每个词每层的 KV 缓存字节数（float16），"
        "都来自模型的 config.json；已知层数 L 的模型还给出上下文长度下所有层的 KV 缓存（batch 1，"
        "float16）；--backward：所有层为反向传播保存的内容（eager）、反向的 FLOPs 和每个训练词的 "
        "FLOPs。",
    ),
    "help.presets.example": (
        "Example:\n  [bold]attntrace run --preset llama-3-8b --seq 4 --backend shape[/]",
        "例子：\n  [bold]attntrace run --preset llama-3-8b --seq 4 --backend shape[/]",
    ),
    "help.presets.fmt": (
        "table (for people) or json (schema attntrace.presets/1: every preset's sizes, its "
        "config.json repository and whole-model figures).",
        "table（给人看）或 json（schema attntrace.presets/1：每个预设的尺寸、它的 config.json "
        "所在仓库和整个模型的数字）。",
    ),
    # --- sweep --------------------------------------------------------------------------------
    "help.sweep": (
        "FLOPs, score bytes and peak memory over several sizes, eager beside flash.",
        "在多种尺寸下比较 FLOPs、分数矩阵字节数和峰值内存，eager 与 flash 并列。",
    ),
    "help.sweep.what": (
        "[bold]attntrace sweep --seq 128,512,2048,8192[/] shows the (S, S) scores growing 4x "
        "per doubling of S under eager, and flash's tile staying put. Takes run's variant, "
        "preset and model options (--model with --layer and --layer-prefix), e.g. --preset "
        "llama-3-70b --seq 4096,131072; --seq 1 --past 4096,131072 sweeps decode steps over "
        "context lengths. --tp 1,2,4,8 --cp 1,4,16 [--sp] [--cp-kind ulysses]: rank 0's cost on "
        "each layout.",
        "[bold]attntrace sweep --seq 128,512,2048,8192[/] 显示 eager 下 (S, S) 分数矩阵在 S 每翻"
        "一倍时增长 4 倍，而 flash 的块大小不变。接受 run 的变体、预设和模型选项（--model 加 "
        "--layer 和 --layer-prefix），例如 --preset llama-3-70b --seq 4096,131072；--seq 1 "
        "--past 4096,131072 在不同上下文长度下扫描解码一步。--tp 1,2,4,8 --cp 1,4,16 [--sp] "
        "[--cp-kind ulysses]：每种切分下 rank 0 的开销。",
    ),
    "help.sweep.seq": ("S values, comma-separated.", "S 的取值，用逗号分隔。"),
    "help.sweep.heads": (
        "h values, comma-separated \\[default: 12, or the preset's].",
        "h 的取值，用逗号分隔 \\[默认：12，或预设模型的值]。",
    ),
    "help.sweep.hidden": (
        "H values, comma-separated \\[default: 768, or the preset's].",
        "H 的取值，用逗号分隔 \\[默认：768，或预设模型的值]。",
    ),
    "help.sweep.backend": (
        "shape (default: any size, no arrays), numpy or torch.",
        "shape（默认：任意尺寸，不分配数组）、numpy 或 torch。",
    ),
    "help.sweep.algorithms": (
        "Which algorithms to run at every size, comma-separated \\[default: eager,flash].",
        "每种尺寸下运行哪些算法，用逗号分隔 \\[默认：eager,flash]。",
    ),
    "help.sweep.output": (
        "table (with bar charts), json or csv.",
        "table（带条形图）、json 或 csv。",
    ),
    "help.sweep.past": (
        "N values, comma-separated: tokens already in the KV cache: the S new tokens (--seq "
        "1: one decode step) sit at positions N..N+S-1; the steps read k_cache, v_cache (B, "
        "g, N, d) and attend to N+S keys (the causal mask aligned bottom-right). E.g. --seq 1 "
        "--past 1024,4096,131072.",
        "N 的取值，用逗号分隔：已经在 KV 缓存中的词数：S 个新词（--seq 1：解码一步）位于位置 "
        "N..N+S-1；各步读取 k_cache、v_cache (B, g, N, d)，关注 N+S 个键（因果掩码右下对齐）。"
        "例如 --seq 1 --past 1024,4096,131072。",
    ),
    # --- compare ------------------------------------------------------------------------------
    "help.compare": (
        "Set two configurations side by side: the steps whose shape or op changes, FLOPs, bytes.",
        "把两种配置并排比较：形状或运算变化的步骤、FLOPs、字节数。",
    ),
    "help.compare.what": (
        "A takes run's options; B is A with the options of --vs. The steps of both are "
        "aligned by name: a step whose shape or op changes is yellow, one of A only red, one "
        "of B only green. Settings that differ, FLOPs, parameters and bytes of A and B are set "
        "beside each other. Shapes only by default (--backend shape): any size, at once.",
        "A 接受 run 的选项；B 是 A 再加上 --vs 的选项。两边的步骤按名字对齐：形状或运算变化的"
        "步骤为黄色，只在 A 中的为红色，只在 B 中的为绿色。不同的设置、A 和 B 的 FLOPs、参数和"
        "字节数并排显示。默认只算形状（--backend shape）：任意尺寸，立即得到结果。",
    ),
    "help.compare.examples": (
        "Examples:\n"
        "  [bold]attntrace compare --hidden 768 --heads 12 --vs '--heads 8'[/]\n"
        "  [bold]attntrace compare --seq 8 --vs '--causal --kv-heads 4'[/]\n"
        "  [bold]attntrace compare --seq 1024 --vs '--algorithm flash' --format json[/]\n"
        "  [bold]attntrace compare --preset llama-3-70b --seq 4096 --vs '--tp 8'[/]",
        "例子：\n"
        "  [bold]attntrace compare --hidden 768 --heads 12 --vs '--heads 8'[/]\n"
        "  [bold]attntrace compare --seq 8 --vs '--causal --kv-heads 4'[/]\n"
        "  [bold]attntrace compare --seq 1024 --vs '--algorithm flash' --format json[/]\n"
        "  [bold]attntrace compare --preset llama-3-70b --seq 4096 --vs '--tp 8'[/]",
    ),
    "help.compare.vs": (
        "The options that make B from A, quoted as one argument, e.g. '--heads 8' or "
        "'--causal --kv-heads 4' or '--algorithm flash': every other option is A's.",
        "由 A 得到 B 的选项，用引号括成一个参数，例如 '--heads 8'、'--causal --kv-heads 4' 或 "
        "'--algorithm flash'：其余选项都和 A 相同。",
    ),
    "help.compare.fmt": (
        "table (for people) or json (schema attntrace.compare/1: both configs, the settings "
        "that differ, every step in each, the totals).",
        "table（给人看）或 json（schema attntrace.compare/1：两个配置、不同的设置、两边的每一步、"
        "总计）。",
    ),
    # --- verify -------------------------------------------------------------------------------
    "help.verify": (
        "Check the trace against PyTorch's own attention; exit 1 beyond tolerance.",
        "与 PyTorch 自己的注意力对比检查；超出容差时退出码为 1。",
    ),
    "help.verify.what": (
        "numpy vs torch at every step, and the output and attention weights vs "
        "nn.MultiheadAttention and F.scaled_dot_product_attention, for every variant (masks, "
        "cross, GQA, RoPE, presets, --algorithm flash). Exit 0 when every difference is "
        "within the dtype's tolerance, 1 when one is not, 2 when torch is missing (the line "
        "says how to install it). --backward: every gradient too, against torch autograd "
        "(plain eager torch, SDPA, nn.MultiheadAttention), and the saved bytes against what "
        "autograd saves. Needs torch: the torch extra, attntrace\\[torch] (on Linux its CPU "
        "wheel: docs/getting-started.md#pytorch). --past N "
        "--page-size P: the paged cache's steps too, and its gather k_paged / v_paged "
        "bit-equal to k_all / v_all.",
        "每一步比较 numpy 与 torch，输出和注意力权重与 nn.MultiheadAttention、"
        "F.scaled_dot_product_attention 比较，覆盖每种变体（掩码、交叉注意力、GQA、RoPE、预设、"
        "--algorithm flash）。所有差异都在该类型的容差内时退出码为 0，有一个超出时为 1，缺少 "
        "torch 时为 2（那一行会说明如何安装）。--backward：每个梯度也与 torch autograd 比较"
        "（普通 eager torch、SDPA、nn.MultiheadAttention），保存的字节数与 autograd 保存的比较。"
        "需要 torch：torch 扩展，attntrace\\[torch]（Linux 上用它的 CPU 版："
        "docs/getting-started.md#pytorch）。--past N --page-size P：分页缓存的步骤也"
        "比较，它 gather 得到的 k_paged / v_paged 与 k_all / v_all 按位相等。",
    ),
    "help.verify.example": (
        "Example:\n  [bold]attntrace verify --preset llama-3-8b --hidden 256 --heads 8 --seq 16[/]",
        "例子：\n  [bold]attntrace verify --preset llama-3-8b --hidden 256 --heads 8 --seq 16[/]",
    ),
    "help.verify.dtype": (
        "Element type of both computations; the tolerance follows it (float16, float32 or "
        "float64: numpy, one side of every comparison, has no bfloat16).",
        "两边计算的元素类型；容差随之而定（float16、float32 或 float64：每次比较的一边是 numpy，"
        "它没有 bfloat16）。",
    ),
    "help.verify.fmt": (
        "table (for people) or json (schema attntrace.verify/1: config, tolerance, ok, and "
        "every comparison of steps and references).",
        "table（给人看）或 json（schema attntrace.verify/1：配置、容差、ok，以及步骤和参考实现的"
        "每一次比较）。",
    ),
    # --- diff ---------------------------------------------------------------------------------
    "help.diff": (
        "Run your attention beside the reference with the same weights and input; name the bug.",
        "用相同的权重和输入，把你的注意力与参考实现并排运行，并指出 bug。",
    ),
    "help.diff.what": (
        "Every reference step (x, q_proj, ..., scores, scaled, weights, context, merged, "
        "output) is matched by its numbers to the tensor of your code that holds them; at the "
        "first that differs the known bugs (heads split without transpose, softmax over the "
        "wrong axis, 1/d scaling, x @ W, swapped q/k/v, mask polarity, GQA tiling, RoPE "
        "pairing ...) are applied to the reference to find the one your code reproduces. A "
        "function is called as fn(x, params). Exit 0 when every step matches within the "
        "verify tolerance (MATCH), 1 at a divergence (DIFFERS), 2 bad input, 4 when the "
        "evidence cannot decide (CANNOT TELL: what is missing and the flag that would decide). "
        "A flag you give for a choice (--causal, --rope-style ...) wins over what the module "
        "states; what diff read from the module is printed under the header.",
        "参考实现的每一步（x、q_proj、...、scores、scaled、weights、context、merged、output）都按"
        "数值与你的代码中存有这些数的张量对应起来；在第一个不一致的步骤，把已知的 bug（分头时没有"
        " transpose、softmax 的维度不对、按 1/d 缩放、x @ W、q/k/v 互换、掩码取反、GQA 用 tile "
        "复制、RoPE 配对方式……）逐个施加到参考实现上，找出你的代码重现的那一个。函数按 fn(x, "
        "params) 调用。每一步都在 verify 的容差内一致时退出码为 0（MATCH），出现不一致时为 1"
        "（DIFFERS），输入有误为 2，证据不足以判断时为 4（CANNOT TELL：缺什么，以及哪个选项能让它"
        "判断）。你为某个选择给的选项（--causal、--rope-style ……）优先于模块自己声明的；diff 从模块"
        "读到的内容打印在表头下面。",
    ),
    "help.diff.example": (
        "Example:\n"
        "  [bold]attntrace diff my_attn.py:Attention --init num_heads=4 --batch 2 --seq 8[/]",
        "例子：\n"
        "  [bold]attntrace diff my_attn.py:Attention --init num_heads=4 --batch 2 --seq 8[/]",
    ),
    "help.diff.target": (
        "FILE.py:NAME or package.module:NAME: an nn.Module class (built with --init), an "
        "nn.Module instance, or a function fn(x, params).",
        "FILE.py:NAME 或 package.module:NAME：一个 nn.Module 类（用 --init 构造）、一个 nn.Module "
        "实例，或一个函数 fn(x, params)。",
    ),
    "help.diff.init": (
        "Argument of the module class, repeatable; values are Python literals.",
        "模块类的构造参数，可重复；值是 Python 字面量。",
    ),
    "help.diff.fmt": (
        "table, or json (schema attntrace.diff/2) for CI.",
        "table，或给 CI 用的 json（schema attntrace.diff/2）。",
    ),
    "help.diff.timeout": (
        "Stop the code under test after this many seconds (it runs in a child process, its "
        "memory limited to --max-memory or the default budget); exit 1 \\[default: 60].",
        "被测代码运行这么多秒后停止（它在子进程中运行，内存限制为 --max-memory 或默认预算）；"
        "退出码 1 \\[默认：60]。",
    ),
    "help.diff.backward": (
        "Also the gradients: your code run backward (autograd, or your own autograd.Function) "
        "from the reference's d_output; d_x and each weight's gradient compared, the first "
        "that differs and the backward bug named.",
        "同时比较梯度：从参考实现的 d_output 反向运行你的代码（autograd，或你自己的 "
        "autograd.Function）；比较 d_x 和每个权重的梯度，指出第一个不一致的梯度和反向传播的 bug。",
    ),
    # --- demo ---------------------------------------------------------------------------------
    "help.demo": (
        "Walk through the study notes' worked 3×3 example, unscaled and scaled.",
        "逐步演示学习笔记中 3×3 的例子：先不缩放，再缩放。",
    ),
    "help.demo.what": (
        "Query, Key, Value -> scores -> softmax -> output, first unscaled as the notes compute "
        "it, then scaled by 1/√d; each matrix with a sentence, in English or Chinese (--lang). "
        "--query, --key and --value put your own numbers in the notes' place.",
        "Query、Key、Value -> scores -> softmax -> output，先像笔记那样不缩放，再乘以 1/√d 缩放；"
        "每个矩阵配一句话，英文或中文（--lang）。--query、--key 和 --value 用你自己的数代替笔记里"
        "的数。",
    ),
    "help.demo.examples": (
        "Reproduce any part on real sizes with:\n"
        "  [bold]attntrace run --scale none --hidden 4 --heads 2 --values[/]\n"
        "Your own numbers, in Chinese:\n"
        "  [bold]attntrace demo --query '1,0; 0,1' --key '1,1; 0,2' --lang zh[/]",
        "在真实尺寸上重现任何一部分：\n"
        "  [bold]attntrace run --scale none --hidden 4 --heads 2 --values[/]\n"
        "用你自己的数，中文输出：\n"
        "  [bold]attntrace demo --query '1,0; 0,1' --key '1,1; 0,2' --lang zh[/]",
    ),
    "help.demo.query": (
        "Your own Query matrix instead of the notes': rows split by ';', numbers by ',' (e.g. "
        "'1,0,2; 2,2,2; 2,1,3'), or a .npy file.",
        "用你自己的 Query 矩阵代替笔记里的：行用 ';' 分隔，数用 ',' 分隔（例如 "
        "'1,0,2; 2,2,2; 2,1,3'），或一个 .npy 文件。",
    ),
    "help.demo.key": (
        "Your own Key matrix instead of the notes': rows split by ';', numbers by ',' (e.g. "
        "'0,1,1; 4,4,0; 2,3,1'), or a .npy file.",
        "用你自己的 Key 矩阵代替笔记里的：行用 ';' 分隔，数用 ',' 分隔（例如 "
        "'0,1,1; 4,4,0; 2,3,1'），或一个 .npy 文件。",
    ),
    "help.demo.value": (
        "Your own Value matrix instead of the notes': rows split by ';', numbers by ',' (e.g. "
        "'1,2,3; 2,8,0; 2,6,3'), or a .npy file.",
        "用你自己的 Value 矩阵代替笔记里的：行用 ';' 分隔，数用 ',' 分隔（例如 "
        "'1,2,3; 2,8,0; 2,6,3'），或一个 .npy 文件。",
    ),
    # --- the top-level help (attntrace --help) ------------------------------------------------
    "help.root.about": (
        "Trace every intermediate tensor shape of multi-head attention (the reference, your "
        "own code or a real model's layer): each tensor's named axes, the op that made it and "
        "its cost.",
        "追踪多头注意力每一个中间张量的形状（参考实现、你自己的代码或真实模型的一层）：每个张量"
        "带名字的维度、产生它的运算和它的计算量。",
    ),
    "help.root.start": (
        "Start with: [bold]attntrace run --heads 12 --hidden 768[/]",
        "从这里开始：[bold]attntrace run --heads 12 --hidden 768[/]",
    ),
    "help.root.version": ("Print the version and exit.", "打印版本号并退出。"),
    "help.root.install_completion": (
        "Install completion for the current shell.",
        "为当前的 shell 安装命令补全。",
    ),
    "help.root.show_completion": (
        "Show completion for the current shell, to copy it or customize the installation.",
        "显示当前 shell 的命令补全，用来复制或自定义安装。",
    ),
    "help.root.callback": ("Options that apply before any command.", "在任何命令之前生效的选项。"),
    # --- across devices (--tp, --sp, --cp) --------------------------------------------------
    "help.tp": (
        "Tensor parallelism over T ranks (Megatron): each rank holds h/T heads, q, k, v "
        "column-parallel, the output row-parallel and all-reduced. Shows one rank's steps.",
        "在 T 个 rank 上做张量并行（Megatron）：每个 rank 持有 h/T 个头，q、k、v 按列并行，"
        "输出按行并行再 all-reduce。显示一个 rank 的步骤。",
    ),
    "help.sp": (
        "Sequence parallelism with --tp: x sharded S/T, all-gathered before the projections, "
        "the output reduce-scattered.",
        "与 --tp 一起用的序列并行：x 按 S/T 切分，投影前 all-gather，输出 reduce-scatter。",
    ),
    "help.cp": (
        "Context parallelism over C ranks: each holds S/C tokens (with --causal the "
        "load-balanced order: chunks c and 2C-1-c of 2C).",
        "在 C 个 rank 上做上下文并行：每个 rank 持有 S/C 个 token（加 --causal 时按负载均衡的"
        "顺序：2C 块中的第 c 块和第 2C-1-c 块）。",
    ),
    "help.cp_kind": (
        "ring (key/value blocks passed round, merged by log-sum-exp), allgather, or ulysses "
        "(two all-to-alls) \\[default: ring].",
        "ring（键/值块在 rank 间传一圈，用 log-sum-exp 合并）、allgather 或 ulysses（两次 "
        "all-to-all）\\[默认：ring]。",
    ),
    "help.rank": (
        "The rank whose steps are shown, 0 to T·C-1 (t = rank % T, c = rank // T).",
        "显示哪个 rank 的步骤，0 到 T·C-1（t = rank % T，c = rank // T）。",
    ),
    "help.sweep.tp": (
        "sweep: tensor-parallel sizes, comma-separated (e.g. 1,2,4,8): rank 0's cost on each.",
        "sweep：张量并行的规模，用逗号分隔（如 1,2,4,8）：每种规模下 rank 0 的开销。",
    ),
    "help.sweep.cp": (
        "sweep: context-parallel sizes, comma-separated (e.g. 1,2,4,16).",
        "sweep：上下文并行的规模，用逗号分隔（如 1,2,4,16）。",
    ),
    "help.verify.nproc": (
        "verify: run the T·C ranks as N local processes with torch.distributed (gloo), each "
        "rank's steps against the simulated ranks and the gathered output against one device. "
        "Without it, --tp/--cp compare the ranks simulated in one process.",
        "verify：用 torch.distributed（gloo）把 T·C 个 rank 作为 N 个本地进程运行，每个 rank "
        "的步骤与模拟的 rank 比较，汇总后的输出与单设备比较。不加它时，--tp/--cp 比较在一个进程里"
        "模拟的 rank。",
    ),
    "help.verify.nproc_timeout": (
        "verify --nproc: the processes are stopped after this long.",
        "verify --nproc：这么久之后停止这些进程。",
    ),
    # --- real words (--prompt) and explore ----------------------------------------------------
    "help.prompt": (
        "Real words: with --model DIR, its own tokenizer splits them and the model computes the "
        "layer's input (token labels in the heat maps); without, a byte-level split.",
        "真实的文字：加 --model DIR 时用它自己的分词器切分，由模型算出这一层的输入（热力图上标出 "
        "token）；不加时按字节切分。",
    ),
    "help.token": (
        "Show query token I's attention row in every head (with --prompt, its word).",
        "显示第 I 个查询 token 在每个头里的注意力行（加 --prompt 时显示它的词）。",
    ),
    "help.explore.port": (
        "The port on 127.0.0.1; 0 lets the system pick a free one.",
        "127.0.0.1 上的端口；0 表示由系统挑一个空闲端口。",
    ),
    "help.explore.no_browser": (
        "Print the URL only; do not open a browser.",
        "只打印网址，不打开浏览器。",
    ),
    "help.explore": (
        "Open an interactive page: turn the sizes and watch every shape follow.",
        "打开一个交互页面：调整尺寸，看每个形状跟着变。",
    ),
    "help.explore.what": (
        "Its controls: B, S, H, h, g, RoPE, causal, window, past and the algorithm. Click a step "
        "for what it does (English or Chinese), its numbers at small sizes and its cost. The "
        "page is served on 127.0.0.1 with a token in its URL, fetches nothing from the network "
        "and asks attntrace's own engine for every shape. With --prompt (and --model DIR), click "
        "a token for its attention row in every head and layer. Ctrl-C stops it.",
        "它的控件：B、S、H、h、g、RoPE、causal、window、past 和算法。点击一个步骤，看它做什么"
        "（英文或中文）、小尺寸下的数值和它的开销。页面在 127.0.0.1 上提供，网址里带一个令牌，"
        "不从网络获取任何东西，每个形状都向 attntrace 自己的引擎询问。加 --prompt（和 --model "
        "DIR）时，点击一个 token 看它在每一层每个头里的注意力行。按 Ctrl-C 停止。",
    ),
    "help.explore.example": (
        "Example:\n  [bold]attntrace explore --model ./gpt2 --prompt 'The cat sat on the mat'[/]",
        "例子：\n  [bold]attntrace explore --model ./gpt2 --prompt '猫坐在垫子上'[/]",
    ),
}
