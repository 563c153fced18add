"""Scoring given translations (API.md, "Scoring a given translation"):
``keras_attn.decoding.score`` against a NumPy log-softmax of the model's logits written here
and against the searches' own scores; ``Translator.score``
against ``translate_nbest`` (greedy: the summed log-probability, beam: the normalised
score) on the committed dates model and the committed tiny dates run, with the fast paths
and on the reference; the SavedModel's ``score`` signature, ``keras-attn score`` and
``CTranslate2Translator.score`` against ``Translator.score``."""
import io
import json
import os
import pathlib

import numpy as np
import pytest
import tensorflow as tf

from tests.support import layer_checks as lc
from tests.support import run_fixtures
from keras_attn import cli, data, decoding, export, models
from keras_attn.kernels import fastpath
from keras_attn.translator import Translator

ROOT = pathlib.Path(__file__).resolve().parents[2]
RUN = ROOT / "exported" / "run"
START, END = 2, 3
ALPHA = 0.6
# Translator.score gives translate_nbest's scores back within this (API.md): both are
# float32 sums of the same log-probabilities, computed by two graphs (a step at a time,
# one teacher-forced pass).
SAME_SCORE = 1e-4

SOURCE = np.array([[5, 6, 7, 8, 3, 0, 0], [9, 10, 3, 0, 0, 0, 0], [11, 12, 13, 14, 15, 16, 3],
                   [17, 3, 0, 0, 0, 0, 0]], "int32")
# Rows as the searches return them (END, then 0), one without END (cut at the maximum
# length), and one with tokens after END that must be ignored.
TARGET = np.array([[7, 8, 9, END, 0, 0], [4, END, 0, 0, 0, 0], [5, 6, 7, 8, 9, 10],
                   [7, END, 9, 9, 0, 0]], "int32")


@pytest.fixture(scope="module", params=["transformer", "bahdanau"])
def model(request):
    tf.keras.utils.set_random_seed(1)
    if request.param == "bahdanau":
        return models.bahdanau_seq2seq(40, 30, embed_size=16, num_hiddens=32, num_layers=2,
                                       dropout=0.0)
    return models.transformer_seq2seq(40, 30, num_hiddens=32, ffn_num_hiddens=64, num_heads=4,
                                      num_layers=2, dropout=0.0, max_len=64)


def log_prob_terms(model, steps):
    """Roundings of a sequence's log-probability (lc.tolerance's ``terms``): the logits,
    a log-softmax over the vocabulary of 30, the sum over ``steps``."""
    if models.model_kind(model) == "bahdanau":
        logits = lc.bahdanau_terms(16, 32, 2, SOURCE.shape[1], steps)
    else:
        logits = lc.transformer_terms(32, 64, 4, 2, SOURCE.shape[1], steps)
    return logits + 30 + 4 + steps


def numpy_scores(model, source, target, alpha):
    """The reference: the model's logits (its functional call, teacher-forced), padding and
    START banned, a float64 log-softmax, each target token's entry up to its first END."""
    target_in = np.concatenate([np.full((len(target), 1), START, "int32"), target[:, :-1]], 1)
    logits = np.asarray(model({"source": source, "target_in": target_in}, training=False),
                        "float64")
    logits[..., [0, START]] = -np.inf
    top = logits.max(-1, keepdims=True)
    log_probs = logits - top - np.log(np.exp(logits - top).sum(-1, keepdims=True))
    picked = np.take_along_axis(log_probs, target[..., None], axis=-1)[..., 0]
    kept = np.zeros(target.shape, bool)
    for b, row in enumerate(target):
        for t, token in enumerate(row):
            if token == 0:
                continue
            kept[b, t] = True
            if token == END:
                break
    per_token = np.where(kept, picked, 0.0)
    lengths = kept.sum(1)
    return per_token, per_token.sum(1), per_token.sum(1) / ((5.0 + lengths) / 6.0) ** alpha


# --- keras_attn.decoding.score ---------------------------------------------------------------
@pytest.mark.kernels
@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.0])
def test_score_equals_a_numpy_log_softmax_of_the_logits(model, alpha):
    out = decoding.score(model, SOURCE, TARGET, START, END, alpha)
    per_token, log_prob, score = numpy_scores(model, SOURCE, TARGET, alpha)
    terms = log_prob_terms(model, TARGET.shape[1])
    lc.assert_close(out["token_log_probs"], per_token, terms=terms)
    lc.assert_close(out["log_prob"], log_prob, terms=terms)
    lc.assert_close(out["score"], score, terms=terms)
    np.testing.assert_array_equal(out["lengths"], [4, 2, 6, 2])
    # Padding and whatever follows END count nothing.
    assert (np.asarray(out["token_log_probs"])[TARGET == 0] == 0).all()
    assert (np.asarray(out["token_log_probs"])[3, 2:] == 0).all()


