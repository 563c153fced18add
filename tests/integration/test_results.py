"""docs/results.md holds every published figure once, and the pages state figures only as
links to its rows.

A row of results.md is a table line whose first cell opens with ``<a id="ROW-ID"></a>``; a
page states a figure as a link to a row, ``[51.13 BLEU](results.md#recipe-60m-xeon)``
(``docs/results.md#...`` from the README), whose text's numbers all stand in that row.
Outside such links a page states no measurement: no number followed by BLEU, chrF, %, ms,
MB, GB, a rate (requests/s, sentences/s, tokens/s, GFLOP/s), a ratio (``2.6x``) or seconds
with a decimal (``183.8 s``), and no AUROC or ECE value (limits are written in MiB,
so they are not read as measurements). Code blocks, inline code and HTML
comments are not read (examples' inputs and outputs); the few figures that are settings or
arithmetic, not measurements, are listed in :data:`ALLOWED` with the reason, each of which
must still be on its page.
"""
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
RESULTS = DOCS / "results.md"
README = ROOT / "README.md"
# The README and every page of the site.
PAGES = [README] + sorted(p for p in DOCS.rglob("*.md") if p != RESULTS)

ROW = re.compile(r'^\|\s*<a id="([a-z0-9-]+)"></a>')
LINK = re.compile(r"\[([^\[\]]*)\]\(([^)\s#]*results\.md)#([^)\s]*)\)")
NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")
UNIT = r"BLEU|chrF|%|ms\b|MB\b|GB\b|GFLOP/s|(?:requests|req|sentences|tokens)/s"
FIGURE = re.compile(rf"(?<![\w.,/-])\d[\d,]*(?:\.\d+)?\s?(?:{UNIT})"
                    r"|(?<![\w.,/-])\d[\d,]*(?:\.\d+)?x\b"  # a ratio, 2.6x ("1 x 2" is not)
                    r"|(?<![\w.,/-])\d[\d,]*\.\d+\s?(?:s|seconds)\b"
                    r"|\b(?:AUROC|ECE)\s?(?:of\s)?\d")

# Figures that are settings, tolerances, inputs, other projects' sizes or arithmetic, not
# measurements of this package: (page, text, why). A bound written with ≥ or ≤ is never read
# as a figure.
ALLOWED = [
    ("docs/training.md", "10 % of the training time", "the schedule's warm-up share, a setting"),
    ("docs/train_your_pair.md", "at most 10 % of the corpus's", "the held-out share, a setting"),
    ("docs/train_your_pair.md", "keeps 80 % of them", "what that setting leaves"),
    ("docs/export.md", "0.75^10 = 5.6 %, one in three with 1.7 %",
     "the chance ten samples miss a fault, arithmetic"),
    # The committed files' sizes, checked against exported/ by tests/integration/test_docs.py.
    ("docs/export.md", "| 11.52 MB |", "a committed file's size, tested"),
    ("docs/export.md", "| 5.46 MB / 3.47 MB |", "committed files' sizes, tested"),
    ("docs/export.md", "| 2.96 MB / 0.96 MB |", "committed files' sizes, tested"),
    ("docs/budget.md", "ends within 5 % of it", "the goal tests/training/test_budget.py holds"),
    ("docs/budget.md", "at least 5 % and at most 25 % of the budget", "the reserve's bounds"),
    ("docs/budget.md", "first 10 % of the training", "the schedule's warm-up share, a setting"),
    ("docs/benchmarks.md", "the goal: within 5 % of it", "the soak's goal"),
    ("docs/distributed.md", "within 1% of it", "the test's tolerance"),
    ("docs/bad_input.md", "within 15 %", "the test's tolerance"),
    ("docs/serving.md", "sends 5 MB and 2 MB bodies", "a test's inputs"),
    ("docs/web.md", "(9 MB more)", "LiteRT.js's compat build: a dependency's size"),
    ("docs/web.md", "bundles 4 MB of", "an npm package's size"),
]
BOUND = re.compile(r"[≥≤]\s?\d[\d,]*(?:\.\d+)?")


def _rows(text):
    """``{row id: the row's line}`` of results.md's tables."""
    rows = {}
    for line in text.splitlines():
        m = ROW.match(line)
        if m:
            assert m.group(1) not in rows, f"results.md: row id {m.group(1)!r} twice"
            rows[m.group(1)] = line
    return rows


def _numbers(text):
    return {n.replace(",", "") for n in NUMBER.findall(text)}


def _prose(text):
    """The text a reader reads as prose: fenced blocks, HTML comments and inline code out."""
    def blank(m):  # keeps the lines where they were
        return "\n" * m.group(0).count("\n") or " "

    text = re.sub(r"<!--.*?-->", blank, text, flags=re.S)
    text = re.sub(r"^\s*```.*?^\s*```[^\n]*$", blank, text, flags=re.S | re.M)
    return re.sub(r"`(?:[^`\n]|\n(?!\n))*`", blank, text)  # inline code, over a line break too


