"""TensorFlow only: a Transformer's encoder pass and cached decoding step for inference,
behind :mod:`keras_attn.fastpath`.

References: ``encoder(source, training=False)`` and the decoder's own cached call,
``decoder(token, cache=..., cache_update_index=i)`` (``keras_attn.decoding``);
``tests/test_fastpath.py`` checks that both agree (the encoder's output, every step).

Both are written in ops that TensorFlow's oneDNN rewrite leaves alone (``BatchMatMulV3``,
the softmax in its elementwise ops, gathers instead of float ``Transpose``): oneDNN's
kernels parallelise every call, a fixed cost that dominates on one sentence.
"""
import contextlib
import math

import tensorflow as tf

from keras_attn.layers.positional_encoding import PositionalEncoding
from keras_attn.layers.transformer import (TransformerDecoder, TransformerEncoder,
                                           clean_token_ids)
from keras_attn.numerics import large_negative

_FILL = large_negative("float32")
_preallocated = False


@contextlib.contextmanager
def preallocated_cache():
    """Trace decoding with the ``(B, H, max_len, d_h)`` caches in a plain graph too: for
    TFLite, whose interpreter re-plans its memory whenever a loop variable changes shape
    (the TFLite exporter traces inside this block)."""
    global _preallocated
    previous, _preallocated = _preallocated, True
    try:
        yield
    finally:
        _preallocated = previous


def supports(model):
    """Whether :func:`encode` and :class:`TransformerDecodeStep` reproduce ``model``'s
    float32 Transformer (ReLU FFNs, sinusoidal positions)."""
    try:
        encoder, decoder = model.get_layer("encoder"), model.get_layer("decoder")
    except ValueError:
        return False
    return (isinstance(encoder, TransformerEncoder) and _float32_relu(encoder)
            and isinstance(decoder, TransformerDecoder) and _float32_relu(decoder))


def _float32_relu(stack):
    return (stack.built and isinstance(stack.pos_encoding, PositionalEncoding)
            and stack.compute_dtype == "float32" and stack.variable_dtype == "float32"
            and all(blk.ffn.activation == "relu" for blk in stack.blks))


def encode(encoder, source):
    """``encoder(source, training=False)`` of a ``TransformerEncoder``: ``(B, S, d)``.

    The same arithmetic as the layers (scaled embedding plus positions, then per block
    self-attention over the non-padding keys and the FFN, each with its residual and
    LayerNorm), with the heads put first by a gather, the masked keys given
    ``large_negative`` added scores and their values zeroed (a row with no valid key gets
    the reference's zero context).

    Args:
        encoder: a built ``TransformerEncoder`` (see :func:`supports`).
        source: int ``(B, S)``, 0 = padding.
    """
    d, heads = encoder.num_hiddens, encoder.num_heads
    head_dim = d // heads
    batch, length = tf.shape(source)[0], tf.shape(source)[1]
    x = tf.gather(_value(encoder.embedding.embeddings),
                  clean_token_ids(source, encoder.vocab_size)) * math.sqrt(d)
    x = x + tf.convert_to_tensor(encoder.pos_encoding.table)[:length]
    keep = tf.reshape(tf.not_equal(source, 0), (batch, 1, 1, -1))
    key_bias = tf.where(keep, 0.0, _FILL)  # (B, 1, 1, S)
    value_keep = tf.reshape(tf.cast(keep, tf.float32), (batch, 1, -1, 1))  # (B, 1, S, 1)
    split, merge = _head_permutations(length, heads)
    for blk in encoder.blks:
        att = blk.attention

        def self_attention(h, att=att):
            qkv = _matmul(h, *_fused(att, ("W_q", "W_k", "W_v")))  # (B, S, 3d)
            q, k, v = _heads_first(qkv, split, 3, heads, head_dim)  # (B, H, S, dh) each
            weights = _softmax(_batch_matmul(q * (1.0 / math.sqrt(head_dim)), k, adj_y=True)
                               + key_bias)  # (B, H, S, S)
            context = _batch_matmul(weights, v * value_keep)  # (B, H, S, dh)
            context = tf.gather(tf.reshape(context, (batch, -1, head_dim)), merge, axis=1)
            return _matmul(tf.reshape(context, (batch, -1, d)), *_dense(att.W_o))

        def ffn(h, blk=blk):
            return _matmul(tf.nn.relu(_matmul(h, *_dense(blk.ffn.dense1))),
                           *_dense(blk.ffn.dense2))

        for sublayer, addnorm in ((self_attention, blk.addnorm1), (ffn, blk.addnorm2)):
            norm = _norm(addnorm.ln)
            if blk.norm_first:
                x = x + sublayer(_layer_norm(x, *norm))
            else:
                x = _layer_norm(sublayer(x) + x, *norm)
    if encoder.final_norm is not None:
        x = _layer_norm(x, *_norm(encoder.final_norm))
    return x


