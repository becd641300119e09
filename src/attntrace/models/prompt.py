"""``--prompt TEXT``: real words in place of the seeded x.

With ``--model DIR`` the prompt is split by the folder's own tokenizer (its ``tokenizer.json``
read by the ``tokenizers`` library, else transformers' ``AutoTokenizer`` from the folder; nothing
is downloaded) and the model itself, run by transformers from the folder, gives the hidden
states that reach the chosen layer's attention: the input that layer really sees (after the
embeddings, the earlier layers and the layer's own norm). The run stops there. Without a model
folder the prompt is split into its UTF-8 bytes, one token each, and x stays seeded.

The result is a :class:`PromptInput`: the tokens (ids and labels) and x (S, H), which the
command hands to the trace as it would an ``--input`` file.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attntrace.errors import ConfigError
from attntrace.text import plain

if TYPE_CHECKING:
    import numpy as np

#: Files that hold a tokenizer AutoTokenizer can read when there is no tokenizer.json.
TOKENIZER_FILES = ("tokenizer_config.json", "vocab.json", "vocab.txt", "tokenizer.model")
#: The longest prompt taken (tokens): every (S, S) map of every head is formed.
MAX_TOKENS = 4096


@dataclass(frozen=True)
class Tokens:
    """A prompt split into tokens: their ids, a label for each (its text) and what split it."""

    ids: tuple[int, ...]
    labels: tuple[str, ...]
    source: str  # "tokenizer.json", "AutoTokenizer" or "bytes"


@dataclass(frozen=True)
class PromptInput:
    """What ``--prompt`` gives a trace: its tokens, the layer's input x (S, H) when a model ran
    (None: x stays seeded) and a note for the header saying where both came from."""

    tokens: Tokens
    x: np.ndarray | None
    note: str


def label(text: str) -> str:
    """The label of a token's text: terminal-safe, without its surrounding spaces (a token that
    is only space is ``␣``).

    >>> label(" the"), label(" "), label("\\n")
    ('the', '␣', '␣')
    """
    return plain(text.strip()) or "␣"


def byte_tokens(text: str) -> Tokens:
    """``text`` split into its UTF-8 bytes, one token each (the split without a tokenizer).

    >>> t = byte_tokens("hé")
    >>> t.ids, t.labels
    ((104, 195, 169), ('h', '\\\\xc3', '\\\\xa9'))
    """
    check_prompt(text)
    data = text.encode("utf-8")
    labels = tuple(label(chr(b)) if b < 128 else f"\\x{b:02x}" for b in data)
    return Tokens(tuple(data), labels, "bytes")


def check_prompt(text: str) -> None:
    """An empty prompt has nothing to trace."""
    if not text.strip():
        raise ConfigError("--prompt is empty; give it some text, e.g. --prompt 'The cat sat'")


def folder_tokens(path: Path, text: str) -> Tokens:
    """``text`` split by the tokenizer saved in the model folder ``path``, special tokens
    included as the model's own tokenizer adds them."""
    check_prompt(text)
    if (path / "tokenizer.json").is_file():
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
        ids = tuple(tokenizer.encode(text).ids)
        labels = tuple(label(tokenizer.decode([i], skip_special_tokens=False)) for i in ids)
        return _checked(path, Tokens(ids, labels, "tokenizer.json"))
    if any((path / name).is_file() for name in TOKENIZER_FILES):
        auto = _auto_tokenizer(path)
        ids = tuple(int(i) for i in auto(text)["input_ids"])
        labels = tuple(label(auto.decode([i])) for i in ids)
        return _checked(path, Tokens(ids, labels, "AutoTokenizer"))
    raise ConfigError(
        f"--model {plain(path)} has no tokenizer (tokenizer.json, or tokenizer_config.json with "
        "its vocabulary); save one there with tokenizer.save_pretrained(DIR), or drop --model "
        "for a byte-level split"
    )


def _auto_tokenizer(path: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(path), local_files_only=True)


def _checked(path: Path, tokens: Tokens) -> Tokens:
    if not tokens.ids:
        raise ConfigError("--prompt gives no tokens; give it some words")
    if len(tokens.ids) > MAX_TOKENS:
        raise ConfigError(
            f"--prompt is {len(tokens.ids)} tokens; attntrace traces at most {MAX_TOKENS} "
            "(every head's (S, S) map is formed): shorten it"
        )
    return tokens


