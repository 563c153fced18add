"""Decoding options per request (API.md, "Decoding options per request"): the Translator,
the SavedModel's ``translate`` signature and the TFLite text file's ``translate``
signature give the same n-best lists, scores and alignments for every option, on the
committed dates model (``exported/``) and on a small English->French SentencePiece run;
bad options answer clearly everywhere and the artefact goes on answering."""
import os

import numpy as np
import pytest
import tensorflow as tf

from tests.support import layer_checks as lc
from keras_attn import export
from keras_attn.decoding import DecodingOptions
from keras_attn.export import contract, runtime
from keras_attn.translator import Translator

# The tests of equal tokens hang on the kernels' rounding (marked kernels: CI runs them
# again under other CPUs' kernels); the bad options' answers do not.

from tests.support import ROOT
EXPORTED = os.path.join(ROOT, "exported")
# No empty text here: the SavedModel splits texts (an empty one has no sentence and
# translates to "") while the TFLite file translates sentences; test_empty_text has it.
DATES = ["3 March 2021", "le 4 juillet 1999", "Wed, 3 Mar 2021", "25/12/1999", "1 Jan 1900"]
ENGLISH = ["Thank you!", "I'm hungry.", "Who is it?", "Call me tomorrow.", "It's raining.",
           "I'm cold and hungry."]

# Every option, alone and together; the prefix is given per model.
# Every artefact traces its decoders again per option set (7-9 s each): four sets, which
# between them use every option, run in the README pass; the others in CI's slow pass.
_slow = pytest.mark.slow
OPTIONS = [
    {},
    pytest.param(dict(beam_size=4, num_hypotheses=3), marks=_slow),
    pytest.param(dict(beam_size=3, num_hypotheses=3, length_penalty=1.5), marks=_slow),
    pytest.param(dict(max_length=5), marks=_slow),
    pytest.param(dict(target_prefix="PREFIX"), marks=_slow),
    pytest.param(dict(beam_size=3, num_hypotheses=2, target_prefix="PREFIX"), marks=_slow),
    dict(sampling_topk=5, sampling_temperature=1.5, beam_size=2, num_hypotheses=2, seed=7),
    pytest.param(dict(sampling_topk=40, sampling_topp=0.8, seed=3), marks=_slow),
    pytest.param(dict(return_alignments=True), marks=_slow),
    dict(beam_size=2, num_hypotheses=2, return_alignments=True, target_prefix="PREFIX",
         length_penalty=1.5, max_length=9),
    # The repetition controls on, whatever the model's defaults (off for the dates model).
    dict(repetition_penalty=1.5, no_repeat_ngram_size=2, max_length_factor=0.8),
    pytest.param(dict(beam_size=3, num_hypotheses=2, repetition_penalty=1.3,
                      no_repeat_ngram_size=3), marks=_slow),
]
BAD = [
    (dict(beam_size=0), "beam_size"),
    (dict(beam_size=9), "beam_size"),  # above the export's maximum (8)
    (dict(beam_size=2, num_hypotheses=3), "num_hypotheses"),
    (dict(sampling_topp=0.0), "sampling_topp"),
    (dict(sampling_topp=1.5), "sampling_topp"),
    (dict(sampling_temperature=-1.0), "sampling_temperature"),
    (dict(sampling_topk=0), "sampling_topk"),
    (dict(max_length=1000), "max_length"),
    (dict(max_length=2, target_prefix="PREFIX"), "target_prefix"),
]


def _options(options, prefix):
    return {k: (prefix if v == "PREFIX" else v) for k, v in options.items()}


def saved_model_translate(signature, texts, **options):
    inputs = runtime.option_inputs(DecodingOptions.from_kwargs(**options))
    out = signature(text=tf.constant(texts, tf.string),
                    **{k: tf.constant(v) for k, v in inputs.items()})
    return {k: v.numpy() for k, v in out.items()}


def as_lists(out):
    """``{"translations", "scores", "confidences", "alignments"}`` arrays -> per-sentence
    hypotheses."""
    return [[{"translation": t.decode("utf-8"), "score": float(s), "confidence": float(c),
              "alignment": a.decode()} for t, s, c, a in zip(*row)]
            for row in zip(out["translations"], out["scores"], out["confidences"],
                           out["alignments"])]


