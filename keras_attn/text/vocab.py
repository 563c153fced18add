"""Vocabularies for `keras_attn.text.tokenizers.Tokenizer`: learned WordPiece, characters, files.

A vocabulary is a list of tokens whose index is the id; the reserved tokens come first
(`[PAD]`=0, `[UNK]`=1, `[START]`=2, `[END]`=3) and a suffix token (inside a word) starts
with `##`. Files hold one token a line (UTF-8).
"""
import os
import random
import string

from keras_attn.core import runs
from keras_attn.core.special_tokens import END, PAD, START, UNK

RESERVED_TOKENS = [PAD, UNK, START, END]
SUFFIX = "##"

# Characters `char_vocab` adds by default, so any ASCII or French text tokenizes.
DEFAULT_EXTRA_CHARS = (string.ascii_letters + string.digits + string.punctuation + " "
                       + "àâäçéèêëîïôöùûüÿœæÀÂÄÇÉÈÊËÎÏÔÖÙÛÜŸŒÆ")


def learn_wordpiece_vocab(texts, vocab_size=8000, *, reserved_tokens=None, max_texts=None,
                          seed=0, learn_params=None):
    """Learn a WordPiece vocabulary (a list of tokens, the reserved ones first) with
    tensorflow-text's `bert_vocab_from_dataset`.

    Words are split as `Tokenizer` splits them, without lower-casing (normalise first). The
    learner's frequency threshold can make the result smaller than `vocab_size`
    (`learn_params={"lower_thresh": 2}` gets closer). Every character of the text is in it.

    Args:
        texts: iterable of strings.
        vocab_size: maximum vocabulary size, reserved tokens included.
        reserved_tokens: tokens placed first; defaults to `RESERVED_TOKENS`.
        max_texts, seed: learn from a sample of at most this many texts drawn with `seed`.
        learn_params: extra keyword arguments of
            `tensorflow_text.tools.wordpiece_vocab.wordpiece_tokenizer_learner_lib.learn`.
    Example:
        >>> vocab = learn_wordpiece_vocab(["je suis là .", "tu es là ."], vocab_size=100)
        >>> vocab[:5]
        ['[PAD]', '[UNK]', '[START]', '[END]', '.']
    References: Wu et al. 2016, section 4 (wordpiece model).
    """
    from tensorflow_text.tools.wordpiece_vocab import bert_vocab_from_dataset as bvfd

    reserved_tokens = list(RESERVED_TOKENS if reserved_tokens is None else reserved_tokens)
    texts = list(texts)
    if not texts:
        raise ValueError("learn_wordpiece_vocab needs at least one text. Received: texts=[]")
    if vocab_size <= len(reserved_tokens):
        raise ValueError(f"vocab_size must exceed the {len(reserved_tokens)} reserved tokens. "
                         f"Received: vocab_size={vocab_size}")
    if max_texts is not None and len(texts) > max_texts:
        texts = random.Random(seed).sample(texts, max_texts)
    import tensorflow as tf  # training only: reading a vocabulary needs no TensorFlow

    dataset = tf.data.Dataset.from_tensor_slices(tf.constant(texts, tf.string)).batch(4096)
    return bvfd.bert_vocab_from_dataset(
        dataset, vocab_size=vocab_size, reserved_tokens=reserved_tokens,
        bert_tokenizer_params={"lower_case": False}, learn_params=dict(learn_params or {}))


def char_vocab(texts, extra_chars=DEFAULT_EXTRA_CHARS, reserved_tokens=None):
    """A character-level vocabulary: reserved tokens, every character `c` (sorted), every `##c`.

    The space is always in it: that makes `Tokenizer` character-level.

    Args:
        texts: iterable of strings whose characters must be covered (case preserved).
        extra_chars: characters added even if unseen (default: printable ASCII and French).
        reserved_tokens: defaults to `RESERVED_TOKENS`.
    Example:
        >>> char_vocab(["3 mai"], extra_chars="")
        ['[PAD]', '[UNK]', '[START]', '[END]', ' ', '3', 'a', 'i', 'm',
         '## ', '##3', '##a', '##i', '##m']
    """
    reserved_tokens = list(RESERVED_TOKENS if reserved_tokens is None else reserved_tokens)
    chars = set(extra_chars) | {" "}
    for text in texts:
        chars.update(text)
    for bad in ("\n", "\r"):
        if bad in chars:
            raise ValueError("char_vocab cannot store line breaks in a vocabulary file. "
                             f"Received a text containing {bad!r}")
    chars = sorted(chars - set(reserved_tokens))
    return reserved_tokens + chars + [SUFFIX + c for c in chars]


def save_vocab(vocab, path):
    """Write a vocabulary (`vocab`, checked) to `path`, one token a line (UTF-8), atomically."""
    check_vocab(vocab)
    path = os.fspath(path)
    runs.atomic_write_text(path, "".join(token + "\n" for token in vocab))


def load_vocab(path):
    """Read a vocabulary written by `save_vocab` (list of tokens; spaces are kept)."""
    with open(path, encoding="utf-8", newline="") as f:
        text = f.read()
    tokens = text.split("\n")
    if tokens and tokens[-1] == "":
        tokens.pop()
    return [t[:-1] if t.endswith("\r") else t for t in tokens]


def check_vocab(vocab):
    """Raise ValueError for an empty vocabulary, an empty, multi-line or repeated token."""
    if not vocab:
        raise ValueError("A vocabulary needs at least the reserved tokens. Received: []")
    seen = set()
    for i, token in enumerate(vocab):
        if not isinstance(token, str) or token == "" or "\n" in token or "\r" in token:
            raise ValueError(f"Invalid vocabulary token at index {i}. Received: {token!r}")
        if token in seen:
            raise ValueError(f"Duplicate vocabulary token at index {i}. Received: {token!r}")
        seen.add(token)
