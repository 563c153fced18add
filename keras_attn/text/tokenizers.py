"""In-graph tokenizers (tensorflow-text FastWordpiece) and D2L text normalisation.

One `Tokenizer` class for two vocabularies: a learned WordPiece vocabulary
(`learn_wordpiece_vocab`, Tatoeba) and a character vocabulary (`char_vocab`, the dates task:
its space token `" "` switches the tokenizer to character mode, an exact round trip).

FastWordpiece splits words on punctuation and joins them with single spaces (`j'ai` comes
back as `j ' ai`). Two steps give natural text:

1. `detokenize_tflite` (TFLite-safe ops only) glues an apostrophe or hyphen token to both
   neighbours through their `##` forms (`j ' ai` -> `j'ai`, `a - t - il` -> `a-t-il`).
2. `repair` (`REPAIR_RULES`): quotes, `2:30`, D2L's spacing in numbers, `25%`, `$100`.
   `StaticRegexReplace` runs in TFLite only as a Flex op, so a TFLite export skips it.

References: D2L 10.5 (`_preprocess`); Wu et al. 2016 (WordPiece); Song et al. 2021, "Fast
WordPiece Tokenization".
"""
import re

import tensorflow as tf
import tensorflow_text as tf_text

from keras_attn.core.special_tokens import END, END_ID, PAD, PAD_ID, START, START_ID, UNK, UNK_ID
from keras_attn.text.vocab import (DEFAULT_EXTRA_CHARS, RESERVED_TOKENS, SUFFIX, char_vocab,
                              check_vocab, learn_wordpiece_vocab, load_vocab, save_vocab)

__all__ = ["PAD", "UNK", "START", "END", "PAD_ID", "UNK_ID", "START_ID", "END_ID",
           "RESERVED_TOKENS", "SUFFIX", "DEFAULT_EXTRA_CHARS", "JOIN_TOKENS", "REPAIR_RULES",
           "normalize_text", "normalize_text_tf", "learn_wordpiece_vocab", "char_vocab",
           "save_vocab", "load_vocab", "Tokenizer"]

# Tokens that FastWordpiece splits off as words but that belong inside a word.
JOIN_TOKENS = ("'", "-")

# (RE2 pattern, rewrite) applied in order by `Tokenizer.repair` (word mode only).
REPAIR_RULES = (
    (r'" ([^"]*) "', r'"\1"'),  # paired double quotes hug their content
    (r"(\d) : (\d)", r"\1:\2"),  # 2:30
    (r"(\d) \. (\d)", r"\1 .\2"),  # D2L writes 0 .3 and (French) 10 .000
    (r"(\d) , (\d\d\d)\b", r"\1 ,\2"),  # and 1 ,600
    (r"(\d) %", r"\1%"),
    (r"(\d) \$", r"\1$"),
    (r"\$ (\d)", r"$\1"),
    (r"\b(\w) \. (\w) \.", r"\1 .\2 ."),  # p .m ., u .s . (D2L spacing)
    (r"\b(\w) \. (\w) \.", r"\1 .\2 ."),  # again for f .b .i . (matches overlap)
    (r"\b(\w+s)'(\w\w\w)", r"\1' \2"),  # English plural possessive: parents' house
    (r"(\w)'em\b", r"\1 'em"),  # lick 'em
)

# Characters removed / mapped by `normalize_text` before D2L's steps.
_INVISIBLE = "\u200b\u200c\u200d\u00ad\ufeff"
_QUOTES = "\u2019\u2018"
_PY_SPACES = re.compile(r"\s+")
_PY_PUNCT = re.compile(r"(?<! )([,.!?])")


def normalize_text(text):
    """D2L's preprocessing of a translation line, plus whitespace clean-up.

    Removes zero-width and soft-hyphen characters, maps U+2019 / U+2018 to `'`, turns every
    whitespace run into one space, lower-cases, inserts a space before `, . ! ?` not preceded
    by one (D2L) and strips. The steps beyond D2L's change no BLEU token and make the round
    trip through `Tokenizer` exact.

    Example:
        >>> normalize_text("J’ai faim\u202f! Tom, viens.")
        "j'ai faim ! tom , viens ."
    References: D2L 10.5.1 (`_preprocess`).
    """
    text = text.translate({ord(c): None for c in _INVISIBLE})
    text = text.translate({ord(c): "'" for c in _QUOTES})
    text = _PY_SPACES.sub(" ", text).strip().lower()
    return _PY_PUNCT.sub(r" \1", text).strip()


