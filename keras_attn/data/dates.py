"""A generated date-normalisation corpus: dates as people write them -> ISO 8601.

English, French and numeric spellings (``"le 3 mars 2021"``, ``"March 3rd, 2021"``,
``"03/03/2021"``) paired with ``"2021-03-03"``: a translation task small enough to train in
minutes on a CPU, with an exact answer to score against.
"""
import datetime
import random

FIRST_DATE = datetime.date(1900, 1, 1)
LAST_DATE = datetime.date(2099, 12, 31)
# Two-digit years follow the POSIX / Python `strptime("%y")` pivot: 69-99 -> 1969-1999,
# 00-68 -> 2000-2068. Formats with a two-digit year are only generated for those years.
TWO_DIGIT_YEAR_MIN, TWO_DIGIT_YEAR_MAX = 1969, 2068

EN_MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August",
             "September", "October", "November", "December"]
EN_MONTHS_ABBR = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct",
                  "Nov", "Dec"]
EN_WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday",
               "Sunday"]
EN_WEEKDAYS_ABBR = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]
FR_MONTHS = ["janvier", "février", "mars", "avril", "mai", "juin", "juillet", "août",
             "septembre", "octobre", "novembre", "décembre"]
FR_MONTHS_ABBR = ["janv.", "févr.", "mars", "avr.", "mai", "juin", "juil.", "août",
                  "sept.", "oct.", "nov.", "déc."]
FR_WEEKDAYS = ["lundi", "mardi", "mercredi", "jeudi", "vendredi", "samedi", "dimanche"]
FR_WEEKDAYS_ABBR = ["lun.", "mar.", "mer.", "jeu.", "ven.", "sam.", "dim."]


def _ordinal(day):
    if 11 <= day % 100 <= 13:
        return f"{day}th"
    return f"{day}{ {1: 'st', 2: 'nd', 3: 'rd'}.get(day % 10, 'th') }"


def _fields(d):
    """The fields the templates below name, for the date ``d``."""
    month, weekday = d.month - 1, d.weekday()
    return {
        "d": d.day, "dd": f"{d.day:02d}", "dth": _ordinal(d.day),
        "m": d.month, "mm": f"{d.month:02d}", "y": d.year, "yy": f"{d.year % 100:02d}",
        "Month": EN_MONTHS[month], "Mon": EN_MONTHS_ABBR[month],
        "Mon_dot": EN_MONTHS_ABBR[month] + ("" if month == 4 else "."),  # "May" has no dot
        "Weekday": EN_WEEKDAYS[weekday], "Wd": EN_WEEKDAYS_ABBR[weekday],
        "fr_d": "1er" if d.day == 1 else d.day, "mois": FR_MONTHS[month],
        "mois_abbr": FR_MONTHS_ABBR[month], "jour": FR_WEEKDAYS[weekday],
        "jour_abbr": FR_WEEKDAYS_ABBR[weekday],
    }


# name -> (template over `_fields`, uses a two-digit year). Day-first for numeric formats.
_TEMPLATES = {
    # English
    "en_d_month_y": ("{d} {Month} {y}", False),
    "en_month_d_y": ("{Month} {d}, {y}", False),
    "en_month_dth_y": ("{Month} {dth}, {y}", False),
    "en_month_dth_yy": ("{Month} {dth}, {yy}", True),
    "en_dth_month_y": ("{dth} {Month} {y}", False),
    "en_the_dth_of_month_y": ("the {dth} of {Month} {y}", False),
    "en_wd_d_mon_y": ("{Wd}, {d} {Mon} {y}", False),
    "en_weekday_month_d_y": ("{Weekday}, {Month} {d}, {y}", False),
    "en_d_mon_y": ("{d} {Mon} {y}", False),
    "en_mon_dot_d_y": ("{Mon_dot} {d}, {y}", False),
    "en_mon_d_apos_yy": ("{Mon} {d}, '{yy}", True),
    # French
    "fr_d_mois_y": ("{fr_d} {mois} {y}", False),
    "fr_le_d_mois_y": ("le {fr_d} {mois} {y}", False),
    "fr_jour_d_mois_y": ("{jour} {fr_d} {mois} {y}", False),
    "fr_le_jour_d_mois_y": ("le {jour} {fr_d} {mois} {y}", False),
    "fr_d_mois_abbr_y": ("{fr_d} {mois_abbr} {y}", False),
    "fr_jour_abbr_d_mois_y": ("{jour_abbr} {fr_d} {mois} {y}", False),
    # Numeric, day first
    "dd/mm/yyyy": ("{dd}/{mm}/{y}", False),
    "d/m/yyyy": ("{d}/{m}/{y}", False),
    "dd-mm-yyyy": ("{dd}-{mm}-{y}", False),
    "dd.mm.yyyy": ("{dd}.{mm}.{y}", False),
    "d.m.yyyy": ("{d}.{m}.{y}", False),
    "dd/mm/yy": ("{dd}/{mm}/{yy}", True),
    "d/m/yy": ("{d}/{m}/{yy}", True),
    # Numeric, year first
    "yyyy-mm-dd": ("{y}-{mm}-{dd}", False),
    "yyyy/mm/dd": ("{y}/{mm}/{dd}", False),
    "yyyy.mm.dd": ("{y}.{mm}.{dd}", False),
    "yyyymmdd": ("{y}{mm}{dd}", False),
}
# name -> (function of a date, uses a two-digit year).
DATE_FORMATS = {name: (lambda d, template=template: template.format(**_fields(d)), two_digit)
                for name, (template, two_digit) in _TEMPLATES.items()}
