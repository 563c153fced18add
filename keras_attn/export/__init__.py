"""Export a trained translator: one ``Exporter`` per target, and the TFLite runtime.

Everything a client needs is inside the exported artefacts (tokenizers, weights and, for
SavedModel and TFLite text, the decoding loop). Each target is an
:class:`~keras_attn.export.base.Exporter` (template: :mod:`keras_attn.export.base`):

==========================  ==================================================  ============
class                       artefact                                            module
==========================  ==================================================  ============
``SavedModelExporter``      TF Serving SavedModel ``<name>/<version>/``          saved_model
``TFLiteTextExporter``      one ``.tflite``, strings in, strings out            tflite
``TFLiteBuiltinExporter``   encoder + decoder-step ``.tflite``, builtin ops     tflite
``CTranslate2Exporter``     a CTranslate2 model directory                       ctranslate2
``WebExporter``             a static folder that translates in a browser        web
==========================  ==================================================  ============

``all_targets.export_run`` writes every TF target with one report; the serving graphs are
``modules`` (options per request: ``request``); ``runtime`` runs the TFLite files without
Keras; ``contract`` freezes the signatures (docs/serving_contract.md). Names load on first
use (PEP 562): ``from keras_attn.export import runtime`` imports neither TensorFlow nor Keras.

References: TF Serving SavedModel/REST/gRPC docs; OpenNMT-tf ``opennmt/utils/exporters.py``.

May import: training, the translator and everything below them; never serve or cli.
"""
import dataclasses
import importlib

from keras_attn.core import lazy

_NAMES = {
    "base": ("Exporter", "Parts", "QUANTIZATIONS", "as_parts", "file_sizes", "publish",
             "sample_sources"),
    "core_text": ("CoreCharTokenizer",),
    "builtin": ("BuiltinModule",),
    "modules": ("IDS_SIGNATURE", "SCORE_SIGNATURE", "SERVING_SIGNATURE", "TEXT_OPS",
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
    "web": ("WebExporter", "export_web"),
    "runtime": ("TFLITE_ENCODER_SIGNATURE", "TFLITE_OPTIONS_SIGNATURE",
                "TFLITE_SCORE_SIGNATURE", "TFLITE_STEP_SIGNATURE", "TFLITE_FROZEN_STEP_SIGNATURE",
                "TFLITE_ALIGNED_STEP_SIGNATURE",
                "TFLITE_TEXT_SIGNATURE", "option_inputs", "run_tflite_builtin",
                "run_tflite_options", "run_tflite_score", "run_tflite_text", "text_array",
                "text_interpreter"),
}
__getattr__, __dir__, __all__ = lazy.attach(__name__, _NAMES)


@dataclasses.dataclass(frozen=True)
class ExportTarget:
    """An export target of ``keras-attn export --format NAME`` (:data:`EXPORT_TARGETS`).

    Args:
        name: the ``--format`` value. writes: what it writes (the CLI's help).
        function: ``"module:function"`` of ``function(run_dir, export_dir=, overwrite=,
            log=, **options)``, imported when run.
        options: ``{name: default}`` it takes beyond those (flags ``--name``).
        fixed: arguments always passed.

    Example:
        >>> EXPORT_TARGETS["ctranslate2"].options
        {'quantization': 'float32'}
    """

    name: str
    writes: str
    function: str
    options: dict = dataclasses.field(default_factory=dict)
    fixed: dict = dataclasses.field(default_factory=dict)

    def load(self):
        """``(run_dir, **kwargs) -> report``: the function with each option at its default
        when left out and the fixed arguments (an ``ImportError`` names a missing extra)."""
        module, _, name = self.function.partition(":")
        function = getattr(importlib.import_module(module), name)
        return lambda run_dir, **kwargs: function(run_dir, **{**self.options, **kwargs,
                                                              **self.fixed})


EXPORT_TARGETS = {}
"""Every export target by name (:func:`register_target`); ``keras-attn export`` reads it."""
DEFAULT_TARGET = "tf"  # keras-attn export's --format
_RUN_OPTIONS = {"version": 1, "beam_size": 1, "passthrough": "auto",  # export_run's
                "workers": "auto"}


def register_target(name, writes, function, options=None, fixed=None):
    """Add an :class:`ExportTarget` to :data:`EXPORT_TARGETS` (and return it)."""
    EXPORT_TARGETS[name] = target = ExportTarget(name, writes, function, dict(options or {}),
                                                 dict(fixed or {}))
    return target


register_target("tf", "SavedModel + TFLite (text and builtin files, float32 and int8) under "
                "RUN_DIR/export, with one report",
                "keras_attn.export.all_targets:export_run", _RUN_OPTIONS)
register_target("saved_model", "the SavedModel alone under RUN_DIR/export",
                "keras_attn.export.all_targets:export_run", _RUN_OPTIONS,
                fixed={"quantizations": ()})
register_target("ctranslate2", "a CTranslate2 model directory "
                "(RUN_DIR/export/ctranslate2[_int8])",
                "keras_attn.export.ctranslate2:export_ctranslate2", {"quantization": "float32"})
register_target("web", "a static folder that translates in a browser, offline once loaded "
                "(LiteRT.js; RUN_DIR/export/web)", "keras_attn.export.web:export_web",
                {"quantization": "float32", "passthrough": "auto", "wasm": "plain"})
