"""A glossary's terms put in inside the SavedModel's graph (TensorFlow-only): the TensorFlow
ops of :func:`keras_attn.text.glossary.entries` (its checks), :func:`~keras_attn.text.
glossary.find` and :func:`~keras_attn.text.glossary.apply`, so that a TF Serving client of
``translate_v4`` sends its terms (``glossary_source``, ``glossary_target``: strings
``(G,)``) and gets them back in place (docs/real_text.md, "Glossaries").

The same rules, read by RE2 (the patterns keep to what Python's ``re`` and RE2 read alike);
positions are bytes here, characters there. ``tests/test_glossary.py`` holds the two equal
on the shared fixture file ``tests/data/glossary_cases.json``.

Example:
    >>> terms = checked(tf.constant(["ticket"]), tf.constant(["billet"]))
    >>> found = find(tf.constant(["Show me your ticket."]), terms)
    >>> apply(tf.constant(["Show me your ticket."]), found, terms,
    ...       tf.constant(["Montre-moi ton ticket."]), tf.constant(["0-0 1-0 2-1 3-2"]),
    ...       tf.constant([0]))[0].numpy()[0].decode()
    'Montre-moi ton billet.'
"""
import tensorflow as tf

from keras_attn.export import spans_graph
from keras_attn.text import glossary as glossaries
from keras_attn.text.span_rules import SPACE

_SPACE = f"[{SPACE}]"
_WORD, _NOT_WORD = r"[\pL\pN]", r"[^\pL\pN]"
_META = r"([\\.+*?()|\[\]{}^$])"  # keras_attn.text.glossary._META, as a class
_LINE_BREAK = "[\n\r\x0b\x0c\x1c-\x1e\x85\u2028\u2029]"
_NEVER = r"\b\B"  # a pattern that matches nothing (a glossary of no term)


def _full(strings, pattern):
    return tf.strings.regex_full_match(strings, "(?s)" + pattern)


def _stripped(strings):  # whitespace at the ends
    return tf.strings.regex_replace(strings, f"^{_SPACE}+|{_SPACE}+$", "")


def _key(strings):
    """:func:`keras_attn.text.glossary.key`: spacing collapsed, lower case."""
    collapsed = tf.strings.regex_replace(strings, f"{_SPACE}+", " ")
    return tf.strings.lower(tf.strings.regex_replace(collapsed, "^ | $", ""), encoding="utf-8")


def checked(sources, targets):
    """A request's glossary inputs checked (``InvalidArgument`` naming the problem, as
    :func:`keras_attn.text.glossary.entries`' ``ValueError``) and read.

    Args:
        sources, targets: strings ``(G,)``.

    Returns:
        A dict: ``source`` (whitespace at the ends stripped, inner spacing one space),
        ``target`` (stripped), ``key`` (:func:`_key`), strings ``(G,)``.
    """
    sources = tf.strings.unicode_transcode(sources, "UTF-8", "UTF-8", errors="replace")
    targets = tf.strings.unicode_transcode(targets, "UTF-8", "UTF-8", errors="replace")
    count = tf.size(sources)
    same_size = tf.debugging.Assert(tf.equal(count, tf.size(targets)), [
        "`glossary` must hold as many target terms as source terms. Received: "
        "glossary_source of", count, "and glossary_target of", tf.size(targets), "terms"])
    with tf.control_dependencies([same_size]):
        sources, targets = _stripped(sources), _stripped(targets)
    broken = _full(tf.concat([sources, targets], 0), f".*{_LINE_BREAK}.*")
    sources = tf.strings.regex_replace(sources, f"{_SPACE}+", " ")
    keys = _key(sources)
    both = tf.concat([sources, targets], 0)
    lengths = tf.strings.length(both, unit="UTF8_CHAR")
    other = tf.not_equal(targets[:, None], targets[None, :])
    clash = tf.equal(keys[:, None], keys[None, :]) & other  # (G, G)
    rules = [
        (count <= glossaries.MAX_TERMS, f"`glossary` holds at most {glossaries.MAX_TERMS} "
         "terms. Received: a glossary of", count),
        (tf.reduce_all(lengths > 0), "`glossary` has an empty term (only whitespace or "
         "nothing). Received: empty terms at rows (sources first, then targets)",
         tf.where(tf.equal(lengths, 0))[:, 0]),
        (tf.reduce_all(lengths <= glossaries.MAX_TERM_CHARS), "`glossary` terms are at most "
         f"{glossaries.MAX_TERM_CHARS} characters. Received:",
         tf.boolean_mask(both, lengths > glossaries.MAX_TERM_CHARS)),
        (~tf.reduce_any(broken), "`glossary` terms are one line each. Received:",
         tf.boolean_mask(both, broken)),
        (tf.reduce_all(_full(sources, f".*{_WORD}.*")), "`glossary` source terms must hold a "
         "letter or a digit (terms are found as whole words). Received:",
         tf.boolean_mask(sources, ~_full(sources, f".*{_WORD}.*"))),
        (~tf.reduce_any(clash), "`glossary` gives one source term two targets (any case, "
         "any spacing). Received:", tf.boolean_mask(sources, tf.reduce_any(clash, 1))),
    ]
    guards = [tf.debugging.Assert(ok, [message, value], summarize=8)
              for ok, message, value in rules]
    with tf.control_dependencies(guards):
        return {"source": tf.identity(sources), "target": tf.identity(targets),
                "key": tf.identity(keys)}


