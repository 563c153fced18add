"""TensorFlow only: the document split of :mod:`keras_attn.documents` inside a graph.

The same rule list (:data:`keras_attn.documents.RULES`, in the common subset of Python's
``re`` and RE2) runs with ``tf.strings.regex_replace``; ``tf.strings.split`` at the boundary
marker then gives, for a batch of texts ``(B,)``, a RaggedTensor of sentences and one of
separators equal to what :func:`keras_attn.documents.split` returns for each text
(``tests/test_documents.py`` checks it on every test case and on generated text).

For a SavedModel: :func:`split_tensor` before the tokenizer, decode
``sentences.flat_values`` (every sentence of the request, one batch), then
``sentences.with_flat_values(translations)`` and :func:`join_tensor`.

TFLite: the regex ops (``StaticRegexReplace``, or ``RegexReplace`` for a pattern that is
a tensor) are TensorFlow ops with no TFLite builtin or tensorflow-text kernel; a TFLite file
cannot run this split (docs/documents.md has the converter's and the interpreter's
errors). A TFLite app splits with the Python rules instead:
``keras_attn.export.runtime.split_for_tflite`` / ``join_from_tflite``.
"""
import tensorflow as tf

from keras_attn import documents


def _replace_all(texts, rules):
    for _, pattern, replacement in rules:
        texts = tf.strings.regex_replace(texts, pattern, replacement, replace_global=True)
    return texts


def mark_tensor(texts):
    """:func:`keras_attn.documents.mark` for a batch: string ``(B,)`` -> string ``(B,)``."""
    texts = _replace_all(texts, documents.ESCAPE_RULES)
    texts = tf.strings.join([documents.BEGIN, texts, documents.END])
    return _replace_all(texts, documents.RULES)


def split_tensor(texts):
    """Split a batch of texts into sentences, keeping the whitespace around them.

    Args:
        texts: string Tensor ``(B,)`` (UTF-8; invalid bytes read as U+FFFD), or a list of
            str / bytes.

    Returns:
        ``(sentences, separators)``: string RaggedTensors ``(B, None)`` and ``(B, None)``,
        row ``i`` holding ``N_i`` sentences and ``N_i + 1`` separators, equal to
        ``keras_attn.documents.split(texts[i])``.

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
    # The rules are Unicode patterns: bytes that are not UTF-8 read as U+FFFD first (as
    # keras_attn.export.runtime.split_for_tflite decodes them).
    texts = tf.strings.unicode_transcode(texts, "UTF-8", "UTF-8", errors="replace")
    pieces = tf.strings.split(mark_tensor(texts), documents.BOUNDARY)  # (B, 2 N_i + 1)
    pieces = pieces.with_flat_values(_replace_all(pieces.flat_values,
                                                  documents.RESTORE_RULES))
    return pieces[:, 1::2], pieces[:, 0::2]


def join_tensor(sentences, separators):
    """Rebuild documents: :func:`keras_attn.documents.join` for each row.

    Args:
        sentences: string RaggedTensor ``(B, None)`` (translations, ``N_i`` per row).
        separators: string RaggedTensor ``(B, None)``, ``N_i + 1`` per row (from
            :func:`split_tensor`).

    Returns:
        string Tensor ``(B,)``.
    """
    # Pad each row of sentences with one "" so both have N_i + 1 items, interleave, join.
    batch = sentences.nrows()
    padded = tf.concat([sentences, tf.RaggedTensor.from_row_lengths(
        tf.fill([batch], ""), tf.ones([batch], tf.int64))], axis=1)
    tf.debugging.assert_equal(
        padded.row_lengths(), separators.row_lengths(),
        message="separators must hold one more item per row than sentences")
    pairs = tf.stack([separators, padded], axis=2)  # (B, N_i + 1, 2)
    return tf.strings.reduce_join(tf.strings.reduce_join(pairs, axis=2), axis=1)


def join_nbest(translations, row_splits, separators):
    """Join n-best lists sentence by sentence: hypothesis ``j`` of text ``b`` is
    hypothesis ``j`` of each of its sentences, joined with its separators.

    Args:
        translations: string ``(S, N)``, every text's sentences in order.
        row_splits: int ``(B + 1,)``, the texts' sentences (``sentences.row_splits`` of
            :func:`split_tensor`).
        separators: string RaggedTensor ``(B, None)`` (``N_b + 1`` per text, from
            :func:`split_tensor`), or one Python str put between sentences (nothing around).

    Returns:
        string ``(B, N)``.
    """
    row_splits = tf.cast(row_splits, tf.int64)
    counts = row_splits[1:] - row_splits[:-1]  # (B,)
    n = tf.shape(translations, out_type=tf.int64)[1]
    batch = tf.shape(counts, out_type=tf.int64)[0]
    if isinstance(separators, str):
        seps = tf.RaggedTensor.from_row_lengths(
            tf.fill([tf.reduce_sum(counts + 1)], separators), counts + 1)
        first_and_last_empty = True
    else:
        seps = separators
        first_and_last_empty = False
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
    sep_values = seps.flat_values
    if first_and_last_empty:
        last = p == 2 * tf.gather(counts, b)
        sep_piece = tf.where((p == 0) | last, "", tf.gather(sep_values, sep_index))
    else:
        sep_piece = tf.gather(sep_values, sep_index)
    odd = p % 2 == 1
    piece = tf.where(odd, tf.gather(flat_translations, tf.where(odd, sentence_index, pad)),
                     sep_piece)
    joined = tf.strings.reduce_join(tf.RaggedTensor.from_row_lengths(piece, lengths), axis=1)
    return tf.reshape(joined, tf.stack([batch, n]))


def lowest(values):
    """float32 ``(B,)``: each row's lowest value of ragged ``(B, None)`` ``values``, 1.0 for a
    row without any (a text of no sentence: nothing to get wrong); the confidence of a
    document. ``(B, None, N)`` -> ``(B, N)`` alike."""
    return tf.minimum(tf.reduce_min(values, axis=1), 1.0)
