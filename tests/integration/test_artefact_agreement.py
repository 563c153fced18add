"""Every artefact of a run gives ``Translator``'s translation with the defaults on
(``benchmarks.artefact_agreement``, run on the tiny SentencePiece run's export and its
CTranslate2 export): the SavedModel's signatures, the TFLite text and builtin files and
CTranslate2, each called as documented with no options.
"""
import os

import pytest

from tests.support import run_fixtures
from benchmarks import artefact_agreement
from keras_attn.decoding.options import CONTROL_DEFAULTS
from keras_attn.translator import Translator

# Texts of several sentences and one-sentence ones, repeated words, and one-token sources
# ("a", "Who", "It"): the tiny model answers those with a whole sentence, longer than the
# 3 tokens that max_length_factor's default allows them, so the controls cut their
# translations (on AVX-512 and on AVX2 kernels alike); an artefact without the controls
# would not.
TEXTS = ["Hello! How are you?", "I'm hungry. It's raining.\n\nCall me tomorrow.",
         "  Tom isn't here.  We are in Paris.", "Thank you thank you thank you thank you.",
         "Hello! Hello! Hello! Hello!", "Tom Tom Tom Tom Tom.", "Paris", "Go ahead!",
         "Where is the station?", "I'm cold. I'm cold. I'm cold.", "a", "Who", "It"]
FLOAT32 = ("saved_model/serving_default", "saved_model/translate", "saved_model/translate_v2",
           "saved_model/translate_v3",  # (its passthrough off, as every artefact's here)
           "tflite/text_float32", "tflite/builtin_float32", "ctranslate2/float32")
INT8 = ("tflite/text_int8", "tflite/builtin_int8", "ctranslate2/int8")


@pytest.mark.slow  # the tiny SentencePiece run (conftest), a CTranslate2 export, every artefact
@pytest.mark.kernels
def test_every_float32_artefact_gives_the_translators_text(tiny_sentencepiece, tmp_path):
    pytest.importorskip("ctranslate2", reason="CTranslate2 is not installed")
    from keras_attn.export.ctranslate2 import export_ctranslate2

    run_dir = tiny_sentencepiece["run_dir"]
    translator = Translator.from_run_dir(run_dir)
    assert translator.controls == CONTROL_DEFAULTS["subword"]  # the premise: controls on
    off = CONTROL_DEFAULTS["character"]  # every control off
    # The controls change some of these outputs: an artefact without them would differ.
    assert translator.translate(TEXTS) != translator.translate(TEXTS, **off)
    ct2_dir = str(tmp_path / "ctranslate2")
    for q in ("float32", "int8"):
        export_ctranslate2(run_dir, ct2_dir + ("" if q == "float32" else "_int8"),
                           quantization=q, log=lambda *a: None)
    report = artefact_agreement.measure(run_dir, TEXTS, ct2_dir=ct2_dir, batch_size=4,
                                        log=lambda *a: None)
    assert report["inputs"] == len(TEXTS)
    assert report["inputs_several_sentences"] == 5
    artefacts = report["artefacts"]
    assert set(artefacts) == {*FLOAT32, *INT8}
    for name in FLOAT32:
        assert artefacts[name]["identical"] == len(TEXTS), (name, artefacts[name])
    for name in INT8:  # their share is reported, not checked
        assert artefacts[name]["inputs"] == len(TEXTS), (name, artefacts[name])


@pytest.mark.heavy  # decodes the tiny dates run's reference
def test_a_missing_artefact_is_skipped_with_its_reason(tmp_path):
    """The committed tiny dates run, no export: every artefact skipped, saying what is
    missing; the reference still computed."""
    run_dir = str(tmp_path / "run")
    inputs = run_fixtures.copy_tiny_dates_run(run_dir)[:2]
    report = artefact_agreement.measure(run_dir, inputs, log=lambda *a: None)
    artefacts = report["artefacts"]
    assert all(set(entry) == {"skipped"} for entry in artefacts.values()), artefacts
    assert artefacts["saved_model/translate"]["skipped"].startswith("no SavedModel at ")
    assert artefacts["tflite/text_float32"]["skipped"] == (
        f"no {os.path.join(run_dir, 'export', 'tflite', 'text_float32.tflite')}")
    assert "builtin_int8" in artefacts["tflite/builtin_int8"]["skipped"]
    assert artefacts["ctranslate2/int8"]["skipped"].startswith(
        ("ctranslate2 is not installed", "no CTranslate2 model at "))
