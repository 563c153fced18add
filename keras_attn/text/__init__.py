"""Text: every tokenizer of the package and the rules that cut and mend text.

``tokenizers`` (normalisation, the in-graph WordPiece and character :class:`Tokenizer`),
``subword`` (SentencePiece), ``vocab`` (vocabularies), ``python_tokenizers`` (the same ids
in plain Python, for CTranslate2), ``documents`` (sentences and the whitespace between
them), ``spans`` (what must not be translated), ``glossary`` and ``term_placement`` (terms
that must come out as given). The reserved tokens are
:mod:`keras_attn.core.special_tokens` (re-exported here).

May import: :mod:`keras_attn.core`, TensorFlow and tensorflow-text (``tokenizers`` and
``subword`` only, so a server without TensorFlow reads the others). The names below load
on first use (PEP 562).

Example:
    >>> from keras_attn.text import Tokenizer, normalize_text
    >>> normalize_text("Go.")
    'go .'
"""
from keras_attn.core import lazy

_NAMES = {
    "tokenizers": ("PAD", "UNK", "START", "END", "PAD_ID", "UNK_ID", "START_ID", "END_ID",
                   "RESERVED_TOKENS", "SUFFIX", "DEFAULT_EXTRA_CHARS", "JOIN_TOKENS",
                   "REPAIR_RULES", "normalize_text", "normalize_text_tf",
                   "learn_wordpiece_vocab", "char_vocab", "save_vocab", "load_vocab",
                   "check_vocab", "Tokenizer"),
    "subword": ("SentencePieceTokenizer", "learn_sentencepiece", "load_tokenizer",
                "run_tokenizers"),
}
__getattr__, __dir__, __all__ = lazy.attach(__name__, _NAMES)
