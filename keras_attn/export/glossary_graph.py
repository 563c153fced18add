"""A glossary's terms found inside the SavedModel's graph (TensorFlow-only): the TensorFlow
ops of :func:`keras_attn.text.glossary.entries` (its checks) and
:func:`~keras_attn.text.glossary.find`, and :func:`with_glossary`, the request's step that
puts them in (:mod:`keras_attn.export.term_placement_graph`), so that a TF Serving client
of ``translate_v4`` sends its terms (``glossary_source``, ``glossary_target``: strings
``(G,)``) and gets them back in place (docs/real_text.md, "Glossaries").

The same rules, read by RE2 (the patterns keep to what Python's ``re`` and RE2 read alike);
positions are bytes here, characters there. ``tests/text/test_glossary.py`` holds the two equal
on the shared fixture file ``tests/fixtures/glossary_cases.json``.

Example:
    >>> terms = checked(tf.constant(["ticket"]), tf.constant(["billet"]))
    >>> find(tf.constant(["Show me your ticket."]), terms)["start"].to_list()
    [[13]]
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
    ends_word = _full(sources, f".*{_WORD}")
    # keras_attn.text.glossary.pattern: the longest first, one follower per run
    order = tf.argsort(-tf.strings.length(sources, unit="UTF8_CHAR"), stable=True)
    ends = tf.gather(ends_word, order)
    before = tf.concat([[False], ends[:-1]], 0)
    after = tf.concat([ends[1:], [False]], 0)
    parts = tf.strings.join([tf.where(ends & ~before, "(?:", ""),
                             _escaped(tf.gather(sources, order)),
                             tf.where(ends & ~after, f")(?:{_NOT_WORD}|$)", "")])
    pattern = tf.strings.join(["(?i)(?:", tf.strings.reduce_join(parts, separator="|"), ")"])
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
    from keras_attn.export.term_placement_graph import apply

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
