"""A run's languages (standard library only): BCP 47 codes checked, their English names,
the task defaults (a run written before ``source_lang``/``target_lang`` gets its task's),
the metadata every artefact repeats, and which columns of a parallel file hold the pair.

Example:
    >>> check_language_code("pt-BR")
    'pt-BR'
    >>> language_name("de")
    'German'
    >>> data_columns("fr", "en")   # Tatoeba's files read English<TAB>Other
    'en,fr'
"""
import re

# Each task's ((code, name), (code, name)); the dates task's codes are not languages.
TASK_LANGUAGES = {
    "tatoeba": (("en", "English"), ("fr", "French")),
    "dates": (("dates", "Dates as people write them"), ("iso", "ISO 8601 dates")),
}
UNKNOWN_LANGUAGES = (("src", "Source"), ("tgt", "Target"))
# A SavedModel version folder's own metadata file (TF Serving ignores it).
SAVED_MODEL_METADATA = "assets.extra/keras_attn.json"

# English names of the usual ISO 639-1 codes; a valid code not listed is named by itself.
LANGUAGE_NAMES = {
    "af": "Afrikaans", "am": "Amharic", "ar": "Arabic", "az": "Azerbaijani",
    "be": "Belarusian", "bg": "Bulgarian", "bn": "Bengali", "br": "Breton", "bs": "Bosnian",
    "ca": "Catalan", "cs": "Czech", "cy": "Welsh", "da": "Danish", "de": "German",
    "el": "Greek", "en": "English", "eo": "Esperanto", "es": "Spanish", "et": "Estonian",
    "eu": "Basque", "fa": "Persian", "fi": "Finnish", "fr": "French", "ga": "Irish",
    "gl": "Galician", "gu": "Gujarati", "he": "Hebrew", "hi": "Hindi", "hr": "Croatian",
    "hu": "Hungarian", "hy": "Armenian", "id": "Indonesian", "is": "Icelandic",
    "it": "Italian", "ja": "Japanese", "ka": "Georgian", "kk": "Kazakh", "km": "Khmer",
    "ko": "Korean", "la": "Latin", "lt": "Lithuanian", "lv": "Latvian", "mk": "Macedonian",
    "ml": "Malayalam", "mn": "Mongolian", "mr": "Marathi", "ms": "Malay", "my": "Burmese",
    "nb": "Norwegian Bokmål", "nl": "Dutch", "nn": "Norwegian Nynorsk", "no": "Norwegian",
    "pa": "Punjabi", "pl": "Polish", "pt": "Portuguese", "ro": "Romanian", "ru": "Russian",
    "sk": "Slovak", "sl": "Slovenian", "sq": "Albanian", "sr": "Serbian", "sv": "Swedish",
    "sw": "Swahili", "ta": "Tamil", "te": "Telugu", "th": "Thai", "tl": "Tagalog",
    "tr": "Turkish", "uk": "Ukrainian", "ur": "Urdu", "uz": "Uzbek", "vi": "Vietnamese",
    "zh": "Chinese",
    # ISO 639-3 codes that Tatoeba's file names use for languages without a 639-1 code
    "ber": "Berber", "cmn": "Mandarin Chinese", "yue": "Cantonese", "tok": "Toki Pona",
    "kab": "Kabyle",
}
_TASK_NAMES = {code: name for pair in TASK_LANGUAGES.values() for code, name in pair}

# BCP 47, simplified: language (2-3 letters), script (4), region (2 letters or 3 digits),
# variants: "en", "pt-BR", "zh-Hant-TW", "es-419".
_TAG = re.compile(r"^[a-z]{2,3}(-[a-z]{4})?(-([a-z]{2}|[0-9]{3}))?"
                  r"(-([a-z0-9]{5,8}|[0-9][a-z0-9]{3}))*$", re.IGNORECASE)


def check_language_code(code, name="language"):
    """``code`` as a BCP 47 tag (``"de"``, ``"pt-BR"``, ``"zh-Hant"``), or a ValueError: an
    ISO 639-1/-3 code, then optional script, region and variants; the case normalised
    (``pt-br`` -> ``pt-BR``) and a locale's ``_`` read as ``-``.

    Args:
        code: the tag to check.
        name: how the message names the option (``"--source-lang"``).
    Returns:
        The tag with its subtags' case normalised.
    Raises:
        ValueError: not a tag; the message says what is wrong and gives examples.
    Example:
        >>> check_language_code("EN")
        'en'
        >>> check_language_code("english")
        Traceback (most recent call last):
        ValueError: `language` must be a BCP 47 language tag ...
    """
    text = code.strip().replace("_", "-") if isinstance(code, str) else code
    if not isinstance(text, str) or not _TAG.match(text):
        why = ("it is empty" if text == "" else
               "it is not text" if not isinstance(text, str) else
               "a tag starts with a 2-letter ISO 639-1 or 3-letter ISO 639-3 code"
               if not re.match(r"^[A-Za-z]{2,3}(-|$)", text) else
               "a subtag after the language is a script (4 letters), a region (2 letters or "
               "3 digits) or a variant (5 to 8 letters or digits)")
        raise ValueError(f"`{name}` must be a BCP 47 language tag such as en, de, pt-BR or "
                         f"zh-Hant ({why}). Received: {name}={code!r}")
    return _normalise_case(text)


