"""A glossary's found terms put into translations inside the SavedModel's graph
(TensorFlow-only): the TensorFlow ops of :func:`keras_attn.text.term_placement.apply`, one
hypothesis at a time (:func:`apply`), for :func:`keras_attn.export.glossary_graph.
with_glossary`. Positions are bytes here, characters there; tests/text/test_glossary.py holds
the two equal.

Example:
    >>> terms = glossary_graph.checked(tf.constant(["ticket"]), tf.constant(["billet"]))
    >>> found = glossary_graph.find(tf.constant(["Show me your ticket."]), terms)
    >>> apply(tf.constant(["Show me your ticket."]), found, terms,
    ...       tf.constant(["Montre-moi ton ticket."]), tf.constant(["0-0 1-0 2-1 3-2"]),
    ...       tf.constant([0]))[0].numpy()[0].decode()
    'Montre-moi ton billet.'
"""
import tensorflow as tf

from keras_attn.export import spans_graph
from keras_attn.export.glossary_graph import _NOT_WORD, _WORD, _escaped, _full, _matches


def _occurrences(target, t, ends):
    """The word runs ``(lo, hi)`` int32 of ``t``'s words (``ends``) where ``target``
    stands as a whole word, exact case (:func:`keras_attn.text.glossary.occurrences`)."""
    _, begin, end, _ = _matches(tf.reshape(t, [1]), _escaped(target, spacing=False))
    before = tf.strings.substr(tf.fill(tf.shape(begin), t), tf.zeros_like(begin), begin)
    after = tf.strings.substr(tf.fill(tf.shape(end), t), end,
                              tf.strings.length(t) - end)
    glued = ((_full(target, f"{_WORD}.*") & _full(before, f".*{_WORD}"))
             | (_full(target, f".*{_WORD}") & _full(after, f"{_WORD}.*")))
    begin, end = tf.boolean_mask(begin, ~glued), tf.boolean_mask(end, ~glued)
    return spans_graph._word_at(ends, begin), spans_graph._word_at(ends, end - 1)


def _edge(strings, at_end):
    """The characters that start (``at_end``: end) each string and are neither a letter
    nor a digit."""
    pattern = f"(?s)^.*?({_NOT_WORD}*)$" if at_end else f"(?s)^({_NOT_WORD}*).*$"
    return tf.strings.regex_replace(strings, pattern, r"\1")


def _kept(edge, own, at_end):
    """Bytes of a word's ``edge`` kept around a term: but the source term's ``own`` edge
    where the word's holds it (:func:`keras_attn.text.term_placement._trail`)."""
    size, n = tf.strings.length(edge), tf.strings.length(own)
    part = tf.strings.substr(edge, tf.maximum(size - n, 0) if not at_end else 0, n)
    return size - tf.where((n > 0) & (n <= size) & tf.equal(part, own), n, 0)


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
    """:func:`keras_attn.text.term_placement.apply` of one hypothesis (``row``)."""
    s, t = row["source"], row["translation"]
    start, end, target = row["start"], row["end"], row["target"]
    src_starts, src_ends = spans_graph._words(s)
    starts, ends = spans_graph._words(t)
    n_src, n_tgt = tf.size(src_starts), tf.size(starts)
    i, j = spans_graph._pairs(row["alignment"])
    words = spans_graph._substr(t, starts, ends - starts)
    wordy = _full(words, f".*{_WORD}.*")
    leads, trails = _edge(words, False), _edge(words, True)
    trail = tf.strings.length(trails)
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
        own_lead, own_trail = _edge(row["term"][k], False), _edge(row["term"][k], True)
        lead = _kept(tf.gather(pad(leads, ""), lo), own_lead, False)
        a = tf.where(replace, tf.gather(pad(starts), lo) + lead,
                     tf.where(empty, tf.where(k == 0, 0, size), insert_at))
        b = tf.where(replace, tf.gather(pad(ends), hi)
                     - _kept(tf.gather(pad(trails, ""), hi), own_trail, True),
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
        sentences: strings ``(S,)``. found, terms: :func:`keras_attn.export.glossary_graph.
            find`'s for them and its ``checked`` terms.
        translations, alignments: strings ``(H,)``: the hypotheses and their Pharaoh pairs
            over the whole sentence and translation.
        owner: int32 ``(H,)``, the sentence of each hypothesis.

    Returns:
        ``(translations, alignments)``, strings ``(H,)``.
    """
    rows = {"source": tf.gather(sentences, owner), "translation": translations,
            "alignment": alignments,
            "start": tf.gather(found["start"], owner), "end": tf.gather(found["end"], owner),
            **{side: tf.gather(found["index"], owner).with_flat_values(tf.gather(
                terms[name], tf.gather(found["index"], owner).flat_values))
               for side, name in (("target", "target"), ("term", "source"))}}
    return tf.map_fn(_apply_one, rows, fn_output_signature=(tf.string, tf.string))
