"""SentencePiece subwords: raw text in, natural text out, the same ops in a SavedModel and TFLite.

SentencePiece treats the input as a raw character stream (a space is the symbol ``▁``), so
``detokenize(tokenize(s))`` gives back ``s`` after the model's own normalisation:
``"nmt_nfkc"`` (default: NFKC and whitespace clean-up), ``"nmt_nfkc_cf"`` (also folds case;
a translator's source side) or ``"identity"`` (every character kept; the target side).

Both directions run on tensorflow-text ops that stock TF Serving links and TFLite runs
(``SELECT_TFTEXT_OPS``), so training, the SavedModel and the ``.tflite`` file tokenize
alike. Reserved ids are those of ``keras_attn.text`` (SentencePiece's pad, unk, bos and eos).

Example:
    >>> proto = learn_sentencepiece(["Je vais bien, merci.", "Merci !"] * 50, vocab_size=40)
    >>> tok = SentencePieceTokenizer(proto)
    >>> tok.detokenize(tok.tokenize(tf.constant(["Merci, je vais bien."]))).numpy()
    array([b'Merci, je vais bien.'], dtype=object)

References: Kudo and Richardson 2018, "SentencePiece: A simple and language independent
subword tokenizer and detokenizer for Neural Text Processing".
"""
import io
import os

import tensorflow as tf
import tensorflow_text as tf_text

from keras_attn.core import runs
from keras_attn.text import tokenizers as text

NORMALIZATIONS = ("nmt_nfkc", "nmt_nfkc_cf", "identity", "nfkc")
MODEL_SUFFIX = ".model"
SPACE = "\u2581"  # how SentencePiece writes a space inside a piece


def learn_sentencepiece(texts, vocab_size=8000, *, normalization="nmt_nfkc",
                        model_type="unigram", max_texts=None, seed=0):
    """Train a SentencePiece model on ``texts``; returns the serialized model (bytes).

    Args:
        texts: iterable of raw strings (as written).
        vocab_size: most pieces, the four reserved ones included (a small corpus gets fewer).
        normalization: one of ``NORMALIZATIONS`` (see the module docstring).
        model_type: ``"unigram"`` or ``"bpe"``.
        max_texts, seed: train on a sample of at most this many texts drawn with ``seed``.
    Returns:
        The model proto as bytes (``SentencePieceTokenizer(proto)``; ``save_model`` writes it).
    Example:
        >>> proto = learn_sentencepiece(["Bonjour !", "Merci."] * 20, vocab_size=30)
    """
    import random

    import sentencepiece as spm  # training only: the tokenizer itself runs on TF Text ops

    if normalization not in NORMALIZATIONS:
        raise ValueError(f"`normalization` must be one of {NORMALIZATIONS}. "
                         f"Received: normalization={normalization!r}")
    if model_type not in ("unigram", "bpe"):
        raise ValueError(f"`model_type` must be 'unigram' or 'bpe'. Received: {model_type!r}")
    texts = [t for t in texts if t]
    if not texts:
        raise ValueError("`texts` is empty: a SentencePiece model needs training text")
    if max_texts and len(texts) > max_texts:
        texts = random.Random(seed).sample(texts, max_texts)
    if vocab_size < len(text.RESERVED_TOKENS) + 1:
        raise ValueError(f"`vocab_size` must be at least {len(text.RESERVED_TOKENS) + 1}. "
                         f"Received: vocab_size={vocab_size}")
    model = io.BytesIO()  # the model_writer SentencePiece writes the trained model to
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(texts), model_writer=model, vocab_size=vocab_size,
        model_type=model_type, character_coverage=1.0, hard_vocab_limit=False,
        normalization_rule_name=normalization,
        pad_id=text.PAD_ID, unk_id=text.UNK_ID, bos_id=text.START_ID, eos_id=text.END_ID,
        pad_piece=text.PAD, unk_piece=text.UNK, bos_piece=text.START, eos_piece=text.END,
        num_threads=1, minloglevel=2)
    return model.getvalue()


def save_model(proto, path):
    """Write a serialized SentencePiece model to ``path`` (atomically)."""
    runs.atomic_write_bytes(path, proto)


