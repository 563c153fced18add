"""LibreTranslate's ``POST /translate`` fields, read and checked, and its answer built.

Fields: LibreTranslate's (``q``, ``source``, ``target``, ``format``, ``alternatives``,
``api_key``) and ours (every option of :data:`keras_attn.decoding.options.OPTIONS`, such as
``passthrough`` and ``glossary``; ``return_scores``). The answer: ``translatedText``, and
``alternatives``, ``detectedLanguage``, ``pivot``, ``hypotheses`` and ``appliedTerms``
where asked. Errors: :class:`ApiError`.

Example:
    >>> request = parse_fields({"q": "3 March 2021", "source": "dates", "target": "iso",
    ...                         "alternatives": 2}, languages)
    >>> request.options.num_hypotheses
    3
"""
import dataclasses
import json
from typing import Optional

from keras_attn.decoding.options import DECODING_NAMES, OPTIONS, DecodingOptions

FORMATS = ("text", "html")  # html: markup kept, text translated (keras_attn.serve.markup)
_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off", "")
_WORDS = {"int32": "an integer", "float32": "a number", "bool": "true or false",
          "string": "a string", "glossary": "an object of source term -> target term "
          "strings (in a form: that object as JSON text)"}


class ApiError(Exception):
    """An answer ``{"error": message}`` with ``status`` (and ``headers``)."""

    def __init__(self, status, message, headers=None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}


def bad_request(message):
    return ApiError(400, message)


def _missing(name):
    return bad_request(f"Invalid request: missing {name} parameter")


