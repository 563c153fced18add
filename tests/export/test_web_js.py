"""The web export's JavaScript (keras_attn/export/webapp/), its pure parts run by node: the
third runtime of the rules that Python and the SavedModel's graph run.

The spans' cut and put-back give the fixture file's answers (tests/fixtures/spans_fixtures.json,
the file the Python and graph tests load); the sentence split gives
keras_attn.text.documents.split's sentences and separators; the tokenizers give
keras_attn.text's ids and texts (the character vocabulary of the committed dates run, and
SentencePiece models trained here with each normalisation, against the sentencepiece
library and the in-graph tokenizer). Skipped where node is not installed.
"""
import base64
import json
import os
import shutil
import subprocess

import pytest

from keras_attn.text import documents, python_tokenizers
from keras_attn.text.rules import rules_data
from tests.text.test_passthrough import fixture_cases

from tests.support import ROOT
RUNNER = os.path.join(ROOT, "tests", "support", "run_rules.mjs")
GOLDEN = os.path.join(ROOT, "tests", "fixtures", "golden_rules_en.json")
DATES_RUN = os.path.join(ROOT, "exported", "run")
MESSY = ["", "   ", "Hello   world  ", "\ufb01ne \u216b \uff21\uff22\uff23 caf\u00e9",
         "\u00a0x\u2003y", "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8", "a\u0301",
         "\U0001f642\U0001f44d\U0001f3fd", "x" * 300, "Tom's \"quote\" \u2014 dash\u2026",
         "\t\nnew\nline", "Mr. Smith arrived at 10:30. He left!\n\nThe end.",
         "I live in the U.S. How about you?", "1. Open it 2. Take it", "e.g. this. Or that",
         "\ufdd2 internal \ufdd0 marks \ufddf", "Wait... what?! Yes.", "(See p. 5.) Then go."]


def node(request):
    """The JavaScript's answers to ``request`` (tests/support/run_rules.mjs)."""
    if shutil.which("node") is None:
        pytest.skip("node is not installed (Debian: apt-get install nodejs)")
    path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"web-js-{os.getpid()}.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(request, f)
    try:
        out = subprocess.run(["node", RUNNER, path], capture_output=True, text=True,
                             timeout=120)
    finally:
        os.unlink(path)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_the_spans_fixture_file_passes_in_javascript():
    cases = fixture_cases()
    out = node({"rules": rules_data(), "cut": [c["source"] for c in cases],
                "put_back": [{k: c[k] for k in ("source", "translation", "alignment")}
                             for c in cases]})
    for case, cut, (placed, aligned) in zip(cases, out["cut"], out["put_back"]):
        assert cut == case["cut"], case["source"]
        assert {"translation": placed, "alignment": aligned} == case["put_back"], case["source"]


def test_the_sentence_split_is_pythons():
    with open(GOLDEN, encoding="utf-8") as f:
        golden = [case["text"] for case in json.load(f)["cases"]]
    texts = golden + MESSY
    out = node({"rules": rules_data(), "split": texts})
    for text, got in zip(texts, out["split"]):
        want = documents.split(text)
        assert (got["sentences"], got["separators"]) == (want.sentences, want.separators), text


def check_tokenizer(kind, file, path, texts, end=(3,)):
    """The JavaScript tokenizer of ``kind`` on the file ``path`` gives the Python one's ids
    for ``texts``, its texts for their rows (``end`` appended) and the words of
    ``keras_attn.text.word_alignment``; returns the ids."""
    from keras_attn.text import word_alignment

    tok = python_tokenizers.load(path)
    ids = tok.tokenize(texts)
    rows = [row + list(end) for row in ids]
    with open(path, "rb") as f:
        files = {file: base64.b64encode(f.read()).decode()}
    out = node({"tokenizer": {"kind": kind, "files": files, "encode": texts, "decode": rows,
                              "words": rows}})
    assert out["encode"] == ids
    assert out["decode"] == tok.detokenize(rows)
    flags = word_alignment.word_flags(tok.vocab, kind)
    assert out["words"] == [word_alignment.word_positions(r, flags) for r in rows]
    return ids


def test_the_character_tokenizer_is_pythons():
    texts = ["3 March 2021", "le 4 juillet 1999", "", "MARCH 3", "\u00e9t\u00e9 \U0001f642"]
    # Decoding stops at [END]; the unknown character makes the whole text [UNK].
    ids = check_tokenizer("characters", "vocab", os.path.join(DATES_RUN, "src_vocab.txt"),
                          texts, end=(3, 0, 5))
    assert ids[-1] == [1]


# A source model's normalisations (keras_attn.training.recipes: nmt_nfkc_cf). With
# "identity" the graph's tokenizer reads a tab as a space where the library (and the
# JavaScript) reads an unknown character: no source model is trained so.
@pytest.mark.parametrize("normalization", ["nmt_nfkc_cf", "nmt_nfkc"])
def test_the_sentencepiece_tokenizer_is_the_librarys_and_the_graphs(normalization, tmp_path):
    """A unigram model trained here: the JavaScript's normaliser (the model's character
    map) and Viterbi segmentation against the sentencepiece library and the graph's
    FastSentencepieceTokenizer, on text the model never saw (unknown characters too)."""
    import tensorflow as tf

    from keras_attn.text import subword
    from tests.support.run_fixtures import PAIRS

    english = [en for en, _ in PAIRS] * 3
    proto = subword.learn_sentencepiece(english, vocab_size=60, normalization=normalization)
    path = str(tmp_path / "src.model")
    subword.save_model(proto, path)
    texts = english[: len(PAIRS)] + MESSY + [e.upper() + "  ,,, !!" for e in english[:20]]
    ids = check_tokenizer("sentencepiece", "model", path, texts)
    in_graph = subword.SentencePieceTokenizer(proto)
    assert ids == in_graph.tokenize(tf.constant(texts)).to_list()  # the graph's too
