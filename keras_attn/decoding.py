"""Greedy and beam-search decoding as TF graph loops over fixed-size buffers.

The loops run eagerly, inside ``tf.function`` and under ``jit_compile=True`` (XLA), and
export into SavedModels and TFLite files. No dynamic-size ``TensorArray`` is used (under
XLA in TF 2.21 their writes can be silently dropped): every buffer is preallocated at
``max_len`` and written at the step index.

The Transformer decodes incrementally: each decoder layer keeps its self-attention keys and
values in ``(B, max_len, H, d_h)`` buffers and the cross-attention keys/values are computed
once from the encoder output, so a step costs the same at position 8 and at position 64.
``use_cache=False`` re-runs the decoder on the whole prefix at every step (the reference).
The Bahdanau model carries its GRU states.

Token conventions: 0 is padding; ``start_id`` and 0 are never generated; a row stops at
``end_id`` (included in the output) and is padded with 0 after it.

References: D2L 10.8 (beam search); Wu et al. 2016 (GNMT length penalty).
"""
import keras
import tensorflow as tf
from keras import ops

from keras_attn.models import model_kind

NEG_INF = -1e9


# --- one decoding step per model kind ------------------------------------------------------
class _TransformerStepper:
    """``init(source)`` -> (consts, state); ``step(consts, state, token, i)`` -> logits, state."""

    def __init__(self, model, max_len, use_cache):
        self.encoder = model.get_layer("encoder")
        self.decoder = model.get_layer("decoder")
        self.max_len = max_len
        self.use_cache = use_cache
        if max_len > self.decoder.max_len:
            raise ValueError(
                f"`max_len` must not exceed the decoder's positional table (max_len="
                f"{self.decoder.max_len}). Received: max_len={max_len}")

    def init(self, source, start_id):
        enc_outputs = self.encoder(source, training=False)
        cross_keep = ops.expand_dims(ops.not_equal(source, 0), 1)  # (B, 1, S)
        batch = ops.shape(source)[0]
        if self.use_cache:
            consts = (self.decoder.cross_key_values(enc_outputs), cross_keep)
            state = self.decoder.init_cache(batch, self.max_len)
        else:
            consts = (enc_outputs, cross_keep)
            # The prefix buffer: start token then the generated tokens.
            state = ops.zeros((batch, self.max_len), "int32")
        return consts, state

    def step(self, consts, state, token, index, start_id):
        if self.use_cache:
            cross_kvs, cross_keep = consts
            logits, state, cross = self.decoder.call_step(token[:, None], index, state,
                                                          cross_kvs, cross_keep)
            return logits, state, ops.mean(cross[-1][:, :, 0, :], axis=1)
        enc_outputs, cross_keep = consts
        state = ops.slice_update(state, (0, index), token[:, None])
        prefix = state[:, : index + 1]
        logits, maps = self.decoder(prefix, enc_outputs, enc_outputs_mask=cross_keep[:, 0],
                                    training=False, return_attention_scores=True)
        return logits[:, -1], state, ops.mean(maps["cross"][-1][:, :, -1, :], axis=1)


class _BahdanauStepper:
    def __init__(self, model, max_len, use_cache):
        self.encoder = model.get_layer("encoder")
        self.decoder = model.get_layer("decoder")
        self.max_len = max_len
        self.use_cache = use_cache

    def init(self, source, start_id):
        enc_outputs, enc_states = self.encoder(source, training=False)
        keep_mask = ops.not_equal(source, 0)
        projected, keep = self.decoder.prepare(enc_outputs, enc_outputs_mask=keep_mask)
        if self.use_cache:
            return (enc_outputs, projected, keep), tuple(enc_states)
        batch = ops.shape(source)[0]
        return (enc_outputs, tuple(enc_states), keep_mask), ops.zeros((batch, self.max_len), "int32")

    def step(self, consts, state, token, index, start_id):
        if self.use_cache:
            enc_outputs, projected, keep = consts
            emb = self.decoder.embedding(token)
            h, new_states, weights = self.decoder.step(emb, list(state), enc_outputs, projected,
                                                       keep, training=False)
            return self.decoder.dense(h), tuple(new_states), weights
        enc_outputs, enc_states, keep_mask = consts
        state = ops.slice_update(state, (0, index), token[:, None])
        logits, weights = self.decoder(state[:, : index + 1], enc_outputs, list(enc_states),
                                       enc_outputs_mask=keep_mask, training=False,
                                       return_attention_scores=True)
        return logits[:, -1], state, weights[:, -1]


