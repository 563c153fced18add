"""Write tests/fixtures/glossary_cases.json: sentences, a glossary, a translation and an
alignment given for each, and what keras_attn.text.glossary and term_placement (the
reference) find and put in.

The Python rules and the SavedModel's graph both load the file in their tests
(tests/text/test_glossary.py). Run it again after a deliberate change of the rule, and read the
diff:

    python scripts/make_glossary_fixtures.py
"""
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
PATH = os.path.join(ROOT, "tests", "fixtures", "glossary_cases.json")

from keras_attn.text import glossary as g, term_placement  # noqa: E402
from keras_attn.translation.glossary import outside_spans  # noqa: E402

GLOSSARY = {"ticket": "billet", "train ticket": "billet de train", "New York": "New York",
     "happy": "heureux", "together": "ensemble", "C++": "C++", "e-mail": "courriel",
     "account": "compte client", "café": "Kaffee", "Tom": "Tom", "office": "Zorblax", "U.S.": "É.-U."}
# (name, sentence, translation, alignment over the whole sentence, spans passed through)
CASES = [
 ("one term, aligned", "Show me your ticket.", "Montre-moi ton ticket.", "0-0 1-0 2-1 3-2", False),
 ("already there: nothing changes", "I bought a ticket.", "J'ai acheté un billet.", "0-0 1-1 2-2 3-3", False),
 ("longest first, any case, several words, spacing", "Show me your Train  ticket. A ticket to new york, tickets!", "Montre-moi ton billet de train. Un ticket à New York, billets !", "0-0 1-0 2-1 3-3 4-2 5-5 6-6 7-7 8-8 8-9 9-10", False),
 ("two terms on one target word", "I hope you're happy together.", "J'espère que vous êtes heureux.", "0-0 1-1 2-2 2-3 3-4 4-4", False),
 ("no aligned word: the proportional place, before the stop", "I bought a ticket.", "J'ai acheté.", "0-0 1-1 2-1", False),
 ("no alignment at all", "I bought a ticket.", "J'ai acheté un truc.", "", False),
 ("empty translation", "I bought a ticket and an office.", "", "", False),
 ("a word that holds a term is no term; hyphens and symbols", "xticket ticket C++ code, e-mail me", "xticket bla C++ code, mail moi", "0-0 1-1 2-2 3-3 4-4 5-5", False),
 ("twice, each replaced", "I bought a ticket and a ticket.", "J'ai acheté un truc et un truc.", "0-0 1-1 2-2 3-3 4-4 5-5 6-6", False),
 ("twice on one word", "ticket ticket", "a", "0-0 1-0", False),
 ("punctuation around the word kept", "My «ticket» is here.", "Mon «truc» est ici.", "0-0 1-1 2-2 3-3", False),
 ("a target of several words, non-ASCII", "Open an account at the café.", "Ouvre un compte au café.", "0-0 1-1 2-2 3-3 4-3 5-4", False),
 ("a term inside a span is no term", "Mail ticket@example.com about the ticket.", "Écris à ticket@example.com sur le truc.", "0-0 0-1 1-2 2-3 3-4 4-5", True),
 ("a term in a link passes through with it", "See https://example.com/ticket now", "Vois https://example.com/ticket maintenant", "0-0 1-1 2-2", True),
 ("do not translate", "Tom went to the office.", "Thomas est allé au bureau.", "0-0 1-1 2-2 3-3 4-4", False),
 ("at the start, multibyte before", "Ticket café, ticket!", "Ticket du café, truc !", "0-0 1-1 1-2 2-3 2-4", False),
 ("an alignment beyond the words is ignored", "My ticket.", "Mon truc.", "0-0 1-1 7-9", False),
 ("no term: unchanged", "I like trains.", "J'aime les trains.", "0-0 1-1 2-2 2-3", False),
 ("a term's own punctuation is no word's", "He lives in the U.S. now.", "Il vit aux U.S. maintenant.", "0-0 1-1 2-2 3-2 4-3 5-4", False),
]


def main():
    entries = g.entries(GLOSSARY)
    out = []
    for name, sentence, translation, alignment, passthrough in CASES:
        found = g.find(sentence, entries, outside_spans(sentence) if passthrough else ())
        expected, expected_alignment = term_placement.apply(sentence, found, translation,
                                                            alignment)
        out.append({"name": name, "sentence": sentence, "passthrough": passthrough,
                    "translation": translation, "alignment": alignment,
                    "found": [[m.start, m.end, m.source] for m in found],
                    "expected": expected, "expected_alignment": expected_alignment})
    with open(PATH, "w", encoding="utf-8") as f:
        json.dump({"about": "Glossary cases every implementation must agree on "
                            "(keras_attn.text.glossary and term_placement, keras_attn.export."
                            "glossary_graph and term_placement_graph): "
                            "tests/text/test_glossary.py. "
                            "found: character offsets and the glossary's source term; "
                            "expected: the translation with the terms put in, given the "
                            "translation and alignment (over the whole sentence). Written by "
                            "scripts/make_glossary_fixtures.py.",
                   "glossary": GLOSSARY, "cases": out}, f, ensure_ascii=False, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