# Casing applied to the whole source: name -> (weight, function).
_CASINGS = {"as_is": (0.55, str), "lower": (0.2, str.lower), "upper": (0.15, str.upper),
            # str.title() would write "3Rd"
            "title": (0.1, lambda s: " ".join(w[:1].upper() + w[1:] for w in s.split(" ")))}


def _date_stream(rng):
    """Endless (source, target, format name) triples drawn with `rng`."""
    names = list(DATE_FORMATS)
    four_digit = [n for n in names if not DATE_FORMATS[n][1]]
    first, span = FIRST_DATE.toordinal(), LAST_DATE.toordinal() - FIRST_DATE.toordinal()
    casings = list(_CASINGS)
    weights = [w for w, _ in _CASINGS.values()]
    while True:
        date = datetime.date.fromordinal(first + rng.randint(0, span))
        name = rng.choice(names)
        if DATE_FORMATS[name][1] and not TWO_DIGIT_YEAR_MIN <= date.year <= TWO_DIGIT_YEAR_MAX:
            name = rng.choice(four_digit)
        casing = rng.choices(casings, weights)[0]
        source = _CASINGS[casing][1](DATE_FORMATS[name][0](date))
        yield source, date.isoformat(), name


def generate_dates(n, seed=0, return_formats=False):
    """`n` (source, ISO target) date pairs, deterministic for a `seed`; with
    `return_formats`, `(source, target, format_name)` triples.

    Dates are uniform over 1900-2099 and the format over `DATE_FORMATS`; casing is kept
    (55 %), lower, UPPER or Title. Numeric dates are day-first; two-digit years use the
    `strptime("%y")` pivot. Pairs may repeat (`dates_splits` removes duplicates).

    Example:
        >>> generate_dates(2, seed=1)
        [('21/3/1948', '1948-03-21'), ('25 Aug 1922', '1922-08-25')]
    """
    if n < 0:
        raise ValueError(f"n must be >= 0. Received: n={n}")
    stream = _date_stream(random.Random(seed))
    samples = [next(stream) for _ in range(n)]
    return samples if return_formats else [(s, t) for s, t, _ in samples]


def dates_splits(num_train=40000, num_valid=2000, num_test=2000, seed=0):
    """Train / valid / test date pairs (`num_*` of each, drawn with `seed`), disjoint by
    source string: `{"train": [...], "valid": [...], "test": [...]}`, (source, target) lists.

    Example:
        >>> splits = dates_splits(num_train=1000, num_valid=100, num_test=100)
        >>> len(splits["train"]), splits["test"][0][1]   # (1000, 'YYYY-MM-DD')
    """
    for name, value in (("num_train", num_train), ("num_valid", num_valid),
                        ("num_test", num_test)):
        if value < 0:
            raise ValueError(f"{name} must be >= 0. Received: {name}={value}")
    total = num_train + num_valid + num_test
    stream = _date_stream(random.Random(seed))
    seen, pairs = set(), []
    while len(pairs) < total:
        source, target, _ = next(stream)
        if source not in seen:
            seen.add(source)
            pairs.append((source, target))
    return {
        "test": pairs[:num_test],
        "valid": pairs[num_test:num_test + num_valid],
        "train": pairs[num_test + num_valid:],
    }
