"""The public decoding functions: greedy search, beam search (GNMT length penalty), the
per-request :func:`decode` that every served artefact runs, and the teacher-forced passes:
:func:`cross_attention` (what word alignments read) and :func:`score` (forced decoding of
given hypotheses, CTranslate2's ``score_batch``).

Each builds a sampler (:mod:`keras_attn.decoding.samplers`) and ranks or reshapes what its
loop returns; none has a loop of its own.

References: D2L 10.8 (beam search); Wu et al. 2016 (GNMT length penalty).
"""
import keras
from keras import ops

from keras_attn.decoding.options import LENGTH_PENALTY
from keras_attn.decoding.processors import length_penalty, log_probs
from keras_attn.decoding.samplers import BeamSampler, GreedySampler, RandomSampler, take_beams
from keras_attn.decoding.step import check_source, encode
from keras_attn.core.special_tokens import END_ID, START_ID

KINDS = ("greedy", "beam", "sample")  # how :func:`decode` chooses the next tokens


def _trim(tokens, lengths):
    """Cut the fixed buffer after the longest row."""
    return tokens[..., : ops.max(lengths)] if len(tokens.shape) else tokens


# --- the public functions ------------------------------------------------------------------------
def greedy_decode_fixed(model, source, max_len, start_id, end_id, use_cache=True,
                        return_attention=False, options=None, encoded=None):
    """Greedy decoding into fixed-size buffers (XLA-compilable, exportable). ``options``:
    a ``DecodingOptions`` whose repetition controls apply (None: none; the artefacts pass
    the defaults, ``DecodingOptions()``). ``encoded``: :func:`encode` ``(model, source)``,
    if already computed.

    Returns a dict: ``tokens`` int32 ``(B, max_len)`` (0 after ``end_id``), ``lengths``
    int32 ``(B,)`` (tokens up to and including ``end_id``), ``log_prob`` float32 ``(B,)``
    (sum over those tokens), and with ``return_attention`` ``attention`` float32
    ``(B, max_len, S)`` (last decoder layer's cross-attention, mean over heads, or the
    Bahdanau weights).
    """
    out = GreedySampler(max_len, start_id, end_id, use_cache, return_attention)(
        model, source, encoded=encoded, options=options)
    return {key: value[:, 0] for key, value in out.items()}


def greedy_search(model, source, max_len, start_id, end_id, use_cache=True,
                  return_attention=False):
    """Greedy decoding: at each step the most likely next token.

    Args:
        model: from ``keras_attn.models``.
        source: int ``(B, S)`` token ids, 0 = padding.
        max_len: most tokens generated per row.
        start_id, end_id: the ``[START]`` and ``[END]`` ids of the target vocabulary.
        use_cache: incremental decoding with the key/value cache (False: the reference
            that re-runs the decoder on the whole prefix at every step).
        return_attention: also return the cross-attention of each generated token.

    Returns:
        int32 ``(B, T)``, ``T <= max_len``, without the start token; each row up to and
        including ``end_id``, then 0. With ``return_attention``: ``(tokens, weights)``,
        weights ``(B, T, S)``.

    Example:
        >>> greedy_search(model, source, max_len=20, start_id=2, end_id=3)
    """
    out = greedy_decode_fixed(model, source, max_len, start_id, end_id, use_cache,
                              return_attention)
    tokens = _trim(out["tokens"], out["lengths"])
    if return_attention:
        return tokens, out["attention"][:, : ops.shape(tokens)[1]]
    return tokens


def beam_decode_fixed(model, source, beam_size=4, alpha=LENGTH_PENALTY, max_len=64,
                      start_id=START_ID, end_id=END_ID, options=None, encoded=None):
    """Beam search into fixed-size buffers (XLA-compilable, exportable); ``options`` and
    ``encoded`` as :func:`greedy_decode_fixed`'s.

    Hypotheses are pruned by their summed log-probability; the final ranking uses
    ``score = log_prob / length_penalty(n, alpha)``.

    Returns a dict: ``tokens`` ``(B, K, max_len)``, ``lengths`` ``(B, K)``, ``log_prob``
    ``(B, K)`` and ``scores`` ``(B, K)``, best first.
    """
    out = BeamSampler(beam_size, max_len, start_id, end_id)(model, source, encoded=encoded,
                                                            options=options)
    scores, order = ops.top_k(out["log_prob"] / length_penalty(out["lengths"], alpha),
                              k=beam_size)
    ranked = {key: ops.take_along_axis(out[key], order, axis=1) for key in ("lengths", "log_prob")}
    return {"tokens": take_beams(out["tokens"], order), **ranked, "scores": scores}


