"""What must not be translated, passed through inside the SavedModel's graph: the
TensorFlow ops of :func:`keras_attn.text.spans.cut` and :func:`keras_attn.text.spans.put_back`,
so that ``serving_default`` called by TF Serving gives back URLs, e-mail addresses, code,
tags, numbers and emoji byte-identical (docs/real_text.md).

The same rules (:data:`keras_attn.text.span_rules.RULES`, read by RE2), groups, anchors and
placements; positions are bytes here, characters there. TFLite runs no regex op: its runtime
cuts and puts back in Python around the file.

Example:
    >>> plan = cut(tf.constant(["Call me at 10:30."]))
    >>> plan["rest"].numpy()
    array([b'Call me at.'], dtype=object)
    >>> put_back(plan, tf.constant(["Appelle-moi \\xc3\\xa0."]), tf.constant(["0-0 1-0 2-1"]),
    ...          tf.constant([0]))[0].numpy()[0].decode()
    'Appelle-moi à 10:30.'
"""
import tensorflow as tf

from keras_attn.text import spans

AFTER, BEFORE, GLUED = 0, 1, 2  # Group.mode
_ANY = "|".join(f"(?:{pattern})" for _, pattern in spans.RULES)
_SPACE = f"[{spans.SPACE}]"
# A Python tuple, not a tensor: this module may first be imported inside a trace.
_ASCII_SPACE = tuple(c.encode() for c in spans.WORD_SPACE)
_THIN = f"[{spans.THIN_SPACE}]"
_STOP = spans.FINAL_STOP
_INT_SPEC = tf.RaggedTensorSpec([None], tf.int32, ragged_rank=0)
_STR_SPEC = tf.RaggedTensorSpec([None], tf.string, ragged_rank=0)
_BOOL_SPEC = tf.RaggedTensorSpec([None], tf.bool, ragged_rank=0)
PLAN_SPEC = {"rest": tf.TensorSpec([], tf.string), "only_spans": tf.TensorSpec([], tf.bool),
             "n_words": tf.TensorSpec([], tf.int32), "text": _STR_SPEC, "start": _INT_SPEC,
             "mode": _INT_SPEC, "anchor": _INT_SPEC, "before": _STR_SPEC, "after": _STR_SPEC,
             "closing": _STR_SPEC, "emoji": _BOOL_SPEC, "rest_map": _INT_SPEC}


def may_hold_spans(sentences):
    """bool ``(S,)``: a rule matches somewhere in the sentence (a number inside a word
    too: :func:`cut` then finds no span)."""
    return tf.strings.regex_full_match(sentences, f"(?s).*(?:{_ANY}).*")


def _substr(s, pos, length):
    """``s[pos:pos + length]`` for every position (bytes), ``s`` a scalar."""
    return tf.strings.substr(tf.fill(tf.shape(pos), s), pos, length)


def _ends_with(strings, pattern):
    return tf.strings.regex_full_match(strings, f"(?s).*(?:{pattern})")


def _starts_with(strings, pattern):
    return tf.strings.regex_full_match(strings, f"(?s)(?:{pattern}).*")


def _leading(strings, pattern):
    """The bytes of ``strings``' longest prefix of ``pattern`` characters."""
    return tf.strings.length(tf.strings.regex_replace(strings, f"(?s)^({pattern}*).*$", r"\1"))


def _words(s):
    """``(starts, ends)`` int32 of the words of scalar ``s``: cut at ASCII whitespace, as
    :func:`keras_attn.text.spans._words` (bytes)."""
    chars = tf.strings.bytes_split(s)
    space = tf.constant(_ASCII_SPACE)
    word = tf.logical_not(tf.reduce_any(chars[:, None] == space[None, :], axis=1))
    before = tf.concat([[False], word], 0)[:-1]
    after = tf.concat([word, [False]], 0)[1:]
    starts = tf.cast(tf.where(word & ~before)[:, 0], tf.int32)
    ends = tf.cast(tf.where(word & ~after)[:, 0], tf.int32) + 1
    return starts, ends