def _fused(attention, names):
    """The kernels of ``attention``'s projections ``names`` side by side, and their biases
    (None without ``use_bias``): one matmul for all of them."""
    projections = [getattr(attention, name) for name in names]
    kernel = tf.concat([_value(p.kernel) for p in projections], axis=1)
    if not attention.use_bias:
        return kernel, None
    return kernel, tf.concat([_value(p.bias) for p in projections], axis=0)


def _heads_first(x, rows, parts, heads, head_dim):
    """``(B, S, parts * H * dh)`` -> ``parts`` tensors ``(B, H, S, dh)``, gathering the rows
    of ``_head_permutations(S, heads, parts)[0]``."""
    batch = tf.shape(x)[0]
    x = tf.gather(tf.reshape(x, (batch, -1, head_dim)), rows, axis=1)
    return tf.unstack(tf.reshape(x, (batch, parts, heads, -1, head_dim)), axis=1)


def _head_permutations(length, heads, parts=3):
    """Row orders that move heads first without a float ``Transpose``: ``split`` takes the
    ``(S, parts, H)`` rows of a ``(B, S * parts * H, dh)`` tensor to ``(parts, H, S)``
    order; ``merge`` takes ``(H, S)`` rows back to ``(S, H)``. (Integer transposes:
    oneDNN's rewrite only touches float ones.)"""
    rows = tf.reshape(tf.range(length * parts * heads), (length, parts * heads))
    split = tf.reshape(tf.transpose(rows), (-1,))
    merge = tf.reshape(tf.transpose(tf.reshape(tf.range(heads * length), (heads, length))),
                       (-1,))
    return split, merge