@pytest.mark.kernels
@pytest.mark.parametrize("fast_paths", [True, False])
def test_score_gives_the_searches_their_scores_back(model, fast_paths):
    """Greedy's summed log-probability and beam search's normalised scores (every beam),
    for hypotheses that ended and ones cut at max_len, on the fast paths and the
    reference."""
    with fastpath.using(fast_paths=fast_paths):
        greedy = decoding.greedy_decode_fixed(model, SOURCE, 12, START, END)
        beam = decoding.beam_decode_fixed(model, SOURCE, 3, ALPHA, 12, START, END)
        scored = decoding.score(model, SOURCE, greedy["tokens"], START, END, ALPHA)
        flat = np.reshape(beam["tokens"], (-1, 12))
        scored_beam = decoding.score(model, np.repeat(SOURCE, 3, axis=0), flat, START, END,
                                     ALPHA)
    terms = log_prob_terms(model, 12)
    lc.assert_close(scored["log_prob"], greedy["log_prob"], terms=2 * terms)
    np.testing.assert_array_equal(scored["lengths"], greedy["lengths"])
    lc.assert_close(np.reshape(scored_beam["score"], (-1, 3)), beam["scores"], terms=2 * terms)
    np.testing.assert_array_equal(np.reshape(scored_beam["lengths"], (-1, 3)), beam["lengths"])


def test_score_in_a_graph_and_under_xla(model):
    eager = decoding.score(model, SOURCE, TARGET, START, END, ALPHA)
    for jit in (False, True):
        graph = tf.function(lambda s, t: decoding.score(model, s, t, START, END, ALPHA),
                            jit_compile=jit)(tf.constant(SOURCE), tf.constant(TARGET))
        lc.assert_close(graph["log_prob"], eager["log_prob"],
                        terms=2 * log_prob_terms(model, TARGET.shape[1]))


def test_score_refuses_bad_shapes(model):
    with pytest.raises(ValueError, match="target"):
        decoding.score(model, SOURCE, TARGET[0], START, END)
    with pytest.raises(ValueError, match="source"):
        decoding.score(model, SOURCE.astype("float32"), TARGET, START, END)


# --- Translator.score ------------------------------------------------------------------------
def _held_out(n):
    return [s for s, _ in data.dates_splits(30000, 1000, 2000, seed=0)["test"][:n]]


@pytest.fixture(scope="module")
def committed():
    if not (RUN / "model.keras").is_file():
        pytest.skip("exported/run (the committed default model) is missing")
    return Translator.from_run_dir(str(RUN))


@pytest.fixture(scope="module")
def tiny():
    """The committed tiny dates run (a 64-wide Transformer trained for 3 epochs)."""
    return Translator.from_run_dir(run_fixtures.TINY_DATES_RUN)


def _fresh(translator):
    """The same model and tokenizers, none of the traced functions (traced again under the
    kernel policy in force)."""
    return Translator(translator.model, translator.src_tokenizer, translator.tgt_tokenizer,
                      translator.max_len, translator.normalize)


def _rescored_diffs(translator, sentences, **options):
    """``translate_nbest``'s hypotheses scored again: the largest difference of greedy's
    score from ``log_prob``, or of beam's from ``score``."""
    nbest = translator.translate_nbest(sentences, **options)
    hyps = [h for hyp_list in nbest for h in hyp_list]
    sources = [s for s, hyp_list in zip(sentences, nbest) for _ in hyp_list]
    scored = translator.score(sources, [h["translation"] for h in hyps],
                              length_penalty=options.get("length_penalty"))
    key = "score" if options.get("beam_size", 1) > 1 else "log_prob"
    assert all(s["tokens"][-1] == "[END]" and not s["truncated"] for s in scored)
    return max(abs(h["score"] - s[key]) for h, s in zip(hyps, scored))


@pytest.mark.kernels
@pytest.mark.parametrize("name, fast_paths", [
    # 13 s each: the README pass checks translate's and score's agreement through the
    # confidence (test_confidence) and the signatures (below).
    pytest.param("committed", True, marks=pytest.mark.slow),
    pytest.param("committed", False, marks=pytest.mark.slow),  # the reference path: 10 s
    pytest.param("tiny", True, marks=pytest.mark.slow)])  # another model, 20 s
