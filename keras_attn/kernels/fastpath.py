"""The kernel policy: which implementation of a computation runs, as one explicit object.

Every computation has a reference path in ``keras.ops`` (every backend); a few have a
TensorFlow fast path (:mod:`keras_attn.kernels.tf_ops`, ``tf_attention``, ``tf_step``).
:class:`KernelPolicy` says which runs and how a decoding loop may lay out its state. It is
read when a function is traced, and is a context variable (per thread and asyncio task).

Example:
    >>> from keras_attn import fastpath
    >>> with fastpath.using(fast_paths=False):   # or KERAS_ATTN_FAST_PATHS=0
    ...     out = layer(x)                        # the reference path
    >>> fastpath.current().fast_paths
    True
"""
import contextlib
import contextvars
import dataclasses
import functools
import os
from typing import Optional


@dataclasses.dataclass(frozen=True)
class KernelPolicy:
    """Which kernels run and how decoding lays out its state.

    Args:
        fast_paths: the TensorFlow fast paths (on TensorFlow only); default on unless
            ``KERAS_ATTN_FAST_PATHS=0``.
        dynamic_shapes: a decoding loop may carry tensors whose shape changes (a growing
            cache, :mod:`keras_attn.decoding.compacted`): only a plain TensorFlow graph
            (not eager, not XLA, not TFLite) can.
        attention_chunks: chunk large attention scores to stay in the CPU's cache
            (:func:`keras_attn.kernels.tf_attention.attention_chunks`); None: when no GPU
            is visible.
        custom_gradients: the fast paths' hand-written gradients; graphs that only run
            forward (the exported ones) are traced without them.
        compiled: the graph is compiled by XLA, so no shape may depend on a computed value.
    """

    fast_paths: bool = True
    dynamic_shapes: bool = False
    attention_chunks: Optional[bool] = None
    custom_gradients: bool = True
    compiled: bool = False

    def __post_init__(self):
        for name in ("fast_paths", "dynamic_shapes", "compiled", "custom_gradients"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"`{name}` must be True or False. "
                                 f"Received: {name}={getattr(self, name)!r}")
        if self.attention_chunks is not None and not isinstance(self.attention_chunks, bool):
            raise ValueError("`attention_chunks` must be None, True or False. "
                             f"Received: attention_chunks={self.attention_chunks!r}")

    def fast(self):
        """True when the fast paths are on and the Keras backend is TensorFlow."""
        if not self.fast_paths:
            return False
        import keras

        return keras.backend.backend() == "tensorflow"

    def growing_cache(self):
        """Whether a self-attention cache made now grows by a position per step: fast
        paths, ``dynamic_shapes`` (not ``compiled``), and a function being traced
        (TensorFlow only)."""
        if not (self.dynamic_shapes and not self.compiled and self.fast()):
            return False
        import tensorflow as tf

        return tf.inside_function()


def _from_environment():
    flag = os.environ.get("KERAS_ATTN_FAST_PATHS", "1").strip().lower()
    return KernelPolicy(fast_paths=flag not in ("0", "false", "no", "off"))


_POLICY = contextvars.ContextVar("keras_attn_kernel_policy", default=_from_environment())


def current():
    """The :class:`KernelPolicy` in force."""
    return _POLICY.get()


@contextlib.contextmanager
def using(policy=None, **changes):
    """Run the block under ``policy`` (a :class:`KernelPolicy`; default the current one)
    with ``changes`` applied, then restore the previous one.

    Example:
        >>> with fastpath.using(dynamic_shapes=True):
        ...     concrete = tf.function(decode).get_concrete_function(spec)
    """
    policy = current() if policy is None else policy
    if not isinstance(policy, KernelPolicy):
        raise ValueError(f"`policy` must be a KernelPolicy. Received: policy={policy!r}")
    token = _POLICY.set(dataclasses.replace(policy, **changes))
    try:
        yield _POLICY.get()
    finally:
        _POLICY.reset(token)


def under(fn, **changes):
    """``fn`` run under the current policy with ``changes`` (:func:`using`), keeping its
    signature: how a graph builder fixes the policy its function is traced with.

    Example:
        >>> decode = tf.function(fastpath.under(greedy, dynamic_shapes=True))
    """
    @functools.wraps(fn)
    def run(*args, **kwargs):
        with using(**changes):
            return fn(*args, **kwargs)

    return run


# Whether our graphs (the export's, the Translator's decoding) are traced through AutoGraph
# (:func:`graph_function`). Their code says where a tensor decides (tf.cond, tf.while_loop),
# so AutoGraph converts nothing in them; it only rewrites the source of every function a trace
# meets (Keras layers, decoding) and calls each through its wrappers, a fifth to a third of
# the trace's time. False: a Python ``if`` on a tensor fails the trace instead of being
# converted (tests/export/test_export_speed.py traces both ways and compares the graphs).
AUTOGRAPH = False


def graph_function(fn, input_signature, jit_compile=None):
    """``fn`` as the ``tf.function`` our graphs are traced as (:data:`AUTOGRAPH`).

    Example:
        >>> serve = fastpath.graph_function(fastpath.under(decode, dynamic_shapes=True),
        ...                                 [tf.TensorSpec([None, None], tf.int32)])
    """
    import tensorflow as tf

    return tf.function(fn, input_signature=input_signature, autograph=AUTOGRAPH,
                       jit_compile=jit_compile)


def enabled():
    """True when the fast paths are on and the Keras backend is TensorFlow."""
    return current().fast()


def switched(flag):
    """Run the block with the fast paths on or off: ``using(fast_paths=flag)``."""
    return using(fast_paths=bool(flag))


def disabled():
    """Run the block on the reference paths: ``with fastpath.disabled(): ...``."""
    return using(fast_paths=False)
