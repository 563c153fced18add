"""Glossaries through ``keras-attn serve`` (docs/real_text.md, "Glossaries"): held-out
English sentences of ``dev.txt`` holding a term of a glossary built from the training
pairs (each English word's most frequent French partner, Dice ≥ ``--min-dice`` over ≥
``--min-count`` pairs, written as the corpus writes it), with and without it, per engine:

- ``reference``: the sentences whose references use every target: targets ``present`` and
  ``once`` per term, BLEU and chrF (every reference) with and without;
- ``invented``: the same terms mapped to made-up words, every sentence holding a term;
- ``honest``: ``appliedTerms`` names exactly the terms found; ``unchanged``: sentences
  without a term byte-identical; ``timing`` (``--timing N``): one-sentence requests with
  and without, alternated (median and 90th percentile ms: a quiet machine's figures).

    python -m benchmarks.glossary RUN_DIR [--engines savedmodel ctranslate2] [--timing 200]

Example:
    >>> build_glossary(TRAIN)["umbrella"]
    'parapluie'
"""
import argparse
import collections
import json
import os
import re
import statistics
import time
import urllib.request

from benchmarks.results import add_output_args, run_and_write
from keras_attn.text import glossary as glossaries

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "..",
                    "shared", "data", "fra-eng")
_WORDS = re.compile(r"[^\W\d_]+(?:['\u2019-][^\W\d_]+)*")


def build_glossary(train, min_count=30, min_dice=0.6, min_chars=4):
    """``{english word: french word}`` by co-occurrence in ``train``'s pairs (module
    docstring); French words with an elided article (``l'aéroport``) left out."""
    en_count, fr_count, both = collections.Counter(), collections.Counter(), collections.Counter()
    forms = collections.defaultdict(collections.Counter)
    with open(train, encoding="utf-8") as f:
        for english, french in (line.rstrip("\n").split("\t")[:2] for line in f if "\t" in line):
            e = {w.lower() for w in _WORDS.findall(english) if len(w) >= min_chars}
            written = [w for w in _WORDS.findall(french) if len(w) >= min_chars]
            for w in written:
                forms[w.lower()][w] += 1
            fr = {w.lower() for w in written}
            en_count.update(e)
            fr_count.update(fr)
            both.update((a, b) for a in e for b in fr)
    best = {}
    for (a, b), n in both.items():
        dice = 2 * n / (en_count[a] + fr_count[b])
        if n >= min_count and dice >= min_dice and a != b and dice > best.get(a, (0, ""))[0]:
            best[a] = (dice, b)
    return {a: forms[b].most_common(1)[0][0] for a, (_, b) in sorted(best.items())
            if not re.match(r"^\w{1,2}['\u2019]", b)}


def held_out(dev, glossary):
    """``(agree, hold, plain, references)``: the sentences whose every term's target is in
    a reference, those holding a term, those holding none; each one's references."""
    refs, entries = collections.OrderedDict(), glossaries.entries(glossary)
    with open(dev, encoding="utf-8") as f:
        for english, french in (line.rstrip("\n").split("\t")[:2] for line in f if "\t" in line):
            refs.setdefault(english, []).append(french)
    found = {s: glossaries.find(s, entries) for s in refs}
    agree = [s for s in refs if found[s] and all(any(glossaries.count(m.target, r)
                                                     for r in refs[s]) for m in found[s])]
    return agree, [s for s in refs if found[s]], [s for s in refs if not found[s]], refs