def _stepper(model, max_len, use_cache):
    kind = model_kind(model)
    return (_TransformerStepper if kind == "transformer" else _BahdanauStepper)(
        model, max_len, use_cache)


def _check_args(source, max_len, start_id, end_id):
    if isinstance(max_len, bool) or not isinstance(max_len, int) or max_len <= 0:
        raise ValueError(f"`max_len` must be a positive integer. Received: max_len={max_len!r}")
    for name, value in (("start_id", start_id), ("end_id", end_id)):
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"`{name}` must be a positive token id. Received: {name}={value!r}")
    source = tf.convert_to_tensor(source)
    if source.dtype.is_floating:
        raise ValueError(f"`source` must hold integer token ids. Received: dtype={source.dtype}")
    if source.shape.rank != 2:
        raise ValueError(f"`source` must have shape (B, S). Received: shape={tuple(source.shape)}")
    return tf.cast(source, tf.int32)


def _log_probs(logits, start_id):
    """float32 log-probabilities with padding (0) and ``start_id`` forbidden."""
    logits = tf.cast(logits, tf.float32)
    vocab = tf.shape(logits)[-1]
    banned = tf.logical_or(tf.equal(tf.range(vocab), 0), tf.equal(tf.range(vocab), start_id))
    logits = tf.where(banned[None, :], NEG_INF, logits)
    return tf.nn.log_softmax(logits, axis=-1)


def _trim(tokens, lengths):
    """Cut the fixed buffer after the longest row."""
    return tokens[..., : tf.reduce_max(lengths)] if tokens.shape.rank else tokens


# --- greedy -----------------------------------------------------------------------------
def greedy_decode_fixed(model, source, max_len, start_id, end_id, use_cache=True,
                        return_attention=False):
    """Greedy decoding into fixed-size buffers (XLA-compilable).

    Returns a dict: ``tokens`` int32 ``(B, max_len)`` (0 after ``end_id``), ``lengths``
    int32 ``(B,)`` (tokens up to and including ``end_id``), ``log_prob`` float32 ``(B,)``
    (sum over those tokens), and with ``return_attention`` ``attention`` float32
    ``(B, max_len, S)`` (last decoder layer's cross-attention, mean over heads, or the
    Bahdanau weights).
    """
    source = _check_args(source, max_len, start_id, end_id)
    stepper = _stepper(model, max_len, use_cache)
    batch, src_len = tf.shape(source)[0], tf.shape(source)[1]
    consts, state = stepper.init(source, start_id)

    def cond(i, *_):
        return i < max_len

    def body(i, token, state, tokens, finished, lengths, log_prob, attention):
        logits, state, weights = stepper.step(consts, state, token, i, start_id)
        log_probs = _log_probs(logits, start_id)
        next_token = tf.argmax(log_probs, axis=-1, output_type=tf.int32)
        step_lp = tf.gather(log_probs, next_token, batch_dims=1)
        next_token = tf.where(finished, 0, next_token)
        log_prob += tf.where(finished, 0.0, step_lp)
        lengths += tf.cast(tf.logical_not(finished), tf.int32)
        tokens = ops.slice_update(tokens, (0, i), next_token[:, None])
        if return_attention:
            attention = ops.slice_update(attention, (0, i, 0),
                                         tf.cast(weights, tf.float32)[:, None, :])
        finished = tf.logical_or(finished, tf.equal(next_token, end_id))
        # Stop early once every row has finished (still XLA-safe: a data-dependent cond).
        i = tf.where(tf.reduce_all(finished), max_len, i + 1)
        return i, next_token, state, tokens, finished, lengths, log_prob, attention

    att_shape = (batch, max_len, src_len) if return_attention else (batch, 1, 1)
    loop_vars = (tf.constant(0), tf.fill([batch], tf.constant(start_id, tf.int32)), state,
                 tf.zeros((batch, max_len), tf.int32), tf.zeros((batch,), tf.bool),
                 tf.zeros((batch,), tf.int32), tf.zeros((batch,), tf.float32),
                 tf.zeros(att_shape, tf.float32))
    _, _, _, tokens, _, lengths, log_prob, attention = tf.while_loop(cond, body, loop_vars)
    out = {"tokens": tokens, "lengths": lengths, "log_prob": log_prob}
    if return_attention:
        out["attention"] = attention
    return out