def _word_at(ends, position):
    """The index of the word holding byte ``position`` (or the next one), as
    :func:`keras_attn.text.spans._word_at`."""
    count = tf.reduce_sum(tf.cast(ends[None, :] <= position[:, None], tf.int32), axis=1)
    return tf.minimum(count, tf.size(ends) - 1)


def _cut_one(s):
    """:func:`keras_attn.text.spans.cut` of scalar ``s``: a :data:`PLAN_SPEC` dict."""
    import tensorflow_text as tf_text

    n = tf.strings.length(s)
    tokens, begins, ends = tf_text.regex_split_with_offsets(tf.reshape(s, [1]), _ANY, _ANY)
    tokens, begins, ends = (tf.cast(t.flat_values, tf.int32) if t.dtype != tf.string
                            else t.flat_values for t in (tokens, begins, ends))
    kinds = tf.stack([tf.strings.regex_full_match(tokens, pattern)
                      for _, pattern in spans.RULES], axis=1)  # (T, rules)
    matched = tf.reduce_any(kinds, axis=1)
    kind = tf.where(matched, tf.argmax(tf.cast(kinds, tf.int32), axis=1, output_type=tf.int32),
                    -1)
    bound = tf.constant([name in spans.WORD_BOUND for name, _ in spans.RULES])
    touches = (_ends_with(_substr(s, tf.zeros_like(begins), begins), r"[\pL\pN_-]")
               | _starts_with(_substr(s, ends, n - ends), r"[\pL\pN_]"))
    is_span = matched & ~(tf.gather(bound, tf.maximum(kind, 0)) & touches)
    sb, se = tf.boolean_mask(begins, is_span), tf.boolean_mask(ends, is_span)
    emoji = tf.boolean_mask(kind, is_span) == spans.KINDS.index("emoji")
    # Spans with only whitespace between them make one group.
    between = _substr(s, se[:-1], sb[1:] - se[:-1])
    new = tf.concat([[True], ~tf.strings.regex_full_match(between, f"{_SPACE}*")],
                    0)[:tf.size(sb)]
    group = tf.cumsum(tf.cast(new, tf.int32)) - 1
    count = tf.size(tf.unique(group).y)
    start = tf.math.unsorted_segment_min(sb, group, count)
    end = tf.math.unsorted_segment_max(se, group, count)
    emoji = tf.math.unsorted_segment_min(tf.cast(emoji, tf.int32), group, count) > 0
    prefix, suffix = _substr(s, tf.zeros_like(start), start), _substr(s, end, n - end)
    left = (start == 0) | _ends_with(prefix, _SPACE)
    right = (end == n) | _starts_with(suffix, _SPACE)
    tail = tf.strings.regex_replace(suffix, f"(?s)^([^{spans.SPACE}]*).*$", r"\1")
    closing = tf.where(~right & tf.strings.regex_full_match(tail, r"[\pP\pS]+"), tail, "")
    lead = tf.strings.length(tf.strings.regex_replace(prefix, f"{_SPACE}+$", ""))
    before = _substr(s, lead, start - lead)
    mode = tf.where(left & (right | (closing != "")), AFTER, tf.where(left, BEFORE, GLUED))
    # An "after" group takes the whitespace before it, or (at the start) after it.
    space_after = _leading(suffix, _SPACE)
    at_start = (mode == AFTER) & (lead == 0)
    after = tf.where(at_start, _substr(s, end, space_after), "")
    cut_from = tf.where((mode == AFTER) & (lead > 0), lead, start)
    cut_to = tf.where(at_start, end + space_after, end)
    position = tf.range(n)
    kept = ~tf.reduce_any((position[:, None] >= cut_from[None, :])
                          & (position[:, None] < cut_to[None, :]), axis=1)
    rest_map = tf.boolean_mask(position, kept)
    rest = tf.strings.reduce_join(tf.boolean_mask(tf.strings.bytes_split(s), kept))
    # What the cuts left at the ends is trimmed (a sentence without spans is kept whole).
    lo = tf.where(count > 0, _leading(rest, _SPACE), 0)
    hi = tf.where(count > 0, tf.strings.length(
        tf.strings.regex_replace(rest, f"{_SPACE}+$", "")), tf.size(rest_map))
    hi = tf.maximum(hi, lo)
    rest, rest_map = tf.strings.substr(rest, lo, hi - lo), rest_map[lo:hi]
    word_starts, _ = _words(rest)
    first = tf.gather(rest_map, word_starts)  # each rest word's first source byte
    words = tf.size(first)
    below = tf.reduce_sum(tf.cast(first[None, :] < start[:, None], tf.int32), axis=1)
    beyond = tf.reduce_sum(tf.cast(first[None, :] < end[:, None], tf.int32), axis=1)
    anchor = tf.where(mode == AFTER, below - 1,
                      tf.where(mode == BEFORE, tf.minimum(beyond, words - 1),
                               tf.maximum(below - 1, 0)))
    mode = tf.where(words == 0, AFTER, mode)
    anchor = tf.where(words == 0, -1, anchor)
    only = (count > 0) & ~tf.strings.regex_full_match(rest, r"(?s).*[\pL\pN].*")
    return {"rest": rest, "only_spans": only, "n_words": words,
            "text": _substr(s, start, end - start), "start": start, "mode": mode,
            "anchor": anchor, "before": before, "after": after, "closing": closing,
            "emoji": emoji, "rest_map": rest_map}


