"""The public decoding functions: greedy search, beam search, the per-request :func:`decode`
every served artefact runs, and the teacher-forced :func:`cross_attention` and :func:`score`
(forced decoding, CTranslate2's ``score_batch``).

References: D2L 10.8 (beam search); Wu et al. 2016 (GNMT length penalty).
"""
from keras import ops

from keras_attn.decoding.options import LENGTH_PENALTY
from keras_attn.decoding.options import length_penalty as gnmt_penalty  # frees the argument name
from keras_attn.decoding.processors import log_probs
from keras_attn.decoding.samplers import BeamSampler, GreedySampler, RandomSampler, take_beams
from keras_attn.decoding.step import as_args, check_source, encode, repeat_rows
from keras_attn.core.deprecation import renamed
from keras_attn.core.special_tokens import END_ID, START_ID

KINDS = ("greedy", "beam", "sample")  # how :func:`decode` chooses the next tokens


def _trim(tokens, lengths):
    """Cut the fixed buffer after the longest row."""
    return tokens[..., : ops.max(lengths)] if len(tokens.shape) else tokens


def greedy_decode_fixed(model, source, max_len, start_id, end_id, use_cache=True,
                        return_attention=False, options=None, encoded=None):
    """Greedy decoding into fixed-size buffers (XLA-compilable, exportable).

    Args as :func:`greedy_search`'s; ``options``: a ``DecodingOptions`` whose repetition
    controls apply; ``encoded``: :func:`encode` ``(model, source)``, if computed.

    Returns a dict: ``tokens`` int32 ``(B, max_len)``, ``lengths`` int32 ``(B,)``, ``log_prob``
    float32 ``(B,)`` and with ``return_attention`` ``attention`` float32 ``(B, max_len, S)``.
    """
    out = GreedySampler(max_len, start_id, end_id, use_cache, return_attention)(
        model, source, encoded=encoded, options=options)
    return {key: value[:, 0] for key, value in out.items()}


def greedy_search(model, source, max_len, start_id, end_id, use_cache=True,
                  return_attention=False):
    """Greedy decoding: at each step the most likely next token.

    Args:
        model: from ``keras_attn.models``. source: int ``(B, S)`` token ids, 0 = padding.
        max_len: most tokens generated per row.
        start_id, end_id: the ``[START]`` and ``[END]`` ids of the target vocabulary.
        use_cache: incremental decoding with the key/value cache (False: the reference).
        return_attention: also return the cross-attention of each generated token.

    Returns:
        int32 ``(B, T)``, ``T <= max_len``, each row up to and including ``end_id``, then 0.
        With ``return_attention``: ``(tokens, weights (B, T, S))``.

    Example:
        >>> greedy_search(model, source, max_len=20, start_id=2, end_id=3)
    """
    out = greedy_decode_fixed(model, source, max_len, start_id, end_id, use_cache,
                              return_attention)
    tokens = _trim(out["tokens"], out["lengths"])
    if return_attention:
        return tokens, out["attention"][:, : ops.shape(tokens)[1]]
    return tokens


@renamed(alpha="length_penalty")
def beam_decode_fixed(model, source, beam_size=4, length_penalty=LENGTH_PENALTY, max_len=64,
                      start_id=START_ID, end_id=END_ID, options=None, encoded=None):
    """Beam search into fixed-size buffers (XLA-compilable, exportable); args as
    :func:`beam_search`'s, ``options`` and ``encoded`` as :func:`greedy_decode_fixed`'s.

    Returns a dict: ``tokens`` ``(B, K, max_len)``, ``lengths``, ``log_prob`` and ``scores``
    ``(B, K)``, best first.
    """
    out = BeamSampler(beam_size, max_len, start_id, end_id)(model, source, encoded=encoded,
                                                            options=options)
    return _rank(out, length_penalty, beam_size)


def _rank(out, length_penalty, n):
    """The ``n`` best of a beam loop's hypotheses by ``log_prob / length_penalty``."""
    scores, order = ops.top_k(out["log_prob"] / gnmt_penalty(out["lengths"], length_penalty),
                              k=n)
    ranked = {key: ops.take_along_axis(out[key], order, axis=1) for key in ("lengths", "log_prob")}
    return {"tokens": take_beams(out["tokens"], order), **ranked, "scores": scores}


def beam_search(model, source, beam_size=4, alpha=LENGTH_PENALTY, max_len=64,
                start_id=START_ID, end_id=END_ID):
    """Beam search with the GNMT length penalty.

    Args:
        model: from ``keras_attn.models``. source: int ``(B, S)``, 0 = padding.
        beam_size: hypotheses kept per row. alpha: the GNMT length penalty (0 = none).
        max_len: most tokens per hypothesis. start_id, end_id: target vocabulary ids.

    Returns:
        ``(tokens (B, beam_size, T), scores (B, beam_size))``, best first; score = sum of
        log-probabilities / ``((5 + n) / 6) ** alpha``.

    Example:
        >>> tokens, scores = beam_search(model, source, beam_size=4, start_id=2, end_id=3)
    """
    out = beam_decode_fixed(model, source, beam_size, alpha, max_len, start_id, end_id)
    return _trim(out["tokens"], out["lengths"]), out["scores"]