def test_translator_score_equals_translate_nbest(request, name, fast_paths):
    translator = _fresh(request.getfixturevalue(name))
    sentences = _held_out(40) if name == "committed" else run_fixtures.tiny_dates_inputs()[:40]
    with fastpath.using(fast_paths=fast_paths):
        greedy = _rescored_diffs(translator, sentences)
        beam = _rescored_diffs(translator, sentences, beam_size=4, num_hypotheses=4)
        beam_alpha = _rescored_diffs(translator, sentences[:10], beam_size=3,
                                     num_hypotheses=2, length_penalty=1.0)
    print(f"{name} fast_paths={fast_paths}: max |translate_nbest - score| greedy {greedy:.2e}, "
          f"beam {beam:.2e}, beam alpha=1 {beam_alpha:.2e}")
    assert max(greedy, beam, beam_alpha) < SAME_SCORE


def test_translator_score_result(committed):
    out = committed.score(["3 March 2021"], ["2021-03-03"])
    assert len(out) == 1
    result = out[0]
    assert set(result) == {"tokens", "token_ids", "token_log_probs", "log_prob", "score",
                           "confidence", "words", "truncated"}
    vocab = committed.tgt_tokenizer.vocab
    assert result["tokens"] == [vocab[i] for i in result["token_ids"]]
    assert result["tokens"][-1] == "[END]" and len(result["tokens"]) == 11
    assert result["truncated"] is False
    np.testing.assert_allclose(sum(result["token_log_probs"]), result["log_prob"], atol=1e-5)
    np.testing.assert_allclose(result["score"], result["log_prob"] / (16 / 6) ** ALPHA,
                               rtol=1e-6)
    # A correct translation is far more likely than a wrong one.
    wrong = committed.score(["3 March 2021"], ["1999-12-31"])[0]
    assert wrong["log_prob"] < result["log_prob"] - 5
    # length_penalty 0: score is the sum.
    plain = committed.score(["3 March 2021"], ["2021-03-03"], length_penalty=0.0)[0]
    assert plain["score"] == pytest.approx(plain["log_prob"])


def test_translator_score_batches_and_truncates(committed):
    sources = _held_out(5)
    targets = ["2021-03-03", "", "1" * 100, "x", "1999-07-04"]
    whole = committed.score(sources, targets)
    batched = committed.score(sources, targets, batch_size=2)
    for a, b in zip(whole, batched):
        assert a["token_ids"] == b["token_ids"]
        assert a["log_prob"] == pytest.approx(b["log_prob"], abs=SAME_SCORE)
    assert whole[1]["tokens"] == ["[END]"]  # the empty translation: [END] alone
    long = whole[2]
    assert long["truncated"] is True and len(long["tokens"]) == committed.max_len
    assert long["tokens"][-1] == "[END]"
    assert [r["truncated"] for r in whole] == [False, False, True, False, False]
    assert committed.score([], []) == []


@pytest.mark.parametrize("sources, targets, match", [
    (["a", "b"], ["a"], "same length"),
    (["a"], [b"a"], "targets"),
    ([1], ["a"], "sources"),
    ("3 March 2021", "2021-03-03", "not one string"),
])
def test_translator_score_refuses_bad_arguments(committed, sources, targets, match):
    with pytest.raises(ValueError, match=match):
        committed.score(sources, targets)


def test_translator_score_refuses_a_bad_length_penalty(committed):
    with pytest.raises(ValueError, match="length_penalty"):
        committed.score(["a"], ["b"], length_penalty=-1.0)


# --- the SavedModel's and the TFLite text file's `score` signature ---------------------------
def _pairs(translator, sentences):
    """Pairs to score: the greedy translations, wrong ones, an empty one and one cut at
    max_len."""
    best = translator.translate(sentences)
    targets = best + ["1999-12-31"] * 3 + ["", "9" * 100]
    return sentences + sentences[:5], targets


def _assert_same_scores(out, expected, translator):
    """A signature's outputs (numpy, tokens padded) against ``Translator.score``'s dicts."""
    worst = 0.0
    for row, exp in enumerate(expected):
        n = len(exp["token_ids"])
        assert int(out["lengths"][row]) == n
        assert out["token_ids"][row, :n].tolist() == exp["token_ids"]
        assert (np.asarray(out["token_ids"])[row, n:] == 0).all()
        assert [t.decode() for t in out["tokens"][row, :n].tolist()] == exp["tokens"]
        assert bool(out["truncated"][row]) == exp["truncated"]
        worst = max(worst, float(np.abs(out["token_log_probs"][row, :n]
                                        - exp["token_log_probs"]).max()),
                    abs(float(out["log_prob"][row]) - exp["log_prob"]),
                    abs(float(out["score"][row]) - exp["score"]))
    assert worst < SAME_SCORE
    return worst


