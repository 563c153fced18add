"""One multi-sentence n-best request through every engine and runtime on the committed
export (``exported/``): Translator, the SavedModel engine (what ``keras-attn serve``
runs), the SavedModel's own signature (its graph splits and joins), the TFLite text
file's client (``run_tflite_options``) and the CTranslate2 engine answer with the same
fields, meaning the same thing: a document's hypothesis ``j`` is hypothesis ``j`` of each
of its sentences, joined with the text's whitespace, its score their sum, its confidence
their lowest, its alignment theirs joined by ``" | "`` (each numbering its sentence's
words from 0), truncated if any was (keras_attn.translation.pipeline.join_documents).

The reference is built here by hand from each sentence translated alone."""
import math
import os

import numpy as np
import pytest

from keras_attn.text import documents
from keras_attn.translation import pipeline

from tests.support import ROOT
EXPORTED = os.path.join(ROOT, "exported")
SAVED = os.path.join(EXPORTED, "saved_model", "translator", "1")
TFLITE = os.path.join(EXPORTED, "tflite", "text_float32.tflite")
# Two sentences (". L"), two paragraphs, one sentence, and a text of no sentence.
TEXTS = ["3 March 2021. Le 4 juillet 1999", "13 Jul 1914\n\n Wed, 3 Mar 2021 ", "25/12/1999",
         "  "]
OPTIONS = dict(beam_size=2, num_hypotheses=2, return_alignments=True)

# Every engine loads the committed export and decodes with beams (about 100 s on 2 cores):
# CI's slow pass runs the file; the README's pass checks the rule itself (test_one_rule_joins
# is pure Python, and test_translation.py runs the pipeline on its engines).
pytestmark = [pytest.mark.skipif(not os.path.isdir(SAVED),
                                 reason="exported/ (the committed default model) is missing"),
              pytest.mark.slow]


@pytest.fixture(scope="module")
def translator():
    from keras_attn.translator import Translator

    return Translator.from_run_dir(os.path.join(EXPORTED, "run"))


@pytest.fixture(scope="module")
def reference(translator):
    """Per text, N hypotheses joined by hand from each sentence translated alone."""
    out = []
    for text in TEXTS:
        sentences, separators = documents.split(text)
        alone = [translator.translate_nbest([s], **OPTIONS)[0] for s in sentences]
        hyps = []
        for j in range(OPTIONS["num_hypotheses"]):
            parts = [a[j] for a in alone]
            hyps.append({
                "translation": documents.join([p["translation"] for p in parts], separators),
                "score": sum(p["score"] for p in parts),
                "confidence": min([p["confidence"] for p in parts], default=1.0),
                "alignment": " | ".join(p["alignment"] for p in parts),
                "truncated": any(p["truncated"] for p in parts),
                "sentences": len(parts)})
        out.append(hyps)
    return out


def _check(answer, reference, fields, exact=True):
    """``answer``: per text its hypotheses (the engines' dicts)."""
    assert len(answer) == len(reference)
    for text, hyps, ref in zip(TEXTS, answer, reference):
        assert len(hyps) == len(ref), text
        for j, (hyp, want) in enumerate(zip(hyps, ref)):
            if not exact and j > 0:
                break  # CTranslate2's lower ranks: test_nbest_difference_is_documented
            # "sentences" unless the text is one sentence (pipeline.one_sentence).
            names = set(fields) | ({"sentences"} if want["sentences"] != 1 else set())
            if want["sentences"] == 0:
                names -= {"alignment"}  # nothing to align
            assert set(hyp) == names, (text, hyp)
            assert hyp["translation"] == want["translation"], (text, j)
            assert math.isclose(hyp["score"], want["score"], abs_tol=1e-4), (text, j)
            assert hyp["truncated"] == want["truncated"]
            if "confidence" in fields:
                assert math.isclose(hyp["confidence"], want["confidence"], abs_tol=1e-4)
            if "alignment" in names:
                assert hyp["alignment"] == want["alignment"], (text, j)
            if want["sentences"] > 1:
                assert [s["source"] for s in hyp["sentences"]] == documents.split(text)[0]
                if "alignment" in fields:
                    assert " | ".join(s["alignment"] for s in hyp["sentences"]) == \
                        hyp["alignment"]


FIELDS = {"translation", "score", "confidence", "alignment", "truncated"}


def test_the_reference_splits_as_intended(reference):
    assert [hyps[0]["sentences"] for hyps in reference] == [2, 2, 1, 0]


def test_translator(translator, reference):
    _check(translator.translate_nbest(TEXTS, **OPTIONS), reference, FIELDS)


