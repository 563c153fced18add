"""GRU encoder and GRU decoder with Bahdanau (additive) attention."""
import keras
import tensorflow as tf
from keras import ops

from keras_attn import ops as attn_ops
from keras_attn.layers import _checks
from keras_attn.layers.additive_attention import AdditiveAttention
from keras_attn.layers.dropout import Dropout
from keras_attn.layers.transformer import PAD_ID, clean_token_ids


class _RNNBase(keras.layers.Layer):
    def __init__(self, vocab_size, embed_size, num_hiddens, num_layers, dropout=0.0, **kwargs):
        super().__init__(**kwargs)
        self.vocab_size = _checks.check_positive_int("vocab_size", vocab_size)
        self.embed_size = _checks.check_positive_int("embed_size", embed_size)
        self.num_hiddens = _checks.check_positive_int("num_hiddens", num_hiddens)
        self.num_layers = _checks.check_positive_int("num_layers", num_layers)
        self.dropout = _checks.check_rate("dropout", dropout)
        self.embedding = keras.layers.Embedding(vocab_size, embed_size, name="embedding",
                                                dtype=self.dtype_policy)
        self.dropout_layer = Dropout(self.dropout, dtype=self.dtype_policy)

    def _embed(self, tokens):
        _checks.check_rank("tokens", tokens, 2)
        return self.embedding(clean_token_ids(tokens, self.vocab_size))

    def get_config(self):
        return {**super().get_config(), "vocab_size": self.vocab_size,
                "embed_size": self.embed_size, "num_hiddens": self.num_hiddens,
                "num_layers": self.num_layers, "dropout": self.dropout}


@keras.saving.register_keras_serializable(package="keras_attn")
class Seq2SeqEncoder(_RNNBase):
    """Multi-layer GRU encoder for sequence to sequence learning.

    Padding (id 0) is skipped by the GRUs, so each row's final state is the state after its
    last real token.

    Args:
        vocab_size, embed_size, num_hiddens, num_layers: sizes.
        dropout: rate between GRU layers while training.

    Sub-layers: ``embedding``, ``grus`` (list of ``keras.layers.GRU``).

    Call arguments: tokens int ``(B, L)``.

    Returns: ``(outputs (B, L, num_hiddens), states)``, states a list of ``(B, num_hiddens)``
    (one per layer).

    Example:
        >>> enc = Seq2SeqEncoder(10, 8, 16, 2)
        >>> outputs, states = enc(np.zeros((4, 9), "int32"))   # (4, 9, 16), 2 x (4, 16)

    References: Sutskever et al. 2014; D2L 10.7.
    """

    def __init__(self, vocab_size, embed_size, num_hiddens, num_layers, dropout=0.0, **kwargs):
        super().__init__(vocab_size, embed_size, num_hiddens, num_layers, dropout, **kwargs)
        self.grus = [
            keras.layers.GRU(num_hiddens, return_sequences=True, return_state=True,
                             name=f"gru_{i}", dtype=self.dtype_policy)
            for i in range(num_layers)
        ]

    def build(self, tokens_shape):
        self.embedding.build(tokens_shape)
        shape = tuple(tokens_shape) + (self.embed_size,)
        for gru in self.grus:
            gru.build(shape)
            shape = tuple(tokens_shape) + (self.num_hiddens,)
        self.built = True

    def call(self, tokens, training=None):
        length = None
        if len(tokens.shape) == 2 and tokens.shape[1] in (None, 0):
            # A GRU cannot run over zero steps (a bare TensorFlow slice error): give an
            # empty source one padding step (masked: the states stay zero) and drop it
            # from the outputs below.
            length = ops.shape(tokens)[1]
            tokens = tf.pad(tokens, [[0, 0], [0, ops.maximum(1 - length, 0)]])
        mask = ops.not_equal(tokens, PAD_ID)
        x = self._embed(tokens)
        states = []
        for i, gru in enumerate(self.grus):
            if i:
                x = self.dropout_layer(x, training=training)
            x, state = gru(x, mask=mask, training=training)
            states.append(state)
        return (x if length is None else x[:, :length]), states

    def compute_mask(self, tokens, mask=None):
        return None

    def compute_output_shape(self, tokens_shape):
        state = (tokens_shape[0], self.num_hiddens)
        return tuple(tokens_shape) + (self.num_hiddens,), [state] * self.num_layers