def _escaped(terms, spacing=True):
    """:func:`keras_attn.text.glossary.escaped` (``spacing`` False: spaces as written)."""
    text = tf.strings.regex_replace(terms, _META, r"\\\1")
    return tf.strings.regex_replace(text, " +", f"{_SPACE}+") if spacing else text


def _matches(strings, pattern):
    """``(strings' row of each match, begin, end, text)`` of every leftmost match of
    ``pattern`` (a scalar) in ``strings`` ``(S,)``: RE2's scan, Python's ``finditer``."""
    from tensorflow_text.python.ops.regex_split_ops import gen_regex_split_ops as ops

    grouped = tf.strings.join(["(", pattern, ")"])
    pieces, begins, ends, splits = ops.regex_split_with_offsets(strings, grouped, grouped)
    # The same split without the matches: a piece found there too is no match.
    _, plain_begins, plain_ends, plain_splits = ops.regex_split_with_offsets(
        strings, grouped, tf.constant("()"))
    rows = tf.RaggedTensor.from_row_splits(tf.range(tf.size(begins)), splits).value_rowids()
    plain_rows = tf.RaggedTensor.from_row_splits(tf.range(tf.size(plain_begins)),
                                                 plain_splits).value_rowids()
    width = tf.cast(tf.reduce_max(tf.concat([tf.strings.length(strings), [0]], 0)) + 1,
                    tf.int64)
    code = lambda r, b: r * width + b  # noqa: E731  (one number per row and begin)
    plain = tf.sort(code(plain_rows, plain_begins))
    at = tf.searchsorted(plain, code(rows, begins))
    found = tf.gather(tf.concat([plain, [-1]], 0), at) == code(rows, begins)
    is_match = ~found
    take = lambda t: tf.cast(tf.boolean_mask(t, is_match), tf.int32)  # noqa: E731
    return (take(rows), take(begins), take(ends), tf.boolean_mask(pieces, is_match))


