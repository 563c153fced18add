"""The TFLite builtin target runs the processors every loop runs (keras_attn.decoding.processors):
its step takes the tokens so far and says when the output ends, so its files give the tokens
of Translator with the default options on; files exported before that still run; and the
export fails when an artefact decodes otherwise (keras_attn.export.all_targets.check_agreement).
"""
import os
import types

import numpy as np
import pytest

from tests.support import FIXTURES, run_fixtures
from keras_attn import export
from keras_attn.decoding.options import CONTROL_DEFAULTS
from keras_attn.translator import Translator

# The committed tiny dates run's builtin int8 files as exported before the step took the
# tokens so far (no `history`, `length_limit` or `finished`): an app's files of that time.
BEFORE_HISTORY = os.path.join(FIXTURES, "builtin_before_history")
# Repeated words, the training sentences, and one-token sources ("a", "Who", "It"): the
# tiny SentencePiece model answers those with a whole sentence, longer than the 3 tokens
# that max_length_factor's default allows them, so the controls change their outputs on
# any CPU's kernels.
REPEATING = ["Thank you thank you thank you thank you.", "Hello! Hello! Hello! Hello!",
             "I'm cold. I'm cold. I'm cold.", "Where where where is the station?",
             "Tom Tom Tom Tom Tom.", "Paris", "a", "Who", "It"] + [
                 en for en, _ in run_fixtures.PAIRS]


def _rows(tokens):
    return [[t for t in row if t] for row in np.asarray(tokens).tolist()]


@pytest.mark.kernels
@pytest.mark.heavy  # older TFLite files decoded
def test_files_exported_before_the_step_state_still_run():
    """The runtime reads which inputs the step file has: the older file gets no tokens so
    far and ends at [END] (a character run: its controls are off, so the same decoding)."""
    translator = Translator.from_run_dir(run_fixtures.TINY_DATES_RUN)
    assert translator.controls == CONTROL_DEFAULTS["character"]
    sources = translator.encode(run_fixtures.tiny_dates_inputs()[:40]).numpy()
    out = export.run_tflite_builtin(BEFORE_HISTORY, sources)
    assert set(out) == {"tokens", "lengths", "log_prob", "confidence"}
    expected = _rows(translator.translate_ids(sources))
    same = np.mean([a == b for a, b in zip(_rows(out["tokens"]), expected)])
    # int8 weights: the share test_exported allows the int8 files beside float32 ones.
    assert same >= 0.95, same


@pytest.mark.slow  # the tiny SentencePiece run, trained and exported for the session
@pytest.mark.kernels
def test_builtin_files_decode_as_translator_with_the_controls_on(tiny_sentencepiece):
    run_dir = tiny_sentencepiece["run_dir"]
    translator = Translator.from_run_dir(run_dir)
    assert translator.controls == CONTROL_DEFAULTS["subword"]  # the premise: controls on
    sources = translator.encode(REPEATING).numpy()
    expected = _rows(translator.translate_ids(sources))
    off = translator.options(repetition_penalty=1.0, no_repeat_ngram_size=0,
                             max_length_factor=0.0)
    without = _rows(translator.decode_ids(sources, off)["tokens"][:, 0])
    assert expected != without  # the controls change these outputs: the check can fail
    folder = os.path.join(run_dir, "export", "tflite", "builtin_{}")
    float32 = export.run_tflite_builtin(folder.format("float32"), sources)
    assert _rows(float32["tokens"]) == expected
    int8 = _rows(export.run_tflite_builtin(folder.format("int8"), sources)["tokens"])
    share = np.mean([a == b for a, b in zip(int8, expected)])
    print(f"builtin_int8: {share:.0%} of {len(expected)} outputs equal Translator's")
    assert len(int8) == len(expected)


def _exporter(target, quantization):
    return types.SimpleNamespace(key=f"{target}_{quantization}", target=target,
                                 quantization=quantization,
                                 agreement_on="translation" if target == "text" else "ids")


def test_check_agreement_fails_a_float32_file_that_differs():
    exporters = [_exporter(t, q) for t in ("text", "builtin") for q in ("float32", "int8")]
    share = {"text_float32": 1.0, "text_int8": 0.9, "builtin_float32": 0.9,
             "builtin_int8": 0.8}
    verdicts = export.check_agreement({"agreement_with_saved_model": share}, exporters, False)
    assert verdicts["text_float32"] == "passed"
    assert verdicts["text_int8"].startswith("passed: ")  # the quantisation's, twin agrees
    assert verdicts["builtin_float32"].startswith("FAILED")
    assert verdicts["builtin_int8"].startswith("unchecked")  # its twin failed
    # An int8 file alone cannot tell its quantisation from a defect: reported, unchecked.
    alone = export.check_agreement({"agreement_with_saved_model": {"builtin_int8": 0.5}},
                                   [_exporter("builtin", "int8")], False)
    assert alone["builtin_int8"].startswith("unchecked")
    # A text file of a model that expects normalised input got the raw text.
    raw = export.check_agreement({"agreement_with_saved_model": {"text_float32": 0.5}},
                                 [_exporter("text", "float32")], True)
    assert raw["text_float32"].startswith("unchecked")


@pytest.mark.slow  # a whole export of the tiny dates run
def test_export_fails_when_a_float32_file_differs(monkeypatch, tmp_path):
    """export_run writes its report, then raises naming the artefact."""
    from keras_attn.export import all_targets

    def differing(translator, saved, report, exporters, sources):
        share = {e.key: 0.5 for e in exporters}
        return {"sources": list(sources), "translations": {},
                "agreement_with_saved_model": share,
                "agreement_measured_on": {k: "ids" for k in share}}

    monkeypatch.setattr(all_targets, "compare_samples", differing)
    run_dir = str(tmp_path / "run")
    run_fixtures.copy_tiny_dates_run(run_dir)
    with pytest.raises(all_targets.ExportCheckError, match="builtin_float32 FAILED"):
        export.export_run(run_dir, quantizations=("float32",), request_signature=False,
                          log=lambda *a: None)
    assert os.path.exists(os.path.join(run_dir, "export", "export_report.json"))