def check_equal(expected, got, what, confidence_tolerance=None):
    assert len(got) == len(expected), what
    for row, (e, g) in enumerate(zip(expected, got)):
        assert [h["translation"] for h in g] == [h["translation"] for h in e], (what, row)
        np.testing.assert_allclose([h["score"] for h in g], [h["score"] for h in e],
                                   rtol=1e-4, atol=1e-4, err_msg=f"{what} {row}")
        assert [h["alignment"] for h in g] == [h.get("alignment", "") for h in e], (what, row)
        if confidence_tolerance is not None:  # the log-probabilities agree within 1e-4
            np.testing.assert_allclose([h["confidence"] for h in g],
                                       [h["confidence"] for h in e],
                                       atol=confidence_tolerance, err_msg=f"{what} {row}")


# The committed dates files need no build; the tiny SentencePiece run is trained and
# exported for the session (~75 s), so its half runs in CI's slow pass.
@pytest.fixture(scope="module",
                params=["dates", pytest.param("sentencepiece", marks=pytest.mark.slow)])
def artefacts(request):
    """``(Translator, SavedModel signature, TFLite runner, sentences, prefix)``."""
    if request.param == "dates":
        run_dir, export_dir = os.path.join(EXPORTED, "run"), EXPORTED
        sentences, prefix = DATES, "19"
    else:
        run_dir = request.getfixturevalue("tiny_sentencepiece")["run_dir"]
        export_dir, sentences, prefix = os.path.join(run_dir, "export"), ENGLISH, "Je"
    translator = Translator.from_run_dir(run_dir)
    loaded = tf.saved_model.load(os.path.join(export_dir, "saved_model", "translator", "1"))
    interpreter = runtime.text_interpreter(
        model_path=os.path.join(export_dir, "tflite", "text_float32.tflite"))
    runner = interpreter.get_signature_runner(runtime.TFLITE_OPTIONS_SIGNATURE)
    runner.tflite_path = os.path.join(export_dir, "tflite", "text_float32.tflite")
    return (translator, loaded.signatures[contract.LATEST_OPTIONS_SIGNATURE], runner, sentences,
            prefix, loaded)


def interpreter_path(artefacts):
    """The TFLite text file of the fixture's runner."""
    return artefacts[2].tflite_path


@pytest.mark.kernels
@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: ",".join(o) or "defaults")
def test_every_artefact_gives_the_same_answer(artefacts, options):
    translator, signature, runner, sentences, prefix, _ = artefacts
    options = _options(options, prefix)
    expected = translator.translate_nbest(sentences, **options)
    n = options.get("num_hypotheses", 1)
    assert all(len(hyps) == n for hyps in expected)
    if "target_prefix" in options:  # the translation starts with the prefix, continued
        assert all(h["translation"].startswith(prefix)  # (an empty text has no sentence)
                   for text, hyps in zip(sentences, expected) if text.strip() for h in hyps)
    if options.get("return_alignments"):
        for hyps in expected:
            for h in hyps:
                pairs = [tuple(map(int, p.split("-"))) for p in h["alignment"].split()]
                assert pairs == sorted(set(pairs), key=lambda p: (p[1], p[0]))
    tolerance = lc.confidence_tolerance(translator.calibrator, 1e-4)
    check_equal(expected, as_lists(saved_model_translate(signature, sentences, **options)),
                "SavedModel", tolerance)
    out = runner(text=runtime.text_array(sentences),
                 **runtime.option_inputs(DecodingOptions.from_kwargs(**options)))
    # The file translates sentences; the runtime splits texts first (an empty text has
    # none: its translation is "", not the file's output for "").
    real = [i for i, s in enumerate(sentences) if s.strip()]
    check_equal([expected[i] for i in real], [as_lists(out)[i] for i in real], "TFLite float32",
                tolerance)
    path = interpreter_path(artefacts)
    check_equal(expected, as_lists(runtime.run_tflite_options(path, sentences, **options)),
                "TFLite float32 through the runtime", tolerance)


@pytest.mark.kernels
def test_defaults_equal_serving_default(artefacts):
    translator, signature, _, sentences, _, loaded = artefacts
    served = loaded.signatures[export.SERVING_SIGNATURE](text=tf.constant(sentences))
    out = saved_model_translate(signature, sentences)
    assert out["translations"][:, 0].tolist() == served["translation"].numpy().tolist()
    np.testing.assert_allclose(out["scores"][:, 0], served["score"].numpy(), rtol=1e-5,
                               atol=1e-5)
    assert out["translations"][:, 0].tolist() == [
        s.encode() for s in translator.translate(sentences)]