def normalize_text_tf(strings):
    """Graph version of `normalize_text` (the same on Latin-script text), on a string
    tensor of any shape. Its ops run in TFLite only through Flex: normalise before calling
    a TFLite model.

    Example:
        >>> normalize_text_tf(tf.constant(["Va\u202f!"])).numpy()
        array([b'va !'], dtype=object)
    """
    s = tf.strings.regex_replace(strings, "[" + _INVISIBLE + "]", "")
    s = tf.strings.regex_replace(s, "[" + _QUOTES + "]", "'")
    s = tf.strings.lower(s, encoding="utf-8")
    s = tf.strings.regex_replace(s, r"([,.!?])", r" \1")
    s = tf.strings.regex_replace(s, r"[\s\x0b\x1c-\x1f\x85\p{Z}]+", " ")
    return tf.strings.strip(s)


def kept_ids(ids, vocab_size):
    """Ids (B, T) or ragged -> ``(ids (B, T + 1), keep (B, T + 1))``: ids outside the
    vocabulary read as `[UNK]`; keep is False from the first `[END]` on and at `[PAD]`,
    `[START]`."""
    if isinstance(ids, tf.RaggedTensor):
        ids = ids.to_tensor(default_value=PAD_ID)
    ids = tf.pad(tf.cast(ids, tf.int32), [[0, 0], [0, 1]])  # T + 1 >= 1
    ids = tf.where((ids >= 0) & (ids < vocab_size), ids, UNK_ID)
    ended = tf.cumsum(tf.cast(ids == END_ID, tf.int32), axis=1) > 0
    return ids, tf.logical_not(ended) & (ids != PAD_ID) & (ids != START_ID)


def compact(ids, keep):
    """The kept ids moved to the left (a stable sort by "not kept"), and their counts (B,)."""
    order = tf.argsort(tf.cast(tf.logical_not(keep), tf.int32), axis=1, stable=True)
    return tf.gather(ids, order, batch_dims=1), tf.reduce_sum(tf.cast(keep, tf.int32), axis=1)


def extendable(tokens):
    """``(tokens, lookup)``: a copy of ``tokens`` and ``lookup(token)``, the id of a token,
    appended when new."""
    tokens = list(tokens)
    index = {t: i for i, t in enumerate(tokens)}

    def lookup(token):
        if token not in index:
            index[token] = len(tokens)
            tokens.append(token)
        return index[token]

    return tokens, lookup


class TokenList:
    """The Python side of an in-graph tokenizer: its token list (``_vocab_list``) by id."""

    @property
    def vocab(self):
        """The token list (a copy)."""
        return list(self._vocab_list)

    def id_to_token(self, index):
        """Token string of an int id (Python helper)."""
        return self._vocab_list[int(index)]

    def token_to_id(self, token):
        """Id of a token string (Python helper); raises `KeyError` for unknown tokens."""
        try:
            return self._vocab_list.index(token)
        except ValueError:
            raise KeyError(f"Token not in the vocabulary: {token!r}") from None


