"""Repetition controls: what every step's logits go through before a sampler chooses.

CTranslate2's ``repetition_penalty`` and ``no_repeat_ngram_size`` (Hugging Face's
``generate`` has the same two), and Marian's ``--max-length-factor``. Each reads the
hypotheses' tokens so far (``history``), so the loops need no state of their own for them,
and each is written with ``keras.ops`` (every backend, XLA, TFLite builtins). The values may
be tensors (per-request inputs of a served graph); a Python value that switches a control
off (:func:`active`) leaves its ops out of the graph.

References: Keskar et al. 2019 (CTRL), section 4.1 (the repetition penalty); Paulus et al.
2018 (no repeated trigrams); Marian's ``--max-length-factor``.
"""
from keras import ops

from keras_attn.decoding.step import NEG

MAX_NGRAM = 8  # the largest no_repeat_ngram_size (the n-gram match is unrolled this far)
OFF = {"repetition_penalty": 1.0, "no_repeat_ngram_size": 0, "max_length_factor": 0.0}


def active(name, value):
    """False when ``value`` is a Python number that switches control ``name`` off (its ops
    are then left out); True for a tensor (a served request decides at run time)."""
    return value is not None and not (isinstance(value, (int, float)) and value == OFF[name])


def _seen(history, length, vocab):
    """bool ``(N, V)``: the ids among each row's first ``length`` tokens of ``history``
    ``(N, T)`` (padding excluded)."""
    rows, width = ops.shape(history)[0], ops.shape(history)[1]
    valid = ops.logical_and(ops.arange(width)[None, :] < length, ops.not_equal(history, 0))
    row_ids = ops.broadcast_to(ops.arange(rows, dtype="int32")[:, None], ops.shape(history))
    index = ops.stack([ops.reshape(row_ids, (-1,)), ops.reshape(history, (-1,))], axis=1)
    counts = ops.scatter(index, ops.reshape(ops.cast(valid, "float32"), (-1,)), (rows, vocab))
    return counts > 0


def penalize_repeats(logits, history, length, penalty):
    """CTranslate2's ``repetition_penalty``: the logit of every id already among a row's
    tokens is divided by ``penalty`` when positive and multiplied by it when negative
    (``penalty > 1`` makes a repeat less likely; 1 changes nothing).

    Args:
        logits: float32 ``(N, V)``. history: int32 ``(N, T)`` tokens so far (0: none).
        length: int32 scalar, how many positions of ``history`` are written.
        penalty: float32 scalar > 0.
    """
    penalty = ops.cast(penalty, "float32")
    seen = _seen(history, length, ops.shape(logits)[-1])
    penalized = ops.where(logits < 0, logits * penalty, logits / penalty)
    return ops.where(seen, penalized, logits)


def ban_repeated_ngrams(logits, history, length, n):
    """CTranslate2's ``no_repeat_ngram_size``: the ids that would complete an n-gram already
    among a row's tokens are banned (at the fill value). ``n = 1`` bans every id seen
    before (as CTranslate2 and Hugging Face); 0 bans nothing.

    Args:
        logits: float32 ``(N, V)``. history: int32 ``(N, T)``. length: int32 scalar, the
            written positions (the next token goes at position ``length``).
        n: int32 scalar in ``[0, MAX_NGRAM]`` (0: off).
    """
    n = ops.cast(n, "int32")
    rows, width = ops.shape(history)[0], ops.shape(history)[1]
    vocab = ops.shape(logits)[-1]
    padded = ops.pad(history, [[0, 0], [0, MAX_NGRAM]])  # room for the shifted windows
    starts = ops.arange(width, dtype="int32")  # j: a candidate n-gram starts here
    # The (n-1)-gram the next token would complete: positions length-n+1 .. length-1.
    match = ops.ones((rows, width), "bool")
    for m in range(MAX_NGRAM - 1):
        at = ops.maximum(length - n + 1 + m, 0)
        suffix = ops.take(padded, ops.minimum(at, width + MAX_NGRAM - 1), axis=1)  # (N,)
        equal = ops.equal(padded[:, m:m + width], suffix[:, None])
        match = ops.logical_and(match, ops.logical_or(equal, m >= n - 1))
    match = ops.logical_and(match, starts[None, :] <= length - n)  # the n-gram is complete
    match = ops.logical_and(match, n >= 1)
    # The token that followed each matching (n-1)-gram is banned.
    follow = ops.minimum(starts + n - 1, width + MAX_NGRAM - 1)
    nxt = ops.take(padded, follow, axis=1)  # (N, width)
    row_ids = ops.broadcast_to(ops.arange(rows, dtype="int32")[:, None], (rows, width))
    index = ops.stack([ops.reshape(row_ids, (-1,)), ops.reshape(nxt, (-1,))], axis=1)
    hits = ops.scatter(index, ops.reshape(ops.cast(match, "float32"), (-1,)), (rows, vocab))
    return ops.where(hits > 0, NEG, logits)


def row_limits(source, factor, max_len):
    """int32 ``(N,)``: the most tokens each row may generate under Marian's
    ``--max-length-factor``: ``ceil(factor * source tokens)`` (``[END]`` included, padding
    not), at least 1; ``max_len`` where ``factor`` is 0 (off)."""
    factor = ops.cast(factor, "float32")
    src_len = ops.sum(ops.cast(ops.not_equal(source, 0), "float32"), axis=1)
    limit = ops.maximum(ops.cast(ops.ceil(factor * src_len), "int32"), 1)
    return ops.where(factor > 0, ops.minimum(limit, max_len), max_len)
