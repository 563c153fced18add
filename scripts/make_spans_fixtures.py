"""Write tests/fixtures/spans_fixtures.json: sentences with spans, a translation and an
alignment given for each, and what keras_attn.text.spans (the reference) cuts and puts back.

Every runtime of the rule loads the file in its tests: Python (tests/text/test_passthrough.py),
the SavedModel's graph (tests/export/test_spans_graph.py) and the web export's JavaScript
(tests/export/test_web_js.py). Run it again after a deliberate change of the rule, and read the
diff:

    python scripts/make_spans_fixtures.py
"""
import json
import os
import random
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
PATH = os.path.join(ROOT, "tests", "fixtures", "spans_fixtures.json")

# Odd sentences, written for the rule's corners.
ODD = [
    "Call me at 10:30.", "Visit https://x.org today.", "https://x.org is down.",
    "It ends here https://x.org", "Make it <b>bold</b> now.", "Mail a@b.org at 9:30 \U0001f642",
    "No span at all.", "", "1 2 3 4 5 6 7 8 9 10", "COVID-19 spreads.", "An MP3 player.",
    "The 3rd time.", "x = foo(bar, 3) + 1", "Hello \U0001f44b world \U0001f30d.",
    "  spaced  1  out  ", "Il a dit\u202f: 42\u202f!", "10:30\U0001f642.", "<br/>", "`x` `y`",
    "42!", "a<b>b</b>c 5", "It was 1.5a or 3 .", "caf\u00e9 3 \u00e9t\u00e9 4\u00e9",
    "Write to tom.smith+news@mail.example.co.uk (or www.example.org), 9,116 times.",
    "\u00a0 https://a.org\u00a0x", "He said: fine.", "Keras\u2122 and (c) 2024-ish",
    "\U0001d400\U0001d401 7 \U0001d402", "I\u2019m 25 years old.", "Flag \U0001f1eb\U0001f1f7 and "
    "keycap 1\ufe0f\u20e3 and family \U0001f468\u200d\U0001f469\u200d\U0001f467.",
]
# Written the way the held-out sentences that once placed a span differently read
# ("He was 90." style: a number at the end before the stop, translated with a word
# the alignment points past).
WORDS = ("I he she we they it was is have had the a an old man house car dog cat book "
         "years times people minutes left right came went saw bought sold paid found "
         "in on at to from with for of and but or not very too quite").split()


def made_up_sentences(n, seed=0):
    """``n`` short English-like sentences of the words above, capitalised, ending in a stop."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        words = [rng.choice(WORDS) for _ in range(rng.randint(1, 9))]
        out.append(" ".join(words).capitalize() + rng.choice(".?!"))
    return out


def translations(texts, seed=0):
    """Per text a translation of what its cut leaves (its words upper-cased, sometimes
    reversed, longer or shorter, with French spacing before a final "!") and an alignment
    (random pairs, sometimes none at all: None)."""
    from keras_attn.text import spans

    rng = random.Random(seed)
    out = []
    for text in texts:
        words = [w.upper() for w in spans.cut(text).rest.split()]
        if rng.random() < 0.3:
            words = words[::-1]
        if rng.random() < 0.2:
            words.append("MOT")
        elif words and rng.random() < 0.2:
            words.pop(rng.randrange(len(words)))
        if rng.random() < 0.2:
            words.append("\u202f!")
        pairs = [f"{i}-{rng.randrange(max(len(words), 1))}" for i in range(len(words))
                 if rng.random() < 0.8]
        alignment = None if rng.random() < 0.1 else " ".join(pairs)
        out.append((" ".join(words), alignment))
    return out


def case(source, translation, alignment):
    from keras_attn.text import spans

    c = spans.cut(source)
    placed, renumbered = spans.put_back(c, translation, alignment)
    return {"source": source, "translation": translation, "alignment": alignment,
            "cut": {"rest": c.rest, "only_spans": c.only_spans,
                    "groups": [{"text": g.text, "start": g.start, "mode": g.mode,
                                "anchor": g.anchor, "before": g.before, "after": g.after,
                                "closing": g.closing, "kinds": list(g.kinds)}
                               for g in c.groups]},
            "put_back": {"translation": placed, "alignment": renumbered}}


def fixtures():
    from benchmarks.passthrough import spans_of

    texts = ODD + [t for t, _, _ in spans_of(made_up_sentences(160), seed=3)]
    cases = [case(t, tr, al) for t, (tr, al) in zip(texts, translations(texts))]
    return {"about": "keras_attn.text.spans' cut and put-back of each source, given the "
                     "translation of its rest and that translation's alignment (null: none). "
                     "Written by scripts/make_spans_fixtures.py; every runtime's tests load "
                     "it.", "cases": cases}


if __name__ == "__main__":
    with open(PATH, "w", encoding="utf-8") as f:
        json.dump(fixtures(), f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {PATH}")
