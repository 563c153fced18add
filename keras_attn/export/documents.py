"""TensorFlow only: the document split of :mod:`keras_attn.text.documents` inside a graph.

The same rules (:data:`keras_attn.text.documents.RULES`) run with
``tf.strings.regex_replace``: :func:`split_tensor` gives, for texts ``(B,)``, ragged
sentences and separators equal to :func:`keras_attn.text.documents.split`'s. A SavedModel
splits before the tokenizer, decodes every sentence of a request as one batch and joins
back (:func:`translate_documents_tensor`).

TFLite has no regex kernel (docs/documents.md): an app splits before the file and joins
after (``keras_attn.export.runtime``), and the file flags any text that may not be one bare
sentence with :func:`needs_split_tensor` (builtins and tensorflow-text's ``ByteSplit``).
"""
import functools
import re

import tensorflow as tf

from keras_attn.text import documents


def _replace_all(texts, rules):
    for _, pattern, replacement in rules:
        texts = tf.strings.regex_replace(texts, pattern, replacement, replace_global=True)
    return texts


def split_tensor(texts):
    """Split a batch of texts into sentences, keeping the whitespace around them.

    Args:
        texts: string Tensor ``(B,)`` (UTF-8; invalid bytes read as U+FFFD), or a list of
            str / bytes.

    Returns:
        ``(sentences, separators)``: string RaggedTensors ``(B, None)`` and ``(B, None)``,
        row ``i`` holding ``N_i`` sentences and ``N_i + 1`` separators, equal to
        ``keras_attn.text.documents.split(texts[i])``.

    Raises:
        ValueError: ``texts`` is not a string tensor of rank 1.

    Example:
        >>> sentences, separators = split_tensor(["Hi. Bye.", ""])
        >>> sentences.to_list()
        [[b'Hi.', b'Bye.'], []]
        >>> separators.to_list()
        [[b'', b' ', b''], [b'']]
    """
    texts = tf.convert_to_tensor(texts)
    if texts.dtype != tf.string or texts.shape.rank != 1:
        raise ValueError("`texts` must be a string tensor of shape (B,). Received: "
                         f"texts with dtype {texts.dtype.name} and shape {texts.shape}")
    # The rules are Unicode patterns: bytes that are not UTF-8 read as U+FFFD first.
    texts = tf.strings.unicode_transcode(texts, "UTF-8", "UTF-8", errors="replace")
    # keras_attn.text.documents.mark, then a cut at every boundary it marked.
    texts = tf.strings.join([documents.BEGIN, _replace_all(texts, documents.ESCAPE_RULES),
                             documents.END])
    pieces = tf.strings.split(_replace_all(texts, documents.RULES),
                              documents.BOUNDARY)  # (B, 2 N_i + 1)
    pieces = pieces.with_flat_values(_replace_all(pieces.flat_values,
                                                  documents.RESTORE_RULES))
    return pieces[:, 1::2], pieces[:, 0::2]


def join_tensor(sentences, separators):
    """Rebuild documents ``(B,)``: :func:`keras_attn.text.documents.join` of each row of
    string RaggedTensors ``sentences`` (``N_i`` per row) and ``separators`` (``N_i + 1``)."""
    # Pad each row of sentences with one "" so both have N_i + 1 items, interleave, join.
    batch = sentences.nrows()
    padded = tf.concat([sentences, tf.RaggedTensor.from_row_lengths(
        tf.fill([batch], ""), tf.ones([batch], tf.int64))], axis=1)
    tf.debugging.assert_equal(
        padded.row_lengths(), separators.row_lengths(),
        message="separators must hold one more item per row than sentences")
    pairs = tf.stack([separators, padded], axis=2)  # (B, N_i + 1, 2)
    return tf.strings.reduce_join(tf.strings.reduce_join(pairs, axis=2), axis=1)


def translate_documents_tensor(texts, translate_sentences):
    """A served graph's documents: texts ``(B,)`` split, their sentences (a RaggedTensor
    ``(B, None)``) translated in one batch by ``translate_sentences`` (``-> {output name:
    per-sentence tensor}``), each output joined back per text (:func:`join_documents_tensor`).
    """
    sentences, separators = split_tensor(texts)
    return join_documents_tensor(translate_sentences(sentences), sentences, separators)


