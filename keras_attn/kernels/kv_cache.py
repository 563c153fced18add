"""Key/value caches of :class:`~keras_attn.layers.MultiHeadAttention`: the layout is the type.

A cache is a pair ``(k, v)`` of projected keys and values; its class says how they are laid
out, and the attention layer chooses its kernels from it (a plain tuple reads as a
``KVCache``; a cross-attention's cache is a ``KVCache`` or a ``HeadsFirstCache``). All three
are named tuples, so they pass through ``keras.tree``, ``tf.nest`` and while loops.

Example:
    >>> cache = mha.init_cache(batch=2, max_len=16, layout=KVCache)
    >>> out, cache = mha(x, x, x, cache=cache, cache_update_index=0)
"""
from typing import Any, NamedTuple


class KVCache(NamedTuple):
    """Keys and values ``(B, L, H, d_h)``: the layout of the reference path."""

    k: Any
    v: Any


class HeadsFirstCache(NamedTuple):
    """Keys and values ``(B, H, L, d_h)``, written in place at the step's index
    (:mod:`keras_attn.kernels.tf_step`): a step's scores and context are two batched
    matmuls that read the cache once, with no transpose."""

    k: Any
    v: Any


class GrowingCache(NamedTuple):
    """Keys and values ``(B, H, t, d_h)`` with ``t`` the positions so far: a step appends
    one position by a concat (:mod:`keras_attn.kernels.tf_step`; a plain TensorFlow graph
    only)."""

    k: Any
    v: Any


LAYOUTS = (KVCache, HeadsFirstCache, GrowingCache)
FAST_LAYOUTS = (HeadsFirstCache, GrowingCache)  # attended by keras_attn.kernels.tf_step


def as_cache(cache):
    """``cache`` as one of :data:`LAYOUTS` (a plain ``(k, v)`` pair reads as a ``KVCache``).

    Raises:
        ValueError: not a pair.
    """
    if isinstance(cache, LAYOUTS):
        return cache
    if isinstance(cache, (tuple, list)) and len(cache) == 2:
        return KVCache(*cache)
    raise ValueError("`cache` must be a (k, v) pair: a KVCache, HeadsFirstCache or "
                     f"GrowingCache. Received: cache of type {type(cache).__name__}")
