"""The documentation: the site builds with ``mkdocs build --strict``, every example of README.md
and docs/*.md runs as written (or says why it cannot run here), the API reference covers
every module of the package, and no page names what a reader cannot see.

A block is an example when its language is ``python``, ``bash``, ``sh``, ``shell`` or
``console``, or when it has no language and its first line is a command. An example that
cannot run here (a GPU, a server, minutes of training) carries ``<!-- not run: REASON -->``
on the line before its fence (``tests/support/doc_examples.py``). Python examples run
statement by statement with their comments checked (``tests/support/comment_checks.py``):
README.md's in the README pass (``tests/integration/test_readme.py``), the pages' here in
the slow pass; shell examples run with bash in the repository root, the comment lines after
a command checked against what it prints.
"""
import contextlib
import importlib.util
import io
import os
import pathlib
import re
import subprocess
import sys

import pytest

from tests.support import doc_examples
from tests.support import guards
from docs_tools import links
from tests.support.comment_checks import run_and_check

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
# The research log and raw measurements (research/, outside docs/) are not pages.
PAGES = [README] + sorted(DOCS.rglob("*.md"))
def _examples(pages=PAGES):
    """Every example block of ``pages``."""
    return doc_examples.examples(pages)


def _block_id(block):
    return f"{pathlib.Path(block.path).relative_to(ROOT)}:{block.line}"


EXAMPLES = _examples()
# README.md's python blocks run in the README pass (test_readme.py); the rest here.
TO_RUN = [b for b in EXAMPLES if b.not_run is None
          and not (b.path == str(README) and b.lang == "python")]


def test_the_pages_have_examples_that_run():
    assert len(TO_RUN) >= 10, [_block_id(b) for b in TO_RUN]


def test_every_example_runs_or_says_why_not():
    """An example is run by a test below, or marked with a reason; a command in a block
    without a language would be neither, so it must be labelled."""
    unlabelled = [_block_id(b) for b in EXAMPLES if b.lang == "" and b.not_run is None]
    assert not unlabelled, ("label these blocks ```bash (then they run) or mark them "
                            f"<!-- not run: REASON -->: {unlabelled}")
    no_reason = [_block_id(b) for b in EXAMPLES if b.not_run is not None
                 and len(b.not_run.strip()) < 8]
    assert not no_reason, f"say why these cannot run here: {no_reason}"


def test_a_command_without_a_language_counts_as_an_example(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("```\nkeras-attn translate exported/run x\n```\n\n```\na -> b\n```\n\n"
                    "<!-- not run: needs docker -->\n```bash\ndocker run x\n```\n")
    found = _examples([page])
    assert [(b.lang, b.not_run) for b in found] == [("", None), ("bash", "needs docker")]


@pytest.fixture(scope="module")
def rest_host():
    """TF Serving's REST API answered by the committed SavedModel (for pages whose commands
    send requests to ``localhost:8501``)."""
    stand_in = doc_examples.RestStandIn(str(ROOT / "exported" / "saved_model" / "translator"
                                            / "1"))
    with stand_in.serving() as host:
        yield host


def _needs_rest(block):
    return (doc_examples.SERVING_HOST in block.text or "serve_client.py" in block.text)


@pytest.mark.slow  # each loads the committed model or runs a keras-attn command (5-40 s)
@pytest.mark.parametrize("block", TO_RUN, ids=_block_id)
def test_page_example_runs_and_gives_what_it_shows(block, request, monkeypatch):
    monkeypatch.chdir(ROOT)  # the examples name paths from the repository root
    if block.lang == "python":
        namespace = {}
        if block.continues:  # the python block before it runs first, in the same namespace
            previous = [b for b in doc_examples.blocks(block.path)
                        if b.lang == "python" and b.line < block.line][-1]
            run_and_check(previous.text, _block_id(previous), namespace)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            run_and_check(block.text, _block_id(block), namespace)
        doc_examples.check_output(doc_examples.python_expected(block.text), out.getvalue(),
                                  _block_id(block))
        return
    host = request.getfixturevalue("rest_host") if _needs_rest(block) else None
    doc_examples.run_block(block, host=host, seconds=120)


def test_no_page_names_an_issue_a_session_or_a_path_outside_the_repository():
    """A reader sees the repository and the site: not the tracker's issue numbers, the
    sessions that wrote the code, or folders beside the checkout."""
    unseen = re.compile(r"\bissues? #?\d+|\bsessions?\b|\.\./shared|/work/|/tmp/wt",
                        re.IGNORECASE)
    found = [f"{page.relative_to(ROOT)}:{n}: {line.strip()[:80]}"
             for page in PAGES + [ROOT / "CHANGELOG.md"]
             for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1)
             if unseen.search(line)]
    assert not found, "\n".join(found)


