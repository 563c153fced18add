"""Text: every tokenizer of the package and the rules that cut and mend text.

================== =========================================================================
module             holds
================== =========================================================================
``tokenizers``     D2L's normalisation, the in-graph character and WordPiece tokenizers
                   (:class:`Tokenizer`)
``subword``        SentencePiece: learning a model, the in-graph tokenizer
                   (:class:`~keras_attn.text.subword.SentencePieceTokenizer`)
``vocab``          WordPiece and character vocabularies: learn, save, load, check
``python_tokenizers`` the same ids and texts in plain Python, for an engine without
                   TensorFlow (CTranslate2)
``documents``      a text split into sentences and joined back with its own whitespace
``spans``          what must not be translated (URLs, addresses, code, tags, numbers,
                   emoji): found, cut out of a sentence and put back into its translation
================== =========================================================================

The reserved tokens are :mod:`keras_attn.core.special_tokens` (re-exported here).

May import: :mod:`keras_attn.core`, TensorFlow and tensorflow-text (``tokenizers`` and
``subword`` only: ``documents``, ``spans``, ``vocab`` and ``python_tokenizers`` import
neither, so a server without TensorFlow reads them). The names below load on first use
(PEP 562).

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
