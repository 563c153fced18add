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

Decoding with CTranslate2 the way ``keras_attn.decoding`` does (:class:`CTranslate2Translator`
passes these): ``beam_size=1`` (its default is 2), ``min_decoding_length=0`` (its default 1
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

import numpy as np

# First: without CTranslate2 (an optional extra) this raises an ImportError naming the extra.
from keras_attn.export.ct2_converter import (  # noqa: F401  (this module's API)
    BANNED_BIAS, SPECIAL_TOKENS, KerasAttnConverter, check_supported, ct2_vocab)

import ctranslate2

from keras_attn import runs, subword, text
from keras_attn.decoding_options import DecodingOptions
from keras_attn.export.base import (Exporter, check_choice, sample_sources, tokenizer_files,
                                    versions, write_files)

QUANTIZATIONS = ("float32", "int8")
METADATA = "keras_attn.json"
SRC_VOCAB, TGT_VOCAB = "src_vocab.txt", "tgt_vocab.txt"  # keras_attn.text's vocabulary files


class CTranslate2Exporter(Exporter):
    """A CTranslate2 model directory (``model.bin``, ``config.json``, vocabularies).

    Plus our tokenizer files (``src_vocab.txt`` / ``tgt_vocab.txt``, or a SentencePiece
    run's ``src.model`` / ``tgt.model``: ``keras_attn.subword.load_tokenizer`` reads
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
                "tokenizers": {"src": next(n for n in tokenizers if n.startswith("src")),
                               "tgt": next(n for n in tokenizers if n.startswith("tgt"))}}
        runs.write_json(os.path.join(path, METADATA), meta)  # what CTranslate2Translator reads
        return meta

    def check(self, parts, path, samples):
        from keras_attn.translator import Translator

        translator = Translator(parts.model, parts.src_tokenizer, parts.tgt_tokenizer,
                                parts.max_len, parts.normalize)
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
        run_dir: a run directory (``keras_attn.runs``) of a Transformer.
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
    translator = Translator.from_run_dir(run_dir)
    path = os.path.abspath(export_dir or default_dir(run_dir, quantization))
    log(f"exporting {run_dir} -> {path} (CTranslate2, {quantization})")
    report = exporter.export(translator, path, samples=sample_sources(run_dir))
    report["run_dir"] = os.path.abspath(run_dir)
    s = report["samples"]
    log(f"  {s['agreement']:.0%} of {len(s['sources'])} sample translations (greedy) equal "
        f"keras_attn's; largest log-probability difference {s['max_logprob_diff']:.2e}\n"
        f"  {report['total_bytes'] / 1e6:.2f} MB; load it with ctranslate2.Translator("
        f"{path!r}) or keras_attn.export.ctranslate2.CTranslate2Translator({path!r})")
    return report


def decoding_options(max_len, beam_size=1):
    """``translate_batch`` options that decode as ``keras_attn.decoding`` does."""
    return {"beam_size": beam_size, "min_decoding_length": 0, "max_decoding_length": max_len,
            "max_input_length": max_len, "return_end_token": True}


# --- running it --------------------------------------------------------------------------
class CTranslate2Translator:
    """Text in, text out with a model directory from :func:`export_ctranslate2`.

    The same interface as ``keras_attn.translator.Translator`` (``encode``,
    ``translate_ids``, ``translate``, ``translate_nbest`` with the per-request options of
    API.md under our names), so ``keras_attn.evaluation.evaluate`` scores it too.
    Tokenizes with our vocabularies (``keras_attn.text.Tokenizer``) and decodes with
    :func:`decoding_options`. CTranslate2 is asked for raw sums of log-probabilities
    (``length_penalty=0``); ``beam_size > 1`` asks for ``beam_size`` hypotheses and reranks
    them with our GNMT penalty ``((5 + n) / 6) ** length_penalty``.

    What is equal to ``Translator`` (docs/decoding_options.md): greedy output, with or
    without ``target_prefix`` (forced with CTranslate2's ``target_prefix``, its
    log-probabilities not in the score, as ours), ``max_length``; beam search's best
    hypothesis on most sentences, not all (another algorithm, module notes). Refused with a
    ``ValueError`` naming the option: sampling (``sampling_topk > 1``: CTranslate2's random
    numbers are not our seeded hash) and ``return_alignments`` (CTranslate2's attention is
    not our alignment).

    Args:
        model_dir: the exported directory.
        device, compute_type, intra_threads, inter_threads: ``ctranslate2.Translator``'s.

    Example:
        >>> ct2 = CTranslate2Translator("runs/dates/export/ctranslate2", intra_threads=2)
        >>> ct2.translate(["3 March 2021"])
        ['2021-03-03']
        >>> ct2.translate_nbest(["3 March 2021"], beam_size=4, num_hypotheses=2)
        [[{'translation': '2021-03-03', 'score': -0.01}, {...}]]
    """

    def __init__(self, model_dir, device="cpu", compute_type="default", intra_threads=0,
                 inter_threads=1):
        meta = runs.read_json(os.path.join(model_dir, METADATA))
        self.max_len = int(meta["max_len"])
        self.normalize = bool(meta["normalize_input"])
        files = meta.get("tokenizers", {"src": SRC_VOCAB, "tgt": TGT_VOCAB})
        self.src_tokenizer = subword.load_tokenizer(os.path.join(model_dir, files["src"]))
        self.tgt_tokenizer = subword.load_tokenizer(os.path.join(model_dir, files["tgt"]))
        self.src_tokens = ct2_vocab(self.src_tokenizer.vocab)
        self.tgt_tokens = ct2_vocab(self.tgt_tokenizer.vocab)
        self.tgt_ids = {t: i for i, t in enumerate(self.tgt_tokens)}
        self.translator = ctranslate2.Translator(
            os.fspath(model_dir), device=device, compute_type=compute_type,
            intra_threads=intra_threads, inter_threads=inter_threads)

    def encode(self, sentences):
        """Source token strings per sentence (no ``</s>``: the model appends it)."""
        import tensorflow as tf

        if self.normalize:
            sentences = [text.normalize_text(s) for s in sentences]
        ids = self.src_tokenizer.tokenize(tf.constant(list(sentences), tf.string)).to_list()
        return [[self.src_tokens[i] for i in row[: self.max_len - 1]] for row in ids]

    def tokens_from_ids(self, source):
        """Token strings from our source ids ``(B, S)`` (``Translator.encode``: ``[END]``
        appended, 0 = padding)."""
        rows = np.asarray(source).tolist()
        return [[self.src_tokens[i] for i in row if i != text.PAD_ID][:-1] for row in rows]

    def options(self, **options):
        """:class:`~keras_attn.decoding_options.DecodingOptions` from keyword arguments, as
        ``Translator.options`` (checked, ``length_penalty`` 0.6 and ``max_length``
        ``max_len`` filled in), refusing what CTranslate2 cannot give as ours.

        Raises:
            ValueError: a bad or unknown option (``DecodingOptions``), ``sampling_topk > 1``
                or ``return_alignments=True``.
        """
        opts = DecodingOptions.from_kwargs(**options)
        if opts.sampling:
            raise ValueError(
                "`sampling_topk` > 1 (random sampling) is not available with CTranslate2: "
                "its random numbers are not keras_attn's seeded hash, so a `seed` would not "
                "give the same sample (use Translator, the SavedModel or the TFLite file). "
                f"Received: sampling_topk={opts.sampling_topk}")
        if opts.return_alignments:
            raise ValueError(
                "`return_alignments` is not available with CTranslate2: its attention "
                "vectors are not keras_attn's word alignments. "
                f"Received: return_alignments={opts.return_alignments}")
        opts.validate(max_length_limit=self.max_len)
        return opts.resolve(self.max_len, 0.6)

    def prefix_tokens(self, target_prefix):
        """``target_prefix`` as target token strings (our target tokenizer, as
        ``Translator`` forces it; no ``</s>``)."""
        import tensorflow as tf

        if not target_prefix:
            return []
        ids = self.tgt_tokenizer.tokenize(tf.constant([target_prefix], tf.string))
        row = ids.to_list()[0] if hasattr(ids, "to_list") else np.asarray(ids)[0].tolist()
        return [self.tgt_tokens[i] for i in row]

    def decode_nbest(self, tokens, opts, prefix=(), ct2_options=None):
        """``translate_batch`` on source token strings (:meth:`encode`) with options from
        :meth:`options`; per sentence ``[(target ids, score)]``, best first, at most
        ``opts.num_hypotheses`` (ids as ``Translator``'s: ``[END]`` included when the
        hypothesis ended, the prefix's ids first).

        Scores are sums of log-probabilities of the generated tokens (``</s>`` included, the
        forced prefix not), divided for ``beam_size > 1`` by the GNMT penalty of the whole
        length n (prefix and ``</s>`` included), as ``keras_attn.decoding.decode``.

        Args:
            tokens: source token strings per sentence. opts: resolved ``DecodingOptions``.
            prefix: target token strings forced first (:meth:`prefix_tokens`).
            ct2_options: ``translate_batch`` arguments that override ours, with
                CTranslate2's meanings (with its own ``length_penalty`` the hypotheses keep
                CTranslate2's ranking and scores).
        """
        kwargs = dict(decoding_options(self.max_len, opts.beam_size), return_scores=True,
                      max_decoding_length=opts.max_length, length_penalty=0.0)
        if opts.beam_size > 1:
            kwargs["num_hypotheses"] = opts.beam_size  # rerank the whole beam, as ours
        kwargs.update(ct2_options or {})
        rerank = opts.beam_size > 1 and "length_penalty" not in (ct2_options or {})
        target_prefix = [list(prefix)] * len(tokens) if prefix else None
        results = self.translator.translate_batch(tokens, target_prefix, **kwargs)
        out = []
        for result in results:
            hyps = [[self.tgt_ids[t] for t in h] for h in result.hypotheses]
            scores = [float(s) for s in result.scores]
            if rerank:
                scores = [s / ((5.0 + len(h)) / 6.0) ** opts.length_penalty
                          for s, h in zip(scores, hyps)]
            order = sorted(range(len(hyps)), key=lambda j: -scores[j])  # stable: first of equals
            out.append([(hyps[j], scores[j]) for j in order[: opts.num_hypotheses]])
        return out

    def translate_tokens(self, tokens, beam_size=1, alpha=0.6, ct2_options=None):
        """Target ids per sentence (``[END]`` included when the hypothesis ended), and
        their scores (sum of log-probabilities; GNMT-normalised with ``beam_size > 1``).

        ``ct2_options``: a dict of ``translate_batch`` arguments that override ours, with
        CTranslate2's meanings (``{"length_penalty": 1.0}``: its ``length ** 1.0``
        ranking, not reranked)."""
        opts = DecodingOptions(beam_size=beam_size, length_penalty=alpha).resolve(
            self.max_len, alpha)
        best = [hyps[0] for hyps in self.decode_nbest(tokens, opts, ct2_options=ct2_options)]
        return [ids for ids, _ in best], [score for _, score in best]

    def translate_ids(self, source, beam_size=1, alpha=0.6, ct2_options=None):
        """Best output ids ``(B, T)`` for source ids ``(B, S)``, as
        ``Translator.translate_ids`` (``[END]`` included, then 0)."""
        ids, _ = self.translate_tokens(self.tokens_from_ids(source), beam_size, alpha,
                                       ct2_options)
        return _pad(ids)

    def translate_nbest(self, sentences, batch_size=128, **options):
        """Translate with per-call decoding options, as ``Translator.translate_nbest``.

        Returns, per sentence, a list of ``num_hypotheses`` dicts ``{"translation": str,
        "score": float}``, best first (beam: summed log-probability / GNMT penalty; greedy:
        the summed log-probability). With ``target_prefix`` every translation starts with
        the prefix's tokens and their log-probabilities are not in the score.

        Raises:
            ValueError: as :meth:`options` (sampling, alignments, bad values), or a
                ``target_prefix`` that leaves no room within ``max_length``.
        """
        import tensorflow as tf

        opts = self.options(**options)
        prefix = self.prefix_tokens(opts.target_prefix)
        opts.validate(max_length_limit=self.max_len, prefix_tokens=len(prefix))
        sentences = list(sentences)
        results = []
        for i in range(0, len(sentences), batch_size):
            nbest = self.decode_nbest(self.encode(sentences[i: i + batch_size]), opts, prefix)
            flat = [ids for hyps in nbest for ids, _ in hyps]
            decoded = iter(self.tgt_tokenizer.detokenize(tf.constant(_pad(flat))).numpy())
            results.extend([{"translation": next(decoded).decode("utf-8", errors="replace"),
                             "score": score} for _, score in hyps] for hyps in nbest)
        return results

    def translate(self, sentences, beam_size=1, alpha=0.6, batch_size=128, **options):
        """Translate a list of strings; returns a list of strings (the best translation).

        Any other option of :meth:`translate_nbest` (``length_penalty`` is ``alpha``'s name
        there) gives that method's best hypothesis, as ``Translator.translate``.
        """
        options.setdefault("length_penalty", alpha)
        return [hyps[0]["translation"] for hyps in
                self.translate_nbest(sentences, batch_size, beam_size=beam_size, **options)]


def _pad(rows):
    """Ragged id lists -> int32 ``(B, max(1, longest))``, 0-padded."""
    out = np.zeros((len(rows), max([len(r) for r in rows] + [1])), np.int32)
    for b, row in enumerate(rows):
        out[b, : len(row)] = row
    return out


def compare(translator, ct2, sources, beam_size=1, alpha=0.6):
    """Both engines on ``sources``: output ids and text, the share of sentences whose ids
    agree, and the largest difference between the two engines' log-probabilities of our
    output tokens (teacher-forced: ``score_batch`` against our decoder).

    Args:
        translator: ``keras_attn.translator.Translator``. ct2: :class:`CTranslate2Translator`.
    """
    import tensorflow as tf

    source = translator.encode(sources)
    ours = np.asarray(translator.translate_ids(source, beam_size, alpha))
    theirs = ct2.translate_ids(source.numpy(), beam_size, alpha)
    rows = {"ours": _rows(ours), "theirs": _rows(theirs)}
    texts = {k: [t.decode("utf-8", "replace") for t in translator.tgt_tokenizer.detokenize(
        tf.constant(v)).numpy().tolist()] for k, v in (("ours", ours), ("theirs", theirs))}
    ours_lp = per_token_log_probs(translator.model, source, ours)
    tgt_tokens = ct2_vocab(translator.tgt_tokenizer.vocab)
    scored = ct2.translator.score_batch(
        ct2.tokens_from_ids(source.numpy()),
        [[tgt_tokens[t] for t in row if t != text.END_ID] for row in rows["ours"]],
        max_input_length=0)
    diff = 0.0
    for b, result in enumerate(scored):  # each token's log-probability, then </s>'s
        theirs_lp = np.asarray(result.log_probs[: len(rows["ours"][b])])
        diff = max(diff, float(np.abs(theirs_lp - ours_lp[b, : len(theirs_lp)]).max(initial=0)))
    same = [a == b for a, b in zip(rows["ours"], rows["theirs"])]
    return {"sources": list(sources), "keras_attn": texts["ours"],
            "ctranslate2": texts["theirs"], "beam_size": beam_size, "alpha": alpha,
            "agreement": sum(same) / max(len(same), 1),
            "disagreeing": [i for i, ok in enumerate(same) if not ok],
            "max_logprob_diff": diff}


def _rows(ids):
    """``(B, T)`` ids -> lists without the padding."""
    return [[t for t in row if t != text.PAD_ID] for row in np.asarray(ids).tolist()]


def per_token_log_probs(model, source, tokens):
    """Teacher-forced log-probabilities ``(B, T)`` of ``tokens`` (0 after ``[END]``), with
    ``[PAD]`` and ``[START]`` banned as ``keras_attn.decoding`` bans them."""
    import tensorflow as tf

    from keras_attn import decoding

    tokens = tf.cast(tokens, tf.int32)
    target_in = tf.concat([tf.fill([tf.shape(tokens)[0], 1], text.START_ID), tokens[:, :-1]], 1)
    logits = model({"source": tf.cast(source, tf.int32), "target_in": target_in},
                   training=False)
    log_probs = decoding.log_probs(logits, text.START_ID)
    return tf.gather(log_probs, tokens, batch_dims=2).numpy()