def test_beam_ranks_by_the_gnmt_score(artefacts):
    translator, _, _, sentences, _, _ = artefacts
    for hyps in translator.translate_nbest(sentences, beam_size=4, num_hypotheses=4):
        scores = [h["score"] for h in hyps]
        assert scores == sorted(scores, reverse=True)


@pytest.mark.kernels
def test_sampling_repeats_with_its_seed_and_changes_with_another(artefacts):
    translator, signature, runner, sentences, _, _ = artefacts
    options = dict(sampling_topk=50, sampling_temperature=2.0, beam_size=4, num_hypotheses=4)
    first = saved_model_translate(signature, sentences, seed=11, **options)
    again = saved_model_translate(signature, sentences, seed=11, **options)
    other = saved_model_translate(signature, sentences, seed=12, **options)
    assert first["translations"].tolist() == again["translations"].tolist()
    assert first["translations"].tolist() != other["translations"].tolist()
    inputs = runtime.option_inputs(DecodingOptions(seed=11, **options))
    tfl = [runner(text=runtime.text_array(sentences), **inputs)["translations"].tolist()
           for _ in range(2)]
    assert tfl[0] == tfl[1] == first["translations"].tolist()


@pytest.mark.parametrize("bad, name", BAD, ids=[b[1] + str(i) for i, b in enumerate(BAD)])
def test_bad_options_answer_clearly_and_the_artefact_goes_on(artefacts, bad, name):
    translator, signature, runner, sentences, prefix, _ = artefacts
    bad = _options(bad, prefix * 3)
    if name != "beam_size" or bad["beam_size"] < 9:  # the Translator has no export maximum
        with pytest.raises(ValueError, match=name):
            translator.translate_nbest(sentences, **bad)
    inputs = runtime.option_inputs(DecodingOptions())
    inputs.update({k: np.asarray(v, inputs[k].dtype) for k, v in bad.items()
                   if k != "target_prefix"})
    if "target_prefix" in bad:
        inputs["target_prefix"] = np.array([bad["target_prefix"].encode()], object)
    with pytest.raises(tf.errors.InvalidArgumentError, match=name):
        signature(text=tf.constant(sentences), **{k: tf.constant(v) for k, v in inputs.items()})
    with pytest.raises(RuntimeError):  # TFLite: the invocation fails, nothing crashes
        runner(text=runtime.text_array(sentences), **inputs)
    good = saved_model_translate(signature, sentences)
    assert good["translations"].shape == (len(sentences), 1)
    out = runner(text=runtime.text_array(sentences),
                 **runtime.option_inputs(DecodingOptions()))
    assert out["translations"].tolist() == good["translations"].tolist()


def test_wrong_dtype_is_refused(artefacts):
    _, signature, _, sentences, _, _ = artefacts
    inputs = {k: tf.constant(v) for k, v in runtime.option_inputs(DecodingOptions()).items()}
    inputs["beam_size"] = tf.constant(2.5)
    with pytest.raises((TypeError, ValueError, tf.errors.InvalidArgumentError)):
        signature(text=tf.constant(sentences), **inputs)
    with pytest.raises(ValueError, match="beam_size"):
        DecodingOptions(beam_size=2.5)


def test_signature_inputs_and_outputs():
    report = export.saved_model_signatures(
        os.path.join(EXPORTED, "saved_model", "translator", "1"))
    sig = report[contract.LATEST_OPTIONS_SIGNATURE]
    assert set(sig["inputs"]) == {"text", *runtime.option_inputs(DecodingOptions())}
    assert set(sig["outputs"]) == {"translations", "scores", "confidences", "alignments",
                                   "truncated"}
    assert sig["outputs"]["translations"]["shape"] == [-1, -1]


def test_empty_text_translates_to_itself(artefacts):
    """An empty or blank text has no sentence: "" (its whitespace) and a score of 0 from
    the Translator, the SavedModel and the TFLite runtime alike."""
    translator, signature, runner, sentences, _, _ = artefacts
    texts = [sentences[0], "", "  "]
    expected = translator.translate_nbest(texts, beam_size=2, num_hypotheses=2)
    assert [h["translation"] for h in expected[1] + expected[2]] == ["", "", "  ", "  "]
    check_equal(expected, as_lists(saved_model_translate(signature, texts, beam_size=2,
                                                         num_hypotheses=2)), "SavedModel")
    check_equal(expected, as_lists(runtime.run_tflite_options(
        interpreter_path(artefacts), texts, beam_size=2, num_hypotheses=2)), "TFLite runtime")
