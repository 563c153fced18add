"""Fitting a run's confidence calibrator on its validation split.

The trained translator decodes every validation source with the default options, each
hypothesis is labelled (:func:`acceptable`), and a
:class:`keras_attn.decoding.confidence.Calibrator` is fitted to the features and saved as
``calibration.json``. So that input the model was never trained for is not trusted, the fit
also sees :data:`NOISE_SHARE` times as many random-vocabulary sources, labelled
unacceptable.

Example:
    >>> cal = calibrate_run("runs/dates")
    >>> cal.report["valid_auroc"], cal.report["valid_ece"]
"""
import time

import numpy as np

from keras_attn.core import runs
from keras_attn.decoding.confidence import (ACCEPTABLE_CHRF, FEATURES, auroc,
                                            expected_calibration_error, fit)
from keras_attn.core.special_tokens import END_ID

NOISE_SHARE = 0.5  # random-vocabulary sources, as a share of the validation sources
FIRST_WORD_ID = 4  # ids below are [PAD], [UNK], [START], [END]


def acceptable(task, hypotheses, references):
    """1.0 per acceptable hypothesis (dates: equal to a reference; text: sentence chrF >=
    :data:`ACCEPTABLE_CHRF`); ``references``: per hypothesis a list of strings.
    """
    if task == "dates":
        return np.array([h in refs for h, refs in zip(hypotheses, references)], "float64")
    import sacrebleu

    return np.array([sacrebleu.sentence_chrf(h, list(refs)).score >= ACCEPTABLE_CHRF
                     for h, refs in zip(hypotheses, references)], "float64")


def grouped(pairs):
    """Unique sources of (source, target) pairs, in order, and each one's targets."""
    refs = {}
    for source, target in pairs:
        refs.setdefault(source, []).append(target)
    return list(refs), list(refs.values())


def _hypotheses(translator, source_ids, batch_size):
    """The default decoding's best hypothesis of each source row: strings and features."""
    opts = translator.defaults()
    texts, feats = [], []
    for i in range(0, len(source_ids), batch_size):
        out = translator.decode_ids(source_ids[i: i + batch_size], opts)
        texts += translator.detokenize(
            out["tokens"][:, 0, : max(int(out["lengths"].max(initial=0)), 1)])
        feats.append(out["features"][:, 0])
    return texts, (np.concatenate(feats) if feats
                   else np.zeros((0, len(FEATURES)), "float32"))


def noise_sources(lengths, vocab_size, seed=0):
    """int32 ``(N, max(lengths) + 1)``: per length that many random word ids, ``[END]``, 0s."""
    rng = np.random.default_rng(seed)
    rows = np.zeros((len(lengths), int(max(lengths, default=0)) + 1), "int32")
    for r, n in enumerate(lengths):
        rows[r, :n] = rng.integers(FIRST_WORD_ID, vocab_size, size=n)
        rows[r, n] = END_ID
    return rows


def calibrate(translator, pairs, task, seed=0, batch_size=256, log=print):
    """Fit a calibrator to ``translator``'s hypotheses for the sources of ``pairs`` (the
    validation split; a source's targets are all references) and to noise sources; returns
    it with its ``report`` filled.
    """
    t0 = time.time()
    sources, references = grouped(pairs)
    if not sources:
        raise ValueError("cannot calibrate on an empty validation split")
    source_ids = np.asarray(translator.encode(sources), "int32")
    hyps, x = _hypotheses(translator, source_ids, batch_size)
    y = acceptable(task, hyps, references)
    lengths = np.sum(source_ids != 0, axis=1) - 1
    count = int(round(NOISE_SHARE * len(sources)))
    noise = noise_sources(np.random.default_rng(seed + 1).choice(lengths, count),
                          len(translator.src_tokenizer.vocab), seed)
    _, x_noise = _hypotheses(translator, noise, batch_size)
    calibrator = fit(np.r_[x, x_noise], np.r_[y, np.zeros(len(x_noise))])
    confidence = np.asarray(calibrator(x))
    ece, _ = expected_calibration_error(confidence, y)
    valid_auroc = auroc(confidence, y)
    calibrator.report = {
        "calibrated": True, "task": task,
        "acceptable": "exact match" if task == "dates" else f"sentence chrF >= {ACCEPTABLE_CHRF:g}",
        "num_valid": len(sources), "num_noise": count,
        "valid_acceptable_share": round(float(y.mean()), 4),
        # None when the validation hypotheses are all acceptable (or none is): no ranking.
        "valid_auroc": None if np.isnan(valid_auroc) else round(valid_auroc, 4),
        "valid_ece": round(ece, 4),
        "seconds": round(time.time() - t0, 1)}
    log("calibration: " + ", ".join(f"{k} {v}" for k, v in calibrator.report.items()
                                    if k not in ("calibrated", "task")))
    return calibrator


def calibrate_run(run_dir, log=print, batch_size=256, config=None):
    """Fit a trained run's calibrator (:func:`calibrate`), save it and return it; ``config``:
    the run's :class:`~keras_attn.core.config.TrainConfig` (default: its ``config.json``),
    whose corpus is read (a relative path the run stored is found from ``run_dir``)."""
    from keras_attn.core.config import TrainConfig
    from keras_attn.data import load_splits
    from keras_attn.translator import Translator

    p = runs.paths(run_dir)
    translator = Translator.from_run_dir(run_dir, calibrated=False)  # fitted anew
    config = config or TrainConfig.from_dict(runs.read_json(p["config"]))
    splits, _ = load_splits(config, log=log, run_dir=run_dir)
    calibrator = calibrate(translator, splits["valid"], config.task, seed=config.seed,
                           batch_size=batch_size, log=log)
    calibrator.save(p["calibration"])
    return calibrator
