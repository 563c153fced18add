"""CTranslate2 export (TensorFlow/CTranslate2-only): a Transformer run as a CTranslate2 model.

Our Transformer is exactly CTranslate2's ``TransformerSpec`` (``pip install -e
".[ctranslate2]"``): :class:`CTranslate2Exporter` writes it, the weight mapping is
:mod:`keras_attn.export.ct2_converter`'s and the runtime
(:class:`~keras_attn.export.ctranslate2_runtime.CTranslate2Translator`) gives our greedy
output token for token; beam search is CTranslate2's, reranked with our GNMT penalty
(docs/ctranslate2.md). A model CTranslate2 cannot represent exactly is refused before
anything is written (:func:`check_supported`).

References: CTranslate2 ``python/ctranslate2/converters/``, ``specs/transformer_spec.py``.
"""
import os

# First: without CTranslate2 (an optional extra) this raises an ImportError naming the extra.
from keras_attn.export.ct2_converter import (  # noqa: F401  (this module's API)
    BANNED_BIAS, SPECIAL_TOKENS, KerasAttnConverter, check_supported, ct2_vocab)

import ctranslate2

from keras_attn.core import runs
from keras_attn.export.base import (Exporter, check_choice, run_parts, sample_sources,
                                    tokenizer_files, versions, write_files)
from keras_attn.export.ctranslate2_compare import compare
from keras_attn.export.ctranslate2_runtime import (  # noqa: F401  (read beside the exporter)
    METADATA, CTranslate2Translator, decoding_options)

QUANTIZATIONS = ("float32", "int8")


class CTranslate2Exporter(Exporter):
    """A CTranslate2 model directory (``model.bin``, ``config.json``, vocabularies), our
    tokenizer files and ``keras_attn.json`` (``max_len``, normalisation, decoding, the
    report), checked against ``Translator.translate_ids`` (greedy) before it is published.

    Args:
        quantization: ``"float32"`` or ``"int8"`` (int8 weights; CTranslate2 computes
            int8 x int8 matmuls on CPU).
        overwrite: replace an existing directory (otherwise ``FileExistsError``).

    Example:
        >>> CTranslate2Exporter("int8").export(Translator.from_run_dir("runs/dates"), "ct2")
    """

    format = "ctranslate2"

    def __init__(self, quantization="float32", overwrite=False):
        super().__init__(overwrite)
        self.quantization = check_choice("quantization", quantization, QUANTIZATIONS)

    def options(self):
        return {"quantization": self.quantization, "special_tokens": SPECIAL_TOKENS,
                "banned_bias": BANNED_BIAS}

    def supports(self, parts):
        try:
            check_supported(parts.model)
        except ValueError as e:
            return str(e)
        return None

    def write(self, parts, path):
        converter = KerasAttnConverter(parts.model, parts.src_tokenizer.vocab,
                                       parts.tgt_tokenizer.vocab)
        converter.convert(path, quantization=self.quantization, force=True)
        tokenizers = tokenizer_files(parts)
        write_files(path, tokenizers)
        meta = {"versions": dict(versions(), ctranslate2=ctranslate2.__version__),
                "architecture": {k: list(v) if isinstance(v, tuple) else v
                                 for k, v in converter.options.items()},
                "max_len": parts.max_len, "normalize_input": bool(parts.normalize),
                "decoding": decoding_options(parts.max_len),
                "calibration": parts.calibrator.to_dict() if parts.calibrator else None,
                "tokenizers": {"src": next(n for n in tokenizers if n.startswith("src")),
                               "tgt": next(n for n in tokenizers if n.startswith("tgt"))}}
        if parts.languages:
            meta["languages"] = parts.languages
        runs.write_json(os.path.join(path, METADATA), meta)  # what CTranslate2Translator reads
        return meta

    def check(self, parts, path, samples):
        from keras_attn.translator import Translator

        translator = Translator(parts.model, parts.src_tokenizer, parts.tgt_tokenizer,
                                parts.max_len, parts.normalize, parts.calibrator)
        return {"samples": compare(translator, CTranslate2Translator(path), samples)}

    def finish(self, path, report):
        runs.write_json(os.path.join(path, METADATA), report)


def default_dir(run_dir, quantization="float32"):
    """``RUN_DIR/export/ctranslate2`` (float32) or ``RUN_DIR/export/ctranslate2_<q>``."""
    name = "ctranslate2" + ("" if quantization == "float32" else f"_{quantization}")
    return os.path.join(runs.paths(run_dir)["export"], name)


def export_ctranslate2(run_dir, export_dir=None, quantization="float32", overwrite=False,
                       log=print):
    """Write a run's Transformer as a CTranslate2 model directory
    (:class:`CTranslate2Exporter`, checked on the run's sample sentences).

    Args:
        run_dir: a run directory of a Transformer.
        export_dir: the model directory to write (default :func:`default_dir`).
        quantization, overwrite: :class:`CTranslate2Exporter`'s.

    Returns:
        Report dict: path, quantization, architecture, files and sizes, and both engines'
        sample translations compared (:func:`compare`).

    Example:
        >>> export_ctranslate2("runs/dates")  # keras-attn export runs/dates --format ctranslate2
    """
    exporter = CTranslate2Exporter(quantization, overwrite)
    _, parts = run_parts(run_dir)
    path = os.path.abspath(export_dir or default_dir(run_dir, quantization))
    log(f"exporting {run_dir} -> {path} (CTranslate2, {quantization})")
    report = exporter.export(parts, path, samples=sample_sources(run_dir))
    report["run_dir"] = os.path.abspath(run_dir)
    s = report["samples"]
    log(f"  {s['agreement']:.0%} of {len(s['sources'])} sample translations (greedy) equal "
        f"keras_attn's; largest log-probability difference {s['max_logprob_diff']:.2e}\n"
        f"  {report['total_bytes'] / 1e6:.2f} MB; load it with ctranslate2.Translator("
        f"{path!r}) or keras_attn.export.ctranslate2_runtime.CTranslate2Translator({path!r})")
    return report