def translate(server, sentences, glossary=None, batch=16):
    """``(translations, appliedTerms)`` of ``sentences`` through ``server``."""
    out, applied = [], []
    for i in range(0, len(sentences), batch):
        body = {**json.loads(server.body("")), "q": sentences[i: i + batch],
                **({} if glossary is None else {"glossary": glossary})}
        request = urllib.request.Request(server.url + "/translate", json.dumps(body).encode(),
                                         {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=600) as response:
            answer = json.loads(response.read())
        out += answer["translatedText"]
        applied += answer.get("appliedTerms", [{}] * len(body["q"]))
    return out, applied


def rates(sentences, outputs, applied, glossary):
    """The shares where every target is ``present``, stands ``once`` per term (a target
    inside another's, "billet" in "billet de train", counted in both) and ``honest``."""
    entries, counts = glossaries.entries(glossary), collections.Counter()
    for sentence, output, terms in zip(sentences, outputs, applied):
        found = glossaries.find(sentence, entries)
        wanted = collections.Counter(m.target for m in found)
        inside = {t: sum(glossaries.count(t, m.target) for m in found) for t in wanted}
        counts["present"] += all(glossaries.count(t, output) >= n for t, n in wanted.items())
        counts["once"] += all(glossaries.count(t, output) == inside[t] for t in wanted)
        counts["honest"] += terms == glossaries.applied(found)
    return {"sentences": len(sentences), **{k: round(counts[k] / max(len(sentences), 1), 4)
                                            for k in ("present", "once", "honest")}}


def measure_engine(server, sets, glossary, args, log):
    from keras_attn.training.evaluation import corpus_scores

    agree, hold, plain, refs = sets
    base, _ = translate(server, agree)
    with_terms, applied = translate(server, agree, glossary)
    out = {"reference": {**rates(agree, with_terms, applied, glossary),
                         "present_without_glossary": rates(agree, base, [{}] * len(agree),
                                                           glossary)["present"],
                         "without": corpus_scores(base, [refs[s] for s in agree]),
                         "with": corpus_scores(with_terms, [refs[s] for s in agree])}}
    made_up = {source: "Q" + source[::-1] + "z" for source in glossary}  # ticket: Qtekcitz
    out["invented"] = rates(hold, *translate(server, hold, made_up), made_up)
    sample = plain[: len(hold)]
    same = [a == b for a, b in zip(translate(server, sample)[0],
                                   translate(server, sample, glossary)[0])]
    out["unchanged"] = {"sentences": len(same), "identical": round(sum(same) / max(len(same), 1), 4)}
    out["examples"] = [{"source": s, "without": b, "with": w}
                       for s, b, w in list(zip(agree, base, with_terms))[:8]]
    log(f"  {server.name}: {json.dumps({k: out[k] for k in ('invented', 'unchanged')})}")
    if args.timing:
        times = {"without": [], "with": []}
        for k in range(args.timing):
            for name in ("without", "with") if k % 2 else ("with", "without"):
                started = time.perf_counter()
                translate(server, [hold[k % len(hold)]], glossary if name == "with" else None)
                times[name].append(1000 * (time.perf_counter() - started))
        out["timing"] = {name: {"median_ms": round(statistics.median(v), 2),
                                "p90_ms": round(sorted(v)[int(0.9 * (len(v) - 1))], 2)}
                         for name, v in times.items()}
    return out


def run(args, log=print):
    from benchmarks.serve_load import Server, engine_paths

    glossary = build_glossary(args.train, args.min_count, args.min_dice)
    *sets, refs = held_out(args.data, glossary)
    sets = [s[: args.n or None] for s in sets]
    log(f"glossary: {len(glossary)} terms; held out: {len(sets[0])} sentences whose "
        f"references use the terms, {len(sets[1])} holding a term")
    paths = engine_paths(args.run_dir, log)
    results = {"run_dir": os.path.abspath(args.run_dir), "terms": len(glossary),
               "glossary_sample": dict(list(glossary.items())[:20]), "engines": {}}
    server_args = argparse.Namespace(anchor=None, anchor_python=None, with_test_extras=False)
    for engine in args.engines:
        with Server(f"{engine}:threads={args.threads}", paths, server_args) as server:
            results["engines"][engine] = measure_engine(server, (*sets, refs), glossary,
                                                        args, log)
    return results


def markdown(results):
    rows = ["| engine | reference terms present / once | BLEU without → with | invented "
            "present / once | appliedTerms honest | no term: unchanged | ms/request without "
            "→ with |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for engine, r in results["engines"].items():
        ref, inv, t = r["reference"], r["invented"], r.get("timing")
        rows.append(f"| {engine} | {ref['present']:.2%} / {ref['once']:.2%} | "
                    f"{ref['without']['bleu']} → {ref['with']['bleu']} | {inv['present']:.2%} / "
                    f"{inv['once']:.2%} | {ref['honest']:.2%}, {inv['honest']:.2%} | "
                    f"{r['unchanged']['identical']:.2%} | " + (
                        f"{t['without']['median_ms']} → {t['with']['median_ms']} |" if t else "— |"))
    return "\n".join(rows) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", help="a run directory with its export (SavedModel; the "
                        "CTranslate2 model is exported when missing)")
    parser.add_argument("--train", default=os.path.join(DATA, "train.txt"))
    parser.add_argument("--data", default=os.path.join(DATA, "dev.txt"))
    parser.add_argument("--engines", nargs="+", default=["savedmodel", "ctranslate2"],
                        choices=["savedmodel", "ctranslate2"])
    parser.add_argument("--min-count", type=int, default=30)
    parser.add_argument("--min-dice", type=float, default=0.6)
    parser.add_argument("--n", type=int, default=0, help="at most N sentences a set (0: all)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--timing", type=int, default=0,
                        help="N one-sentence requests with and without the glossary (0: none)")
    add_output_args(parser, "glossary")
    return run_and_write(parser.parse_args(argv), run, markdown)


if __name__ == "__main__":
    raise SystemExit(main())
