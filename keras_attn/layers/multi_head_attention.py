"""Multi-head attention: project, split heads, scaled dot-product attention, merge, project."""
import math

import keras
from keras import ops

from keras_attn.kernels import fastpath
from keras_attn import ops as attn_ops
from keras_attn.layers import _checks
from keras_attn.layers._step import check_dense, dense
from keras_attn.layers._masking import AttentionMaskMixin, attention_mask, call_outputs
from keras_attn.layers.dropout import Dropout
from keras_attn.kernels.kv_cache import (FAST_LAYOUTS, LAYOUTS, GrowingCache, HeadsFirstCache,
                                        KVCache, as_cache)


@keras.saving.register_keras_serializable(package="keras_attn")
class MultiHeadAttention(AttentionMaskMixin, keras.layers.Layer):
    """Multi-head scaled dot-product attention.

    ``MultiHead(Q, K, V) = Concat(head_1..head_h) W_o`` with
    ``head_i = softmax(Q W_q^i (K W_k^i)^T / sqrt(d_h)) V W_v^i``, ``d_h = num_hiddens / H``.

    Args:
        num_hiddens: model width, the output size of every projection.
        num_heads: number of heads; must divide ``num_hiddens``.
        dropout: rate applied to the attention weights while training.
        use_bias: whether the four projections have biases.

    Sub-layers: ``W_q``, ``W_k``, ``W_v``, ``W_o`` (Dense, kernels ``(in, num_hiddens)``).

    Call arguments:
        queries ``(B, Q, dq)``, keys ``(B, K, dk)``, values ``(B, K, dv)``.
        valid_lens: optional int ``(B,)`` or ``(B, Q)``. mask: optional bool ``(B, K)`` or
        ``(B, Q, K)`` applied to every head. use_causal_mask: query p sees keys <= p.
        return_attention_scores: also return weights ``(B, H, Q, K)`` (before dropout).
        cache: optional projected ``(k, v)`` from :meth:`init_cache` or :meth:`compute_cache`
            (its class, :mod:`keras_attn.kernels.kv_cache`, picks the kernels). Without
            ``cache_update_index`` it is attended as it is (cross-attention; ``keys`` and
            ``values`` ignored); with it the projected ``keys``/``values`` are written there.
        cache_update_index: int or scalar tensor, see ``cache``.

    Returns: ``output`` ``(B, Q, num_hiddens)``; with ``return_attention_scores`` also the
    weights; with a ``cache`` also the (updated) cache, last.

    Example:
        >>> mha = MultiHeadAttention(num_hiddens=100, num_heads=5)
        >>> mha(np.ones((2, 4, 100)), np.ones((2, 6, 100)), np.ones((2, 6, 100))).shape
        (2, 4, 100)

    References: Vaswani et al. 2017, section 3.2.2; D2L 11.5.
    """

    def __init__(self, num_hiddens, num_heads, dropout=0.0, use_bias=False, **kwargs):
        super().__init__(**kwargs)
        self.num_hiddens = _checks.check_positive_int("num_hiddens", num_hiddens)
        self.num_heads = _checks.check_positive_int("num_heads", num_heads)
        _checks.check_heads(num_hiddens, num_heads)
        self.dropout = _checks.check_rate("dropout", dropout)
        self.use_bias = bool(use_bias)
        self.head_dim = num_hiddens // num_heads
        self.supports_masking = True

    def build(self, queries_shape, keys_shape=None, values_shape=None, *args, **kwargs):
        keys_shape = keys_shape or queries_shape
        values_shape = values_shape or keys_shape
        out_shape = tuple(queries_shape[:-1]) + (self.num_hiddens,)
        for name, shape in (("W_q", queries_shape), ("W_k", keys_shape),
                            ("W_v", values_shape), ("W_o", out_shape)):
            layer = keras.layers.Dense(self.num_hiddens, name=name, use_bias=self.use_bias,
                                       dtype=self.dtype_policy)
            layer.build(shape)
            setattr(self, name, layer)
        self.dropout_layer = Dropout(self.dropout, dtype=self.dtype_policy)
        self.built = True

    def call(self, queries, keys=None, values=None, valid_lens=None, mask=None,
             return_attention_scores=False, training=None, use_causal_mask=False,
             cache=None, cache_update_index=None,
             queries_mask=None, keys_mask=None, values_mask=None):
        cross_cache = cache is not None and cache_update_index is None
        if not cross_cache:
            _checks.check_qkv(queries, keys, values)
        if cache is not None:
            cache = as_cache(cache)
        if isinstance(cache, FAST_LAYOUTS):
            keep = attention_mask(queries, queries, mask, queries_mask, keys_mask, values_mask)
            output, weights, cache = self._cached_call(queries, keys, values, keep, valid_lens,
                                                       training, use_causal_mask, cache,
                                                       cache_update_index)
            return call_outputs(output, weights if return_attention_scores else None, cache)
        q = self.split_heads(self.W_q(queries))  # (B, Q, H, dh)
        if cross_cache:
            k, v = cache
        else:
            k, v = self.split_heads(self.W_k(keys)), self.split_heads(self.W_v(values))
            if cache is not None:  # write this step's keys/values into the cache
                start = (0, cache_update_index, 0, 0)
                k = attn_ops.slice_update(cache.k, start, k)
                v = attn_ops.slice_update(cache.v, start, v)
                cache = KVCache(k, v)
        keep = attention_mask(queries, k, mask, queries_mask, keys_mask, values_mask,
                              use_causal_mask, cache_update_index)
        context, weights = self._compute_attention(q, k, v, keep, valid_lens, training)
        output = self.W_o(self.merge_heads(context))  # (B, Q, num_hiddens)
        return call_outputs(output, weights if return_attention_scores else None, cache)

    def _cached_call(self, queries, keys, values, keep, valid_lens, training, use_causal_mask,
                     cache, cache_update_index):
        """The cached call over a heads-first cache (TensorFlow): the projections around
        :func:`keras_attn.kernels.tf_step.cached_attention`; returns
        ``(output, weights, cache)``."""
        from keras_attn.kernels import tf_step

        scale = ops.cast(1.0 / math.sqrt(self.head_dim), queries.dtype)
        k = v = None
        if cache_update_index is not None and queries is keys is values:
            # Self-attention: one matmul with the three kernels side by side.
            for layer in (self.W_q, self.W_k, self.W_v):
                check_dense(layer)
            q, k, v = tf_step.fused_projection(
                ops.cast(queries, self.W_q.compute_dtype), [self.W_q, self.W_k, self.W_v],
                self.use_bias)
        else:
            q = dense(self.W_q, queries)  # (B, Q, num_hiddens)
            if cache_update_index is not None:
                k, v = dense(self.W_k, keys), dense(self.W_v, values)
        q = q * scale
        dropout = lambda w: self.dropout_layer(w, training=training)  # noqa: E731
        context, weights, cache = tf_step.cached_attention(
            q, k, v, cache, cache_update_index, self.num_heads, keep, valid_lens,
            use_causal_mask, dropout)
        return dense(self.W_o, context), weights, cache  # output (B, Q, num_hiddens)

    def _compute_attention(self, q, k, v, keep=None, valid_lens=None, training=None):
        """``softmax(q k^T / sqrt(d_h)) v`` for every head (section 3.2.1).

        Args: q ``(B, Q, H, dh)``; k, v ``(B, K, H, dh)``; keep bool ``(B|1, Q|1, K)``.
        Returns: ``(context (B, Q, H, dh), weights (B, H, Q, K))``.
        """
        q = q * ops.cast(1.0 / math.sqrt(self.head_dim), q.dtype)
        dropout = lambda w: self.dropout_layer(w, training=training)  # noqa: E731
        if fastpath.enabled():
            from keras_attn.kernels import tf_attention

            return tf_attention.multi_head_attention(q, k, v, keep, valid_lens, dropout)
        scores = ops.einsum("bqhd,bkhd->bhqk", q, k)
        weights = attn_ops.masked_softmax(scores, valid_lens=valid_lens, mask=keep)
        context = ops.einsum("bhqk,bkhd->bqhd", dropout(weights), v)
        return context, weights

    def split_heads(self, x):
        """``(B, L, num_hiddens)`` -> ``(B, L, H, d_h)`` (a reshape, no copy)."""
        shape = ops.shape(x)
        return ops.reshape(x, (shape[0], shape[1], self.num_heads, self.head_dim))

    def merge_heads(self, x):
        """``(B, L, H, d_h)`` -> ``(B, L, num_hiddens)``."""
        shape = ops.shape(x)
        return ops.reshape(x, (shape[0], shape[1], self.num_hiddens))

    @staticmethod
    def cache_layout(layout=None):
        """The :mod:`keras_attn.kernels.kv_cache` class of a cache made now: ``layout`` when given,
        else by the kernel policy (``GrowingCache``, ``HeadsFirstCache`` on the fast path, else
        ``KVCache``).
        """
        if layout is not None:
            if layout not in LAYOUTS:
                raise ValueError("`layout` must be KVCache, HeadsFirstCache or GrowingCache "
                                 f"(keras_attn.kernels.kv_cache). Received: layout={layout!r}")
            return layout
        policy = fastpath.current()
        if policy.growing_cache():
            return GrowingCache
        return HeadsFirstCache if policy.fast() else KVCache

    def compute_cache(self, keys, values=None, layout=None):
        """Projected ``(k, v)`` of ``keys``/``values`` for a cross-attention over a fixed source: a
        ``KVCache`` ``(B, K, H, d_h)`` or ``HeadsFirstCache`` ``(B, H, K, d_h)`` (``layout``).
        """
        values = keys if values is None else values
        k, v = self.W_k(keys), self.W_v(values)
        if self.cache_layout(layout) is KVCache:
            return KVCache(self.split_heads(k), self.split_heads(v))
        from keras_attn.kernels import tf_step

        return HeadsFirstCache(tf_step.heads_first(k, self.num_heads)[0],
                               tf_step.heads_first(v, self.num_heads)[0])

    def init_cache(self, batch, max_len, layout=None):
        """A self-attention cache of ``max_len`` positions in ``layout`` (default
        :meth:`cache_layout`): zeros ``(B, max_len, H, d_h)``, heads-first zeros, or an empty
        ``GrowingCache``.
        """
        layout = self.cache_layout(layout)
        if layout is KVCache:
            zeros = ops.zeros((batch, max_len, self.num_heads, self.head_dim),
                              self.compute_dtype)
            return KVCache(zeros, zeros)
        from keras_attn.kernels import tf_step

        return tf_step.empty_cache(batch, self.num_heads, max_len, self.head_dim,
                                   self.compute_dtype, growing=layout is GrowingCache)

    def compute_output_shape(self, queries_shape, *args, **kwargs):
        return tuple(queries_shape[:-1]) + (self.num_hiddens,)

    def get_config(self):
        return {**super().get_config(), "num_hiddens": self.num_hiddens,
                "num_heads": self.num_heads, "dropout": self.dropout,
                "use_bias": self.use_bias}
