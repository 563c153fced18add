"""The options signatures of the SavedModel and of the TFLite text file, each frozen with
the option set it shipped with (the rule: :mod:`keras_attn.export.contract`,
docs/serving_contract.md). Imports nothing of the package: the exporters, the runtime and the
server read it.

Example:
    >>> OPTION_SIGNATURES["translate"][:2]
    ('beam_size', 'num_hypotheses')
    >>> newest_options_signature(["serving_default", "translate"])
    'translate'
"""

# Every options signature of the SavedModel and of the TFLite text file, oldest first, with
# the option inputs (besides ``text``) it shipped with. Never edit a line: a new option of
# keras_attn.decoding.options gets a new signature here, holding every option.
OPTION_SIGNATURES = {
    "translate": ("beam_size", "num_hypotheses", "length_penalty", "max_length",
                  "target_prefix", "sampling_topk", "sampling_topp", "sampling_temperature",
                  "seed", "return_alignments"),
    "translate_v2": ("beam_size", "num_hypotheses", "length_penalty", "max_length",
                     "target_prefix", "sampling_topk", "sampling_topp",
                     "sampling_temperature", "seed", "return_alignments",
                     "repetition_penalty", "no_repeat_ngram_size", "max_length_factor"),
    # And `passthrough` (keras_attn.export.spans_graph): PASSTHROUGH_SIGNATURE.
    "translate_v3": ("beam_size", "num_hypotheses", "length_penalty", "max_length",
                     "target_prefix", "sampling_topk", "sampling_topp",
                     "sampling_temperature", "seed", "return_alignments",
                     "repetition_penalty", "no_repeat_ngram_size", "max_length_factor",
                     "passthrough"),
    # And a glossary (keras_attn.export.glossary_graph): GLOSSARY_SIGNATURE.
    "translate_v4": ("beam_size", "num_hypotheses", "length_penalty", "max_length",
                     "target_prefix", "sampling_topk", "sampling_topp",
                     "sampling_temperature", "seed", "return_alignments",
                     "repetition_penalty", "no_repeat_ngram_size", "max_length_factor",
                     "passthrough", "glossary_source", "glossary_target"),
}
# The newest signature every export with options signatures has (TFLite's newest).
LATEST_OPTIONS_SIGNATURE = "translate_v2"
# The signature with a `passthrough` input: only in a SavedModel whose serving_default
# passes spans through.
PASSTHROUGH_SIGNATURE = "translate_v3"
# The signature with a glossary (and its output `applied_terms`): in the same SavedModels
# (its graph reads text with the same regex ops).
GLOSSARY_SIGNATURE = "translate_v4"
TEXT_SIGNATURES = (PASSTHROUGH_SIGNATURE, GLOSSARY_SIGNATURE)
# The SavedModel's XLA-compiled twins: the inputs and outputs of the signature they are
# named after, greedy decoding compiled by XLA (keras_attn.export.request).
COMPILED_SUFFIX = "_xla"
COMPILED_SIGNATURES = {name + COMPILED_SUFFIX: name
                       for name in (LATEST_OPTIONS_SIGNATURE, *TEXT_SIGNATURES)}
# The numbers of sentences their compiled decoding runs (XLA compiles once per shape).
COMPILED_BUCKETS = (1, 2, 4, 8, 16, 32)


def newest_options_signature(available):
    """The newest of :data:`OPTION_SIGNATURES` among the signature names ``available``
    (an older export has only the older ones).

    Raises:
        ValueError: none of them (an artefact exported without the options signature).
    """
    for name in reversed(list(OPTION_SIGNATURES)):
        if name in available:
            return name
    raise ValueError(f"the artefact has no options signature (one of "
                     f"{list(OPTION_SIGNATURES)}); its signatures are {sorted(available)}: "
                     "export it again with `keras-attn export`")


def compiled_signature(name, available):
    """The XLA-compiled twin of options signature ``name`` (:data:`COMPILED_SIGNATURES`)
    among the signature names ``available``, or None (an export without it, or a TFLite
    file)."""
    twin = name + COMPILED_SUFFIX
    return twin if COMPILED_SIGNATURES.get(twin) == name and twin in available else None


def exported_options_signatures(for_tflite, passthrough):
    """The options signatures an export carries, oldest first: every one but
    :data:`TEXT_SIGNATURES`, which only a SavedModel with ``passthrough`` has."""
    return [name for name in OPTION_SIGNATURES
            if name not in TEXT_SIGNATURES or (passthrough and not for_tflite)]
