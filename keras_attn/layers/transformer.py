"""Transformer encoder and decoder stacks: embedding, positions and a stack of blocks."""
import math

import keras
from keras import ops

from keras_attn.kernels import fastpath
from keras_attn.layers import _checks
from keras_attn.layers._masking import call_outputs
from keras_attn.layers._step import dense, layer_norm
from keras_attn.kernels.kv_cache import HeadsFirstCache, KVCache
from keras_attn.layers.multi_head_attention import MultiHeadAttention
from keras_attn.layers.positional_encoding import PositionalEncoding
from keras_attn.layers.transformer_blocks import TransformerDecoderBlock, TransformerEncoderBlock

PAD_ID = 0


def clean_token_ids(tokens, vocab_size):
    """int32 ids with anything outside ``[0, vocab_size)`` replaced by 1 (``[UNK]``), so a bad
    id gives a defined, finite output instead of a gather error or a zero vector.
    """
    tokens = ops.cast(tokens, "int32")
    ok = ops.logical_and(ops.greater_equal(tokens, 0), ops.less(tokens, vocab_size))
    return ops.where(ok, tokens, min(1, vocab_size - 1))


class _StackBase(keras.layers.Layer):
    """Arguments, config and the scaled embedding shared by the two stacks."""

    block_class = None

    def __init__(self, vocab_size, num_hiddens, ffn_num_hiddens, num_heads, num_layers,
                 dropout=0.0, use_bias=False, max_len=1000, norm_first=False, epsilon=1e-5,
                 ffn_dropout=0.0, **kwargs):
        super().__init__(**kwargs)
        self.vocab_size = _checks.check_positive_int("vocab_size", vocab_size)
        self.num_hiddens = _checks.check_positive_int("num_hiddens", num_hiddens)
        self.ffn_num_hiddens = _checks.check_positive_int("ffn_num_hiddens", ffn_num_hiddens)
        self.num_heads = _checks.check_positive_int("num_heads", num_heads)
        _checks.check_heads(num_hiddens, num_heads)
        self.num_layers = _checks.check_positive_int("num_layers", num_layers)
        self.dropout = _checks.check_rate("dropout", dropout)
        self.ffn_dropout = _checks.check_rate("ffn_dropout", ffn_dropout)
        self.use_bias = bool(use_bias)
        self.max_len = _checks.check_positive_int("max_len", max_len)
        self.norm_first = bool(norm_first)
        self.epsilon = float(epsilon)
        self.embedding = keras.layers.Embedding(vocab_size, num_hiddens, name="embedding",
                                                dtype=self.dtype_policy)
        self.pos_encoding = PositionalEncoding(max_len, dropout, name="pos_encoding",
                                               dtype=self.dtype_policy)
        self.blks = [
            self.block_class(num_hiddens, ffn_num_hiddens, num_heads, dropout, use_bias,
                             norm_first, epsilon, ffn_dropout, name=f"block_{i}",
                             dtype=self.dtype_policy)
            for i in range(num_layers)
        ]
        self.final_norm = (keras.layers.LayerNormalization(epsilon=epsilon, name="final_norm",
                                                           dtype=self.dtype_policy)
                           if norm_first else None)

    def embed(self, tokens, training=None, start_index=0):
        """``pos_encoding(embedding(tokens) * sqrt(num_hiddens))`` -> ``(B, L, num_hiddens)``."""
        x = self.embedding(clean_token_ids(tokens, self.vocab_size))
        x = x * ops.cast(math.sqrt(self.num_hiddens), x.dtype)
        return self.pos_encoding(x, training=training, start_index=start_index)

    def _build_stack(self, tokens_shape, *enc_shape):
        """Build the embedding, positions, blocks (a decoder's with ``enc_shape``) and the
        final norm; returns the hidden states' shape."""
        self.embedding.build(tokens_shape)
        x_shape = tuple(tokens_shape) + (self.num_hiddens,)
        self.pos_encoding.build(x_shape)
        for blk in self.blks:
            blk.build(x_shape, *enc_shape)
        if self.final_norm is not None:
            self.final_norm.build(x_shape)
        return x_shape

    def _finish(self, x):
        return layer_norm(self.final_norm, x) if self.final_norm is not None else x

    def get_config(self):
        keys = ("vocab_size", "num_hiddens", "ffn_num_hiddens", "num_heads", "num_layers",
                "dropout", "use_bias", "max_len", "norm_first", "epsilon", "ffn_dropout")
        return {**super().get_config(), **{k: getattr(self, k) for k in keys}}


