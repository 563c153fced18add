"""CTranslate2 export (TensorFlow/CTranslate2-only): a Transformer run as a CTranslate2 model.

CTranslate2 (``pip install -e ".[ctranslate2]"``) is the usual engine for CPU translation.
Our Transformer is exactly its ``TransformerSpec``: an encoder–decoder with ReLU FFNs,
embeddings scaled by ``sqrt(d)``, an added positional table and post-norm blocks
(``norm_first=True``: pre-norm blocks plus a final LayerNorm, CTranslate2's ``pre_norm``).
:class:`KerasAttnConverter`, a ``ctranslate2.converters.Converter``, only fills the spec
from the Keras weights (the model knows nothing of the engine):

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

Refused (``ValueError`` naming the option, before anything is written): a Bahdanau model
(``model``), an FFN activation other than ReLU (``activation``), encoder and decoder with
different ``num_heads``, ``norm_first`` or LayerNorm ``epsilon`` (CTranslate2 has one of
each), and vocabularies that already use one of CTranslate2's special token strings.

References: CTranslate2 ``python/ctranslate2/converters/opennmt_py.py`` and
``specs/transformer_spec.py``.
"""
import os
import shutil

import numpy as np

try:
    import ctranslate2
    from ctranslate2.converters import Converter
    from ctranslate2.converters import utils as ct2_utils
    from ctranslate2.specs import common_spec, transformer_spec
except ImportError as e:  # an optional extra
    raise ImportError("keras_attn.export.ctranslate2 needs CTranslate2: "
                      "pip install -e '.[ctranslate2]'") from e

from keras_attn import runs, text
from keras_attn.export import _mkdtemp, _now, _publish_dir, _versions, _write_json, file_sizes

QUANTIZATIONS = ("float32", "int8")
SPECIAL_TOKENS = {text.PAD: "<blank>", text.UNK: "<unk>", text.START: "<s>", text.END: "</s>"}
# Added to the [PAD] and [START] logits: exp(-3e4 + logit) is 0 in float32, and -3e4 is
# finite in float16 (Keras's float16 mask fill), should the model run in float16.
BANNED_BIAS = -3e4
METADATA = "keras_attn.json"
SRC_VOCAB, TGT_VOCAB = "src_vocab.txt", "tgt_vocab.txt"  # ours, for keras_attn.text.Tokenizer


def ct2_vocab(vocab):
    """Our token list with the four reserved tokens renamed to CTranslate2's."""
    n = len(text.RESERVED_TOKENS)
    clash = sorted(set(SPECIAL_TOKENS.values()) & set(vocab[n:]))
    if clash:
        raise ValueError(f"The vocabulary already holds CTranslate2's special token(s) {clash} "
                         "as ordinary tokens, so renaming our reserved tokens to them would "
                         f"make two ids share a string. Received: a vocabulary of {len(vocab)} "
                         "tokens")
    return [SPECIAL_TOKENS[t] for t in vocab[:n]] + list(vocab[n:])


# --- what CTranslate2 can represent ------------------------------------------------------
def check_supported(model):
    """Raise ``ValueError`` naming the option if ``TransformerSpec`` cannot hold ``model``.

    Returns the options the spec is built from: ``num_layers`` (encoder, decoder),
    ``num_heads``, ``pre_norm``, ``epsilon``, ``use_bias`` (encoder, decoder),
    ``tie_embeddings``.
    """
    import keras

    from keras_attn.models import model_kind

    kind = model_kind(model)
    if kind != "transformer":
        raise ValueError("CTranslate2's TransformerSpec holds a Transformer only (no GRU, no "
                         f"additive attention). Received: model={kind!r}")
    encoder, decoder = model.get_layer("encoder"), model.get_layer("decoder")
    for name in ("num_heads", "norm_first", "num_hiddens"):
        a, b = getattr(encoder, name), getattr(decoder, name)
        if a != b:
            raise ValueError(f"CTranslate2's TransformerSpec has one `{name}` for the encoder "
                             f"and the decoder. Received: encoder {name}={a!r}, decoder "
                             f"{name}={b!r}")
    norms = [ln for stack in (encoder, decoder) for ln in _layer_norms(stack)]
    epsilons = sorted({float(ln.epsilon) for ln in norms})
    if len(epsilons) != 1:
        raise ValueError("CTranslate2 reads one LayerNorm `epsilon` (config.json "
                         f"layer_norm_epsilon). Received: epsilon values {epsilons}")
    for ln in norms:
        if not (ln.center and ln.scale) or ln.rms_scaling:
            raise ValueError("CTranslate2's LayerNorm has a gamma and a beta. Received: "
                             f"{ln.path} with center={ln.center}, scale={ln.scale}")
    for stack in (encoder, decoder):
        for blk in stack.blks:
            activation = blk.ffn.activation
            if activation not in ("relu", keras.activations.relu):
                raise ValueError("The CTranslate2 export maps a ReLU FFN (what our blocks "
                                 f"build). Received: activation={activation!r} in {blk.path}")
    return {"num_layers": (encoder.num_layers, decoder.num_layers),
            "num_heads": encoder.num_heads, "pre_norm": encoder.norm_first,
            "epsilon": epsilons[0], "use_bias": (encoder.use_bias, decoder.use_bias),
            "tie_embeddings": decoder.tie_embeddings}


