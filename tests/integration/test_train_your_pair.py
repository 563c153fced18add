"""docs/train_your_pair.md's commands on a tiny slice: a Tatoeba-format file (the corpus's
first lines when ``../shared/data/fra-eng`` is there, else the tests' pairs), French ->
English and English -> French trained for a few steps by ``keras-attn train`` with the
page's flags, their SavedModels' metadata, then ``keras-attn serve`` with both runs answering
``/languages`` as the page shows and translating each direction.

The page's blocks run in order in tests/integration/test_journeys.py (with the model made
tiny); this checks what they write, closely.
"""
import json
import os
import subprocess
import sys

import httpx
import pytest

from tests.support import guards
from tests.support import run_fixtures
from tests.support.servers import serve_process

from tests.support import ROOT
PAGE = os.path.join(ROOT, "docs", "train_your_pair.md")
CORPUS = os.path.join(ROOT, "..", "shared", "data", "fra-eng", "train.txt")
ATTRIBUTION = "CC-BY 2.0 (France) Attribution: tatoeba.org #1 (CM)"
# The page's flags with the model made tiny (a few seconds of training per run).
TINY = ["--steps", "30", "--num-hiddens", "32", "--ffn-num-hiddens", "64", "--num-heads", "2",
        "--num-layers", "1", "--batch-size", "16", "--warmup", "5", "--max-len", "24",
        "--vocab-size", "120", "--num-valid", "8", "--num-test", "0"]


def keras_attn(*argv, cwd):
    return subprocess.run([sys.executable, "-m", "keras_attn.cli", *argv], cwd=cwd,
                          capture_output=True, text=True, timeout=guards.timeout(60))


def write_fra_txt(folder):
    """``fra.txt`` as manythings.org ships it: English<TAB>French<TAB>attribution."""
    if os.path.exists(CORPUS):
        with open(CORPUS, encoding="utf-8") as f:
            pairs = [line.rstrip("\n").split("\t")[:2] for _, line in zip(range(400), f)]
    else:
        pairs = run_fixtures.PAIRS * 8
    path = os.path.join(folder, "fra.txt")
    with open(path, "w", encoding="utf-8") as f:
        f.write("".join(f"{en}\t{fr}\t{ATTRIBUTION}\n" for en, fr in pairs))
    return path


def test_a_bad_code_is_refused_as_the_page_shows(tmp_path):
    proc = keras_attn("train", "--task", "tatoeba", "--source-lang", "french",
                      "--target-lang", "en", cwd=tmp_path)
    assert proc.returncode == 2
    shown = "`--source-lang` must be a BCP 47 language"
    assert shown in proc.stderr and shown in open(PAGE, encoding="utf-8").read()
    assert "Received: --source-lang='french'" in proc.stderr


@pytest.mark.slow  # trains two tiny runs, exports their SavedModels, serves both (minutes)
def test_the_pages_commands_on_a_tiny_slice(tmp_path):
    write_fra_txt(tmp_path)
    for source, target in (("fr", "en"), ("en", "fr")):
        run = f"runs/{source}-{target}"
        proc = keras_attn("train", "--task", "tatoeba", "--data", "fra.txt",
                          "--source-lang", source, "--target-lang", target,
                          "--output", run, "--no-export", *TINY, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr[-3000:]
        # The SavedModel alone: the TFLite files' metadata is checked in test_languages.
        proc = keras_attn("export", run, "--format", "saved_model", cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr[-3000:]
    # The run's config.json records the pair as the page's JSON shows.
    with open(tmp_path / "runs" / "fr-en" / "config.json", encoding="utf-8") as f:
        config = json.load(f)
    assert {k: config[k] for k in ("source_lang", "target_lang", "source_name", "target_name",
                                   "columns", "target_data")} == {
        "source_lang": "fr", "target_lang": "en", "source_name": "French",
        "target_name": "English", "columns": "en,fr", "target_data": ""}
    # The SavedModel names the pair (the page's table).
    export = tmp_path / "runs" / "fr-en" / "export"
    expected = {"source": {"code": "fr", "name": "French"},
                "target": {"code": "en", "name": "English"}}
    assets = export / "saved_model" / "translator" / "1" / "assets.extra" / "keras_attn.json"
    assert json.loads(assets.read_text()) == {"languages": expected}

    # keras-attn serve runs/en-fr runs/fr-en: one process, both directions.
    with serve_process(["runs/en-fr", "runs/fr-en"], tmp_path / "serve.log", cwd=tmp_path,
                       seconds=60) as (url, _):
        languages = httpx.get(f"{url}/languages").json()
        page = open(PAGE, encoding="utf-8").read()
        assert f"# {json.dumps(languages, ensure_ascii=False)}" in page, languages
        for source, target, text in (("fr", "en", "Je suis chez moi."),
                                     ("en", "fr", "I'm home.")):
            answer = httpx.post(f"{url}/translate", timeout=guards.timeout(30), json={
                "q": text, "source": source, "target": target})
            assert answer.status_code == 200, answer.text
            assert isinstance(answer.json()["translatedText"], str)
            assert "pivot" not in answer.json()
        refused = httpx.post(f"{url}/translate", json={"q": "Hallo", "source": "de",
                                                        "target": "en"})
        assert refused.status_code == 400
    log_text = (tmp_path / "serve.log").read_text()
    assert "loaded en->fr from runs/en-fr" in log_text, log_text
    assert "loaded fr->en from runs/fr-en" in log_text, log_text