def greedy_search(model, source, max_len, start_id, end_id, use_cache=True,
                  return_attention=False):
    """Greedy decoding: at each step the most likely next token.

    Args:
        model: from ``keras_attn.models``.
        source: int ``(B, S)`` token ids, 0 = padding.
        max_len: most tokens generated per row.
        start_id, end_id: the ``[START]`` and ``[END]`` ids of the target vocabulary.
        use_cache: incremental decoding with the key/value cache (False: the reference
            that re-runs the decoder on the whole prefix at every step).
        return_attention: also return the cross-attention of each generated token.

    Returns:
        int32 ``(B, T)``, ``T <= max_len``, without the start token; each row up to and
        including ``end_id``, then 0. With ``return_attention``: ``(tokens, weights)``,
        weights ``(B, T, S)``.

    Example:
        >>> greedy_search(model, source, max_len=20, start_id=2, end_id=3)
    """
    out = greedy_decode_fixed(model, source, max_len, start_id, end_id, use_cache,
                              return_attention)
    tokens = _trim(out["tokens"], out["lengths"])
    if return_attention:
        return tokens, out["attention"][:, : tf.shape(tokens)[1]]
    return tokens


# --- beam search --------------------------------------------------------------------------
def length_penalty(lengths, alpha):
    """GNMT length penalty ``((5 + n) / 6) ** alpha``."""
    return tf.pow((5.0 + tf.cast(lengths, tf.float32)) / 6.0, alpha)