class TransformerDecodeStep:
    """One step of greedy or beam decoding with a ``keras_attn`` ``TransformerDecoder``.

    Reference: ``decoder(token[:, None], cache=..., cache_update_index=i)`` with the
    banned ids' logits set to the fill value (``decoding._Steps``). Same arithmetic in a
    third of the ops per step (at batch 1 a step is mostly the executor's per-op cost):

    - everything that does not change between steps is done once, before the loop: the
      weights are read, the self-attention's W_q/W_k/W_v concatenated into one matrix, the
      cross-attention keys/values projected and put heads-first, the source padding and
      the causal mask turned into additive biases, the banned ids folded into the output
      bias;
    - activations stay ``(B, d)`` (no Tensordot reshapes around every dense layer);
    - the cache is heads-first, so the step's scores and context are two batched matmuls
      that read it once, with no transpose. In a TensorFlow graph it is ``(B, H, t, d_h)``,
      ``t`` the steps so far: a step appends its keys and values (a concat copies the
      ``t`` cached positions; an update of a preallocated buffer inside the loop copies
      the whole buffer) and attends to every cached position. Eagerly, under XLA and
      in :func:`preallocated_cache` (TFLite), which want loop variables of fixed shape, it
      is ``(B, H, max_len, d_h)``: the step
      writes position ``index`` with ``tensor_scatter_nd_update`` (in place under XLA) and
      a causal bias hides the positions not written yet.

    Masked keys get ``large_negative`` added to their score, so their weight is exactly 0
    as in the reference; a source row with no valid key attends with equal weights to
    keys whose values were zeroed, giving the reference's zero context.

    Args:
        decoder: a built ``TransformerDecoder`` (see :func:`supports`).
        enc_outputs: ``(B, S, d)``. source: int ``(B, S)`` (0 = padding).
        max_len: the most steps (positions) decoded. start_id: the id never generated (with 0).
    """

    def __init__(self, decoder, enc_outputs, source, max_len, start_id):

        heads, d = decoder.num_heads, decoder.num_hiddens
        self.heads, self.head_dim, self.max_len = heads, d // heads, max_len
        self.norm_first = decoder.norm_first
        self.vocab_size = decoder.vocab_size
        self.clean = ((lambda t: clean_token_ids(t, decoder.vocab_size))
                      if not 0 <= start_id < decoder.vocab_size else (lambda t: t))
        self.batch = batch = tf.shape(source)[0]
        self.embeddings = _value(decoder.embedding.embeddings)  # (V, d)
        self.embed_scale = math.sqrt(d)
        self.positions = tf.convert_to_tensor(decoder.pos_encoding.table)  # (P, d)
        self.query_scale = 1.0 / math.sqrt(self.head_dim)
        self.final_norm = _norm(decoder.final_norm) if decoder.final_norm is not None else None
        if decoder.tie_embeddings:  # logits = x @ E^T + b
            self.out_kernel, self.out_transposed = self.embeddings, True
        else:
            self.out_kernel, self.out_transposed = _value(decoder.dense.kernel), False
        ids = tf.range(decoder.vocab_size)
        banned = tf.logical_or(tf.equal(ids, 0), tf.equal(ids, start_id))
        self.out_bias = _value(decoder.dense.bias) + tf.where(banned, _FILL, 0.0)
        # Source padding as an additive bias (B, 1, 1, S); the values of padded keys are
        # zeroed, so that a row with no valid key gets a zero context.
        # (A reshape: `[:, None, None, :]` would be a Flex op in TFLite.)
        keep = tf.reshape(tf.not_equal(source, 0), (batch, 1, 1, -1))
        self.source_bias = tf.where(keep, 0.0, _FILL)
        self.source_keep = tf.cast(keep, tf.float32)
        kv_rows, _ = _head_permutations(tf.shape(enc_outputs)[1], heads, parts=2)
        self.layers = [self._layer(blk, enc_outputs, kv_rows) for blk in decoder.blks]
        self.growing = _graph_without_xla()
        if not self.growing:
            # Row i: 0 on positions <= i, the fill value after (the keys not written yet).
            pos = tf.range(max_len)
            self.causal_bias = tf.where(pos[None, :] <= pos[:, None], 0.0, _FILL)  # (L, L)
            # Scatter indices of position 0 for every (row, head): (B, H, 1, 3) = [b, h, 0].
            grid = tf.meshgrid(tf.range(batch), tf.range(heads), tf.zeros((1,), tf.int32),
                               indexing="ij")
            self.row_head = tf.stack(grid, axis=-1)

    def _layer(self, blk, enc_outputs, kv_rows):
        a1, a2 = blk.attention1, blk.attention2
        # The cross-attention's keys and values, (B, S, 2d) -> (B, H, S, dh) each.
        kv = _matmul(enc_outputs, *_fused(a2, ("W_k", "W_v")))
        k, v = _heads_first(kv, kv_rows, 2, self.heads, self.head_dim)
        return {
            "qkv": _fused(a1, ("W_q", "W_k", "W_v")),  # (d, 3d), (3d,) or None
            "self_out": _dense(a1.W_o), "cross_query": _dense(a2.W_q),
            "cross_out": _dense(a2.W_o),
            "cross_k": k, "cross_v": v * tf.reshape(self.source_keep, (self.batch, 1, -1, 1)),
            "ffn1": _dense(blk.ffn.dense1), "ffn2": _dense(blk.ffn.dense2),
            "norms": [_norm(n.ln) for n in (blk.addnorm1, blk.addnorm2, blk.addnorm3)],
        }

    def init_state(self):
        """Per layer ``(k, v)``: empty ``(B, H, 0, d_h)`` caches that grow (their static
        length is declared unknown, so the loop may carry them), or zeros
        ``(B, H, max_len, d_h)``."""
        if self.growing:
            empty = tf.zeros(tf.stack([self.batch, self.heads, 0, self.head_dim]))
            zeros = tf.compat.v1.placeholder_with_default(
                empty, (None, self.heads, None, self.head_dim))
        else:
            zeros = tf.zeros(tf.stack([self.batch, self.heads, self.max_len, self.head_dim]))
        return tuple((zeros, zeros) for _ in self.layers)

    def __call__(self, token, state, index, alignment=False):
        """``token`` int ``(B,)`` at position ``index`` -> ``(logits (B, V) float32, new
        state, cross-attention (B, S) or None)``; the logits of 0 and ``start_id`` are
        lowered by the fill value, ``alignment`` is the last layer's cross-attention
        averaged over the heads."""
        x = tf.gather(self.embeddings, self.clean(token)) * self.embed_scale
        x = x + tf.gather(self.positions, index)  # (B, d)
        if self.growing:
            causal = None  # every cached position precedes this one
        else:
            causal = tf.gather(self.causal_bias, index)  # (L,)
            where = self.row_head + index * tf.constant([0, 0, 1])  # (B, H, 1, 3)
        new_state, weights = [], None
        for layer, cache in zip(self.layers, state):
            def self_attention(h, layer=layer, cache=cache):
                qkv = _matmul(h, *layer["qkv"])  # (B, 3d)
                q, k, v = tf.unstack(tf.reshape(qkv, (-1, 3, self.heads, 1, self.head_dim)),
                                     axis=1)  # (B, H, 1, dh) each
                if self.growing:  # (B, H, index + 1, dh)
                    k_cache = tf.concat([cache[0], k], axis=2)
                    v_cache = tf.concat([cache[1], v], axis=2)
                else:  # (B, H, max_len, dh), position `index` written
                    k_cache = tf.tensor_scatter_nd_update(cache[0], where, k)
                    v_cache = tf.tensor_scatter_nd_update(cache[1], where, v)
                new_state.append((k_cache, v_cache))
                context, _ = self._attend(q, k_cache, v_cache, causal)
                return _matmul(context, *layer["self_out"])

            def cross_attention(h, layer=layer):
                nonlocal weights
                q = tf.reshape(_matmul(h, *layer["cross_query"]),
                               (-1, self.heads, 1, self.head_dim))
                context, weights = self._attend(q, layer["cross_k"], layer["cross_v"],
                                                self.source_bias)
                return _matmul(context, *layer["cross_out"])

            def ffn(h, layer=layer):
                return _matmul(tf.nn.relu(_matmul(h, *layer["ffn1"])), *layer["ffn2"])

            for sublayer, norm in zip((self_attention, cross_attention, ffn), layer["norms"]):
                if self.norm_first:
                    x = x + sublayer(_layer_norm(x, *norm))
                else:
                    x = _layer_norm(sublayer(x) + x, *norm)
        if self.final_norm is not None:
            x = _layer_norm(x, *self.final_norm)
        logits = tf.nn.bias_add(_batch_matmul(x, self.out_kernel, adj_y=self.out_transposed),
                                self.out_bias)
        align = None
        if alignment:  # the reference's weights are 0 on a row with no valid key
            align = tf.reduce_mean(weights * self.source_keep, axis=1)[:, 0]  # (B, S)
        return logits, tuple(new_state), align

    def _attend(self, q, k, v, bias=None):
        """``q`` ``(B, H, 1, dh)`` over ``k``, ``v`` ``(B, H, K, dh)``, ``bias`` (if any) added
        to the scores -> ``(context (B, d), weights (B, H, 1, K))``."""
        scores = _batch_matmul(q * self.query_scale, k, adj_y=True)  # (B, H, 1, K)
        weights = _softmax(scores if bias is None else scores + bias)
        context = _batch_matmul(weights, v)  # (B, H, 1, dh)
        return tf.reshape(context, (-1, self.heads * self.head_dim)), weights