def _layer_norms(stack):
    """Every LayerNorm of a stack: the blocks' ``addnorm*.ln`` and ``final_norm``."""
    found = [an.ln for blk in stack.blks
             for an in (blk.addnorm1, blk.addnorm2, getattr(blk, "addnorm3", None)) if an]
    return found + ([stack.final_norm] if stack.final_norm is not None else [])


# --- the converter -----------------------------------------------------------------------
def _np(variable):
    return np.ascontiguousarray(np.asarray(variable, dtype=np.float32))


def _linear(spec, dense):
    """A Keras ``Dense`` (kernel ``(in, out)``) into a ``LinearSpec`` (weight ``[out, in]``)."""
    spec.weight = _np(np.asarray(dense.kernel).T)
    if dense.use_bias:
        spec.bias = _np(dense.bias)


def _fused(spec, denses):
    """Dense layers reading the same input as one ``LinearSpec`` (their rows stacked)."""
    parts = []
    for dense in denses:
        part = common_spec.LinearSpec()
        _linear(part, dense)
        parts.append(part)
    ct2_utils.fuse_linear(spec, parts)


def _layer_norm(spec, ln):
    spec.gamma = _np(ln.gamma)
    spec.beta = _np(ln.beta)


def _attention(spec, mha, self_attention):
    """Self-attention: Q/K/V fused in ``linear[0]``; cross: Q ``linear[0]``, K/V ``linear[1]``."""
    if self_attention:
        _fused(spec.linear[0], [mha.W_q, mha.W_k, mha.W_v])
    else:
        _linear(spec.linear[0], mha.W_q)
        _fused(spec.linear[1], [mha.W_k, mha.W_v])
    _linear(spec.linear[-1], mha.W_o)


def _embeddings_and_positions(spec, stack):
    from keras_attn.layers import LearnedPositionalEmbedding

    embeddings = spec.embeddings[0] if isinstance(spec.embeddings, list) else spec.embeddings
    embeddings.weight = _np(stack.embedding.embeddings)
    spec.scale_embeddings = True  # x * sqrt(num_hiddens), as _StackBase.embed
    pos = stack.pos_encoding
    table = pos.embeddings if isinstance(pos, LearnedPositionalEmbedding) else pos.table
    spec.position_encodings.encodings = _np(table)
    if stack.final_norm is not None:  # pre-norm
        _layer_norm(spec.layer_norm, stack.final_norm)