def cut(sentences):
    """The sentences with their spans cut out, and where each group stood.

    Args:
        sentences: string ``(S,)``.

    Returns:
        A dict of :data:`PLAN_SPEC`'s keys, as :class:`keras_attn.text.spans.Cut` holds
        them: ``rest`` string ``(S,)`` (what the model reads), ``only_spans`` bool ``(S,)``,
        ``n_words`` int32 ``(S,)``, and ragged ``(S, None)`` per group ``text``, ``start``
        byte, ``mode``, ``anchor`` word of ``rest``, ``before``/``after`` whitespace,
        ``closing`` punctuation, ``emoji``; ``rest_map``: per byte of ``rest`` its byte.
    """
    sentences = tf.convert_to_tensor(sentences, tf.string)
    plan = tf.map_fn(_cut_one, sentences, fn_output_signature=PLAN_SPEC)
    plan["source"] = sentences
    return plan


def _identity(s):
    starts, _ = _words(s)
    k = tf.strings.as_string(tf.range(tf.size(starts)))
    return tf.strings.reduce_join(tf.strings.join([k, k], "-"), separator=" ")


def _pairs(alignment):
    """Pharaoh ``i-j`` pairs of scalar ``alignment`` -> ``(i, j)`` int32."""
    items = tf.strings.split(alignment)
    items = tf.boolean_mask(items, tf.strings.regex_full_match(items, r"[0-9]+-[0-9]+"))
    parts = tf.strings.split(items, "-").to_tensor(shape=[tf.size(items), 2])
    numbers = tf.strings.to_number(parts, tf.int32)
    return numbers[:, 0], numbers[:, 1]


def _put_back_one(row, renumber):
    """:func:`keras_attn.text.spans.put_back` of one hypothesis (``row``: its plan's
    fields, ``translation`` and ``alignment``): ``(translation, alignment)``, the
    alignment as given unless ``renumber``."""
    t, source = row["translation"], row["source"]
    blank = tf.strings.length(tf.strings.regex_replace(t, f"{_SPACE}+", "")) == 0
    alone = row["only_spans"] | blank
    return tf.cond(tf.size(row["mode"]) == 0, lambda: (t, row["alignment"]), lambda: tf.cond(
        alone, lambda: (source, _identity(source) if renumber else row["alignment"]),
        lambda: _placed(row, renumber)))


