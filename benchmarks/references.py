"""The models the suite compares: ours and the same encoder-decoder from keras_hub layers.

Example:
    >>> ours, theirs = seq2seq_models(SEQ2SEQ, dropout=0.1, max_len=64)
    >>> KerasHubDecoding(theirs, num_tokens=64, start_id=2).greedy(source)   # (B, 64)
"""
from keras import ops

SEQ2SEQ = dict(vocab=8000, d=256, heads=4, ffn=1024, layers=2)
QUICK_SEQ2SEQ = dict(SEQ2SEQ, vocab=500, d=64, ffn=128)


def keras_hub_seq2seq(vocab, d, heads, ffn, layers, dropout, max_len):
    """The keras_hub encoder-decoder with our configuration (post-norm, learned positions)."""
    import keras
    import keras_hub

    source = keras.Input((None,), dtype="int32", name="source")
    target_in = keras.Input((None,), dtype="int32", name="target_in")
    # Explicit padding masks (as ours builds them from id 0) instead of Keras masks.
    src_mask = keras.ops.not_equal(source, 0)
    tgt_mask = keras.ops.not_equal(target_in, 0)
    x = keras_hub.layers.TokenAndPositionEmbedding(vocab, max_len, d)(source)
    for _ in range(layers):
        x = keras_hub.layers.TransformerEncoder(ffn, heads, dropout=dropout)(
            x, padding_mask=src_mask)
    y = keras_hub.layers.TokenAndPositionEmbedding(vocab, max_len, d)(target_in)
    for _ in range(layers):
        y = keras_hub.layers.TransformerDecoder(ffn, heads, dropout=dropout)(
            y, x, decoder_padding_mask=tgt_mask, encoder_padding_mask=src_mask)
    logits = keras.layers.Dense(vocab, name="logits")(y)
    return keras.Model({"source": source, "target_in": target_in}, logits, name="keras_hub")


def seq2seq_models(cfg, dropout, max_len, ffn_dropout=0.0):
    """``(ours, keras_hub's)`` for a config like :data:`SEQ2SEQ`."""
    from keras_attn import models

    ours = models.transformer_seq2seq(cfg["vocab"], cfg["vocab"], cfg["d"], cfg["ffn"],
                                      cfg["heads"], cfg["layers"], dropout=dropout,
                                      max_len=max_len, ffn_dropout=ffn_dropout)
    theirs = keras_hub_seq2seq(cfg["vocab"], cfg["d"], cfg["heads"], cfg["ffn"],
                               cfg["layers"], dropout, max_len)
    return ours, theirs


class KerasHubDecoding:
    """Cached decoding steps of a :func:`keras_hub_seq2seq` model, with keras_hub's caches
    (self-attention ``(B, 2, num_tokens, H, d_h)``, cross-attention ``(B, 2, S, H, d_h)``);
    0 and ``start_id`` are never chosen, as in ours. :meth:`greedy`: the whole loop."""

    def __init__(self, model, num_tokens, start_id):
        import keras_hub

        def of_type(cls):
            return [layer for layer in model.layers if isinstance(layer, cls)]

        hub = keras_hub.layers
        self.src_embedding, self.tgt_embedding = of_type(hub.TokenAndPositionEmbedding)
        self.encoders = of_type(hub.TransformerEncoder)
        self.decoders = of_type(hub.TransformerDecoder)
        self.dense = model.get_layer("logits")
        self.sampler = keras_hub.samplers.GreedySampler()
        self.model, self.num_tokens, self.start_id = model, num_tokens, start_id

    def encode(self, source):
        mask = ops.not_equal(source, 0)
        x = self.src_embedding(source)
        for layer in self.encoders:
            x = layer(x, padding_mask=mask, training=False)
        return x, mask

    def init_caches(self, batch, src_len):
        self_caches, cross_caches = [], []
        for layer in self.decoders:
            heads = layer.num_heads
            dh = self.dense.kernel.shape[0] // heads  # keras_hub's key_dim = d / heads
            self_caches.append(ops.zeros((batch, 2, self.num_tokens, heads, dh)))
            cross_caches.append(ops.zeros((batch, 2, src_len, heads, dh)))
        return self_caches, cross_caches

    def logits(self, token, index, enc, enc_mask, self_caches, cross_caches, cross_index):
        """float32 logits ``(B, V)`` of the next token, 0 and ``start_id`` banned, and the
        caches."""
        x = self.tgt_embedding(token[:, None], start_index=index)
        new_self, new_cross = [], []
        for layer, sc, cc in zip(self.decoders, self_caches, cross_caches):
            x, sc, cc = layer(x, enc, encoder_padding_mask=enc_mask, self_attention_cache=sc,
                              self_attention_cache_update_index=index, cross_attention_cache=cc,
                              cross_attention_cache_update_index=cross_index, training=False)
            new_self.append(sc)
            new_cross.append(cc)
        logits = ops.cast(self.dense(x)[:, 0], "float32")
        ids = ops.arange(ops.shape(logits)[-1], dtype="int32")
        banned = ops.logical_or(ops.equal(ids, 0), ops.equal(ids, self.start_id))
        return ops.where(banned[None], -1e9, logits), new_self, new_cross

    def greedy(self, source):
        """``num_tokens`` greedy tokens ``(B, num_tokens)`` through ``GreedySampler``, as
        keras_hub's seq2seq models run it (a first step seeds the cross-attention caches;
        no stop ids)."""
        enc, enc_mask = self.encode(source)
        batch, src_len = ops.shape(source)[0], ops.shape(source)[1]
        self_caches, cross_caches = self.init_caches(batch, src_len)
        start = ops.full((batch,), self.start_id, "int32")
        logits, self_caches, cross_caches = self.logits(start, 0, enc, enc_mask, self_caches,
                                                        cross_caches, 0)
        first = ops.cast(ops.argmax(logits, axis=-1), "int32")
        prompt = ops.concatenate([start[:, None], first[:, None],
                                  ops.zeros((batch, self.num_tokens - 1), "int32")], axis=1)
        given = ops.arange(self.num_tokens + 1) < 2
        mask = ops.broadcast_to(given[None], ops.shape(prompt))

        def next_logits(prompt, self_caches, index):
            token = ops.slice(prompt, [0, index - 1], [batch, 1])[:, 0]
            logits, self_caches, _ = self.logits(token, index - 1, enc, enc_mask, self_caches,
                                                 cross_caches, None)
            return logits, None, self_caches

        prompt = self.sampler(next_logits, prompt, cache=self_caches, index=2, mask=mask,
                              model=self.model)
        return prompt[:, 1:]
