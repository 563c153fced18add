"""CTranslate2 export (TensorFlow/CTranslate2-only): a Transformer run as a CTranslate2 model.

CTranslate2 (``pip install -e ".[ctranslate2]"``) is the usual engine for CPU translation.
Our Transformer is exactly its ``TransformerSpec``: an encoder–decoder with ReLU FFNs,
embeddings scaled by ``sqrt(d)``, an added positional table and post-norm blocks
(``norm_first=True``: pre-norm blocks plus a final LayerNorm, CTranslate2's ``pre_norm``).
:class:`CTranslate2Exporter` writes it (options checked in its constructor, the shared
``Exporter.export`` template: temporary folder, check against ``Translator``, rename);
:class:`~keras_attn.export.ct2_converter.KerasAttnConverter`, a
``ctranslate2.converters.Converter``, only fills the spec from the Keras weights (the model
knows nothing of the engine):

* kernels ``(in, out)`` transposed to ``[out, in]``; self-attention Q/K/V fused into one
  linear, cross-attention Q alone and K/V fused; biases where the model has them
  (``use_bias``; the FFN and the output projection always have them);
* LayerNorms: post-norm ``addnorm{1,2,3}`` -> ``self_attention.layer_norm``,
  ``attention.layer_norm``, ``ffn.layer_norm`` (pre-norm: the same places, plus
  ``final_norm`` -> ``encoder/decoder.layer_norm``); ``config.layer_norm_epsilon`` is the
  model's epsilon (CTranslate2 reads it; its default with a beta is 1e-5, ours too);
* our positional table as ``position_encodings.encodings`` (CTranslate2's built-in table
  starts at position 1 and puts all sines before all cosines: not ours);
* ``tie_embeddings``: the projection's weight is the target embedding (stored once);
* vocabularies with the reserved tokens renamed ``[PAD]`` -> ``<blank>``, ``[UNK]`` ->
  ``<unk>``, ``[START]`` -> ``<s>``, ``[END]`` -> ``</s>``; ``add_source_eos`` so that
  CTranslate2 appends ``</s>`` to a source as ``Translator.encode`` appends ``[END]``;
* our decoders never emit ``[PAD]`` or ``[START]`` (``keras_attn.decoding``): the
  projection's bias for those two ids is lowered by :data:`BANNED_BIAS`, so their
  probability is exactly 0 in float32 (as ours) and any client decodes like ours.

Decoding with CTranslate2 the way ``keras_attn.decoding`` does (the runtime translator,
:class:`keras_attn.export.ctranslate2_runtime.CTranslate2Translator`, passes these): ``beam_size=1`` (its default is 2), ``min_decoding_length=0`` (its default 1
forbids an immediate ``</s>``), ``max_decoding_length=max_len`` and ``max_input_length=
max_len`` (the ``[END]``-included source limit of ``Translator.encode``). What is equal:

* greedy: the same tokens, wherever the two best log-probabilities of a step differ by
  more than the kernels' rounding (float32: ~1e-6, ``samples.max_logprob_diff`` in the
  export report);
* beam search is a different algorithm: CTranslate2 replaces a finished hypothesis by the
  next live candidate (2K candidates per step), ours keeps it in its slot at no cost, and
  CTranslate2 divides by ``length ** length_penalty`` where ours divides by the GNMT
  ``((5 + n) / 6) ** alpha``. ``length_penalty=0`` against ``alpha=0`` compares the
  same score (the sum of log-probabilities); :class:`CTranslate2Translator` with
  ``beam_size > 1`` asks for ``beam_size`` hypotheses with their raw scores and reranks
  them with the GNMT penalty. Either way the best hypotheses agree on most sentences,
  not on all (measured in ``tests/test_ctranslate2.py`` and the bench's ``serve`` section).
  Lower ranks of an n-best list differ more often: a finished hypothesis stays in
  CTranslate2's results, while ours can be pushed out of its slot by better live ones;
* ``target_prefix``: CTranslate2 forces the prefix's tokens with a score of 0, as ours;
  right after the prefix it also bans ``</s>`` from the secondary beams (ours does not);
* ``max_length`` / ``max_decoding_length`` count the same tokens (prefix and ``</s>``).

Per-request options (API.md) by our names, what CTranslate2 cannot give as ours refused
(sampling, alignments): :class:`CTranslate2Translator` and docs/decoding_options.md.

Refused (``ValueError`` naming the option, before anything is written): a Bahdanau model
(``model``), an FFN activation other than ReLU (``activation``), encoder and decoder with
different ``num_heads``, ``norm_first`` or LayerNorm ``epsilon`` (CTranslate2 has one of
each), and vocabularies that already use one of CTranslate2's special token strings.

References: CTranslate2 ``python/ctranslate2/converters/``, ``specs/transformer_spec.py``.
"""
import os

# First: without CTranslate2 (an optional extra) this raises an ImportError naming the extra.
from keras_attn.export.ct2_converter import (  # noqa: F401  (this module's API)
    BANNED_BIAS, SPECIAL_TOKENS, KerasAttnConverter, check_supported, ct2_vocab)

import ctranslate2

from keras_attn.core import runs
from keras_attn.export.base import (Exporter, as_parts, check_choice, run_languages,
                                    sample_sources, tokenizer_files, versions, write_files)
from keras_attn.export.ctranslate2_compare import compare
from keras_attn.export.ctranslate2_runtime import (  # noqa: F401  (read beside the exporter)
    METADATA, CTranslate2Translator, decoding_options)

QUANTIZATIONS = ("float32", "int8")


class CTranslate2Exporter(Exporter):
    """A CTranslate2 model directory (``model.bin``, ``config.json``, vocabularies).

    Plus our tokenizer files (``src_vocab.txt`` / ``tgt_vocab.txt``, or a SentencePiece
    run's ``src.model`` / ``tgt.model``: ``keras_attn.text.subword.load_tokenizer`` reads
    either) and ``keras_attn.json`` (``max_len``, input normalisation, decoding options,
    the report). Before it is renamed into place it is loaded with ``ctranslate2.Translator``
    and checked against ``Translator.translate_ids`` (greedy) on the sample sentences.

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
                # The confidence calibrator (keras_attn.decoding.confidence), as in the graphs.
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
    """Write a run's Transformer as a CTranslate2 model directory, atomically
    (:class:`CTranslate2Exporter`, checked on the run's sample sentences).

    Args:
        run_dir: a run directory (``keras_attn.core.runs``) of a Transformer.
        export_dir: the model directory to write (default :func:`default_dir`).
        quantization: ``"float32"`` or ``"int8"``. overwrite: replace an existing one.

    Returns:
        Report dict: path, quantization, architecture, files and sizes, sample
        translations of both engines, their agreement and the largest log-probability
        difference on those samples.

    Raises:
        ValueError: an unknown ``quantization``, or an architecture CTranslate2 cannot
            represent exactly (:func:`check_supported`).

    Example:
        >>> export_ctranslate2("runs/dates")   # CLI: keras-attn export runs/dates --format ctranslate2
    """
    from keras_attn.translator import Translator

    exporter = CTranslate2Exporter(quantization, overwrite)
    if not os.path.exists(runs.paths(run_dir)["calibration"]):  # as export_all_targets
        from keras_attn.training.calibration import calibrate_run

        calibrate_run(run_dir, log=lambda *a: None)
    parts = as_parts(Translator.from_run_dir(run_dir))
    parts.languages = run_languages(run_dir)
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
