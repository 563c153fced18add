"""The TFLite targets (TensorFlow-only): one text-to-text file, or builtin-op files.

* :class:`TFLiteTextExporter` (``tflite/text_<q>.tflite``): strings in, strings out,
  TFLite builtins plus tensorflow-text's kernels only (:data:`TFTEXT_TFLITE_OPS`; a Flex op
  is refused by name). It runs no regex op: its signatures take one sentence per string and
  return ``needs_split`` (``keras_attn.export.runtime`` splits and joins documents), and it
  cannot normalise input (a report ``warnings`` entry says so). A Bahdanau model takes one
  sentence per call (a static batch for its GRU).
* :class:`TFLiteBuiltinExporter` (``tflite/builtin_<q>/``, Transformer only): the
  ``encoder.tflite`` and ``decoder_step.tflite`` of
  :class:`~keras_attn.export.builtin.BuiltinModule` (builtin ops only, batch 1),
  ``metadata.json`` and the tokenizer files; the app runs the greedy loop.

Quantization: ``float32``; ``float16`` (float16 weights, dequantized at load); ``int8``
(dynamic-range: int8 weights, float activations).
"""
import os
import tempfile

import numpy as np
import tensorflow as tf

from keras_attn.core import runs
from keras_attn.core.deprecation import renamed
from keras_attn.decoding.options import LENGTH_PENALTY, control_defaults
from keras_attn.export import runtime
from keras_attn.export.base import (QUANTIZATIONS, Exporter, as_parts, check_length_penalty,
                                    check_beam, check_choice, decoding_info, tokenizer_files,
                                    write_files)
from keras_attn.export.builtin import BuiltinModule
from keras_attn.export.conversion import (  # noqa: F401  (tflite.with_settings: its old home)
    Conversion, convert, stage, with_settings)
from keras_attn.export.modules import TranslatorModule
from keras_attn.export.workers import Staging

TARGETS = ("builtin", "text")
# Custom ops that tensorflow_text.tflite_registrar.SELECT_TFTEXT_OPS registers.
TFTEXT_TFLITE_OPS = frozenset({
    "FastWordpieceTokenizeWithOffsets", "TFText>FastWordpieceDetokenize",
    "RaggedTensorToTensor", "TFText>WhitespaceTokenize", "TFText>FastBertNormalize",
    "TFText>ByteSplit", "TFText>ByteSplitWithOffsets", "TFText>ByteSplitByOffsets",
    "TFText>NgramsStringJoin",
    "TFText>FastSentencepieceTokenize", "TFText>FastSentencepieceDetokenize",
    "TFText>Utf8Binarize", "TFText>RoundRobinTrim", "TFText>RoundRobinGenerateMasks",
    "TFText>SentenceFragmenterV2",
})


# --- what a flatbuffer holds ---------------------------------------------------------------
def tflite_ops(model_content):
    """Operator codes of a flatbuffer: ``{"builtin": [...], "custom": [...], "flex": [...]}``
    (``flex``: the Select-TF ops, custom code ``Flex<Op>``; ``custom``: the others)."""
    from tensorflow.lite.tools import flatbuffer_utils

    model = flatbuffer_utils.read_model_from_bytearray(bytearray(model_content))
    builtin, custom, flex = set(), set(), set()
    for i, code in enumerate(model.operatorCodes):
        if code.customCode:
            name = code.customCode.decode("utf-8")
            (flex if name.startswith("Flex") else custom).add(name)
        else:
            builtin.add(flatbuffer_utils.opcode_to_name(model, i))
    return {"builtin": sorted(builtin), "custom": sorted(custom), "flex": sorted(flex)}


def check_builtin_only(model_content, name="model"):
    """Raise ``ValueError`` if a flatbuffer has any Flex (Select TF) or custom op."""
    ops = tflite_ops(model_content)
    if ops["flex"] or ops["custom"]:
        raise ValueError(f"{name} must use TFLite builtin ops only, but it contains Flex ops "
                         f"{ops['flex']} and custom ops {ops['custom']}")
    return ops


def check_text_ops(model_content, name="the text target"):
    """Raise ``ValueError`` naming every op beyond TFLite builtins and tensorflow-text's
    TFLite kernels (:data:`TFTEXT_TFLITE_OPS`): ``Flex<Op>`` custom codes, and TensorFlow
    ops the converter left as custom ops."""
    ops = tflite_ops(model_content)
    flex = sorted(set(ops["flex"]) | (set(ops["custom"]) - TFTEXT_TFLITE_OPS))
    if flex:
        raise ValueError(
            f"{name} may use TFLite builtin ops and tensorflow-text's TFLite kernels only, "
            f"but it needs Flex (Select TF) ops {flex}, which TFLite runs only with the Flex "
            "delegate (not linked by a phone app). String ops such as StaticRegexReplace or "
            "StringLower (text normalisation, Tokenizer.repair) must stay outside the file")
    return ops