def find(sentences, terms, outside=None):
    """:func:`keras_attn.text.glossary.find` of every sentence.

    Args:
        sentences: strings ``(S,)``. terms: :func:`checked`'s dict.
        outside: ``(starts, ends)`` int32 RaggedTensors ``(S, None)``, byte ranges no
            match may touch (spans that pass through), or None.

    Returns:
        A dict of RaggedTensors ``(S, None)``: ``start``, ``end`` (bytes) and ``index``
        (the term's row of ``terms``) of each match, in order.
    """
    sources = terms["source"]
    order = tf.argsort(-tf.strings.length(sources, unit="UTF8_CHAR"), stable=True)
    ends_word = _full(sources, f".*{_WORD}")
    alternatives = tf.where(ends_word, tf.strings.join([_escaped(sources),
                                                        f"(?:{_NOT_WORD}|$)"]),
                            _escaped(sources))
    pattern = tf.strings.join(["(?i)", tf.strings.reduce_join(tf.strings.join(
        ["(?:", tf.gather(alternatives, order), ")"]), separator="|")])
    pattern = tf.where(tf.size(sources) > 0, pattern, _NEVER)
    row, begin, end, text = _matches(sentences, pattern)
    keys = terms["key"]

    def first(mask):  # the first term of each row of (M, G), or -1
        padded = tf.concat([tf.cast(mask, tf.int32), tf.ones([tf.shape(mask)[0], 1], tf.int32)],
                           1)
        at = tf.argmax(padded, 1, output_type=tf.int32)
        return tf.where(at < tf.shape(mask)[1], at, -1)

    whole = first(tf.equal(_key(text)[:, None], keys[None, :]))
    short = first(tf.equal(_key(tf.strings.regex_replace(text, "(?s).$", ""))[:, None],
                           keys[None, :]))
    as_is = (whole >= 0) & ~tf.gather(ends_word, tf.maximum(whole, 0))
    cut = _full(text, f".*{_NOT_WORD}")  # the character after the term was matched too
    index = tf.where(as_is, whole, tf.where(cut, short, whole))
    last = tf.strings.length(text) - tf.strings.length(
        tf.strings.regex_replace(text, "(?s).$", ""))
    end = tf.where(~as_is & cut & (short >= 0), end - last, end)
    sentence = tf.gather(sentences, row)
    starts_word = _full(tf.gather(sources, tf.maximum(index, 0)), f"{_WORD}.*")
    before = tf.strings.substr(sentence, tf.zeros_like(begin), begin)
    inside = starts_word & _full(before, f".*{_WORD}")
    keep = (index >= 0) & ~inside
    if outside is not None:
        starts, ends = (tf.gather(t, row) for t in outside)  # (M, None)
        touches = (starts < end[:, None]) & (begin[:, None] < ends)
        keep &= ~tf.reduce_any(touches, axis=1)
    row = tf.boolean_mask(row, keep)
    count = tf.shape(sentences, out_type=tf.int64)[0]
    make = lambda t: tf.RaggedTensor.from_value_rowids(  # noqa: E731
        tf.boolean_mask(t, keep), tf.cast(row, tf.int64), nrows=count)
    return {"start": make(begin), "end": make(end), "index": make(index)}


def applied(found, count):
    """int32 ``(S, count)``: how many times each term was found in each sentence."""
    index = found["index"]
    hits = tf.one_hot(index.flat_values, count, dtype=tf.int32)
    return tf.math.unsorted_segment_sum(hits, index.value_rowids(), index.nrows())


def _occurrences(target, t, ends):
    """The word runs ``(lo, hi)`` int32 of ``t``'s words (``ends``) where ``target``
    stands as a whole word, exact case (:func:`keras_attn.text.glossary._occurrences`)."""
    _, begin, end, _ = _matches(tf.reshape(t, [1]), _escaped(target, spacing=False))
    before = tf.strings.substr(tf.fill(tf.shape(begin), t), tf.zeros_like(begin), begin)
    after = tf.strings.substr(tf.fill(tf.shape(end), t), end,
                              tf.strings.length(t) - end)
    glued = ((_full(target, f"{_WORD}.*") & _full(before, f".*{_WORD}"))
             | (_full(target, f".*{_WORD}") & _full(after, f"{_WORD}.*")))
    begin, end = tf.boolean_mask(begin, ~glued), tf.boolean_mask(end, ~glued)
    return spans_graph._word_at(ends, begin), spans_graph._word_at(ends, end - 1)


def _first(flags):
    """The index of the first set flag, or their number when none is."""
    where = tf.cast(tf.where(flags)[:, 0], tf.int32)
    return tf.reduce_min(tf.concat([where, [tf.size(flags)]], 0))