class Tokenizer(TokenList, tf.Module):
    """WordPiece or character tokenizer on `tensorflow_text.FastWordpieceTokenizer`.

    `tokenize` adds no reserved id; a word not buildable from the vocabulary becomes `[UNK]`.
    `detokenize` stops at the first `[END]`, drops `[PAD]` and `[START]`, writes `[UNK]` (also
    for an id outside the vocabulary).
    Word mode expects normalised text (`normalize_text`); character mode (a vocabulary with
    `" "`) tokenizes every character, spaces included, as its `##c` id.

    Args:
        vocab: list of tokens; `vocab[:4]` must be the reserved tokens.
        name: module name.
    Attributes:
        vocab: the token list.  vocab_size: `len(vocab)`.  char_level: character mode.
    Example:
        >>> tok = Tokenizer(char_vocab(["2021-03-03"]))
        >>> ids = tok.tokenize(tf.constant(["2021-03-03"]))   # ragged int32 (1, 10)
        >>> tok.detokenize(ids).numpy()
        array([b'2021-03-03'], dtype=object)
    References: Song et al. 2021, "Fast WordPiece Tokenization".
    """

    def __init__(self, vocab, name=None):
        super().__init__(name=name)
        vocab = list(vocab)
        check_vocab(vocab)
        if vocab[: len(RESERVED_TOKENS)] != RESERVED_TOKENS:
            raise ValueError(f"vocab must start with {RESERVED_TOKENS}. "
                             f"Received: vocab[:4]={vocab[:4]}")
        self._vocab_list = vocab
        self.vocab_size = len(vocab)
        self.char_level = " " in vocab
        self._tokenizer = self._wordpiece(vocab, support_detokenization=False)
        # Detokenization vocabulary: vocab + the missing "##t" (suffix) form of every word
        # token t and the missing "t" form of every suffix token "##t".
        extended, lookup = extendable(vocab)
        suffix_of = list(range(len(vocab)))
        prefix_of = list(range(len(vocab)))
        for i, token in enumerate(vocab):
            if i < len(RESERVED_TOKENS) or token == SUFFIX:
                continue
            if token.startswith(SUFFIX):
                prefix_of[i] = lookup(token[len(SUFFIX):])
            else:
                suffix_of[i] = lookup(SUFFIX + token)
        self._detokenizer = self._wordpiece(extended, support_detokenization=True)
        self._suffix_of = tf.constant(suffix_of, tf.int32)
        self._prefix_of = tf.constant(prefix_of, tf.int32)
        self._is_join = tf.constant([(not self.char_level) and t in JOIN_TOKENS for t in vocab],
                                    tf.bool)

    def _wordpiece(self, vocab, support_detokenization):
        # Character mode: the whole input is one "word"; no byte limit, so a long input is
        # tokenized in full and then truncated (instead of becoming a single [UNK]).
        return tf_text.FastWordpieceTokenizer(
            vocab, suffix_indicator=SUFFIX,
            max_bytes_per_word=2**31 - 1 if self.char_level else 100,
            token_out_type=tf.int32, unknown_token=UNK, no_pretokenization=self.char_level,
            support_detokenization=support_detokenization)

    @classmethod
    def from_file(cls, path, name=None):
        """Build a tokenizer from a vocabulary file written by `save_vocab` (`path`; `name`)."""
        return cls(load_vocab(path), name=name)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def tokenize(self, strings):
        """Strings (B,) (normalised text in word mode) -> ragged int32 ids (B, None).

        Example:
            >>> tok.tokenize(tf.constant(["j'ai faim ."]))   # [[j, ', ai, faim, .]]
        """
        ids = self._tokenizer.tokenize(strings)
        if self.char_level:
            ids = ids.with_flat_values(tf.gather(self._suffix_of, ids.flat_values))
        return ids

    @tf.function
    def detokenize_tflite(self, ids):
        """Ids (B, T) or ragged -> strings (B,) with TFLite-runnable ops only (no regex); in
        word mode apostrophe and hyphen tokens are glued to their neighbours.

        Example:
            >>> ids = [[START_ID] + tok.tokenize(tf.constant(["j'ai"]))[0].numpy().tolist()
            ...        + [END_ID, PAD_ID]]
            >>> tok.detokenize_tflite(tf.constant(ids)).numpy()
            array([b"j'ai"], dtype=object)
        """
        ids, keep = kept_ids(ids, self.vocab_size)
        tokens, lengths = compact(ids, keep)  # (B, T + 1), (B,)
        pos = tf.range(tf.shape(tokens)[1])[tf.newaxis, :]  # (1, T)
        as_suffix = tf.gather(self._suffix_of, tokens)
        as_prefix = tf.gather(self._prefix_of, tokens)
        if self.char_level:
            tokens = tf.where(pos == 0, as_prefix, as_suffix)
        else:
            join = tf.gather(self._is_join, tokens) & (pos > 0) & (pos < lengths[:, None] - 1)
            after_join = tf.pad(join[:, :-1], [[0, 0], [1, 0]])
            tokens = tf.where(join | after_join, as_suffix,
                              tf.where(pos == 0, as_prefix, tokens))
        ragged = tf.RaggedTensor.from_tensor(tokens, lengths=lengths)
        return self._detokenizer.detokenize(ragged)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def repair(self, strings):
        """Strings (B,) -> strings (B,) with `REPAIR_RULES` applied; the identity in character mode.

        Example:
            >>> tok.repair(tf.constant(['il a dit " oui " à 2 : 30 .']))
            # [b'il a dit "oui" \xc3\xa0 2:30 .']
        """
        if self.char_level:
            return tf.identity(strings)
        for pattern, rewrite in REPAIR_RULES:
            strings = tf.strings.regex_replace(strings, pattern, rewrite)
        return strings

    @tf.function
    def detokenize(self, ids):
        """Ids (B, T) or ragged -> natural text (B,): `repair(detokenize_tflite(ids))`."""
        return self.repair(self.detokenize_tflite(ids))