@pytest.mark.kernels
def test_saved_model_and_tflite_score_equal_translator(tiny_dates):
    """The session's tiny dates export (conftest: export_run, SavedModel and TFLite text
    file): both files' `score` give Translator.score's numbers."""
    translator = Translator.from_run_dir(tiny_dates["run_dir"])
    sources, targets = _pairs(translator, tiny_dates["inputs"][:20])
    expected = translator.score(sources, targets)
    path = os.path.join(tiny_dates["export_dir"], "saved_model", export.MODEL_NAME, "1")
    signature = tf.saved_model.load(path).signatures[export.SCORE_SIGNATURE]
    out = {k: v.numpy() for k, v in signature(source=tf.constant(sources),
                                              target=tf.constant(targets)).items()}
    saved_model = _assert_same_scores(out, expected, translator)
    tflite_path = os.path.join(tiny_dates["export_dir"], "tflite", "text_float32.tflite")
    tflite = _assert_same_scores(export.run_tflite_score(tflite_path, sources, targets),
                                 expected, translator)
    print(f"max |signature - Translator.score|: SavedModel {saved_model:.2e}, "
          f"TFLite {tflite:.2e}")


@pytest.mark.slow  # a SavedModel export of the committed model
@pytest.mark.kernels
def test_exported_committed_model_scores_as_translator(committed, tmp_path):
    report = export.export_saved_model(committed, tmp_path, request_signature=False)
    assert set(report["signatures"]) == {"serving_default", "translate_ids", "score"}
    assert report["signatures"]["score"]["inputs"] == {
        "source": {"dtype": "string", "shape": [-1]},
        "target": {"dtype": "string", "shape": [-1]}}
    assert report["xla_ops"] == [] and report["non_core_ops"] == []
    sources, targets = _pairs(committed, _held_out(30))
    signature = tf.saved_model.load(report["path"]).signatures[export.SCORE_SIGNATURE]
    out = {k: v.numpy() for k, v in signature(source=tf.constant(sources),
                                              target=tf.constant(targets)).items()}
    worst = _assert_same_scores(out, committed.score(sources, targets), committed)
    print(f"committed model: max |SavedModel score - Translator.score| {worst:.2e}")
    with pytest.raises(tf.errors.InvalidArgumentError, match="as many strings"):
        signature(source=tf.constant(sources), target=tf.constant(targets[:2]))


# --- keras-attn score ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cli_pairs(committed):
    sources = _held_out(3)
    targets = committed.translate(sources)[:2] + ["1999-12-31"]
    return sources, targets, committed.score(sources, targets)