def _graph_without_xla():
    """Whether the step is traced into a TensorFlow graph that XLA will not compile (the
    only place a loop may carry a tensor whose shape changes), outside
    :func:`preallocated_cache`."""
    if _preallocated or not tf.inside_function():
        return False
    # TensorFlow's own test for an XLA context (tf.function(jit_compile=True) and the
    # XLA contexts inside it), as its TensorArray and while_loop use.
    from tensorflow.python.ops import control_flow_util

    return not control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph())


def _value(variable):
    return tf.convert_to_tensor(variable)


def _dense(layer):
    """``(kernel, bias or None)`` of a Dense layer."""
    return _value(layer.kernel), (_value(layer.bias) if layer.use_bias else None)


def _batch_matmul(x, y, adj_y=False):
    """``tf.matmul`` as ``BatchMatMulV3``, which TensorFlow's oneDNN
    rewrite leaves to Eigen: on these matrix-vector products (one query per row and head)
    about half the time of oneDNN's ``BatchMatMulV2`` (a TFLite builtin all the same)."""
    return tf.raw_ops.BatchMatMulV3(x=x, y=y, Tout=x.dtype, adj_y=adj_y)


def _matmul(x, kernel, bias=None):
    """``x @ kernel (+ bias)`` for ``(B, d)`` activations, as ``BatchMatMulV3`` too: on one
    row per sentence oneDNN's ``MatMul`` and Eigen's both cost several times more."""
    y = _batch_matmul(x, kernel)
    return y if bias is None else tf.nn.bias_add(y, bias)


def _softmax(x):
    """``tf.nn.softmax`` over the last axis, in the ops it is made of: TensorFlow rewrites
    ``Softmax`` to oneDNN's kernel, whose fixed cost per call dwarfs these small scores."""
    e = tf.exp(x - tf.reduce_max(x, axis=-1, keepdims=True))
    return e / tf.reduce_sum(e, axis=-1, keepdims=True)


def _norm(ln):
    """``(gamma, beta, epsilon)`` of a ``keras.layers.LayerNormalization``."""
    return _value(ln.gamma), _value(ln.beta), ln.epsilon


def _layer_norm(x, gamma, beta, epsilon):
    """``keras.ops.layer_normalization`` over the last axis, with its arithmetic."""
    mean = tf.reduce_mean(x, axis=-1, keepdims=True)
    variance = tf.reduce_mean(tf.math.squared_difference(x, mean), axis=-1, keepdims=True)
    inv = tf.math.rsqrt(variance + epsilon) * gamma
    return x * inv + (beta - mean * inv)