def _in_runs(flags, lo, hi):
    """Per run ``[lo, hi]`` of word indices: how many of ``flags`` are set in it."""
    total = tf.concat([[0], tf.cumsum(tf.cast(flags, tf.int32))], 0)
    at = lambda x: tf.gather(total, tf.clip_by_value(x, 0, tf.size(flags)))  # noqa: E731
    return at(hi + 1) - at(lo)


def _run_end(flags, j):
    """The last index of the run of set ``flags`` that starts at ``j``."""
    after = tf.cast(~flags[j:], tf.int32)
    length = tf.where(tf.reduce_any(after > 0),
                      tf.argmax(after, output_type=tf.int32), tf.size(after))
    return j + length - 1


@tf.autograph.experimental.do_not_convert
def _apply_one(row):
    """:func:`keras_attn.text.glossary.apply` of one hypothesis (``row``)."""
    s, t = row["source"], row["translation"]
    start, end, target = row["start"], row["end"], row["target"]
    src_starts, src_ends = spans_graph._words(s)
    starts, ends = spans_graph._words(t)
    n_src, n_tgt = tf.size(src_starts), tf.size(starts)
    i, j = spans_graph._pairs(row["alignment"])
    words = spans_graph._substr(t, starts, ends - starts)
    wordy = _full(words, f".*{_WORD}.*")
    lead = tf.strings.length(tf.strings.regex_replace(words, f"(?s)^({_NOT_WORD}*).*$", r"\1"))
    trail = tf.strings.length(words) - tf.strings.length(
        tf.strings.regex_replace(words, f"{_NOT_WORD}*$", ""))
    count = tf.size(start)
    # (K, n_src): the source words of each match
    own = (src_starts[None, :] < end[:, None]) & (src_ends[None, :] > start[:, None])

    def step(k, used, e_start, e_end, e_text):
        mine = tf.gather(tf.concat([own[k], [False]], 0), tf.minimum(i, n_src)) & (j < n_tgt)
        hit = tf.boolean_mask(j, mine)
        aligned = (tf.scatter_nd(hit[:, None], tf.ones_like(hit), [n_tgt]) > 0) & wordy
        lo_o, hi_o = _occurrences(target[k], t, ends)
        free = _in_runs(used, lo_o, hi_o) == 0
        here = free & (_in_runs(aligned, lo_o, hi_o) > 0)
        pick = tf.where(tf.reduce_any(here), _first(here), _first(free))
        taken = tf.reduce_any(free)
        o_lo, o_hi = (tf.gather(tf.concat([x, [0]], 0), pick) for x in (lo_o, hi_o))
        has_aligned = tf.reduce_any(aligned)
        last_word = tf.maximum(n_tgt - 1, 0)
        lo = tf.minimum(_first(aligned), last_word)
        hi = tf.cond(has_aligned, lambda: _run_end(aligned, lo), lambda: lo)
        run_free = has_aligned & (_in_runs(used, lo[None], hi[None])[0] == 0)
        empty = n_tgt == 0  # the targets make the translation
        replace = ~taken & ~empty & run_free
        last = tf.reduce_max(tf.concat([tf.cast(tf.where(own[k])[:, 0], tf.int32), [0]], 0))
        share = (tf.cast(last + 1, tf.float64) / tf.cast(tf.maximum(n_src, 1), tf.float64)
                 * tf.cast(n_tgt, tf.float64))
        near = tf.clip_by_value(tf.cast(tf.round(share), tf.int32) - 1, 0, last_word)
        at_word = tf.where(has_aligned, hi, near)
        at_word = tf.cond(~empty & ~taken & ~replace,
                          lambda: tf.where(tf.gather(used, at_word),
                                           _run_end(used, at_word), at_word),
                          lambda: at_word)
        pad = lambda x, fill=0: tf.concat([x, [fill]], 0)  # noqa: E731  (n_tgt may be 0)
        word_end = tf.gather(pad(ends), at_word)
        insert_at = tf.where(tf.gather(pad(wordy, False), at_word),
                             word_end - tf.gather(pad(trail), at_word), word_end)
        size = tf.strings.length(t)
        a = tf.where(replace, tf.gather(pad(starts), lo) + tf.gather(pad(lead), lo),
                     tf.where(empty, tf.where(k == 0, 0, size), insert_at))
        b = tf.where(replace, tf.gather(pad(ends), hi) - tf.gather(pad(trail), hi),
                     tf.where(empty, size, insert_at))
        text = tf.where(replace | (empty & (k == 0)), target[k],
                        tf.strings.join([" ", target[k]]))
        marks = tf.range(n_tgt)
        used = used | (taken & (marks >= o_lo) & (marks <= o_hi)) | (
            replace & (marks >= lo) & (marks <= hi))
        at = [[k]]
        e_start = tf.tensor_scatter_nd_update(e_start, at, tf.where(taken, -1, a)[None])
        e_end = tf.tensor_scatter_nd_update(e_end, at, b[None])
        e_text = tf.tensor_scatter_nd_update(e_text, at, text[None])
        return k + 1, used, e_start, e_end, e_text

    _, _, e_start, e_end, e_text = tf.while_loop(
        lambda k, *_: k < count, step,
        (tf.constant(0), tf.zeros([n_tgt], tf.bool), tf.zeros([count], tf.int32),
         tf.zeros([count], tf.int32), tf.fill([count], "")),
        shape_invariants=(tf.TensorShape([]), tf.TensorShape([None]), tf.TensorShape([None]),
                          tf.TensorShape([None]), tf.TensorShape([None])))
    done = e_start >= 0
    order = tf.boolean_mask(tf.range(count), done)
    order = tf.gather(order, tf.argsort(tf.gather(e_start, order) * (count + 1) + order,
                                        stable=True))
    e_start, e_end, e_text = (tf.gather(x, order) for x in (e_start, e_end, e_text))
    return tf.cond(tf.size(order) == 0, lambda: (t, row["alignment"]),
                   lambda: _edited(row, e_start, e_end, e_text, order, own, i, j,
                                   starts, ends))