def _placed(row, renumber):
    t = row["translation"]
    mode, anchor, text = row["mode"], row["anchor"], row["text"]
    starts, ends = _words(t)
    n_target = tf.size(starts)
    n_source = row["n_words"]
    i, j = _pairs(row["alignment"])
    # The target word of each group: its anchor's aligned words, else the proportional one.
    hit = (i[None, :] == anchor[:, None]) & (j[None, :] < n_target)
    aligned = tf.reduce_any(hit, axis=1)
    lowest = tf.reduce_min(tf.where(hit, j[None, :], n_target), axis=1)
    highest = tf.reduce_max(tf.where(hit, j[None, :], -1), axis=1)
    before = mode == BEFORE
    share = (tf.cast(anchor + tf.where(before, 0, 1), tf.float64)
             / tf.cast(tf.maximum(n_source, 1), tf.float64))
    near = tf.cast(tf.round(share * tf.cast(n_target, tf.float64)), tf.int32) - tf.where(
        before, 0, 1)
    near = tf.where((anchor >= n_source - 1) & ~before, n_target - 1, near)
    target = tf.where(aligned, tf.where(before, lowest, highest),
                      tf.clip_by_value(near, 0, n_target - 1))
    a, b = tf.gather(starts, target), tf.gather(ends, target)
    word = _substr(t, a, b - a)
    closing = row["closing"]
    closing_len = tf.strings.length(closing)
    closes = ((closing != "") & (tf.strings.length(word) > closing_len)
              & (tf.strings.substr(word, tf.maximum(tf.strings.length(word) - closing_len, 0),
                                   closing_len) == closing))
    stop = tf.strings.length(word) - tf.strings.length(tf.strings.regex_replace(word, _STOP, ""))
    stop_at = tf.strings.length(word) - stop
    ends_with_emoji = (anchor == n_source - 1) & row["emoji"]
    keeps_stop = ((mode == AFTER) & (closing == "") & (stop > 0) & (target == n_target - 1)
                  & (stop_at > 0) & ~ends_with_emoji)
    at = tf.where(closes, b - closing_len, tf.where(keeps_stop, a + stop_at, b))
    # Before French spacing ("\u202f!"), one character of the word kept before the group.
    kept = tf.strings.length(tf.strings.regex_replace(
        _substr(t, a, at - a), f"(?s)^(.+?){_THIN}+$", r"\1"))
    at = tf.where(at < b, a + kept, at)
    at = tf.where(before, a, at)
    space = tf.where(row["before"] == "", " ", row["before"])
    insert = tf.where(mode == AFTER, tf.strings.join([space, text]), text)
    start_of = anchor < 0  # no word left to translate: at the start
    at = tf.where(start_of, 0, at)
    insert = tf.where(start_of, tf.strings.join(
        [text, tf.where(row["after"] == "", " ", row["after"])]), insert)
    order = tf.argsort(at * (tf.size(at) + 1) + tf.range(tf.size(at)), stable=True)
    at, insert = tf.gather(at, order), tf.gather(insert, order)
    since = tf.concat([[0], at[:-1]], 0)
    pieces = tf.reshape(tf.stack([_substr(t, since, at - since), insert], axis=1), [-1])
    final = tf.strings.join([tf.strings.reduce_join(pieces),
                             tf.strings.substr(t, at[-1], tf.strings.length(t) - at[-1])])
    if not renumber:
        return final, row["alignment"]
    return final, _renumbered(row, final, i, j, at, insert, order)


def _renumbered(row, final, i, j, at, insert, order):
    """:func:`keras_attn.text.spans._renumbered`: the rest's pairs over the sentence's and
    the final translation's words, each group's words with the words it became."""
    source, t = row["source"], row["translation"]
    src_starts, src_ends = _words(source)
    rest_starts, _ = _words(row["rest"])
    base_starts, _ = _words(t)
    final_starts, final_ends = _words(final)
    ok = (i < tf.size(rest_starts)) & (j < tf.size(base_starts))
    i, j = tf.boolean_mask(i, ok), tf.boolean_mask(j, ok)
    si = _word_at(src_ends, tf.gather(row["rest_map"], tf.gather(rest_starts, i)))
    a = tf.gather(base_starts, j)
    length = tf.strings.length(insert)
    moved = tf.reduce_sum(tf.where(at[None, :] <= a[:, None], length[None, :], 0), axis=1)
    fj = _word_at(final_ends, a + moved)
    links = tf.scatter_nd(tf.stack([fj, si], 1), tf.ones_like(si),
                          [tf.size(final_starts), tf.size(src_starts)]) > 0
    # Each group: the source words under its characters and the words it became.
    begin = at + tf.cumsum(length, exclusive=True) + _leading(insert, _SPACE)
    size = tf.strings.length(tf.strings.strip(insert))
    group_start = tf.gather(row["start"], order)
    group_end = group_start + tf.strings.length(tf.gather(row["text"], order))
    src = ((src_starts[None, :] < group_end[:, None]) & (src_ends[None, :] > group_start[:, None]))
    tgt = ((final_starts[None, :] < (begin + size)[:, None])
           & (final_ends[None, :] > begin[:, None]))
    same = tf.reduce_sum(tf.cast(src, tf.int32), 1) == tf.reduce_sum(tf.cast(tgt, tf.int32), 1)
    rank_src = tf.cumsum(tf.cast(src, tf.int32), axis=1) - 1
    rank_tgt = tf.cumsum(tf.cast(tgt, tf.int32), axis=1) - 1
    pair = (tgt[:, :, None] & src[:, None, :]
            & (~same[:, None, None] | (rank_tgt[:, :, None] == rank_src[:, None, :])))
    links = links | tf.reduce_any(pair, axis=0)  # (target word, source word)
    where = tf.cast(tf.where(links), tf.int32)  # sorted by target word, then source word
    strings = tf.strings.join([tf.strings.as_string(where[:, 1]),
                               tf.strings.as_string(where[:, 0])], "-")
    return tf.strings.reduce_join(strings, separator=" ")


