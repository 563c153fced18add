"""GRU encoder and GRU decoder with Bahdanau (additive) attention."""
import keras
from keras import ops

from keras_attn import ops as attn_ops
from keras_attn.layers import _checks
from keras_attn.layers._masking import call_outputs
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
        keys = ("vocab_size", "embed_size", "num_hiddens", "num_layers", "dropout")
        return {**super().get_config(), **{k: getattr(self, k) for k in keys}}


@keras.saving.register_keras_serializable(package="keras_attn")
class Seq2SeqEncoder(_RNNBase):
    """Multi-layer GRU encoder; the GRUs skip padding (id 0), so each row's final state is
    the one after its last real token.

    Args:
        vocab_size, embed_size, num_hiddens, num_layers: sizes.
        dropout: rate between GRU layers while training.

    Sub-layers: ``embedding``, ``grus`` (list of ``keras.layers.GRU``).

    Call arguments: tokens int ``(B, L)``.

    Returns: ``(outputs (B, L, num_hiddens), states)``, one ``(B, num_hiddens)`` per layer.

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
        if len(tokens.shape) == 2 and tokens.shape[1] == 0:
            length, tokens = 0, ops.pad(tokens, [[0, 0], [0, 1]])
        elif len(tokens.shape) == 2 and tokens.shape[1] is None:  # only on TensorFlow
            # A GRU cannot run over zero steps (a bare TensorFlow slice error): give an
            # empty source one padding step (masked: the states stay zero) and drop it
            # from the outputs below.
            from keras_attn.kernels import tf_ops

            length = ops.shape(tokens)[1]
            tokens = tf_ops.pad_to_one_step(tokens)
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

    At step t the query is the top GRU layer's previous state; the attention context and
    the embedding of token t feed the GRU stack, whose top output ``dense`` maps to logits.

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
        cache: from :meth:`init_cache`, for step decoding: the GRU states start from it,
            ``enc_outputs``/``enc_states`` are not read, and the cache with the new states
            is returned last. cache_update_index: unused (the states carry the position).

    Returns: logits ``(B, T, vocab_size)`` (and the weights, and the cache).

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

    def init_cache(self, encoder_outputs, source=None, max_len=None, enc_valid_lens=None,
                   enc_outputs_mask=None):
        """The ``cache`` of :meth:`call`: what every step needs, computed once per source.

        Args:
            encoder_outputs: ``(enc_outputs, enc_states)`` from :class:`Seq2SeqEncoder`.
            source: optional int ``(B, S)`` source ids; id 0 is masked.
            max_len: unused (a GRU carries states); there so both decoders are driven alike.
            enc_valid_lens: optional int ``(B,)``. enc_outputs_mask: optional bool ``(B, S)``.

        Returns: a dict: ``"states"`` (per layer ``(B, num_hiddens)``), ``"keys"`` (the
        attention's projected keys), ``"values"`` (the encoder outputs), ``"source_mask"``
        bool ``(B, 1, S)`` or None.
        """
        enc_outputs, enc_states = encoder_outputs
        if len(enc_states) != self.num_layers:
            raise ValueError(
                f"`enc_states` must hold one state per layer ({self.num_layers}). "
                f"Received: {len(enc_states)} states"
            )
        keep = attn_ops.combine_masks(  # (B, 1, S)
            None if source is None else ops.expand_dims(ops.not_equal(source, PAD_ID), 1),
            None if enc_outputs_mask is None else ops.expand_dims(enc_outputs_mask, 1),
            None if enc_valid_lens is None else attn_ops.valid_lens_to_mask(
                enc_valid_lens, ops.shape(enc_outputs)[1], 3))
        return {"states": tuple(ops.cast(h, self.compute_dtype) for h in enc_states),
                "keys": self.attention.compute_cache(enc_outputs), "values": enc_outputs,
                "source_mask": keep}

    def _step(self, x_emb, cache, states, noise=None):
        """One GRU step: ``x_emb`` ``(B, embed_size)``, ``states`` list of ``(B, h)``.

        ``noise``: None, or this step's dropout masks ``(attention (B, 1, S), between
        layers (L-1, B, h))`` (0 or ``1 / keep``). Returns ``(top_output (B, h),
        new_states, weights (B, S))``.
        """
        query = ops.expand_dims(states[-1], 1)  # (B, 1, h)
        context, weights, _ = self.attention(query, cache["values"], cache["values"],
                                             mask=cache["source_mask"],
                                             return_attention_scores=True, cache=cache["keys"],
                                             training=False)
        if noise is not None:  # the attention's dropout, with this step's mask
            context = ops.matmul(weights * ops.cast(noise[0], weights.dtype), cache["values"])
        x = ops.concatenate([x_emb, ops.cast(context[:, 0], x_emb.dtype)], axis=-1)
        new_states = []
        for i, (cell, state) in enumerate(zip(self.cells, states)):
            if i and noise is not None:
                x = x * ops.cast(noise[1][i - 1], x.dtype)
            x, _ = cell(x, [state], training=False)
            new_states.append(x)
        return x, new_states, weights[:, 0]

    def _noise(self, steps, batch, src_len, training):
        """Every step's dropout masks, drawn before the loop (a draw inside a JAX scan
        would leak its seed out of the trace), as dropout applied to ones."""
        if not training or self.dropout == 0:
            return None
        ones = ops.ones((steps, batch, 1, src_len), self.compute_dtype)
        between = ops.ones((steps, max(self.num_layers - 1, 1), batch, self.num_hiddens),
                           self.compute_dtype)
        return (self.attention.dropout_layer(ones, training=True),
                self.dropout_layer(between, training=True))

    def call(self, tokens, enc_outputs=None, enc_states=None, enc_valid_lens=None,
             training=None, tokens_mask=None, enc_outputs_mask=None,
             return_attention_scores=False, cache=None, cache_update_index=None):
        stepping = cache is not None
        if not stepping:
            _checks.check_rank("enc_outputs", enc_outputs, 3)
            cache = self.init_cache((enc_outputs, enc_states), None, None, enc_valid_lens,
                                    enc_outputs_mask)
        emb = ops.transpose(self._embed(tokens), (1, 0, 2))  # (T, B, e)
        src_len = ops.shape(cache["values"])[1]
        batch = ops.shape(emb)[1]
        noise = self._noise(ops.shape(emb)[0], batch, src_len, training)

        def body(states, xs):
            h, new_states, weights = self._step(xs[0], cache, list(states),
                                                None if noise is None else xs[1:])
            return tuple(new_states), (h, ops.cast(weights, self.compute_dtype))

        xs = (emb,) if noise is None else (emb,) + noise
        if emb.shape[0] == 1:  # one step (decoding): no loop
            states, (h, w) = body(cache["states"], tuple(x[0] for x in xs))
            outputs, weights = h[None], w[None]
        else:
            states, (outputs, weights) = _scan(body, cache["states"], xs, (
                ops.zeros((batch, self.num_hiddens), self.compute_dtype),
                ops.zeros((batch, src_len), self.compute_dtype)))
        logits = self.dense(ops.transpose(outputs, (1, 0, 2)))  # (B, T, V)
        return call_outputs(
            logits, ops.transpose(weights, (1, 0, 2)) if return_attention_scores else None,
            {**cache, "states": states} if stepping else None)  # weights (B, T, S)

    @staticmethod
    def alignment(weights):
        """The attention of each target position over the source ``(B, T, S)``."""
        return weights

    def compute_mask(self, *args, **kwargs):
        return None

    def compute_output_shape(self, tokens_shape, *args, **kwargs):
        return tuple(tokens_shape) + (self.vocab_size,)


def _scan(body, states, xs, y_like):
    """``keras.ops.scan(body, states, xs)``: ``body(states, x) -> (states, ys)``; on
    TensorFlow :func:`keras_attn.kernels.tf_ops.scan`, whose gradient compiles under XLA."""
    if keras.backend.backend() == "tensorflow":
        from keras_attn.kernels import tf_ops

        return tf_ops.scan(body, states, xs, y_like)
    return ops.scan(body, states, xs)
