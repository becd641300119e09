"""``AttentionConfig(scale=...)`` takes the words of ``--scale`` as the CLI does, and the report
writes the default scale as the factor it is (issue 31)."""

from __future__ import annotations

import pytest

from attntrace import AttentionConfig, trace_attention
from attntrace.errors import ConfigError
from attntrace.render.report import render_report


@pytest.mark.parametrize(
    ("word", "scale", "factor"),
    [("none", 1.0, 1.0), ("None", 1.0, 1.0), ("sqrt", None, 0.5), (" SQRT ", None, 0.5)],
)
def test_the_words_of_scale_work_in_the_api(word: str, scale: float | None, factor: float) -> None:
    config = AttentionConfig(seq=3, hidden=8, heads=2, scale=word)  # type: ignore[arg-type]
    assert config.scale == scale
    assert config.score_scale == factor
    assert config == AttentionConfig(seq=3, hidden=8, heads=2, scale=scale)


def test_an_unknown_word_is_refused_naming_the_choices() -> None:
    with pytest.raises(ConfigError, match="--scale must be sqrt, none or a positive number"):
        AttentionConfig(scale="half")  # type: ignore[arg-type]


def test_the_report_writes_the_default_scale_as_one_over_root_d() -> None:
    page = render_report(trace_attention(AttentionConfig(seq=3, hidden=8, heads=2), "shape"))
    assert "<td>scale</td><td>1/√d = 0.5</td>" in page  # d = 4
    unscaled = AttentionConfig(seq=3, hidden=8, heads=2, scale=1.0)
    page = render_report(trace_attention(unscaled, "shape"))
    assert "<td>scale</td><td>1 (unscaled)</td>" in page
