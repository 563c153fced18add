"""Word alignments from the cross-attention, as Pharaoh ``i-j`` pairs (Marian's hard,
word-level ``--alignment``).

Every target token points at the source token it attends to most; subword pieces are merged
into words. Pairs appear once, ordered by ``j`` then ``i``; reserved tokens and spaces belong
to no word. A pair is one int32 code ``j * max_words + i + 1`` (0: none), which graphs write
as text with a lookup table (:func:`pair_strings`).

Example:
    >>> tables = word_tables(translator.src_tokenizer), word_tables(translator.tgt_tokenizer)
    >>> codes = hard_alignment(attention, source, tokens, *tables, max_words=64)
    >>> to_pharaoh(codes[0], 64)
    '0-0 1-1 1-2'
"""
import numpy as np
from keras import ops

from keras_attn.core import special_tokens

SPACE_PIECE = "\u2581"  # SentencePiece's "▁"
_SUFFIX = "##"


def word_tables(tokenizer):
    """Bool numpy arrays ``(V,)`` of a tokenizer's vocabulary: ``starts`` (the token begins a
    word), ``spaces`` and ``reserved`` (``[PAD]``, ``[START]``, ``[END]``), both in no word."""
    vocab = tokenizer.vocab
    size = len(vocab)
    starts, spaces, reserved = (np.zeros(size, bool) for _ in range(3))
    reserved[[special_tokens.PAD_ID, special_tokens.START_ID, special_tokens.END_ID]] = True
    starts[special_tokens.UNK_ID] = True
    sentencepiece = hasattr(tokenizer, "proto")
    for i in range(special_tokens.END_ID + 1, size):  # after the reserved tokens
        token = vocab[i]
        if sentencepiece:
            spaces[i] = token == SPACE_PIECE
            starts[i] = token.startswith(SPACE_PIECE) and not spaces[i]
        elif getattr(tokenizer, "char_level", False):
            body = token[len(_SUFFIX):] if token.startswith(_SUFFIX) and len(token) > 2 else token
            spaces[i] = body.isspace()
        else:
            starts[i] = not token.startswith(_SUFFIX)
    return starts, spaces, reserved


def word_positions(ids, tables):
    """int32 ``(N, L)``: the word of each token of ``ids`` (-1 for reserved tokens and spaces)."""
    starts, spaces, reserved = (ops.convert_to_tensor(t) for t in tables)
    ids = ops.clip(ops.cast(ids, "int32"), 0, ops.shape(starts)[0] - 1)
    real = ops.logical_not(ops.logical_or(ops.take(reserved, ids), ops.take(spaces, ids)))
    # After a space or a reserved token (and at the start), a token begins a word.
    after_gap = ops.logical_not(ops.pad(real[:, :-1], [[0, 0], [1, 0]]))
    begins = ops.logical_and(real, ops.logical_or(ops.take(starts, ids), after_gap))
    word = ops.cumsum(ops.cast(begins, "int32"), axis=1) - 1
    return ops.where(real, word, -1)


def hard_alignment(attention, source, tokens, src_tables, tgt_tables, max_words):
    """Pair codes int32 ``(N, T)`` of each hypothesis (module docstring), 0-padded.

    Args:
        attention: float ``(N, T, S)``, each target token's attention over the source.
        source: int ``(N, S)`` source ids. tokens: int ``(N, T)`` generated ids.
        src_tables, tgt_tables: :func:`word_tables` of the two vocabularies.
        max_words: the most words of a side; later words are left out.
    """
    src_word = word_positions(source, src_tables)  # (N, S)
    tgt_word = word_positions(tokens, tgt_tables)  # (N, T)
    scores = ops.where(ops.expand_dims(src_word, 1) >= 0, ops.cast(attention, "float32"), -1.0)
    _, best = ops.top_k(scores, k=1)  # (N, T, 1): the most attended source token
    i = ops.take_along_axis(src_word, best[..., 0], axis=1)  # (N, T)
    valid = ops.logical_and(ops.logical_and(tgt_word >= 0, i >= 0),
                            ops.logical_and(tgt_word < max_words, i < max_words))
    j_hot = ops.one_hot(ops.where(valid, tgt_word, -1), max_words)  # (N, T, W); -1: zeros
    i_hot = ops.one_hot(ops.where(valid, i, -1), max_words)
    present = ops.matmul(ops.transpose(j_hot, (0, 2, 1)), i_hot) > 0  # (N, W_j, W_i)
    flat = ops.reshape(present, (ops.shape(present)[0], max_words * max_words))
    # The present pairs in (j, i) order: the largest keys are the earliest codes.
    key = ops.where(flat, max_words * max_words - ops.arange(max_words * max_words), 0)
    length = ops.shape(tokens)[1]  # at most one pair per target token
    key = ops.concatenate([key, ops.zeros((ops.shape(key)[0], length), key.dtype)], axis=1)
    top, _ = ops.top_k(ops.cast(key, "float32"), k=length)
    top = ops.cast(top, "int32")
    return ops.where(top > 0, max_words * max_words - top + 1, 0)


def pair_strings(max_words):
    """The text of every code: ``["", "0-0", "1-0", ...]``."""
    return [""] + [f"{c % max_words}-{c // max_words}" for c in range(max_words * max_words)]


def to_pharaoh(codes, max_words):
    """One hypothesis's codes (numpy ``(T,)``) as the Pharaoh string ``"0-0 1-2"``."""
    table = pair_strings(max_words)
    return " ".join(table[int(c)] for c in np.asarray(codes) if c > 0)
