"""``--format csv``: a header and one row per step.

Shapes are written with ``x`` between the sizes (``12x3x3``; a 0-d tensor is empty), axes
with a space between the letters (``h S S``), ``view`` as ``true``/``false``. The last two
``flops`` and ``formula`` are the cost: ``flops`` (summed over every tile of a flash step) and
its ``formula`` in axis letters (one tile's); with ``count="macs"`` they are ``macs`` and the
halved formula (1 MAC = 2 FLOPs). ``nonfinite`` counts the step's NaN and ±inf values (0 when
values were not computed).
"""

from __future__ import annotations

import csv
import io

from attntrace.trace import Records
from attntrace.units import exact_count, format_shape_x, format_terms

#: The CSV header, in order (a contract for scripts; new columns are only ever appended).
CSV_COLUMNS = (
    "index",
    "name",
    "op",
    "shape",
    "axes",
    "dtype",
    "bytes",
    "view",
    "flops",
    "formula",
    "nonfinite",
)

#: Appended with --backward: the pass of each step and whether the forward keeps it for the
#: backward.
BACKWARD_COLUMNS = ("pass", "saved")


def render_csv(trace: Records, count: str = "flops") -> str:
    """The steps of ``trace`` as CSV text with a header row (``\\n`` line endings).

    >>> from attntrace import AttentionConfig, trace_attention
    >>> lines = render_csv(trace_attention(AttentionConfig(), "shape")).splitlines()
    >>> lines[0]
    'index,name,op,shape,axes,dtype,bytes,view,flops,formula,nonfinite'
    >>> lines[12]
    '11,scores,q @ k_t,12x3x3,h S S,float32,432,false,13824,2·h·S·S·d,0'
    >>> render_csv(trace_attention(AttentionConfig(), "shape"), "macs").splitlines()[12]
    '11,scores,q @ k_t,12x3x3,h S S,float32,432,false,6912,h·S·S·d,0'
    """
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    backward = getattr(trace, "training", None) is not None  # --backward: two more columns
    writer.writerow(
        (*CSV_COLUMNS[:-3], count, *CSV_COLUMNS[-2:], *BACKWARD_COLUMNS[: backward * 2])
    )
    for s in trace.steps:
        extra = [s.phase, "true" if s.saved else "false"] if backward else []
        view = "true" if s.view else "false"
        cost = exact_count(s.flops, count), format_terms(s.terms, count)
        shape = format_shape_x(s.shape)
        writer.writerow(
            [
                s.index,
                s.name,
                s.op,
                shape,
                " ".join(s.axes),
                s.dtype,
                s.nbytes,
                view,
                *cost,
                s.nonfinite,
                *extra,
            ]
        )
    return out.getvalue()