def decode(model, source, options, max_len, start_id, end_id, prefix=None, kind=None,
           encoded=None):
    """Decode with resolved :class:`~keras_attn.decoding.options.DecodingOptions`.

    ``sampling_topk > 1`` samples ``num_hypotheses`` draws per row, else ``beam_size > 1`` is
    beam search, else greedy; ``kind`` (one of :data:`KINDS`) makes that choice instead.
    ``prefix``: optional int32 ``(B, P)`` target ids forced first (0 = none left).

    Returns a dict: ``tokens`` int32 ``(B, N, max_len)``, ``lengths`` ``(B, N)`` and ``scores``
    float32 ``(B, N)`` (beam search: best first by ``log_prob / length_penalty``).
    """
    n = options.num_hypotheses
    if kind is None:
        kind = "sample" if options.sampling else "beam" if options.beam_size > 1 else "greedy"
    if kind not in KINDS:
        raise ValueError(f"`kind` must be one of {KINDS}. Received: kind={kind!r}")
    if kind == "beam":
        out = BeamSampler(options.beam_size, max_len, start_id, end_id)(
            model, source, options.max_length, prefix, encoded, options)
        out = _rank(out, options.length_penalty, n)
        return {key: out[key] for key in ("tokens", "lengths", "scores")}
    if kind == "sample":
        sampler = RandomSampler(max_len, start_id, end_id, n, options.sampling_topk,
                                options.sampling_topp, options.sampling_temperature,
                                options.seed)
    else:
        sampler = GreedySampler(max_len, start_id, end_id)
    out = sampler(model, source, options.max_length, prefix, encoded, options)
    return {"tokens": out["tokens"], "lengths": out["lengths"], "scores": out["log_prob"]}


def cross_attention(model, source, tokens, start_id, encoded=None):
    """float32 ``(B * N, T, S)``: the decoder's alignment of ``tokens`` ``(B * N, T)`` (N
    hypotheses per sentence, together) over ``source`` ``(B, S)``, from one teacher-forced
    pass after ``start_id`` (``encoded``: :func:`encode`'s output, if computed)."""
    source = check_source(source)
    tokens = ops.cast(tokens, "int32")
    if encoded is None:
        encoded = encode(model, source)
    n = ops.shape(tokens)[0] // ops.maximum(ops.shape(source)[0], 1)  # 0 rows: n = 0
    source, encoded = repeat_rows(source, encoded, n)
    _, maps = _forced(model, source, tokens, start_id, encoded, return_attention_scores=True)
    return ops.cast(model.get_layer("decoder").alignment(maps), "float32")


def _forced(model, source, target, start_id, encoded, **kwargs):
    """The decoder's teacher-forced call on ``target`` ``(B, T)`` read after ``start_id``."""
    start = ops.full((ops.shape(target)[0], 1), start_id, "int32")
    target_in = ops.concatenate([start, target[:, :-1]], axis=1)  # (B, T)
    return model.get_layer("decoder")(target_in, *as_args(encoded), training=False,
                                      enc_outputs_mask=ops.not_equal(source, 0), **kwargs)


@renamed(alpha="length_penalty")
def score(model, source, target, start_id=START_ID, end_id=END_ID,
          length_penalty=LENGTH_PENALTY, encoded=None):
    """Forced decoding: how likely the model finds ``target`` for ``source`` (one
    teacher-forced pass under the bans of decoding).

    Args:
        model: from ``keras_attn.models``. source: int ``(B, S)``, 0 = padding.
        target: int ``(B, T)`` ids without the start token; a row is scored up to and
            including its first ``end_id``, skipping padding.
        start_id, end_id: the target vocabulary's ``[START]`` and ``[END]`` ids.
        length_penalty: GNMT's alpha in ``score``. encoded: :func:`encode`'s output, if any.

    Returns:
        A dict: ``token_log_probs`` float32 ``(B, T)`` (0 on padding), ``log_prob`` ``(B,)``,
        ``lengths`` int32 ``(B,)`` and ``score`` ``(B,)`` (the ranking of :func:`beam_search`).

    Example:
        >>> out = score(model, source, greedy_search(model, source, 20, 2, 3), 2, 3)
        >>> out["log_prob"]  # the greedy search's summed log-probabilities
    """
    source = check_source(source)
    target = ops.cast(target, "int32")
    if len(target.shape) != 2:
        raise ValueError(f"`target` must have shape (B, T). Received: shape={tuple(target.shape)}")
    if encoded is None:
        encoded = encode(model, source)
    logits = _forced(model, source, target, start_id, encoded)
    # expand_dims, not target[:, :, None]: a new-axis slice is no TFLite builtin.
    per_token = ops.squeeze(ops.take_along_axis(
        log_probs(logits, start_id), ops.expand_dims(target, -1), axis=-1), -1)  # (B, T)
    ends = ops.cast(ops.equal(target, end_id), "int32")
    ended_before = ops.greater(ops.cumsum(ends, axis=1) - ends, 0)  # after the first end_id
    kept = ops.logical_and(ops.not_equal(target, 0), ops.logical_not(ended_before))
    per_token = ops.where(kept, per_token, 0.0)
    lengths = ops.sum(ops.cast(kept, "int32"), axis=1)
    total = ops.sum(per_token, axis=1)
    return {"token_log_probs": per_token, "log_prob": total, "lengths": lengths,
            "score": total / gnmt_penalty(lengths, length_penalty)}
