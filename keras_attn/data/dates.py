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


def _fr_day(day):
    return "1er" if day == 1 else str(day)


def _en_abbr_dot(month):
    abbr = EN_MONTHS_ABBR[month - 1]
    return abbr if abbr == "May" else abbr + "."


# name -> (function of a date, uses a two-digit year). Day-first for numeric formats.
DATE_FORMATS = {
    # English
    "en_d_month_y": (lambda d: f"{d.day} {EN_MONTHS[d.month - 1]} {d.year}", False),
    "en_month_d_y": (lambda d: f"{EN_MONTHS[d.month - 1]} {d.day}, {d.year}", False),
    "en_month_dth_y": (lambda d: f"{EN_MONTHS[d.month - 1]} {_ordinal(d.day)}, {d.year}",
                       False),
    "en_month_dth_yy": (lambda d: f"{EN_MONTHS[d.month - 1]} {_ordinal(d.day)}, "
                                  f"{d.year % 100:02d}", True),
    "en_dth_month_y": (lambda d: f"{_ordinal(d.day)} {EN_MONTHS[d.month - 1]} {d.year}",
                       False),
    "en_the_dth_of_month_y": (lambda d: f"the {_ordinal(d.day)} of "
                                        f"{EN_MONTHS[d.month - 1]} {d.year}", False),
    "en_wd_d_mon_y": (lambda d: f"{EN_WEEKDAYS_ABBR[d.weekday()]}, {d.day} "
                                f"{EN_MONTHS_ABBR[d.month - 1]} {d.year}", False),
    "en_weekday_month_d_y": (lambda d: f"{EN_WEEKDAYS[d.weekday()]}, "
                                       f"{EN_MONTHS[d.month - 1]} {d.day}, {d.year}", False),
    "en_d_mon_y": (lambda d: f"{d.day} {EN_MONTHS_ABBR[d.month - 1]} {d.year}", False),
    "en_mon_dot_d_y": (lambda d: f"{_en_abbr_dot(d.month)} {d.day}, {d.year}", False),
    "en_mon_d_apos_yy": (lambda d: f"{EN_MONTHS_ABBR[d.month - 1]} {d.day}, "
                                   f"'{d.year % 100:02d}", True),
    # French
    "fr_d_mois_y": (lambda d: f"{_fr_day(d.day)} {FR_MONTHS[d.month - 1]} {d.year}", False),
    "fr_le_d_mois_y": (lambda d: f"le {_fr_day(d.day)} {FR_MONTHS[d.month - 1]} {d.year}",
                       False),
    "fr_jour_d_mois_y": (lambda d: f"{FR_WEEKDAYS[d.weekday()]} {_fr_day(d.day)} "
                                   f"{FR_MONTHS[d.month - 1]} {d.year}", False),
    "fr_le_jour_d_mois_y": (lambda d: f"le {FR_WEEKDAYS[d.weekday()]} {_fr_day(d.day)} "
                                      f"{FR_MONTHS[d.month - 1]} {d.year}", False),
    "fr_d_mois_abbr_y": (lambda d: f"{_fr_day(d.day)} {FR_MONTHS_ABBR[d.month - 1]} "
                                   f"{d.year}", False),
    "fr_jour_abbr_d_mois_y": (lambda d: f"{FR_WEEKDAYS_ABBR[d.weekday()]} {_fr_day(d.day)} "
                                        f"{FR_MONTHS[d.month - 1]} {d.year}", False),
    # Numeric, day first
    "dd/mm/yyyy": (lambda d: f"{d.day:02d}/{d.month:02d}/{d.year}", False),
    "d/m/yyyy": (lambda d: f"{d.day}/{d.month}/{d.year}", False),
    "dd-mm-yyyy": (lambda d: f"{d.day:02d}-{d.month:02d}-{d.year}", False),
    "dd.mm.yyyy": (lambda d: f"{d.day:02d}.{d.month:02d}.{d.year}", False),
    "d.m.yyyy": (lambda d: f"{d.day}.{d.month}.{d.year}", False),
    "dd/mm/yy": (lambda d: f"{d.day:02d}/{d.month:02d}/{d.year % 100:02d}", True),
    "d/m/yy": (lambda d: f"{d.day}/{d.month}/{d.year % 100:02d}", True),
    # Numeric, year first
    "yyyy-mm-dd": (lambda d: d.isoformat(), False),
    "yyyy/mm/dd": (lambda d: f"{d.year}/{d.month:02d}/{d.day:02d}", False),
    "yyyy.mm.dd": (lambda d: f"{d.year}.{d.month:02d}.{d.day:02d}", False),
    "yyyymmdd": (lambda d: f"{d.year}{d.month:02d}{d.day:02d}", False),
}
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
    """Generate `n` (source, ISO target) date pairs, deterministic for a seed.

    Dates are uniform over 1900-2099 and the format over `DATE_FORMATS`; casing is kept
    (55 %), lower, UPPER or Title. Numeric dates are day-first; two-digit years use the
    `strptime("%y")` pivot. Pairs may repeat (`dates_splits` removes duplicates).

    Args:
        n: number of pairs.
        seed: random seed.
        return_formats: also return the format name of each pair.
    Returns:
        List of `(source, target)` (or `(source, target, format_name)`) tuples.
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
    """Train / valid / test date pairs, disjoint by source string.

    Args:
        num_train, num_valid, num_test: pairs per split.
        seed: random seed.
    Returns:
        `{"train": [...], "valid": [...], "test": [...]}`, lists of (source, target).
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