def join_documents_tensor(outputs, sentences, separators):
    """:func:`keras_attn.translation.pipeline.join_documents`'s rule in a graph: outputs
    ``{name: (S,) or (S, N)}``, one row per sentence of :func:`split_tensor`'s
    ``sentences``, -> ``{name: (B,) or (B, N)}``."""
    from keras_attn.translation.pipeline import ALIGNMENT_SEPARATOR

    out = {}
    for name, value in outputs.items():
        rows = sentences.with_flat_values(value)  # (B, None) or (B, None, N)
        if name == "translation":
            out[name] = join_tensor(rows, separators)
        elif name in ("translations", "alignments"):
            out[name] = join_nbest(value, sentences.row_splits, separators
                                   if name == "translations" else ALIGNMENT_SEPARATOR)
        elif name in ("confidence", "confidences"):  # the lowest, 1.0 for no sentence
            out[name] = tf.minimum(tf.reduce_min(rows, axis=1), 1.0)
        else:  # score(s) summed, truncated if any sentence was
            reduce = tf.reduce_any if value.dtype == tf.bool else tf.reduce_sum
            out[name] = reduce(rows, axis=1)
    return out


def join_nbest(translations, row_splits, separators):
    """Join n-best lists ``(S, N)`` into ``(B, N)``: hypothesis ``j`` of text ``b`` is
    hypothesis ``j`` of each of its sentences, joined with its separators.

    Args:
        translations: string ``(S, N)``, every text's sentences in order.
        row_splits: int ``(B + 1,)`` (:func:`split_tensor`'s ``sentences.row_splits``).
        separators: :func:`split_tensor`'s, or one Python str put between sentences
            (nothing around).
    """
    row_splits = tf.cast(row_splits, tf.int64)
    counts = row_splits[1:] - row_splits[:-1]  # (B,)
    n = tf.shape(translations, out_type=tf.int64)[1]
    batch = tf.shape(counts, out_type=tf.int64)[0]
    first_and_last_empty = isinstance(separators, str)
    seps = separators
    if first_and_last_empty:
        seps = tf.RaggedTensor.from_row_lengths(
            tf.fill([tf.reduce_sum(counts + 1)], separators), counts + 1)
    pieces_per = 2 * counts + 1  # separator, sentence, separator, ..., separator
    lengths = tf.repeat(pieces_per, n)  # (B * N,): text b's hypothesis j
    positions = tf.ragged.range(lengths)
    p = positions.flat_values
    owner = positions.value_rowids()  # b * N + j
    b, j = owner // n, owner % n
    sep_index = tf.gather(seps.row_splits, b) + p // 2
    sentence_row = tf.gather(row_splits, b) + (p - 1) // 2
    # One "" after the sentences: what an even (separator) position reads, harmlessly.
    flat_translations = tf.concat([tf.reshape(translations, [-1]), [""]], axis=0)
    pad = tf.size(flat_translations, out_type=tf.int64) - 1
    sentence_index = tf.maximum(sentence_row, 0) * n + j
    sep_piece = tf.gather(seps.flat_values, sep_index)
    if first_and_last_empty:
        sep_piece = tf.where((p == 0) | (p == 2 * tf.gather(counts, b)), "", sep_piece)
    odd = p % 2 == 1
    piece = tf.where(odd, tf.gather(flat_translations, tf.where(odd, sentence_index, pad)),
                     sep_piece)
    joined = tf.strings.reduce_join(tf.RaggedTensor.from_row_lengths(piece, lengths), axis=1)
    return tf.reshape(joined, tf.stack([batch, n]))


