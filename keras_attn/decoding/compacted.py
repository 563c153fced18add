"""TensorFlow only: the decoding loop that drops the rows that ended from the step's work
(greedy decoding and sampling, where shapes may change). Its results are the plain loop's.
"""
import keras
import tensorflow as tf
from keras import ops

from keras_attn.decoding.processors import StepState


def compacted_loop(sampler, steps, batch, limit, processors, row_limit):
    """``sampler``'s loop over the unfinished rows only: a row leaves the loop's state at the
    step it ends, writing its results into the whole-batch buffers.

    Args:
        sampler: a ``Sampler`` that does not reorder rows. steps: its ``DecodingStep``.
        batch: sentences B. limit: int32 scalar, the most tokens. processors: the call's
            ``LogitsProcessorList``. row_limit: int32 ``(B * K,)`` or None.

    Returns: the dict of ``Sampler.__call__`` (without ``attention``).
    """
    k, max_len, n = sampler.beams, sampler.max_len, batch * sampler.beams

    def relax(t):  # rows first, how many is left open: the loop drops rows
        return tf.compat.v1.placeholder_with_default(t, (None,) + tuple(t.shape[1:]))

    def write(out, rows, scores, tokens):
        """``out`` with ``rows`` done: their ``tokens`` so far, length and score."""
        length = tf.shape(tokens)[1]
        padded = tf.pad(tokens, [[0, 0], [0, max_len - length]])
        at = rows[:, None]
        return {"tokens": tf.tensor_scatter_nd_update(out["tokens"], at, padded),
                "lengths": tf.tensor_scatter_nd_update(
                    out["lengths"], at, tf.fill(tf.shape(rows), length)),
                "scores": tf.tensor_scatter_nd_update(out["scores"], at, scores)}

    def cond(i, token, state, rows, scores, tokens, out):
        return ops.logical_and(i < limit, ops.shape(rows)[0] > 0)

    def body(i, token, state, rows, scores, tokens, out):
        logits, state, _ = steps.step(token, state, i)
        logits = processors(logits, StepState(i, tokens, rows))
        logits = ops.expand_dims(logits, 1)  # (N, 1, V): one hypothesis per row here
        token, _, scores = sampler.select(logits, ops.expand_dims(scores, 1), None, i, rows)
        token, scores = token[:, 0], scores[:, 0]
        tokens = ops.concatenate([tokens, ops.expand_dims(token, 1)], axis=1)
        going = ops.not_equal(token, sampler.end_id)
        if row_limit is not None:  # each row's own length limit
            going = ops.logical_and(going, i + 1 < ops.take(row_limit, rows))

        def drop_ended():
            ended, keep = (tf.reshape(tf.where(m), (-1,)) for m in (~going, going))
            done = write(out, *(tf.gather(t, ended) for t in (rows, scores, tokens)))
            kept = tf.nest.map_structure(lambda t: tf.gather(t, keep),
                                         (token, state, rows, scores, tokens))
            return (*kept, done)

        # Copies only at the steps where some row ends.
        token, state, rows, scores, tokens, out = tf.cond(
            tf.reduce_all(going), lambda: (token, state, rows, scores, tokens, out),
            drop_ended)
        return i + 1, token, state, rows, scores, tokens, out

    out = {"tokens": ops.zeros((n, max_len), "int32"), "lengths": ops.zeros((n,), "int32"),
           "scores": ops.zeros((n,), "float32")}
    loop_vars = (ops.convert_to_tensor(0, "int32"),
                 relax(ops.full((n,), sampler.start_id, "int32")),
                 keras.tree.map_structure(relax, steps.init(carry_constants=True)),
                 relax(ops.arange(n, dtype="int32")),
                 relax(ops.reshape(sampler.initial_scores(batch), (-1,))),
                 tf.compat.v1.placeholder_with_default(tf.zeros((n, 0), "int32"),
                                                       (None, None)), out)
    _, _, _, rows, scores, tokens, out = ops.while_loop(cond, body, loop_vars)
    out = write(out, rows, scores, tokens)  # the rows that reached the limit
    return {"tokens": ops.reshape(out["tokens"], (batch, k, max_len)),
            "lengths": ops.reshape(out["lengths"], (batch, k)),
            "log_prob": ops.reshape(out["scores"], (batch, k))}
