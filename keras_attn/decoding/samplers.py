"""The decoding loops: a :class:`Sampler` per way of choosing the next tokens.

:class:`Sampler` owns the loop (``keras.ops.while_loop``: every backend, XLA, SavedModel
and TFLite); the subclasses only choose the next tokens. Every buffer is preallocated at
``max_len`` and written at the step index (under XLA a dynamic-size ``TensorArray``'s writes
can be dropped). Tokens: 0 is padding; ``start_id`` and 0 are never generated; a row stops
at ``end_id`` (included) and is padded with 0 after it.

References: D2L 10.8 (beam search); keras-hub's ``Sampler``.
"""
import functools

import keras
from keras import ops

from keras_attn.decoding.processors import (NEG, StepState, length_limits,
                                            processors_for)
from keras_attn.decoding.rng import uniform
from keras_attn.decoding.step import check_source, encode, repeat_rows, step_functions
from keras_attn.kernels import fastpath

_POSITION_MAJOR = ("tokens", "attention")  # the loop's buffers written one position a step


class Sampler:
    """The decoding loop; subclasses choose the next tokens (:meth:`select`).

    Hypotheses are laid out ``(B, K)`` (``K = beams``; the model sees ``B * K`` rows).

    Args:
        max_len: most tokens generated per row. start_id, end_id: target vocabulary ids.
        use_cache: decode with the key/value cache (False: the reference).
        return_attention: also return the alignments.
        compact: drop the rows that ended from the step's work where the loop can.

    Call arguments: ``model`` (from :mod:`keras_attn.models`), ``source`` int ``(B, S)``.

    Returns a dict: ``tokens`` int32 ``(B, K, max_len)`` (0 after ``end_id``), ``lengths``
    int32 ``(B, K)``, ``log_prob`` float32 ``(B, K)`` and with ``return_attention``
    ``attention`` float32 ``(B, K, max_len, S)``.
    """

    beams = 1
    reorders = False  # whether select() moves hypotheses between rows (beam search)

    def __init__(self, max_len, start_id, end_id, use_cache=True, return_attention=False,
                 compact=True):
        _check_id("max_len", max_len)
        _check_id("start_id", start_id)
        _check_id("end_id", end_id)
        self.max_len, self.start_id, self.end_id = max_len, start_id, end_id
        self.use_cache, self.return_attention = bool(use_cache), bool(return_attention)
        self.compact = bool(compact)

    def select(self, logits, scores, finished, index=None, rows=None):
        """Choose the next tokens.

        Args:
            logits: float32 ``(B, K, V)``. scores: ``(B, K)`` summed log-probabilities so far.
            finished: bool ``(B, K)``, or None: none has. index: the step (int32 scalar).
            rows: int32 ``(B * K,)`` the hypotheses' numbers in the batch (default ``0 ..``).

        Returns ``(next_tokens (B, K), beam_indices (B, K) or None, new_scores (B, K))``;
        ``beam_indices``: which hypothesis each new one extends (None: its own).
        """
        raise NotImplementedError

    def initial_scores(self, batch):
        return ops.zeros((batch, self.beams), "float32")

    def __call__(self, model, source, max_length=None, prefix=None, encoded=None,
                 options=None):
        """Run the loop on ``model`` and ``source`` (see the class).

        Args:
            max_length: optional int32 scalar (a tensor is fine), at most ``max_len``.
            prefix: optional int32 ``(B, P)`` target ids forced first (0 = none left); they
                count 0 in the scores, 1 each in the lengths.
            encoded: :func:`encode` ``(model, source)``, if already computed.
            options: the request's ``DecodingOptions``, for the processors and row limits;
                None: the bans alone.
        """
        source = check_source(source)
        k, max_len = self.beams, self.max_len
        batch, src_len = ops.shape(source)[0], ops.shape(source)[1]
        if encoded is None:
            encoded = encode(model, source)
        if not isinstance(k, int) or k > 1:  # encoded once per sentence, repeated K times
            source, encoded = repeat_rows(source, encoded, k)  # (B*K, S)
        steps = step_functions(model, source, max_len, self.use_cache, encoded)
        limit = max_len if max_length is None else ops.minimum(
            ops.cast(max_length, "int32"), max_len)
        processors = processors_for(options, self.start_id, steps.decoder.vocab_size, prefix, k)
        run = functools.partial(self._run, steps, batch, src_len, limit,
                                row_limit=length_limits(options, source, max_len))
        if processors.gate is not None and fastpath.current().dynamic_shapes:
            # A loop without the controls' ops where a request turns all off (not in TFLite
            # or XLA: the file or the compiled code would hold both loops).
            return ops.cond(processors.gate, lambda: run(processors),
                            lambda: run(processors.bans_only()))
        return run(processors)

    def _run(self, steps, batch, src_len, limit, processors, row_limit):
        """The compacted loop where this call :meth:`compacts` rows, else :meth:`_loop`."""
        plain = functools.partial(self._loop, steps, batch, src_len, limit, processors, row_limit)
        rows = batch * self.beams  # int: a shape known when traced
        if not self.compacts() or (isinstance(rows, int) and rows <= 1):
            return plain()  # one row: nothing to drop, and the plain loop's step is lighter
        import tensorflow as tf  # compacts(): on TensorFlow only

        from keras_attn.decoding.compacted import compacted_loop

        compacted = functools.partial(compacted_loop, self, steps, batch, limit, processors,
                                      row_limit)
        return compacted() if isinstance(rows, int) else tf.cond(rows > 1, compacted, plain)

    def _loop(self, steps, batch, src_len, limit, processors, row_limit):
        """The loop over every row; a row ends at ``end_id`` or its ``row_limit`` (or None)."""
        k, max_len = self.beams, self.max_len

        def cond(i, token, state, out):
            return ops.logical_and(i < limit, ops.logical_not(ops.all(out["finished"])))

        def body(i, token, state, out):
            logits, state, align = steps.step(token, state, i, self.return_attention)
            finished = out["finished"]
            history = None
            if processors.reads_history:  # the hypotheses' tokens so far, rows first
                history = ops.reshape(ops.transpose(out["tokens"], (1, 2, 0)), (-1, max_len))
            logits = processors(logits, StepState(i, history))
            logits = ops.reshape(logits, (batch, k, logits.shape[-1] or -1))  # V kept static
            next_token, beam, scores = self.select(logits, out["scores"], finished, i)
            out = dict(out, scores=scores)
            if beam is not None:  # reorder everything that belongs to a hypothesis
                rows = ops.reshape(beam + ops.arange(batch)[:, None] * k, (-1,))
                state = keras.tree.map_structure(lambda t: ops.take(t, rows, axis=0), state)
                out = {name: t if name == "scores" else
                       take_beams(t, beam, axis=2 if name in _POSITION_MAJOR else 1)
                       for name, t in out.items()}
                finished = out["finished"]
            at = ops.reshape(i, (1, 1))  # position i of the position-major buffers
            out["lengths"] = out["lengths"] + ops.cast(ops.logical_not(finished), "int32")
            out["tokens"] = ops.scatter_update(out["tokens"], at, ops.expand_dims(next_token, 0))
            if self.return_attention:
                align = ops.reshape(ops.cast(align, "float32"), (1, batch, k, -1))
                out["attention"] = ops.scatter_update(out["attention"], at, align)
            out["finished"] = ops.logical_or(finished, ops.equal(next_token, self.end_id))
            if row_limit is not None:  # each row's own length limit
                reached = out["lengths"] >= ops.reshape(row_limit, (batch, k))
                out["finished"] = ops.logical_or(out["finished"], reached)
            return i + 1, ops.reshape(next_token, (-1,)), state, out

        out = {"tokens": ops.zeros((max_len, batch, k), "int32"),
               "finished": ops.zeros((batch, k), "bool"),
               "lengths": ops.zeros((batch, k), "int32"), "scores": self.initial_scores(batch)}
        if self.return_attention:
            out["attention"] = ops.zeros((max_len, batch, k, src_len), "float32")
        loop_vars = (ops.convert_to_tensor(0, "int32"),
                     ops.full((batch * k,), self.start_id, "int32"), steps.init(), out)
        _, _, _, out = ops.while_loop(cond, body, loop_vars)
        result = {"tokens": ops.transpose(out["tokens"], (1, 2, 0)), "lengths": out["lengths"],
                  "log_prob": out["scores"]}
        if self.return_attention:
            result["attention"] = ops.transpose(out["attention"], (1, 2, 0, 3))
        return result

    def compacts(self):
        """Whether this call's loop drops finished rows (cached, no reorders, no alignments)."""
        if not (self.compact and self.use_cache) or self.reorders or self.return_attention:
            return False
        return fastpath.current().growing_cache()


