"""What every step's logits go through before a sampler chooses: one ordered list.

A processor is a callable ``(logits, state) -> logits`` on float32 logits ``(N, V)`` and a
:class:`StepState`. In order: the banned ids (padding, ``[START]``), CTranslate2's
``repetition_penalty`` and ``no_repeat_ngram_size``, the forced prefix. Option values may
be tensors; a Python value that switches a control off leaves its processor out. Marian's
``--max-length-factor`` is the stop rule (:func:`length_limits`).

References: Hugging Face ``LogitsProcessorList``; Keskar et al. 2019 (CTRL), section 4.1;
Paulus et al. 2018 (no repeated trigrams); Marian's ``--max-length-factor``.
"""
import functools

from keras import ops

from keras_attn import ops as attn_ops
from keras_attn.core.special_tokens import PAD_ID

NEG = attn_ops.large_negative("float32")  # the logit of a banned token
MAX_NGRAM = 8  # the largest no_repeat_ngram_size (the n-gram match is unrolled this far)
OFF = {"max_length_factor": 0.0}  # each option's value that switches it off


class StepState:
    """What the processors read at one step.

    Args:
        index: int32 scalar, the position the next token goes at.
        history: int32 ``(N, T)``, each hypothesis's tokens so far (0 = none), or None when
            no processor reads it.
        rows: int32 ``(N,)``, the hypotheses' rows in the ``B * K`` batch; None: ``0 .. N - 1``.
    """

    def __init__(self, index, history=None, rows=None):
        self.index, self.history, self.rows = index, history, rows


class LogitsProcessorList(list):
    """Processors applied in order: ``procs(logits, state) -> logits``.

    ``gate``: None, or a bool scalar tensor, false where no processor after the bans changes
    anything for this request: a loop may then run :meth:`bans_only`.
    """

    gate = None

    def __call__(self, logits, state):
        for processor in self:
            logits = processor(logits, state)
        return logits

    def bans_only(self):
        """The list of the first processor alone (the bans), without a gate."""
        return LogitsProcessorList(self[:1])

    @property
    def reads_history(self):
        """Whether a processor reads :attr:`StepState.history` (the loop then builds it)."""
        return any(getattr(p, "reads_history", False) for p in self)


_BY_OPTION = []  # (option name, class), in the order they apply


def from_option(name, off):
    """Register a processor class made from option ``name``; ``off`` leaves it out."""
    def register(cls):
        OFF[name] = off
        _BY_OPTION.append((name, cls))
        return cls
    return register


def active(name, value):
    """Whether option ``name``'s ``value`` switches its processor on (a tensor always does)."""
    return value is not None and not (isinstance(value, (int, float)) and value == OFF[name])


class BanIds:
    """Ids never generated (``ids``: padding and ``[START]``) get the fill value.

    Args:
        ids: the banned ids. vocab_size: V (the mask is made once, outside any loop).
    """

    def __init__(self, ids, vocab_size):
        vocab = ops.arange(vocab_size, dtype="int32")
        banned = ops.zeros((vocab_size,), "bool")
        for i in ids:
            banned = ops.logical_or(banned, ops.equal(vocab, i))
        self.banned = banned

    def __call__(self, logits, state=None):
        return ops.where(self.banned, NEG, ops.cast(logits, "float32"))


def _hits(ids, hit, vocab):
    """bool ``(N, V)``: the ids of ``ids`` ``(N, W)`` where ``hit`` ``(N, W)`` holds."""
    rows = ops.shape(ids)[0]
    row_ids = ops.broadcast_to(ops.arange(rows, dtype="int32")[:, None], ops.shape(ids))
    index = ops.stack([ops.reshape(row_ids, (-1,)), ops.reshape(ids, (-1,))], axis=1)
    return ops.scatter(index, ops.reshape(ops.cast(hit, "float32"), (-1,)), (rows, vocab)) > 0


@from_option("repetition_penalty", off=1.0)
class RepetitionPenalty:
    """CTranslate2's ``repetition_penalty``: the logit of an id already generated is divided by
    ``penalty`` when positive, multiplied by it when negative (1 changes nothing).

    Args:
        penalty: float32 scalar > 0 (a tensor is fine).
    """

    reads_history = True

    def __init__(self, penalty):
        self.penalty = penalty

    def __call__(self, logits, state):
        penalty, history = ops.cast(self.penalty, "float32"), state.history
        valid = ops.logical_and(ops.arange(ops.shape(history)[1])[None, :] < state.index,
                                ops.not_equal(history, 0))  # the tokens so far
        seen = _hits(history, valid, ops.shape(logits)[-1])
        penalized = ops.where(logits < 0, logits * penalty, logits / penalty)
        return ops.where(seen, penalized, logits)