def beam_search(model, source, beam_size=4, alpha=LENGTH_PENALTY, max_len=64,
                start_id=START_ID, end_id=END_ID):
    """Beam search with the GNMT length penalty.

    Args:
        model: from ``keras_attn.models``. source: int ``(B, S)``, 0 = padding.
        beam_size: hypotheses kept per row. alpha: length-penalty exponent (0 = none).
        max_len: most tokens per hypothesis. start_id, end_id: target vocabulary ids.

    Returns:
        ``(tokens (B, beam_size, T), scores (B, beam_size))``, best first; rows as for
        :func:`greedy_search`; score = sum of log-probabilities / ``((5 + n) / 6) ** alpha``.

    Example:
        >>> tokens, scores = beam_search(model, source, beam_size=4, start_id=2, end_id=3)
    """
    out = beam_decode_fixed(model, source, beam_size, alpha, max_len, start_id, end_id)
    return _trim(out["tokens"], out["lengths"]), out["scores"]



def decode(model, source, options, max_len, start_id, end_id, prefix=None, kind=None,
           encoded=None):
    """Decode with :class:`keras_attn.decoding.options.DecodingOptions` (resolved: its
    ``max_length`` and ``length_penalty`` set).

    ``sampling_topk > 1`` samples (``num_hypotheses`` draws per row; ``beam_size`` is then
    only their upper bound), else ``beam_size > 1`` is beam search, else greedy.
    ``kind`` (one of :data:`KINDS`) makes that choice instead, for a graph that traces
    every kind once and picks one per request: ``beam_size`` and ``num_hypotheses`` may
    then be int32 tensors too. The sampling settings and ``seed`` are read as given
    (tensors are fine). ``prefix``: optional int32 ``(B, P)`` target ids forced first
    (0 = none left for that row; ``P >= 1``). ``encoded``: :func:`encode` ``(model,
    source)``, if already computed.

    Returns a dict: ``tokens`` int32 ``(B, N, max_len)``, ``lengths`` ``(B, N)`` and
    ``scores`` float32 ``(B, N)`` (N = ``num_hypotheses``; beam search: best first, by
    ``log_prob / length_penalty``; greedy and sampling: the summed log-probability).
    ``options.return_alignments`` is not read here: alignments are one more pass over the
    hypotheses (:func:`cross_attention`; ``keras_attn.translator.Translator.search``).
    """
    n = options.num_hypotheses
    if kind is None:
        kind = "sample" if options.sampling else "beam" if options.beam_size > 1 else "greedy"
    if kind not in KINDS:
        raise ValueError(f"`kind` must be one of {KINDS}. Received: kind={kind!r}")
    if kind == "beam":
        out = BeamSampler(options.beam_size, max_len, start_id, end_id)(
            model, source, options.max_length, prefix, encoded, options)
        ranked, order = ops.top_k(
            out["log_prob"] / length_penalty(out["lengths"], options.length_penalty), k=n)
        return {"tokens": take_beams(out["tokens"], order),
                "lengths": ops.take_along_axis(out["lengths"], order, axis=1),
                "scores": ranked}
    if kind == "sample":
        sampler = RandomSampler(max_len, start_id, end_id, n, options.sampling_topk,
                                options.sampling_topp, options.sampling_temperature,
                                options.seed)
    else:
        sampler = GreedySampler(max_len, start_id, end_id)
    out = sampler(model, source, options.max_length, prefix, encoded, options)
    return {"tokens": out["tokens"], "lengths": out["lengths"], "scores": out["log_prob"]}


def repeat_rows(source, encoded, n):
    """``source`` ``(B, S)`` and its encoding with every row repeated ``n`` times in place
    (``(B * n, ...)``): the rows of N hypotheses per sentence read together."""
    return (ops.repeat(source, n, axis=0),
            keras.tree.map_structure(lambda t: ops.repeat(t, n, axis=0), encoded))