def _edited(row, e_start, e_end, e_text, order, own, i, j, starts, ends):
    t = row["translation"]
    since = tf.concat([[0], e_end[:-1]], 0)
    pieces = tf.reshape(tf.stack([spans_graph._substr(t, since, e_start - since), e_text],
                                 axis=1), [-1])
    final = tf.strings.join([tf.strings.reduce_join(pieces),
                             tf.strings.substr(t, e_end[-1], tf.strings.length(t) - e_end[-1])])
    length = tf.strings.length(e_text)
    delta = length - (e_end - e_start)
    # The pairs of the words no edit replaced, to the words they moved to.
    ok = (j < tf.size(starts)) & (i < tf.shape(own)[1])
    i, j = tf.boolean_mask(i, ok), tf.boolean_mask(j, ok)
    a, b = tf.gather(starts, j), tf.gather(ends, j)
    replaced = tf.reduce_any((e_start < e_end)[None, :] & (e_start[None, :] < b[:, None])
                             & (a[:, None] < e_end[None, :]), axis=1)
    shift = tf.reduce_sum(tf.where(e_end[None, :] <= a[:, None], delta[None, :], 0), axis=1)
    final_starts, final_ends = spans_graph._words(final)
    n_src = tf.shape(own)[1]
    fj = spans_graph._word_at(final_ends, a + shift)
    keep = ~replaced
    links = tf.scatter_nd(tf.stack([tf.boolean_mask(fj, keep), tf.boolean_mask(i, keep)], 1),
                          tf.ones_like(tf.boolean_mask(i, keep)),
                          [tf.size(final_starts), n_src]) > 0
    # Each term: the source words of its match with the words it became.
    spaces = length - tf.strings.length(tf.strings.regex_replace(e_text, "^ +", ""))
    begin = e_start + tf.cumsum(delta, exclusive=True) + spaces
    stop = begin + length - spaces
    became = (final_starts[None, :] < stop[:, None]) & (final_ends[None, :] > begin[:, None])
    pair = became[:, :, None] & tf.gather(own, order)[:, None, :]  # (E, final, n_src)
    links = links | tf.reduce_any(pair, axis=0)
    where = tf.cast(tf.where(links), tf.int32)  # sorted by target word, then source word
    return final, tf.strings.reduce_join(tf.strings.join(
        [tf.strings.as_string(where[:, 1]), tf.strings.as_string(where[:, 0])], "-"),
        separator=" ")