def check_int(name, value, low, note=""):
    """``value`` if an integer >= ``low``, else ``ValueError`` naming ``name`` (``note``:
    what the bound means, such as ``" (-1: no limit)"``)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"`{name}` must be an integer >= {low}{note}. "
                         f"Received: {name}={value!r}")
    return value


@dataclasses.dataclass
class TranslateRequest:
    """A checked ``POST /translate`` (:func:`parse_fields`): the texts (``batch``: ``q`` was
    a list), ``hypotheses``: the n-best lists are returned. Its ``options`` hold every
    per-request choice (``passthrough``, ``glossary`` too)."""

    texts: list
    batch: bool
    source: str
    target: str
    format: str
    alternatives: int
    options: DecodingOptions
    hypotheses: bool
    api_key: Optional[str]

    @property
    def passthrough(self):
        """``options.passthrough`` (None: the engine's default)."""
        return self.options.passthrough


def _typed(name, dtype, value, form=False):
    """``value`` of field ``name`` as ``dtype`` (an option's); a form's strings are parsed
    (a glossary's as JSON)."""
    if dtype == "string" and isinstance(value, str):
        return value
    if dtype == "glossary":
        if form and isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError:
                pass
        if isinstance(value, dict):
            return value
    if dtype == "bool" and isinstance(value, bool):
        return value
    if dtype in ("int32", "float32") and not isinstance(value, bool) and isinstance(
            value, int if dtype == "int32" else (int, float)):
        return float(value) if dtype == "float32" else value
    if form and isinstance(value, str):
        text = value.strip()
        try:
            if dtype == "bool" and text.lower() in _TRUE + _FALSE:
                return text.lower() in _TRUE
            if dtype in ("int32", "float32"):
                return int(text) if dtype == "int32" else float(text)
        except ValueError:
            pass
    raise bad_request(f"Invalid request: `{name}` must be {_WORDS[dtype]}. "
                      f"Received: {name}={value!r}")


def _string(name, value):
    return _typed(name, "string", value)


def _optional(fields, name, dtype, form, default=None):
    """Field ``name`` as ``dtype``; ``default`` when absent or empty."""
    value = fields.get(name)
    return default if value is None or value == "" else _typed(name, dtype, value, form)


def texts_of(value, form=False):
    """``q`` of a ``/translate`` or ``/detect`` body -> (list of strings, was a list)."""
    if value is None or value == "" or value == []:
        raise _missing("q")
    if isinstance(value, str):
        # Form bodies: line endings as LibreTranslate normalises them.
        return ["\n".join(value.splitlines()) if form else value], False
    if isinstance(value, list) and all(isinstance(t, str) for t in value):
        return list(value), True
    raise bad_request(f"Invalid request: `q` must be a string or a list of strings. "
                      f"Received: q={value!r}")


def check_languages(fields, languages, required=True):
    """``(source, target)`` codes of a body, checked against the server's ``languages``
    (``(sources, targets)``; ``source`` may be ``auto``); one left out is a 400 when
    ``required``, else None."""
    sources, targets = (((c,) if isinstance(c, str) else tuple(c)) for c in languages)
    codes = []
    for name, allowed in (("source", sources + ("auto",)), ("target", targets)):
        value = fields.get(name)
        if value is None or value == "":
            if required:
                raise _missing(name)
            value = None
        elif _string(name, value) not in allowed:
            raise bad_request(f"{value} is not supported")
        codes.append(value)
    return tuple(codes)


def parse_fields(fields, languages, form=False):
    """Check the fields of a ``POST /translate`` body: a :class:`TranslateRequest`.

    Args:
        fields: dict of the body's fields (a JSON object, or a form's strings).
        languages: ``(sources, targets)`` the server translates.
        form: the values came from a form (strings: numbers and booleans are parsed).

    Raises:
        ApiError: 400 naming the field (LibreTranslate's messages where it has one).
    """
    texts, batch = texts_of(fields.get("q"), form)
    source, target = check_languages(fields, languages)
    text_format = fields.get("format") or "text"
    if text_format not in FORMATS:
        raise bad_request(f"{text_format} format is not supported")
    alternatives = _optional(fields, "alternatives", "int32", True, 0)
    if alternatives < 0:
        raise bad_request(f"Invalid request: `alternatives` must be an integer >= 0. "
                          f"Received: alternatives={alternatives!r}")
    api_key = _string("api_key", fields["api_key"]) if fields.get("api_key") else None
    options = {name: _typed(name, opt.dtype, fields[name], form)
               for name, opt in OPTIONS.items() if fields.get(name) is not None
               and not (form and fields[name] == "" and opt.dtype != "string")}
    return_scores = fields.get("return_scores")
    return_scores = return_scores is not None and _typed("return_scores", "bool",
                                                         return_scores, form)
    hypotheses = bool(return_scores or options.get("return_alignments")
                      or options.get("num_hypotheses", 1) > 1)
    if alternatives:  # the n-best list after the best: a beam (or samples) that long
        options["num_hypotheses"] = max(options.get("num_hypotheses", 1), alternatives + 1)
        options["beam_size"] = max(options.get("beam_size", 1), options["num_hypotheses"])
    try:
        decoding = DecodingOptions.from_kwargs(**options)
    except ValueError as e:
        raise bad_request(f"Invalid request: {e}") from None
    return TranslateRequest(texts, batch, source, target, text_format, alternatives,
                            decoding, hypotheses, api_key)


def text_options(fields, form=False):
    """The options of a body that are not decoding options (``passthrough``,
    ``glossary``: what ``POST /translate_file`` takes), checked: a dict by name."""
    values = {name: _typed(name, opt.dtype, fields[name], form)
              for name, opt in OPTIONS.items() if name not in DECODING_NAMES
              and fields.get(name) not in (None, "")}
    try:
        DecodingOptions.from_kwargs(**values)
    except ValueError as e:
        raise bad_request(f"Invalid request: {e}") from None
    return values


def parse_attention_fields(fields, languages):
    """``(text, translation or None)`` of a ``POST /attention`` body (``translation``
    absent: the engine's greedy one); ``source`` / ``target`` checked when given."""
    text = fields.get("q")
    if text is None or text == "":
        raise _missing("q")
    if not isinstance(text, str):
        raise bad_request(f"Invalid request: `q` must be one string (a heatmap is one "
                          f"sentence's). Received: q={text!r}")
    check_languages(fields, languages, required=False)
    translation = fields.get("translation")
    return text, None if translation is None else _string("translation", translation)


def answer(request, results, source_code, confidence=100.0, pivot=None):
    """The JSON answer of a translated :class:`TranslateRequest` (module docstring).

    Args:
        results: per text, its hypotheses (``Translator.translate_nbest``'s shape).
        source_code, confidence: ``detectedLanguage``'s (of ``source: auto``).
        pivot: the language between two chained models, or None.
    """
    def one(values):
        return values if request.batch else values[0]

    body = {"translatedText": one([hyps[0]["translation"] for hyps in results])}
    if request.alternatives:
        body["alternatives"] = one([[h["translation"] for h in hyps[1: request.alternatives + 1]]
                                    for hyps in results])
    if request.source == "auto":
        body["detectedLanguage"] = one([{"confidence": confidence, "language": source_code}
                                        for _ in results])
    if pivot is not None:
        body["pivot"] = pivot
    if request.hypotheses:
        body["hypotheses"] = one(results)
    if request.options.glossary or any("applied_terms" in hyps[0] for hyps in results
                                       if hyps):
        body["appliedTerms"] = one([hyps[0].get("applied_terms", {}) if hyps else {}
                                    for hyps in results])
    return body


def check_limits(request, char_limit=-1, batch_limit=-1, alternatives_limit=-1):
    """LibreTranslate's ``--char-limit`` (characters per text), ``--batch-limit`` (texts of
    a list ``q``) and ``--alternatives-limit`` on a :class:`TranslateRequest` (-1: none)."""
    if batch_limit != -1 and request.batch and len(request.texts) > batch_limit:
        raise bad_request(f"Invalid request: request ({len(request.texts)}) exceeds text "
                          f"limit ({batch_limit})")
    if alternatives_limit != -1 and request.alternatives > alternatives_limit:
        raise bad_request(f"Invalid request: alternatives parameter must be <= "
                          f"{alternatives_limit}")
    if char_limit is not None and char_limit != -1:
        for text in request.texts:
            if len(text) > char_limit:
                raise bad_request(f"Invalid request: request ({len(text)}) exceeds text "
                                  f"limit ({char_limit})")
    return request


def required_strings(fields, names, form=False):
    """The fields ``names`` of a body, each a non-empty string (400 otherwise)."""
    values = []
    for name in names:
        value = fields.get(name)
        if value is None or value == "":
            raise _missing(name)
        value = _string(name, value)
        values.append("\n".join(value.splitlines()) if form and name == "q" else value)
    return values