@keras.saving.register_keras_serializable(package="keras_attn")
class BahdanauDecoder(_RNNBase):
    """GRU decoder that attends over the encoder outputs at every step.

    At step t the query is the top GRU layer's previous state; the additive-attention
    context is concatenated to the embedding of token t and fed to the GRU stack, whose
    top output goes through ``dense`` to the vocabulary.

    Args:
        vocab_size, embed_size, num_hiddens, num_layers: sizes.
        dropout: rate for the attention weights and between GRU layers.

    Sub-layers: ``attention`` (:class:`AdditiveAttention`), ``embedding``, ``cells`` (list
    of ``keras.layers.GRUCell``), ``dense``.

    Call arguments:
        tokens: int ``(B, T)``. enc_outputs: ``(B, S, num_hiddens)``.
        enc_states: list of ``(B, num_hiddens)``, the encoder's final states.
        enc_valid_lens: optional int ``(B,)``. enc_outputs_mask: bool ``(B, S)``.
        return_attention_scores: also return the weights ``(B, T, S)``.

    Returns: logits ``(B, T, vocab_size)``.

    Example:
        >>> dec = BahdanauDecoder(10, 8, 16, 2)
        >>> dec(np.zeros((4, 7), "int32"), *Seq2SeqEncoder(10, 8, 16, 2)(src)).shape  # (4, 7, 10)

    References: Bahdanau et al. 2015; D2L 11.4.
    """

    def __init__(self, vocab_size, embed_size, num_hiddens, num_layers, dropout=0.0, **kwargs):
        super().__init__(vocab_size, embed_size, num_hiddens, num_layers, dropout, **kwargs)
        self.attention = AdditiveAttention(num_hiddens, dropout, name="attention",
                                           dtype=self.dtype_policy)
        self.cells = [keras.layers.GRUCell(num_hiddens, name=f"gru_cell_{i}",
                                           dtype=self.dtype_policy)
                      for i in range(num_layers)]
        self.dense = keras.layers.Dense(vocab_size, name="dense", dtype=self.dtype_policy)

    def build(self, tokens_shape, enc_outputs_shape=None, *args, **kwargs):
        batch = tokens_shape[0]
        self.embedding.build(tokens_shape)
        enc_outputs_shape = enc_outputs_shape or (batch, None, self.num_hiddens)
        self.attention.build((batch, 1, self.num_hiddens), enc_outputs_shape, enc_outputs_shape)
        in_size = self.embed_size + enc_outputs_shape[-1]
        for cell in self.cells:
            cell.build((batch, in_size))
            in_size = self.num_hiddens
        self.dense.build((batch, self.num_hiddens))
        self.built = True

    def prepare(self, enc_outputs, enc_valid_lens=None, enc_outputs_mask=None):
        """Per-source work done once: projected keys and the bool key mask ``(B, 1, S)``."""
        keep = None
        if enc_outputs_mask is not None:
            keep = ops.expand_dims(ops.cast(enc_outputs_mask, "bool"), 1)
        if enc_valid_lens is not None:
            keep = attn_ops.combine_masks(
                keep, attn_ops.valid_lens_to_mask(enc_valid_lens, ops.shape(enc_outputs)[1], 3))
        return self.attention.project_keys(enc_outputs), keep

    def step(self, x_emb, states, enc_outputs, projected_keys, keep, training=None):
        """One GRU step: ``x_emb`` ``(B, embed_size)``, ``states`` list of ``(B, h)``.

        Returns ``(top_output (B, h), new_states, weights (B, S))``.
        """
        query = ops.expand_dims(states[-1], 1)  # (B, 1, h)
        context, weights = self.attention.attend(query, projected_keys, enc_outputs, keep,
                                                 training=training)
        x = ops.concatenate([x_emb, ops.cast(context[:, 0], x_emb.dtype)], axis=-1)
        new_states = []
        for i, (cell, state) in enumerate(zip(self.cells, states)):
            if i:
                x = self.dropout_layer(x, training=training)
            x, _ = cell(x, [state], training=training)
            new_states.append(x)
        return x, new_states, weights[:, 0]

    def call(self, tokens, enc_outputs, enc_states, enc_valid_lens=None, training=None,
             tokens_mask=None, enc_outputs_mask=None, return_attention_scores=False):
        _checks.check_rank("enc_outputs", enc_outputs, 3)
        if len(enc_states) != self.num_layers:
            raise ValueError(
                f"`enc_states` must hold one state per layer ({self.num_layers}). "
                f"Received: {len(enc_states)} states"
            )
        emb = self._embed(tokens)  # (B, T, e)
        projected_keys, keep = self.prepare(enc_outputs, enc_valid_lens, enc_outputs_mask)
        batch, src_len = ops.shape(enc_outputs)[0], ops.shape(enc_outputs)[1]
        init = (tuple(ops.cast(s, self.compute_dtype) for s in enc_states),
                ops.zeros((batch, self.num_hiddens), self.compute_dtype),
                ops.zeros((batch, src_len), self.compute_dtype))

        def body(carry, x_t):
            states = list(carry[0])
            h, new_states, weights = self.step(x_t, states, enc_outputs, projected_keys, keep,
                                               training)
            return (tuple(new_states), h, ops.cast(weights, self.compute_dtype))

        # tf.scan, not keras.ops.scan: the latter's while_loop has no maximum_iterations, so
        # its gradient cannot be compiled by XLA (model.compile(jit_compile=True) failed).
        _, outputs, weights = tf.scan(body, ops.transpose(emb, (1, 0, 2)), init)
        logits = self.dense(ops.transpose(outputs, (1, 0, 2)))  # (B, T, V)
        if return_attention_scores:
            return logits, ops.transpose(weights, (1, 0, 2))
        return logits

    def compute_mask(self, *args, **kwargs):
        return None

    def compute_output_shape(self, tokens_shape, *args, **kwargs):
        return tuple(tokens_shape) + (self.vocab_size,)
