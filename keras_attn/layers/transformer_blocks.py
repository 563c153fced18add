"""Transformer encoder and decoder blocks (post-norm as in the paper, or pre-norm)."""
import keras

from keras_attn.layers import _checks
from keras_attn.layers._masking import call_outputs
from keras_attn.layers.add_norm import AddNorm
from keras_attn.layers.ffn import PositionWiseFFN
from keras_attn.layers.multi_head_attention import MultiHeadAttention


class _BlockBase(keras.layers.Layer):
    """Constructor arguments and config shared by the encoder and decoder blocks."""

    def __init__(self, num_hiddens, ffn_num_hiddens, num_heads, dropout=0.0, use_bias=False,
                 norm_first=False, epsilon=1e-5, ffn_dropout=0.0, **kwargs):
        super().__init__(**kwargs)
        self.num_hiddens = _checks.check_positive_int("num_hiddens", num_hiddens)
        self.ffn_num_hiddens = _checks.check_positive_int("ffn_num_hiddens", ffn_num_hiddens)
        self.num_heads = _checks.check_positive_int("num_heads", num_heads)
        self.dropout = _checks.check_rate("dropout", dropout)
        self.ffn_dropout = _checks.check_rate("ffn_dropout", ffn_dropout)
        self.use_bias = bool(use_bias)
        self.norm_first = bool(norm_first)
        self.epsilon = float(epsilon)
        self.supports_masking = True

    def _attention(self, name):
        return MultiHeadAttention(self.num_hiddens, self.num_heads, self.dropout,
                                  self.use_bias, name=name, dtype=self.dtype_policy)

    def _addnorm(self, name):
        return AddNorm(self.dropout, self.epsilon, name=name, dtype=self.dtype_policy)

    def _ffn(self):
        return PositionWiseFFN(self.ffn_num_hiddens, self.num_hiddens, dropout=self.ffn_dropout,
                               name="ffn", dtype=self.dtype_policy)

    def _check_width(self, x):
        _checks.check_rank("x", x, 3)
        if x.shape[-1] is not None and x.shape[-1] != self.num_hiddens:
            raise ValueError(
                f"The last axis of `x` must equal num_hiddens={self.num_hiddens}. "
                f"Received: x with shape={tuple(x.shape)}"
            )

    def compute_output_shape(self, x_shape, *args, **kwargs):
        return x_shape

    def get_config(self):
        keys = ("num_hiddens", "ffn_num_hiddens", "num_heads", "dropout", "use_bias",
                "norm_first", "epsilon", "ffn_dropout")
        return {**super().get_config(), **{k: getattr(self, k) for k in keys}}


@keras.saving.register_keras_serializable(package="keras_attn")
class TransformerEncoderBlock(_BlockBase):
    """Self-attention and a position-wise FFN, each wrapped in a residual + LayerNorm.

    Post-norm: ``x = ln(x + drop(f(x)))``, with ``use_bias=True`` exactly
    ``torch.nn.TransformerEncoderLayer(batch_first=True)`` (which also drops the FFN hidden
    layer: ``ffn_dropout=dropout``). Pre-norm (``norm_first``): ``x + drop(f(ln(x)))``.

    Args:
        num_hiddens: model width. ffn_num_hiddens: FFN hidden width. num_heads: heads.
        dropout: rate for the attention weights and the residual branches (section 5.4).
        use_bias: biases in the attention projections. norm_first: pre-norm variant.
        epsilon: LayerNorm epsilon.
        ffn_dropout: rate on the FFN hidden layer (0 as in the paper and D2L).

    Sub-layers: ``attention``, ``addnorm1``, ``ffn``, ``addnorm2``.

    Call arguments:
        x: ``(B, L, num_hiddens)``. valid_lens: optional int ``(B,)``.
        mask: optional bool ``(B, L)``, the padding of ``x`` (True = real token).
        return_attention_scores: also return the weights ``(B, H, L, L)``.

    Example:
        >>> blk = TransformerEncoderBlock(24, 48, 8, 0.5)
        >>> blk(np.ones((2, 100, 24)), valid_lens=np.array([3, 2])).shape   # (2, 100, 24)

    References: Vaswani et al. 2017, section 3.1; D2L 11.7.4.
    """

    def build(self, x_shape, *args, **kwargs):
        self.attention = self._attention("attention")
        self.addnorm1 = self._addnorm("addnorm1")
        self.ffn = self._ffn()
        self.addnorm2 = self._addnorm("addnorm2")
        for layer in (self.attention, self.addnorm1, self.ffn, self.addnorm2):
            layer.build(x_shape)
        self.built = True

    def call(self, x, valid_lens=None, mask=None, training=None, return_attention_scores=False):
        self._check_width(x)
        weights = []

        def self_attention(h):
            out, w = self.attention(h, h, h, valid_lens=valid_lens, mask=mask,
                                    return_attention_scores=True, training=training)
            weights.append(w)
            return out

        x = self.addnorm1.residual(x, self_attention, training, self.norm_first)
        x = self.addnorm2.residual(x, lambda h: self.ffn(h, training=training), training,
                                   self.norm_first)
        return (x, weights[0]) if return_attention_scores else x

    def compute_mask(self, x, valid_lens=None, mask=None, **kwargs):
        return mask


