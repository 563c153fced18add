"""The in-graph tokenizers' ids and texts in plain Python, for an engine without TensorFlow
(CTranslate2); ``tests/translation/test_translation.py`` holds them equal.

:class:`PieceTokenizer` (a SentencePiece model, through ``sentencepiece``) and
:class:`CharTokenizer` (a character vocabulary) have ``vocab``, ``char_level``,
``tokenize(texts)`` and ``detokenize(rows)`` with the in-graph tokenizers' meaning. A
WordPiece vocabulary has no Python twin (:func:`load`: None).

Example:
    >>> tok = load("runs/fra/src.model")
    >>> tok.detokenize(tok.tokenize(["Merci !"]))
    ['Merci !']
"""
from keras_attn.core.special_tokens import END_ID, PAD_ID, START_ID, UNK, UNK_ID
from keras_attn.text.vocab import SUFFIX, load_vocab

SPACE = "\u2581"  # how SentencePiece writes a space inside a piece
RESERVED = 4  # [PAD], [UNK], [START], [END]


def _words(pieces):
    """FastWordpiece's join: a ``##`` piece glued to the word before, words joined by a space."""
    words = []
    for piece in pieces:
        if piece.startswith(SUFFIX) and words:
            words[-1] += piece[len(SUFFIX):]
        else:
            words.append(piece)
    return " ".join(words)


def _kept(row, vocab_size):
    """``(id, previous id)`` up to the first ``[END]``, unknown ids as ``[UNK]``, no PAD/START."""
    previous = None
    for i in row:
        i = int(i) if 0 <= int(i) < vocab_size else UNK_ID
        if i == END_ID:
            return
        if i not in (PAD_ID, START_ID):
            yield i, previous
        previous = i


class PieceTokenizer:
    """A SentencePiece model through the ``sentencepiece`` library.

    Args:
        model: the serialized model (``learn_sentencepiece``'s), pad/unk/bos/eos ids 0/1/2/3.
    """

    char_level = False

    def __init__(self, model):
        import sentencepiece as spm

        self._processor = spm.SentencePieceProcessor(model_proto=bytes(model))
        self.vocab = [self._processor.id_to_piece(i)
                      for i in range(self._processor.get_piece_size())]
        self._space_id = self.vocab.index(SPACE) if SPACE in self.vocab else -1

    def tokenize(self, texts):
        # One call per text: given a list, sentencepiece starts a thread pool per call.
        encode = self._processor.encode
        return [encode(text) for text in texts]

    def _form(self, i, word_start):
        """A piece as FastWordpiece reads it: ``▁w`` the word ``w``, another piece a ``##`` suffix,
        or a word where a word starts (first, or after a lone ``▁``).
        """
        if i < RESERVED:
            return UNK
        piece = self.vocab[i]
        if piece.startswith(SPACE):
            return piece[len(SPACE):]
        return piece if word_start else SUFFIX + piece

    def detokenize(self, rows):
        out = []
        for row in rows:
            pieces = [self._form(i, not n or prev == self._space_id)
                      for n, (i, prev) in enumerate(
                          (i, p) for i, p in _kept(row, len(self.vocab))
                          if i != self._space_id)]
            out.append(_words(pieces))
        return out


class CharTokenizer:
    """A character vocabulary (reserved tokens, every character ``c``, then ``##c``).

    Args:
        vocab: the token list (``load_vocab`` of a ``*_vocab.txt``).
    """

    char_level = True

    def __init__(self, vocab):
        self.vocab = list(vocab)
        self._ids = {t[len(SUFFIX):]: i for i, t in enumerate(self.vocab)
                     if t.startswith(SUFFIX) and len(t) > len(SUFFIX)}

    def tokenize(self, texts):
        out = []
        for text in texts:
            ids = [self._ids.get(c) for c in text]
            out.append([UNK_ID] if None in ids else ids)
        return out

    def detokenize(self, rows):
        out = []
        for row in rows:
            pieces = []
            for n, (i, _) in enumerate(_kept(row, len(self.vocab))):
                token = self.vocab[i]
                if i >= RESERVED:  # the first character a word, the others suffixes
                    token = token[len(SUFFIX):] if token.startswith(SUFFIX) else token
                    token = token if not n else SUFFIX + token
                pieces.append(token)
            out.append(_words(pieces))
        return out


def load(path):
    """The Python tokenizer of a ``.model`` or character vocabulary file; None for WordPiece."""
    if path.endswith(".model"):
        with open(path, "rb") as f:
            return PieceTokenizer(f.read())
    vocab = load_vocab(path)
    return CharTokenizer(vocab) if " " in vocab else None
