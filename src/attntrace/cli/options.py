"""Option types shared by the commands (Annotated aliases), and their choices."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer


def complete_preset(incomplete: str) -> list[str]:
    """Shell completion of --preset: the preset names (imported only when the shell asks).

    >>> complete_preset("llama-3-8")
    ['llama-3-8b']
    """
    from attntrace.config.presets import PRESETS

    return [name for name in PRESETS if name.startswith(incomplete)]


def complete_step(incomplete: str) -> list[str]:
    """Shell completion of --expect: ``STEP=`` for every step name of every variant.

    >>> complete_step("k_r")
    ['k_rot=', 'k_rep=']
    """
    from attntrace.engine.attention import STEP_NAMES, VARIANT_STEPS
    from attntrace.engine.flash import FLASH_MASK_STEPS, FLASH_STEPS

    variants = [name for _, steps in VARIANT_STEPS.values() for name in steps]
    names = dict.fromkeys([*STEP_NAMES, *variants, *FLASH_STEPS, *FLASH_MASK_STEPS])
    return [f"{name}=" for name in names if name.startswith(incomplete)]


SIZES = "Sizes"
VARIANTS = "Attention variants"
MODELS = "Real models"
OUTPUT = "Output"
FILES = "Files"


class BackendName(StrEnum):
    """Backends the CLI offers."""

    numpy = "numpy"
    torch = "torch"
    shape = "shape"


class DTypeName(StrEnum):
    """dtypes the CLI offers (bfloat16 only on torch)."""

    float16 = "float16"
    bfloat16 = "bfloat16"
    float32 = "float32"
    float64 = "float64"


class RopeStyleName(StrEnum):
    """How RoPE pairs the dims of a head: (i, i + d/2) or neighbours (2i, 2i + 1)."""

    half = "half"
    interleaved = "interleaved"


class OutputFormat(StrEnum):
    """What ``run`` prints: the Rich table, or one document for scripts."""

    table = "table"
    json = "json"
    csv = "csv"
    markdown = "markdown"
    svg = "svg"
    html = "html"

    @property
    def picture(self) -> bool:
        """svg and html: the table view itself, recorded and exported."""
        return self in (OutputFormat.svg, OutputFormat.html)

    @property
    def view(self) -> bool:
        """The formats that show the table view: table, svg, html."""
        return self is OutputFormat.table or self.picture


class CheckFormatName(StrEnum):
    """What ``check`` prints: the Rich report, or one document for CI."""

    table = "table"
    json = "json"
    junit = "junit"


class ListingFormatName(StrEnum):
    """What ``verify`` and ``presets`` print: the Rich tables, or one JSON document."""

    table = "table"
    json = "json"


class AlgorithmName(StrEnum):
    """How the attention is computed."""

    eager = "eager"
    flash = "flash"


class CountName(StrEnum):
    """The unit of arithmetic cost: 1 MAC (multiply-accumulate) = 2 FLOPs."""

    flops = "flops"
    macs = "macs"


COST = "Cost and scale"

Batch = Annotated[
    int | None,
    typer.Option(
        help="B, batch size; omit for the unbatched (S, H) layout.", rich_help_panel=SIZES
    ),
]
Seq = Annotated[int, typer.Option(help="S, sequence length (tokens).", rich_help_panel=SIZES)]
Hidden = Annotated[
    int | None,
    typer.Option(
        help="H, model width; must be divisible by --heads unless --head-dim is set "
        "\\[default: 768, or the preset's].",
        rich_help_panel=SIZES,
        show_default=False,
    ),
]
Heads = Annotated[
    int | None,
    typer.Option(
        help="h, number of attention heads; head_dim d = H / h \\[default: 12, or the preset's].",
        rich_help_panel=SIZES,
        show_default=False,
    ),
]
KvSeq = Annotated[
    int | None,
    typer.Option(
        help="N: cross-attention, keys and values from a second input of N tokens; "
        "scores (h, S, N).",
        rich_help_panel=VARIANTS,
    ),
]
KvHidden = Annotated[
    int | None,
    typer.Option(
        help="M: width of the key/value input (kdim/vdim of nn.MultiheadAttention); implies "
        "cross-attention.",
        rich_help_panel=VARIANTS,
    ),
]
KvHeads = Annotated[
    int | None,
    typer.Option(
        help="g: key/value heads, dividing --heads (grouped-query; 1 = multi-query); "
        "adds k_rep, v_rep and the KV-cache bytes per token.",
        rich_help_panel=VARIANTS,
    ),
]
HeadDim = Annotated[
    int | None,
    typer.Option(
        help="d decoupled from H / h, as in T5 and Gemma: q_proj (S, h·d), w_o (H, h·d).",
        rich_help_panel=VARIANTS,
    ),
]
Bias = Annotated[
    bool | None,
    typer.Option(
        "--bias/--no-bias",
        help="Biases on the q, k, v and output layers \\[default: bias, or the preset's].",
        rich_help_panel=VARIANTS,
        show_default=False,
    ),
]
Causal = Annotated[
    bool | None,
    typer.Option(
        "--causal/--no-causal",
        help="Query i attends keys 0..i (top-left aligned, as SDPA's is_causal); "
        "adds mask, masked.",
        rich_help_panel=VARIANTS,
        show_default=False,
    ),
]
KeyLengths = Annotated[
    str | None,
    typer.Option(
        help="Valid keys per batch item, e.g. 3,2 (needs --batch): a key padding mask "
        "(B, 1, 1, N).",
        rich_help_panel=VARIANTS,
    ),
]
_PAST_HELP = (
    "N, tokens already in the KV cache: the S new tokens (--seq 1: one decode step) sit at "
    "positions N..N+S-1; the steps read k_cache, v_cache (B, g, N, d) and attend to N+S keys "
    "(the causal mask aligned bottom-right)."
)
Past = Annotated[
    str | None,
    typer.Option(metavar="N", help=_PAST_HELP, rich_help_panel=VARIANTS, show_default=False),
]
#: sweep's --past: a list of context lengths.
PastList = Annotated[
    str | None,
    typer.Option(
        metavar="N,N,…",
        help=_PAST_HELP.replace("N, tokens", "N values, comma-separated: tokens")
        + " E.g. --seq 1 --past 1024,4096,131072.",
        rich_help_panel=VARIANTS,
        show_default=False,
    ),
]
MaskFile = Annotated[
    Path | None,
    typer.Option(
        "--mask",
        help="A .npy mask broadcasting to the scores (B, h, S, N): booleans, True = attend (as "
        "SDPA; nn.MultiheadAttention's key_padding_mask is the opposite), or floats added to "
        "the scores.",
        rich_help_panel=VARIANTS,
        dir_okay=False,
    ),
]
Rope = Annotated[
    bool | None,
    typer.Option(
        "--rope/--no-rope",
        help="Rotary position embedding on q and k (Llama convention); "
        "adds rope_cos, rope_sin, q_rot, k_rot.",
        rich_help_panel=VARIANTS,
        show_default=False,
    ),
]
RopeBase = Annotated[
    float | None,
    typer.Option(
        help="theta of --rope (rope_theta) \\[default: 10000, or the preset's].",
        rich_help_panel=VARIANTS,
        show_default=False,
    ),
]
RopeStyle = Annotated[
    RopeStyleName | None,
    typer.Option(
        help="How --rope pairs the dims of a head: half rotates i with i + d/2 (Hugging Face "
        "rotate_half, GPT-NeoX) or interleaved rotates 2i with 2i + 1 (Meta's Llama checkpoints, "
        "GPT-J) \\[default: half, or the model's].",
        rich_help_panel=VARIANTS,
        show_default=False,
    ),
]
Window = Annotated[
    int | None,
    typer.Option(
        help="W, sliding window: query i sees keys j > i - W (Mistral, Gemma 2; with --causal "
        "also j <= i); adds window(W) to the mask.",
        rich_help_panel=VARIANTS,
    ),
]
RopeScaling = Annotated[
    str | None,
    typer.Option(
        help="RoPE scaling: llama3 (Llama 3.1 defaults), linear:factor=F, dynamic:factor=F,"
        "max_position_embeddings=P, yarn:factor=F,original_max_position_embeddings=P "
        "(key=value as in a config's rope_scaling).",
        rich_help_panel=VARIANTS,
    ),
]
RotaryDims = Annotated[
    int | None,
    typer.Option(
        help="R: partial RoPE, only the first R dims of each head rotate (GPT-NeoX rotary_pct, Phi "
        "partial_rotary_factor).",
        rich_help_panel=VARIANTS,
    ),
]
Softcap = Annotated[
    float | None,
    typer.Option(
        help="C: logit soft-capping, scores -> C*tanh(scores/C) before the mask (Gemma 2); "
        "adds capped.",
        rich_help_panel=VARIANTS,
    ),
]
QkNorm = Annotated[
    str | None,
    typer.Option(
        help="RMSNorm of q and k with weights n_q, n_k: head (over d, Qwen3 and Gemma 3) or full "
        "(over the projection width, OLMo 2); adds q_norm, k_norm.",
        rich_help_panel=VARIANTS,
    ),
]
RelativeBias = Annotated[
    str | None,
    typer.Option(
        help="T5's relative position bias: BUCKETS,MAX_DISTANCE[,causal] (from the config's "
        "relative_attention_num_buckets and _max_distance); a table rel_bias (buckets, h); adds "
        "position_bias, biased.",
        rich_help_panel=VARIANTS,
    ),
]
ModelDir = Annotated[
    Path | None,
    typer.Option(
        "--model",
        help="A saved Hugging Face model folder (config.json + model.safetensors, a sharded "
        "index or pytorch_model.bin): sizes and variants of --layer from its config, weights from "
        "the shard that holds them; typed options override it.",
        rich_help_panel=MODELS,
        file_okay=False,
    ),
]
Layer = Annotated[
    int | None,
    typer.Option(
        help="Which layer of --model (or of an --hf-config whose layers differ) \\[default: 0].",
        rich_help_panel=MODELS,
        show_default=False,
    ),
]
Prompt = Annotated[
    str | None,
    typer.Option(
        metavar="TEXT",
        help="Real words: with --model DIR, its own tokenizer splits them and the model computes "
        "the layer's input (token labels in the heat maps); without, a byte-level split.",
        rich_help_panel=MODELS,
        show_default=False,
    ),
]
Token = Annotated[
    int | None,
    typer.Option(
        metavar="I",
        help="Show query token I's attention row in every head (with --prompt, its word).",
        rich_help_panel=OUTPUT,
        show_default=False,
    ),
]
Preset = Annotated[
    str | None,
    typer.Option(
        autocompletion=complete_preset,
        help="Sizes of a real model, e.g. llama-3-8b (list: attntrace "
        "presets); explicit flags override it.",
        rich_help_panel=MODELS,
    ),
]
HfConfig = Annotated[
    Path | None,
    typer.Option(
        help="Read the sizes from a Hugging Face config.json; explicit flags override it.",
        rich_help_panel=MODELS,
        dir_okay=False,
    ),
]
Backend = Annotated[
    BackendName,
    typer.Option(
        help="numpy (default), torch (the torch extra, attntrace\\[torch]; on Linux its CPU "
        "wheel: docs/getting-started.md#pytorch), or shape (shapes only, any size).",
    ),
]
DType = Annotated[DTypeName, typer.Option(help="Element type; bfloat16 needs --backend torch.")]
VerifyDType = Annotated[
    DTypeName,
    typer.Option(
        help="Element type of both computations; the tolerance follows it (float16, float32 or "
        "float64: numpy, one side of every comparison, has no bfloat16)."
    ),
]
VerifyFormat = Annotated[
    ListingFormatName,
    typer.Option(
        "--format",
        "-f",
        help="table (for people) or json (schema attntrace.verify/1: config, "
        "tolerance, ok, and every comparison of steps and references).",
        rich_help_panel=OUTPUT,
    ),
]
PresetsFormat = Annotated[
    ListingFormatName,
    typer.Option(
        "--format",
        "-f",
        help="table (for people) or json (schema attntrace.presets/1: every "
        "preset's sizes, its config.json repository and whole-model figures).",
    ),
]
Seed = Annotated[
    int,
    typer.Option(
        help="Seed of x and the weights; the same seed gives the same values on every backend."
    ),
]


def _given_budget(ctx: typer.Context, value: str | None) -> str | None:
    """--max-memory also bounds the sizes input files declare, for the rest of the command."""
    if value is not None:  # read when first needed, so that a typo is the usual one-line error
        from attntrace.engine.memory import given_budget

        ctx.with_resource(given_budget(value))
    return value


MaxMemory = Annotated[
    str | None,
    typer.Option(
        help="Refuse runs (and input files) needing more than this, e.g. 8GiB "
        "\\[default: half the available memory].",
        callback=_given_budget,
    ),
]
Head = Annotated[
    int, typer.Option(help="Which head's attention weights to show.", rich_help_panel=OUTPUT)
]
BatchItem = Annotated[
    int,
    typer.Option(
        help="Which batch item's attention weights to show (with --batch).", rich_help_panel=OUTPUT
    ),
]
ValuesLimit = Annotated[
    int,
    typer.Option(
        help="--values prints tensors of at most this many elements and names the others.",
        rich_help_panel=OUTPUT,
        min=1,
    ),
]
Values = Annotated[
    bool,
    typer.Option(
        "--values",
        help="Also print the numbers of every tensor small enough to read.",
        rich_help_panel=OUTPUT,
    ),
]
Format = Annotated[
    OutputFormat,
    typer.Option(
        "--format",
        "-f",
        help="table (Rich, for people), or one document on stdout for scripts: json "
        "(schema attntrace.trace/1), csv (one row per step), markdown; svg or html: the table "
        "view as a picture (100 columns).",
        rich_help_panel=OUTPUT,
    ),
]
Plot = Annotated[
    Path | None,
    typer.Option(
        "--plot",
        metavar="FILE.png|.svg|.pdf",
        help="Also draw the attention weights of every head as "
        "a grid of heat maps (matplotlib: the plot extra, attntrace\\[plot]).",
        rich_help_panel=OUTPUT,
        dir_okay=False,
        show_default=False,
    ),
]
PlotFlow = Annotated[
    Path | None,
    typer.Option(
        "--plot-flow",
        metavar="FILE.svg",
        help="Also draw the data flow of the trace (x into the q, "
        "k, v paths, each step with its shape) as SVG.",
        rich_help_panel=OUTPUT,
        dir_okay=False,
        show_default=False,
    ),
]
NoColor = Annotated[
    bool,
    typer.Option(
        "--no-color",
        help="No colours (also when NO_COLOR is set); output that is not a terminal never has any.",
        rich_help_panel=OUTPUT,
    ),
]
CheckBackend = Annotated[
    BackendName,
    typer.Option(help="shape (default: no compute, any size, same shapes), numpy or torch."),
]
CHECKS = "Checks"
Expect = Annotated[
    list[str] | None,
    typer.Option(
        "--expect",
        "-e",
        metavar="STEP=SHAPE",
        autocompletion=complete_step,
        help="Expected shape of a step, repeatable: scores=12,3,3, scores=12x3x3 or with axis "
        "letters scores=h,S,S (B S N M H h g d, Br Bc with flash) and products k_proj=S,g*d.",
        rich_help_panel=CHECKS,
        show_default=False,
    ),
]
CheckFormat = Annotated[
    CheckFormatName,
    typer.Option(
        "--format",
        "-f",
        help="table (for people), json (schema attntrace.check/1) or junit (JUnit "
        "XML for CI: one testcase per check).",
        rich_help_panel=CHECKS,
    ),
]
Verbose = Annotated[
    bool,
    typer.Option(
        "--verbose", "-v", help="Also list every check that passed.", rich_help_panel=CHECKS
    ),
]
Golden = Annotated[
    Path | None,
    typer.Option(
        metavar="FILE.json",
        help="Compare the shapes and dtypes of every step and parameter with a trace saved by: "
        "attntrace run --format json > FILE.json. With --trace: a golden of your code (attntrace "
        "trace --format json) step by step, or one of run by role.",
        rich_help_panel=CHECKS,
        show_default=False,
    ),
]
Spec = Annotated[
    Path | None,
    typer.Option(
        metavar="FILE.toml",
        help="Check many configs at once; each \\[config.NAME] table gives sizes, variants or a "
        "preset, and an expect table. Replaces the size options.",
        rich_help_panel=CHECKS,
        show_default=False,
    ),
]
Algorithm = Annotated[
    AlgorithmName,
    typer.Option(
        help="eager (the whole (S, S) matrix) or flash (tile by tile, online softmax).",
        rich_help_panel=COST,
    ),
]
Threads = Annotated[
    int | None,
    typer.Option(
        help="flash: threads splitting the query blocks, each block's maths on one thread "
        "\\[default: the cores].",
        rich_help_panel=COST,
    ),
]
BlockSize = Annotated[
    int | None,
    typer.Option(
        help="flash: rows of a query block (Br) and of a key/value block (Bc) \\[default: Br = "
        "128, Bc as many keys as fit a 2 MiB tile].",
        rich_help_panel=COST,
        show_default=False,
    ),
]
Backward = Annotated[
    bool,
    typer.Option(
        "--backward",
        help="Also the backward pass: every gradient step from d_output back to d_x and each "
        "weight, what the forward keeps for it (eager, flash, --recompute) and its FLOPs.",
        rich_help_panel=COST,
    ),
]
Recompute = Annotated[
    bool,
    typer.Option(
        "--recompute",
        help="With --backward: activation recomputation; the forward keeps x alone and runs "
        "again in the backward.",
        rich_help_panel=COST,
    ),
]
GradOutput = Annotated[
    Path | None,
    typer.Option(
        metavar="FILE.npy",
        help="With --backward: d_output, the gradient the backward starts from, of the output's "
        "shape \\[default: standard normal drawn from --seed].",
        rich_help_panel=COST,
        show_default=False,
    ),
]
Layers = Annotated[
    int | None,
    typer.Option(
        help="L: also show the attention of a whole model of L layers like this one: parameters, "
        "KV cache of every layer at --batch and --seq (in --dtype), FLOPs of one forward "
        "\\[default: the layer count of --model, --hf-config or --preset, when known].",
        rich_help_panel=COST,
        show_default=False,
    ),
]
SERVING = "Serving (prefill, decode and the KV cache)"
PeakFlops = Annotated[
    str | None,
    typer.Option(
        help="The machine's peak arithmetic, e.g. 989T or 1.98PFLOP/s, for the roofline of the "
        "serving figures \\[default: H100 SXM, 989 TFLOP/s dense bf16].",
        rich_help_panel=SERVING,
        show_default=False,
    ),
]
Bandwidth = Annotated[
    str | None,
    typer.Option(
        help="The machine's memory bandwidth, e.g. 3.35TB/s, for the roofline of the serving "
        "figures \\[default: H100 SXM, 3.35 TB/s HBM3].",
        rich_help_panel=SERVING,
        show_default=False,
    ),
]
Memory = Annotated[
    str | None,
    typer.Option(
        help="Memory the KV cache may take, e.g. 80GiB: how many requests of N+S tokens fit "
        "(every layer: --layers, --preset, --model).",
        rich_help_panel=SERVING,
    ),
]
CacheDType = Annotated[
    str | None,
    typer.Option(
        help="The KV cache's dtypes for the serving figures, e.g. float8 or float16,float8 "
        "\\[default: float16, bfloat16, float8].",
        rich_help_panel=SERVING,
        show_default=False,
    ),
]
CacheFile = Annotated[
    Path | None,
    typer.Option(
        "--cache",
        help="The KV cache a --past step reads: a .npz or .safetensors with k_cache and "
        "v_cache (B, g, N, d) (or key_cache.L, layers.L.k_cache, a --save'd step's k_all); "
        "--past defaults to its N.",
        rich_help_panel=SERVING,
    ),
]
PageSize = Annotated[
    int | None,
    typer.Option(
        help="P: a paged KV cache (vLLM's blocks of P tokens): block table, pool, gather and "
        "the waste in last blocks, as steps and figures; needs --past; a ragged batch with "
        "--key-lengths.",
        rich_help_panel=SERVING,
    ),
]
Count = Annotated[
    CountName,
    typer.Option(help="Count arithmetic in flops or macs (1 MAC = 2 FLOPs).", rich_help_panel=COST),
]
Scale = Annotated[
    str,
    typer.Option(
        help="Factor on the scores: sqrt (1/√d, the paper), none (unscaled, as the study "
        "notes' worked example) or a number.",
    ),
]
Weights = Annotated[
    Path | None,
    typer.Option(
        help="Projection weights: .npz, .safetensors, .pt/.pth/.bin (attntrace, "
        "nn.MultiheadAttention, q_proj/o_proj or BERT names); sets --hidden.",
        rich_help_panel=FILES,
    ),
]
LayerPrefix = Annotated[
    str | None,
    typer.Option(
        help="Which layer of --weights or --model, by the prefix of its tensor names, e.g. "
        "model.layers.0.self_attn. (T5: decoder.block.0.layer.0.).",
        rich_help_panel=FILES,
    ),
]
Input = Annotated[
    Path | None,
    typer.Option(
        "--input",
        help="x from a .npy file, (S, H) or (B, S, H); sets --seq and --batch.",
        rich_help_panel=FILES,
    ),
]
InputKv = Annotated[
    Path | None,
    typer.Option(
        "--input-kv",
        help="x_kv of cross-attention from a .npy file, (N, M) or (B, N, M), e.g. an "
        "encoder's output; sets --kv-seq and --kv-hidden.",
        rich_help_panel=FILES,
    ),
]
Save = Annotated[
    Path | None,
    typer.Option(
        help="Write every step and parameter to FILE.npz (atomically).", rich_help_panel=FILES
    ),
]
DocumentFile = Annotated[
    Path | None,
    typer.Option(
        "--output",
        "-o",
        metavar="FILE",
        help="Write what the command prints (any --format) to FILE instead of stdout (- is "
        "stdout), atomically: FILE is complete or as it was, never half-written.",
        rich_help_panel=OUTPUT,
        dir_okay=False,
        show_default=False,
    ),
]


class LangName(StrEnum):
    """Languages of the words (--lang): explanations, table headers and titles."""

    en = "en"
    zh = "zh"


Explain = Annotated[
    bool,
    typer.Option(
        "--explain",
        help="Say in words what each step does and why its shape is what it is, with this "
        "run's numbers (JSON: an explanation per step).",
        rich_help_panel=OUTPUT,
    ),
]
Lang = Annotated[
    LangName | None,
    typer.Option(
        help="Language of the words (explanations, headers, verdicts, errors): en or zh "
        "(default: zh when LC_ALL, LC_MESSAGES or LANG is zh_*, else en). Step names, JSON keys "
        "and shapes stay as they are.",
        rich_help_panel=OUTPUT,
        show_default=False,
    ),
]

# --- across devices (issue 43) ---
PARALLEL = "Across devices (tensor, sequence and context parallelism)"


class CpKindName(StrEnum):
    """How context parallelism shares the keys and values."""

    ring = "ring"
    allgather = "allgather"
    ulysses = "ulysses"


Tp = Annotated[
    int | None,
    typer.Option(
        "--tp",
        metavar="T",
        help="Tensor parallelism over T ranks (Megatron): each rank holds h/T heads, q, k, v "
        "column-parallel, the output row-parallel and all-reduced. Shows one rank's steps.",
        rich_help_panel=PARALLEL,
        show_default=False,
    ),
]
Sp = Annotated[
    bool,
    typer.Option(
        "--sp",
        help="Sequence parallelism with --tp: x sharded S/T, all-gathered before the "
        "projections, the output reduce-scattered.",
        rich_help_panel=PARALLEL,
    ),
]
Cp = Annotated[
    int | None,
    typer.Option(
        "--cp",
        metavar="C",
        help="Context parallelism over C ranks: each holds S/C tokens (with --causal the "
        "load-balanced order: chunks c and 2C-1-c of 2C).",
        rich_help_panel=PARALLEL,
        show_default=False,
    ),
]
CpKind = Annotated[
    CpKindName | None,
    typer.Option(
        "--cp-kind",
        help="ring (key/value blocks passed round, merged by log-sum-exp), allgather, or "
        "ulysses (two all-to-alls) \\[default: ring].",
        rich_help_panel=PARALLEL,
        show_default=False,
    ),
]
Rank = Annotated[
    int,
    typer.Option(
        "--rank",
        help="The rank whose steps are shown, 0 to T·C-1 (t = rank % T, c = rank // T).",
        rich_help_panel=PARALLEL,
    ),
]
Nproc = Annotated[
    int | None,
    typer.Option(
        "--nproc",
        metavar="N",
        help="verify: run the T·C ranks as N local processes with torch.distributed (gloo), "
        "each rank's steps against the simulated ranks and the gathered output against one "
        "device. Without it, --tp/--cp compare the ranks simulated in one process.",
        rich_help_panel=PARALLEL,
        show_default=False,
    ),
]
NprocTimeout = Annotated[
    float,
    typer.Option(
        "--timeout",
        metavar="SECONDS",
        help="verify --nproc: the processes are stopped after this long.",
        rich_help_panel=PARALLEL,
    ),
]
#: sweep's --tp and --cp: lists of group sizes.
TpList = Annotated[
    str | None,
    typer.Option(
        "--tp",
        metavar="T,T,…",
        help="sweep: tensor-parallel sizes, comma-separated (e.g. 1,2,4,8): rank 0's cost on each.",
        rich_help_panel=PARALLEL,
        show_default=False,
    ),
]
CpList = Annotated[
    str | None,
    typer.Option(
        "--cp",
        metavar="C,C,…",
        help="sweep: context-parallel sizes, comma-separated (e.g. 1,2,4,16).",
        rich_help_panel=PARALLEL,
        show_default=False,
    ),
]


# --- your code across devices (issue 44): trace --nproc, diff --nproc ---


class ShardXName(StrEnum):
    """How x is handed to the ranks of --nproc."""

    none = "none"
    seq = "seq"


CodeNproc = Annotated[
    int | None,
    typer.Option(
        "--nproc",
        metavar="N",
        help="Run your code as N local processes joined by torch.distributed (gloo, CPU): a "
        "class is built on every rank (its __init__ gets rank, world_size, group or "
        "device_mesh when it names them), a function gets them the same way; every rank's "
        "ops and collectives are recorded.",
        rich_help_panel=PARALLEL,
        show_default=False,
    ),
]
ShardX = Annotated[
    ShardXName,
    typer.Option(
        "--shard-x",
        help="With --nproc: none (every rank gets the full x: tensor-parallel code shards the "
        "weights) or seq (rank r gets the r-th contiguous S/N tokens: ring, Ulysses).",
        rich_help_panel=PARALLEL,
    ),
]
ShowRank = Annotated[
    int | None,
    typer.Option(
        "--rank",
        metavar="R",
        help="With --nproc: show rank R's steps alone (default: every rank, one row where "
        "they agree).",
        rich_help_panel=PARALLEL,
        show_default=False,
    ),
]
