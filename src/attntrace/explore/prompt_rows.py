"""``explore --prompt``: the attention weights of every layer of a model on the prompt, so that a
click on a token shows its row in every head and layer.

The model runs once (transformers, through :func:`attntrace.models.prompt.layer_inputs`) and
gives each layer's input; each layer is then traced by the engine from the folder's own
weights, as ``run --model DIR --layer N --prompt`` traces it. Without a model folder the prompt
is split into bytes and one seeded layer of the page's default sizes is traced.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

    from attntrace.models.prompt import Tokens
    from attntrace.trace import Trace

#: The most layers traced for the page (a larger model shows its first ones).
MAX_LAYERS = 48


@dataclass(frozen=True)
class PromptRows:
    """The prompt's tokens and the weights (h, S, N) and masks of each traced layer."""

    tokens: tuple[str, ...]
    note: str
    weights: tuple[np.ndarray, ...]  # per layer: (h, S, N)
    masked: tuple[np.ndarray | None, ...]  # per layer: (h, S, N) bool, or None

    def summary(self) -> dict[str, Any]:
        """What ``/api/prompt`` answers."""
        return {"tokens": list(self.tokens), "note": self.note, "layers": len(self.weights)}

    def rows(self, index: int) -> dict[str, Any]:
        """What ``/api/token`` answers: query ``index``'s row in every head of every layer
        (None where a key is masked).

        >>> import numpy as np
        >>> w = np.array([[[1.0, 0.0], [0.25, 0.75]]])  # (h, S, N): one head
        >>> r = PromptRows(("a", "b"), "", (w,), (w == 0,))
        >>> r.rows(0)["layers"], r.rows(1)["layers"][0]["heads"]
        ([{'layer': 0, 'heads': [[1.0, None]]}], [[0.25, 0.75]])
        """
        layers = [
            {"layer": n, "heads": _rows_of(w, m, index)}
            for n, (w, m) in enumerate(zip(self.weights, self.masked, strict=True))
        ]
        keys = list(self.tokens)
        return {"index": index, "query": self.tokens[index], "keys": keys, "layers": layers}


def _rows_of(weights: np.ndarray, masked: np.ndarray | None, index: int) -> list[list[Any]]:
    """Row ``index`` of every head of ``weights`` (h, S, N), rounded; None where masked."""
    out = []
    for h in range(weights.shape[0]):
        row = [round(float(v), 4) for v in weights[h, index].tolist()]  # (N,)
        hidden = masked[h, index].tolist() if masked is not None else [False] * len(row)
        out.append([None if m else v for v, m in zip(row, hidden, strict=True)])
    return out


def prompt_rows(text: str, model_dir: Path | None) -> PromptRows:
    """The rows of ``text`` through the model of ``model_dir`` (every layer, up to
    :data:`MAX_LAYERS`), or of one seeded layer on its bytes without a folder.

    >>> rows = prompt_rows("hi", None)
    >>> rows.tokens, rows.weights[0].shape
    (('h', 'i'), (12, 2, 2))
    """
    if model_dir is None:
        from attntrace.config.attention_config import AttentionConfig
        from attntrace.models.prompt import byte_tokens

        tokens = byte_tokens(text)
        trace = _traced(AttentionConfig(seq=len(tokens.ids)), {})
        note = f"{len(tokens.ids)} bytes, one token each; one seeded layer (no --model)"
        return _rows(tokens, note, [trace])
    return _model_rows(text, model_dir)


def _model_rows(text: str, model_dir: Path) -> PromptRows:
    from attntrace.config.presets import layer_count, resolve_fields
    from attntrace.files import resolve_run
    from attntrace.models.load import layer_prefix_of, load_model_layer
    from attntrace.models.prompt import folder_tokens, layer_inputs

    tokens = folder_tokens(model_dir, text)
    count = min(layer_count(model_dir=model_dir) or 1, MAX_LAYERS)
    prefixes = [layer_prefix_of(model_dir, n) for n in range(count)]
    xs = layer_inputs(model_dir, tokens.ids, prefixes)  # each (S, H)
    traces = []
    for n, x in enumerate(xs):
        sizes, known = resolve_fields(model_dir=model_dir, layer=n)
        loaded = load_model_layer(model_dir, n, prefixes[n], sizes.get("rope_style"))
        config, tensors = resolve_run(sizes, set(), loaded, x, known=known)
        traces.append(_traced(config, tensors))
    note = f"{len(tokens.ids)} tokens ({tokens.source}); {count} layers of {model_dir.name}"
    return _rows(tokens, note, traces)


def _traced(config: Any, tensors: dict[str, Any]) -> Trace:
    from attntrace.engine.attention import trace_attention

    return trace_attention(config, "numpy", keep_values={"weights", "masked"}, tensors=tensors)


def _rows(tokens: Tokens, note: str, traces: list[Trace]) -> PromptRows:
    weights, masked = [], []
    for trace in traces:
        w = trace["weights"].value  # (h, S, N)
        m = trace["masked"].value if "masked" in trace else None  # (h, S, N): -inf where masked
        assert w is not None
        weights.append(w)
        masked.append(None if m is None else m == float("-inf"))
    return PromptRows(tokens.labels, note, tuple(weights), tuple(masked))
