"""Every example of the README and the site runs and prints what its page says (doc_examples
says how a page writes one); a page edited by hand, or a program that changed, fails here."""

from __future__ import annotations

from pathlib import Path

import doc_examples as ex
import pytest

from conftest import torch_is_missing
from paths import REPO

# every example of the pages, each a fresh process: .ci/run runs them after the README's command
pytestmark = [pytest.mark.slow, pytest.mark.e2e]

EXAMPLES = ex.all_examples()


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the examples run: the repository's examples and test data are there (linked), and
    the files a command writes stay out of the checkout."""
    here = tmp_path_factory.mktemp("docs")
    for name in ("examples", "tests", "docs"):
        (here / name).symlink_to(REPO / name)
    return here


def runnable(example: ex.Example) -> bool:
    return not (torch_is_missing() and ex.needs_torch(example))


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.id for e in EXAMPLES])
def test_example_prints_what_the_page_says(
    example: ex.Example, workdir: Path, request: pytest.FixtureRequest
) -> None:
    if not runnable(example):
        pytest.skip(f"{example.id} needs torch, which is not installed")
    code, actual = ex.run(example, workdir)  # one example per test: xdist spreads them
    if (code, ex.matches(example.output, actual)) == (example.exit_code, True):
        return
    if request.config.getoption("--update-golden"):
        ex.update(example, actual, code)
        return
    shown = "\n".join(actual)
    pytest.fail(
        f"{example.id}: `{example.command}` exits {code} (page: {example.exit_code}) and "
        f"prints:\n{shown}\n(if intended: pytest tests/docs --update-golden)"
    )


def test_no_example_pipes_into_a_shell() -> None:
    """The examples run without a shell: a `|` would reach attntrace as an argument and the page
    would record its error (```bash blocks are for pipelines; they are not run)."""
    piped = [f"{e.id}: {e.command}" for e in EXAMPLES if {"|", ">", "&&"} & set(e.argv)]
    assert piped == []


def test_the_pages_have_examples() -> None:
    pages = {e.page for e in EXAMPLES}
    assert REPO / "README.md" in pages
    assert len(EXAMPLES) >= 10


# --- the test of the test ----------------------------------------------------------------------

PAGE = """\
Some text.

```console
$ attntrace run --seq 2 --hidden 8 --heads 2 --backend shape -f csv
index,name,op,shape,axes,dtype,bytes,view,flops,formula,nonfinite
0,x,x,2x8,S H,float32,64,false,0,0,0
…
17,output,merged @ w_o.T + b_o,2x8,S H,float32,64,false,272,2·S·H·H + S·H,0
$ attntrace run --heads 7
attntrace: error: --hidden 768 is not divisible by --heads 7; valid head counts for hidden 768: …
[exit 2]
```
"""


ERROR_LINE = PAGE.splitlines(keepends=True)[-3]


@pytest.fixture
def page(tmp_path: Path) -> Path:
    path = tmp_path / "page.md"
    path.write_text(PAGE, encoding="utf-8")
    return path


def verdicts(page: Path, text: str, workdir: Path) -> list[bool]:
    found = ex.examples(page, text)
    assert [e.line for e in found] == [4, 9]
    return [
        (code, ex.matches(e.output, out)) == (e.exit_code, True)
        for e in found
        for code, out in [ex.run(e, workdir)]
    ]


def test_a_page_as_the_program_prints_it_passes(page: Path, workdir: Path) -> None:
    assert verdicts(page, PAGE, workdir) == [True, True]


@pytest.mark.parametrize(
    ("edit", "verdict"),
    [
        (("2x8,S H", "2x9,S H"), [False, True]),  # a shape edited by hand
        (("valid head counts", "valid counts"), [True, False]),
        (("[exit 2]", "[exit 1]"), [True, False]),  # the exit code
        ((ERROR_LINE, ""), [True, False]),  # a line dropped
        (("17,output", "16,output"), [False, True]),  # a line after the …
        (("--seq 2 --hidden", "--seq 3 --hidden"), [False, True]),  # the command
    ],
)
def test_a_page_edited_by_hand_fails(
    page: Path, workdir: Path, edit: tuple[str, str], verdict: list[bool]
) -> None:
    assert edit[0] in PAGE
    assert verdicts(page, PAGE.replace(*edit, 1), workdir) == verdict


def test_widths_are_normalised_but_words_are_not() -> None:
    assert ex.matches(["a  b   (3, 768)", "───"], ["a b (3, 768)", "─────────────"])
    assert not ex.matches(["a b (3, 768)"], ["a b (3, 769)"])
    assert ex.matches(["budget … GiB (50%)"], ["budget 11.54 GiB (50%)"])
    assert not ex.matches(["budget … GiB (50%)"], ["budget 11.54 MiB (50%)"])
    assert ex.matches(["x", "…", "z"], ["x", "y1", "y2", "z"])
    assert not ex.matches(["x", "…", "z"], ["x", "y1", "y2"])
    # rounding noise of verify and diff (depends on the BLAS), not a real difference
    assert ex.matches(["q (2, 5) 4.8e-07 0.00e+00 ✓"], ["q (2, 5) 5.1e-07 1.20e-17 ✓"])
    assert not ex.matches(["q (2, 5) 4.8e-07 ✓"], ["q (2, 5) 2.3e+00 ✓"])
    assert not ex.matches(["q (2, 5) 4.8e-07 ✓"], ["q (2, 5) 4.8e-04 ✓"])


def test_update_writes_the_real_output_under_the_command(page: Path, workdir: Path) -> None:
    edited = PAGE.replace("2x8,S H", "2x9,S H", 1)
    page.write_text(edited, encoding="utf-8")
    example = ex.examples(page)[0]
    code, actual = ex.run(example, workdir)
    ex.update(example, actual, code)
    assert ex.examples(page)[0].output == tuple(actual)
    assert page.read_text(encoding="utf-8").count("```") == 2  # the block and the rest kept
    after, before = ex.examples(page)[1], ex.examples(page, PAGE)[1]
    assert (after.command, after.expected) == (before.command, before.expected)
