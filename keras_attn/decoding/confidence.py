"""Confidence: the calibrated probability that a hypothesis is acceptable.

The model's signals about a hypothesis (its tokens' log-probabilities from one
teacher-forced pass, the lengths and the source ids) become the :data:`FEATURES` of
:func:`features`; a :class:`Calibrator` (a logistic regression fitted on the validation
split) maps them to a probability in [0, 1]. "Acceptable": for the dates task the exact
answer, for text a sentence chrF of at least 50.

Example:
    >>> cal = Calibrator.load("runs/dates/calibration.json")
    >>> out = score(model, source, tokens)  # keras_attn.decoding.score
    >>> cal(features(out["token_log_probs"], out["lengths"], source))  # (B,) in [0, 1]
"""
import dataclasses
import json
import math

import numpy as np

from keras_attn.kernels import fastpath
from keras_attn.core.special_tokens import PAD_ID, UNK_ID

# What a calibrator reads, per hypothesis (n target tokens with [END], s source tokens
# without [END]):
FEATURES = (
    "mean_log_prob",      # mean log-probability of the target tokens
    "min_log_prob",       # the least likely token's
    "log_length_ratio",   # log(n / (s + 1))
    "unknown_share",      # share of source tokens that are [UNK]
    "log_source_length",  # log(s + 1)
    "unsure_share",       # share of target tokens with probability below 1/2
)
ACCEPTABLE_CHRF = 50.0  # text: a hypothesis with sentence chrF >= 50 counts as acceptable
UNSURE = math.log(0.5)  # a token below probability 1/2 counts in unsure_share


class NumpyOps:
    """The ``keras.ops`` this module calls, on numpy arrays (where Keras is not imported)."""

    cast = staticmethod(lambda x, dtype: np.asarray(x).astype(dtype))
    arange, shape, expand_dims = staticmethod(np.arange), staticmethod(np.shape), \
        staticmethod(np.expand_dims)
    maximum, less, equal, not_equal, where = (staticmethod(f) for f in (
        np.maximum, np.less, np.equal, np.not_equal, np.where))
    sum, min, stack, log, exp, power = (staticmethod(f) for f in (
        np.sum, np.min, np.stack, np.log, np.exp, np.power))
    @staticmethod
    def sigmoid(x):
        with np.errstate(over="ignore"):  # exp(-x) = inf for a very negative x: 1 / inf = 0
            return 1.0 / (1.0 + np.exp(-x))


def _ops(ops):
    """``ops``, or ``keras.ops`` (imported on first use)."""
    if ops is None:
        from keras import ops
    return ops


def features(token_log_probs, lengths, source, ops=None):
    """float32 ``(B, len(FEATURES))`` (:data:`FEATURES`).

    Args:
        token_log_probs: float ``(B, T)``, each target token's log-probability, 0 after the
            ``lengths[b]`` tokens (``[END]`` the last of them).
        lengths: int ``(B,)``, target tokens with ``[END]`` (at least 1).
        source: int ``(B, S)`` source ids with ``[END]``, 0-padded.
        ops: ``keras.ops`` (default) or :class:`NumpyOps`.
    """
    ops = _ops(ops)
    lp = ops.cast(token_log_probs, "float32")
    n = ops.maximum(ops.cast(lengths, "int32"), 1)
    kept = ops.less(ops.expand_dims(ops.arange(ops.shape(lp)[1], dtype="int32"), 0),
                    ops.expand_dims(n, 1))
    lp = ops.where(kept, lp, 0.0)
    unsure = ops.sum(ops.cast(ops.less(lp, UNSURE), "float32"), axis=1)
    return features_from(ops.sum(lp, axis=1), ops.min(lp, axis=1), unsure, n,
                         *source_statistics(source, ops), ops=ops)