def _modules():
    """Every public module of the package, by its dotted name."""
    names = set()
    for path in (ROOT / "keras_attn").rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if parts[-1] == "__main__" or any(p.startswith("_") for p in parts):
            continue
        names.add(".".join(parts))
    return names


def test_the_api_reference_renders_every_module_of_the_package():
    """mkdocstrings renders each module named in a ``::: module`` line of docs/reference/
    with every public member; a module missing there is missing from the reference."""
    rendered = {m.group(1) for page in (DOCS / "reference").glob("*.md")
                for m in re.finditer(r"^::: ([\w.]+)", page.read_text(encoding="utf-8"), re.M)}
    assert "keras_attn.layers.multi_head_attention" in _modules()
    assert sorted(_modules() - rendered) == [], "add them to a page of docs/reference/"
    assert sorted(rendered - _modules()) == [], "these modules do not exist"


def test_the_export_page_gives_the_committed_sizes():
    """docs/export.md's sizes are the committed export's, to the figure shown (MB of 10**6
    bytes, rounded as written)."""
    exported = ROOT / "exported"

    def size(path):
        path = exported / path
        files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
        return sum(p.stat().st_size for p in files) / 1e6

    text = (DOCS / "export.md").read_text(encoding="utf-8")
    rows = {"saved_model/translator/<version>/": ["saved_model/translator/1"],
            "tflite/text_float32.tflite": ["tflite/text_float32.tflite",
                                           "tflite/text_int8.tflite"],
            "tflite/builtin_float32/": ["tflite/builtin_float32", "tflite/builtin_int8"]}
    for artefact, paths in rows.items():
        row = next(line for line in text.splitlines() if line.startswith(f"| `{artefact}`"))
        shown = re.findall(r"(\d+(?:\.\d+)?) MB", row)
        assert len(shown) == len(paths), row
        for figure, path in zip(shown, paths):
            decimals = len(figure.partition(".")[2])
            assert round(size(path), decimals) == float(figure), (
                f"docs/export.md says {figure} MB for {path}; it is {size(path):.3f} MB")


def _docs_tools_missing():
    return [name for name in ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers")
            if importlib.util.find_spec(name) is None]


def test_the_link_check_finds_a_missing_page_and_a_missing_anchor(tmp_path):
    """docs_tools/links.py on a small site: a link to a page left out and one to an anchor
    the page lacks are reported; good links, external ones and escaped HTML are not."""
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "index.html").write_text(
        '<h2 id="here">x</h2><a href="../b/">b</a><a href="../b/#there">b</a>'
        '<a href="../b/#nowhere">b</a><a href="../gone/">gone</a><a href="#here">me</a>'
        '<a href="https://example.org/x.html">out</a><code>&lt;a href="x.html"&gt;</code>'
        '<img src="../pic.png">', encoding="utf-8")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "index.html").write_text('<p id="there">y</p>', encoding="utf-8")
    (tmp_path / "pic.png").write_bytes(b"")
    assert links.broken_links(tmp_path) == [
        ("a/index.html", "../b/#nowhere", "no id 'nowhere' on that page"),
        ("a/index.html", "../gone/", "no such file in the site")]