def test_savedmodel_engine_and_its_graph(reference):
    from keras_attn.decoding.options import DecodingOptions
    from keras_attn.serve.engines import SavedModelEngine

    engine = SavedModelEngine(SAVED)
    answer = engine.translate(TEXTS, DecodingOptions(**OPTIONS))
    _check(answer, reference, FIELDS)
    # The graph's own split and join (the signature on whole texts) means the same.
    import tensorflow as tf

    from keras_attn.export.runtime import option_inputs

    model = tf.saved_model.load(SAVED)
    out = model.signatures["translate_v2"](
        text=tf.constant(TEXTS), **option_inputs(DecodingOptions(**OPTIONS)))
    _check_arrays(out, reference)


def _check_arrays(out, reference):
    """A signature's (or the TFLite client's) arrays against the reference."""
    out = {k: np.asarray(v) for k, v in out.items()}
    for b, ref in enumerate(reference):
        assert bool(out["truncated"][b]) == ref[0]["truncated"]
        for j, want in enumerate(ref):
            assert out["translations"][b, j].decode() == want["translation"]
            assert math.isclose(out["scores"][b, j], want["score"], abs_tol=1e-4)
            assert math.isclose(out["confidences"][b, j], want["confidence"], abs_tol=1e-4)
            assert out["alignments"][b, j].decode() == want["alignment"]


def test_tflite_client(reference):
    pytest.importorskip("ai_edge_litert")
    from keras_attn.export.runtime import run_tflite_options

    _check_arrays(run_tflite_options(TFLITE, TEXTS, **OPTIONS), reference)


@pytest.fixture(scope="module")
def ct2_path(translator, tmp_path_factory):
    pytest.importorskip("ctranslate2")
    from keras_attn.export.ctranslate2 import CTranslate2Exporter

    path = str(tmp_path_factory.mktemp("ct2") / "ct2")
    CTranslate2Exporter().export(translator, path, samples=["3 March 2021"])
    return path


def test_ctranslate2_engine(ct2_path, reference):
    """The same fields but ``alignment`` (refused: not a capability of the engine); the
    best hypotheses equal, its lower ranks its own search's."""
    from keras_attn.decoding.options import DecodingOptions
    from keras_attn.serve.engines import CTranslate2Engine

    engine = CTranslate2Engine(ct2_path, threads=1)
    options = DecodingOptions(**dict(OPTIONS, return_alignments=False))
    _check(engine.translate(TEXTS, options), reference, FIELDS - {"alignment"}, exact=False)


def test_nbest_difference_is_documented(translator, ct2_path):
    """docs/ctranslate2.md, "n-best lists": CTranslate2 searches by the raw sum of
    log-probabilities (it is asked for ``length_penalty=0`` and its hypotheses are
    reranked with the GNMT penalty after), ours by the GNMT-normalised score: on
    "13 Jul 1914", beam 2, its second hypothesis is the empty translation (a raw sum
    better than the longer one's), ours a longer one that the GNMT ranking prefers. Both
    score each hypothesis alike (the same hypothesis, the same score)."""
    from keras_attn.export.ctranslate2_runtime import CTranslate2Translator

    ct2 = CTranslate2Translator(ct2_path, intra_threads=1)
    options = dict(beam_size=2, num_hypotheses=2)
    ours = translator.translate_nbest(["13 Jul 1914"], **options)[0]
    theirs = ct2.translate_nbest(["13 Jul 1914"], **options)[0]
    assert ours[0]["translation"] == theirs[0]["translation"]
    assert theirs[1]["translation"] == "" != ours[1]["translation"]
    # Ours is the better second hypothesis by the ranking both report ...
    assert ours[1]["score"] > theirs[1]["score"]
    # ... and the worse by the raw sum CTranslate2's search ranks by.
    raw = {h: translator.score(["13 Jul 1914"], [h])[0]["log_prob"]
           for h in (ours[1]["translation"], "")}
    assert raw[""] > raw[ours[1]["translation"]]
    # The same hypothesis, the same score: the searches differ, not the scoring.
    assert math.isclose(translator.score(["13 Jul 1914"], [""])[0]["score"],
                        theirs[1]["score"], abs_tol=1e-4)


def test_one_rule_joins():
    """pipeline.split_and_join with a stand-in sentence translator."""
    docs = pipeline.split_and_join(["Hi. Bye", ""], lambda s: [[{
        "translation": x.lower(), "score": -1.0, "confidence": 0.5 + k / 4,
        "alignment": f"{k}-0", "truncated": k == 1}] for k, x in enumerate(s)])
    assert docs[0][0]["translation"] == "hi. bye" and docs[0][0]["score"] == -2.0
    assert docs[0][0]["confidence"] == 0.5 and docs[0][0]["alignment"] == "0-0 | 1-0"
    assert docs[0][0]["truncated"] and [s["source"] for s in docs[0][0]["sentences"]] == \
        ["Hi.", "Bye"]
    assert docs[1][0] == {"translation": "", "score": 0.0, "confidence": 1.0,
                          "truncated": False, "sentences": []}