def put_back(plan, translations, alignments, owner, renumber=True):
    """The translations of the plan's ``rest`` with the groups put back, and their
    alignments renumbered over the whole sentence and translation.

    Args:
        plan: :func:`cut`'s dict for ``S`` sentences.
        translations, alignments: string ``(H,)``, the hypotheses and their Pharaoh pairs
            ("" places each group at its proportional place).
        owner: int32 ``(H,)``, the sentence of each hypothesis.
        renumber: False: the alignments come back as given.

    Returns:
        ``(translations, alignments)``, string ``(H,)`` each.
    """
    rows = {name: tf.gather(plan[name], owner) for name in (*PLAN_SPEC, "source")}
    rows["translation"], rows["alignment"] = translations, alignments
    return tf.map_fn(lambda row: _put_back_one(row, renumber), rows,
                     fn_output_signature=(tf.string, tf.string))


def passed_through(sentences, decode, enabled=True, keep_alignments=False):
    """Sentences decoded with their spans passed through (:func:`cut`, then
    :func:`put_back` by the alignments); a sentence of spans alone is itself, score 0,
    confidence 1. The graphs' :func:`keras_attn.translation.passthrough.passed_through`.

    Args:
        sentences: string ``(S,)``.
        decode: ``(sentences (S,), return_alignments: bool tensor) -> dict``:
            ``translations``, ``scores``, ``confidences``, ``alignments`` ``(S, N)`` and
            ``truncated`` ``(S,)``.
        enabled: bool (a scalar tensor or Python): False decodes every sentence as it is.
        keep_alignments: bool (likewise): ``alignments`` renumbered over the whole sentence
            and translation; False: "".
    """
    rows = tf.cast(tf.where(enabled & may_hold_spans(sentences))[:, 0], tf.int32)
    plan = cut(tf.gather(sentences, rows))
    at = rows[:, tf.newaxis]
    out = decode(tf.tensor_scatter_nd_update(sentences, at, plan["rest"]),
                 keep_alignments | (tf.size(rows) > 0))
    n = tf.shape(out["translations"])[1]
    hypotheses = lambda t: tf.reshape(tf.gather(t, rows), [-1])  # noqa: E731  (R * N,)
    placed, aligned = put_back(plan, hypotheses(out["translations"]),
                               hypotheses(out["alignments"]),
                               tf.repeat(tf.range(tf.size(rows)), n),
                               renumber=keep_alignments is not False)
    shape = [tf.size(rows), n]
    only = tf.scatter_nd(at, plan["only_spans"], tf.shape(sentences))
    alignments = tf.tensor_scatter_nd_update(out["alignments"], at, tf.reshape(aligned, shape))
    return {"translations": tf.tensor_scatter_nd_update(out["translations"], at,
                                                        tf.reshape(placed, shape)),
            "scores": tf.where(only[:, tf.newaxis], 0.0, out["scores"]),
            "confidences": tf.where(only[:, tf.newaxis], 1.0, out["confidences"]),
            "alignments": tf.where(keep_alignments, alignments, ""),
            "truncated": out["truncated"] & ~only}
