"""Decoding a model of :mod:`keras_attn.models`: greedy search, beam search, sampling and the
per-request :func:`decode` that every artefact runs.

Modules: ``search`` (the public functions, forced decoding), ``samplers`` (the one loop and
how each strategy chooses tokens), ``compacted`` (the TensorFlow loop that drops ended
rows), ``step`` (the step the loops drive), ``processors`` (what every step's logits go
through, the length limits), ``rng`` (sampling's random numbers), ``options`` (every
per-request option, checked), ``confidence`` (a hypothesis's calibrated confidence).
A way of choosing tokens is a ``Sampler`` subclass; something every step's logits go
through is one processor plus its field of ``options``; kernels are chosen by the layers
(:mod:`keras_attn.kernels`), never here.

Example:
    >>> from keras_attn import decoding
    >>> tokens = decoding.greedy_search(model, source, max_len=20, start_id=2, end_id=3)
    >>> tokens, scores = decoding.beam_search(model, source, beam_size=4)

References: D2L 10.8 (beam search); Wu et al. 2016 (GNMT length penalty); keras-hub's
``Sampler``.

Names load on first use (PEP 562); ``options`` imports neither Keras nor TensorFlow.

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