def signatures_of(content):
    """``{key: {"key", "inputs", "outputs"}}`` of every signature of a flatbuffer (names,
    dtypes, shapes; -1 = any size)."""
    interpreter = runtime.text_interpreter(model_content=content)

    def spec(details):
        return {name: {"dtype": "string" if np.dtype(d["dtype"]).kind in "OSU"
                       else np.dtype(d["dtype"]).name,
                       "shape": [int(s) for s in d["shape_signature"]]}
                for name, d in sorted(details.items())}

    runners = {key: interpreter.get_signature_runner(key)
               for key in interpreter.get_signature_list()}
    return {key: {"key": key, "inputs": spec(runner.get_input_details()),
                  "outputs": spec(runner.get_output_details())}
            for key, runner in runners.items()}


# --- the exporters -------------------------------------------------------------------------
class TFLiteExporter(Exporter):
    """Shared by the TFLite targets: quantization and the converter.

    Args:
        quantization: one of :data:`~keras_attn.export.base.QUANTIZATIONS`.
        beam_size, length_penalty: decoding inside the file (text target; ``alpha=``:
            ``length_penalty``'s deprecated name).
        overwrite: replace an existing file/folder (otherwise ``FileExistsError``).
        passthrough: the runtime around the file passes spans through by default (the
            text file's settings, the builtin folder's ``metadata.json``): as the
            SavedModel's ``serving_default`` (None: by the source vocabulary,
            ``keras_attn.text.spans.default_for``).

    Example:
        >>> TFLiteTextExporter("int8").export(translator, "text_int8.tflite")
    """

    format = "tflite"
    target = None
    suffix = ""
    # Set by export_run to one workers.Staging for all its TFLite exporters: traced graphs
    # staged once per model, conversions in worker processes. None: this process.
    staging = None

    @renamed(alpha="length_penalty")
    def __init__(self, quantization="float32", beam_size=1, length_penalty=LENGTH_PENALTY,
                 overwrite=False, passthrough=None):
        super().__init__(overwrite)
        self.quantization = check_choice("quantization", quantization, QUANTIZATIONS)
        self.beam_size = check_beam(beam_size)
        self.length_penalty = check_length_penalty(length_penalty)
        self.passthrough = check_choice("passthrough", passthrough, (None, True, False))

    def passes_through(self, parts):
        """Whether the runtime around the file passes spans through by default, as the
        export's ``serving_default`` does (None: by the source vocabulary)."""
        from keras_attn.text import spans

        return (spans.default_for(parts.src_tokenizer) if self.passthrough is None
                else self.passthrough)

    @property
    def key(self):
        """The artefact's name in ``export_run``: ``<target>_<quantization>``."""
        return f"{self.target}_{self.quantization}"

    def path_in(self, tflite_dir):
        """Where ``export_run`` puts it: ``tflite_dir/<key><suffix>``."""
        return os.path.join(tflite_dir, self.key + self.suffix)

    def options(self):
        return {"target": self.target, "quantization": self.quantization}

    def conversions(self, parts, staging):
        """``{file: Conversion}`` of this artefact, its graphs traced and staged once per
        model in ``staging`` (the quantizations of a target share them)."""
        raise NotImplementedError

    def start(self, parts):
        """Trace, stage and start converting this artefact's files in :attr:`staging` (once;
        ``write`` collects them), so that they convert while other artefacts are made."""
        return self.staging.start(self.key, self.conversions(parts, self.staging))

    def converted(self, parts):
        """``{file: (flatbuffer, its conversion's answer)}``, converted in :attr:`staging`
        (default: this process, one file after another)."""
        own = self.staging is None
        if own:
            self.staging = Staging()
        out = {}
        try:
            for name, future in self.start(parts).items():
                answer = future.result()
                with open(answer["output"], "rb") as f:
                    out[name] = (f.read(), answer)
        finally:
            if own:
                self.staging.close()
                self.staging = None
        return out

    def convert(self, functions, trackables, name):
        """The flatbuffer of ``{signature key: concrete function}`` (capturing the variables
        of ``trackables``) in this process, and its ops (:attr:`check_ops`)."""
        with tempfile.TemporaryDirectory() as folder:
            path = stage(functions, trackables, os.path.join(folder, "staged"))
            content = convert(Conversion(path, tuple(functions), self.quantization,
                                         self.allow_custom_ops, name=name))
        return content, self.check_ops(content, name)

    def _report_seconds(self, converted):
        """The report's ``seconds``: the tracing and staging shared by the target's files
        (in the report of the first quantization written), each file's conversion."""
        staged = self.staging.seconds.pop(self.target, 0.0) if self.staging else 0.0
        return {"trace_and_stage": staged,
                "convert": {name: answer["seconds"] for name, (_, answer) in converted.items()},
                "convert_cpu": {name: answer["cpu_seconds"]
                                for name, (_, answer) in converted.items()}}