@keras.saving.register_keras_serializable(package="keras_attn")
class TransformerEncoder(_StackBase):
    """Token embedding (scaled by ``sqrt(num_hiddens)``), sinusoidal positions, N blocks.

    Token id 0 is padding and is masked automatically; the output carries that Keras mask.

    Args:
        vocab_size, num_hiddens, ffn_num_hiddens, num_heads, num_layers: sizes.
        dropout: rate on the positions' sum, the attention weights and the residuals.
        ffn_dropout: rate on the FFN hidden layer (0, as in the paper; see the blocks).
        use_bias: biases in the attention projections. max_len: longest sequence.
        norm_first: pre-norm blocks plus a final LayerNorm. epsilon: LayerNorm epsilon.

    Sub-layers: ``embedding``, ``pos_encoding``, ``blks`` (list of
    :class:`TransformerEncoderBlock`), ``final_norm`` (only with ``norm_first``).

    Call arguments:
        tokens: int ``(B, L)``. valid_lens: optional int ``(B,)``.
        return_attention_scores: also return a list of ``(B, H, L, L)`` per layer.

    Example:
        >>> enc = TransformerEncoder(200, 24, 48, 8, 2, 0.5)
        >>> enc(np.ones((2, 100), "int32"), valid_lens=np.array([3, 2])).shape  # (2, 100, 24)

    References: Vaswani et al. 2017, section 3.1; D2L 11.7.4.
    """

    block_class = TransformerEncoderBlock

    def build(self, tokens_shape, *args, **kwargs):
        self._build_stack(tokens_shape)
        self.built = True

    def call(self, tokens, valid_lens=None, training=None, return_attention_scores=False):
        _checks.check_rank("tokens", tokens, 2)
        mask = ops.not_equal(tokens, PAD_ID)
        x = self.embed(tokens, training)
        weights = []
        for blk in self.blks:
            x, w = blk(x, valid_lens=valid_lens, mask=mask, training=training,
                       return_attention_scores=True)
            weights.append(w)
        x = self._finish(x)
        return (x, weights) if return_attention_scores else x

    def compute_mask(self, tokens, valid_lens=None, mask=None, **kwargs):
        return ops.not_equal(tokens, PAD_ID)

    def compute_output_shape(self, tokens_shape, *args, **kwargs):
        return tuple(tokens_shape) + (self.num_hiddens,)


