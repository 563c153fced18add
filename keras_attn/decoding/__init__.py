"""Decoding a model of :mod:`keras_attn.models`: greedy search, beam search, sampling and the
per-request :func:`decode` that every artefact runs.

One module per job (arrows only downward):

================  ===========================================================================
module            holds
================  ===========================================================================
``search``        the public functions: :func:`greedy_search`, :func:`beam_search`,
                  :func:`decode` (every per-request option), the teacher-forced
                  :func:`cross_attention` and :func:`score` (forced decoding)
``samplers``      the one loop (:class:`Sampler`) and how each strategy chooses the next
                  tokens (:class:`GreedySampler`, :class:`BeamSampler`,
                  :class:`RandomSampler`); forcing a target prefix
``compacted``     TensorFlow only: the loop that drops the rows that ended
``step``          the step the loops drive (:class:`DecodingStep`: the decoder's own cached
                  call), the encoder's output, the source checks
``processors``    the one ordered list every step's logits go through (the banned ids, the
                  repetition controls, the forced prefix), the rows' length limits, the
                  GNMT length penalty
``rng``           the counter-based random numbers of sampling (the same bits everywhere)
``options``       :class:`DecodingOptions`, every per-request option, checked
``confidence``    a hypothesis's features (its tokens' log-probabilities, lengths, source)
                  and the :class:`Calibrator` that makes them a probability of acceptable
================  ===========================================================================

A new decoding feature goes where its job is: a way of choosing tokens is a ``Sampler``
subclass (or a change to ``select``), something every step's logits go through is one
processor in ``processors`` (every loop and artefact runs the list) plus its field of
``options``. The kernels a step runs are
chosen by the layers from the cache's layout (:mod:`keras_attn.kernels.kv_cache`) and the
kernel policy (:mod:`keras_attn.kernels.fastpath`), never here.

Example:
    >>> from keras_attn import decoding
    >>> tokens = decoding.greedy_search(model, source, max_len=20, start_id=2, end_id=3)
    >>> tokens, scores = decoding.beam_search(model, source, beam_size=4)

References: D2L 10.8 (beam search); Wu et al. 2016 (GNMT length penalty); keras-hub's
``Sampler``.

Names are loaded on first use (PEP 562): ``keras_attn.decoding.options`` imports neither
Keras nor TensorFlow (the TFLite runtime checks options with it).

May import: :mod:`keras_attn.ops`, :mod:`keras_attn.kernels`, :mod:`keras_attn.text`,
:mod:`keras_attn.core`; never translation, training, export, serve or cli.
"""
from keras_attn.core import lazy

_NAMES = {
    "confidence": ("Calibrator", "hypothesis_features"),
    "options": ("DecodingOptions",),
    "processors": ("LogitsProcessorList", "StepState", "length_penalty", "log_probs",
                   "processors_for"),
    "rng": ("uniform",),
    "samplers": ("BeamSampler", "GreedySampler", "RandomSampler", "Sampler", "take_beams"),
    "search": ("KINDS", "beam_decode_fixed", "beam_search", "cross_attention", "decode",
               "greedy_decode_fixed", "greedy_search", "score"),
    "step": ("DecodingStep", "encode", "step_functions"),
}
__getattr__, __dir__, __all__ = lazy.attach(__name__, _NAMES)
