"""Decoding a model of :mod:`keras_attn.models`: greedy search, beam search, sampling and the
per-request :func:`decode` that every artefact runs.

A way of choosing tokens is a ``Sampler`` subclass (``samplers``); something every step's
logits go through is one processor (``processors``) plus its field of ``options``; kernels
are chosen by the layers, never here. Names load on first use (PEP 562).

Example:
    >>> from keras_attn import decoding
    >>> tokens = decoding.greedy_search(model, source, max_len=20, start_id=2, end_id=3)
    >>> tokens, scores = decoding.beam_search(model, source, beam_size=4)

May import: :mod:`keras_attn.ops`, :mod:`keras_attn.kernels`, :mod:`keras_attn.text`,
:mod:`keras_attn.core`; never translation, training, export, serve or cli.
"""
from keras_attn.core import lazy

_NAMES = {
    "confidence": ("Calibrator", "hypothesis_features"),
    "options": ("TranslationOptions", "DecodingOptions", "length_penalty"),
    "processors": ("LogitsProcessorList", "StepState", "log_probs", "processors_for"),
    "rng": ("uniform",),
    "samplers": ("BeamSampler", "GreedySampler", "RandomSampler", "Sampler", "take_beams"),
    "search": ("KINDS", "beam_decode_fixed", "beam_search", "cross_attention", "decode",
               "greedy_decode_fixed", "greedy_search", "score"),
    "step": ("DecodingStep", "encode", "step_functions"),
}
__getattr__, __dir__, __all__ = lazy.attach(__name__, _NAMES)