@keras.saving.register_keras_serializable(package="keras_attn")
class TransformerDecoder(_StackBase):
    """Target embedding, positions, N decoder blocks and a ``dense`` to vocabulary logits.

    Token id 0 of ``tokens`` is masked; source padding comes from ``enc_outputs``'s Keras mask
    and/or ``enc_valid_lens``. Arguments as :class:`TransformerEncoder`, plus
    ``tie_embeddings``: logits from the transposed target embedding plus a bias.

    Sub-layers: ``embedding``, ``pos_encoding``, ``blks``, ``dense``, ``final_norm``.

    Call arguments:
        tokens: int ``(B, T)``. enc_outputs: ``(B, S, num_hiddens)``.
        enc_valid_lens: optional int ``(B,)``.
        return_attention_scores: also return ``{"self": [...], "cross": [...]}``, lists of
            ``(B, H, T, T)`` and ``(B, H, T, S)`` per layer.
        cache: from :meth:`init_cache`, for step decoding (``enc_outputs`` is not read; the
            updated cache is returned last).
        cache_update_index: int or scalar tensor, the position of ``tokens[:, 0]``.

    Returns: logits ``(B, T, vocab_size)`` (and the maps, and the cache).

    Example:
        >>> dec = TransformerDecoder(200, 24, 48, 8, 2, 0.5)
        >>> dec(np.ones((2, 100), "int32"), enc_outputs).shape   # (2, 100, 200)

    References: Vaswani et al. 2017, sections 3.1 and 3.4; D2L 11.7.5.
    """

    block_class = TransformerDecoderBlock

    def __init__(self, vocab_size, num_hiddens, ffn_num_hiddens, num_heads, num_layers,
                 dropout=0.0, use_bias=False, max_len=1000, norm_first=False, epsilon=1e-5,
                 tie_embeddings=False, ffn_dropout=0.0, **kwargs):
        super().__init__(vocab_size, num_hiddens, ffn_num_hiddens, num_heads, num_layers,
                         dropout, use_bias, max_len, norm_first, epsilon, ffn_dropout,
                         **kwargs)
        self.tie_embeddings = bool(tie_embeddings)
        self.dense = (TiedLogits(name="dense", dtype=self.dtype_policy) if tie_embeddings
                      else keras.layers.Dense(vocab_size, name="dense", dtype=self.dtype_policy))

    def build(self, tokens_shape, enc_outputs_shape=None, *args, **kwargs):
        x_shape = self._build_stack(
            tokens_shape, enc_outputs_shape or tuple(tokens_shape) + (self.num_hiddens,))
        self.dense.build(self.vocab_size if self.tie_embeddings else x_shape)
        self.built = True

    def logits(self, x):
        """Vocabulary logits from the last hidden states."""
        if self.tie_embeddings:
            return self.dense(x, self.embedding.embeddings)
        return dense(self.dense, x)

    def call(self, tokens, enc_outputs=None, enc_valid_lens=None, training=None,
             tokens_mask=None, enc_outputs_mask=None, return_attention_scores=False,
             cache=None, cache_update_index=None):
        _checks.check_rank("tokens", tokens, 2)
        if cache is None:
            _checks.check_rank("enc_outputs", enc_outputs, 3)
            x = self.embed(tokens, training)
            x_mask = ops.not_equal(tokens, PAD_ID)
        else:  # step decoding: `tokens` sit at positions cache_update_index, ...
            x = self.embed(tokens, training, start_index=cache_update_index)
            x_mask, enc_outputs_mask = None, cache["source_mask"]
        maps, new_self = {"self": [], "cross": []}, []
        for i, blk in enumerate(self.blks):
            kw = {} if cache is None else dict(
                self_attention_cache=cache["self"][i],
                self_attention_cache_update_index=cache_update_index,
                cross_attention_cache=cache["cross"][i])
            out = blk(x, enc_outputs, enc_valid_lens=enc_valid_lens, training=training,
                      x_mask=x_mask, enc_outputs_mask=enc_outputs_mask,
                      return_attention_scores=True, **kw)
            x, (w_self, w_cross) = out[0], out[1]
            new_self.extend(out[2:])  # the updated self-attention cache
            maps["self"].append(w_self)
            maps["cross"].append(w_cross)
        logits = self.logits(self._finish(x))
        return call_outputs(logits, maps if return_attention_scores else None,
                            None if cache is None else {**cache, "self": tuple(new_self)})

    def init_cache(self, enc_outputs, source, max_len, layout=None):
        """The ``cache`` of :meth:`call`: empty self-attention caches, the source projected once.

        Args:
            enc_outputs: ``(B, S, num_hiddens)``, the encoder's output for ``source``.
            source: int ``(B, S)`` source ids (0 = padding). max_len: positions to cache.
            layout: the self-attention caches' class (default
                ``MultiHeadAttention.cache_layout``); the cross-attention's are ``KVCache``
                with a ``KVCache``, else ``HeadsFirstCache``.

        Returns: ``{"self": per layer, "cross": per layer, "source_mask": bool (B, S)}``.
        """
        batch = ops.shape(enc_outputs)[0]
        layout = MultiHeadAttention.cache_layout(layout)
        cross = KVCache if layout is KVCache else HeadsFirstCache
        return {"self": tuple(blk.attention1.init_cache(batch, max_len, layout)
                              for blk in self.blks),
                "cross": tuple(blk.compute_cache(enc_outputs, cross) for blk in self.blks),
                "source_mask": ops.not_equal(source, PAD_ID)}

    @staticmethod
    def alignment(maps):
        """The last layer's cross-attention averaged over heads ``(B, T, S)``."""
        return ops.mean(maps["cross"][-1], axis=1)

    def compute_mask(self, *args, **kwargs):
        return None  # the masked loss handles target padding

    def compute_output_shape(self, tokens_shape, *args, **kwargs):
        return tuple(tokens_shape) + (self.vocab_size,)

    def get_config(self):
        return {**super().get_config(), "tie_embeddings": self.tie_embeddings}


@keras.saving.register_keras_serializable(package="keras_attn")
class TiedLogits(keras.layers.Layer):
    """``x @ embeddings^T + bias``: the output projection tied to an input embedding.

    Call arguments: ``x`` ``(..., d)``, ``embeddings`` ``(vocab_size, d)``.
    """

    def build(self, vocab_size, *args):
        self.bias = self.add_weight(name="bias", shape=(vocab_size,), initializer="zeros")
        self.built = True

    def call(self, x, embeddings):
        if x.shape[1] == 1 and fastpath.enabled():  # a decoding step: see layers._step
            from keras_attn.kernels import tf_step

            return tf_step.linear(x, embeddings, self.bias, transpose_kernel=True)
        return ops.matmul(x, ops.transpose(ops.cast(embeddings, x.dtype))) + ops.cast(
            self.bias, x.dtype)
