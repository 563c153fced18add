"""Our tokens under CTranslate2's names (:func:`ct2_vocab`), the words of a token sequence
(:func:`_word_ids`), ``translate_batch``'s options that decode as ours
(:func:`decoding_options`) and the options CTranslate2 refuses (:func:`refuse`). Imports
neither CTranslate2 nor TensorFlow.

Example:
    >>> ct2_vocab(["[PAD]", "[UNK]", "[START]", "[END]", "hello"])
    ['<blank>', '<unk>', '<s>', '</s>', 'hello']
"""
from keras_attn.core.special_tokens import END, PAD, START, UNK
from keras_attn.text import python_tokenizers as tokenizers

SPECIAL_TOKENS = {PAD: "<blank>", UNK: "<unk>", START: "<s>", END: "</s>"}


def ct2_vocab(vocab):
    """Our token list with the four reserved tokens renamed to CTranslate2's."""
    n = len(SPECIAL_TOKENS)
    clash = sorted(set(SPECIAL_TOKENS.values()) & set(vocab[n:]))
    if clash:
        raise ValueError(f"The vocabulary already holds CTranslate2's special token(s) {clash} "
                         "as ordinary tokens, so renaming our reserved tokens to them would "
                         f"make two ids share a string. Received: a vocabulary of {len(vocab)} "
                         "tokens")
    return [SPECIAL_TOKENS[t] for t in vocab[:n]] + list(vocab[n:])


def refuse(opts, engine="CTranslate2"):
    """``ValueError`` naming the option for what CTranslate2 cannot give as ours: sampling
    and alignments. ``engine``: how the message names the engine."""
    if opts.sampling:
        raise ValueError(
            f"`sampling_topk` > 1 (random sampling) is not available with {engine}: its "
            "random numbers are not keras_attn's seeded hash, so a `seed` would not give the "
            "same sample (use Translator, the SavedModel or the TFLite file). "
            f"Received: sampling_topk={opts.sampling_topk}")
    if opts.return_alignments:
        raise ValueError(
            f"`return_alignments` is not available with {engine}: its attention vectors "
            "are not keras_attn's word alignments. "
            f"Received: return_alignments={opts.return_alignments}")


def decoding_options(max_len, beam_size=1):
    """``translate_batch`` options that decode as ``keras_attn.decoding`` does."""
    return {"beam_size": beam_size, "min_decoding_length": 0, "max_decoding_length": max_len,
            "max_input_length": max_len, "return_end_token": True}


def _word_ids(tokens, tokenizer):
    """The word of each token string (-1: a reserved token or a space), as
    ``keras_attn.translation.alignment.word_positions`` numbers them."""
    sentencepiece = isinstance(tokenizer, tokenizers.PieceTokenizer)
    chars = getattr(tokenizer, "char_level", False)
    words, word, gap = [], -1, True
    for token in tokens:
        body = token[2:] if chars and token.startswith("##") and len(token) > 2 else token
        space = token == "\u2581" if sentencepiece else chars and body.isspace()
        if token in (SPECIAL_TOKENS[PAD], SPECIAL_TOKENS[START], SPECIAL_TOKENS[END]) or space:
            words.append(-1)
            gap = True
            continue
        if token == SPECIAL_TOKENS[UNK]:
            starts = True
        elif sentencepiece:
            starts = token.startswith("\u2581")
        elif chars:
            starts = False
        else:
            starts = not token.startswith("##")
        if starts or gap:
            word += 1
        words.append(word)
        gap = False
    return words


class _GraphTokenizer:
    """A WordPiece tokenizer (TensorFlow ops) with the list interface of
    :mod:`keras_attn.text.python_tokenizers`."""

    def __init__(self, path):
        import tensorflow as tf

        from keras_attn.text import subword

        self._tf, self._tok = tf, subword.load_tokenizer(path)
        self.vocab, self.char_level = self._tok.vocab, self._tok.char_level

    def tokenize(self, texts):
        return self._tok.tokenize(self._tf.constant(list(texts), self._tf.string)).to_list()

    def detokenize(self, rows):
        return [s.decode("utf-8", errors="replace")
                for s in self._tok.detokenize(self._tf.constant(rows, self._tf.int32)).numpy()]
