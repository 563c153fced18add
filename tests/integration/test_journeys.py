"""The guide pages' journeys: each page's commands run in order in one fresh folder, as a
reader types them (``tests/support/doc_examples.py`` runs each block).
tests/integration/test_docs.py runs the blocks that take seconds; the blocks marked
``<!-- not run: ... -->`` because they train for an hour, download a corpus or hold a
terminal run here, with the few edits a journey lists: a tiny model and a few steps for an
hour's budget, the corpus made in the folder instead of downloaded, fewer sentences to
score. ``keras-attn serve`` starts in the background and the commands after it reach it.
Every edit must still find its text in the page, so a page cannot drift from what is run.

The corpus is the shared English-French one's first 1,703 English sentences in 3,000 pairs
when it is beside the checkout (a small domain corpus's shape), else pairs made up in that
shape. The journeys train and export for minutes: marked slow (``.ci/run --extended``).
"""
import contextlib
import dataclasses
import json
import os
import shlex
import zipfile

import pytest

from tests.support import doc_examples
from tests.support.servers import serve_process

from tests.support import ROOT
DOCS = os.path.join(ROOT, "docs")
CORPUS = os.path.join(ROOT, "..", "shared", "data", "fra-eng", "train.txt")
ATTRIBUTION = "CC-BY 2.0 (France) Attribution: tatoeba.org #1 (CM)"
# An hour's recipe made seconds: a tiny Transformer for a few steps.
TINY = ("--num-hiddens 32 --ffn-num-hiddens 64 --num-heads 2 --num-layers 1 --batch-size 16 "
        "--warmup 5 --max-len 24")
TINY_TATOEBA = f"--steps 30 {TINY} --vocab-size 200"
SECONDS = 300  # a command's hang guard on an idle machine (guards.timeout scales it)
SERVER = "localhost:5000"  # where the pages' curl commands reach keras-attn serve


def small_corpus(num_pairs=3000, num_sources=1703):
    """``num_pairs`` English-French pairs of ``num_sources`` distinct English sentences
    (every translation of each, then their first ones again)."""
    by_source = {}
    if os.path.exists(CORPUS):
        with open(CORPUS, encoding="utf-8") as f:
            for line in f:
                english, french = line.rstrip("\n").split("\t")[:2]
                if english not in by_source and len(by_source) == num_sources:
                    break
                by_source.setdefault(english, []).append(french)
    else:
        by_source = {f"Sentence number {i}.": [f"Phrase numéro {i} !", f"Phrase {i}."]
                     for i in range(num_sources)}
    pairs = [(en, fr) for en, frs in by_source.items() for fr in frs]
    firsts = [(en, frs[0]) for en, frs in by_source.items()]
    while len(pairs) < num_pairs:
        pairs += firsts[: num_pairs - len(pairs)]
    return pairs[:num_pairs]


def tatoeba_lines(pairs):
    return "".join(f"{en}\t{fr}\t{ATTRIBUTION}\n" for en, fr in pairs)


def write_fra_txt(folder):
    """manythings.org's ``fra.txt``, unzipped: English<TAB>French<TAB>attribution."""
    with open(os.path.join(folder, "fra.txt"), "w", encoding="utf-8") as f:
        f.write(tatoeba_lines(small_corpus()))


def write_d2l_zip(folder):
    """D2L's ``fra-eng.zip``: ``fra-eng/fra.txt`` and ``fra-eng/_about.txt``."""
    with zipfile.ZipFile(os.path.join(folder, "fra-eng.zip"), "w") as zf:
        zf.writestr("fra-eng/_about.txt", "about the corpus\n")
        zf.writestr("fra-eng/fra.txt", tatoeba_lines(small_corpus()))


@dataclasses.dataclass
class Journey:
    """Pages read in order in one folder.

    Args:
        pages: the pages, in reading order (file names under docs/).
        edits: ``(text, instead)`` pairs applied in order to each block run; each must
            match a block of the pages.
        setup: ``setup(folder)`` makes what the pages download.
        links: repository folders the pages read, linked into the folder (``exported``).
        skip: ``(text, why)``: a block holding ``text`` is not run.
    """

    pages: tuple
    edits: tuple = ()
    setup: object = None
    links: tuple = ()
    skip: tuple = ()


JOURNEYS = {
    # The main job trained tiny without its export, which the export page then makes.
    "main_job-export": Journey(
        pages=("main_job.md", "export.md"), links=("exported",),
        edits=(("keras-attn train\n", "keras-attn train --num-train 600 --num-valid 20 "
                "--num-test 20 --epochs 1 --no-export " + TINY + "\n"),
               ("keras-attn evaluate exported/run --split test",
                "keras-attn evaluate exported/run --split test --limit 40"))),
    "english_french": Journey(
        pages=("english_french.md",), setup=write_d2l_zip,
        edits=(("curl -sO http://d2l-data.s3-accelerate.amazonaws.com/fra-eng.zip",
                "test -s fra-eng.zip"),
               ("--time-budget 60m", TINY_TATOEBA + " --no-export"),
               ("--batch-size 128 --epochs 12", TINY_TATOEBA + " --no-export"),
               ("--split test", "--split test --limit 20"))),
    # Both directions from a TSV, served after: a budget of two minutes, whose export is
    # what its time left allows (the SavedModel the server reads, at least); from two
    # aligned files, not served: a few steps.
    "train_your_pair": Journey(
        pages=("train_your_pair.md",), setup=write_fra_txt, links=("exported",),
        skip=(("--source-lang french",
               "an error, exit code 2: tests/integration/test_train_your_pair.py"),),
        edits=(("curl -sLO https://www.manythings.org/anki/fra-eng.zip && unzip -o "
                "fra-eng.zip fra.txt", "test -s fra.txt"),
               ("--time-budget 60m --output runs/fr-en-aligned",
                TINY_TATOEBA + " --no-export --output runs/fr-en-aligned"),
               ("--time-budget 60m", f"--time-budget 2m {TINY} --vocab-size 200"))),
}