@from_option("no_repeat_ngram_size", off=0)
class NoRepeatNgram:
    """CTranslate2's ``no_repeat_ngram_size``: the ids that would complete an n-gram already
    generated are banned; ``n = 1`` bans every id seen before, 0 nothing.

    Args:
        n: int32 scalar in ``[0, MAX_NGRAM]`` (a tensor is fine).
    """

    reads_history = True

    def __init__(self, n):
        self.n = n

    def __call__(self, logits, state):
        n, history, length = ops.cast(self.n, "int32"), state.history, state.index
        width = ops.shape(history)[1]
        padded = ops.pad(history, [[0, 0], [0, MAX_NGRAM]])  # room for the shifted windows
        starts = ops.arange(width, dtype="int32")  # j: a candidate n-gram starts here
        offsets = ops.arange(MAX_NGRAM - 1, dtype="int32")  # m: a position in the window
        # The (n-1)-gram the next token would complete: positions length-n+1 .. length-1
        # (offsets from n-1 on match anything), against every window j .. j+MAX_NGRAM-2.
        at = ops.minimum(ops.maximum(length - n + 1 + offsets, 0), width + MAX_NGRAM - 1)
        suffix = ops.take(padded, at, axis=1)  # (N, MAX_NGRAM - 1)
        windows = ops.take(padded, ops.expand_dims(starts, 1) + offsets, axis=1)  # (N, W, M-1)
        equal = ops.logical_or(ops.equal(windows, ops.expand_dims(suffix, 1)),
                               offsets >= n - 1)
        match = ops.all(equal, axis=-1)  # (N, width)
        match = ops.logical_and(match, starts[None, :] <= length - n)  # the n-gram is complete
        match = ops.logical_and(match, n >= 1)
        # The token that followed each matching (n-1)-gram is banned.
        follow = ops.minimum(starts + n - 1, width + MAX_NGRAM - 1)
        nxt = ops.take(padded, follow, axis=1)  # (N, width)
        return ops.where(_hits(nxt, match, ops.shape(logits)[-1]), NEG, logits)


class ForcePrefix:
    """Every id but the prefix's token at this step is banned, in rows whose prefix has one.

    Args:
        prefix: int32 ``(B, P)`` target ids per sentence (0: none left for that row).
        beams: hypotheses per sentence K (row ``r`` is sentence ``r // K``; a tensor is fine).
    """

    def __init__(self, prefix, beams=1):
        self.prefix, self.beams = ops.cast(ops.convert_to_tensor(prefix), "int32"), beams

    def __call__(self, logits, state):
        prefix, index = self.prefix, state.index
        prefix_len = ops.shape(prefix)[1]
        at = ops.minimum(index, prefix_len - 1)
        forced = ops.where(index < prefix_len, ops.take(prefix, at, axis=1), 0)  # (B,)
        rows = (ops.arange(ops.shape(logits)[0], dtype="int32") if state.rows is None
                else state.rows)
        forced = ops.take(forced, ops.floor_divide(rows, self.beams))[:, None]  # (N, 1)
        keep = ops.equal(ops.arange(ops.shape(logits)[-1], dtype="int32")[None, :], forced)
        return ops.where(ops.logical_or(forced == 0, keep), logits, NEG)


def processors_for(options, start_id, vocab_size, prefix=None, beams=1):
    """The ordered :class:`LogitsProcessorList` of one call.

    Args:
        options: the request's ``DecodingOptions`` (tensors allowed), or None (bans alone).
        start_id: banned besides padding. vocab_size: V.
        prefix: optional int32 ``(B, P)`` target ids forced first (0: none left).
        beams: hypotheses per sentence (the rows of a prefix's sentence).

    Example:
        >>> procs = processors_for(options, start_id=2, vocab_size=V)
        >>> logits = procs(logits, StepState(index, history))
    """
    procs = LogitsProcessorList([BanIds((PAD_ID, start_id), vocab_size)])
    gates = []  # per processor: a bool tensor (on for this request), or None (always on)
    for name, cls in _BY_OPTION:
        value = getattr(options, name, None)
        if active(name, value):
            procs.append(cls(value))
            gates.append(None if isinstance(value, (int, float)) else
                         ops.not_equal(value, OFF[name]))
    if prefix is not None:
        procs.append(ForcePrefix(prefix, beams))
        gates.append(ops.any(ops.not_equal(procs[-1].prefix, 0)))
    if gates and all(gate is not None for gate in gates):
        procs.gate = functools.reduce(ops.logical_or, gates)
    return procs


def row_limits(source, factor, max_len):
    """int32 ``(N,)``: each row's most tokens, ``ceil(factor * source tokens)`` (0: max_len)."""
    factor = ops.cast(factor, "float32")
    src_len = ops.sum(ops.cast(ops.not_equal(source, 0), "float32"), axis=1)
    limit = ops.maximum(ops.cast(ops.ceil(factor * src_len), "int32"), 1)
    return ops.where(factor > 0, ops.minimum(limit, max_len), max_len)


def length_limits(options, source, max_len):
    """:func:`row_limits` of ``source`` ``(N, S)`` under ``options.max_length_factor``, or None."""
    factor = getattr(options, "max_length_factor", None)
    return row_limits(source, factor, max_len) if active("max_length_factor", factor) else None


def log_probs(logits, start_id):
    """float32 log-probabilities ``(..., V)`` with padding and ``start_id`` banned."""
    banned = BanIds((PAD_ID, start_id), logits.shape[-1])
    return ops.log_softmax(banned(logits), axis=-1)