class GreedySampler(Sampler):
    """The most likely next token, for each row (one hypothesis per row)."""

    def select(self, logits, scores, finished, index=None, rows=None):
        # top_k rather than argmax: Keras's TF argmax adds a BitwiseAnd (its -0.0 rule)
        # that TFLite has no builtin for; ties go to the lower id either way.
        top, index = ops.top_k(logits, k=1)  # (B, 1, 1)
        # The best token's log-softmax without normalising the whole vocabulary.
        log_prob = -ops.log(ops.sum(ops.exp(logits - top), axis=-1))  # (B, 1)
        return _extend(finished, ops.cast(index[..., 0], "int32"), scores, log_prob)


class BeamSampler(Sampler):
    """The ``beam_size`` best extensions of a row's hypotheses, by summed log-probability."""

    reorders = True

    def __init__(self, beam_size, max_len, start_id, end_id):
        _check_count("beam_size", beam_size)
        super().__init__(max_len, start_id, end_id, use_cache=True)
        self.beams = beam_size

    def initial_scores(self, batch):
        first = ops.concatenate([ops.zeros((1,)), ops.full((self.beams - 1,), NEG)])
        return ops.tile(ops.cast(first, "float32")[None, :], (batch, 1))

    def select(self, logits, scores, finished, index=None, rows=None):
        log_probs = ops.log_softmax(logits, axis=-1)
        vocab = ops.shape(log_probs)[-1]
        pad_only = ops.where(ops.arange(vocab) == 0, 0.0, NEG)  # a finished one: 0, free
        # expand_dims, not [..., None]: TFLite has no builtin for a new axis on rank 2.
        log_probs = ops.where(ops.expand_dims(finished, -1), pad_only, log_probs)
        flat = ops.reshape(ops.expand_dims(scores, -1) + log_probs, (ops.shape(scores)[0], -1))
        top, index = ops.top_k(flat, k=self.beams)  # (B, K) of the K * V extensions
        return ops.cast(index % vocab, "int32"), ops.cast(index // vocab, "int32"), top


class RandomSampler(Sampler):
    """Sampling with top-k, top-p (nucleus) and temperature; ``samples`` draws per row.

    ``topk``, ``topp``, ``temperature`` and ``seed`` may be tensors; ``topk=1`` is the
    argmax. The token is drawn by inverse CDF (:func:`uniform`) over the candidates sorted by
    probability; scores sum the model's log-probabilities (before temperature and truncation).
    """

    def __init__(self, max_len, start_id, end_id, samples=1, topk=1, topp=1.0,
                 temperature=1.0, seed=0, use_cache=True, return_attention=False,
                 compact=True):
        _check_count("num_hypotheses", samples)
        super().__init__(max_len, start_id, end_id, use_cache, return_attention, compact)
        self.beams = samples
        self.topk, self.topp, self.temperature, self.seed = topk, topp, temperature, seed

    def select(self, logits, scores, finished, index=None, rows=None):
        batch, k, vocab = ops.shape(logits)[0], ops.shape(logits)[1], logits.shape[-1]
        flat = ops.reshape(logits, (-1, vocab))
        values, ids = ops.top_k(flat, k=vocab)  # sorted, ties to the lower id
        model_lp = ops.log_softmax(values, axis=-1)
        scaled = values / ops.cast(self.temperature, "float32")
        rank = ops.arange(vocab, dtype="int32")[None, :]
        scaled = ops.where(rank < ops.cast(self.topk, "int32"), scaled, NEG)
        probs = ops.softmax(scaled, axis=-1)
        before = ops.cumsum(probs, axis=-1) - probs  # mass of the more likely candidates
        probs = ops.where(ops.logical_or(rank == 0, before < ops.cast(self.topp, "float32")),
                          probs, 0.0)
        cdf = ops.cumsum(probs, axis=-1)
        if rows is None:
            rows = ops.arange(ops.shape(flat)[0], dtype="int32")
        u = uniform(self.seed, rows, 0 if index is None else index) * cdf[:, -1]
        pick = ops.sum(ops.cast(cdf[:, :-1] <= u[:, None], "int32"), axis=-1)  # (B*K,)
        pick = ops.minimum(pick, ops.sum(ops.cast(probs > 0, "int32"), axis=-1) - 1)
        token = ops.take_along_axis(ids, pick[:, None], axis=1)[:, 0]
        lp = ops.take_along_axis(model_lp, pick[:, None], axis=1)[:, 0]
        token = ops.reshape(ops.cast(token, "int32"), (batch, k))
        return _extend(finished, token, scores, ops.reshape(lp, (batch, k)))


def _extend(finished, token, scores, log_prob):
    """``select``'s result: a finished hypothesis extends with 0 at no cost (None: none)."""
    if finished is None:
        return token, None, scores + log_prob
    return ops.where(finished, 0, token), None, scores + ops.where(finished, 0.0, log_prob)


def take_beams(t, beam, axis=1):
    """``t`` ``(B, K, ...)`` (``axis=1``) or ``(L, B, K, ...)`` (``axis=2``) reordered by beam."""
    shape = (1,) * (axis - 1) + tuple(ops.shape(beam)) + (1,) * (len(t.shape) - axis - 1)
    target = list(ops.shape(t))
    target[axis] = ops.shape(beam)[1]  # fewer than K: the first N of a ranking (n-best)
    index = ops.broadcast_to(ops.reshape(beam, shape), target)
    return ops.take_along_axis(t, index, axis=axis)


def _check_id(name, value):
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        what = "a positive integer" if name in ("max_len", "beam_size") else "a positive token id"
        raise ValueError(f"`{name}` must be {what}. Received: {name}={value!r}")


def _check_count(name, value):
    """A number of hypotheses: a positive Python int, or an int32 tensor (checked by the graph)."""
    if isinstance(value, (bool, int)):
        _check_id(name, value)
