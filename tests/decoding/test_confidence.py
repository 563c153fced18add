"""Confidence a service can act on (API.md ``confidences``):
the features against NumPy written here, the calibrator's fit against a known logistic
model, AUROC against its pairwise definition, the ECE against a worked example; every
artefact's confidence against the Translator's (the SavedModel's and TFLite text file's
signatures, CTranslate2), documents (their lowest sentence), and the committed dates
model: held-out dates confident, inputs that are not dates below 0.1."""
import json
import math
import os
import pathlib

import numpy as np
import pytest
import tensorflow as tf

from tests.support import layer_checks as lc
from keras_attn import export
from keras_attn.training import calibration
from keras_attn.decoding import confidence as conf
from keras_attn.translator import Translator

ROOT = pathlib.Path(__file__).resolve().parents[2]
RUN = ROOT / "exported" / "run"
UNK, END = 1, 3


def numpy_features(lp, lengths, source):
    """The features, one hypothesis at a time, as FEATURES documents them."""
    rows = []
    for row, n in enumerate(lengths):
        tokens = np.asarray(lp[row, :n], "float64")
        ids = [t for t in source[row] if t != 0]
        s = len(ids) - 1  # without [END]
        rows.append([tokens.mean(), tokens.min(), math.log(n / (s + 1)),
                     sum(t == UNK for t in ids) / max(s, 1), math.log(s + 1),
                     float(np.mean(np.exp(tokens) < 0.5))])
    return np.array(rows)


def test_features_equal_numpy():
    rng = np.random.default_rng(0)
    lengths = np.array([1, 4, 7, 3])
    lp = np.zeros((4, 7), "float32")
    for row, n in enumerate(lengths):
        lp[row, :n] = -rng.exponential(0.8, n)
    source = np.array([[5, 6, UNK, END, 0, 0], [END, 0, 0, 0, 0, 0], [7, UNK, UNK, 8, 9, END],
                       [4, END, 0, 0, 0, 0]], "int32")
    got = np.asarray(conf.features(lp, lengths, source))
    assert got.shape == (4, len(conf.FEATURES))
    np.testing.assert_allclose(got, numpy_features(lp, lengths, source), rtol=1e-5, atol=1e-6)