@pytest.mark.slow  # builds the whole site with the API reference (about 10 s)
def test_the_site_builds_strictly(tmp_path):
    """``mkdocs build --strict``: no broken link or anchor, no page left out of the
    navigation, no reference mkdocstrings cannot resolve, no docstring it cannot read."""
    missing = _docs_tools_missing()
    if missing:
        message = (f"the docs extra is not installed ({', '.join(missing)} missing): "
                   "pip install -e '.[docs]'")
        if os.environ.get("KERAS_ATTN_REQUIRE_DOCS") == "1":
            pytest.fail(message)
        pytest.skip(message)
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                           str(tmp_path / "site")], cwd=ROOT, capture_output=True, text=True,
                          env=dict(os.environ, NO_MKDOCS_2_WARNING="1"),
                          timeout=guards.timeout(300))
    assert proc.returncode == 0, proc.stderr[-6000:]
    # Links --strict does not see: to a file left out of the site, written as HTML, or to
    # an anchor of a rendered reference page.
    broken = links.broken_links(tmp_path / "site")
    assert not broken, "\n".join(f"{page}: {link}: {why}" for page, link, why in broken)
    home = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    assert "Getting started" in home
    reference = (tmp_path / "site" / "reference" / "layers" / "index.html").read_text("utf-8")
    assert "MultiHeadAttention" in reference and "num_heads" in reference


def test_the_english_french_page_makes_the_fra_eng_folder_from_d2ls_zip(tmp_path, monkeypatch):
    """docs/english_french.md's snippet, run on a zip of the form of D2L's (``fra-eng/fra.txt``
    and ``_about.txt``): it writes the folder ``--data fra-eng`` takes, whose ``dev.txt`` is
    the test split ``keras-attn train`` makes of the zip itself, and ``train.txt`` the rest."""
    import zipfile

    from keras_attn.data import tatoeba_splits

    (snippet,) = [b for b in doc_examples.blocks(str(DOCS / "english_french.md"))
                  if b.lang == "python" and 'tatoeba_splits("fra-eng.zip")' in b.text]
    # 4,500 English sentences (450 validation, 450 test: 10 % each of a corpus this small;
    # the rest training), a third of them with two translations, attribution fields as
    # D2L's file has them.
    lines = [f"Sentence {i}.\tPhrase {i} {k} !\tCC-BY 2.0 (France) Attribution: tatoeba.org"
             for i in range(4500) for k in range(1 + (i % 3 == 0))]
    with zipfile.ZipFile(tmp_path / "fra-eng.zip", "w") as zf:
        zf.writestr("fra-eng/_about.txt", "about the corpus\n")
        zf.writestr("fra-eng/fra.txt", "\n".join(lines) + "\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))  # the zip is extracted under ~/.cache/keras_attn
    exec(compile(snippet.text, _block_id(snippet), "exec"), {})

    def pairs(name):
        text = (tmp_path / "fra-eng" / name).read_text(encoding="utf-8")
        return [tuple(line.split("\t")) for line in text.splitlines()]

    train, dev = pairs("train.txt"), pairs("dev.txt")
    assert len({en for en, _ in dev}) == 450
    assert not {en for en, _ in dev} & {en for en, _ in train}
    assert sorted(train + dev) == sorted(tuple(line.split("\t")[:2]) for line in lines)
    from_zip, _ = tatoeba_splits(str(tmp_path / "fra-eng.zip"), log=lambda *a: None)
    assert sorted(dev) == sorted(from_zip["test"])
    # The folder as --data takes it: dev.txt is the test split, all references kept.
    folder, refs = tatoeba_splits(str(tmp_path / "fra-eng"), log=lambda *a: None)
    assert len(folder["test"]) == 450 and sum(map(len, refs)) == len(dev)
    assert not {en for en, _ in folder["valid"]} & {en for en, _ in dev}