def cross_attention(model, source, tokens, start_id, encoded=None):
    """float32 ``(B * N, T, S)``: the attention of each of ``tokens`` ``(B * N, T)`` (N
    hypotheses per sentence, together) over ``source`` ``(B, S)`` when the decoder reads
    them after ``start_id`` (one teacher-forced pass, as in training): the last decoder
    layer's cross-attention averaged over heads, or the Bahdanau weights. What
    :mod:`keras_attn.translation.alignment` reads for word alignments; the weights are those the
    decoder computed for each token while generating it. ``encoded``: :func:`encode`
    ``(model, source)``, if already computed."""
    source = check_source(source)
    tokens = ops.cast(tokens, "int32")
    if encoded is None:
        encoded = encode(model, source)
    n = ops.shape(tokens)[0] // ops.maximum(ops.shape(source)[0], 1)  # 0 rows: n = 0
    source, encoded = repeat_rows(source, encoded, n)
    start = ops.full((ops.shape(tokens)[0], 1), start_id, "int32")
    target_in = ops.concatenate([start, tokens[:, :-1]], axis=1)
    encoded = tuple(encoded) if isinstance(encoded, (tuple, list)) else (encoded,)
    decoder = model.get_layer("decoder")
    _, maps = decoder(target_in, *encoded, training=False,
                      enc_outputs_mask=ops.not_equal(source, 0), return_attention_scores=True)
    return ops.cast(decoder.alignment(maps), "float32")


def score(model, source, target, start_id=START_ID, end_id=END_ID, alpha=LENGTH_PENALTY,
          encoded=None):
    """Forced decoding: how likely the model finds the given ``target`` for ``source``.

    One teacher-forced pass of the decoder (as in training, and as :func:`cross_attention`)
    reads each target row after ``start_id``; every token's log-probability is taken under
    the bans of decoding (padding and ``start_id``, :func:`~keras_attn.decoding.processors.log_probs`),
    so a hypothesis that :func:`greedy_search` or :func:`beam_search` produced gets back the
    log-probabilities its search summed.

    Args:
        model: from ``keras_attn.models``. source: int ``(B, S)``, 0 = padding.
        target: int ``(B, T)`` target ids without the start token, each row ending with
            ``end_id`` (as the searches return them), then 0. A row is scored up to and
            including its first ``end_id``, skipping padding; what follows is ignored (a
            row without ``end_id`` is scored up to its last token).
        start_id, end_id: the target vocabulary's ``[START]`` and ``[END]`` ids.
        alpha: the GNMT length-penalty exponent of ``score`` (0 = the summed log-probability).
        encoded: :func:`encode` ``(model, source)``, if already computed.

    Returns:
        A dict: ``token_log_probs`` float32 ``(B, T)`` (0 on padding), ``log_prob`` ``(B,)``
        (their sum), ``lengths`` int32 ``(B,)`` (tokens, ``end_id`` included) and ``score``
        ``(B,)`` = ``log_prob / ((5 + n) / 6) ** alpha`` (:func:`length_penalty`, the
        ranking of :func:`beam_search`).

    Example:
        >>> out = score(model, source, greedy_search(model, source, 20, 2, 3), 2, 3)
        >>> out["log_prob"]  # the greedy search's summed log-probabilities

    References: CTranslate2 ``Translator.score_batch``; Wu et al. 2016 (length penalty).
    """
    source = check_source(source)
    target = ops.cast(target, "int32")
    if len(target.shape) != 2:
        raise ValueError(f"`target` must have shape (B, T). Received: shape={tuple(target.shape)}")
    if encoded is None:
        encoded = encode(model, source)
    encoded = tuple(encoded) if isinstance(encoded, (tuple, list)) else (encoded,)
    start = ops.full((ops.shape(target)[0], 1), start_id, "int32")
    target_in = ops.concatenate([start, target[:, :-1]], axis=1)  # (B, T)
    logits = model.get_layer("decoder")(target_in, *encoded, training=False,
                                        enc_outputs_mask=ops.not_equal(source, 0))
    # expand_dims, not target[:, :, None]: a new-axis slice is no TFLite builtin.
    per_token = ops.squeeze(ops.take_along_axis(
        log_probs(logits, start_id), ops.expand_dims(target, -1), axis=-1), -1)  # (B, T)
    ends = ops.cast(ops.equal(target, end_id), "int32")
    ended_before = ops.greater(ops.cumsum(ends, axis=1) - ends, 0)  # a token after the first end_id
    kept = ops.logical_and(ops.not_equal(target, 0), ops.logical_not(ended_before))
    per_token = ops.where(kept, per_token, 0.0)
    lengths = ops.sum(ops.cast(kept, "int32"), axis=1)
    total = ops.sum(per_token, axis=1)
    return {"token_log_probs": per_token, "log_prob": total, "lengths": lengths,
            "score": total / length_penalty(lengths, alpha)}