# --- TFLite: "is this text one bare sentence?" from its bytes --------------------------------
# Every boundary that documents.RULES insert between two sentences sits at one of these
# places, each with a non-whitespace character somewhere before and after it:
#   - a line boundary (NL);
#   - a whitespace character after a stop and closing marks ([STOP][CLOSE]* then WS: the
#     stop rule, the initials, the spaced ellipsis, a numbered item "2. " or "2.) "),
#     unless only horizontal whitespace and then a lower-case letter follow (the stop rule's
#     exception; the other rules need an upper-case letter there);
#   - a whitespace character after "<digit>)" (an item "2) " in a line);
#   - a bullet after whitespace.
# A text with none of them, content, no whitespace at either end and valid UTF-8 is one
# sentence. Beyond _CLOSE_RUN closing marks back or _SPACE_RUN spaces ahead the answer is
# "needs a split": it may flag a whole sentence ("Mr. Smith left."), never miss a split.
_CLOSE_RUN = 4
_SPACE_RUN = 4


@functools.lru_cache(maxsize=None)
def utf8_members(char_class):
    """The UTF-8 encodings of the characters in a class of :mod:`keras_attn.text.documents`
    (the body of a ``[...]``), as tuples of byte values, shortest first. The classes hold
    Basic Multilingual Plane characters only (checked)."""
    pattern = re.compile(f"[{char_class}]")
    members = [chr(c) for c in range(0x10000) if not 0xD800 <= c < 0xE000
               and pattern.fullmatch(chr(c))]
    if pattern.fullmatch("\U0010FFFF") or pattern.fullmatch("\U0001F600"):
        raise ValueError(f"a class beyond the BMP: {char_class!r}")
    return tuple(sorted((tuple(m.encode("utf-8")) for m in members), key=len))


def _shifted(x, k, fill):
    """``y[:, p] = x[:, p + k]`` (``fill`` outside), for ``x`` ``(B, L)`` and any int k."""
    length = tf.shape(x)[1]
    pad = tf.fill(tf.stack([tf.shape(x)[0], abs(k)]), tf.cast(fill, x.dtype))
    if k >= 0:
        return tf.concat([x, pad], axis=1)[:, k:k + length]
    return tf.concat([pad, x], axis=1)[:, :length]


def _starts(x, char_class):
    """bool ``(B, L)`` where a character of ``char_class`` starts, int32 ``(B, L)`` its
    length in bytes there (0 elsewhere)."""
    length = tf.zeros_like(x)
    for member in utf8_members(char_class):
        hit = tf.equal(x, member[0])
        for i, byte in enumerate(member[1:], 1):
            hit &= tf.equal(_shifted(x, i, -1), byte)
        length = tf.where(hit, len(member), length)  # no member is a prefix of another
    return length > 0, length


def _ends(starts, lengths):
    """bool ``(B, L)`` where a character that starts at ``starts`` ends, and its length."""
    ends, end_length = tf.zeros_like(starts), tf.zeros_like(lengths)
    for n in range(1, 4):
        hit = _shifted(starts & tf.equal(lengths, n), -(n - 1), False)
        ends |= hit
        end_length = tf.where(hit, n, end_length)
    return ends, end_length


def _covered(starts, lengths):
    """bool ``(B, L)``: the byte belongs to a character that starts at ``starts``."""
    covered = starts
    for k in (1, 2):
        covered |= _shifted(starts & (lengths > k), -k, False)
    return covered


def _at(x, q):
    """``x[b, q[b, p]]``, False / 0 where ``q`` is outside ``[0, L)``."""
    inside = (q >= 0) & (q < tf.shape(x)[1])
    got = tf.gather(x, tf.clip_by_value(q, 0, tf.shape(x)[1] - 1), batch_dims=1)
    return tf.where(inside, got, tf.zeros_like(got))