class TFLiteTextExporter(TFLiteExporter):
    """One ``.tflite`` file, strings in and strings out (the decoding loop inside)."""

    target = "text"
    suffix = ".tflite"
    allow_custom_ops = True  # tensorflow-text's kernels; anything else is refused
    check_ops = staticmethod(check_text_ops)
    agreement_on = "translation"

    @renamed(alpha="length_penalty")
    def __init__(self, quantization="float32", beam_size=1, length_penalty=LENGTH_PENALTY,
                 overwrite=False, request_signature=True, passthrough=None):
        super().__init__(quantization, beam_size, length_penalty, overwrite, passthrough)
        # False: serving_default alone (no `translate` signature).
        self.request_signature = check_choice("request_signature", request_signature,
                                              (True, False))

    def build_module(self, parts):
        from keras_attn.models import model_kind

        # Keras's GRU loops need a static batch in TFLite: one sentence for a Bahdanau.
        batch_size = 1 if model_kind(parts.model) == "bahdanau" else None
        return TranslatorModule(parts, self.beam_size, self.length_penalty, for_tflite=True,
                                text_ops="tftext", batch_size=batch_size,
                                request_signature=self.request_signature)

    def _staged_key(self, parts):
        return ("text", id(parts.model), parts.max_len, self.beam_size, self.length_penalty,
                self.request_signature)

    def conversions(self, parts, staging):
        def make(folder):
            module = self.build_module(parts)
            functions = module.tflite_functions()
            path = stage(functions, [module.captured_variables, module.src_tokenizer,
                                     module.tgt_tokenizer], os.path.join(folder, "text"))
            return path, tuple(functions), module.max_beam_size

        path, keys, self._max_beam_size = staging.once(self._staged_key(parts), make,
                                                        self.target)
        # serving_default takes sentences in TFLite: a signature that says so by its name.
        alias = (runtime.TFLITE_TEXT_SIGNATURE, runtime.TFLITE_SENTENCES_SIGNATURE,
                 (("text", "sentences"),))
        settings = {"passthrough": self.passes_through(parts), "beam_size": self.beam_size}
        return {"text": Conversion(path, keys, self.quantization, self.allow_custom_ops,
                                   (alias,), settings, name="the text target")}

    def write(self, parts, path):
        converted = self.converted(parts)
        content, _ = converted["text"]
        ops = self.check_ops(content, "the text target")
        runs.atomic_write_bytes(path, content)
        decoding = dict(decoding_info(parts, self.beam_size, self.length_penalty, False),
                        max_beam_size=self._max_beam_size)
        report = {"ops": ops, "decoding": decoding,
                  "runtime": "ai_edge_litert InterpreterWithCustomOps with tensorflow_text."
                             "tflite_registrar.SELECT_TFTEXT_OPS (keras_attn.export.runtime."
                             "run_tflite_text, run_tflite_options)",
                  "signatures": signatures_of(content),
                  "seconds": self._report_seconds(converted)}
        if parts.normalize:
            report["warnings"] = [
                "this file expects normalised input: the model was trained on text normalised "
                "by keras_attn.text.tokenizers.normalize_text (lower case, spaced punctuation), "
                "which TFLite cannot do without Flex ops; apply normalize_text before calling it "
                "(raw text gives the agreement measured in export_report.json)"]
        return report

    def check(self, parts, path, samples):
        out = runtime.run_tflite_text(path, samples)  # kernels registered, the graph runs
        if out["translation"].shape != (len(samples),):
            raise RuntimeError(f"the text TFLite model returned {out}")

    def run_samples(self, path, translator, sources, passthrough=False):
        """The raw ``sources``, exactly what an app passes (``passthrough``: the runtime
        passes spans through, as the SavedModel's ``serving_default`` does in its graph)."""
        out = runtime.run_tflite_text(path, sources, passthrough=passthrough)[
            "translation"].tolist()
        return {"translation": [t.decode("utf-8", "replace") for t in out]}


