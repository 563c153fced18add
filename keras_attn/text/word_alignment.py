"""Word alignments from attention rows in plain Python, for a runtime that gets the
cross-attention out of a file (the builtin TFLite step's ``attention``): the Pharaoh pairs
:func:`keras_attn.translation.alignment.hard_alignment` computes in a graph. The web
export's JavaScript (``tokenizers.js``: ``wordIds``) is the third runtime of the rule.

Example:
    >>> flags = word_flags(["[PAD]", "[UNK]", "[START]", "[END]", "\\u2581a", "b"])
    >>> word_positions([4, 5, 4, 3], flags)
    [0, 0, 1, -1]
    >>> pharaoh([0, 1, -1], [0, 0, -1], [[0.9, 0.1, 0.0], [0.2, 0.8, 0.0]])
    '0-0 1-0'
"""
from keras_attn.core.special_tokens import END_ID, PAD_ID, START_ID, UNK_ID

SPACE_PIECE = "\u2581"  # SentencePiece's "▁"
_SUFFIX = "##"


def word_flags(vocab, kind="sentencepiece"):
    """Per id ``(starts, space, reserved)`` (:func:`keras_attn.translation.alignment.
    word_tables`): ``kind`` ``"sentencepiece"``, ``"characters"`` or ``"wordpiece"``."""
    flags = []
    for i, token in enumerate(vocab):
        if i <= END_ID:
            flags.append((i == UNK_ID, False, i in (PAD_ID, START_ID, END_ID)))
        elif kind == "sentencepiece":
            space = token == SPACE_PIECE
            flags.append((token.startswith(SPACE_PIECE) and not space, space, False))
        elif kind == "characters":
            body = token[2:] if token.startswith(_SUFFIX) and len(token) > 2 else token
            flags.append((False, body.isspace(), False))
        else:
            flags.append((not token.startswith(_SUFFIX), False, False))
    return flags


def word_positions(ids, flags):
    """The word of each token of ``ids`` (-1: a reserved token or a space); after a space,
    a reserved token or at the start, a token begins a word."""
    words, word, gap = [], -1, True
    for i in ids:
        starts, space, reserved = flags[min(max(int(i), 0), len(flags) - 1)]
        if reserved or space:
            words.append(-1)
            gap = True
            continue
        if starts or gap:
            word += 1
        words.append(word)
        gap = False
    return words


def pharaoh(src_words, tgt_words, attention):
    """Pharaoh ``i-j`` pairs, ordered by ``j`` then ``i``: each target token's word with
    the word of the source token it attends to most (the first of equals).

    Args:
        src_words, tgt_words: :func:`word_positions` of the source and the target tokens.
        attention: per target token a row over the source tokens.
    """
    pairs = set()
    for t, row in enumerate(list(attention)[: len(tgt_words)]):
        scores = [float(a) if s < len(src_words) and src_words[s] >= 0 else -1.0
                  for s, a in enumerate(row)]
        best = max(range(len(scores)), key=scores.__getitem__) if scores else -1
        if tgt_words[t] >= 0 and 0 <= best < len(src_words) and src_words[best] >= 0:
            pairs.add((src_words[best], tgt_words[t]))
    return " ".join(f"{i}-{j}" for i, j in sorted(pairs, key=lambda p: (p[1], p[0])))