class SentencePieceTokenizer(text.TokenList, tf.Module):
    """Raw text <-> subword ids on `tensorflow_text.FastSentencepieceTokenizer`.

    Same interface as `keras_attn.text.tokenizers.Tokenizer`; an id outside the vocabulary is
    read as `[UNK]`, which detokenizes to ``" ⁇ "``.

    Args:
        model: serialized SentencePiece model (bytes) whose pad/unk/bos/eos ids are 0/1/2/3,
            as `learn_sentencepiece` makes it.
        name: module name.
    Attributes:
        vocab: the pieces (a space written ``▁``).  vocab_size: their number.
        proto: the model bytes.
        char_level: False.  normalize_input: False (the model normalises its input).
    Example:
        >>> tok = SentencePieceTokenizer(learn_sentencepiece(["J'ai faim."] * 30, 20))
        >>> ids = tok.tokenize(tf.constant(["J'ai faim."]))      # ragged int32 (1, None)
        >>> tok.detokenize(ids).numpy()
        array([b"J'ai faim."], dtype=object)
    """

    char_level = False
    normalize_input = False

    def __init__(self, model, name=None):
        super().__init__(name=name)
        import sentencepiece as spm  # reads the pieces and checks the special ids

        proto = bytes(model)
        processor = spm.SentencePieceProcessor(model_proto=proto)
        special = (processor.pad_id(), processor.unk_id(), processor.bos_id(),
                   processor.eos_id())
        expected = (text.PAD_ID, text.UNK_ID, text.START_ID, text.END_ID)
        if special != expected:
            raise ValueError(f"The SentencePiece model's pad/unk/bos/eos ids must be "
                             f"{expected}. Received: {special}")
        self.proto = proto
        self._vocab_list = [processor.id_to_piece(i) for i in range(processor.get_piece_size())]
        self._vocab_list[: len(text.RESERVED_TOKENS)] = text.RESERVED_TOKENS
        self.vocab_size = len(self._vocab_list)
        self._tokenizer = tf_text.FastSentencepieceTokenizer(proto)
        self._init_detokenizer()

    def _init_detokenizer(self):
        """Detokenize with FastWordpiece (whose detokenizer runs in TFLite for any batch): a piece
        ``▁w`` is the word ``w``, any other piece ``p`` the suffix ``##p``. A lone ``▁`` is dropped
        and the next piece becomes a word, as does a sentence's first piece.
        """
        words, lookup = text.extendable(text.RESERVED_TOKENS)
        word_of = []
        self._space_id = -1
        for i, piece in enumerate(self._vocab_list):
            if i < len(text.RESERVED_TOKENS):
                word_of.append(i)
            elif piece == SPACE:
                self._space_id = i
                word_of.append(text.PAD_ID)
            elif piece.startswith(SPACE):
                word_of.append(lookup(piece[len(SPACE):]))
            else:
                word_of.append(lookup(text.SUFFIX + piece))
        # The word form of each suffix piece, for a piece that follows a lone "▁".
        after_space = [lookup(words[w][len(text.SUFFIX):]) if words[w].startswith(text.SUFFIX)
                       else w for w in word_of]
        self._word_of = tf.constant(word_of, tf.int32)
        self._word_after_space = tf.constant(after_space, tf.int32)
        self._detokenizer = tf_text.FastWordpieceTokenizer(
            words, suffix_indicator=text.SUFFIX, token_out_type=tf.int32,
            unknown_token=text.UNK, support_detokenization=True)

    @classmethod
    def from_file(cls, path, name=None):
        """Load a ``.model`` file written by `save_model` (or by SentencePiece itself)."""
        with open(path, "rb") as f:
            return cls(f.read(), name=name)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def tokenize(self, strings):
        """Raw strings (B,) -> ragged int32 ids (B, None), no START/END."""
        return tf.cast(self._tokenizer.tokenize(strings), tf.int32)

    @tf.function(reduce_retracing=True)
    def detokenize(self, ids):
        """Ids (B, T) or ragged -> natural text (B,), with only TFLite-runnable ops."""
        ids, keep = text.kept_ids(ids, self.vocab_size)
        keep &= ids != self._space_id
        # A piece without "▁" of its own starts a word after a lone "▁" and at the start.
        first = keep & (tf.cumsum(tf.cast(keep, tf.int32), axis=1) == 1)
        after_space = tf.pad(ids[:, :-1] == self._space_id, [[0, 0], [1, 0]])
        ids = tf.where(first | after_space, tf.gather(self._word_after_space, ids),
                       tf.gather(self._word_of, ids))
        ids, lengths = text.compact(ids, keep)
        return self._detokenizer.detokenize(tf.RaggedTensor.from_tensor(ids, lengths=lengths))

    # The whole of `detokenize` runs in TFLite: there is nothing to leave out.
    detokenize_tflite = detokenize


def load_tokenizer(path):
    """The tokenizer saved at ``path``: a SentencePiece ``.model`` file or a vocabulary file."""
    if path.endswith(MODEL_SUFFIX):
        return SentencePieceTokenizer.from_file(path)
    return text.Tokenizer.from_file(path)


def run_tokenizers(run_dir):
    """The (source, target) tokenizers a run directory holds (``.model`` files first)."""
    p = runs.paths(run_dir)
    pairs = ((p["src_model"], p["tgt_model"]), (p["src_vocab"], p["tgt_vocab"]))
    for src, tgt in pairs:
        if os.path.exists(src) and os.path.exists(tgt):
            return load_tokenizer(src), load_tokenizer(tgt)
    raise FileNotFoundError(f"{run_dir!r} has no tokenizers: neither src.model/tgt.model "
                            "nor src_vocab.txt/tgt_vocab.txt")