def problems(text, page, rows, allowed=()):
    """What is wrong with the page ``page`` (its path from the repository root, its
    ``text``) against results.md's ``rows``: a link to a row that does not exist or does
    not hold the link's numbers, a figure stated outside a link, an allowance no longer
    on the page."""
    found = []
    prose = _prose(text)
    for m in LINK.finditer(prose):
        label, target, anchor = m.groups()
        if (ROOT / page).parent.joinpath(target).resolve() != RESULTS:
            found.append(f"{page}: [{label}]: {target} is not docs/results.md")
        elif anchor not in rows:
            found.append(f"{page}: [{label}]: no row {anchor!r} in results.md")
        else:
            missing = sorted(_numbers(label) - _numbers(rows[anchor]))
            if missing:
                found.append(f"{page}: [{label}]: row {anchor!r} does not hold {missing}")
    prose = BOUND.sub(" ", LINK.sub(" ", prose))
    for where, phrase, _ in allowed:
        if where == page:
            if phrase not in prose:
                found.append(f"{page}: the allowance {phrase!r} is no longer on the page")
            prose = prose.replace(phrase, " ")
    for m in FIGURE.finditer(prose):
        line = prose[:m.start()].count("\n") + 1
        found.append(f"{page}:~{line}: {m.group(0)!r} stated outside a link to results.md")
    return found


# ----------------------------------------------------------------------------------------
# Tests


@pytest.fixture(scope="module")
def rows():
    return _rows(RESULTS.read_text(encoding="utf-8"))


def test_every_row_says_when_where_with_what_and_how(rows):
    """Six cells a row: what, the figure, the date, the machine, the commit, the command
    (``—`` where not measured yet, "not recorded" where unknown: never empty)."""
    assert len(rows) >= 30
    for row_id, line in rows.items():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        assert len(cells) == 6 and all(cells), (row_id, cells)
        date = cells[2]
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}|—|not recorded", date), (row_id, date)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_page_states_figures_only_as_links_to_results(page, rows):
    where = page.relative_to(ROOT).as_posix()
    assert problems(page.read_text(encoding="utf-8"), where, rows, ALLOWED) == []


def test_the_readme_links_the_main_jobs_whole_command(rows):
    labels = [m.group(3) for m in LINK.finditer(README.read_text(encoding="utf-8"))]
    assert "main-job" in labels and "main-job" in rows


SAMPLE_ROWS = {"recipe": '| <a id="recipe"></a>60 minutes | **51.13 BLEU**, 26,220 steps |'}


@pytest.mark.parametrize("text, wrong", [
    ("It scores 51.13 BLEU.", "'51.13 BLEU' stated outside"),
    ("It answers at 2.6x its rate.", "'2.6x' stated outside"),
    ("Training took 183.8 s.", "'183.8 s' stated outside"),
    ("an AUROC of 0.8 here", "'AUROC of 0' stated outside"),
    ("It scores [51.13 BLEU](results.md#elsewhere).", "no row 'elsewhere'"),
    ("It scores [51.12 BLEU](results.md#recipe).", "does not hold ['51.12']"),
    ("It scores [51.13 BLEU](other.md#recipe).", None),  # not a marker: the figure is bare
    ("It trains [26,220 steps](budget.md#x) for 51.13 BLEU.", "stated outside"),
], ids=["BLEU", "ratio", "seconds", "AUROC", "no such row", "not in the row",
        "another page", "beside a link"])
def test_a_figure_outside_a_marker_or_a_wrong_marker_is_found(text, wrong):
    found = problems(text, "docs/page.md", SAMPLE_ROWS)
    assert found and (wrong is None or wrong in found[0] or wrong in " ".join(found)), found


@pytest.mark.parametrize("text", [
    "It scores [51.13 BLEU](results.md#recipe) in [26,220 steps](results.md#recipe).",
    "```bash\nkeras-attn evaluate RUN   # 51.13 BLEU\n```\n",
    "The flag `--warmup 10%` and <!-- 12.5 % --> are not figures; 3 minutes, d 256.",
    "Batch 64, 2+2 layers, 4,000 pieces, port 5000, version 1.9, x = 3.",
], ids=["markers", "code block", "inline code and a comment", "plain numbers"])
def test_markers_code_and_plain_numbers_pass(text):
    assert problems(text, "docs/page.md", SAMPLE_ROWS) == []


def test_an_allowance_must_still_be_on_its_page():
    allowed = [("docs/page.md", "10 % of the time", "a setting")]
    assert problems("warm up over 10 % of the time", "docs/page.md", {}, allowed) == []
    assert "no longer on the page" in problems("warm up over a tenth", "docs/page.md", {},
                                               allowed)[0]


def test_a_link_from_the_readme_names_docs_results():
    assert problems("[51.13 BLEU](docs/results.md#recipe)", "README.md", SAMPLE_ROWS) == []
    assert "is not docs/results.md" in problems("[51.13 BLEU](results.md#recipe)",
                                                "README.md", SAMPLE_ROWS)[0]
