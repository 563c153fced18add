"""Export a trained translator: one ``Exporter`` per target, and the TFLite runtime.

Everything a client needs is inside the exported artefacts: the tokenizers, the Keras
model's weights and (SavedModel, TFLite text) the decoding loop. The targets, each an
:class:`~keras_attn.export.base.Exporter` whose options are checked in its constructor
and whose ``export(translator, export_dir)`` writes into a temporary folder, loads and
runs what it wrote, renames it into place and returns a report:

==========================  ==================================================  ============
class                       artefact                                            module
==========================  ==================================================  ============
``SavedModelExporter``      TF Serving SavedModel ``<name>/<version>/``          saved_model
``TFLiteTextExporter``      one ``.tflite``, strings in, strings out            tflite
``TFLiteBuiltinExporter``   encoder + decoder-step ``.tflite``, builtin ops     tflite
``CTranslate2Exporter``     a CTranslate2 model directory                       ctranslate2
==========================  ==================================================  ============

Modules (arrows only downward): ``all_targets`` (``export_run``: a run directory to every
TF target, one report) -> ``saved_model``, ``tflite``, ``ctranslate2`` (the exporters;
CTranslate2's runtime translator is ``ctranslate2_runtime``, the check of one against the
other ``ctranslate2_compare``) ->
``modules`` (the serving ``tf.Module`` s: the model side owns the serving functions; its
options signatures take the decoding options per request: ``request``; every decoding
there is ``Translator.search``), ``builtin`` (the TFLite builtin target's encoder and
decoder step) and ``core_text`` (a character tokenizer from core ops) -> ``base`` (the template, ``Parts``,
report helpers) and ``runtime`` (the app's loop over the TFLite files; no Keras);
``contract`` (no TensorFlow) freezes the signatures every export keeps
(docs/serving_contract.md).

Names are loaded on first use (PEP 562): ``from keras_attn.export import runtime`` imports
neither TensorFlow nor Keras. The functions below keep the earlier API:
``export_saved_model``, ``export_tflite``, ``export_run``, ``run_tflite_text``,
``run_tflite_builtin``, ``text_interpreter``, ``saved_model_ops``, ``tflite_ops``,
``check_builtin_only``, ...

References: TF Serving SavedModel/REST/gRPC docs; OpenNMT-tf ``opennmt/utils/exporters.py``.

May import: training, the translator and everything below them; never serve or cli.
"""
from keras_attn.core import lazy

_NAMES = {
    "base": ("Exporter", "Parts", "QUANTIZATIONS", "as_parts", "file_sizes", "publish",
             "sample_sources"),
    "core_text": ("CoreCharTokenizer",),
    "builtin": ("BuiltinModule",),
    "modules": ("IDS_SIGNATURE", "SCORE_SIGNATURE", "SERVING_SIGNATURE",
                "TEXT_OPS",
                "TranslatorModule", "resolve_text_ops"),
    "saved_model": ("MODEL_NAME", "SERVING_DOCKER", "SavedModelExporter",
                    "TF_SERVING_TFTEXT_OPS", "classify_ops", "core_ops", "export_saved_model",
                    "saved_model_ops", "saved_model_report", "saved_model_signatures",
                    "serving_allowlist"),
    "tflite": ("TARGETS", "TFLITE_EXPORTERS", "TFTEXT_TFLITE_OPS", "TFLiteBuiltinExporter",
               "TFLiteExporter", "TFLiteTextExporter", "check_builtin_only", "check_text_ops",
               "export_tflite", "tflite_ops"),
    "request": ("OPTION_SPECS", "RequestDecoder", "TRANSLATE_SIGNATURE"),
    "contract": ("LATEST_OPTIONS_SIGNATURE", "OPTION_SIGNATURES", "artefact_signatures",
                 "breaking_changes"),
    "all_targets": ("ExportCheckError", "check_agreement", "compare_samples", "export_run"),
    "runtime": ("TFLITE_ENCODER_SIGNATURE", "TFLITE_OPTIONS_SIGNATURE",
                "TFLITE_SCORE_SIGNATURE", "TFLITE_STEP_SIGNATURE", "TFLITE_FROZEN_STEP_SIGNATURE",
                "TFLITE_TEXT_SIGNATURE",
                "option_inputs", "run_tflite_builtin", "run_tflite_options",
                "run_tflite_score", "run_tflite_text", "text_array", "text_interpreter"),
}
__getattr__, __dir__, __all__ = lazy.attach(__name__, _NAMES)