def run_journey(journey, folder):
    """Run ``journey``'s pages in ``folder``; returns what each command printed, by its
    first line."""
    for name in journey.links:
        os.symlink(os.path.join(ROOT, name), os.path.join(folder, name))
    if journey.setup:
        journey.setup(folder)
    used, printed, previous = set(), {}, None
    with contextlib.ExitStack() as servers:
        server = None
        for page in journey.pages:
            for block in doc_examples.examples([os.path.join(DOCS, page)]):
                if any(text in block.text for text, _ in journey.skip):
                    continue
                text = block.text
                for old, new in journey.edits:
                    if old in text:
                        text = text.replace(old, new)
                        used.add(old)
                block = dataclasses.replace(block, text=text, not_run=None)
                if block.lang == "python":
                    doc_examples.run_block(block, previous, cwd=folder, seconds=SECONDS)
                    previous = block
                    continue
                for command, expected in doc_examples.commands(block.text):
                    argv = shlex.split(command, comments=True)
                    if argv[:2] == ["keras-attn", "serve"]:  # holds a terminal: background
                        servers.close()
                        url, _ = servers.enter_context(serve_process(
                            argv[2:], os.path.join(folder, "serve.log"), cwd=folder,
                            seconds=120))
                        server = url.split("//")[1]
                        continue
                    if SERVER in command:
                        assert server, f"{block.id}: {command!r} needs the server before it"
                        command = command.replace(SERVER, server)
                    output = doc_examples.run_shell(command, folder, SECONDS)
                    doc_examples.check_output(expected, output, f"{block.id}: {command}")
                    printed[command.splitlines()[0]] = output
    unused = [old for old, _ in journey.edits if old not in used]
    assert not unused, f"these edits no longer match the pages {journey.pages}: {unused}"
    return printed


@pytest.fixture
def reader_home(tmp_path, monkeypatch):
    """A reader's fresh folder, and a home of its own (the corpus cache of a download)."""
    folder = tmp_path / "reader"
    folder.mkdir()
    monkeypatch.setenv("HOME", str(folder))
    return str(folder)


@pytest.mark.slow  # trains and exports tiny runs, serves them (minutes each)
@pytest.mark.parametrize("name", sorted(set(JOURNEYS) - {"english_french"}))
def test_the_pages_journey_runs_as_written(name, reader_home):
    """(The English-French page's journey runs in the test of evaluate below.)"""
    run_journey(JOURNEYS[name], reader_home)


@pytest.mark.slow  # the English-French page's journey, then evaluate from elsewhere
def test_evaluate_reads_the_runs_corpus_from_another_folder(reader_home, tmp_path):
    """The English-French page's run evaluated from another folder gives what it gave in
    the folder it was trained in (the corpus path is absolute in its config.json); a run
    of an earlier version, whose config.json holds the path as typed, is found from a
    folder beside it, and from a folder unrelated to it the message says to pass --data."""
    printed = run_journey(JOURNEYS["english_french"], reader_home)
    here = json.loads(printed["keras-attn evaluate runs/fra60 --split test --limit 20"])
    run = os.path.join(reader_home, "runs", "fra60")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    there = json.loads(doc_examples.run_shell(
        f"keras-attn evaluate {run} --split test --limit 20", str(elsewhere), SECONDS))
    assert {k: there[k] for k in ("num_sentences", "bleu", "chrf")} == {
        k: here[k] for k in ("num_sentences", "bleu", "chrf")}
    with open(os.path.join(run, "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    assert config["data"] == os.path.join(reader_home, "fra-eng")
    config["data"] = "fra-eng"  # as an earlier version stored it
    with open(os.path.join(run, "config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f)
    os.mkdir(os.path.join(reader_home, "runs", "other"))
    beside = json.loads(doc_examples.run_shell(
        "keras-attn evaluate ../fra60 --split test --limit 20",
        os.path.join(reader_home, "runs", "other"), SECONDS))
    assert beside["num_sentences"] == here["num_sentences"] and beside["bleu"] == here["bleu"]
    moved = str(tmp_path / "moved")
    os.rename(run, moved)
    with pytest.raises(AssertionError, match="pass --data with the corpus's path"):
        doc_examples.run_shell(f"keras-attn evaluate {moved} --limit 5", str(elsewhere),
                               SECONDS)
    again = json.loads(doc_examples.run_shell(
        f"keras-attn evaluate {moved} --split test --limit 20 --data "
        f"{os.path.join(reader_home, 'fra-eng')}", str(elsewhere), SECONDS))
    assert again["bleu"] == here["bleu"]


@pytest.mark.slow  # trains a tiny run on a small corpus end to end (a minute)
def test_a_small_domain_corpus_trains_end_to_end(tmp_path):
    """3,000 pairs of 1,703 distinct English sentences: trained, evaluated, calibrated (it
    failed before on an empty training split: everything held out)."""
    with open(tmp_path / "small.txt", "w", encoding="utf-8") as f:
        f.write(tatoeba_lines(small_corpus()))
    output = doc_examples.run_shell(
        f"keras-attn train --task tatoeba --data small.txt --output runs/small --no-export "
        f"{TINY_TATOEBA}", str(tmp_path), SECONDS)
    assert "held out 170 of 1703 source sentences" in output
    assert "data: " in output and " 0 train" not in output
    with open(tmp_path / "runs" / "small" / "metrics.json", encoding="utf-8") as f:
        metrics = json.load(f)
    assert metrics["calibration"]["num_valid"] == 170
    assert metrics["num_sentences"] > 0