def source_statistics(source, ops=None):
    """float32 ``(B,)`` twice, of source ids ``(B, S)``: tokens without ``[END]``; ``[UNK]``s."""
    ops = _ops(ops)
    source = ops.cast(source, "int32")
    s = ops.maximum(ops.sum(ops.cast(ops.not_equal(source, PAD_ID), "float32"), axis=1) - 1.0,
                    0.0)
    return s, ops.sum(ops.cast(ops.equal(source, UNK_ID), "float32"), axis=1)


def features_from(total, lowest, unsure, n, source_length, unknown, ops=None):
    """:func:`features` from running sums, all ``(B,)``: summed and least log-probability,
    tokens below probability 1/2, tokens (``[END]`` included), :func:`source_statistics`."""
    ops = _ops(ops)
    nf = ops.cast(ops.maximum(n, 1), "float32")
    s = ops.cast(source_length, "float32")
    return ops.stack([ops.cast(total, "float32") / nf, ops.cast(lowest, "float32"),
                      ops.log(nf / (s + 1.0)),
                      ops.cast(unknown, "float32") / ops.maximum(s, 1.0), ops.log(s + 1.0),
                      ops.cast(unsure, "float32") / nf], axis=1)


@dataclasses.dataclass
class Calibrator:
    """``confidence = sigmoid(w . (x - mean) / scale + bias)`` over :data:`FEATURES` ``x``
    (``Calibrator.uncalibrated()``, ``exp(mean_log_prob)``, where a run has no fit).

    Args:
        mean, scale: per feature, the standardisation of the fit.
        weights: per feature. bias: float. report: what the fit measured.
    """
    mean: list
    scale: list
    weights: list
    bias: float
    report: dict = dataclasses.field(default_factory=dict)

    @classmethod
    def uncalibrated(cls):
        """``exp(mean_log_prob)``: a probability, but not a calibrated one."""
        return cls([0.0] * len(FEATURES), [1.0] * len(FEATURES), [0.0] * len(FEATURES), 0.0,
                   {"calibrated": False})

    @property
    def calibrated(self):
        return self.report.get("calibrated", True)

    def __call__(self, x, ops=None):
        """Confidences ``(B,)`` float32 in [0, 1] for features ``x`` ``(B, F)``."""
        ops = _ops(ops)
        x = ops.cast(x, "float32")
        if not self.calibrated:
            return ops.exp(x[:, 0])
        z = (x - np.asarray(self.mean, "float32")) / np.asarray(self.scale, "float32")
        return ops.sigmoid(ops.sum(z * np.asarray(self.weights, "float32"), axis=1)
                           + np.float32(self.bias))

    def to_dict(self):
        return {"features": list(FEATURES), **dataclasses.asdict(self)}

    @classmethod
    def from_dict(cls, d):
        if list(d.get("features", [])) != list(FEATURES):
            raise ValueError(f"a calibrator of features {d.get('features')} cannot read this "
                             f"version's {list(FEATURES)}: calibrate the run again "
                             "(keras-attn calibrate RUN_DIR)")
        return cls(d["mean"], d["scale"], d["weights"], d["bias"], d.get("report", {}))

    def save(self, path):
        from keras_attn.core import runs

        runs.write_json(path, self.to_dict())

    @classmethod
    def load(cls, path):
        with open(path, encoding="utf-8") as f:
            return cls.from_dict(json.load(f))


