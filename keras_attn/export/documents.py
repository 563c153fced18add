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
        texts: string Tensor ``(B,)`` (UTF-8), or a list of str / bytes.

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
