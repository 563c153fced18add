"""The text rules every runtime reads, as one JSON document (pure Python).

The sentence split (:mod:`keras_attn.text.documents`) and what passes through untranslated
(:mod:`keras_attn.text.span_rules`) are data: Python's ``re`` reads them here, RE2 reads
them in the SavedModel's graph, and the JavaScript of the web export
(``keras_attn/export/webapp/``) reads this document, written beside the model as
``rules.json``. Patterns keep to what the three engines read alike (no look-around, no
``\\s``, ``\\w`` or ``\\d``); a replacement names group ``N`` as ``\\N``.

Example:
    >>> data = rules_data()
    >>> [name for name, _ in data["spans"]["rules"]]
    ['url', 'email', 'code', 'tag', 'emoji', 'number']
"""
from keras_attn.text import documents, span_rules

RULES_FILE = "rules.json"  # its name beside an exported model
VERSION = 1


def rules_data():
    """The rules as a JSON-able dict: ``documents`` (the internal characters, ``escape``,
    ``rules`` and ``restore`` as ``[name, pattern, replacement]`` lists, applied in order
    to ``begin + text + end``, then a cut at ``boundary``) and ``spans`` (``rules`` as
    ``[name, pattern]``, the first that matches wins; ``word_bound``; the character classes
    and patterns the put-back reads)."""
    return {
        "version": VERSION,
        "documents": {
            "begin": documents.BEGIN, "end": documents.END, "boundary": documents.BOUNDARY,
            "escape": [list(rule) for rule in documents.ESCAPE_RULES],
            "rules": [list(rule) for rule in documents.RULES],
            "restore": [list(rule) for rule in documents.RESTORE_RULES],
        },
        "spans": {
            "rules": [list(rule) for rule in span_rules.RULES],
            "word_bound": list(span_rules.WORD_BOUND),
            "space": span_rules.SPACE, "word_space": span_rules.WORD_SPACE,
            "final_stop": span_rules.FINAL_STOP, "thin_space": span_rules.THIN_SPACE,
        },
    }