def fit(x, y, sample_weight=None, l2=1e-2, iterations=50):
    """A :class:`Calibrator` fitted by L2-regularised logistic regression (Newton's method) to
    features ``x`` ``(N, F)`` and labels ``y`` ``(N,)`` (1 = acceptable).

    Example:
        >>> cal = fit(x, y)
        >>> cal(x)  # the fitted probabilities
    """
    x = np.asarray(x, "float64")
    y = np.asarray(y, "float64")
    if x.ndim != 2 or x.shape[1] != len(FEATURES) or len(y) != len(x):
        raise ValueError(f"`x` must have shape (N, {len(FEATURES)}) and `y` shape (N,). "
                         f"Received: x {x.shape}, y {y.shape}")
    if not len(y):
        raise ValueError("cannot fit a calibrator to no examples")
    w = np.ones(len(y)) if sample_weight is None else np.asarray(sample_weight, "float64")
    mean, scale = x.mean(0), x.std(0)
    scale = np.where(scale > 1e-6, scale, 1.0)  # a constant feature gets no weight
    z = np.c_[(x - mean) / scale, np.ones(len(x))]
    ridge = l2 * np.diag(np.r_[np.ones(z.shape[1] - 1), 0.0])  # the bias is not shrunk
    beta = np.zeros(z.shape[1])
    for _ in range(iterations):
        p = 1.0 / (1.0 + np.exp(-z @ beta))
        grad = z.T @ (w * (p - y)) + ridge @ beta
        hessian = (z * (w * p * (1 - p))[:, None]).T @ z + ridge
        step = np.linalg.solve(hessian, grad)
        beta -= step
        if np.max(np.abs(step)) < 1e-10:
            break
    return Calibrator(mean.tolist(), scale.tolist(), beta[:-1].tolist(), float(beta[-1]))


def auroc(confidence, acceptable):
    """Area under the ROC curve of ``confidence`` telling acceptable (1) from not (0), ties
    counting half; NaN when one class is empty.
    """
    p, y = np.asarray(confidence, "float64"), np.asarray(acceptable).astype(bool)
    pos, neg = p[y], p[~y]
    if not len(pos) or not len(neg):
        return float("nan")
    order = np.argsort(np.r_[pos, neg], kind="mergesort")
    ranks = np.empty(len(order))
    values = np.r_[pos, neg][order]
    # Average ranks over ties (Mann-Whitney U).
    _, first, counts = np.unique(values, return_index=True, return_counts=True)
    ranks[order] = np.repeat(first + (counts - 1) / 2.0 + 1.0, counts)
    return float((ranks[: len(pos)].sum() - len(pos) * (len(pos) + 1) / 2.0)
                 / (len(pos) * len(neg)))


def expected_calibration_error(confidence, acceptable, bins=10):
    """ECE over ``bins`` equal-width bins, and the per-bin table ``[(low, high, count, mean
    confidence, share acceptable)]`` of a reliability diagram.
    """
    p, y = np.asarray(confidence, "float64"), np.asarray(acceptable, "float64")
    index = np.minimum((p * bins).astype(int), bins - 1)
    total, table = 0.0, []
    for b in range(bins):
        m = index == b
        if m.any():
            total += m.mean() * abs(p[m].mean() - y[m].mean())
            table.append((b / bins, (b + 1) / bins, int(m.sum()), float(p[m].mean()),
                          float(y[m].mean())))
    return float(total), table


def hypothesis_features(model, source, tokens, start_id, end_id, encoded=None):
    """:func:`features` ``(B * N, F)`` of hypotheses, from one teacher-forced pass.

    Args:
        model: from ``keras_attn.models``. source: int ``(B, S)``.
        tokens: int ``(B * N, T)``, N hypotheses per source row together.
        start_id, end_id: the target vocabulary's ``[START]`` and ``[END]``.
        encoded: :func:`keras_attn.decoding.encode`'s output, if computed.
    """
    from keras import ops

    from keras_attn.decoding.search import score
    from keras_attn.decoding.step import encode, repeat_rows

    source = ops.cast(source, "int32")
    tokens = ops.cast(tokens, "int32")
    if encoded is None:
        encoded = encode(model, source)
    if not fastpath.current().compiled:  # read as far as the longest hypothesis (not XLA)
        longest = ops.max(ops.concatenate([ops.sum(ops.cast(ops.not_equal(tokens, 0), "int32"),
                                                   axis=1), ops.ones((1,), "int32")], axis=0))
        tokens = tokens[:, :longest]
    n = ops.shape(tokens)[0] // ops.maximum(ops.shape(source)[0], 1)  # 0 rows: n = 0
    source, encoded = repeat_rows(source, encoded, n)
    out = score(model, source, tokens, start_id, end_id, 0.0, encoded)
    return features(out["token_log_probs"], out["lengths"], source)