@keras.saving.register_keras_serializable(package="keras_attn")
class TransformerDecoderBlock(_BlockBase):
    """Causal self-attention, cross-attention over the encoder output, then an FFN.

    Arguments and norm placement as :class:`TransformerEncoderBlock`
    (``torch.nn.TransformerDecoderLayer`` post-norm).

    Sub-layers: ``attention1`` (causal self), ``addnorm1``, ``attention2`` (cross),
    ``addnorm2``, ``ffn``, ``addnorm3``.

    Call arguments:
        x: ``(B, T, num_hiddens)``. enc_outputs: ``(B, S, num_hiddens)``.
        enc_valid_lens: optional int ``(B,)``: source keys at index >= it are ignored.
        x_mask, enc_outputs_mask: Keras padding masks ``(B, T)``, ``(B, S)``.
        return_attention_scores: also return ``(self_weights, cross_weights)``.
        self_attention_cache: step decoding: this call's keys and values are written into
            it at ``self_attention_cache_update_index``.
        cross_attention_cache: the projected source from :meth:`compute_cache` (then
            ``enc_outputs`` is not read). Give both caches or neither.

    Returns: ``(B, T, num_hiddens)``; with ``return_attention_scores`` also the weights;
    with the caches also the updated self-attention cache, last.

    Example:
        >>> blk = TransformerDecoderBlock(24, 48, 8, 0.5)
        >>> blk(np.ones((2, 100, 24)), enc, enc_valid_lens=np.array([3, 2])).shape

    References: Vaswani et al. 2017, section 3.1; D2L 11.7.5.
    """

    def build(self, x_shape, enc_outputs_shape=None, *args, **kwargs):
        enc_shape = enc_outputs_shape or x_shape
        self.attention1 = self._attention("attention1")
        self.addnorm1 = self._addnorm("addnorm1")
        self.attention2 = self._attention("attention2")
        self.addnorm2 = self._addnorm("addnorm2")
        self.ffn = self._ffn()
        self.addnorm3 = self._addnorm("addnorm3")
        self.attention1.build(x_shape)
        self.attention2.build(x_shape, enc_shape, enc_shape)
        for layer in (self.addnorm1, self.addnorm2, self.ffn, self.addnorm3):
            layer.build(x_shape)
        self.built = True

    def call(self, x, enc_outputs=None, enc_valid_lens=None, training=None, x_mask=None,
             enc_outputs_mask=None, return_attention_scores=False, self_attention_cache=None,
             self_attention_cache_update_index=None, cross_attention_cache=None):
        self._check_width(x)
        caching = self_attention_cache is not None
        if caching != (cross_attention_cache is not None):
            raise ValueError("Pass both `self_attention_cache` and `cross_attention_cache`, "
                             "or neither (as keras-hub's TransformerDecoder).")
        if not caching:
            _checks.check_rank("enc_outputs", enc_outputs, 3)
        weights, caches = [], []

        def self_attention(h):
            kw = (dict(cache=self_attention_cache,
                       cache_update_index=self_attention_cache_update_index) if caching
                  else dict(queries_mask=x_mask, keys_mask=x_mask))
            out = self.attention1(h, h, h, use_causal_mask=True, return_attention_scores=True,
                                  training=training, **kw)
            weights.append(out[1])
            caches.extend(out[2:])  # the updated cache
            return out[0]

        def cross_attention(h):
            args, kw = ((), dict(cache=cross_attention_cache)) if caching else (
                (enc_outputs, enc_outputs), {})
            out = self.attention2(h, *args, valid_lens=enc_valid_lens, keys_mask=enc_outputs_mask,
                                  return_attention_scores=True, training=training, **kw)
            weights.append(out[1])
            return out[0]

        x = self.addnorm1.residual(x, self_attention, training, self.norm_first)
        x = self.addnorm2.residual(x, cross_attention, training, self.norm_first)
        x = self.addnorm3.residual(x, lambda h: self.ffn(h, training=training), training,
                                   self.norm_first)
        return call_outputs(x, tuple(weights) if return_attention_scores else None, *caches)

    def compute_cache(self, enc_outputs, layout=None):
        """The cross-attention's projected source (``MultiHeadAttention.compute_cache``)."""
        return self.attention2.compute_cache(enc_outputs, layout=layout)

    def compute_mask(self, x, enc_outputs=None, enc_valid_lens=None, mask=None, **kwargs):
        # Keras passes the previous masks, not `x_mask`: the output keeps x's padding.
        x_mask = kwargs.get("x_mask")
        return getattr(x, "_keras_mask", None) if x_mask is None else x_mask
