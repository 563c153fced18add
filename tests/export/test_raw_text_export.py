"""A SentencePiece run exported: raw text in and natural text out, the same on every target.

A small English->French Transformer (the session's ``tiny_sentencepiece`` run, conftest) is
trained on sentences written as users write them (capitals, punctuation attached, French spacing); its SavedModel and its TFLite
text file must give identical translations for those sentences and for messy inputs
(curly quotes, runs of spaces, tabs, capitals, accents, digits, an emoji, an empty string,
a 2,000-character string), with no Flex op and only tensorflow-text's custom ops.
"""
import os

import numpy as np
import pytest
import tensorflow as tf

from tests.support.run_fixtures import PAIRS

# The artefacts must agree token for token; the tiny SentencePiece run (trained and
# exported for the session, ~75 s) is built in CI's slow pass, not in the README's command.
pytestmark = [pytest.mark.kernels, pytest.mark.slow]

MESSY = [
    "WHERE IS THE STATION?", "It’s raining.", "“Hello,” she said.", "I   am\t\tfine.",
    "Café déjà vu.", "Call 555-0199 at 10:30.", "Thank you 😀", "", ("Thank you! " * 190)[:2000],
    ("thank you " * 200)[:2000],  # one sentence of 2,000 characters
]


@pytest.fixture(scope="module")
def run(tiny_sentencepiece):
    return tiny_sentencepiece["run_dir"]


def _saved_model(run_dir):
    import tensorflow_text  # noqa: F401  (registers the TF Text ops before loading)

    path = os.path.join(run_dir, "export", "saved_model", "translator", "1")
    return tf.saved_model.load(path).signatures["serving_default"]


def _tflite(run_dir, quantization="float32"):
    return os.path.join(run_dir, "export", "tflite", f"text_{quantization}.tflite")


def _strings(array):
    return [s.decode("utf-8") for s in np.asarray(array).tolist()]


def test_saved_model_and_tflite_text_agree_on_raw_sentences(run):
    from keras_attn.export import runtime

    from keras_attn.text import spans

    sources = [en for en, _ in PAIRS] + MESSY
    want = _strings(_saved_model(run)(text=tf.constant(sources))["translation"])
    got = _strings(runtime.run_tflite_text(_tflite(run), sources, passthrough=True)[
        "translation"])
    # serving_default places spans by its alignments, the TFLite runtime (the file gives
    # none) at their proportional place: the same words elsewhere, the spans kept by both.
    found = [spans.find(text) for text in sources]
    assert [g for g, f in zip(got, found) if not f] == [w for w, f in zip(want, found) if not f]
    for text, g, w, f in zip(sources, got, want, found):
        assert all(s.text in g and s.text in w for s in f), (text, g, w)
    assert sum(bool(f) for f in found) >= 3  # numbers, an emoji
    # Natural text, as the corpus writes it: no lower-casing, no space before , or . (the
    # corpus's sentences: a messy text keeps its own whitespace between its sentences).
    assert all(out == out.strip() for out in want[:len(PAIRS)])
    assert any(out[:1].isupper() for out in want)


def test_messy_inputs_are_answered(run):
    from keras_attn.export import runtime

    out = runtime.run_tflite_text(_tflite(run, "int8"), MESSY)
    assert len(out["translation"]) == len(MESSY)
    # 190 sentences are translated whole; one sentence of 2,000 characters is cut to max_len.
    assert out["truncated"].tolist()[-2:] == [False, True]
    assert np.isfinite(out["score"]).all()


def test_text_files_use_no_flex_and_only_tftext_custom_ops(run):
    from keras_attn import export

    for quantization in ("float32", "int8"):
        with open(_tflite(run, quantization), "rb") as f:
            ops = export.tflite_ops(f.read())
        assert not ops["flex"], ops
        assert set(ops["custom"]) == {"TFText>FastSentencepieceTokenize", "RaggedTensorToTensor",
                                      "TFText>FastWordpieceDetokenize",
                                      "TFText>ByteSplitWithOffsets"}, ops


def test_translator_and_saved_model_agree(run):
    from keras_attn.translator import Translator

    sources = [en for en, _ in PAIRS] + MESSY
    want = _strings(_saved_model(run)(text=tf.constant(sources))["translation"])
    # serving_default passes spans through in its graph ("10:30", "😀"), as the pipeline
    # does around the Translator (docs/real_text.md).
    assert Translator.from_run_dir(run).translate(sources, passthrough=True) == want


def test_export_report_measures_agreement_on_raw_text(run):
    import json

    with open(os.path.join(run, "export", "export_report.json"), encoding="utf-8") as f:
        report = json.load(f)
    assert not [w for w in report["warnings"] if "normalis" in w]
    text_float32 = report["samples"]["agreement_with_saved_model"]["text_float32"]
    assert text_float32 == 1.0
