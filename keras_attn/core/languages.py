"""A run's languages: BCP 47 codes checked and written in their shortest standard form
(``fra`` is ``fr``, ``pt-br`` is ``pt-BR``), their English names (CLDR's, through langcodes),
the task defaults (a run written before ``source_lang``/``target_lang`` gets its task's), the
metadata every artefact repeats, and which columns of a parallel file hold the pair.

Example:
    >>> check_language_code("fra")          # ISO 639-3 for French: its ISO 639-1 code
    'fr'
    >>> language_name("pt-BR")
    'Portuguese (Brazil)'
    >>> data_columns("fr", "en")   # Tatoeba's files read English<TAB>Other
    'en,fr'
"""
import re

import langcodes

# Each task's ((code, name), (code, name)); the dates task's codes are not languages.
TASK_LANGUAGES = {
    "tatoeba": (("en", "English"), ("fr", "French")),
    "dates": (("dates", "Dates as people write them"), ("iso", "ISO 8601 dates")),
}
UNKNOWN_LANGUAGES = (("src", "Source"), ("tgt", "Target"))
# A SavedModel version folder's own metadata file (TF Serving ignores it).
SAVED_MODEL_METADATA = "assets.extra/keras_attn.json"
_TASK_NAMES = {code: name for pair in TASK_LANGUAGES.values() for code, name in pair}

# BCP 47's form, simplified: language (2-3 letters), script (4), region (2 letters or 3
# digits), variants: "en", "pt-BR", "zh-Hant-TW", "es-419". What a subtag means is
# langcodes' (the IANA registry and CLDR).
_TAG = re.compile(r"^[a-z]{2,3}(-[a-z]{4})?(-([a-z]{2}|[0-9]{3}))?"
                  r"(-([a-z0-9]{5,8}|[0-9][a-z0-9]{3}))*$", re.IGNORECASE)


def check_language_code(code, name="language"):
    """``code`` as a BCP 47 tag in its standard form (``"de"``, ``"pt-BR"``, ``"zh-Hant"``),
    or a ValueError: an ISO 639-1/-3 code, then optional script, region and variants. The
    case is normalised (``pt-br`` -> ``pt-BR``), a locale's ``_`` read as ``-``, and a
    language with a 2-letter code is written with it (``fra``, ``fre`` -> ``fr``; ``eng``
    -> ``en``), so a pair and a file's columns match whichever code names them.

    Args:
        code: the tag to check.
        name: how the message names the option (``"--source-lang"``).
    Returns:
        The tag in its standard form (langcodes' ``standardize_tag``).
    Raises:
        ValueError: not a tag; the message says what is wrong and gives examples.
    Example:
        >>> check_language_code("EN"), check_language_code("deu")
        ('en', 'de')
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
    return langcodes.standardize_tag(text)


def primary(code):
    """The primary language subtag of ``code`` (``"pt-BR"`` -> ``"pt"``)."""
    return code.split("-")[0].lower()


def language_name(code):
    """The English name of ``code`` with its script, region and variant (CLDR's, through
    langcodes), a task's own name (``dates``), or the code itself when no name is known.

    Example:
        >>> language_name("pt-BR"), language_name("fra"), language_name("gsw")
        ('Portuguese (Brazil)', 'French', 'Swiss German')
        >>> language_name("qaa")      # reserved for local use: no name
        'qaa'
    """
    if code in _TASK_NAMES:
        return _TASK_NAMES[code]
    try:
        name = langcodes.Language.get(code).display_name()
    except (langcodes.LanguageTagError, ValueError, TypeError):
        return code
    # langcodes names a code it has no name for "Unknown language [xyz]".
    return code if name.startswith("Unknown language") else name


def standard_code(code):
    """``code`` in its standard form when it is a tag (:func:`check_language_code`), else as
    given (a task's own codes: ``dates``, ``iso``)."""
    try:
        return check_language_code(code)
    except ValueError:
        return code


def _name(code, name):
    """``name``, or ``code``'s (:func:`language_name`) when none was given or the name is the
    code itself (what a run or an export of a code without a name in the old table wrote)."""
    return name if name and name != code else language_name(code)


def task_languages(task):
    """``((code, name), (code, name))`` of ``task``'s default source and target."""
    return TASK_LANGUAGES.get(task, UNKNOWN_LANGUAGES)


def data_columns(source, target):
    """The default column languages of a tab-separated file for ``source`` -> ``target``:
    English first when the pair has it (Tatoeba's ``English<TAB>Other``), else the source.

    Example:
        >>> data_columns("en", "de"), data_columns("de", "en"), data_columns("deu", "eng")
        ('en,de', 'en,de', 'en,de')
    """
    source, target = standard_code(source), standard_code(target)
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
    for side, code in (("source", standard_code(source)), ("target", standard_code(target))):
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
    return {"source": {"code": source, "name": _name(source, source_name)},
            "target": {"code": target, "name": _name(target, target_name)}}


def config_languages(config):
    """``((code, name), (code, name))`` of a run's ``config.json`` dict: its fields, or its
    task's languages for a run written before they existed (unknown task: src/tgt)."""
    default = task_languages(config.get("task"))
    out = []
    for side, (code, name) in zip(("source", "target"), default):
        given = config.get(f"{side}_lang")
        if given:
            code, name = given, _name(given, config.get(f"{side}_name"))
        out.append((code, name))
    return tuple(out)


def languages_from_metadata(meta):
    """``((code, name), (code, name))`` from :func:`languages_metadata`'s dict (or a dict
    holding it under ``"languages"``), or None when it has none."""
    meta = (meta or {}).get("languages", meta) if isinstance(meta, dict) else None
    try:
        return tuple((meta[side]["code"], _name(meta[side]["code"], meta[side].get("name")))
                     for side in ("source", "target"))
    except (KeyError, TypeError, AttributeError):
        return None
