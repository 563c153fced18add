"""The TFLite builtin target's graphs (TensorFlow-only): :class:`BuiltinModule`, the
encoder and one decoder step with fixed shapes, builtin ops only; the application runs the
loop (``keras_attn.export.builtin_runtime``).
"""
import tensorflow as tf

from keras_attn.text import tokenizers as text
from keras_attn.decoding.confidence import Calibrator
from keras_attn.decoding.options import CONTROL_DEFAULTS, DecodingOptions
from keras_attn.export.modules import _Untracked, forward_only, track_variables
from keras_attn.export.runtime import (TFLITE_ALIGNED_STEP_SIGNATURE, TFLITE_ENCODER_SIGNATURE,
                                       TFLITE_FROZEN_STEP_SIGNATURE, TFLITE_STEP_SIGNATURE)
from keras_attn.kernels import fastpath
from keras_attn.kernels.kv_cache import HeadsFirstCache


class BuiltinModule(tf.Module):
    """Encoder and one greedy decoding step with fixed shapes (batch 1) for the builtin target.

    ``encode``: ``source`` int32 ``(1, max_len)`` -> ``encoder_output``, ``source_mask``
    float32 ``(1, max_len)``, per layer ``cross_k_<i>``/``cross_v_<i>`` heads-first
    ``(1, H, max_len, d_h)`` (``kv_shape``), ``source_length`` and ``unknown`` float32
    ``(1,)`` (the confidence's source statistics), ``length_limit`` int32 ``(1,)``.
    ``step``: ``token`` int32 ``(1, 1)``, ``index`` int32 ``()``, ``score``, ``lowest`` and
    ``unsure`` float32 ``(1,)`` (log-probability sum, least token log-probability, tokens
    below probability 1/2), ``history`` int32 ``(1, max_len)`` (the tokens so far),
    ``source_length``, ``unknown``, ``length_limit``, ``source_mask``, ``cross_k_<i>``,
    ``cross_v_<i>``, ``cache_k_<i>``, ``cache_v_<i>`` -> ``next_token`` int32 ``(1,)``,
    ``finished`` bool ``(1,)``, ``score``, ``lowest``, ``unsure``, ``confidence`` float32
    ``(1,)``, ``history``, ``logits`` float32 ``(1, V)`` and the updated caches, which the
    app feeds back until ``finished``. The step is ``keras_attn.decoding``'s greedy step.
    ``step_aligned`` (signature ``decode_step_v3``): ``step``'s inputs and outputs with
    ``finished`` int32 (1 = done) and ``attention`` float32 ``(1, max_len)`` (the last
    layer's cross-attention over the source, averaged over heads: the word alignment's
    input), every boundary tensor int32 or float32 (LiteRT.js reads no bool).

    Args:
        model: a Transformer of :mod:`keras_attn.models`. max_len: the buffers' length.
        calibrator: the run's :class:`~keras_attn.decoding.confidence.Calibrator` (None:
            uncalibrated). controls: ``repetition_penalty``, ``no_repeat_ngram_size`` and
            ``max_length_factor`` (:func:`keras_attn.decoding.options.control_defaults`;
            None: off).
    """

    def __init__(self, model, max_len, calibrator=None, controls=None):
        super().__init__(name="translator_builtin")
        from keras_attn.models import model_kind

        if model_kind(model) != "transformer":
            raise ValueError("the TFLite builtin target supports Transformer models only. "
                             f"Received: a {model_kind(model)} model")
        self._keras = _Untracked(model)
        self._calibrator = _Untracked(calibrator or Calibrator.uncalibrated())
        self.max_len = max_len
        self.controls = dict(CONTROL_DEFAULTS["character"] if controls is None else controls)
        self.num_layers = self.decoder.num_layers
        k, _ = self.decoder.blks[0].attention1.init_cache(1, max_len, layout=HeadsFirstCache)
        self.kv_shape = tuple(k.shape)
        graph_function = fastpath.graph_function
        self.encode = graph_function(forward_only(self._encode, False), input_signature=[
            tf.TensorSpec((1, max_len), tf.int32, name="source")])
        kv = [tf.TensorSpec(self.kv_shape, tf.float32, name=f"{kind}_{i}")
              for kind in ("cross_k", "cross_v", "cache_k", "cache_v")
              for i in range(self.num_layers)]
        head = [tf.TensorSpec((1, 1), tf.int32, name="token"),
                tf.TensorSpec((), tf.int32, name="index"),
                tf.TensorSpec((1,), tf.float32, name="score"),
                tf.TensorSpec((1,), tf.float32, name="lowest"),
                tf.TensorSpec((1,), tf.float32, name="unsure")]
        tail = [tf.TensorSpec((1,), tf.float32, name="source_length"),
                tf.TensorSpec((1,), tf.float32, name="unknown")]
        mask = tf.TensorSpec((1, max_len), tf.float32, name="source_mask")
        self.step = graph_function(forward_only(self._step, False), input_signature=[
            *head, tf.TensorSpec((1, max_len), tf.int32, name="history"), *tail,
            tf.TensorSpec((1,), tf.int32, name="length_limit"), mask, *kv])
        self.step_aligned = graph_function(forward_only(self._step_aligned, False),
                                           input_signature=self.step.input_signature)
        # The step's first shipped inputs, frozen (keras_attn.export.contract).
        self.step_frozen = graph_function(forward_only(self._step_without_controls, False),
                                          input_signature=[*head, *tail, mask, *kv])

    def tflite_functions(self, aligned_only=False):
        """``{file name: {signature key: concrete function}}`` (variables tracked);
        ``aligned_only``: the step file holds ``decode_step_v3`` alone (the web's)."""
        steps = {TFLITE_ALIGNED_STEP_SIGNATURE: self.step_aligned.get_concrete_function()}
        if not aligned_only:
            steps = {TFLITE_FROZEN_STEP_SIGNATURE: self.step_frozen.get_concrete_function(),
                     TFLITE_STEP_SIGNATURE: self.step.get_concrete_function(), **steps}
        functions = {"encoder": {TFLITE_ENCODER_SIGNATURE: self.encode.get_concrete_function()},
                     "decoder_step": steps}
        track_variables(self, [fn for file in functions.values() for fn in file.values()])
        return functions

    def metadata(self, step_signature=TFLITE_STEP_SIGNATURE):
        """What an application needs to run the loop (``metadata.json``); the step file's
        signature it names: ``step_signature``."""
        return {"max_len": self.max_len, "start_id": text.START_ID, "end_id": text.END_ID,
                "pad_id": text.PAD_ID, "num_layers": self.num_layers,
                "confidence": {"calibrated": self._calibrator.value.calibrated},
                "controls": self.controls,
                "kv_shape": list(self.kv_shape),
                "encoder": {"file": "encoder.tflite", "signature": TFLITE_ENCODER_SIGNATURE},
                "decoder_step": {"file": "decoder_step.tflite", "signature": step_signature}}

    @property
    def model(self):
        return self._keras.value

    @property
    def encoder(self):
        return self.model.get_layer("encoder")

    @property
    def decoder(self):
        return self.model.get_layer("decoder")

    def _encode(self, source):
        from keras_attn.decoding.confidence import source_statistics
        from keras_attn.decoding.processors import row_limits

        enc = self.encoder(source, training=False)
        cache = self.decoder.init_cache(enc, source, self.max_len, layout=HeadsFirstCache)
        source_length, unknown = source_statistics(source)
        out = {"encoder_output": enc,
               "source_mask": tf.cast(cache["source_mask"], tf.float32),
               "source_length": source_length, "unknown": unknown,
               "length_limit": row_limits(source, self.controls["max_length_factor"],
                                          self.max_len)}
        for i, (k, v) in enumerate(cache["cross"]):
            out[f"cross_k_{i}"], out[f"cross_v_{i}"] = k, v
        return out

    def _step_without_controls(self, token, index, score, lowest, unsure, source_length,
                               unknown, source_mask, *kv):
        """:meth:`_step` with the repetition controls off and no length limit but
        ``max_len`` (the first shipped step's inputs and behaviour); no ``history`` out."""
        out = self._step(token, index, score, lowest, unsure,
                         tf.zeros((1, self.max_len), tf.int32), source_length, unknown,
                         tf.fill([1], self.max_len), source_mask, *kv,
                         controls=CONTROL_DEFAULTS["character"])
        del out["history"]
        return out

    def _step_aligned(self, *args):
        """:meth:`_step` with ``finished`` as int32 and the cross-attention out."""
        out = self._step(*args, alignment=True)
        out["finished"] = tf.cast(out["finished"], tf.int32)
        return out

    def _step(self, token, index, score, lowest, unsure, history, source_length, unknown,
              length_limit, source_mask, *kv, controls=None, alignment=False):
        from keras_attn import decoding
        from keras_attn import ops as attn_ops
        from keras_attn.decoding.confidence import UNSURE, features_from
        from keras_attn.decoding.processors import StepState, processors_for

        n = self.num_layers
        step = decoding.DecodingStep(self.model, None, self.max_len, True, None)
        step.use_constants({"cross": tuple(HeadsFirstCache(kv[i], kv[n + i]) for i in range(n)),
                            "source_mask": tf.not_equal(source_mask, 0.0)})  # (1, S)
        state = {"self": tuple(HeadsFirstCache(kv[2 * n + i], kv[3 * n + i]) for i in range(n))}
        logits, state, attention = step.step(token[:, 0], state, index, alignment)  # (1, V)
        options = DecodingOptions().resolve(self.max_len, controls=controls or self.controls)
        processors = processors_for(options, text.START_ID, self.decoder.vocab_size)
        logits = processors(logits, StepState(index, history))
        greedy = decoding.GreedySampler(self.max_len, text.START_ID, text.END_ID)
        next_token, _, new_score = greedy.select(logits[:, None, :], score[:, None], None)
        new_score = new_score[:, 0]
        history = attn_ops.slice_update(history, (0, index), next_token)  # (1, max_len)
        finished = tf.logical_or(tf.equal(next_token[:, 0], text.END_ID),
                                 index + 1 >= length_limit)
        token_log_prob = new_score - score
        lowest = tf.minimum(lowest, token_log_prob)
        unsure = unsure + tf.cast(token_log_prob < UNSURE, tf.float32)
        confidence = self._calibrator.value(features_from(
            new_score, lowest, unsure, tf.fill([1], index + 1), source_length, unknown))
        out = {"next_token": next_token[:, 0], "finished": finished, "score": new_score,
               "lowest": lowest, "unsure": unsure, "history": history,
               "confidence": confidence, "logits": logits}
        if alignment:
            out["attention"] = tf.cast(attention, tf.float32)  # (1, max_len)
        for i, (k, v) in enumerate(state["self"]):
            out[f"cache_k_{i}"], out[f"cache_v_{i}"] = k, v
        return out