class TFLiteBuiltinExporter(TFLiteExporter):
    """A folder: ``encoder.tflite`` + ``decoder_step.tflite`` (builtin ops only),
    ``metadata.json`` and the tokenizer files. ``beam_size`` must be 1: the application
    runs the loop."""

    target = "builtin"
    allow_custom_ops = False
    check_ops = staticmethod(check_builtin_only)
    agreement_on = "ids"
    aligned_only = False  # the step file with decode_step_v3 alone (the web target's)

    @renamed(alpha="length_penalty")
    def __init__(self, quantization="float32", beam_size=1, length_penalty=LENGTH_PENALTY,
                 overwrite=False, passthrough=None):
        super().__init__(quantization, beam_size, length_penalty, overwrite, passthrough)
        if beam_size != 1:
            raise ValueError("the builtin target leaves decoding to the application "
                             f"(run_tflite_builtin is greedy). Received: beam_size={beam_size}")

    def supports(self, parts):
        from keras_attn.models import model_kind

        kind = model_kind(parts.model)
        if kind != "transformer":
            return ("the TFLite builtin target supports Transformer models only. "
                    f"Received: a {kind} model")
        return None

    def _staged_key(self, parts):
        return ("builtin", id(parts.model), parts.max_len, self.aligned_only)

    def conversions(self, parts, staging):
        def make(folder):
            module = BuiltinModule(parts.model, parts.max_len, parts.calibrator,
                                   control_defaults(parts.tgt_tokenizer))
            staged = {}
            for name, functions in module.tflite_functions(self.aligned_only).items():
                path = stage(functions, [module.captured_variables], os.path.join(folder, name))
                staged[name] = (path, tuple(functions))
            return staged, module.metadata(runtime.TFLITE_ALIGNED_STEP_SIGNATURE
                                           if self.aligned_only else runtime.TFLITE_STEP_SIGNATURE)

        staged, self._metadata = staging.once(self._staged_key(parts), make,
                                                self.target)
        return {name: Conversion(path, keys, self.quantization, self.allow_custom_ops,
                                 name=f"builtin {name}.tflite")
                for name, (path, keys) in staged.items()}

    def write(self, parts, path):
        converted = self.converted(parts)
        files, ops, signatures = {}, {}, {}
        for name, (content, _) in converted.items():
            ops[name] = self.check_ops(content, f"builtin {name}.tflite")
            files[f"{name}.tflite"] = content
            signatures.update(signatures_of(content))
        tokenizers = tokenizer_files(parts)
        meta = dict(self._metadata, tgt_vocab_size=parts.tgt_tokenizer.vocab_size,
                    normalize_input=bool(parts.normalize),
                    passthrough=self.passes_through(parts),
                    src_vocab=next(n for n in tokenizers if n.startswith("src")),
                    tgt_vocab=next(n for n in tokenizers if n.startswith("tgt")))
        if parts.languages:
            meta["languages"] = parts.languages
        os.makedirs(path)
        write_files(path, {**files, **tokenizers})
        runs.write_json(os.path.join(path, runtime.BUILTIN_METADATA), meta)
        return {"ops": ops, "metadata": meta, "signatures": signatures,
                "runtime": "ai_edge_litert Interpreter (builtin ops only; the application "
                           "runs the greedy loop, see keras_attn.export.runtime."
                           "run_tflite_builtin)",
                "seconds": self._report_seconds(converted)}

    def check(self, parts, path, samples):
        out = runtime.run_tflite_builtin(path, np.full((1, 2), 4, np.int32), max_len=2)
        if out["tokens"].shape != (1, 2):
            raise RuntimeError(f"the builtin TFLite files returned {out}")

    def run_samples(self, path, translator, sources, passthrough=False):
        """``translator.encode(sources)``: the ids the SavedModel's ``translate_ids`` gets
        (ids: nothing passes through, ``passthrough`` is not read)."""
        out = runtime.run_tflite_builtin(path, translator.encode(sources).numpy())["tokens"]
        text = translator.tgt_tokenizer.detokenize(tf.constant(out)).numpy().tolist()
        return {"translation": [t.decode("utf-8", "replace") for t in text],
                "ids": [[t for t in row if t] for row in out.tolist()]}


TFLITE_EXPORTERS = {"text": TFLiteTextExporter, "builtin": TFLiteBuiltinExporter}


@renamed(alpha="length_penalty")
def export_tflite(translator_or_parts, path, target="text", quantization="float32",
                  beam_size=1, max_len=None, overwrite=False, length_penalty=LENGTH_PENALTY):
    """Convert the translator to TFLite (:class:`TFLiteTextExporter` or
    :class:`TFLiteBuiltinExporter`, by ``target``; their arguments).

    Args:
        translator_or_parts: a ``Translator``, an ``export.Parts`` or a dict of its fields.
        path: ``target="text"``: the ``.tflite`` file; ``"builtin"``: the folder.
        max_len: override the translator's.

    Returns:
        Report dict: path, target, quantization, ops, signatures, file sizes, warnings.

    Example:
        >>> export_tflite(tr, "export/tflite/text_int8.tflite", "text", "int8")
    """
    exporter_class = TFLITE_EXPORTERS[check_choice("target", target, TARGETS)]
    exporter = exporter_class(quantization, beam_size, length_penalty, overwrite)
    return exporter.export(as_parts(translator_or_parts, max_len), path)