def test_fit_recovers_a_known_logistic_model():
    """Labels drawn from sigmoid(x . w + b): the fit's probabilities are the true ones
    within the sampling error of 20,000 draws (a few hundredths)."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=(20000, len(conf.FEATURES))) * [0.5, 1.0, 0.3, 0.1, 0.7, 0.2] + 0.1
    w, b = np.array([2.0, -1.0, 0.5, 0.0, 1.0, -0.5]), 0.3
    truth = 1 / (1 + np.exp(-(x @ w + b)))
    y = (rng.uniform(size=len(x)) < truth).astype(float)
    cal = conf.fit(x, y)
    p = np.asarray(cal(x))
    assert np.abs(p - truth).max() < 0.05
    ece, _ = conf.expected_calibration_error(p, y)
    assert ece < 0.02
    again = conf.fit(x, y)  # deterministic
    assert again.weights == cal.weights and again.bias == cal.bias


def test_fit_refuses_bad_shapes():
    with pytest.raises(ValueError, match="shape"):
        conf.fit(np.zeros((3, 2)), np.zeros(3))
    with pytest.raises(ValueError, match="no examples"):
        conf.fit(np.zeros((0, len(conf.FEATURES))), np.zeros(0))


def test_calibrator_round_trip_and_uncalibrated(tmp_path):
    rng = np.random.default_rng(2)
    x = rng.normal(size=(200, len(conf.FEATURES)))
    cal = conf.fit(x, (x[:, 0] > 0).astype(float))
    cal.report = {"calibrated": True, "note": "test"}
    path = str(tmp_path / "calibration.json")
    cal.save(path)
    again = conf.Calibrator.load(path)
    np.testing.assert_allclose(np.asarray(again(x)), np.asarray(cal(x)), rtol=1e-6)
    assert again.report["note"] == "test"
    d = json.load(open(path))
    d["features"] = d["features"][:-1]
    with pytest.raises(ValueError, match="calibrate the run again"):
        conf.Calibrator.from_dict(d)
    # Uncalibrated: the geometric mean of the tokens' probabilities.
    p = np.asarray(conf.Calibrator.uncalibrated()(x[:, :] * 0 - 0.5))
    np.testing.assert_allclose(p, math.exp(-0.5), rtol=1e-6)


def test_auroc_and_ece_against_their_definitions():
    rng = np.random.default_rng(3)
    p = np.round(rng.uniform(size=300), 2)  # ties on purpose
    y = rng.uniform(size=300) < p
    pos, neg = p[y], p[~y]
    pairwise = (np.mean(pos[:, None] > neg[None, :])
                + 0.5 * np.mean(pos[:, None] == neg[None, :]))
    assert conf.auroc(p, y) == pytest.approx(pairwise, abs=1e-12)
    assert math.isnan(conf.auroc([0.5, 0.6], [1, 1]))
    # Two bins: 0.2 (4 hypotheses, 1 acceptable) and 0.9 (6, 3 acceptable).
    ece, table = conf.expected_calibration_error([0.2] * 4 + [0.9] * 6,
                                                 [1, 0, 0, 0, 1, 1, 1, 0, 0, 0])
    assert ece == pytest.approx(0.4 * abs(0.2 - 0.25) + 0.6 * abs(0.9 - 0.5))
    assert [row[2] for row in table] == [4, 6]


def test_noise_sources_hold_words_only():
    rows = calibration.noise_sources([3, 1, 5], vocab_size=40, seed=0)
    assert rows.shape == (3, 6)
    for row, n in zip(rows, [3, 1, 5]):
        assert (row[:n] >= calibration.FIRST_WORD_ID).all() and (row[:n] < 40).all()
        assert row[n] == END and (row[n + 1:] == 0).all()


def test_acceptable_labels():
    assert calibration.acceptable("dates", ["2021-03-03", "2021-03-04"],
                                  [["2021-03-03"], ["2021-03-03"]]).tolist() == [1.0, 0.0]
    got = calibration.acceptable("tatoeba", ["Je suis chez moi.", "Il pleut."],
                                 [["Je suis à la maison.", "Je suis chez moi."], ["Va-t'en !"]])
    assert got.tolist() == [1.0, 0.0]


# --- the committed dates model ---------------------------------------------------------------
@pytest.fixture(scope="module")
def committed():
    if not (RUN / "calibration.json").is_file():
        pytest.skip("exported/run (the committed default model) or its calibration is missing")
    return Translator.from_run_dir(str(RUN))


NOT_DATES = ["<b>Hello</b> world.", 'Click <a href="x.html">here</a> to go home.',
             "I like cats.", "The weather is nice today.", "john.doe@example.com",
             "def f(x): return x + 1", "😀😀😀", "SELECT * FROM users;"]


@pytest.mark.heavy  # decodes the committed run
def test_committed_model_is_confident_on_dates_and_not_on_the_rest(committed):
    assert committed.calibrator.calibrated
    dates = ["3 March 2021", "le 4 juillet 1999", "2021-12-25", "Dec 1, 2000", "5/6/2007"]
    confident = [h[0]["confidence"] for h in committed.translate_nbest(dates)]
    unsure = [h[0]["confidence"] for h in committed.translate_nbest(NOT_DATES)]
    assert min(confident) > 0.5, confident
    assert max(unsure) < 0.1, list(zip(NOT_DATES, unsure))


@pytest.mark.heavy  # decodes and scores the committed run
def test_translate_and_score_give_the_same_confidence(committed):
    """A hypothesis of translate_nbest, scored again, gets its confidence back (the dates
    model's characters tokenize back to the decoder's ids): both read the same
    teacher-forced pass, computed by two graphs."""
    sources = ["3 March 2021", "I like cats.", "12/13/1999", "a"]
    nbest = committed.translate_nbest(sources, beam_size=3, num_hypotheses=3)
    flat_sources = [s for s, hyps in zip(sources, nbest) for _ in hyps]
    hyps = [h for hyp_list in nbest for h in hyp_list]
    scored = committed.score(flat_sources, [h["translation"] for h in hyps])
    for h, s in zip(hyps, scored):
        assert 0.0 <= h["confidence"] <= 1.0
        assert h["confidence"] == pytest.approx(s["confidence"], abs=1e-5)


def test_word_confidence_is_the_mean_log_probability_of_its_tokens(committed):
    (good, two) = committed.score(["3 March 2021", "3 March 2021"],
                                  ["2021-03-03", "2021-03 03"])
    assert [w for w, _ in good["words"]] == ["2021-03-03"]
    assert good["words"][0][1] == pytest.approx(np.mean(good["token_log_probs"][:-1]), abs=1e-6)
    assert [w for w, _ in two["words"]] == ["2021-03", "03"]  # the space: no word
    lp = two["token_log_probs"]
    assert two["words"][1][1] == pytest.approx(np.mean(lp[8:10]), abs=1e-6)


def test_a_document_confidence_is_its_lowest_sentence(committed):
    (doc,) = committed.translate_nbest(["3 March 2021. I like cats."])
    sentences = [p["confidence"] for p in doc[0]["sentences"]]
    assert len(sentences) == 2 and doc[0]["confidence"] == min(sentences)
    (empty,) = committed.translate_nbest(["  "])
    assert empty[0]["confidence"] == 1.0


# --- the exported artefacts ------------------------------------------------------------------
@pytest.mark.slow  # 14 s; the README pass compares the artefacts' confidences in test_request
@pytest.mark.kernels
def test_saved_model_and_tflite_confidences_equal_translator(tiny_dates):
    """The session's tiny dates export: serving_default's and score's confidence, in the
    SavedModel and the TFLite text file, are the Translator's (the same graph pieces; the
    calibrator's weights are constants in them), within what the log-probabilities'
    agreement (1e-4, test_scoring) allows through the calibrator."""
    translator = Translator.from_run_dir(tiny_dates["run_dir"])
    assert translator.calibrator.calibrated
    tolerance = lc.confidence_tolerance(translator.calibrator, 1e-4)
    texts = tiny_dates["inputs"][:12] + ["<b>x</b> y.", "3 May 2001. 4 June 2002."]
    expected = [h[0]["confidence"] for h in translator.translate_nbest(texts)]
    path = os.path.join(tiny_dates["export_dir"], "saved_model", export.MODEL_NAME, "1")
    loaded = tf.saved_model.load(path)
    serve = loaded.signatures["serving_default"](text=tf.constant(texts))
    np.testing.assert_allclose(serve["confidence"].numpy(), expected, atol=tolerance)
    tflite_path = os.path.join(tiny_dates["export_dir"], "tflite", "text_float32.tflite")
    np.testing.assert_allclose(export.run_tflite_text(tflite_path, texts)["confidence"],
                               expected, atol=tolerance)
    best = translator.translate(texts[:12])
    scored = [s["confidence"] for s in translator.score(texts[:12], best)]
    out = loaded.signatures[export.SCORE_SIGNATURE](source=tf.constant(texts[:12]),
                                                    target=tf.constant(best))
    np.testing.assert_allclose(out["confidence"].numpy(), scored, atol=tolerance)
    np.testing.assert_allclose(export.run_tflite_score(tflite_path, texts[:12], best)[
        "confidence"], scored, atol=tolerance)