class KerasAttnConverter(Converter):
    """Fill a CTranslate2 ``TransformerSpec`` from a keras_attn Transformer.

    Args:
        model: a model from ``keras_attn.models.transformer_seq2seq`` (checked by
            :func:`check_supported` here, before any conversion).
        src_vocab, tgt_vocab: our token lists (``[PAD]``, ``[UNK]``, ``[START]``,
            ``[END]`` first), registered with the reserved tokens renamed.

    Example:
        >>> tr = Translator.from_run_dir("runs/dates")
        >>> KerasAttnConverter(tr.model, tr.src_tokenizer.vocab, tr.tgt_tokenizer.vocab
        ...                    ).convert("dates_ct2", quantization="int8")
    """

    def __init__(self, model, src_vocab, tgt_vocab):
        self.model = model
        self.options = check_supported(model)
        self.src_vocab = ct2_vocab(list(src_vocab))
        self.tgt_vocab = ct2_vocab(list(tgt_vocab))

    def _load(self):
        o = self.options
        spec = transformer_spec.TransformerSpec.from_config(
            o["num_layers"], int(o["num_heads"]), pre_norm=o["pre_norm"],
            activation=common_spec.Activation.RELU)
        spec.config.layer_norm_epsilon = o["epsilon"]
        spec.config.add_source_eos = True  # Translator.encode appends [END]
        spec.config.decoder_start_token = SPECIAL_TOKENS[text.START]
        encoder, decoder = self.model.get_layer("encoder"), self.model.get_layer("decoder")
        _embeddings_and_positions(spec.encoder, encoder)
        for layer, blk in zip(spec.encoder.layer, encoder.blks):
            _attention(layer.self_attention, blk.attention, self_attention=True)
            _layer_norm(layer.self_attention.layer_norm, blk.addnorm1.ln)
            _linear(layer.ffn.linear_0, blk.ffn.dense1)
            _linear(layer.ffn.linear_1, blk.ffn.dense2)
            _layer_norm(layer.ffn.layer_norm, blk.addnorm2.ln)
        _embeddings_and_positions(spec.decoder, decoder)
        for layer, blk in zip(spec.decoder.layer, decoder.blks):
            _attention(layer.self_attention, blk.attention1, self_attention=True)
            _layer_norm(layer.self_attention.layer_norm, blk.addnorm1.ln)
            _attention(layer.attention, blk.attention2, self_attention=False)
            _layer_norm(layer.attention.layer_norm, blk.addnorm2.ln)
            _linear(layer.ffn.linear_0, blk.ffn.dense1)
            _linear(layer.ffn.linear_1, blk.ffn.dense2)
            _layer_norm(layer.ffn.layer_norm, blk.addnorm3.ln)
        projection = spec.decoder.projection
        if o["tie_embeddings"]:  # logits = x @ E^T + b (TiedLogits)
            projection.weight = _np(decoder.embedding.embeddings)
        else:
            _linear(projection, decoder.dense)
        bias = _np(decoder.dense.bias).copy()
        bias[[text.PAD_ID, text.START_ID]] += BANNED_BIAS  # never generated, as ours
        projection.bias = bias
        spec.register_source_vocabulary(self.src_vocab)
        spec.register_target_vocabulary(self.tgt_vocab)
        return spec


# --- export a run ------------------------------------------------------------------------
def default_dir(run_dir, quantization="float32"):
    """``RUN_DIR/export/ctranslate2`` (float32) or ``RUN_DIR/export/ctranslate2_<q>``."""
    name = "ctranslate2" + ("" if quantization == "float32" else f"_{quantization}")
    return os.path.join(runs.paths(run_dir)["export"], name)


