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
    "err.extra_argument": (
        "Got unexpected extra argument ({args})",
        "多出了意料之外的参数（{args}）",
    ),
    # --- sizes and variants (AttentionConfig) -------------------------------------------------
    "err.not_divisible": (
        "--hidden {H} is not divisible by --heads {h}; valid head counts for hidden {H}: "
        "{valid} (or set --head-dim)",
        "--hidden {H} 不是 --heads {h} 的整数倍（feature_dim 必须是 num_heads * head_dim 的整数倍"
        "）；"
        "hidden 为 {H} 时可用的头数：{valid}（或者设置 --head-dim）",
    ),
    "err.kv_not_divisible": (
        "--heads {h} is not divisible by --kv-heads {g}; use one of {valid}",
        "--heads {h} 不是 --kv-heads {g} 的整数倍；请用 {valid} 之一",
    ),
    "err.at_least_one": (
        "--{option} must be at least 1, got {value}",
        "--{option} 至少为 1，而不是 {value}",
    ),
    "err.at_least_one_batch": (
        "--{option} must be at least 1, got {value} (omit --batch for the unbatched layout)",
        "--{option} 至少为 1，而不是 {value}（不带 batch 的布局请省略 --batch）",
    ),
    "err.whole_number": (
        "--{option} must be a whole number, got {value}",
        "--{option} 必须是整数，而不是 {value}",
    ),
    "err.too_large": (
        "--{option} {value} is too large; the most is {most}",
        "--{option} {value} 太大；最大为 {most}",
    ),
    "err.scale": (
        "--scale must be a positive number, 'sqrt' or 'none', got {value}",
        "--scale 必须是正数、'sqrt' 或 'none'，而不是 {value}",
    ),
    "err.scale_text": (
        "--scale must be sqrt, none or a positive number (e.g. 0.125), got {value}",
        "--scale 必须是 sqrt、none 或一个正数（例如 0.125），而不是 {value}",
    ),
    "err.unknown_dtype": (
        "unknown dtype {dtype}; use one of {choices}",
        "未知的类型 {dtype}；请用 {choices} 之一",
    ),
    "err.backend_dtype": (
        "the {backend} backend has no dtype {dtype}; use one of {choices} or --backend torch",
        "{backend} 后端没有 {dtype} 类型；请用 {choices} 之一，或者 --backend torch",
    ),
    "err.unknown_backend": (
        "unknown backend {name}; use one of {choices}",
        "未知的后端 {name}；请用 {choices} 之一",
    ),
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
        "--past 缓存的是自注意力的键；请去掉 --kv-seq/--kv-hidden（交叉注意力一次读取编码器的全部"
        "键）",
    ),
    "err.window": (
        "--window must be a whole number >= 1 (keys per query), got {value}",
        "--window 必须是 >= 1 的整数（每个查询看到的键数），而不是 {value}",
    ),
    "err.rope_needed": (
        "--rope-scaling and --rotary-dims change RoPE; add --rope",
        "--rope-scaling 和 --rotary-dims 修改的是 RoPE；请加上 --rope",
    ),
    "err.rope_style": (
        "--rope-style must be half or interleaved, got {value}",
        "--rope-style 必须是 half 或 interleaved，而不是 {value}",
    ),
    "err.rope_style_needs": (
        "--rope-style interleaved pairs the dims RoPE rotates; add --rope",
        "--rope-style interleaved 决定 RoPE 旋转哪些维度对；请加上 --rope",
    ),
    "err.rotary_dims": (
        "--rotary-dims must be even, 2 to d = {d}; got {value}",
        "--rotary-dims 必须是 2 到 d = {d} 之间的偶数；而不是 {value}",
    ),
    "err.softcap": (
        "--softcap must be a number > 0, got {value}",
        "--softcap 必须是 > 0 的数，而不是 {value}",
    ),
    "err.alibi_with": (
        "--alibi and {flag} both encode positions (no model uses both); drop one of them",
        "--alibi 和 {flag} 都编码位置（没有模型同时用两者）；请去掉其中一个",
    ),
    "err.alibi_cross": (
        "--alibi biases by the distance within one sequence; drop --alibi or --kv-seq "
        "(cross-attention has no ALiBi)",
        "--alibi 按同一个序列内的距离加偏置；请去掉 --alibi 或 --kv-seq（交叉注意力没有 ALiBi）",
    ),
    "err.alibi_bool": (
        "{name} must be True or False, got {value}",
        "{name} 必须是 True 或 False，而不是 {value}",
    ),
    "err.alibi_scaled": (
        "alibi_scaled changes where ALiBi's bias is added; add --alibi",
        "alibi_scaled 改变 ALiBi 偏置加在哪里；请加上 --alibi",
    ),
    "err.qk_norm": (
        "--qk-norm must be head or full, got {value}",
        "--qk-norm 必须是 head 或 full，而不是 {value}",
    ),
    "err.rope_even": (
        "--rope needs an even head_dim, got d = {d}; choose --hidden/--heads (or --head-dim) so "
        "that d is even",
        "--rope 需要偶数的 head_dim，而 d = {d}；请选择 --hidden/--heads（或 --head-dim）让 d 为偶"
        "数",
    ),
    "err.rope_cross": (
        "--rope encodes positions within one sequence; drop --rope or --kv-seq (cross-attention "
        "uses no rotary embedding)",
        "--rope 编码的是同一个序列内的位置；请去掉 --rope 或 --kv-seq（交叉注意力不用旋转位置编码"
        "）",
    ),
    "err.rope_base": (
        "--rope-base must be a number > 0 and finite, got {value}",
        "--rope-base 必须是有限的正数，而不是 {value}",
    ),
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
    "err.unknown_algorithm": (
        "unknown algorithm {name}; use one of {choices}",
        "未知的算法 {name}；请用 {choices} 之一",
    ),
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
    "err.either": (
        "use either {one} or {other}, not both",
        "{one} 和 {other} 只能用一个，不能同时用",
    ),
    "err.layer_needs": (
        "--layer picks a layer of --model DIR (or of --hf-config); add one",
        "--layer 选择 --model DIR（或 --hf-config）的一层；请加上其中一个",
    ),
    "err.layer_preset": (
        "--layer picks a layer of --model DIR or --hf-config, not --preset",
        "--layer 选择 --model DIR 或 --hf-config 的一层，不能用于 --preset",
    ),
    # --- commands -----------------------------------------------------------------------------
    "err.head": (
        "--head {head} does not exist; use 0 to {last}",
        "不存在第 --head {head} 个头；请用 0 到 {last}",
    ),
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
    "err.report_html": (
        "--out {out}: the file name must end in .html",
        "--out {out}：文件名必须以 .html 结尾",
    ),
    "err.flow_svg": (
        "--plot-flow {out}: the file name must end in .svg",
        "--plot-flow {out}：文件名必须以 .svg 结尾",
    ),
    "err.needs_backward": (
        "{given} needs --backward; add --backward",
        "{given} 需要 --backward；请加上 --backward",
    ),
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
    "err.unknown_step": (
        "unknown step {name}; steps: {steps}",
        "未知的步骤 {name}；步骤有：{steps}",
    ),
    "err.vs_empty": (
        "--vs needs the options that make B, e.g. --vs '--heads 8'",
        "--vs 需要给出构成 B 的选项，例如 --vs '--heads 8'",
    ),
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
    "err.unreadable": (
        "{name}: cannot be read ({reason}); check the path",
        "{name}：无法读取（{reason}）；请检查路径",
    ),
    "err.permission": (
        "{name}: permission denied; make the file readable (chmod u+r)",
        "{name}：没有权限；请让文件可读（chmod u+r）",
    ),
    "err.not_regular": (
        "{name}: is {kind}, not a regular file; {fix}",
        "{name}：是{kind}，不是普通文件；{fix}",
    ),
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
    "err.no_name": (
        "{where} has no {name}; callables there: {found}",
        "{where} 里没有 {name}；那里可调用的有：{found}",
    ),
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
    # --- diff: the verdict (render/diff_view.py's words; diffing/bugs.py's bugs) -------------
    "verdict.diff_title": ("attntrace diff {rest}", "attntrace diff {rest}"),
    "verdict.same_input": (
        "same input and weights (from {weights}) on both sides",
        "两边用相同的输入和权重（来自 {weights}）",
    ),
    "verdict.reference_weights": (
        "the reference's, as fn(x, params)",
        "参考实现的权重，按 fn(x, params) 传入",
    ),
    "verdict.tolerance": ("rtol {rtol} atol {atol}", "相对容差 rtol {rtol}，绝对容差 atol {atol}"),
    "verdict.diff_table": (
        "reference step by step beside the code under test",
        "参考实现的每一步与被测代码并排",
    ),
    "word.reference": ("reference", "参考实现"),
    "word.user_step": ("user step", "你的步骤"),
    "word.where": ("where", "位置"),
    "word.user_shape": ("user shape", "你的形状"),
    "word.max_abs": ("max abs", "绝对误差"),
    "word.max_rel": ("max rel", "相对误差"),
    "word.ok": ("ok", "一致"),
    "cell.missing": ("(missing)", "（缺失）"),
    "cell.not_seen": ("not seen", "未见到"),
    "cell.fused": ("fused", "已融合"),
    "cell.input": ("(input)", "（输入）"),
    "verdict.match": (
        "MATCH: all {n} steps the code makes agree with the reference within the {dtype} tolerance",
        "一致（MATCH）：代码的全部 {n} 步都在 {dtype} 的容差内与参考实现一致",
    ),
    "verdict.match_word": ("MATCH", "一致（MATCH）"),
    "verdict.differs_word": ("DIFFERS", "不一致（DIFFERS）"),
    "verdict.cannot_tell_word": ("CANNOT TELL", "无法判断（CANNOT TELL）"),
    "verdict.differs_at_source": (
        "DIFFERS from step {step} at {where}: {source}",
        "不一致（DIFFERS）：从第 {step} 步开始，位于 {where}：{source}",
    ),
    "verdict.differs_at": (
        "DIFFERS from step {step} at {where}",
        "不一致（DIFFERS）：从第 {step} 步开始，位于 {where}",
    ),
    "verdict.differs": ("DIFFERS from step {step}", "不一致（DIFFERS）：从第 {step} 步开始"),
    "verdict.how_far": (
        "user vs reference: max abs {abs}, max rel {rel}",
        "你的代码与参考实现相比：最大绝对误差 {abs}，最大相对误差 {rel}",
    ),
    "verdict.shapes_differ": (
        "user vs reference: shapes differ, {user} against {reference}",
        "你的代码与参考实现相比：形状不同，{user} 对 {reference}",
    ),
    "verdict.bug": ("bug: {bug} ({how})", "bug：{bug}（{how}）"),
    "verdict.fix": ("fix: {fix}", "改法：{fix}"),
    "verdict.raised_after": ("the code raised after it", "代码在这之后抛出了异常"),
    "verdict.reproduces": (
        "applied to the reference it reproduces the code to {gap}",
        "施加到参考实现上，它重现了你的代码，误差 {gap}",
    ),
    "verdict.no_known_bug": ("no known bug reproduces it", "没有已知的 bug 能重现它"),
    "verdict.closest": (
        "the closest known bug, {name}, is off by {gap}",
        "最接近的已知 bug 是“{name}”，相差 {gap}",
    ),
    "verdict.no_role": (
        "the user's code has no tensor in the role of {step}",
        "你的代码里没有扮演 {step} 角色的张量",
    ),
    "verdict.compare_step": (
        "compare {step} with the reference: {op}",
        "把 {step} 与参考实现比较：{op}",
    ),
    "verdict.cannot_tell": ("CANNOT TELL: {why}", "无法判断（CANNOT TELL）：{why}"),
    "verdict.part_at": (
        "the code and the reference part at step {step} ({where})",
        "代码与参考实现从第 {step} 步开始分开（{where}）",
    ),
    "verdict.to_decide": ("to decide: {fix}", "要作出判断：{fix}"),
    "verdict.nothing_taken": ("nothing attntrace takes", "attntrace 没有能接受的选项"),
    "verdict.padding": (
        "the code masks whole keys (a padding mask it makes itself: keys kept per batch item "
        "{lengths}), which the reference, called on x alone, is not given",
        "代码遮住了整列的键（它自己构造的 padding 掩码：每个 batch 项保留的键数为 {lengths}），"
        "而参考实现只以 x 调用，得不到这个掩码",
    ),
    "verdict.padding_not_last": (
        "the code masks whole keys (a padding mask it makes itself: keys kept per batch item "
        "{lengths}, not the last keys of each item), which the reference, called on x alone, is "
        "not given",
        "代码遮住了整列的键（它自己构造的 padding 掩码：每个 batch 项保留的键数为 {lengths}，"
        "遮住的不是每项最后的那些键），而参考实现只以 x 调用，得不到这个掩码",
    ),
    "verdict.unstated": (
        "the code {does}, and no flag said {question} ({stated}): the model's choice or a bug",
        "代码{does}，但没有参数说明{question}（{stated}）：可能是模型的选择，也可能是错误",
    ),
    "verdict.unstated.causal": ("applies a causal mask", "施加了因果掩码"),
    "verdict.unstated.no_causal": ("applies no causal mask", "没有施加因果掩码"),
    "verdict.unstated.rope_pairs": (
        "pairs RoPE's dims as {style}",
        "把 RoPE 的维度按 {style} 配对",
    ),
    "verdict.unstated.theta": ("rotates with θ = {theta}", "以 θ = {theta} 旋转"),
    "verdict.question.causal": ("whether the model is causal", "模型是否为因果"),
    "verdict.question.rope_style": (
        "how the model pairs RoPE's dimensions",
        "模型如何配对 RoPE 的维度",
    ),
    "verdict.question.rope_base": ("the model's RoPE θ", "模型的 RoPE θ"),
    "verdict.stated.default": ("attntrace's default: {value}", "attntrace 的默认值：{value}"),
    "verdict.stated.read": ("{source} gives {value}", "{source} 给出 {value}"),
    "fix.unstated.pass": (
        "pass {flag} if that is the model's choice",
        "如果这是模型的选择，请传入 {flag}",
    ),
    "fix.unstated.contrary": ("{flag} makes it a finding", "传入 {flag} 则把它作为错误报告"),
    "fix.padding_key_lengths": (
        "pass --key-lengths {lengths} if those are the keys the model pads",
        "如果模型填充的正是这些键，请传入 --key-lengths {lengths}",
    ),
    "bug.untransposed": (
        "x @ W instead of x @ W.T in the {c} projection",
        "{c} 投影写成了 x @ W，而不是 x @ W.T",
    ),
    "fix.untransposed": (
        "a weight is (out_features, in_features): write x @ w_{c}.T (or use nn.Linear / F.linear)",
        "权重的形状是 (out_features, in_features)：应写 x @ w_{c}.T（或者用 nn.Linear / F.linear）",
    ),
    "bug.swapped": ("the {a} and {b} projections swapped", "{a} 和 {b} 的投影用反了"),
    "fix.swapped": (
        "compute {a} with the {a} projection (w_{a}) and {b} with w_{b}",
        "用 {a} 投影（w_{a}）计算 {a}，用 w_{b} 计算 {b}",
    ),
    "bug.from_other": ("{a} computed with the {b} projection", "{a} 用了 {b} 的投影来计算"),
    "fix.from_other": (
        "compute {a} with its own projection (w_{a}), not w_{b}",
        "用 {a} 自己的投影（w_{a}）计算，而不是 w_{b}",
    ),
    "bug.split": (
        "heads of {which} split without the transpose",
        "{which} 分头时没有 transpose（维度交换）",
    ),
    "fix.split": (
        "split with .view(B, S, h, d).transpose(1, 2); a bare view(B, h, S, d) mixes tokens into "
        "heads",
        "应先 .view(B, S, h, d) 再 .transpose(1, 2) 分割成多个头；直接 view(B, h, S, d) 会把不同"
        "词的数混进同一个头",
    ),
    "bug.merge": ("heads merged without transposing back", "拼接多头之前没有把维度换回来"),
    "fix.merge": (
        "transpose back first: context.transpose(1, 2).reshape(B, S, H)",
        "先把维度换回来：context.transpose(1, 2).reshape(B, S, H)",
    ),
    "bug.softmax_axis": (
        "softmax over the wrong axis (dim={axis}, {letter})",
        "softmax 归一化的维度不对（dim={axis}，{letter}）",
    ),
    "fix.softmax_axis": (
        "take the softmax over the keys, the last axis: softmax(scores, dim=-1)",
        "应对键所在的最后一个维度做 softmax：softmax(scores, dim=-1)",
    ),
    "bug.softmax_axis_numpy": (
        "softmax over the wrong axis (axis={axis}, {letter})",
        "softmax 归一化的维度不对（axis={axis}，{letter}）",
    ),
    "fix.softmax_axis_numpy": (
        "normalise over the keys, axis={right}: e / e.sum(axis={right}, keepdims=True) with "
        "e = np.exp(s - s.max(axis={right}, keepdims=True))",
        "应沿键所在的维度（axis={right}）归一化：e / e.sum(axis={right}, keepdims=True)，其中 "
        "e = np.exp(s - s.max(axis={right}, keepdims=True))",
    ),
    "fix.softmax_axis_layout": (
        "take the softmax over the keys: softmax(scores, dim={right})",
        "应对键所在的维度做 softmax：softmax(scores, dim={right})",
    ),
    "fix.softmax_sum_numpy": (
        "divide by the sum over the keys: e / e.sum(axis={right}, keepdims=True)",
        "应除以键所在维度上的指数之和：e / e.sum(axis={right}, keepdims=True)",
    ),
    "bug.softmax_sum": (
        "softmax's sum over the wrong axis (axis={axis}, {letter}; the max over the keys)",
        "softmax 的指数之和沿错误的维度计算（axis={axis}，{letter}；最大值沿键的维度）",
    ),
    "fix.softmax_sum": (
        "divide by the sum over the keys, the last axis: e / e.sum(axis=-1, keepdims=True)",
        "应除以最后一个维度（键）上的指数之和：e / e.sum(axis=-1, keepdims=True)",
    ),
    "bug.scaled_twice": ("scaling applied twice", "缩放做了两次"),
    "bug.unscaled": ("scores not scaled", "相似度分数没有缩放"),
    "bug.scaled_d": ("scores scaled by 1/d instead of 1/√d", "分数按 1/d 缩放，而不是 1/√d"),
    "bug.scaled_h": ("scores scaled by 1/√H instead of 1/√d", "分数按 1/√H 缩放，而不是 1/√d"),
    "bug.scaled_sqrt": ("scores multiplied by √d instead of divided", "分数乘以 √d，而不是除以 √d"),
    "fix.scale": (
        "scale the scores once, by {factor} (1/√d with d = {d}): scores / math.sqrt(d)",
        "对分数缩放一次，乘以 {factor}（1/√d，d = {d}）：scores / math.sqrt(d)",
    ),
    "bug.k_permute": (
        "K transposed over the wrong axes (permute{order})",
        "K 转置的维度不对（permute{order}）",
    ),
    "fix.k_permute": (
        "swap only the last two axes of k: k.transpose(-2, -1)",
        "只交换 k 的最后两个维度：k.transpose(-2, -1)",
    ),
    "bug.k_reshape": (
        "K reshaped to (…, d, S) instead of transposed",
        "K 用 reshape 变成 (…, d, S)，而不是转置",
    ),
    "fix.k_reshape": (
        "transpose, don't reshape: k.transpose(-2, -1)",
        "要转置，不要 reshape：k.transpose(-2, -1)",
    ),
    "bug.causal_unexpected": (
        "a causal mask the reference was not asked for",
        "用了参考实现没有要求的因果掩码",
    ),
    "fix.causal_unexpected": (
        "pass --causal when the model is causal (a decoder); else drop the mask / is_causal",
        "模型是因果的（解码器）时请加上 --causal；否则去掉掩码 / is_causal",
    ),
    "bug.mask_inverted": (
        "mask polarity inverted (the kept keys are masked)",
        "掩码取反了（应保留的键被遮住了）",
    ),
    "fix.mask_inverted": (
        "mask where the mask says *not* to attend: masked_fill(~keep, -inf), or flip the mask",
        "应在掩码说“不关注”的位置填 -inf：masked_fill(~keep, -inf)，或者把掩码取反",
    ),
    "bug.causal_diagonal": (
        "causal mask excludes the diagonal (off by one)",
        "因果掩码把对角线也遮住了（差一个）",
    ),
    "bug.causal_future": (
        "causal mask lets each query see one future key (off by one)",
        "因果掩码让每个查询多看到一个后面的键（差一个）",
    ),
    "fix.causal": (
        "a query attends keys up to and including itself: torch.tril(ones(S, S)), masked where 0 "
        "(or torch.triu(ones, diagonal=1) as the positions to mask)",
        "第 i 个词只能看到第 0 到第 i 个词（包括它自己）：torch.tril(ones(S, S))，为 0 的位置遮住"
        "（或者用 torch.triu(ones, diagonal=1) 作为要遮住的位置）",
    ),
    "bug.alibi_reversed": (
        "ALiBi's slopes reversed across the heads (the smallest slope on head 0)",
        "ALiBi 的斜率在各个头之间顺序反了（最小的斜率在第 0 个头）",
    ),
    "bug.alibi_sign": (
        "ALiBi's bias with the wrong sign, slope·(i - j) (or its distance matrix transposed): "
        "far keys favoured",
        "ALiBi 偏置的符号错了，成了 slope·(i - j)（或距离矩阵被转置）：远处的键反而被偏爱",
    ),
    "bug.alibi_missing": (
        "ALiBi's bias constant along each query row (built along the queries, not the keys), "
        "or not added: softmax ignores it",
        "ALiBi 偏置在每个查询行内是常数（沿查询而不是沿键构造），或者没有加上：softmax 会忽略它",
    ),
    "bug.alibi_geometric": (
        "ALiBi's slopes 2^(-8k/{h}) for h = {h}, not a power of two (Press et al. take the "
        "slopes of the power of two below, then every other of twice it)",
        "h = {h} 不是 2 的幂，ALiBi 的斜率却取了 2^(-8k/{h})（Press 等人先取下面那个 2 的幂的斜率，"
        "再取其两倍的斜率中每隔一个）",
    ),
    "fix.alibi": (
        "add slope_h * (j - i) to the scaled scores, j the key's position and i the query's (the "
        "bias falls along each row with the key's distance), slopes 2^(-8/h), 2^(-16/h), … from "
        "head 0 on, as Press et al.'s get_slopes and transformers' build_alibi_tensor",
        "把 slope_h * (j - i) 加到缩放后的分数上，j 是键的位置、i 是查询的位置（偏置沿每一行随键的"
        "距离下降），斜率从第 0 个头起为 2^(-8/h)、2^(-16/h)、……，与 Press 等人的 get_slopes 和 "
        "transformers 的 build_alibi_tensor 相同",
    ),
    "bug.mask_missing": ("mask not applied", "没有应用掩码"),
    "fix.mask_missing": (
        "apply the mask to the scaled scores before the softmax",
        "在 softmax 之前把掩码加到缩放后的分数上",
    ),
    "bug.mask_after": (
        "mask applied after the softmax (masked weights set to {how})",
        "掩码在 softmax 之后才应用（被遮住的权重设为 {how}）",
    ),
    "fix.mask_after": (
        "mask the scaled scores with -inf *before* the softmax, so each row sums to 1 over the "
        "kept keys",
        "应在 softmax *之前*用 -inf 遮住缩放后的分数，这样每行在保留的键上之和为 1",
    ),
    "bug.gqa_tile": (
        "kv heads of {which} expanded with repeat/tile instead of repeat_interleave",
        "{which} 的 K/V 头用 repeat/tile 复制，而不是 repeat_interleave",
    ),
    "fix.gqa_tile": (
        "each kv head serves {r} consecutive query heads: k.repeat_interleave({r}, dim=1)",
        "每个 K/V 头服务相邻的 {r} 个查询头：k.repeat_interleave({r}, dim=1)",
    ),
    "bug.rope_pairs": (
        "RoPE pairs {wrong} where the weights expect {right}",
        "RoPE 把 {wrong} 配成一对，而权重要求的是 {right}",
    ),
    "word.pairs_half": ("dimensions (i, i+d/2)", "维度 (i, i+d/2)"),
    "word.pairs_interleaved": ("neighbours (2i, 2i+1)", "相邻维度 (2i, 2i+1)"),
    "fix.rope_half": (
        "rotate dimension i with i + d/2 (rotate_half), as Hugging Face Llama does",
        "把第 i 维和第 i + d/2 维一起旋转（rotate_half），和 Hugging Face 的 Llama 一样",
    ),
    "fix.rope_interleaved": (
        "rotate dimension 2i with 2i + 1, as Meta's original checkpoints and GPT-J do",
        "把第 2i 维和第 2i + 1 维一起旋转，和 Meta 原始检查点、GPT-J 一样",
    ),
    "fix.rope_other": (
        "or, if your model pairs {pairs}, diff it with --rope-style {style}",
        "或者，如果你的模型配对的是 {pairs}，请用 --rope-style {style} 来 diff",
    ),
    "bug.rope_theta": (
        "RoPE with θ = {base} instead of {right}",
        "RoPE 用了 θ = {base}，而不是 {right}",
    ),
    "fix.rope_theta": ("use the model's rope_theta = {right}", "使用模型的 rope_theta = {right}"),
    "bug.rope_start": (
        "RoPE positions start at {start}, not 0",
        "RoPE 的位置从 {start} 开始，而不是 0",
    ),
    "fix.rope_start": (
        "rotate position p by p·θᵢ with positions 0, 1, …, S-1 (torch.arange(S))",
        "位置 p 旋转 p·θᵢ，位置为 0, 1, …, S-1（torch.arange(S)）",
    ),
    "bug.output_missing": ("output projection missing", "缺少输出投影"),
    "fix.output_missing": (
        "end with the output projection: o_proj(merged)",
        "最后要做输出投影（对拼接后的结果进行线性变换）：o_proj(merged)",
    ),
    # --- trace: the rule that broke and its fix (capturing/explain.py) -------------------------
    "rule.shape_error_at": ("shape error at {where}", "形状错误，位于 {where}"),
    "rule.out_of_memory_at": ("out of memory at {where}", "内存不足，位于 {where}"),
    "rule.error_at": ("error at {where}", "错误，位于 {where}"),
    "rule.label": ("rule: {rule}", "规则：{rule}"),
    "fix.label": ("fix:  {fix}", "改法：{fix}"),
    "rule.matmul": (
        "matmul contracts the last axis of {a} ({ax}) with the second-to-last of {b} ({bx}); "
        "{m} ≠ {n}",
        "matmul 把 {a} 的最后一个维度（{ax}）与 {b} 的倒数第二个维度（{bx}）相乘求和；{m} ≠ {n}",
    ),
    "rule.matmul_batch": (
        "matmul broadcasts the leading (batch) axes: {a} has {ash}, {b} has {bsh}, and they do "
        "not match from the right",
        "matmul 会广播前面的（batch）维度：{a} 是 {ash}，{b} 是 {bsh}，从右往左对不上",
    ),
    "fix.weight_out_in": (
        "{w} is stored (out, in) as torch does: use {x} @ {w}.T (a weight for x @ W is (in, out))",
        "{w} 按 torch 的方式存成 (out, in)：应写 {x} @ {w}.T（用于 x @ W 的权重是 (in, out)）",
    ),
    "fix.k_wrong_axes": (
        "{k} is ({has}), but K^T must be ({want}): transpose only K's last two axes, "
        "K.transpose(-2, -1) (numpy: np.swapaxes(K, -1, -2)), not the heads with S",
        "{k} 是 ({has})，但 K^T 应该是 ({want})：只转置 K 的最后两个维度，K.transpose(-2, -1)"
        "（numpy：np.swapaxes(K, -1, -2)），不要交换头和 S",
    ),
    "fix.k_not_transposed": (
        "K is not transposed: multiply by {k}.transpose(-2, -1) (numpy: np.swapaxes({k}, -1, -2)); "
        "scores are {q} (…, S, d) @ K^T (…, d, S)",
        "K 没有转置：应乘以 {k}.transpose(-2, -1)（numpy：np.swapaxes({k}, -1, -2)）；相似度分数是 "
        "{q} (…, S, d) @ K^T (…, d, S)",
    ),
    "fix.heads_first": (
        "heads first: {name} is (…, S, h, d); transpose(-3, -2) it to (…, h, S, d) before the "
        "matmul",
        "头要在前：{name} 是 (…, S, h, d)；在 matmul 之前用 transpose(-3, -2) 把它变成 (…, h, S, d"
        ")",
    ),
    "rule.sdpa_d": (
        "scaled_dot_product_attention contracts the last axis of {q} ({qx}) with the last axis "
        "of {k} ({kx}); {m} ≠ {n}",
        "scaled_dot_product_attention 把 {q} 的最后一个维度（{qx}）与 {k} 的最后一个维度（{kx}）"
        "相乘求和；{m} ≠ {n}",
    ),
    "fix.sdpa_d": (
        "q and k must both be (…, h, S, d) with one d: split their heads the same way",
        "q 和 k 都必须是 (…, h, S, d)，d 相同：用同样的方式分割它们的头",
    ),
    "rule.sdpa_kv": (
        "scaled_dot_product_attention needs as many keys as values: {k} has {kn}, {v} has {vn}",
        "scaled_dot_product_attention 要求键和值一样多：{k} 有 {kn}，{v} 有 {vn}",
    ),
    "rule.linear": (
        "linear maps the last axis of {x} ({ax}) with a weight of shape {w} (out, in): "
        "in_features is {need}, the input has {has}",
        "linear 用形状为 {w} (out, in) 的权重变换 {x} 的最后一个维度（{ax}）：in_features 是 "
        "{need}，而输入是 {has}",
    ),
    "fix.merge_transpose": (
        "heads not merged back: transpose (…, h, S, d) to (…, S, h, d), then reshape to (…, S, "
        "h·d)",
        "多头没有拼接回去：先把 (…, h, S, d) 转置成 (…, S, h, d)，再 reshape 成 (…, S, h·d)",
    ),
    "fix.merge_reshape": (
        "heads not merged back: reshape {x} to (…, {need}) (h·d = H) first",
        "多头没有拼接回去：先把 {x} reshape 成 (…, {need})（h·d = H）",
    ),
    "rule.view_contiguous": (
        "view needs {x} {shape} contiguous in memory; after a transpose it is not",
        "view 要求 {x} {shape} 在内存中是连续的；transpose 之后它不再连续",
    ),
    "fix.contiguous": (
        "call .contiguous() before .view(…), or use .reshape(…)",
        "在 .view(…) 之前调用 .contiguous()，或者改用 .reshape(…)",
    ),
    "rule.reshape_count": (
        "reshape keeps the number of elements: {x} {shape} has {size}",
        "reshape 保持元素个数不变：{x} {shape} 有 {size} 个",
    ),
    "rule.reshape_new": (
        "reshape keeps the number of elements: {x} {shape} has {size}, the new shape {new} has "
        "{count}",
        "reshape 保持元素个数不变：{x} {shape} 有 {size} 个，新形状 {new} 有 {count} 个",
    ),
    "fix.reshape_merge": (
        "merging the heads back keeps every element: reshape to {shape}",
        "拼接多头要保留每一个元素：reshape 成 {shape}",
    ),
    "fix.reshape_h": (
        "H used where d was meant: the head axis of the split is H // h (a size {H} axis is the "
        "whole hidden size)",
        "把 H 用在了应该用 d 的地方：分头后每个头的维度是 H // h（大小为 {H} 的维度是整个 hidden）",
    ),
    "fix.reshape_last_two": (
        "the last two sizes must multiply to H={H}: use (…, h, H // h) = {parts}",
        "最后两个尺寸的乘积必须等于 H={H}：应为 (…, h, H // h) = {parts}",
    ),
    "rule.broadcast": (
        "{func} broadcasts from the right: axis -{k} of {a} ({ax}) meets {bx} of {b}; sizes must "
        "be equal or 1",
        "{func} 从右往左广播：{a} 的第 -{k} 个维度（{ax}）对上 {b} 的 {bx}；尺寸必须相等或为 1",
    ),
    "fix.broadcast_order": (
        "the axes are in a different order: transpose {b} to {shape} first",
        "维度的顺序不同：先把 {b} 转置成 {shape}",
    ),
    "fix.broadcast_line_up": (
        "{b} must line up with the last axes of {a} {shape}; add size-1 axes",
        "{b} 必须与 {a} {shape} 的最后几个维度对齐；请加上大小为 1 的维度",
    ),
    "rule.cannot_take": ("{func} cannot take {operands}", "{func} 不能接受 {operands}"),
    "rule.cannot_broadcast": ("{func} cannot broadcast {operands}", "{func} 无法广播 {operands}"),
    "rule.axis": (
        "{func} names an axis that {x} of rank {rank} does not have (valid: {valid})",
        "{func} 用到的维度在 {rank} 维的 {x} 中不存在（可用：{valid}）",
    ),
    "rule.memory": (
        "{func} asked for {what} than this machine can give",
        "{func} 申请的内存（{what}）超过了这台机器能提供的",
    ),
    "fix.memory": (
        "use smaller sizes (--seq, --batch for FILE.py:NAME; a script's own): the (S, S) scores "
        "grow with S², the other tensors with S",
        "请用更小的尺寸（FILE.py:NAME 用 --seq、--batch；脚本用它自己的）：(S, S) 分数随 S² 增长，"
        "其他张量随 S 增长",
    ),
    "rule.einsum_subscript": (
        "einsum subscript {letter} is {first} in one operand but {other} in {name}; a shared "
        "subscript needs one size",
        "einsum 下标 {letter} 在一个操作数中是 {first}，在 {name} 中却是 {other}；共用的下标只能有"
        "一个大小",
    ),
    "fix.einsum": (
        "check the subscripts' order against each operand's axes",
        "对照每个操作数的维度检查下标的顺序",
    ),
    "word.left_operand": ("the left operand", "左操作数"),
    "word.right_operand": ("the right operand", "右操作数"),
    "word.the_input": ("the input", "输入"),
    "note.mixing": (
        "{where}: {source} reshapes ({names}) {sizes} to {after}, mixing the axes: reshape to "
        "{split}, then transpose to ({order})",
        "{where}：{source} 把 ({names}) {sizes} reshape 成 {after}，混淆了维度：应先 reshape 成 "
        "{split}，再 transpose 成 ({order})",
    ),
    "note.mixing_first": (
        "{where}: {source} reshapes ({names}) {sizes} to {after}, mixing the axes: transpose to "
        "({order}) first, then reshape",
        "{where}：{source} 把 ({names}) {sizes} reshape 成 {after}，混淆了维度：应先 transpose 成 "
        "({order})，再 reshape",
    ),
    "word.warning": ("warning: {note}", "警告：{note}"),
    "word.note": ("note: {note}", "注：{note}"),
    "word.steps_of": ("steps of {where}", "{where} 的步骤"),
    "word.steps_of_narrow": (
        "steps of {where} ({dtypes}; wider terminal for more)",
        "{where} 的步骤（{dtypes}；终端更宽时显示更多列）",
    ),
    "word.your_code": ("your code", "你的代码"),
    "word.code": ("code", "代码"),
    "word.operands_shape": ("operands → shape", "操作数 → 形状"),
    "word.no_ops": ("no tensor operations recorded", "没有记录到张量运算"),
    "word.traceback": ("Traceback (your code only):", "调用栈（只显示你的代码）："),
    # --- check ------------------------------------------------------------------------------
    "verdict.check_ok": (
        "ok: {passed} passed, {failed} failed",
        "通过：{passed} 项通过，{failed} 项失败",
    ),
    "verdict.check_failed": (
        "FAILED: {passed} passed, {failed} failed",
        "失败：{passed} 项通过，{failed} 项失败",
    ),
    "verdict.check_pass_case": ("PASS  {name}  ({n} checks)", "通过  {name}  （{n} 项检查）"),
    "verdict.check_pass_case_one": ("PASS  {name}  ({n} check)", "通过  {name}  （{n} 项检查）"),
    "verdict.check_fail_case": ("FAIL  {name}  ({n} checks)", "失败  {name}  （{n} 项检查）"),
    "verdict.check_fail_case_one": ("FAIL  {name}  ({n} check)", "失败  {name}  （{n} 项检查）"),
    "verdict.check_error_case": ("ERROR  {name}: {message}", "错误  {name}：{message}"),
    "verdict.passed": ("passed  {what}", "通过  {what}"),
    "verdict.failed_checks": ("failed checks", "未通过的检查"),
    "word.config": ("config", "配置"),
    "word.check": ("check", "检查"),
    "word.expected": ("expected", "预期"),
    "word.actual": ("actual", "实际"),
    "word.checked": ("checked", "检查的步骤"),
    # --- verify -------------------------------------------------------------------------------
    "verdict.every_step": ("every step, {left} vs {right}", "每一步：{left} 对 {right}"),
    "verdict.references": (
        "output and attention weights vs PyTorch's own attention",
        "输出和注意力权重对 PyTorch 自己的注意力",
    ),
    "verdict.references_grad": (
        "output and attention weights vs PyTorch's own attention (and every gradient vs autograd)",
        "输出和注意力权重对 PyTorch 自己的注意力（以及每个梯度对 autograd）",
    ),
    "word.tensor": ("tensor", "张量"),
    "word.backend": ("backend", "后端"),
    "verdict.verify_pass": (
        "PASS: all {n} comparisons within the {dtype} tolerance",
        "通过：全部 {n} 项比较都在 {dtype} 的容差内",
    ),
    "verdict.verify_pass_na": (
        "PASS: all {n} comparisons within the {dtype} tolerance ({skipped} n/a)",
        "通过：全部 {n} 项比较都在 {dtype} 的容差内（{skipped} 项不适用）",
    ),
    "verdict.verify_fail": (
        "FAIL: {bad} of {n} comparisons beyond the tolerance: {which}",
        "失败：{n} 项比较中有 {bad} 项超出容差：{which}",
    ),
    "verdict.na": ("n/a: {reason}", "不适用：{reason}"),
    # --- compare ------------------------------------------------------------------------------
    "word.same_settings": ("A and B have the same settings", "A 和 B 的设置相同"),
    "word.what_changes": ("what changes", "哪些变了"),
    "word.setting": ("setting", "设置"),
    "verdict.compare_steps": (
        "steps ({changed} of {n} change: yellow; red: A only, green: B only)",
        "步骤（{n} 步中有 {changed} 步变化：黄色；红色：只在 A 中，绿色：只在 B 中）",
    ),
    "word.shape_in_a": ("shape in A", "A 的形状"),
    "word.shape_in_b": ("shape in B", "B 的形状"),
    "word.axes_b": ("axes (B)", "维度（B）"),
    "word.op_changes": ("op, where it changes (A → B)", "运算变化之处（A → B）"),
    "word.costs": ("costs", "计算量与内存"),
    "cell.same": ("same", "相同"),
    "cell.parameter_bytes": ("parameter bytes", "参数字节数"),
    "cell.step_bytes": ("step bytes", "各步字节数"),
    "cell.peak_activations": ("peak activations", "激活峰值"),
    "cell.score_bytes": ("score bytes held at once", "同时保存的分数字节数"),
    "cell.kv_per_token": ("KV cache per token", "每个词的 KV 缓存"),
    "cell.steps": ("steps", "步数"),
    "cell.parameters": ("parameters", "参数"),
    # --- sweep --------------------------------------------------------------------------------
    "word.sweep_bytes": ("sweep (bytes of {dtype})", "扫描（{dtype} 的字节数）"),
    "word.sweep": ("sweep", "扫描"),
    "word.algorithm": ("algorithm", "算法"),
    "word.scores": ("scores", "分数"),
    "word.peak": ("peak", "峰值"),
    "word.peak_live": ("peak live activations", "同时存活的激活峰值"),
    "word.saved_backward": ("saved for the backward", "为反向传播保存的"),
    "cell.saved_backward": ("saved for the backward", "为反向传播保存的"),
    # --- presets ------------------------------------------------------------------------------
    "word.presets_title": (
        "presets (numbers from each model's config.json on the Hugging Face Hub)",
        "预设模型（数字来自 Hugging Face Hub 上各模型的 config.json）",
    ),
    "word.preset": ("preset", "预设"),
    "word.config_of": ("config.json of", "config.json 来源"),
    "cell.yes": ("yes", "是"),
    "cell.no": ("no", "否"),
    "word.presets_whole": (
        "whole model: attention of all L layers at the context length (batch 1, KV cache in "
        "float16; FLOPs of one forward over the full S x S)",
        "整个模型：上下文长度下所有 L 层的注意力（batch 1，KV 缓存按 float16；FLOPs 为完整 S x S "
        "上的一次前向）",
    ),
    "word.context": ("context", "上下文"),
    "word.attn_params": ("attn params", "注意力参数"),
    "word.kv_cache": ("KV cache", "KV 缓存"),
    "word.attn_flops": ("attn FLOPs", "注意力 FLOPs"),
    "word.saved_bwd": ("saved for bwd", "反向保存"),
    "word.bwd_flops": ("bwd FLOPs", "反向 FLOPs"),
    # --- run's figures beside the steps --------------------------------------------------------
    "word.kv_line": (
        "KV cache: 2 (k, v) x g={g} x d={d} x {item} B ({dtype}) = {per} per token and layer "
        "({times}x less than {full} with h={h} kv-heads)",
        "KV 缓存：2 (k, v) x g={g} x d={d} x {item} B（{dtype}）= 每个词每层 {per}（比 h={h} 个 "
        "K/V 头时的 {full} 少 {times} 倍）",
    ),
    "word.whole_model": (
        "whole model: L={L} layers like this one, B={B}, {keys}={n}",
        "整个模型：L={L} 个这样的层，B={B}，{keys}={n}",
    ),
    "cell.kv_cache_dtype": ("KV cache ({dtype})", "KV 缓存（{dtype}）"),
    "cell.per_forward": ("{unit} per forward", "每次前向的 {unit}"),
    "cell.forward_steps": ("L x the forward steps above", "L x 上面的前向各步"),
    "cell.per_backward": ("{unit} per backward", "每次反向的 {unit}"),
    "cell.per_training_token": ("{unit} per training token", "每个训练词的 {unit}"),
    "cell.one_layers": ("L x one layer's", "L x 一层的"),
    "word.all_layers": ("attention of all layers", "所有层的注意力"),
    # --- the kind of attention (render/table.py describe_in) ---------------------------------
    "describe.multi": ("multi-head ", "多头"),
    "describe.mqa": ("multi-query ", "多查询"),
    "describe.gqa": ("grouped-query ", "分组查询"),
    "describe.causal": ("causal ", "因果"),
    "describe.self": ("self-attention", "自注意力"),
    "describe.cross": ("cross-attention", "交叉注意力"),
    "describe.padding": ("key padding", "键填充"),
    "describe.no_bias": ("no bias", "无偏置"),
    "describe.with": (" with {extras}", "，带 {extras}"),
    "describe.decode": (
        "; decode step against a KV cache of {past}",
        "；解码一步，KV 缓存中已有 {past} 个词",
    ),
    "describe.new_tokens": (
        "; {S} new tokens against a KV cache of {past}",
        "；{S} 个新词，KV 缓存中已有 {past} 个词",
    ),
    # --- the report's page (render/report.py) ------------------------------------------------
    "report.nonfinite": ("NaN or inf", "NaN 或 inf 个数"),
    "report.costs_note": (
        "parameters {params}; KV cache {kv} per token ({dtype})",
        "参数 {params}；每个词的 KV 缓存 {kv}（{dtype}）",
    ),
    "report.all_layers": ("attention of all layers", "所有层的注意力"),
    "report.value": ("value", "值"),
    "report.how_counted": ("exact, or how it is counted", "精确值，或计算方法"),
    "report.backward": ("backward", "反向传播"),
    "report.what": ("what", "说明"),
    "report.training": ("Training: the backward", "训练：反向传播"),
    "report.serving": (
        "Serving: prefill vs decode, the KV cache",
        "推理服务：预填充与解码，KV 缓存",
    ),
    "report.setting": ("setting", "设置"),
    "report.no_weights": ("No attention weights: {why}.", "没有注意力权重：{why}。"),
    "report.no_weights_flash": (
        "--algorithm flash never forms them whole",
        "--algorithm flash 从不形成完整的权重矩阵",
    ),
    "report.no_weights_backend": (
        "the {backend} backend computes no values",
        "{backend} 后端不计算数值",
    ),
    "report.of_item": (" of batch item {item}", "（第 {item} 个样本）"),
    "report.red": (", red = NaN or inf", "，红色 = NaN 或 inf"),
    "report.weights_note": (
        "Rows: queries, columns: keys{where}; darker = more attention, grey = masked{red}; "
        "hover a cell for its value.",
        "行：查询，列：键{where}；颜色越深 = 关注越多，灰色 = 被遮住{red}；鼠标悬停在格子上可看数"
        "值。",
    ),
    "report.yes": ("yes", "是"),
    "report.no": ("no", "否"),
    "report.cfg.none": ("none", "无"),
    "report.cfg.backend": ("backend", "后端"),
    "report.cfg.unbatched": ("none: x is (S, H), unbatched", "无：x 为 (S, H)，不带 batch"),
    "report.cfg.head_dim": ("{d} (H / h)", "{d}（H / h）"),
    "report.cfg.head_dim_set": (
        "{d} (set by --head-dim, not H / h)",
        "{d}（由 --head-dim 设定，不是 H / h）",
    ),
    "report.cfg.kv_heads_all": (
        "{h}, one per query head (no grouping)",
        "{h}，每个查询头一个（不分组）",
    ),
    "report.cfg.kv_heads": ("{g}, each serving {r} query heads", "{g}，每个服务 {r} 个查询头"),
    "report.cfg.self_keys": ("= S (self-attention)", "= S（自注意力）"),
    "report.cfg.self_width": ("= H (self-attention)", "= H（自注意力）"),
    "report.cfg.every_key": ("every key (no padding)", "所有键（无填充）"),
    "report.cfg.auto": ("automatic", "自动"),
    "report.cfg.unscaled": ("1 (unscaled)", "1（不缩放）"),
    # --- the notebook (render/notebook.py) ----------------------------------------------------
    "notebook.totals": (
        "{steps} steps, {flops} FLOPs, parameters {params}",
        "{steps} 步，{flops} FLOPs，参数 {params}",
    ),
    "notebook.flow": ("data flow", "数据流"),
    "notebook.first_heads": ("the first {shown} of {h} heads", "{h} 个头中的前 {shown} 个"),
    # --- run's serving figures (render/serving_view.py) ---------------------------------------
    "word.roofline": ("roofline of one layer (fused kernels)", "一层的 roofline（融合的 kernel）"),
    "word.decode_caption": (
        "decode: S={S} new, N={N} cached",
        "解码：S={S} 个新词，缓存中已有 N={N} 个",
    ),
    "word.prefill_caption": ("prefill: the {n} tokens at once", "预填充：一次处理 {n} 个词"),
    "word.machine": (
        "{machine}: {peak}, {bandwidth}, ridge {ridge} FLOPs/B (--peak-flops, --bandwidth)",
        "{machine}：{peak}，{bandwidth}，ridge 为 {ridge} FLOPs/B（--peak-flops、--bandwidth）",
    ),
    "word.machine_note": (
        "{machine}: {peak} (its dense bf16 peak; these bytes are {dtype}: --peak-flops {other}), "
        "{bandwidth}, ridge {ridge} FLOPs/B (--peak-flops, --bandwidth)",
        "{machine}：{peak}（这是它的稠密 bf16 峰值；这里的字节按 {dtype} 计：请用 --peak-flops "
        "{other}），{bandwidth}，ridge 为 {ridge} FLOPs/B（--peak-flops、--bandwidth）",
    ),
    "word.below_ridge": (
        "below the ridge: memory-bound",
        "低于 ridge：受内存带宽限制（memory-bound）",
    ),
    "word.phase": ("phase", "阶段"),
    "word.kernel": ("kernel", "kernel"),
    "word.read": ("read", "读取"),
    "word.written": ("written", "写入"),
    "word.bound": ("bound", "瓶颈"),
    "word.time": ("time", "时间"),
    "cell.decode": ("decode", "解码"),
    "cell.prefill": ("prefill", "预填充"),
    "cell.memory": ("memory", "内存"),
    "cell.compute": ("compute", "计算"),
    "cell.layer": ("layer", "整层"),
    "cell.linear": ("linear", "线性层"),
    "cell.attention": ("attention", "注意力"),
    "word.traffic": (
        "memory traffic as traced (every step materialised; views move nothing)",
        "追踪到的内存流量（每一步都写出；view 不移动数据）",
    ),
    "word.total": ("total", "总计"),
    "word.cache_one": (
        "KV cache of 1 layer (add --layers L), requests of {n} tokens",
        "1 层的 KV 缓存（加上 --layers L 看整个模型），每个请求 {n} 个词",
    ),
    "word.cache_layers": (
        "KV cache of {L} layers, requests of {n} tokens",
        "{L} 层的 KV 缓存，每个请求 {n} 个词",
    ),
    "word.cache_dtype": ("cache dtype", "缓存类型"),
    "word.per_token": ("per token", "每个词"),
    "word.per_request": ("per request", "每个请求"),
    "word.requests_in": ("requests in {memory}", "{memory} 能放下的请求数"),
    "word.add_memory": (
        "add --memory 80GiB to see how many requests of {n} tokens fit",
        "加上 --memory 80GiB，看能放下多少个 {n} 个词的请求",
    ),
    "word.at_most": (
        "at most {n} requests of {t} tokens ({dtype} cache)",
        "最多 {n} 个 {t} 个词的请求（{dtype} 缓存）",
    ),
    "word.paged": (
        "paged KV cache of one layer, blocks of P={P} tokens",
        "一层的分页 KV 缓存，每块 P={P} 个词",
    ),
    "word.what": ("what", "内容"),
    # --- run --backward: what the forward keeps (render/training.py) --------------------------
    "cell.saved_for": ("saved for the backward ({mode})", "为反向传播保存的（{mode}）"),
    "cell.eager_keeps": ("eager keeps", "eager 保存"),
    "cell.weights_among": (
        "the (B, h, S, N) weights among them",
        "其中包括 (B, h, S, N) 的注意力权重",
    ),
    "cell.flash_keeps": ("flash keeps", "flash 保存"),
    "cell.flash_recomputes": ("flash recomputes", "flash 重新计算"),
    "cell.tiles": ("{n} tiles", "{n} 块"),
    "cell.recompute_flops": (
        "{flops} FLOPs of scores and exp (FA-2 order)",
        "分数和 exp 的 {flops} FLOPs（FA-2 的顺序）",
    ),
    "cell.recompute_keeps": ("--recompute keeps", "--recompute 保存"),
    "cell.x_alone": ("x alone", "只有 x"),
    "cell.forward_again": ("the forward again: {flops} FLOPs", "再算一遍前向：{flops} FLOPs"),
    "cell.megatron": ("Megatron (16-bit)", "Megatron（16 位）"),
    "cell.ours_16": ("ours at 16-bit {b}", "我们在 16 位下为 {b}"),
    "cell.beside_ours": ("it counts beside ours", "它比我们多算的"),
    "cell.softmax_dropout": ("softmax dropout mask ({f}) {b}", "softmax 的 dropout 掩码（{f}）{b}"),
    "cell.attention_dropout": (
        "attention dropout output ({f}) {b}",
        "注意力 dropout 的输出（{f}）{b}",
    ),
    "cell.output_dropout": ("output dropout mask ({f}) {b}", "输出的 dropout 掩码（{f}）{b}"),
    "cell.backward_peak": ("backward peak", "反向传播峰值"),
    "cell.peak_parts": (
        "saved + live gradients + weight grads",
        "保存的 + 存活的梯度 + 权重的梯度",
    ),
    "cell.flops_fb": ("FLOPs forward / backward", "前向 / 反向 FLOPs"),
    "cell.backward_times": ("backward = {r} x forward", "反向 = {r} x 前向"),
    "word.training_seeded": ("training: d_output seeded", "训练：d_output 由随机种子生成"),
    "word.backward": ("backward", "反向传播"),
    # --- diff --past: the KV cache's bugs (diffing/decode.py, decode_cache.py) ---------------
    "verdict.alibi_shift": (
        "ALiBi: the module's bias is a constant per query row away from slope·(j − i) (Bloom's "
        "form slope·j, MPT's slope·(j − N + 1)), equal after softmax: {steps} compared up to "
        "that constant",
        "ALiBi：模块的偏置与 slope·(j − i) 相差每个查询行一个常数（Bloom 的形式 slope·j，MPT 的 "
        "slope·(j − N + 1)），经过 softmax 后相同：{steps} 在相差这个常数的意义下比较",
    ),
    "verdict.eval_mode": (
        "run in eval mode (dropout off); it was in train mode",
        "以 eval 模式运行（关闭 dropout）；它原来是 train 模式",
    ),
    "verdict.called_with": (
        "called with {argument}=(k_cache, v_cache) of {n} earlier tokens",
        "调用时传入 {argument}=(k_cache, v_cache)，含之前 {n} 个词",
    ),
    "bug.cache_not_updated": (
        "the cache not updated: the step returns the cache it was given, without the new tokens",
        "缓存没有更新：这一步返回的是传进来的缓存，没有新词",
    ),
    "bug.v_cache_not_updated": (
        "the v cache not updated: the step returns the new keys but the values it was given",
        "V 缓存没有更新：这一步返回了新的键，但值还是传进来的",
    ),
    "bug.k_cache_not_updated": (
        "the k cache not updated: the step returns the new values but the keys it was given",
        "K 缓存没有更新：这一步返回了新的值，但键还是传进来的",
    ),
    "bug.cache_new_only": (
        "the cache holds only the new tokens: the step returns (k, v) made before the append",
        "缓存里只有新词：这一步返回的是拼接之前的 (k, v)",
    ),
    "bug.cache_wrong_axis": (
        "new {what} appended on the wrong axis (dim={dim}, the {axis}, not -2, the sequence)",
        "新的 {what} 拼接在了错误的维度上（dim={dim}，{axis}，而不是 -2，序列维度）",
    ),
    "bug.cache_unknown": (
        "the cache it returns is not the keys and values after the append (no known bug "
        "reproduces it)",
        "它返回的缓存不是拼接之后的键和值（没有已知的 bug 能重现它）",
    ),
    "fix.cache_update": (
        "return the cache after the append: present = (k, v) made after k = torch.cat((past_key, "
        "k), dim=-2) and v = torch.cat((past_value, v), dim=-2)",
        "返回拼接之后的缓存：present = (k, v) 要在 k = torch.cat((past_key, k), dim=-2) 和 v = "
        "torch.cat((past_value, v), dim=-2) 之后得到",
    ),
    "fix.cache_axis": (
        "append on the sequence axis of (B, g, N, d): torch.cat((past_key, k), dim=-2)",
        "沿 (B, g, N, d) 的序列维度拼接：torch.cat((past_key, k), dim=-2)",
    ),
    "bug.rope_from_0": (
        "RoPE positions restarted at 0 for the new tokens",
        "新词的 RoPE 位置从 0 重新开始",
    ),
    "bug.rope_minus_1": ("RoPE positions of the new tokens one short", "新词的 RoPE 位置少了 1"),
    "bug.rope_plus_1": ("RoPE positions of the new tokens one ahead", "新词的 RoPE 位置多了 1"),
    "fix.rope_positions": (
        "rotate the new tokens at their positions N..N+S-1 = {span}: arange(past_len, past_len "
        "+ S)",
        "按新词的位置 N..N+S-1 = {span} 旋转：arange(past_len, past_len + S)",
    ),
    "bug.new_alone": (
        "the new tokens attended alone: the cache returned but not read (scores over S keys, "
        "not N+S)",
        "新词只关注了自己：缓存返回了但没有读取（分数只在 S 个键上，而不是 N+S 个）",
    ),
    "fix.new_alone": (
        "attend over the cache and the new keys: scores = q @ k_all.T with k_all = "
        "torch.cat((past_key, k), dim=-2), before the scores are made",
        "要关注缓存和新的键：scores = q @ k_all.T，其中 k_all = torch.cat((past_key, k), "
        "dim=-2)，在计算分数之前拼接",
    ),
    "bug.top_left": (
        "causal mask aligned top-left (query i sees keys ≤ i, not ≤ N+i)",
        "因果掩码左上对齐了（第 i 个查询看到 ≤ i 的键，而不是 ≤ N+i）",
    ),
    "fix.top_left": (
        "align the causal mask bottom-right: query i sees the N cached keys and new keys ≤ i "
        "(mask[:, :, N_all - S : N_all, :N_all], or tril(ones, diagonal=N))",
        "因果掩码要右下对齐：第 i 个查询看到缓存中的 N 个键和 ≤ i 的新键（mask[:, :, N_all - S "
        ": N_all, :N_all]，或 tril(ones, diagonal=N)）",
    ),
    # --- diff: the bugs of a fused kernel's arguments (diffing/kernel_bugs.py) -------------
    "bug.mask_float_keep": (
        "a 0/1 keep mask passed as a float attn_mask: SDPA adds a float mask to the scores (+1 "
        "where kept), so no key is masked",
        "0/1 的保留掩码以浮点数传给了 attn_mask：SDPA 会把浮点掩码加到分数上（保留处加 1），"
        "所以没有任何键被遮住",
    ),
    "fix.mask_float_keep": (
        "pass the keep mask as booleans, attn_mask=mask.bool() (True = attend), or is_causal=True "
        "for a causal mask",
        "把保留掩码以布尔值传入，attn_mask=mask.bool()（True 表示关注），因果掩码则用 "
        "is_causal=True",
    ),
    "fix.mask_float_keep_call": (
        "SDPA adds a float mask to the scores: pass the keep mask as booleans, attn_mask={mask} "
        "(True = attend), or is_causal=True for a causal mask",
        "SDPA 会把浮点掩码加到分数上：把保留掩码以布尔值传入，attn_mask={mask}（True 表示关注），"
        "因果掩码则用 is_causal=True",
    ),
    "bug.window_dropped": (
        "the sliding window (W = {w}) dropped for a plain causal mask (is_causal=True): query i "
        "sees every key ≤ i, not the last W",
        "滑动窗口（W = {w}）被普通的因果掩码（is_causal=True）取代了：第 i 个查询看到所有 ≤ i 的"
        "键，而不是最近的 W 个",
    ),
    "fix.window_dropped": (
        "keep the window: is_causal=False, attn_mask=torch.ones(S, S, dtype=torch.bool)"
        ".tril().triu({band}) (query i sees keys i - W < j ≤ i)",
        "保留窗口：is_causal=False，attn_mask=torch.ones(S, S, dtype=torch.bool)"
        ".tril().triu({band})（第 i 个查询看到 i - W < j ≤ i 的键）",
    ),
    "bug.dropout_eval": (
        "dropout left on at evaluation (dropout_p={p} while the module is in eval mode): the "
        "kernel drops weights at random",
        "评估时 dropout 没有关掉（模块处于 eval 模式，dropout_p={p}）：核函数会随机丢弃权重",
    ),
    "fix.dropout_eval": (
        "dropout only while training: dropout_p={p} if {owner}.training else 0.0",
        "只在训练时做 dropout：dropout_p={p} if {owner}.training else 0.0",
    ),
    "fix.mask_inverted_call": (
        "SDPA keeps the keys where a boolean mask is True (masked_fill masks where True): "
        "attn_mask={mask}",
        "SDPA 保留布尔掩码为 True 的键（masked_fill 则遮住为 True 的位置）：attn_mask={mask}",
    ),
    "fix.mask_missing_call": (
        "the call masks nothing: pass is_causal=True for a causal model (or attn_mask=<boolean "
        "keep mask>)",
        "这次调用什么也没遮住：因果模型要传 is_causal=True（或者 attn_mask=<布尔保留掩码>）",
    ),
    "fix.causal_unexpected_call": (
        "the model is not causal: is_causal=False, attn_mask=None (or pass --causal when it is a "
        "decoder)",
        "模型不是因果的：is_causal=False，attn_mask=None（如果它是解码器，请加上 --causal）",
    ),
    "fix.top_left_call": (
        "is_causal=True aligns the causal mask top-left when keys outnumber queries: pass "
        "is_causal=False, attn_mask=torch.nn.attention.bias.causal_lower_right(S, N) (or "
        "torch.ones(S, N, dtype=torch.bool).tril(diagonal=N - S))",
        "键比查询多时，is_causal=True 会把因果掩码左上对齐：应传 is_causal=False，"
        "attn_mask=torch.nn.attention.bias.causal_lower_right(S, N)（或 "
        "torch.ones(S, N, dtype=torch.bool).tril(diagonal=N - S)）",
    ),
    "bug.mask_axes_swapped": (
        "the mask read with the query and key indices swapped (mask[kv, q], kv_idx >= q_idx): "
        "query i sees the keys j ≥ i",
        "掩码读取时查询和键的下标对调了（mask[kv, q]，kv_idx >= q_idx）：第 i 个查询看到的是 j ≥ i "
        "的键",
    ),
    "fix.mask_axes_swapped": (
        "index the mask as [q_idx][kv_idx] (rows: queries, columns: keys); a causal mask keeps "
        "kv_idx <= q_idx",
        "掩码要按 [q_idx][kv_idx] 取值（行是查询，列是键）；因果掩码保留 kv_idx <= q_idx",
    ),
    "fix.mask_axes_swapped_call": (
        "the mask reads q_idx and kv_idx swapped: a causal mask_mod returns q_idx >= kv_idx, and "
        "a mask or bias is indexed [q_idx][kv_idx]",
        "掩码把 q_idx 和 kv_idx 读反了：因果的 mask_mod 应返回 q_idx >= kv_idx，掩码或偏置要按 "
        "[q_idx][kv_idx] 取值",
    ),
    "bug.bias_axes_swapped": (
        "the position bias read with the query and key indices swapped (bias[h, kv, q]: the "
        "distance i - j for j - i)",
        "位置偏置读取时查询和键的下标对调了（bias[h, kv, q]：用了距离 i - j 而不是 j - i）",
    ),
    "fix.bias_axes_swapped": (
        "index the bias as [h, q_idx, kv_idx]: the relative distance is kv_idx - q_idx",
        "偏置要按 [h, q_idx, kv_idx] 取值：相对距离是 kv_idx - q_idx",
    ),
    "fix.causal_call": (
        "a query attends keys up to and including itself: is_causal=True, or a mask_mod returning "
        "q_idx >= kv_idx (attn_mask=torch.ones(S, S, dtype=torch.bool).tril())",
        "第 i 个查询只看第 0 到第 i 个键（包括它自己）：is_causal=True，或者 mask_mod 返回 "
        "q_idx >= kv_idx（attn_mask=torch.ones(S, S, dtype=torch.bool).tril()）",
    ),
    "fix.mask_inverted_mha": (
        "nn.MultiheadAttention's boolean attn_mask is True where a key is *hidden* (the opposite "
        "of scaled_dot_product_attention's): pass attn_mask={mask}, or a causal "
        "attn_mask=nn.Transformer.generate_square_subsequent_mask(S)",
        "nn.MultiheadAttention 的布尔 attn_mask 为 True 表示*遮住*这个键（与 "
        "scaled_dot_product_attention 相反）：应传 attn_mask={mask}，因果掩码可用 "
        "attn_mask=nn.Transformer.generate_square_subsequent_mask(S)",
    ),
    "fix.enable_gqa": (
        "or hand scaled_dot_product_attention the kv heads as they are, with enable_gqa=True",
        "或者把 K/V 头原样交给 scaled_dot_product_attention，并传 enable_gqa=True",
    ),
    "fix.scale_call": (
        "SDPA's scale multiplies the scores: {scale}, or leave scale out (its default is 1/√d)",
        "SDPA 的 scale 会乘到分数上：{scale}，或者不传 scale（默认就是 1/√d）",
    ),
    "bug.before_cache": (
        "the new keys and values put before the cache (cat(new, cache))",
        "新的键和值放在了缓存前面（cat(new, cache)）",
    ),
    "fix.after_cache": (
        "append the new tokens after the cache: torch.cat((k_cache, k), dim=-2)",
        "把新词拼接在缓存后面：torch.cat((k_cache, k), dim=-2)",
    ),
    "bug.caches_swapped": (
        "the k and v caches swapped (keys appended to the values' cache)",
        "K 和 V 缓存用反了（键拼接到了值的缓存上）",
    ),
    "fix.caches_swapped": (
        "append k to the k cache and v to the v cache: (k_cache, v_cache) = layer_past",
        "k 拼接到 K 缓存，v 拼接到 V 缓存：(k_cache, v_cache) = layer_past",
    ),
    "bug.keys_to_v": ("the new keys appended to the v cache", "新的键拼接到了 V 缓存上"),
    "fix.keys_to_k": (
        "append k to the k cache: torch.cat([past_key_value[0], k], dim=2)",
        "k 要拼接到 K 缓存：torch.cat([past_key_value[0], k], dim=2)",
    ),
    "bug.values_to_k": ("the new values appended to the k cache", "新的值拼接到了 K 缓存上"),
    "fix.values_to_v": (
        "append v to the v cache: torch.cat([past_key_value[1], v], dim=2)",
        "v 要拼接到 V 缓存：torch.cat([past_key_value[1], v], dim=2)",
    ),
    "bug.key_before": (
        "the new key put before the cache (the values after it)",
        "新的键放在了缓存前面（值在后面）",
    ),
    "fix.keys_after": (
        "append the new keys after the cache: torch.cat((k_cache, k), dim=-2)",
        "把新的键拼接在缓存后面：torch.cat((k_cache, k), dim=-2)",
    ),
    "bug.rope_after_append": (
        "RoPE applied after the append (the cache holds unrotated keys)",
        "RoPE 在拼接之后才应用（缓存里存的是没有旋转的键）",
    ),
    "fix.rope_before_append": (
        "rotate the new keys before they go into the cache; the cache holds rotated keys, "
        "rotated once at their own positions",
        "新的键要在放进缓存之前旋转；缓存里存的是已经按各自位置旋转过一次的键",
    ),
    "word.cache_returns": (
        "the cache it returns: {bug} at {where}",
        "它返回的缓存：{bug}，位于 {where}",
    ),
    "word.tile_loop": ("tile loop: up to {times} tiles", "逐块循环：最多 {times} 块"),
    "cell.op_rules": ("{code}, from the rules", "{code}，由规则生成"),
    "cell.op_tiles": ("{rule} (made tile by tile)", "{rule}（逐块生成）"),
    "err.backward_cover": (
        "--backward does not cover {what} yet; leave out one of the two",
        "--backward 还不支持 {what}；请去掉两者之一",
    ),
    "err.backward_decode": (
        "--past N (a decode step against a KV cache: training keeps none)",
        "--past N（对着 KV 缓存解码一步：训练时没有这一步）",
    ),
    "cell.op_skipped_diagonal": (
        "{code} ({n} tiles above the diagonal skipped)",
        "{code}（跳过对角线以上的 {n} 块）",
    ),
    "cell.op_skipped_window": (
        "{code} ({n} tiles outside the window skipped)",
        "{code}（跳过窗口之外的 {n} 块）",
    ),
    "cell.op_skipped_both": (
        "{code} ({n} tiles above the diagonal or outside the window skipped)",
        "{code}（跳过对角线以上或窗口之外的 {n} 块）",
    ),
    # --- more errors: files, models, check, demo, sweep, units --------------------------------
    "err.not_utf8": (
        "{name}: is not UTF-8 text (byte 0x{bad} at offset {at}); save it as UTF-8",
        "{name}：不是 UTF-8 文本（偏移 {at} 处的字节 0x{bad}）；请保存为 UTF-8",
    ),
    "err.not_json": (
        "{source}: is not valid JSON ({why} at line {line} column {column}); fix the file",
        "{source}：不是有效的 JSON（第 {line} 行第 {column} 列：{why}）；请修改文件",
    ),
    "err.no_folder": (
        "{path}: the folder {folder} does not exist; create it or write elsewhere",
        "{path}：文件夹 {folder} 不存在；请先创建它，或写到别处",
    ),
    "err.same_output": (
        "{option} {path}: {other} names the same file; give each output its own name",
        "{option} {path}：{other} 指向同一个文件；请给每个输出起不同的名字",
    ),
    "err.not_kind": (
        "{path}: is not a {kind} file (empty, truncated or another format)",
        "{path}：不是 {kind} 文件（为空、被截断或是别的格式）",
    ),
    "err.weights_format": (
        "{path}: unknown weights format {suffix}; use one of {choices}",
        "{path}：未知的权重格式 {suffix}；请用 {choices} 之一",
    ),
    "err.input_npy": (
        "{path}: --input takes a .npy file (numpy.save) or a .npz with an 'x' entry",
        "{path}：--input 接受 .npy 文件（numpy.save）或含有 'x' 的 .npz",
    ),
    "err.no_x": (
        "{path}: has no array named 'x'; save the input as x, or pass a .npy file",
        "{path}：没有名为 'x' 的数组；请把输入保存为 x，或者给一个 .npy 文件",
    ),
    "err.file_not_float": (
        "{path}: {name} is {kind}, not floating point; save it as float32 or float64",
        "{path}：{name} 是 {kind}，不是浮点数；请保存为 float32 或 float64",
    ),
    "err.x_not_float": (
        "{path}: x is {kind}, not floating point; save it as float32 or float64",
        "{path}：x 是 {kind}，不是浮点数；请保存为 float32 或 float64",
    ),
    "err.x_shape": (
        "the input x is {shape}; it must be (S, H) or (B, S, H)",
        "输入 x 的形状是 {shape}；它必须是 (S, H) 或 (B, S, H)",
    ),
    "err.heads_unknown": (
        "the weights do not say how many heads there are; pass --heads (for H={H}: {valid})",
        "权重里看不出有多少个头；请给出 --heads（H={H} 时：{valid}）",
    ),
    "err.conflicts": (
        "{flag} {value} conflicts with {where}, which gives {other}; drop {flag}",
        "{flag} {value} 与 {where} 冲突，后者给出的是 {other}；请去掉 {flag}",
    ),
    "err.save_values": (
        "--save needs values, but the {backend} backend keeps none; use --backend numpy or torch",
        "--save 需要数值，但 {backend} 后端不保存数值；请用 --backend numpy 或 torch",
    ),
    "err.save_npz": (
        "--save writes a .npz file; give a name ending in .npz, e.g. --save {name}.npz",
        "--save 写出的是 .npz 文件；请给一个以 .npz 结尾的名字，例如 --save {name}.npz",
    ),
    "err.no_layer_scheme": (
        "{path}: no attention weights in a known naming scheme; {listing}",
        "{path}：没有按已知命名方式存放的注意力权重；{listing}",
    ),
    "err.model_no_config": (
        "--model {path}: has no config.json (or Meta's params.json)",
        "--model {path}：没有 config.json（或 Meta 的 params.json）",
    ),
    "err.model_no_weights": (
        "--model {path}: no weights found ({names}, their .index.json, or consolidated.00.pth)",
        "--model {path}：找不到权重（{names}、它们的 .index.json，或 consolidated.00.pth）",
    ),
    "err.model_not_folder": (
        "--model {path}: not a folder; give a saved model's folder (config.json and "
        "model.safetensors), or use --weights FILE",
        "--model {path}：不是文件夹；请给出保存好的模型文件夹（config.json 和 model.safetensors），"
        "或者用 --weights FILE",
    ),
    "err.no_layer": (
        "{path}: --layer {layer} does not exist; the model has layers 0 to {last}",
        "{path}：不存在第 --layer {layer} 层；模型的层是 0 到 {last}",
    ),
    "err.plot_flash": (
        "--plot needs the attention weights, which --algorithm {algorithm} never forms whole; "
        "drop --algorithm flash",
        "--plot 需要注意力权重，而 --algorithm {algorithm} 从不形成完整的权重矩阵；请去掉 "
        "--algorithm flash",
    ),
    "err.plot_values": (
        "--plot needs values; the {backend} backend has none; use --backend numpy or torch",
        "--plot 需要数值；{backend} 后端没有数值；请用 --backend numpy 或 torch",
    ),
    "err.plot_suffix": (
        "--plot {path}: the file name must end in {choices}",
        "--plot {path}：文件名必须以 {choices} 结尾",
    ),
    "err.expect_shape": (
        '{where} must be a shape like "h,S,S" or [12, 3, 3], got {value}',
        '{where} 必须是像 "h,S,S" 或 [12, 3, 3] 这样的形状，而不是 {value}',
    ),
    "err.unknown_step_trace": (
        "unknown step {name}; give a reference step (the step playing it: {played}) or a "
        "variable of your code ({steps})",
        "未知的步骤 {name}；请给出参考实现的步骤（扮演它的步骤：{played}）或你的代码里的变量"
        "（{steps}）",
    ),
    "err.unknown_axis": (
        "unknown axis {factor} in {step}={text}; axes of this config: {choices}",
        "{step}={text} 中的维度 {factor} 未知；这个配置的维度有：{choices}",
    ),
    "err.spec_key": (
        "unknown key {name}; valid keys: {choices}",
        "未知的键 {name}；可用的键：{choices}",
    ),
    "err.not_toml": ("{path}: not valid TOML ({why})", "{path}：不是有效的 TOML（{why}）"),
    "err.golden": (
        "{path}: not an attntrace trace: {why}",
        "{path}：不是 attntrace 的追踪：{why}",
    ),
    "err.demo_row_length": (
        "--query has {d} numbers per row and --key {n}: a query and a key are multiplied number "
        "by number, so give them the same row length",
        "--query 每行有 {d} 个数，而 --key 有 {n} 个：查询和键是逐个数相乘的，所以两者每行的长度"
        "要相同",
    ),
    "err.demo_rows": (
        "--key has {n} rows and --value {m}: each key has its value, so give them the same "
        "number of rows",
        "--key 有 {n} 行，而 --value 有 {m} 行：每个键都有它的值，所以两者的行数要相同",
    ),
    "err.demo_text": (
        "{option} {text}: write numbers, rows split by ';' (e.g. '1,0,2; 2,2,2'), or the path of "
        "a .npy file",
        "{option} {text}：请写数字，行用 ';' 分隔（例如 '1,0,2; 2,2,2'），或者给一个 .npy 文件的"
        "路径",
    ),
    "err.demo_ragged": (
        "{option}: every row needs the same count of numbers (got {lengths})",
        "{option}：每一行的数的个数必须相同（得到的是 {lengths}）",
    ),
    "err.demo_finite": (
        "{option}: every number must be finite (no nan or inf)",
        "{option}：每个数都必须是有限的（不能是 nan 或 inf）",
    ),
    "err.sweep_values": (
        "{option} takes whole numbers separated by commas, e.g. 128,512,2048; got {text}",
        "{option} 接受用逗号分隔的整数，例如 128,512,2048；而不是 {text}",
    ),
    "err.size_text": (
        "cannot read the size {text}; write it like 512MiB, 8GiB or 2000000000",
        "无法读取大小 {text}；请写成 512MiB、8GiB 或 2000000000 这样",
    ),
    "err.rate_text": (
        "cannot read {what} {text}; write a rate like {example}",
        "无法读取 {what} {text}；请写成像 {example} 这样的速率",
    ),
    "err.shape_text": (
        "cannot read the shape {text}; write it like 12,3,3 or 12x3x3 or h,S,S or S,g*d",
        "无法读取形状 {text}；请写成 12,3,3、12x3x3、h,S,S 或 S,g*d 这样",
    ),
    "err.verify_dtype": (
        "verify compares with numpy, which has no {dtype}; use --dtype {choices}",
        "verify 与 numpy 比较，而 numpy 没有 {dtype}；请用 --dtype {choices}",
    ),
    "err.layers": (
        "--layers must be a whole number >= 1 (the model's layers), got {value}",
        "--layers 必须是 >= 1 的整数（模型的层数），而不是 {value}",
    ),
    "err.batch_item": (
        "--batch-item {item} does not exist; {fix}",
        "不存在第 --batch-item {item} 个样本；{fix}",
    ),
    "err.vs_help": (
        "--vs takes the options that make B, not --help",
        "--vs 接受构成 B 的选项，而不是 --help",
    ),
    "err.window_text": (
        "--key-lengths takes whole numbers separated by commas, e.g. 3,2; got {value}",
        "--key-lengths 接受用逗号分隔的整数，例如 3,2；而不是 {value}",
    ),
    "err.past_text": (
        "--past must be a whole number from 0, got {value}",
        "--past 必须是从 0 开始的整数，而不是 {value}",
    ),
    "err.trace_explain": (
        "trace --explain works with --format table, not {fmt}; drop --explain",
        "trace --explain 只能和 --format table 一起用，不能用 {fmt}；请去掉 --explain",
    ),
    "err.init_script": (
        "--init needs FILE.py:NAME or package.module:NAME, not a script",
        "--init 需要 FILE.py:NAME 或 package.module:NAME，而不是脚本",
    ),
    "err.past_script": (
        "--past needs FILE.py:NAME or package.module:NAME, not a script",
        "--past 需要 FILE.py:NAME 或 package.module:NAME，而不是脚本",
    ),
    # --- diff --backward: the gradients (render/gradient_view.py, diffing/backward_diff.py) ----
    "verdict.grad_title": ("gradients from the same d_output", "从同一个 d_output 出发的梯度"),
    "verdict.grad_skipped": ("backward not compared: {why}", "没有比较反向传播：{why}"),
    "verdict.grad_match": (
        "MATCH: all {n} gradients agree with the reference's backward within the {dtype} tolerance",
        "一致（MATCH）：全部 {n} 个梯度都在 {dtype} 的容差内与参考实现的反向传播一致",
    ),
    "verdict.grad_differs": (
        "DIFFERS from gradient {name}",
        "不一致（DIFFERS）：从梯度 {name} 开始",
    ),
    "verdict.grad_unknown": (
        "no backward bug of the catalogue reproduces it; compare your backward with `attntrace "
        "run --backward` step by step",
        "目录里没有反向传播的 bug 能重现它；请用 `attntrace run --backward` 逐步对照你的反向传播",
    ),
    "verdict.grad_bug": (
        "bug: {bug} (applied to the reference's backward it reproduces every gradient)",
        "bug：{bug}（施加到参考实现的反向传播上，它重现了每一个梯度）",
    ),
    "bug.softmax_rowsum": (
        "softmax backward without its row-sum term ({name} = weights ⊙ d_weights)",
        "softmax 的反向传播少了按行求和的那一项（{name} = weights ⊙ d_weights）",
    ),
    "fix.softmax_rowsum": (
        "{name} = weights * (d_weights - (d_weights * weights).sum(-1, keepdim=True))",
        "{name} = weights * (d_weights - (d_weights * weights).sum(-1, keepdim=True))",
    ),
    "bug.softmax_rowsum_axis": (
        "softmax backward's row sum taken over the queries (dim=-2), not the keys",
        "softmax 反向传播的行和沿查询（dim=-2）计算，而不是沿键",
    ),
    "fix.softmax_rowsum_axis": (
        "take the sum over the keys: (d_weights * weights).sum(-1, keepdim=True)",
        "沿键的维度求和：(d_weights * weights).sum(-1, keepdim=True)",
    ),
    "bug.backward_scale_missing": (
        "the backward leaves out the scale (d_scores = d_scaled)",
        "反向传播漏掉了缩放（d_scores = d_scaled）",
    ),
    "bug.backward_scale_twice": (
        "the backward multiplies by the scale twice (d_scaled · {scale}²)",
        "反向传播乘了两次缩放系数（d_scaled · {scale}²）",
    ),
    "bug.backward_scale_inverted": (
        "the backward multiplies by √d instead of 1/√d (d_scaled / scale)",
        "反向传播乘的是 √d，而不是 1/√d（d_scaled / scale）",
    ),
    "fix.backward_scale": (
        "d_scores = d_scaled * {scale}, the forward's own scale, once",
        "d_scores = d_scaled * {scale}，用前向自己的缩放系数，只乘一次",
    ),
    "bug.d_v": (
        "d_v = weights @ d_context (the weights not transposed)",
        "d_v = weights @ d_context（注意力权重没有转置）",
    ),
    "fix.d_v": (
        "d_v = weights.transpose(-2, -1) @ d_context",
        "d_v = weights.transpose(-2, -1) @ d_context",
    ),
    "bug.d_q": (
        "d_q = d_scoresᵀ @ k (the scores' gradient transposed)",
        "d_q = d_scoresᵀ @ k（分数的梯度被转置了）",
    ),
    "fix.d_q": ("d_q = d_scores @ k", "d_q = d_scores @ k"),
    "bug.d_k": (
        "d_k = d_scores @ q (the scores' gradient not transposed)",
        "d_k = d_scores @ q（分数的梯度没有转置）",
    ),
    "fix.d_k": ("d_k = d_scores.transpose(-2, -1) @ q", "d_k = d_scores.transpose(-2, -1) @ q"),
    "bug.gqa_mean": (
        "GQA: d_k and d_v averaged over the {r} repeated heads instead of summed",
        "GQA：d_k 和 d_v 在 {r} 个重复的头上取了平均，而不是求和",
    ),
    "fix.gqa_sum": (
        "sum over the repeated heads (.sum, not .mean)",
        "在重复的头上求和（.sum，而不是 .mean）",
    ),
    "fix.gqa_sum_view": (
        "sum over the repeated heads: d_k_rep.view(..., g, {r}, N, d).sum(-4)",
        "在重复的头上求和：d_k_rep.view(..., g, {r}, N, d).sum(-4)",
    ),
    "bug.weights_transposed": (
        "every weight gradient transposed (xᵀ @ d_y): {names}",
        "每个权重的梯度都被转置了（xᵀ @ d_y）：{names}",
    ),
    "bug.weight_transposed": (
        "d_w_{c} transposed (xᵀ @ d_y, where the layer's weight is (out, in))",
        "d_w_{c} 被转置了（xᵀ @ d_y，而这一层的权重是 (out, in)）",
    ),
    "fix.weight_grad": (
        "d_w = d_yᵀ @ x, the shape of the weight (out_features, in_features)",
        "d_w = d_yᵀ @ x，形状与权重 (out_features, in_features) 相同",
    ),
    "word.gradient": ("gradient", "梯度"),
    "bug.gqa_first": (
        "GQA: d_k and d_v taken from the first of the {r} query heads of each kv head, not "
        "summed over them",
        "GQA：d_k 和 d_v 只取了每个 K/V 头对应的 {r} 个查询头中的第一个，没有对它们求和",
    ),
    "note.fastpath": (
        "torch's MultiheadAttention fast path (torch._native_multi_head_attention, one C++ op) "
        "is off while traced: the same math runs as Python ops, which are shown",
        "追踪时关闭了 torch 的 MultiheadAttention 快速路径（torch._native_multi_head_attention，"
        "一个 C++ 运算）：同样的计算以 Python 运算执行，并显示出来",
    ),
    "note.kernel_opened": (
        "{op} opened at {locations}: its steps are replayed from its arguments at the line of "
        "the call, the replay equal to the kernel's output within {max_abs} (--opaque keeps one "
        "row per call)",
        "{op} 已在 {locations} 打开：用它的参数在调用所在的那一行逐步重放它的各个步骤，重放结果与 "
        "kernel 的输出相差不超过 {max_abs}（--opaque 让每次调用只占一行）",
    ),
    "note.kernel_detached": (
        "{op} at {locations} ran on q, k and v detached from autograd: torch has no backward for "
        "it on the CPU, so its output carries no gradient here",
        "{locations} 处的 {op} 在与 autograd 分离（detach）的 q、k、v 上运行："
        "torch 在 CPU 上没有它的反向传播，所以这里它的输出不带梯度",
    ),
    "note.kernel_differs": (
        "the replay of {op} at {location} differs from the kernel's output by {max_abs} "
        "(tolerance {tol}): the steps after it use the kernel's output",
        "{location} 处 {op} 的重放结果与 kernel 的输出相差 {max_abs}（容差 {tol}）：之后的步骤使用 "
        "kernel 的输出",
    ),
    "note.sdpa": (
        "nn.MultiheadAttention called with need_weights=False runs "
        "F.scaled_dot_product_attention, one fused op: with --opaque its scores and weights are "
        "not visible (drop --opaque to see them replayed, or call it with need_weights=True)",
        "以 need_weights=False 调用的 nn.MultiheadAttention 会运行 "
        "F.scaled_dot_product_attention 这一个融合运算：加了 --opaque 就看不到它的分数和注意力权重"
        "（去掉 --opaque 就能看到重放的步骤，或者用 need_weights=True 调用）",
    ),
    # --- run --page-size: the paged cache (render/serving_view.py paged_table) ----------------
    "word.gather": (
        "gather: k[b] = k_pool[block_table[b]].reshape(-1, g, d)[:L_b], v alike",
        "gather：k[b] = k_pool[block_table[b]].reshape(-1, g, d)[:L_b]，v 同理",
    ),
    "cell.paged_tokens": (
        "tokens L_b ({lengths}) in blocks ({blocks})",
        "词数 L_b（{lengths}），块数（{blocks}）",
    ),
    "cell.block_table": ("block table (B, ⌈max L / P⌉), int32", "块表 (B, ⌈max L / P⌉)，int32"),
    "cell.pools": (
        "k_pool, v_pool (num_blocks, P, g, d)",
        "缓存池 k_pool、v_pool (num_blocks, P, g, d)",
    ),
    "cell.gathered": ("gathered k, v (B, g, max L, d)", "gather 得到的 k、v (B, g, max L, d)"),
    "cell.waste": (
        "waste: {n} empty slots in last blocks",
        "浪费：最后一块中有 {n} 个空位",
    ),
    "cell.padded": (
        "a contiguous cache padded to max L",
        "补齐到 max L 的连续缓存",
    ),
    # --- a child that did not end normally (capturing/sandbox.py) ----------------------------
    "verdict.ended_line": ("attntrace: {message}", "attntrace：{message}"),
    "verdict.ran_past_at": (
        "the code under test ran past {seconds} s at {where}",
        "被测代码运行超过了 {seconds} 秒，停在 {where}",
    ),
    "verdict.ran_past": (
        "the code under test ran past {seconds} s",
        "被测代码运行超过了 {seconds} 秒",
    ),
    "verdict.killed_at": (
        "the code under test was killed by {signal} at {where}",
        "被测代码被 {signal} 终止，停在 {where}",
    ),
    "verdict.killed": ("the code under test was killed by {signal}", "被测代码被 {signal} 终止"),
    "verdict.exit_status_at": (
        "the code under test ended the process with exit status {status} at {where}",
        "被测代码以退出状态 {status} 结束了进程，停在 {where}",
    ),
    "verdict.exit_status": (
        "the code under test ended the process with exit status {status}",
        "被测代码以退出状态 {status} 结束了进程",
    ),
    "verdict.raised_in_thread": (
        "the code under test raised {what} in a thread at {where}",
        "被测代码在一个线程里抛出了 {what}，位于 {where}",
    ),
    "verdict.raised_at": (
        "the code under test raised {what} at {where}",
        "被测代码抛出了 {what}，位于 {where}",
    ),
    "verdict.sys_exit": (
        "attntrace: the traced code called sys.exit({code})",
        "attntrace：被追踪的代码调用了 sys.exit({code})",
    ),
}