def _normalise_case(tag):
    language, *rest = tag.split("-")  # then script Title, region UPPER, variants lower
    return "-".join([language.lower()] + [p.title() if len(p) == 4 and p.isalpha() else
                                          p.upper() if len(p) == 2 else p.lower() for p in rest])


def primary(code):
    """The primary language subtag of ``code`` (``"pt-BR"`` -> ``"pt"``)."""
    return code.split("-")[0].lower()


def language_name(code):
    """The English name of ``code`` (its primary subtag's, with the region or script in
    brackets), or the code itself when the table does not know it.

    Example:
        >>> language_name("pt-BR")
        'Portuguese (BR)'
        >>> language_name("gsw")
        'gsw'
    """
    if code in _TASK_NAMES:
        return _TASK_NAMES[code]
    base = LANGUAGE_NAMES.get(primary(code))
    if base is None:
        return code
    rest = code.split("-")[1:]
    return f"{base} ({'-'.join(rest)})" if rest else base


def task_languages(task):
    """``((code, name), (code, name))`` of ``task``'s default source and target."""
    return TASK_LANGUAGES.get(task, UNKNOWN_LANGUAGES)


def data_columns(source, target):
    """The default column languages of a tab-separated file for ``source`` -> ``target``:
    English first when the pair has it (Tatoeba's ``English<TAB>Other``), else the source.

    Example:
        >>> data_columns("en", "de"), data_columns("de", "en"), data_columns("de", "fr")
        ('en,de', 'en,de', 'de,fr')
    """
    if primary(target) == "en" and primary(source) != "en":
        return f"{target},{source}"
    return f"{source},{target}"


def column_indices(columns, source, target):
    """``(source_index, target_index, number of named columns)`` of the comma-separated
    column languages ``columns`` (``"en,fr"``).

    Raises:
        ValueError: a column is not a language tag, a language is named twice, or the source
            or the target is not among the columns.
    Example:
        >>> column_indices("en,fr", "fr", "en")
        (1, 0, 2)
    """
    codes = [check_language_code(c, "columns") for c in str(columns).split(",")]
    lowered = [c.lower() for c in codes]
    if len(codes) < 2 or len(set(lowered)) != len(codes):
        raise ValueError("`columns` must name the languages of the file's columns in order, "
                         f"at least two and each once, e.g. en,fr. Received: columns={columns!r}")
    found = []
    for side, code in (("source", source), ("target", target)):
        if code.lower() not in lowered:
            raise ValueError(f"the {side} language {code!r} is none of the file's columns "
                             f"{','.join(codes)}; name the columns in the file's order with "
                             f"--columns (e.g. --columns {code},...). Received: "
                             f"columns={columns!r}")
        found.append(lowered.index(code.lower()))
    return found[0], found[1], len(codes)


def languages_metadata(source, target, source_name=None, target_name=None):
    """What every artefact's metadata holds about its languages.

    Example:
        >>> languages_metadata("fr", "en")
        {'source': {'code': 'fr', 'name': 'French'}, 'target': {'code': 'en', 'name': 'English'}}
    """
    return {"source": {"code": source, "name": source_name or language_name(source)},
            "target": {"code": target, "name": target_name or language_name(target)}}


def config_languages(config):
    """``((code, name), (code, name))`` of a run's ``config.json`` dict: its fields, or its
    task's languages for a run written before they existed (unknown task: src/tgt)."""
    default = task_languages(config.get("task"))
    out = []
    for side, (code, name) in zip(("source", "target"), default):
        given = config.get(f"{side}_lang")
        if given:
            code, name = given, config.get(f"{side}_name") or language_name(given)
        out.append((code, name))
    return tuple(out)


def languages_from_metadata(meta):
    """``((code, name), (code, name))`` from :func:`languages_metadata`'s dict (or a dict
    holding it under ``"languages"``), or None when it has none."""
    meta = (meta or {}).get("languages", meta) if isinstance(meta, dict) else None
    try:
        return tuple((meta[side]["code"], meta[side].get("name") or language_name(
            meta[side]["code"])) for side in ("source", "target"))
    except (KeyError, TypeError, AttributeError):
        return None