def _valid_utf8(x, valid):
    """bool ``(B,)``: every byte of the row belongs to a well-formed UTF-8 character (no
    overlong form, surrogate or code point above U+10FFFF)."""
    cont = (x >= 0x80) & (x < 0xC0)
    # Continuation bytes each lead byte needs; -1: a continuation or a byte that never leads.
    need = tf.where(x < 0x80, 0, tf.where((x >= 0xC2) & (x < 0xE0), 1, tf.where(
        (x >= 0xE0) & (x < 0xF0), 2, tf.where((x >= 0xF0) & (x < 0xF5), 3, -1))))
    lead = valid & (need >= 0)
    bad = valid & ~cont & (need < 0)
    claimed = tf.zeros_like(valid)
    for k in (1, 2, 3):
        wants = lead & (need >= k)
        bad |= wants & ~_shifted(cont, k, False)
        claimed |= _shifted(wants, -k, False)
    bad |= valid & cont & ~claimed
    # The second byte's range after E0, ED, F0 and F4: no overlong form, no surrogate, nothing
    # above U+10FFFF.
    second = _shifted(x, 1, -1)
    for byte, low, high in ((0xE0, 0xA0, 0xBF), (0xED, 0x80, 0x9F), (0xF0, 0x90, 0xBF),
                            (0xF4, 0x80, 0x8F)):
        bad |= tf.equal(x, byte) & ((second < low) | (second > high))
    return ~tf.reduce_any(bad, axis=1)


def needs_split_tensor(texts):
    """bool ``(B,)``: False only where the text is exactly one sentence by the rules of
    :mod:`keras_attn.text.documents`, with no whitespace at either end, in valid UTF-8.
    Sound, not exact ("Mr. Smith left." is flagged too). Runs in a TFLite file (no regex).

    Args:
        texts: string Tensor ``(B,)``.

    Example:
        >>> needs_split_tensor(["I quit.", "I wasn't fired. I quit.", " I quit."]).numpy()
        array([False,  True,  True])
    """
    import tensorflow_text as tf_text

    texts = tf.convert_to_tensor(texts, tf.string)
    pieces = tf_text.ByteSplitter().split(texts)
    x = tf.cast(pieces, tf.int32).to_tensor(default_value=-1)  # (B, L), -1 after the text
    x = tf.pad(x, [[0, 0], [0, 1]], constant_values=-1)  # L >= 1 even for empty texts
    valid = x >= 0
    ws, ws_len = _starts(x, documents.WS)
    nl, _ = _starts(x, documents.NL)
    hws, hws_len = _starts(x, documents.HWS)
    lower, _ = _starts(x, documents.LOWER)
    bullet, _ = _starts(x, documents.BULLET)
    stop_end, _ = _ends(*_starts(x, documents.STOP))
    close_end, close_len = _ends(*_starts(x, documents.CLOSE))
    space = _covered(ws, ws_len)
    content = valid & ~space
    count = tf.cast(content, tf.int32)
    before = tf.cumsum(count, axis=1, exclusive=True) > 0
    after = tf.cumsum(count, axis=1, reverse=True) > 0

    position = tf.range(tf.shape(x)[1])[tf.newaxis, :] + tf.zeros_like(x)
    # Back from each byte over closing marks to a stop (giving up after _CLOSE_RUN marks).
    q, alive, stop = position - 1, tf.ones_like(valid), tf.zeros_like(valid)
    for _ in range(_CLOSE_RUN):
        stop |= alive & _at(stop_end, q)
        alive &= _at(close_end, q)
        q = q - _at(close_len, q)
    stop |= alive
    # Ahead over horizontal whitespace to a lower-case letter (giving up after _SPACE_RUN).
    q, alive, lower_next = position, tf.ones_like(valid), tf.zeros_like(valid)
    for i in range(_SPACE_RUN + 1):
        if i:
            lower_next |= alive & _at(lower, q)
        alive &= _at(hws, q)
        q = q + _at(hws_len, q)
    digit = (x >= 0x30) & (x <= 0x39)
    item = tf.equal(_shifted(x, -1, -1), 0x29) & _shifted(digit, -2, False)
    site = (nl | (ws & ((stop & ~lower_next) | item))) | (bullet & _shifted(space, -1, False))
    inside = tf.reduce_any(site & (before & after), axis=1)
    lengths = tf.cast(pieces.row_lengths(), tf.int32)
    edges = space[:, 0] | _at(space, (lengths - 1)[:, None])[:, 0]
    has_content = tf.reduce_any(content, axis=1)
    return (inside | edges) | (~has_content | ~_valid_utf8(x, valid))
