"""What counts as an untranslated English sentence in Chinese output: three English words in a
row that are neither code nor one of the technical words a Chinese learner reads as they are
(softmax, RoPE, float32, the options, the step names...)."""

from __future__ import annotations

import re

#: Words a Chinese text keeps in English: library and model names, the notes' own English
#: (Query, Key, Value, batch, view, transpose), units, formats, dtypes.
TECHNICAL = frozenset(
    [
        "attntrace",
        "numpy",
        "torch",
        "pytorch",
        "python",
        "rich",
        "typer",
        "jupyter",
        "matplotlib",
        "safetensors",
        "transformers",
        "softmax",
        "matmul",
        "einsum",
        "sdpa",
        "rope",
        "gqa",
        "mqa",
        "kv",
        "cache",
        "eager",
        "flash",
        "flops",
        "flop",
        "macs",
        "mac",
        "tflop",
        "pflop",
        "query",
        "key",
        "value",
        "batch",
        "view",
        "transpose",
        "reshape",
        "contiguous",
        "repeat",
        "interleave",
        "tile",
        "token",
        "tokens",
        "float",
        "float16",
        "float32",
        "float64",
        "bfloat16",
        "float8",
        "int",
        "json",
        "csv",
        "markdown",
        "html",
        "svg",
        "junit",
        "xml",
        "toml",
        "npz",
        "npy",
        "pt",
        "pth",
        "bin",
        "table",
        "shape",
        "numpy",
        "torch",
        "head",
        "heads",
        "hidden",
        "seq",
        "past",
        "window",
        "bias",
        "mask",
        "llama",
        "mistral",
        "gemma",
        "qwen",
        "gpt",
        "neox",
        "phi",
        "olmo",
        "bert",
        "t5",
        "meta",
        "hugging",
        "face",
        "vllm",
        "hbm3",
        "sxm",
        "h100",
        "ok",
        "usage",
        "options",
        "commands",
        "arguments",
        "command",
        "true",
        "false",
        "none",
        "null",
        "sqrt",
        "rms",
        "rmsnorm",
        "tanh",
        "exp",
        "rich",
        "schema",
        "half",
        "interleaved",
        "eager",
        "scores",
        "scaled",
        "weights",
        "context",
        "merged",
        "output",
        "masked",
        "a",
        "b",
        "e",
        "f",
        "i",
        "j",
        "t",
        "u",
        "z",
        "log",
        "inf",
        "nan",
        "max",
        "min",
        "sum",
        "mean",
        "abs",
        "rel",
        "rtol",
        "atol",
        "ci",
        "github",
        "actions",
        "path",
        "file",
        "dir",
        "gib",
        "mib",
        "kib",
        "tib",
        "pib",
        "gb",
        "mb",
        "kb",
        "tb",
        "pb",
        "b",
        "s",
        "n",
        "m",
        "h",
        "g",
        "d",
        "l",
        "r",
        "p",
        "c",
        "w",
        "x",
        "y",
        "q",
        "k",
        "v",
        "o",
    ]
)
_WORD = re.compile(r"[A-Za-z]+")
#: A token that is code: it holds a digit, an underscore, a dot, a bracket, an operator...
_CODE = re.compile(r"[0-9_./=()\[\]{}<>:@*+\-'\"`|\\#~^,;…→×√·]")


def english_runs(text: str, allowed: frozenset[str] = frozenset()) -> list[str]:
    """The runs of three or more English words in ``text`` that are not code or technical
    (an exception's own line, ``ValueError: ...`` from the user's library, is not ours).

    >>> english_runs("规则：matmul 把 qh 的最后一个维度 (d=64) 相乘")
    []
    >>> english_runs("以 eval 模式运行（关闭 dropout）；它原来是 train 模式")
    []
    >>> english_runs("fix: take the softmax over the keys")
    ['fix take the softmax over the keys']
    """
    found = []
    for line in text.splitlines():
        if re.match(r"\s*\w*(Error|Exception|Warning): ", line):
            continue  # the message of the user's code or library, quoted
        run: list[str] = []
        for token in [*_TOKEN.findall(line), ""]:  # a Chinese run ends an English one
            word = token.strip(",;:.!?()[]")
            if word and _WORD.fullmatch(word) and not _CODE.search(token.strip(",;:.!?()")):
                run.append(word)
                continue
            if sum(w.lower() not in TECHNICAL | allowed for w in run) >= 3:
                found.append(" ".join(run))
            run = []
    return found


#: Chinese characters, punctuation and box drawing (one token each run), or a word.
_CJK = r"\u2500-\u257f\u3000-\u303f\u4e00-\u9fff\uff00-\uffef"
_TOKEN = re.compile(rf"[{_CJK}]+|[^\s{_CJK}]+")
