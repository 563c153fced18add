"""The decoding step: one position of a model of :mod:`keras_attn.models`, for a loop.

Both decoders are driven alike: ``decoder.init_cache(encoder output, source, max_len)``
once, then ``decoder(token, cache=..., cache_update_index=i)`` per step; ``use_cache=False``
re-runs the model on the whole prefix (the reference).
"""
import keras
from keras import ops

from keras_attn import ops as attn_ops


class DecodingStep:
    """``init() -> state`` and ``step(token, state, index) -> (logits, state, alignment)`` for a
    model of :mod:`keras_attn.models`, with or without the cache (also ``step_functions``).

    The state is what a step rewrites; the rest of the cache is read from here, so a beam
    reorder does not copy it. The weights are read once and seen by every step through a
    ``keras.StatelessScope`` (in a loop a variable read would run at every step).

    Args:
        model: a model of :mod:`keras_attn.models`. source: int ``(B, S)`` token ids, or
            None for :meth:`use_constants`. max_len: the longest output.
        use_cache: the cached step (else the reference). encoded: :func:`encode`'s output.

    Example:
        >>> steps = step_functions(model, source, 8, True, encode(model, source))
        >>> state = steps.init()
        >>> logits, state, _ = steps.step(ops.full((B,), 2, "int32"), state, 0)
    """

    _STATE_KEYS = ("self", "states")  # the entries of a decoder's cache that steps rewrite

    def __init__(self, model, source, max_len, use_cache, encoded):
        self.encoder = model.get_layer("encoder")
        self.decoder = model.get_layer("decoder")
        table = getattr(self.decoder, "max_len", None)
        if table is not None and max_len > table:
            raise ValueError(
                f"`max_len` must not exceed the decoder's positional table (max_len="
                f"{table}). Received: max_len={max_len}")
        self.source, self.max_len, self.use_cache = source, max_len, use_cache
        self._encoded = encoded

    def init(self, carry_constants=False):
        """The first state; with ``carry_constants`` the whole cache (for the compacted loop)."""
        self._read_weights()
        encoded = self._encoded
        if self.use_cache:
            cache = self.decoder.init_cache(encoded, self.source, self.max_len)
            carried = {k for k, v in cache.items()
                       if k in self._STATE_KEYS or (carry_constants and v is not None)}
            self.constants = {k: v for k, v in cache.items() if k not in carried}
            return {k: v for k, v in cache.items() if k in carried}
        self.encoded = as_args(encoded)
        return ops.zeros((ops.shape(self.source)[0], self.max_len), "int32")  # the prefix

    def use_constants(self, constants):
        """Step with the read-only entries of a cache made elsewhere (TFLite's builtin target)."""
        if not self.use_cache:
            raise ValueError("`use_constants` needs the cached step. Received: use_cache=False")
        self._read_weights()
        self.constants = dict(constants)
        return self

    def _read_weights(self):
        # ops.copy: a tensor read (convert_to_tensor would give the variable back on TF).
        self.weights = [(w, ops.copy(w)) for w in self.decoder.weights]

    def step(self, token, state, index, alignment=False):
        """``(logits (B, V) float32, state, alignment (B, S) or None)`` for ``token`` ``(B,)``."""
        with keras.StatelessScope(self.weights):
            logits, state, align = self._step(token, state, index, alignment)
        return ops.cast(logits, "float32"), state, align

    def _step(self, token, state, index, alignment):
        if self.use_cache:
            out = self.decoder(token[:, None], training=False,
                               cache={**self.constants, **state}, cache_update_index=index,
                               return_attention_scores=alignment)
            logits, cache = out[0], out[-1]
            align = self.decoder.alignment(out[1])[:, 0] if alignment else None
            return logits[:, 0], {k: cache[k] for k in state}, align
        state = attn_ops.slice_update(state, (0, index), token[:, None])
        logits, maps = self.decoder(state, *self.encoded, training=False,
                                    enc_outputs_mask=ops.not_equal(self.source, 0),
                                    return_attention_scores=True)
        align = ops.take(self.decoder.alignment(maps), index, axis=1) if alignment else None
        return ops.take(logits, index, axis=1), state, align


step_functions = DecodingStep  # the decoding step of a model, for a loop of one's own


def encode(model, source):
    """The encoder's output for ``source`` ``(B, S)`` (the decoders' ``init_cache`` input)."""
    return model.get_layer("encoder")(check_source(source), training=False)


def repeat_rows(source, encoded, n):
    """``source`` ``(B, S)`` and its encoding with every row repeated ``n`` times in place."""
    return (ops.repeat(source, n, axis=0),
            keras.tree.map_structure(lambda t: ops.repeat(t, n, axis=0), encoded))


def as_args(encoded):
    """The encoder's output as the tuple of the decoder's positional arguments after tokens."""
    return tuple(encoded) if isinstance(encoded, (tuple, list)) else (encoded,)


def check_source(source):
    """``source`` as int32 ``(B, S)`` token ids; ``ValueError`` for floats or another rank."""
    source = ops.convert_to_tensor(source)
    if "float" in keras.backend.standardize_dtype(source.dtype):
        raise ValueError(f"`source` must hold integer token ids. Received: dtype={source.dtype}")
    if len(source.shape) != 2:
        raise ValueError(f"`source` must have shape (B, S). Received: shape={tuple(source.shape)}")
    return ops.cast(source, "int32")
