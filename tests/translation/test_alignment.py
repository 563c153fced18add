"""keras_attn.translation.alignment: subword pieces merged into words, hard word alignments as Pharaoh
pairs, checked against a plain-Python reference written here."""
import types

import numpy as np
import pytest

from keras_attn.translation import alignment

PAD, UNK, START, END = 0, 1, 2, 3
RESERVED = ["[PAD]", "[UNK]", "[START]", "[END]"]


def sentencepiece(pieces):
    return types.SimpleNamespace(vocab=RESERVED + pieces, proto=b"", char_level=False)


def wordpiece(tokens):
    return types.SimpleNamespace(vocab=RESERVED + tokens, char_level=False)


def characters(chars):
    return types.SimpleNamespace(vocab=RESERVED + chars + ["##" + c for c in chars],
                                 char_level=True)


def reference_words(tokens, vocab, kind):
    """The word of each token by reading the pieces as text."""
    words, current = [], -1
    previous_space = True
    for t in tokens:
        piece = vocab[t]
        if t in (PAD, START, END):
            words.append(-1)
            previous_space = True
            continue
        if kind == "sentencepiece":
            space = piece == "\u2581"
            begins = piece.startswith("\u2581") or previous_space or current < 0
        elif kind == "characters":
            space = piece.replace("##", "", 1).isspace() if piece != "##" else False
            begins = previous_space or current < 0
        else:
            space = False
            begins = not piece.startswith("##") or current < 0
        if space:
            words.append(-1)
            previous_space = True
            continue
        if begins or t == UNK:
            current += 1
        words.append(current)
        previous_space = False
    return words


def reference_pairs(attention, source_words, target_words, max_words):
    """Marian-style hard alignment: each target token's most attended source token."""
    pairs = set()
    for t, j in enumerate(target_words):
        if j < 0:
            continue
        scores = [a if w >= 0 else -1.0 for a, w in zip(attention[t], source_words)]
        i = source_words[int(np.argmax(scores))]
        if 0 <= i < max_words and j < max_words:
            pairs.add((j, i))
    return " ".join(f"{i}-{j}" for j, i in sorted(pairs))


SP = sentencepiece(["\u2581I", "'m", "\u2581hungry", ".", "\u2581", "\u2581J", "'ai",
                    "\u2581faim", "\u2581Tom"])
CHARS = characters(list("0123456789- abc"))
WP = wordpiece(["i", "am", "hun", "##gry", ".", "##s"])


@pytest.mark.parametrize("tokenizer, kind, ids", [
    (SP, "sentencepiece", [4, 5, 6, 7, 3, 0]),            # ▁I 'm ▁hungry . [END]
    (SP, "sentencepiece", [5, 8, 9, 12, 4, 3]),           # ' m ▁ ▁Tom ... (starts mid-word)
    (SP, "sentencepiece", [8, 5, 12, 6, 3, 0]),           # ▁ then a piece without ▁
    (CHARS, "characters", [19, 15, 30, 30, 16, 3]),      # characters with a space between
    (CHARS, "characters", [30, 30, 19, 20, 30, 21, 3]),  # leading spaces
    (WP, "wordpiece", [4, 6, 7, 8, 1, 3]),                # i hun ##gry . [UNK] [END]
    (WP, "wordpiece", [7, 9, 4, 3, 0, 0]),                # a sentence starting with ##
])
def test_word_positions_match_reading_the_pieces(tokenizer, kind, ids):
    tables = alignment.word_tables(tokenizer)
    got = np.asarray(alignment.word_positions(np.array([ids]), tables))[0].tolist()
    assert got == reference_words(ids, tokenizer.vocab, kind)


def test_word_tables_of_each_kind():
    starts, spaces, reserved = alignment.word_tables(SP)
    assert reserved[[PAD, START, END]].all() and not reserved[UNK] and starts[UNK]
    assert starts[4] and not starts[5] and spaces[8] and not starts[8]
    starts, spaces, _ = alignment.word_tables(CHARS)
    assert not starts[4:].any() and spaces[CHARS.vocab.index(" ")]
    assert spaces[CHARS.vocab.index("## ")]
    starts, spaces, _ = alignment.word_tables(WP)
    assert starts[4] and not starts[7] and not spaces.any()


def test_hard_alignment_matches_the_reference_on_random_attention():
    rng = np.random.default_rng(0)
    src_tables, tgt_tables = alignment.word_tables(SP), alignment.word_tables(CHARS)
    n, s, t, max_words = 16, 7, 9, 8
    source = rng.integers(0, len(SP.vocab), (n, s))
    tokens = rng.integers(0, len(CHARS.vocab), (n, t))
    attention = rng.random((n, t, s)).astype("float32")
    codes = np.asarray(alignment.hard_alignment(attention, source, tokens, src_tables,
                                                tgt_tables, max_words))
    assert codes.shape == (n, t)
    for row in range(n):
        src_words = reference_words(source[row].tolist(), SP.vocab, "sentencepiece")
        tgt_words = reference_words(tokens[row].tolist(), CHARS.vocab, "characters")
        assert alignment.to_pharaoh(codes[row], max_words) == reference_pairs(
            attention[row], src_words, tgt_words, max_words), row
        assert (np.diff(codes[row][codes[row] > 0]) > 0).all()  # in order, each pair once


def test_a_worked_example():
    # "▁I 'm ▁hungry ." -> "▁J 'ai ▁faim .": I'm -> J'ai, hungry -> faim, "." -> ".".
    source = np.array([[4, 5, 6, 7, 3]])
    tokens = np.array([[9, 10, 11, 7, 3, 0]])
    attention = np.zeros((1, 6, 5), "float32")
    for t, s in enumerate([0, 1, 2, 3, 4, 4]):
        attention[0, t, s] = 1.0
    codes = alignment.hard_alignment(attention, source, tokens, alignment.word_tables(SP),
                                     alignment.word_tables(SP), 64)
    # words: source I'm(0) hungry.(1); target J'ai(0) faim.(1): the "." glues to the word
    # before it, as SentencePiece wrote it without a space.
    assert alignment.to_pharaoh(np.asarray(codes)[0], 64) == "0-0 1-1"


def test_words_beyond_max_words_are_left_out():
    source = np.array([[4, 4, 4, 4, 3]])  # four words
    tokens = np.array([[4, 4, 4, 4, 3]])
    attention = np.tile(np.eye(5, dtype="float32")[None], (1, 1, 1))
    codes = np.asarray(alignment.hard_alignment(attention, source, tokens,
                                                alignment.word_tables(SP),
                                                alignment.word_tables(SP), 2))
    assert alignment.to_pharaoh(codes[0], 2) == "0-0 1-1"


def test_pair_strings():
    table = alignment.pair_strings(3)
    assert table[0] == "" and table[1] == "0-0" and table[2] == "1-0" and table[4] == "0-1"
    assert len(table) == 10