def layer_input(path: Path, ids: tuple[int, ...], prefix: str) -> np.ndarray:
    """x (S, H): what the attention module at ``prefix`` (a weight prefix such as
    ``model.layers.3.self_attn.``) receives when the model of the folder runs on ``ids``
    (positions 0 … S - 1, one sequence). The model runs through transformers, float32, and
    stops at that module."""
    return layer_inputs(path, ids, [prefix])[0]


def layer_inputs(path: Path, ids: tuple[int, ...], prefixes: list[str]) -> list[np.ndarray]:
    """x (S, H) of each attention module of ``prefixes`` (in the model's order), from one run
    of the model that stops at the last of them."""
    import torch

    model = _model(path)
    modules = [find_module(model, prefix) for prefix in prefixes]
    seen: dict[int, Any] = {}

    def hook(index: int) -> Any:
        def record(_mod: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            seen[index] = kwargs.get("hidden_states", args[0] if args else None)
            if len(seen) == len(modules):
                raise _ReachedError

        return record

    handles = [
        m.register_forward_pre_hook(hook(i), with_kwargs=True) for i, m in enumerate(modules)
    ]
    try:
        with torch.inference_mode():
            model(input_ids=torch.tensor([ids]))  # (1, S)
    except _ReachedError:
        pass
    finally:
        for handle in handles:
            handle.remove()
    return [seen[i][0].to(torch.float32).numpy() for i in range(len(modules))]  # (S, H) each


class _ReachedError(Exception):
    """Raised by the hook: the layer's input is known, the rest of the model need not run."""


def _model(path: Path) -> Any:
    """The folder's model, loaded by transformers from the folder alone (float32)."""
    try:
        import torch
        import transformers
    except ImportError:
        raise ConfigError(
            "--prompt with --model runs the model through transformers, which is not installed; "
            "pip install transformers torch (or drop --model for a byte-level split)"
        ) from None
    hf_logging: Any = transformers.logging
    hf_logging.set_verbosity_error()  # the head it does not load is not news here
    hf_logging.disable_progress_bar()
    return transformers.AutoModel.from_pretrained(
        str(path), local_files_only=True, dtype=torch.float32
    ).eval()


def find_module(model: Any, prefix: str) -> Any:
    """The module of ``model`` at weight prefix ``prefix``: the saved name may carry the
    task model's prefix (``transformer.``, ``model.``) that the base model lacks.

    >>> import torch
    >>> m = torch.nn.Module(); m.h = torch.nn.ModuleList([torch.nn.Linear(1, 1)])
    >>> find_module(m, "transformer.h.0.")
    Linear(in_features=1, out_features=1, bias=True)
    """
    parts = prefix.rstrip(".").split(".")
    for start in range(len(parts)):
        try:
            return model.get_submodule(".".join(parts[start:]))
        except AttributeError:
            continue
    name = prefix.rstrip(".")
    raise ConfigError(f"the model has no module {name!r}; pick its layer with --layer-prefix")


def prompt_input(
    text: str, model_dir: Path | None, layer: int | None, layer_prefix: str | None = None
) -> PromptInput:
    """The tokens and x of ``--prompt text``: the model's own with ``model_dir``, else bytes.

    >>> p = prompt_input("hi", None, None)
    >>> p.tokens.labels, p.x is None
    (('h', 'i'), True)
    """
    if model_dir is None:
        tokens = byte_tokens(text)
        note = (
            f"--prompt without --model: a plain byte-level split ({len(tokens.ids)} bytes, one "
            "token each) and a seeded x; add --model DIR for a real model's tokens and hidden "
            "states"
        )
        return PromptInput(tokens, None, note)
    from attntrace.models.folder import folder_config
    from attntrace.models.load import layer_prefix_of

    config = folder_config(model_dir)
    if config.get("is_encoder_decoder"):
        raise ConfigError(
            f"--prompt runs decoder-only and encoder-only models; --model {plain(model_dir)} is "
            "an encoder-decoder: trace one of its layers with --input x.npy instead"
        )
    tokens = folder_tokens(model_dir, text)
    n = 0 if layer is None else layer
    prefix = layer_prefix if layer_prefix is not None else layer_prefix_of(model_dir, n)
    x = layer_input(model_dir, tokens.ids, prefix)  # (S, H)
    note = (
        f"--prompt: {len(tokens.ids)} tokens ({tokens.source}); x is the input of "
        f"{prefix.rstrip('.')} as transformers computes it for them"
    )
    return PromptInput(tokens, x, note)
