"""``run --plot FILE.png|.svg|.pdf``: the attention weights of every head as a grid of heat maps.

Drawn with matplotlib (the optional extra ``attntrace[plot]``), imported only here. One panel
per head (queries down, keys across), one shared colour bar from 0 to 1; masked cells are drawn
in a flat grey that no weight has, so they stay distinct from a weight of 0.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attntrace.errors import BackendUnavailableError, ConfigError, install_hint
from attntrace.trace import Trace

if TYPE_CHECKING:
    import numpy as np

PLOT_FORMATS = (".png", ".svg", ".pdf")
#: The colour of masked cells: a grey outside the colour map.
MASKED_COLOUR = "#b8b8b8"


def _pyplot() -> Any:
    """matplotlib's pyplot on the Agg backend (no display needed), or a clear error."""
    try:
        import matplotlib
    except ImportError:
        raise BackendUnavailableError(
            f"--plot needs matplotlib, which is not installed; {install_hint('plot')}"
        ) from None
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def head_weights(trace: Trace, batch_item: int = 0) -> tuple[np.ndarray, np.ndarray | None]:
    """The weights of every head of one batch item, (h, S, N), and where they are masked."""
    if "weights" not in trace:
        raise ConfigError(
            "--plot needs the attention weights, which --algorithm "
            f"{trace.config.algorithm} never forms "
            "whole; drop --algorithm flash"
        )
    weights = trace["weights"].value
    if weights is None:
        raise ConfigError(
            f"--plot needs values; the {trace.backend} backend has none; "
            "use --backend numpy or torch"
        )
    index = (batch_item,) if trace.config.batched else ()
    masked = trace["masked"].value if "masked" in trace else None  # (B, h, S, N): -inf where masked
    hidden = None if masked is None else masked[index] == float("-inf")  # (h, S, N)
    return weights[index], hidden


def check_plot_path(path: Path) -> None:
    """The suffix chooses the format: .png, .svg or .pdf."""
    if path.suffix.lower() not in PLOT_FORMATS:
        raise ConfigError(f"--plot {path}: the file name must end in {', '.join(PLOT_FORMATS)}")


def plot_heads(trace: Trace, path: Path, *, batch_item: int = 0) -> int:
    """Write the heat-map grid of ``trace`` to ``path`` (format from its suffix); return the
    number of panels (one per head)."""
    import numpy as np

    check_plot_path(path)
    weights, hidden = head_weights(trace, batch_item)
    plt = _pyplot()
    heads, rows, cols = (int(n) for n in weights.shape)  # (h, S, N)
    ncols = math.ceil(math.sqrt(heads))
    nrows = math.ceil(heads / ncols)
    fig, axes = plt.subplots(
        nrows,
        ncols,
        figsize=(2.6 * ncols + 1.2, 2.6 * nrows + 0.8),
        squeeze=False,
        layout="constrained",
    )
    cmap = plt.get_cmap("viridis").with_extremes(bad=MASKED_COLOUR)
    image = None
    for head, ax in enumerate(axes.flat):
        if head >= heads:
            ax.set_axis_off()
            continue
        shown = np.ma.masked_array(
            weights[head], mask=hidden[head] if hidden is not None else False
        )  # (S, N)
        image = ax.imshow(
            shown, cmap=cmap, vmin=0.0, vmax=1.0, interpolation="nearest", aspect="auto"
        )
        _label(ax, rows, cols, head, trace.tokens)
        if max(rows, cols) <= NUMBERS_MAX_CELLS:
            _numbers(ax, weights[head], hidden[head] if hidden is not None else None)
    fig.colorbar(
        image,
        ax=axes,
        shrink=0.8,
        label="attention weight" + ("  (grey: masked)" if hidden is not None else ""),
    )
    where = f", batch item {batch_item}" if trace.config.batched else ""
    fig.suptitle(f"attention weights per head{where}: S={rows}, N={cols}", fontsize=13)
    from attntrace.files.output import write_output

    try:
        write_output(
            path,
            lambda f: fig.savefig(
                f, format=path.suffix.lower()[1:], dpi=150, metadata=_metadata(path)
            ),
        )
    finally:
        plt.close(fig)
    return heads


#: Up to this many queries and keys, every cell of a panel holds its number.
NUMBERS_MAX_CELLS = 16


def _label(ax: Any, rows: int, cols: int, head: int, tokens: tuple[str, ...] | None = None) -> None:
    """The panel's title and axes: q0, q1 … down, k0, k1 … across (every one up to 16), or
    the prompt's ``tokens`` (--prompt)."""
    ax.set_title(f"head {head}", fontsize=12)
    ax.set_xlabel("keys", fontsize=11)
    ax.set_ylabel("queries", fontsize=11)
    if max(rows, cols) <= NUMBERS_MAX_CELLS:
        named = list(tokens) if tokens is not None and len(tokens) == rows == cols else None
        ax.set_xticks(range(cols), named or [f"k{j}" for j in range(cols)])
        ax.set_yticks(range(rows), named or [f"q{i}" for i in range(rows)])
    ax.tick_params(labelsize=10)


def _numbers(ax: Any, matrix: Any, hidden: Any) -> None:
    """Each cell's weight written on it, dark on the light cells of viridis, light on dark."""
    rows, cols = matrix.shape
    for i in range(rows):
        for j in range(cols):
            if hidden is not None and hidden[i, j]:
                continue
            value = float(matrix[i, j])
            ink = "black" if value > 0.55 else "white"
            ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=9, color=ink)


def _metadata(path: Path) -> dict[str, Any]:
    """Reproducible files: no creation date (svg and pdf write one unless told not to)."""
    suffix = path.suffix.lower()
    if suffix == ".svg":
        return {"Date": None}
    if suffix == ".pdf":
        return {"CreationDate": None}
    return {}