def beam_decode_fixed(model, source, beam_size=4, alpha=0.6, max_len=64, start_id=1, end_id=2):
    """Beam search into fixed-size buffers (XLA-compilable).

    Hypotheses are pruned by their summed log-probability; finished ones are carried at no
    cost. Final ranking uses ``score = log_prob / length_penalty(n, alpha)``.

    Returns a dict: ``tokens`` ``(B, K, max_len)``, ``lengths`` ``(B, K)``, ``log_prob``
    ``(B, K)`` and ``scores`` ``(B, K)``, best first.
    """
    source = _check_args(source, max_len, start_id, end_id)
    if isinstance(beam_size, bool) or not isinstance(beam_size, int) or beam_size <= 0:
        raise ValueError(f"`beam_size` must be a positive integer. Received: beam_size={beam_size!r}")
    k = beam_size
    stepper = _stepper(model, max_len, use_cache=True)
    batch = tf.shape(source)[0]
    flat = batch * k
    source_k = tf.repeat(source, k, axis=0)  # (B*K, S), beams of a row together
    consts, state = stepper.init(source_k, start_id)

    def cond(i, *_):
        return i < max_len

    def body(i, token, state, tokens, finished, lengths, log_prob):
        logits, state, _ = stepper.step(consts, state, token, i, start_id)
        log_probs = _log_probs(logits, start_id)  # (B*K, V)
        vocab = tf.shape(log_probs)[-1]
        finished_flat = tf.reshape(finished, [flat])
        # A finished hypothesis may only continue with padding, at no cost.
        pad_only = tf.where(tf.equal(tf.range(vocab), 0), 0.0, NEG_INF)[None, :]
        log_probs = tf.where(finished_flat[:, None], pad_only, log_probs)
        cand = tf.reshape(log_prob, [flat, 1]) + log_probs
        cand = tf.reshape(cand, [batch, k * vocab])
        top_lp, top_idx = tf.math.top_k(cand, k=k)  # (B, K)
        beam_idx = top_idx // vocab
        next_token = top_idx % vocab
        # Reorder everything that belongs to a hypothesis.
        gather_idx = tf.reshape(beam_idx + tf.range(batch)[:, None] * k, [flat])
        state = tf.nest.map_structure(lambda t: tf.gather(t, gather_idx), state)
        tokens = tf.gather(tokens, beam_idx, batch_dims=1)
        was_finished = tf.gather(finished, beam_idx, batch_dims=1)
        lengths = tf.gather(lengths, beam_idx, batch_dims=1) + tf.cast(
            tf.logical_not(was_finished), tf.int32)
        tokens = ops.slice_update(tokens, (0, 0, i), next_token[:, :, None])
        finished = tf.logical_or(was_finished, tf.equal(next_token, end_id))
        i = tf.where(tf.reduce_all(finished), max_len, i + 1)
        return i, tf.reshape(next_token, [flat]), state, tokens, finished, lengths, top_lp

    # Only the first beam is live at the start, so the K beams do not repeat one another.
    init_lp = tf.tile(tf.concat([[0.0], tf.fill([k - 1], NEG_INF)], 0)[None, :], [batch, 1])
    loop_vars = (tf.constant(0), tf.fill([flat], tf.constant(start_id, tf.int32)), state,
                 tf.zeros((batch, k, max_len), tf.int32), tf.zeros((batch, k), tf.bool),
                 tf.zeros((batch, k), tf.int32), init_lp)
    _, _, _, tokens, _, lengths, log_prob = tf.while_loop(cond, body, loop_vars)
    scores = log_prob / length_penalty(lengths, alpha)
    scores, order = tf.math.top_k(scores, k=k)
    return {"tokens": tf.gather(tokens, order, batch_dims=1),
            "lengths": tf.gather(lengths, order, batch_dims=1),
            "log_prob": tf.gather(log_prob, order, batch_dims=1), "scores": scores}


def beam_search(model, source, beam_size=4, alpha=0.6, max_len=64, start_id=1, end_id=2):
    """Beam search with the GNMT length penalty.

    Args:
        model: from ``keras_attn.models``. source: int ``(B, S)``, 0 = padding.
        beam_size: hypotheses kept per row. alpha: length-penalty exponent (0 = none).
        max_len: most tokens per hypothesis. start_id, end_id: target vocabulary ids.

    Returns:
        ``(tokens (B, beam_size, T), scores (B, beam_size))``, best first; rows as for
        :func:`greedy_search`; score = sum of log-probabilities / ``((5 + n) / 6) ** alpha``.

    Example:
        >>> tokens, scores = beam_search(model, source, beam_size=4, start_id=2, end_id=3)
    """
    out = beam_decode_fixed(model, source, beam_size, alpha, max_len, start_id, end_id)
    return _trim(out["tokens"], out["lengths"]), out["scores"]


def sequence_log_prob(model, source, tokens, start_id):
    """Teacher-forced sum of log-probabilities of ``tokens`` ``(B, T)`` (0 after the end).

    Uses the same banned ids as the decoders, so it scores a decoded sequence exactly as
    the search did. Returns float32 ``(B,)``.
    """
    source = tf.cast(source, tf.int32)
    tokens = tf.cast(tokens, tf.int32)
    target_in = tf.concat([tf.fill([tf.shape(tokens)[0], 1], start_id), tokens[:, :-1]], 1)
    target_in = tf.where(tf.logical_and(tf.equal(target_in, 0),
                                        tf.range(tf.shape(tokens)[1])[None, :] == 0),
                         start_id, target_in)
    logits = model({"source": source, "target_in": target_in}, training=False)
    log_probs = _log_probs(logits, start_id)
    picked = tf.gather(log_probs, tokens, batch_dims=2)
    return tf.reduce_sum(tf.where(tf.equal(tokens, 0), 0.0, picked), axis=-1)
