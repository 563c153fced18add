"""A character tokenizer from core TensorFlow ops (TensorFlow-only): a SavedModel that uses
it needs no custom op, so it loads in any TensorFlow process and any TF Serving image.
"""
import tensorflow as tf

from keras_attn.text import tokenizers as text

_INVALID_CODEPOINT = 0x10FFFF


class CoreCharTokenizer(tf.Module):
    """A character-level ``keras_attn.text.tokenizers.Tokenizer`` rebuilt from core TensorFlow
    ops, with the same ids and text: every character becomes its ``##c`` id, a string with an
    unknown character or invalid UTF-8 one ``[UNK]``. One difference: a reserved token or
    ``##`` at the very start of an input is ordinary characters here.

    Args:
        tokenizer: a character-level ``Tokenizer`` (``supports(tokenizer)`` is True).
    """

    def __init__(self, tokenizer, name=None):
        super().__init__(name=name)
        if not self.supports(tokenizer):
            raise ValueError("CoreCharTokenizer needs a character vocabulary from "
                             "keras_attn.text.tokenizers.char_vocab. "
                             "Received a word-level tokenizer")
        vocab = tokenizer.vocab
        index = {t: i for i, t in enumerate(vocab)}
        chars = sorted((t for t in vocab[len(text.RESERVED_TOKENS):]
                        if not t.startswith(text.SUFFIX) and ord(t) != _INVALID_CODEPOINT),
                       key=ord)
        self.vocab_size = len(vocab)
        self._codepoints = tf.constant([ord(c) for c in chars], tf.int32)
        self._char_ids = tf.constant([index[text.SUFFIX + c] for c in chars], tf.int32)
        pieces = [t[len(text.SUFFIX):] if t.startswith(text.SUFFIX) else t for t in vocab]
        pieces[text.PAD_ID] = pieces[text.START_ID] = pieces[text.END_ID] = ""
        pieces[text.UNK_ID] = text.UNK
        self._pieces = tf.constant(pieces, tf.string)
        # A reserved token after the first position starts a new word: a space before it.
        self._spaced = tf.constant([" " + p if i == text.UNK_ID else p
                                    for i, p in enumerate(pieces)], tf.string)

    @staticmethod
    def supports(tokenizer):
        """True for a character vocabulary with both forms (``c`` and ``##c``) of every
        character, as ``keras_attn.text.tokenizers.char_vocab`` writes."""
        vocab = tokenizer.vocab
        if not getattr(tokenizer, "char_level", False):
            return False
        body = vocab[len(text.RESERVED_TOKENS):]
        plain = {t for t in body if not t.startswith(text.SUFFIX)}
        suffixed = {t[len(text.SUFFIX):] for t in body if t.startswith(text.SUFFIX)}
        return (vocab[: len(text.RESERVED_TOKENS)] == text.RESERVED_TOKENS
                and all(len(t) == 1 for t in plain) and plain == suffixed)

    def tokenize(self, strings):
        """Strings ``(B,)`` -> ragged int32 ids ``(B, None)``, as ``Tokenizer.tokenize``."""
        # Invalid UTF-8 decodes to U+10FFFF (a noncharacter, never in the table): unknown.
        cps = tf.strings.unicode_decode(strings, "UTF-8", errors="replace",
                                        replacement_char=_INVALID_CODEPOINT)  # ragged (B, None)
        flat = cps.flat_values
        last = tf.shape(self._codepoints)[0] - 1
        slot = tf.minimum(tf.searchsorted(self._codepoints, flat, out_type=tf.int32), last)
        known = tf.equal(tf.gather(self._codepoints, slot), flat)
        ids = cps.with_flat_values(tf.where(known, tf.gather(self._char_ids, slot), -1))
        unknown = tf.reduce_any(ids < 0, axis=1)  # (B,): the whole string becomes [UNK]
        lengths = tf.where(unknown, 1, tf.cast(ids.row_lengths(), tf.int32))
        dense = ids.to_tensor(default_value=text.PAD_ID)
        dense = tf.pad(dense, [[0, 0], [0, 1]])  # width >= 1 for the [UNK] rows
        first = tf.range(tf.shape(dense)[1])[tf.newaxis, :] == 0
        dense = tf.where(unknown[:, tf.newaxis], tf.where(first, text.UNK_ID, 0), dense)
        return tf.RaggedTensor.from_tensor(dense, lengths=lengths)

    def detokenize(self, ids):
        """Ids ``(B, T)`` -> strings ``(B,)``, as ``Tokenizer.detokenize`` (character mode)."""
        ids = tf.cast(ids, tf.int32)
        ids = tf.where((ids >= 0) & (ids < self.vocab_size), ids, text.UNK_ID)
        ended = tf.cumsum(tf.cast(ids == text.END_ID, tf.int32), axis=1) > 0
        keep = tf.logical_not(ended) & (ids != text.PAD_ID) & (ids != text.START_ID)
        first = tf.equal(tf.cumsum(tf.cast(keep, tf.int32), axis=1), 1)  # first kept token
        pieces = tf.where(first, tf.gather(self._pieces, ids), tf.gather(self._spaced, ids))
        return tf.strings.reduce_join(tf.where(keep, pieces, ""), axis=1)