def export_ctranslate2(run_dir, export_dir=None, quantization="float32", overwrite=False,
                       log=print):
    """Write a run's Transformer as a CTranslate2 model directory, atomically.

    The directory holds CTranslate2's ``model.bin``, ``config.json``,
    ``source_vocabulary.json`` and ``target_vocabulary.json``, plus our vocabularies
    (``src_vocab.txt``, ``tgt_vocab.txt``: ``keras_attn.text.Tokenizer`` reads them) and
    ``keras_attn.json`` (``max_len``, input normalisation, decoding options, this report).
    It is built in a ``.tmp-`` folder beside the destination, loaded with
    ``ctranslate2.Translator`` and checked against ``Translator.translate`` (greedy) on the
    run's sample sentences, then renamed into place.

    Args:
        run_dir: a run directory (``keras_attn.runs``) of a Transformer.
        export_dir: the model directory to write (default :func:`default_dir`).
        quantization: ``"float32"`` or ``"int8"`` (int8 weights; CTranslate2 computes
            int8 x int8 matmuls on CPU).
        overwrite: replace an existing directory (otherwise ``FileExistsError``).

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
    from keras_attn.export import _sample_sources
    from keras_attn.translator import Translator

    if quantization not in QUANTIZATIONS:
        raise ValueError(f"`quantization` must be one of {QUANTIZATIONS}. "
                         f"Received: quantization={quantization!r}")
    translator = Translator.from_run_dir(run_dir)
    converter = KerasAttnConverter(translator.model, translator.src_tokenizer.vocab,
                                   translator.tgt_tokenizer.vocab)
    path = os.path.abspath(export_dir or default_dir(run_dir, quantization))
    if os.path.exists(path) and not overwrite:
        raise FileExistsError(f"{path} already exists; pass overwrite=True (CLI: --overwrite)")
    folder = os.path.dirname(path)
    os.makedirs(folder, exist_ok=True)
    report = {"format": "ctranslate2", "run_dir": os.path.abspath(run_dir),
              "quantization": quantization, "created": _now(),
              "versions": dict(_versions(), ctranslate2=ctranslate2.__version__),
              "architecture": {k: list(v) if isinstance(v, tuple) else v
                               for k, v in converter.options.items()},
              "special_tokens": SPECIAL_TOKENS, "banned_bias": BANNED_BIAS,
              "max_len": translator.max_len, "normalize_input": translator.normalize,
              "decoding": decoding_options(translator.max_len)}
    log(f"exporting {run_dir} -> {path} (CTranslate2, {quantization})")
    tmp = _mkdtemp(".tmp-" + os.path.basename(path) + "-", folder)
    try:
        converter.convert(tmp, quantization=quantization, force=True)  # recreates tmp
        for name, tok in ((SRC_VOCAB, translator.src_tokenizer),
                          (TGT_VOCAB, translator.tgt_tokenizer)):  # text.save_vocab format
            runs.atomic_write_text(os.path.join(tmp, name), "".join(t + "\n" for t in tok.vocab))
        _write_json(os.path.join(tmp, METADATA), report)
        report["samples"] = compare(translator, CTranslate2Translator(tmp),
                                    _sample_sources(run_dir))
        report["files"] = file_sizes(tmp)
        report["total_bytes"] = sum(report["files"].values())
        _write_json(os.path.join(tmp, METADATA), report)
        _publish_dir(tmp, path, overwrite)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    report["path"] = path
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
    ``translate_ids``, ``translate``), so ``keras_attn.training.evaluate`` scores it too.
    Tokenizes with our vocabularies (``keras_attn.text.Tokenizer``) and decodes with
    :func:`decoding_options`; ``beam_size > 1`` asks CTranslate2 for ``beam_size``
    hypotheses with ``length_penalty=0`` (raw sums of log-probabilities) and reranks them
    with our GNMT penalty ``((5 + n) / 6) ** alpha``.

    Args:
        model_dir: the exported directory.
        device, compute_type, intra_threads, inter_threads: ``ctranslate2.Translator``'s.

    Example:
        >>> ct2 = CTranslate2Translator("runs/dates/export/ctranslate2", intra_threads=2)
        >>> ct2.translate(["3 March 2021"])
        ['2021-03-03']
    """

    def __init__(self, model_dir, device="cpu", compute_type="default", intra_threads=0,
                 inter_threads=1):
        meta = runs.read_json(os.path.join(model_dir, METADATA))
        self.max_len = int(meta["max_len"])
        self.normalize = bool(meta["normalize_input"])
        self.src_tokenizer = text.Tokenizer.from_file(os.path.join(model_dir, SRC_VOCAB))
        self.tgt_tokenizer = text.Tokenizer.from_file(os.path.join(model_dir, TGT_VOCAB))
        self.src_tokens = ct2_vocab(self.src_tokenizer.vocab)
        self.tgt_ids = {t: i for i, t in enumerate(ct2_vocab(self.tgt_tokenizer.vocab))}
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

    def translate_tokens(self, tokens, beam_size=1, alpha=0.6, **options):
        """Target ids per sentence (``[END]`` included when the hypothesis ended), and
        their scores (sum of log-probabilities; GNMT-normalised with ``beam_size > 1``).
        ``options`` override the ``translate_batch`` options."""
        kwargs = dict(decoding_options(self.max_len, beam_size), return_scores=True)
        if beam_size > 1:
            kwargs.update(length_penalty=0.0, num_hypotheses=beam_size)
        kwargs.update(options)
        results = self.translator.translate_batch(tokens, **kwargs)
        ids, scores = [], []
        for result in results:
            hyps = [[self.tgt_ids[t] for t in h] for h in result.hypotheses]
            hyp_scores = list(result.scores)
            if beam_size > 1 and "length_penalty" not in options:
                hyp_scores = [s / ((5.0 + len(h)) / 6.0) ** alpha
                              for s, h in zip(hyp_scores, hyps)]
            best = int(np.argmax(hyp_scores))  # first of equals, as CTranslate2 sorts
            ids.append(hyps[best])
            scores.append(hyp_scores[best])
        return ids, scores

    def translate_ids(self, source, beam_size=1, alpha=0.6, **options):
        """Best output ids ``(B, T)`` for source ids ``(B, S)``, as
        ``Translator.translate_ids`` (``[END]`` included, then 0)."""
        ids, _ = self.translate_tokens(self.tokens_from_ids(source), beam_size, alpha,
                                       **options)
        return _pad(ids)

    def translate(self, sentences, beam_size=1, alpha=0.6, batch_size=128, **options):
        """Translate a list of strings; returns a list of strings."""
        import tensorflow as tf

        sentences = list(sentences)
        out = []
        for i in range(0, len(sentences), batch_size):
            ids, _ = self.translate_tokens(self.encode(sentences[i: i + batch_size]),
                                           beam_size, alpha, **options)
            decoded = self.tgt_tokenizer.detokenize(tf.constant(_pad(ids))).numpy()
            out.extend(s.decode("utf-8", errors="replace") for s in decoded)
        return out


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