def test_cli_score_tsv_lines(cli_pairs, capsys, monkeypatch):
    sources, targets, expected = cli_pairs
    stdin = "".join(f"{s}\t{t}\n" for s, t in zip(sources, targets)) + "\n"  # a blank line
    monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    assert cli.main(["score", str(RUN)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3
    for line, exp in zip(lines, expected):
        log_prob, score, confidence, per_token = line.split("\t")
        assert float(log_prob) == pytest.approx(exp["log_prob"], abs=1e-4)
        assert float(score) == pytest.approx(exp["score"], abs=1e-4)
        assert float(confidence) == pytest.approx(exp["confidence"], abs=1e-4)
        np.testing.assert_allclose([float(p) for p in per_token.split()],
                                   exp["token_log_probs"], atol=1e-4)


def test_cli_score_one_pair_as_json(cli_pairs, capsys):
    sources, targets, expected = cli_pairs
    assert cli.main(["score", str(RUN), "--source", sources[2], "--target", targets[2],
                     "--json", "--length-penalty", "1.0"]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    got = json.loads(line)
    assert got["source"] == sources[2] and got["target"] == targets[2]
    assert got["tokens"] == expected[2]["tokens"] and got["truncated"] is False
    assert got["log_prob"] == pytest.approx(expected[2]["log_prob"], abs=1e-4)
    n = len(got["tokens"])
    assert got["score"] == pytest.approx(got["log_prob"] / ((5 + n) / 6), rel=1e-5)


@pytest.mark.parametrize("argv, stdin, message", [
    (["--source", "3 March 2021"], "", "--source and --target go together"),
    ([], "3 March 2021\n", "line 1 must be SOURCE<TAB>TARGET"),
    ([], "a\tb\tc\n", "line 1 must be SOURCE<TAB>TARGET"),
    (["--length-penalty", "-1", "--source", "a", "--target", "b"], "", "length_penalty"),
])
def test_cli_score_errors(committed, argv, stdin, message, capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    assert cli.main(["score", str(RUN), *argv]) == 1
    err = capsys.readouterr().err
    assert err.startswith("keras-attn score: error:") and message in err


# --- CTranslate2Translator.score: score_batch --------------------------------------------------
@pytest.fixture(scope="module")
def ct2(committed, tmp_path_factory):
    """The committed dates model exported to CTranslate2 (float32) in a temporary folder."""
    pytest.importorskip("ctranslate2", reason="CTranslate2 is not installed "
                                              "(pip install -e '.[ctranslate2]')")
    from keras_attn.export import ctranslate2 as ct2_export
    from keras_attn.export import ctranslate2_runtime

    path = str(tmp_path_factory.mktemp("scoring_ct2") / "ct2")
    ct2_export.export_ctranslate2(str(RUN), path)
    return ctranslate2_runtime.CTranslate2Translator(path, intra_threads=2)


def _float32_tolerances(translator, sources, expected):
    """How far two float32 engines may differ on each pair's log-probabilities
    (lc.tolerance): the roundings along the committed Transformer's logits (d 128, FFN 256,
    4 heads, 2+2 layers, over the pair's source and target lengths), its log-softmax over
    the target vocabulary and the sum over the tokens, relative to the pair's largest logit
    (the log-softmax subtracts numbers of that size: a log-probability near 0 carries their
    rounding, not its own)."""
    ids = [r["token_ids"] for r in expected]
    target = np.zeros((len(ids), max(map(len, ids))), "int32")
    for row, tokens in enumerate(ids):
        target[row, : len(tokens)] = tokens
    source = np.asarray(translator.encode(sources))
    target_in = np.concatenate([np.full((len(ids), 1), START, "int32"), target[:, :-1]], 1)
    logits = np.asarray(translator.model({"source": source, "target_in": target_in},
                                         training=False))
    vocab = translator.tgt_tokenizer.vocab_size
    out = []
    for row, tokens in enumerate(ids):
        n, s = len(tokens), int((source[row] != 0).sum())
        terms = lc.transformer_terms(128, 256, 4, 2, s, n) + vocab + 4 + n
        out.append(lc.tolerance(None, terms=terms, scale=float(np.abs(logits[row, :n]).max())))
    return np.asarray(out)


@pytest.mark.kernels
def test_ctranslate2_score_batch_equals_translator_score(committed, ct2):
    sources, targets = _pairs(committed, _held_out(40))
    ours = committed.score(sources, targets)
    theirs = ct2.score(sources, targets)
    tolerances = _float32_tolerances(committed, sources, ours)
    worst = {"token": 0.0, "log_prob": 0.0, "score": 0.0}
    for a, b, tolerance in zip(ours, theirs, tolerances):
        assert b["tokens"] == a["tokens"] and b["token_ids"] == a["token_ids"]
        assert b["truncated"] == a["truncated"]
        diffs = {"token": float(np.abs(np.subtract(a["token_log_probs"],
                                                   b["token_log_probs"])).max()),
                 "log_prob": abs(a["log_prob"] - b["log_prob"]),
                 "score": abs(a["score"] - b["score"])}
        assert max(diffs.values()) < tolerance, (a, b, diffs, tolerance)
        worst = {k: max(worst[k], v) for k, v in diffs.items()}
    print(f"max |CTranslate2 score_batch - Translator.score|: {worst} (tolerances "
          f"{tolerances.min():.1e} to {tolerances.max():.1e})")
    # The confidence: the same calibrator on the same features; the features that move are
    # the mean and least token log-probabilities (by at most a token's tolerance), and the
    # sigmoid's slope is at most 1/4.
    cal = committed.calibrator
    slope = 0.25 * sum(abs(cal.weights[i]) / cal.scale[i] for i in (0, 1))
    for a, b, tolerance in zip(ours, theirs, tolerances):
        assert abs(a["confidence"] - b["confidence"]) <= slope * tolerance + 1e-6, (a, b)
    # And with another length penalty (our GNMT normalisation on CTranslate2's sums).
    a = committed.score(sources[:3], targets[:3], length_penalty=1.0)
    b = ct2.score(sources[:3], targets[:3], length_penalty=1.0)
    np.testing.assert_array_less(np.abs(np.subtract([r["score"] for r in b],
                                                    [r["score"] for r in a])), tolerances[:3])


@pytest.mark.parametrize("sources, targets, match", [
    (["a", "b"], ["a"], "same length"), ([1], ["a"], "sources"), ("a", "b", "not one string")])
def test_ctranslate2_score_refuses_bad_arguments(ct2, sources, targets, match):
    with pytest.raises(ValueError, match=match):
        ct2.score(sources, targets)