def apply(sentences, found, terms, translations, alignments, owner):
    """The translations with each match's target in place and their alignments renumbered.

    Args:
        sentences: strings ``(S,)``. found: :func:`find`'s for them. terms: :func:`checked`'s.
        translations, alignments: strings ``(H,)``: the hypotheses and their Pharaoh pairs
            over the whole sentence and translation.
        owner: int32 ``(H,)``, the sentence of each hypothesis.

    Returns:
        ``(translations, alignments)``, strings ``(H,)``.
    """
    rows = {"source": tf.gather(sentences, owner), "translation": translations,
            "alignment": alignments,
            "start": tf.gather(found["start"], owner), "end": tf.gather(found["end"], owner),
            "target": tf.gather(found["index"], owner).with_flat_values(tf.gather(
                terms["target"], tf.gather(found["index"], owner).flat_values))}
    return tf.map_fn(_apply_one, rows, fn_output_signature=(tf.string, tf.string))


def with_glossary(sentences, translate, sources, targets, passthrough=False,
                  keep_alignments=False):
    """Sentences translated with a glossary's terms put in: found (outside the spans that
    pass through), the sentences translated whole with their alignments, the terms put in
    (:func:`apply`). The graphs' :func:`keras_attn.translation.glossary.with_glossary`.

    Args:
        sentences: strings ``(S,)``.
        translate: ``(sentences (S,), keep_alignments: bool tensor) -> dict`` of
            ``translations``, ``scores``, ``confidences``, ``alignments`` ``(S, N)`` (over
            the whole sentence and translation) and ``truncated`` ``(S,)``.
        sources, targets: the glossary, strings ``(G,)`` (:func:`checked`).
        passthrough: bool (a scalar tensor or Python): spans pass through (no term in them).
        keep_alignments: bool (likewise): ``alignments`` returned; False: "".

    Returns:
        ``translate``'s dict, the terms in, and ``applied_terms`` int32 ``(S, G)``.
    """
    terms = checked(sources, targets)
    outside = None
    if passthrough is not False:
        rows = tf.cast(tf.where(passthrough & spans_graph.may_hold_spans(sentences))[:, 0],
                       tf.int32)
        plan = spans_graph.cut(tf.gather(sentences, rows))
        lengths = tf.scatter_nd(rows[:, None], tf.cast(plan["start"].row_lengths(), tf.int32),
                                tf.shape(sentences))
        starts = tf.RaggedTensor.from_row_lengths(plan["start"].flat_values, lengths)
        outside = (starts, starts + tf.RaggedTensor.from_row_lengths(
            tf.strings.length(plan["text"].flat_values), lengths))
    found = find(sentences, terms, outside)
    counts = found["index"].row_lengths()
    out = translate(sentences, keep_alignments | (tf.reduce_sum(counts) > 0))
    rows = tf.cast(tf.where(counts > 0)[:, 0], tf.int32)
    n = tf.shape(out["translations"])[1]
    flat = lambda x: tf.reshape(tf.gather(x, rows), [-1])  # noqa: E731  (R * N,)
    placed, aligned = apply(sentences, found, terms, flat(out["translations"]),
                            flat(out["alignments"]), tf.repeat(rows, n))
    at, shape = rows[:, None], [tf.size(rows), n]
    alignments = tf.tensor_scatter_nd_update(out["alignments"], at, tf.reshape(aligned, shape))
    return dict(out, translations=tf.tensor_scatter_nd_update(
        out["translations"], at, tf.reshape(placed, shape)),
        alignments=tf.where(keep_alignments, alignments, ""),
        applied_terms=applied(found, tf.size(terms["source"])))
