"""The search every Keras/TensorFlow engine traces (:class:`GraphSearch`): the Keras
engine's, and the exported graphs' (``keras_attn.export.request``)."""
import keras
import numpy as np
import tensorflow as tf

from keras_attn import decoding
from keras_attn.core.special_tokens import END_ID, START_ID
from keras_attn.decoding import processors
from keras_attn.decoding.confidence import hypothesis_features
from keras_attn.decoding.options import CONTROLS, OPTIONS
from keras_attn.kernels import fastpath
from keras_attn.translation import alignment

# The options a traced search takes as tensors (they do not retrace); the others shape it.
TENSOR_OPTIONS = tuple(name for name, opt in OPTIONS.items()
                       if opt.dtype in ("int32", "float32") and name not in (
                           "beam_size", "num_hypotheses"))
# What :meth:`GraphSearch.__call__` returns, in the order of its traced functions' outputs.
SEARCH_OUTPUTS = ("tokens", "lengths", "scores", "codes", "features")


def traced(fn, input_signature):
    """``fn`` as a ``tf.function`` traced with ``dynamic_shapes`` on (TensorFlow; else ``fn``)."""
    if keras.backend.backend() != "tensorflow":
        return fn
    return fastpath.graph_function(fastpath.under(fn, dynamic_shapes=True), input_signature)


class GraphSearch:
    """Decode source ids with resolved :class:`DecodingOptions`, then the alignment pair
    codes and the confidence features in passes over the hypotheses.

    Args:
        model: a model from ``keras_attn.models``. max_len: the output buffers' length.
        word_tables: zero-argument callable returning both vocabularies'
            :func:`keras_attn.translation.alignment.word_tables`.

    Example:
        >>> search = GraphSearch(model, 48, lambda: tables)
        >>> search.decode_ids(source, DecodingOptions(beam_size=4).resolve(48))["tokens"].shape
        (1, 1, 48)
    """

    def __init__(self, model, max_len, word_tables):
        self.model, self.max_len, self.word_tables = model, max_len, word_tables
        self._traced = {}

    def __call__(self, source, prefix, opts, confidence=True, kinds=None):
        """Search, then the alignment codes and (``confidence``) the confidence features.

        Args:
            source: int32 ``(B, S)`` source ids. prefix: int32 ``(B, P)`` target ids forced
                first (0: none left), or None.
            opts: resolved :class:`DecodingOptions` (:meth:`DecodingOptions.holding` for tensors).
            confidence: also the confidence ``features``.
            kinds: None: the search ``opts`` name; one kind of ``decoding.KINDS`` in a tuple:
                that search; all of them: one picked in the graph (TensorFlow only).

        Returns:
            A dict: ``tokens`` int32 ``(B, N, max_len)``, ``lengths`` ``(B, N)``, ``scores``
            float32 ``(B, N)``, ``codes`` int32 ``(B, N, max_len)`` (alignment pair codes; 0
            unless asked) and with ``confidence`` ``features`` ``(B, N, F)``.
        """
        if kinds is not None and len(kinds) > 1 and set(kinds) != set(decoding.KINDS):
            raise ValueError(f"`kinds` must be one kind or all of {decoding.KINDS}. "
                             f"Received: kinds={kinds!r}")
        encoded = decoding.encode(self.model, source)  # once: search, alignments, confidence

        def run(kind):  # a kind picked in the graph fixes what opts' tensors cannot
            options = opts
            if kind == "greedy":
                options = opts.replaced(beam_size=1, num_hypotheses=1, sampling=False)
            elif kind is not None:
                options = opts.replaced(sampling=kind == "sample")
            out = decoding.decode(self.model, source, options, self.max_len, START_ID, END_ID,
                                  prefix, kind=kind, encoded=encoded)
            return out["tokens"], out["lengths"], out["scores"]

        if kinds is None or len(kinds) == 1:
            tokens, lengths, scores = run(kinds[0] if kinds else None)
        else:
            sampling = opts.sampling_topk > 1
            beam = tf.logical_and(tf.logical_not(sampling), opts.beam_size > 1)
            tokens, lengths, scores = tf.cond(sampling, lambda: run("sample"), lambda: tf.cond(
                beam, lambda: run("beam"), lambda: run("greedy")))
        out = {"tokens": tokens, "lengths": lengths, "scores": scores}
        shape = keras.ops.shape(tokens)  # (B, N, T)
        flat = keras.ops.reshape(tokens, (-1, shape[2]))

        def codes():
            attention = decoding.cross_attention(self.model, source, flat, START_ID, encoded)
            pairs = alignment.hard_alignment(attention, keras.ops.repeat(source, shape[1], 0),
                                             flat, *self.word_tables(), self.max_len)
            return keras.ops.reshape(pairs, shape)

        if isinstance(opts.return_alignments, bool):
            out["codes"] = codes() if opts.return_alignments else keras.ops.zeros_like(tokens)
        else:
            # zeros of the tokens' shape, not zeros_like: inlined in a TFLite signature that
            # calls another (export.modules), a branch of ZerosLike alone kept a Flex op.
            out["codes"] = tf.cond(opts.return_alignments, codes,
                                   lambda: tf.zeros(tf.shape(tokens), tokens.dtype))
        if confidence:
            signals = hypothesis_features(self.model, source, flat, START_ID, END_ID, encoded)
            out["features"] = keras.ops.reshape(signals, (shape[0], shape[1], -1))
        return out

    def function(self, opts, with_prefix, confidence):
        """This search as a ``tf.function``, one per set of options that shape the graph."""
        on = tuple(name for name in CONTROLS if processors.active(name, getattr(opts, name)))
        key = (opts.beam_size if not opts.sampling else 0, opts.num_hypotheses,
               opts.sampling, with_prefix, opts.return_alignments, on, confidence)
        if key not in self._traced:
            def fn(source, prefix, values):
                # A control that is off stays a Python value: no op in the loop.
                graph_opts = opts.replaced(**{**values, **{
                    name: processors.OFF[name] for name in CONTROLS if name not in on}})
                out = self(source, prefix if with_prefix else None, graph_opts, confidence)
                return tuple(out[name] for name in SEARCH_OUTPUTS if name in out)
            spec = [tf.TensorSpec([None, None], tf.int32), tf.TensorSpec([None, None], tf.int32),
                    {name: tf.TensorSpec([], OPTIONS[name].dtype) for name in TENSOR_OPTIONS}]
            self._traced[key] = traced(fn, spec)
        return self._traced[key]

    def decode_ids(self, source, opts, prefix=None, confidence=True):
        """:meth:`__call__`'s dict, in numpy, from the traced :meth:`function` of ``opts``."""
        source = np.asarray(source, "int32")
        prefix = np.zeros((len(source), 0), "int32") if prefix is None else prefix
        fn = self.function(opts, prefix.shape[1] > 0, confidence)
        values = {name: np.dtype(OPTIONS[name].dtype).type(getattr(opts, name))
                  for name in TENSOR_OPTIONS}
        return dict(zip(SEARCH_OUTPUTS, (keras.ops.convert_to_numpy(t)
                                         for t in fn(source, prefix, values))))
