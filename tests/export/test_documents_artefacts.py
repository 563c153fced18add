"""Documents in every artefact: text of several sentences and paragraphs is split
by keras_attn.text.documents, translated as one batch and joined with the input's whitespace, the
same in the Translator, the SavedModel's serving_default and translate signatures (split in
the graph), the TFLite text file (split by keras_attn.export.runtime) and CTranslate2.

The reference is the Translator on each sentence alone, joined by hand with the separators
that keras_attn.text.documents.split gives (tests/text/test_documents.py checks the split
itself)."""
import os

import numpy as np
import pytest
import tensorflow as tf

from keras_attn.text import documents
from keras_attn.export import runtime
from keras_attn.translator import Translator

from tests.support import ROOT
EXPORTED = os.path.join(ROOT, "exported")
TEXTS = ["3 March 2021. le 4 juillet 1999!\n\n  Wed, 3 Mar 2021",
         "2038-04-01", "", "   ", "5 nov. 2008\n13 Jul 1914\n"]


@pytest.fixture(scope="module")
def translator():
    return Translator.from_run_dir(os.path.join(EXPORTED, "run"))


def by_sentence(translator, texts, **options):
    """The reference: each sentence translated alone, joined with its text's whitespace."""
    out = []
    for t in texts:
        seg = documents.split(t)
        parts = [translator.translate_nbest([s], **options)[0][0]["translation"]
                 for s in seg.sentences]
        out.append(documents.join(parts, seg.separators))
    return out


def test_translator_joins_sentences_with_the_texts_whitespace(translator):
    expected = by_sentence(translator, TEXTS)
    assert translator.translate(TEXTS) == expected
    assert [h[0]["translation"] for h in translator.translate_nbest(TEXTS)] == expected
    assert expected[0].count("\n\n  ") == 1 and expected[2:4] == ["", "   "]
    nbest = translator.translate_nbest(TEXTS[:1], beam_size=2, num_hypotheses=2)[0]
    n = len(documents.split(TEXTS[0]).sentences)
    assert n >= 2 and [len(h["sentences"]) for h in nbest] == [n, n]
    for h in nbest:  # a text's score is its sentences' summed
        np.testing.assert_allclose(h["score"], sum(s["score"] for s in h["sentences"]),
                                   rtol=1e-6)


def test_a_sentence_longer_than_the_model_reads_is_reported_or_cut(translator):
    """By default, as every artefact: read in part and flagged per sentence; with
    split_long, cut at clause boundaries and each piece translated."""
    long = "3 March 2021, 4 May 1999, 5 June 2000; 6 July 2001 and 7 August 2002"
    assert translator.source_lengths([long])[0] > translator.max_len - 1
    (hyp,) = translator.translate_nbest([long])[0]
    assert hyp["truncated"] is True and "cut" not in hyp
    (doc,) = translator.translate_nbest(["3 March 2021. " + long])[0]
    assert [s["truncated"] for s in doc["sentences"]] == [False, True] and doc["truncated"]
    translator.split_long = True
    try:
        (hyp,) = translator.translate_nbest([long])[0]
    finally:
        translator.split_long = False
    assert hyp["cut"] is True and hyp["truncated"] is False
    pieces = translator.cut_long([long])[0]
    assert pieces.cut and all(translator.source_lengths([p])[0] <= translator.max_len - 1
                              for p in pieces.pieces)
    parts = [translator.translate([p])[0] for p in pieces.pieces]
    assert hyp["translation"] == documents.join(parts, pieces.separators)


def test_tflite_text_file_splits_in_the_runtime(translator):
    path = os.path.join(EXPORTED, "tflite", "text_float32.tflite")
    out = runtime.run_tflite_text(path, TEXTS + [b"\xff\xfe 3 May \xc3"])  # bad UTF-8 too
    assert out["translation"].shape == (len(TEXTS) + 1,)
    out = {k: v[:len(TEXTS)] for k, v in out.items()}
    assert [t.decode("utf-8") for t in out["translation"]] == translator.translate(TEXTS)
    assert out["score"].shape == (len(TEXTS),) and out["score"][2] == 0.0
    single = runtime.run_tflite_text(path, ["3 March 2021"], split=False)
    assert single["translation"][0].decode() == translator.translate(["3 March 2021"])[0]


@pytest.mark.slow  # exports a SavedModel (~40 s)
def test_saved_model_splits_in_the_graph(translator, tmp_path):
    from keras_attn import export

    export.export_saved_model(translator, str(tmp_path))
    loaded = tf.saved_model.load(str(tmp_path / "translator" / "1"))
    out = loaded.signatures["serving_default"](text=tf.constant(TEXTS))
    assert [t.decode("utf-8") for t in out["translation"].numpy()] == translator.translate(TEXTS)
    assert not out["truncated"].numpy().any()
    options = runtime.option_inputs(translator.options(beam_size=2, num_hypotheses=2))
    out = loaded.signatures["translate_v2"](text=tf.constant(TEXTS),
                                            **{k: tf.constant(v) for k, v in options.items()})
    ours = translator.translate_nbest(TEXTS, beam_size=2, num_hypotheses=2)
    got = out["translations"].numpy()
    for b, hyps in enumerate(ours):
        assert [got[b, j].decode("utf-8") for j in range(2)] == [h["translation"] for h in hyps]
        np.testing.assert_allclose(out["scores"].numpy()[b], [h["score"] for h in hyps],
                                   atol=1e-4)


@pytest.mark.slow  # exports a CTranslate2 model
def test_ctranslate2_translator_splits_alike(translator, tmp_path):
    pytest.importorskip("ctranslate2")
    from keras_attn.export import ctranslate2 as ct2_export
    from keras_attn.export.ctranslate2_runtime import CTranslate2Translator

    ct2_export.export_ctranslate2(os.path.join(EXPORTED, "run"), str(tmp_path / "ct2"))
    ct2 = CTranslate2Translator(str(tmp_path / "ct2"))
    assert ct2.translate(TEXTS) == translator.translate(TEXTS)
