"""The words of the interface in both languages, side by side: key → (English, Chinese).

Errors, verdicts, rules and fixes are printed by the code in English; the English side here
is each sentence's template (``{name}`` stands for a figure, a name or a shape), and
:func:`attntrace.learn.lang.translate` finds the template a printed sentence fits and fills
the Chinese side with the same figures. Every key has both languages (a test checks), and
the Chinese uses the study notes' words.
"""

from __future__ import annotations

MESSAGES: dict[str, tuple[str, str]] = {
    # --- the one error line -----------------------------------------------------------------
    "err.prefix": ("attntrace: error: {message}", "attntrace：错误：{message}"),
    "err.lang": (
        "--lang must be one of {choices}, got {got}",
        "--lang 只能是 {choices} 之一，而不是 {got}",
    ),
    "err.internal": (
        "internal error ({kind}: {detail}); this is a bug in attntrace {version}, please report "
        "it with the command you ran",
        "内部错误（{kind}: {detail}）；这是 attntrace {version} 的 bug，请连同你运行的命令一起报告",
    ),
    "err.out_of_memory": (
        "out of memory; lower the sizes or set a smaller --max-memory",
        "内存不足；请减小尺寸，或设置更小的 --max-memory",
    ),
    "err.stdout": (
        "cannot write to stdout ({why}): the output is incomplete; {fix}write it to a file "
        "with --output FILE",
        "无法写入标准输出（{why}）：输出不完整；{fix}请用 --output FILE 写入文件",
    ),
    "err.stdout_space": ("free some space or ", "腾出一些空间，或"),
    "err.stdout_closed": ("it is closed", "它已关闭"),
    # --- usage errors (click's words) ---------------------------------------------------------
    "err.see_help": ("see {command} --help'", "参见 {command} --help'"),
    "err.no_such_option": ("No such option: {name}", "没有这个选项：{name}"),
    "err.no_such_option_possible": (
        "No such option: {name} (Possible options: {options})",
        "没有这个选项：{name}（可能是：{options}）",
    ),
    "err.no_such_option_mean": (
        "No such option: {name} Did you mean {other}?",
        "没有这个选项：{name}，你是不是想用 {other}？",
    ),
    "err.invalid_value": ("Invalid value for {param}: {reason}", "{param} 的值无效：{reason}"),
    "err.not_int": ("{value} is not a valid int", "{value} 不是有效的整数"),
    "err.not_integer": ("{value} is not a valid integer", "{value} 不是有效的整数"),
    "err.not_float": ("{value} is not a valid float", "{value} 不是有效的数"),
    "err.not_one_of": ("{value} is not one of {choices}", "{value} 不在可选值 {choices} 之中"),
    "err.not_in_range": ("{value} is not in the range {range}", "{value} 不在范围 {range} 之内"),
    "err.file_missing": ("File {path} does not exist", "文件 {path} 不存在"),
    "err.dir_missing": ("Directory {path} does not exist", "文件夹 {path} 不存在"),
    "err.path_missing": ("Path {path} does not exist", "路径 {path} 不存在"),
    "err.file_is_dir": ("File {path} is a directory", "{path} 是文件夹，不是文件"),
    "err.needs_argument": ("Option {name} requires an argument", "选项 {name} 需要一个值"),
    "err.missing_argument": ("Missing argument {name}", "缺少参数 {name}"),
    "err.missing_option": ("Missing option {name}", "缺少选项 {name}"),
    "err.no_such_command": ("No such command {name}", "没有这个命令 {name}"),
    "err.extra_arguments": (
        "Got unexpected extra argument(s) ({args})",
        "多出了意料之外的参数（{args}）",
    ),
    "err.extra_argument": ("Got unexpected extra argument ({args})", "多出了意料之外的参数（{args}）"),
    # --- sizes and variants (AttentionConfig) -------------------------------------------------
    "err.not_divisible": (
        "--hidden {H} is not divisible by --heads {h}; valid head counts for hidden {H}: "
        "{valid} (or set --head-dim)",
        "--hidden {H} 不是 --heads {h} 的整数倍（feature_dim 必须是 num_heads * head_dim 的整数倍）；"
        "hidden 为 {H} 时可用的头数：{valid}（或者设置 --head-dim）",
    ),
    "err.kv_not_divisible": (
        "--heads {h} is not divisible by --kv-heads {g}; use one of {valid}",
        "--heads {h} 不是 --kv-heads {g} 的整数倍；请用 {valid} 之一",
    ),
    "err.at_least_one": ("--{option} must be at least 1, got {value}", "--{option} 至少为 1，而不是 {value}"),
    "err.at_least_one_batch": (
        "--{option} must be at least 1, got {value} (omit --batch for the unbatched layout)",
        "--{option} 至少为 1，而不是 {value}（不带 batch 的布局请省略 --batch）",
    ),
    "err.whole_number": ("--{option} must be a whole number, got {value}", "--{option} 必须是整数，而不是 {value}"),
    "err.too_large": ("--{option} {value} is too large; the most is {most}", "--{option} {value} 太大；最大为 {most}"),
    "err.scale": (
        "--scale must be a positive number, 'sqrt' or 'none', got {value}",
        "--scale 必须是正数、'sqrt' 或 'none'，而不是 {value}",
    ),
    "err.scale_text": (
        "--scale must be sqrt, none or a positive number (e.g. 0.125), got {value}",
        "--scale 必须是 sqrt、none 或一个正数（例如 0.125），而不是 {value}",
    ),
    "err.unknown_dtype": ("unknown dtype {dtype}; use one of {choices}", "未知的类型 {dtype}；请用 {choices} 之一"),
    "err.backend_dtype": (
        "the {backend} backend has no dtype {dtype}; use one of {choices} or --backend torch",
        "{backend} 后端没有 {dtype} 类型；请用 {choices} 之一，或者 --backend torch",
    ),
    "err.unknown_backend": ("unknown backend {name}; use one of {choices}", "未知的后端 {name}；请用 {choices} 之一"),
    "err.seed": (
        "--seed must be a whole number from 0 to 2**64 - 1, got {value}",
        "--seed 必须是 0 到 2**64 - 1 之间的整数，而不是 {value}",
    ),
    "err.past_range": (
        "--past must be a whole number from 0 to {most} (tokens already in the KV cache), got "
        "{value}",
        "--past 必须是 0 到 {most} 之间的整数（已经在 KV 缓存中的词数），而不是 {value}",
    ),
    "err.past_cross": (
        "--past caches the keys of self-attention; drop --kv-seq/--kv-hidden (cross-attention "
        "reads its encoder keys whole)",
        "--past 缓存的是自注意力的键；请去掉 --kv-seq/--kv-hidden（交叉注意力一次读取编码器的全部键）",
    ),
    "err.window": (
        "--window must be a whole number >= 1 (keys per query), got {value}",
        "--window 必须是 >= 1 的整数（每个查询看到的键数），而不是 {value}",
    ),
    "err.rope_needed": (
        "--rope-scaling and --rotary-dims change RoPE; add --rope",
        "--rope-scaling 和 --rotary-dims 修改的是 RoPE；请加上 --rope",
    ),
    "err.rope_style": ("--rope-style must be half or interleaved, got {value}", "--rope-style 必须是 half 或 interleaved，而不是 {value}"),
    "err.rope_style_needs": (
        "--rope-style interleaved pairs the dims RoPE rotates; add --rope",
        "--rope-style interleaved 决定 RoPE 旋转哪些维度对；请加上 --rope",
    ),
    "err.rotary_dims": ("--rotary-dims must be even, 2 to d = {d}; got {value}", "--rotary-dims 必须是 2 到 d = {d} 之间的偶数；而不是 {value}"),
    "err.softcap": ("--softcap must be a number > 0, got {value}", "--softcap 必须是 > 0 的数，而不是 {value}"),
    "err.qk_norm": ("--qk-norm must be head or full, got {value}", "--qk-norm 必须是 head 或 full，而不是 {value}"),
    "err.rope_even": (
        "--rope needs an even head_dim, got d = {d}; choose --hidden/--heads (or --head-dim) so "
        "that d is even",
        "--rope 需要偶数的 head_dim，而 d = {d}；请选择 --hidden/--heads（或 --head-dim）让 d 为偶数",
    ),
    "err.rope_cross": (
        "--rope encodes positions within one sequence; drop --rope or --kv-seq (cross-attention "
        "uses no rotary embedding)",
        "--rope 编码的是同一个序列内的位置；请去掉 --rope 或 --kv-seq（交叉注意力不用旋转位置编码）",
    ),
    "err.rope_base": ("--rope-base must be a number > 0 and finite, got {value}", "--rope-base 必须是有限的正数，而不是 {value}"),
    "err.rope_base_alone": (
        "--rope-base has no effect without rotary embeddings; add --rope",
        "没有旋转位置编码时 --rope-base 不起作用；请加上 --rope",
    ),
    "err.key_lengths_batch": (
        "--key-lengths needs --batch (one length per batch item)",
        "--key-lengths 需要 --batch（每个样本一个长度）",
    ),
    "err.key_lengths_count": (
        "--key-lengths has {n} length(s) but --batch is {B}; give one length per batch item, "
        "e.g. --key-lengths {example}",
        "--key-lengths 有 {n} 个长度，但 --batch 是 {B}；请每个样本给一个长度，例如 --key-lengths "
        "{example}",
    ),
    "err.key_lengths_fit": (
        "--key-lengths {value} does not fit the {N} keys; use lengths from 1 to {most}",
        "--key-lengths {value} 超出了 {N} 个键；请用 1 到 {most} 之间的长度",
    ),
    "err.key_lengths_fit_seq": (
        "--key-lengths {value} does not fit the {N} keys; use lengths from 1 to {most} (or raise "
        "--seq)",
        "--key-lengths {value} 超出了 {N} 个键；请用 1 到 {most} 之间的长度（或者增大 --seq）",
    ),
    "err.key_lengths_text": (
        "--key-lengths takes whole numbers separated by commas, e.g. 3,2; got {value}",
        "--key-lengths 接受用逗号分隔的整数，例如 3,2；而不是 {value}",
    ),
    "err.unknown_algorithm": ("unknown algorithm {name}; use one of {choices}", "未知的算法 {name}；请用 {choices} 之一"),
    "err.block_size": (
        "--block-size must be a whole number from 1 to {most}, got {value}",
        "--block-size 必须是 1 到 {most} 之间的整数，而不是 {value}",
    ),
    "err.unknown_preset": (
        "unknown preset {name}; use one of {choices} (see: attntrace presets)",
        "未知的预设 {name}；请用 {choices} 之一（见：attntrace presets）",
    ),
    "err.unknown_preset_hint": (
        "unknown preset {name} (did you mean {other}?); use one of {choices} (see: attntrace "
        "presets)",
        "未知的预设 {name}（你是不是想用 {other}？）；请用 {choices} 之一（见：attntrace presets）",
    ),
    "err.either": ("use either {one} or {other}, not both", "{one} 和 {other} 只能用一个，不能同时用"),
    "err.layer_needs": (
        "--layer picks a layer of --model DIR (or of --hf-config); add one",
        "--layer 选择 --model DIR（或 --hf-config）的一层；请加上其中一个",
    ),
    "err.layer_preset": (
        "--layer picks a layer of --model DIR or --hf-config, not --preset",
        "--layer 选择 --model DIR 或 --hf-config 的一层，不能用于 --preset",
    ),
    # --- commands -----------------------------------------------------------------------------
    "err.head": ("--head {head} does not exist; use 0 to {last}", "不存在第 --head {head} 个头；请用 0 到 {last}"),
    "err.explain_csv": (
        "--explain works with --format table, json, markdown, svg or html, not csv; drop "
        "--explain or pick one of those",
        "--explain 只能和 --format table、json、markdown、svg 或 html 一起用，不能用 csv；请去掉 "
        "--explain 或选择其中一种格式",
    ),
    "err.values_format": (
        "--values only works with --format table, svg or html, not {fmt}; drop --values",
        "--values 只能和 --format table、svg 或 html 一起用，不能用 {fmt}；请去掉 --values",
    ),
    "err.plot_shape": (
        "--plot draws the attention weights, which --backend shape does not compute; use numpy "
        "or torch",
        "--plot 画的是注意力权重，而 --backend shape 不计算数值；请用 numpy 或 torch",
    ),
    "err.report_html": ("--out {out}: the file name must end in .html", "--out {out}：文件名必须以 .html 结尾"),
    "err.flow_svg": ("--plot-flow {out}: the file name must end in .svg", "--plot-flow {out}：文件名必须以 .svg 结尾"),
    "err.needs_backward": ("{given} needs --backward; add --backward", "{given} 需要 --backward；请加上 --backward"),
    "err.expect": (
        "cannot read --expect {text}; write STEP=SHAPE, e.g. scores=12,3,3 or scores=h,S,S",
        "无法读取 --expect {text}；请写成 STEP=SHAPE，例如 scores=12,3,3 或 scores=h,S,S",
    ),
    "err.nothing_to_check": (
        "nothing to check; give --expect STEP=SHAPE, --golden FILE or --spec FILE.toml",
        "没有要检查的内容；请给出 --expect STEP=SHAPE、--golden FILE 或 --spec FILE.toml",
    ),
    "err.nothing_to_check_trace": (
        "nothing to check; give --expect STEP=SHAPE or --golden FILE.json",
        "没有要检查的内容；请给出 --expect STEP=SHAPE 或 --golden FILE.json",
    ),
    "err.unknown_step": ("unknown step {name}; steps: {steps}", "未知的步骤 {name}；步骤有：{steps}"),
    "err.vs_empty": ("--vs needs the options that make B, e.g. --vs '--heads 8'", "--vs 需要给出构成 B 的选项，例如 --vs '--heads 8'"),
    "err.axes": (
        "cannot read --axes {text}; write LETTER=SIZE pairs, e.g. h=12,d=64",
        "无法读取 --axes {text}；请写成 LETTER=SIZE 对，例如 h=12,d=64",
    ),
    "err.threads": (
        "--threads {n} is out of range; use 1 to 1024 (default: {cores}, the cores)",
        "--threads {n} 超出范围；请用 1 到 1024（默认：{cores}，CPU 核数）",
    ),
    "err.memory_budget": (
        "this trace needs about {needed} ({largest}) but the budget is {limit} ({origin})",
        "这次追踪大约需要 {needed}（{largest}），但内存预算只有 {limit}（{origin}）",
    ),
    "err.alone": ("{name} {shape} alone is {size}", "仅 {name} {shape} 就占 {size}"),
    "err.available": ("{share} of available memory", "可用内存的 {share}"),
    "err.memory_advice": (
        "lower --seq/--hidden/--batch, or trace shapes only with --backend shape, or compute "
        "tile by tile without the (S, S) matrix with --algorithm flash",
        "请减小 --seq/--hidden/--batch，或者用 --backend shape 只追踪形状，或者用 --algorithm "
        "flash 逐块计算、不形成完整的 (S, S) 矩阵",
    ),
    "err.memory_advice_flash": (
        "lower --seq/--hidden/--batch, or trace shapes only with --backend shape",
        "请减小 --seq/--hidden/--batch，或者用 --backend shape 只追踪形状",
    ),
    # --- files --------------------------------------------------------------------------------
    "err.no_file": ("{name}: no such file; check the path", "{name}：没有这个文件；请检查路径"),
    "err.unreadable": ("{name}: cannot be read ({reason}); check the path", "{name}：无法读取（{reason}）；请检查路径"),
    "err.permission": (
        "{name}: permission denied; make the file readable (chmod u+r)",
        "{name}：没有权限；请让文件可读（chmod u+r）",
    ),
    "err.not_regular": ("{name}: is {kind}, not a regular file; {fix}", "{name}：是{kind}，不是普通文件；{fix}"),
    "err.too_big_file": (
        "{name}: is larger than {limit}, the most attntrace reads from such a file; check that "
        "this is the right file",
        "{name}：大于 {limit}，这是 attntrace 从这类文件读取的上限；请确认文件是否正确",
    ),
    "err.pickle": (
        "{path}: {name} carries pickled Python objects; attntrace never unpickles, so it was "
        "refused and nothing in it ran; save plain arrays instead (numpy.save of a float "
        "array, torch.save of a state_dict of tensors, or a .safetensors file)",
        "{path}：{name} 含有 pickle 的 Python 对象；attntrace 从不反序列化 pickle，所以拒绝读取，"
        "其中的代码也没有运行；请改为保存普通数组（numpy.save 保存浮点数组、torch.save 保存张量的 "
        "state_dict，或 .safetensors 文件）",
    ),
    "err.mask_shape": (
        "--mask of shape {shape} does not broadcast to the scores ({named}) = {target}; save a "
        "mask of shape ({a}, {b}) = {small} or {target}",
        "形状为 {shape} 的 --mask 无法广播到分数 ({named}) = {target}；请保存形状为 ({a}, {b}) = "
        "{small} 或 {target} 的掩码",
    ),
    "err.file_shape": (
        "{name} has shape {shape}, but the sizes give ({axes}) = {expected}; make the size "
        "options match the files",
        "{name} 的形状是 {shape}，但尺寸给出的是 ({axes}) = {expected}；请让尺寸选项与文件一致",
    ),
    # --- your code (trace, diff) --------------------------------------------------------------
    "err.target": (
        "cannot read the target {text}; write FILE.py, FILE.py:NAME or package.module:NAME",
        "无法读取目标 {text}；请写成 FILE.py、FILE.py:NAME 或 package.module:NAME",
    ),
    "err.no_script": (
        "no such file: {name}; give a Python script or FILE.py:NAME",
        "没有这个文件：{name}；请给出一个 Python 脚本或 FILE.py:NAME",
    ),
    "err.no_name": ("{where} has no {name}; callables there: {found}", "{where} 里没有 {name}；那里可调用的有：{found}"),
    "err.not_python": ("cannot load {path} as Python", "无法把 {path} 当作 Python 加载"),
    "err.import_failed": ("importing {target} failed: {why}", "导入 {target} 失败：{why}"),
    "err.build_failed": ("building {target} failed: {why}", "构造 {target} 失败：{why}"),
    "err.init_pair": (
        "cannot read --init {pair}; write KEY=VALUE, e.g. --init num_heads=12",
        "无法读取 --init {pair}；请写成 KEY=VALUE，例如 --init num_heads=12",
    ),
    "err.init_literal": (
        "cannot read --init {pair}: {value} is not a Python literal",
        "无法读取 --init {pair}：{value} 不是 Python 字面量",
    ),
    "err.needs_torch": (
        "{name} imports torch, which is not installed; install it with: {how}",
        "{name} 导入了 torch，但 torch 没有安装；安装方法：{how}",
    ),
    "err.backend_torch": (
        "the torch backend needs PyTorch, which is not installed; install it with: {how}",
        "torch 后端需要 PyTorch，但它没有安装；安装方法：{how}",
    ),
    "err.plot_needs": (
        "--plot needs matplotlib, which is not installed; install it with: {how}",
        "--plot 需要 matplotlib，但它没有安装；安装方法：{how}",
    ),
    "err.diff_name": (
        "diff needs a NAME in the target, e.g. {text}:Attention (an nn.Module or a function)",
        "diff 需要目标里的 NAME，例如 {text}:Attention（一个 nn.Module 或一个函数）",
    ),
    "err.code_raised": (
        "the code under test raised {what}; run attntrace trace on it to see the shapes up to "
        "the failure",
        "被测代码抛出了 {what}；请对它运行 attntrace trace，查看出错之前的各个形状",
    ),
    "err.code_raised_shape": (
        "the code under test raised {what} (on x of shape {shape}); check --seq/--batch, or run "
        "attntrace trace on it to see the shapes up to the failure",
        "被测代码抛出了 {what}（x 的形状为 {shape}）；请检查 --seq/--batch，或者对它运行 attntrace "
        "trace，查看出错之前的各个形状",
    ),
    "err.cannot_diff": (
        "cannot diff a {kind}; give an nn.Module or a function fn(x, params)",
        "无法 diff 一个 {kind}；请给出一个 nn.Module 或函数 fn(x, params)",
    ),
    "err.diff_bf16": (
        "diff --dtype bfloat16: the reference runs on numpy, which has no bfloat16; give --dtype "
        "float32 (a bfloat16 module is compared converted to it) or float16",
        "diff --dtype bfloat16：参考实现在 numpy 上运行，而 numpy 没有 bfloat16；请用 --dtype "
        "float32（bfloat16 的模块会转换后比较）或 float16",
    ),
    "err.install": (
        "pip install {what} (or just the library: {alone})",
        "pip install {what}（或者只装这个库：{alone}）",
    ),
}
