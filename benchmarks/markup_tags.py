"""Inline tags through ``format=html``: does a ``<b>`` land on the word it wrapped?

On the first N English sentences of the dev file (each with all its French references),
one word of each source is wrapped in ``<b>...</b>`` (the longest alphabetic word, or with
``--pick random`` a seeded random alphabetic word of 3 letters or more; punctuation stays
outside the tag) and the fragment is sent through the server's own application
(:func:`keras_attn.serve.app.create_app`, ``POST /translate`` with ``format=html`` in a
Starlette test client: :mod:`keras_attn.serve.markup` and the batcher as served); the
untagged sentence is sent as a plain ``POST /translate``, and once more with
``return_alignments`` for the output's own alignment. Measured:

* **well-formed**: the output parses (``html.parser``) with exactly the input's tags, nested.
* **reference hit**: the words inside the output's ``<b>`` include a word of a reference
  that the model aligns with the tagged source word, by forced alignment of the reference
  (one teacher-forced pass of the decoder over it, :func:`keras_attn.decoding.cross_attention`,
  then :func:`keras_attn.translation.alignment.hard_alignment`: the alignment the served translations
  get, computed on the reference). Words are compared case-folded, punctuation at their
  ends removed; a hit with any reference counts. Also: how often the output holds such a
  reference word anywhere (the most a tag could hit), and the hit rate among those.
* **self-consistent**: the ``<b>`` wraps exactly the output words that the output's own
  alignment gives for the tagged source word (from the first to the last of them, as
  ``markup.rebuild`` places it); a tagged word aligned with nothing gives an empty ``<b>``.
* **punctuation taken in**: the ``<b>`` ends with ``.!?,;:`` (never in the source tag):
  an alignment word is a whitespace word, so "swim." is one source word and the target's
  "." aligned with it goes inside the tag.
* **BLEU** (sacrebleu, corpus): the tagged outputs with the tags stripped against the
  untagged outputs (the tags should not change the translation) and against the references.

The engine: the export's SavedModel (``keras-attn serve``'s), or, when the export is older
than the code (its ``translate`` signature lacks a decoding option) or ``--engine
translator``, the run's ``Translator`` behind the same application (``translate_nbest``:
the same decoding and alignments; the shape of a served engine's answer).

Usage:
    python -m benchmarks.markup_tags /work/runs/fra30/export \\
        --json docs/benchmarks/markup_tags.json --md docs/benchmarks/markup_tags.md
"""
import argparse
import dataclasses
import html
import html.parser
import json
import os
import random
import re
import sys
import time

DEV = "/work/shared/data/fra-eng/dev.txt"
ALPHA = re.compile(r"[^\W\d_]+")  # letters only


# --- inputs -------------------------------------------------------------------------------
def dev_sentences(path, count):
    """The first ``count`` English sentences of ``path`` (English<TAB>French lines) with
    every French reference of each, in file order."""
    refs, order = {}, []
    for line in open(path, encoding="utf-8"):
        parts = line.rstrip("\n").split("\t")
        if len(parts) < 2 or not parts[0].strip():
            continue
        english, french = parts[0].strip(), parts[1].strip()
        if english not in refs:
            if len(order) == count:
                break
            order.append(english)
            refs[english] = []
        refs[english].append(french)
    return [(e, refs[e]) for e in order]


def pick_word(sentence, how, rng):
    """``(i, start, end)``: the whitespace word ``i`` to tag and the characters of its
    letters (punctuation around them stays outside the tag), or None."""
    candidates = []
    for i, m in enumerate(re.finditer(r"\S+", sentence)):
        core = ALPHA.fullmatch(m.group().strip("\"'.,;:!?()[]«»“”‘’-"))
        if core is None or len(core.group()) < 3:
            continue
        offset = m.group().index(core.group())
        candidates.append((i, m.start() + offset, m.start() + offset + len(core.group())))
    if not candidates:
        return None
    if how == "random":
        return rng.choice(candidates)
    return max(candidates, key=lambda c: (c[2] - c[1], -c[0]))  # longest, first of ties


def tagged(sentence, start, end):
    esc = lambda t: html.escape(t, quote=False)  # noqa: E731
    return esc(sentence[:start]) + "<b>" + esc(sentence[start:end]) + "</b>" + esc(sentence[end:])


# --- the output's markup ------------------------------------------------------------------
class _Read(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags, self.text, self.bold, self._in_b = [], [], [], 0

    def handle_starttag(self, tag, attrs):
        self.tags.append(("start", tag, tuple(attrs)))
        self._in_b += tag == "b"

    def handle_endtag(self, tag):
        self.tags.append(("end", tag))
        self._in_b -= tag == "b"

    def handle_data(self, data):
        self.text.append(data)
        if self._in_b:
            self.bold.append(data)


def read(fragment):
    """``(tags, text without tags, text inside <b>)`` of an HTML fragment."""
    r = _Read()
    r.feed(fragment)
    r.close()
    return r.tags, "".join(r.text), "".join(r.bold)


def well_formed(fragment, expected_tags):
    tags = read(fragment)[0]
    stack = []
    for event in tags:
        if event[0] == "start":
            stack.append(event[1])
        elif not stack or stack.pop() != event[1]:
            return False
    return not stack and tags == expected_tags


def norm(word):
    return re.sub(r"^\W+|\W+$", "", word.lower())


def pairs_of(alignment):
    return [tuple(int(x) for x in p.split("-")) for p in alignment.split()
            if re.fullmatch(r"\d+-\d+", p)]


# --- engines --------------------------------------------------------------------------------
class TranslatorEngine:
    """A ``Translator`` answering as a served engine (``translate(texts, options)``)."""

    name = "translator"

    def __init__(self, translator, batch_size=64):
        self.translator, self.batch_size = translator, batch_size

    def translate(self, texts, options):
        kwargs = {k: v for k, v in dataclasses.asdict(options).items() if v is not None}
        return self.translator.translate_nbest(list(texts), batch_size=self.batch_size,
                                               **kwargs)


def savedmodel_engine(artefact):
    """The export's SavedModel engine, or ``(None, why)`` when its signature lacks an
    option input of this code (an export older than the code cannot be served)."""
    from keras_attn.decoding.options import DecodingOptions
    from keras_attn.export import runtime
    from keras_attn.serve import engines

    engine = engines.SavedModelEngine(artefact.path)
    missing = sorted(set(runtime.option_inputs(DecodingOptions())) - set(engine._dtypes))
    if missing:
        return None, (f"the SavedModel's `translate` signature lacks {missing} (exported "
                      "before those options existed)")
    return engine, None


# --- forced alignment of the references -----------------------------------------------------
def reference_alignments(translator, sources, references, batch=64):
    """Per (source, reference): the reference's words (its target tokens grouped by
    :func:`keras_attn.translation.alignment.word_positions`) and its Pharaoh alignment to the source
    (teacher-forced cross-attention, :func:`keras_attn.translation.alignment.hard_alignment`)."""
    import numpy as np

    from keras_attn import decoding

    from keras_attn.translation import alignment

    from keras_attn.core import special_tokens

    tables = (alignment.word_tables(translator.src_tokenizer),
              alignment.word_tables(translator.tgt_tokenizer))
    out = []
    for k in range(0, len(sources), batch):
        src = np.asarray(translator.encode(sources[k: k + batch]), "int32")
        tgt, _ = translator.encode_targets(references[k: k + batch])
        tgt = np.asarray(tgt, "int32")
        weights = decoding.cross_attention(translator.model, src, tgt, special_tokens.START_ID)
        codes = np.asarray(alignment.hard_alignment(weights, src, tgt, *tables,
                                                    translator.max_len))
        words = np.asarray(alignment.word_positions(tgt, tables[1]))
        src_words = np.asarray(alignment.word_positions(src, tables[0]))
        for row in range(len(src)):
            pieces = {}
            for token, w in zip(tgt[row], words[row]):
                if w >= 0:
                    pieces.setdefault(int(w), []).append(
                        translator.tgt_tokenizer.id_to_token(int(token)))
            out.append({"words": ["".join(pieces[w]).replace("\u2581", "")
                                  for w in sorted(pieces)],
                        "alignment": alignment.to_pharaoh(codes[row], translator.max_len),
                        "source_words": int(src_words[row].max(initial=-1)) + 1})
    return out


# --- the measurement --------------------------------------------------------------------------
def run(args, log=print):
    import sacrebleu
    import starlette.testclient

    from keras_attn.training import evaluation
    from keras_attn.serve import markup
    from keras_attn.serve.app import Settings, create_app
    from keras_attn.serve.locate import locate
    from keras_attn.serve.replicas import InProcessReplicas
    from keras_attn.translator import Translator

    t0 = time.time()
    artefact = locate(args.path)
    translator = Translator.from_run_dir(artefact.run_dir)
    engine, why = None, None
    if args.engine in ("auto", "savedmodel") and artefact.engine == "savedmodel":
        engine, why = savedmodel_engine(artefact)
        if engine is None and args.engine == "savedmodel":
            raise SystemExit(f"cannot serve {artefact.path}: {why}")
    if engine is None:
        engine = TranslatorEngine(translator)
    log(f"engine: {engine.name}" + (f" ({why})" if why else ""))

    rng = random.Random(args.seed)
    rows = []
    for english, refs in dev_sentences(args.dev, args.sentences):
        picked = pick_word(english, args.pick, rng)
        if picked is None:
            continue
        i, start, end = picked
        rows.append({"source": english, "references": refs, "word_index": i,
                     "word": english[start:end], "tagged": tagged(english, start, end)})
    log(f"{len(rows)} sentences with a word to tag")

    app = create_app(artefact, InProcessReplicas(engine), Settings(timeout=3600))
    body = {"source": artefact.source[0], "target": artefact.target[0]}
    seconds = {}
    with starlette.testclient.TestClient(app) as client:
        def post(field, extra):
            out, started = [], time.time()
            for k in range(0, len(rows), args.batch):
                r = client.post("/translate", json={"q": [row[field] for row in
                                                          rows[k: k + args.batch]],
                                                    **body, **extra})
                r.raise_for_status()
                out.extend(r.json()["hypotheses" if "return_alignments" in extra
                                    else "translatedText"])
            return out, round(time.time() - started, 1)

        tagged_out, seconds["html"] = post("tagged", {"format": "html"})
        plain_out, seconds["text"] = post("source", {})
        aligned_out, seconds["text_alignments"] = post("source", {"return_alignments": True})
    log(f"translated: {seconds}")

    flat_src = [row["source"] for row in rows for _ in row["references"]]
    flat_ref = [ref for row in rows for ref in row["references"]]
    started = time.time()
    forced = reference_alignments(translator, flat_src, flat_ref)
    seconds["forced_alignment"] = round(time.time() - started, 1)
    at = 0
    for row, out, plain, hyps in zip(rows, tagged_out, plain_out, aligned_out):
        n = len(row["references"])
        row_forced, at = forced[at: at + n], at + n
        row["output"], row["untagged"] = out, plain
        tags, text, bold = read(out)
        row["stripped"] = text
        row["well_formed"] = well_formed(out, read(row["tagged"])[0])
        row["bold"] = bold
        row["source_words_agree"] = all(f["source_words"] == len(row["source"].split())
                                        for f in row_forced)
        ref_words = sorted({norm(f["words"][j]) for f in row_forced
                            for s, j in pairs_of(f["alignment"])
                            if s == row["word_index"] and j < len(f["words"])} - {""})
        row["reference_words"] = ref_words
        bold_words = {norm(w) for w in bold.split()} - {""}
        out_words = {norm(w) for w in text.split()} - {""}
        row["reference_hit"] = bool(bold_words & set(ref_words))
        row["reference_word_in_output"] = bool(out_words & set(ref_words))
        # The output's own alignment (the untagged request, same sentence and options).
        own = hyps[0]
        row["own_alignment"] = own.get("alignment", "")
        row["same_translation"] = own["translation"] == text
        targets = sorted(j for s, j in pairs_of(row["own_alignment"]) if s == row["word_index"])
        spans = markup._target_words(own["translation"])  # the words markup numbers
        row["own_words"] = own["translation"][spans[targets[0]][0]: spans[targets[-1]][1]] \
            if targets and targets[-1] < len(spans) else ""
        row["self_consistent"] = row["same_translation"] and bold == row["own_words"]
        row["empty_tag"] = not bold.strip()
        # The source word's punctuation is part of its alignment word ("swim." is one word):
        # the tag can take the target's punctuation in with it.
        row["tag_takes_punctuation"] = bool(re.search(r"[.!?,;:]$", bold.strip()))

    n = len(rows)
    share = lambda key: round(sum(bool(r[key]) for r in rows) / n, 4)  # noqa: E731
    present = [r for r in rows if r["reference_word_in_output"]]
    with_ref = [r for r in rows if r["reference_words"]]
    stripped = [r["stripped"] for r in rows]
    results = {
        "path": os.path.abspath(args.path), "run_dir": artefact.run_dir,
        "engine": engine.name, "engine_note": why, "dev": args.dev, "sentences": n,
        "pick": args.pick, "seed": args.seed, "batch": args.batch,
        "references": len(flat_ref),
        "well_formed": share("well_formed"),
        "reference_hit": share("reference_hit"),
        "reference_word_in_output": share("reference_word_in_output"),
        "reference_hit_when_present": round(
            sum(r["reference_hit"] for r in present) / max(len(present), 1), 4),
        "tagged_word_aligned_in_a_reference": round(len(with_ref) / n, 4),
        "self_consistent": share("self_consistent"),
        "empty_tag": share("empty_tag"),
        "tag_takes_punctuation": share("tag_takes_punctuation"),
        "same_translation_as_untagged": round(
            sum(r["stripped"] == r["untagged"] for r in rows) / n, 4),
        "own_alignment_translation_matches": share("same_translation"),
        "source_word_count_agrees": share("source_words_agree"),
        "bleu_stripped_vs_untagged": round(
            sacrebleu.corpus_bleu(stripped, [[r["untagged"] for r in rows]]).score, 2),
        "bleu_stripped_vs_references": evaluation.corpus_scores(
            stripped, [r["references"] for r in rows])["bleu"],
        "bleu_untagged_vs_references": evaluation.corpus_scores(
            [r["untagged"] for r in rows], [r["references"] for r in rows])["bleu"],
        "seconds": {**seconds, "total": round(time.time() - t0, 1)},
        "cpu": _cpu(),
        "rows": rows,
    }
    return results


def _cpu():
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            return f"{line.split(':', 1)[1].strip()}, {len(os.sched_getaffinity(0))} cores"
    return ""


def markdown(r, examples=10):
    pct = lambda x: f"{100 * x:.1f} %"  # noqa: E731
    lines = [
        f"# Inline tags through `format=html`: {r['path']}", "",
        f"{r['sentences']} dev sentences ({r['dev']}, the first English sentences, "
        f"{r['references']} references), the {r['pick']} alphabetic word of each wrapped in "
        f"`<b>`; engine: {r['engine']}" + (f" ({r['engine_note']})" if r["engine_note"] else "")
        + f". CPU: {r['cpu']}. `python -m benchmarks.markup_tags` "
        "(its docstring defines every figure).", "",
        "| measure | value |", "| --- | ---: |",
        f"| well-formed, same tags | {pct(r['well_formed'])} |",
        f"| `<b>` holds a reference word aligned with the tagged word | "
        f"{pct(r['reference_hit'])} |",
        f"| the output holds such a word anywhere (ceiling) | "
        f"{pct(r['reference_word_in_output'])} |",
        f"| hit when the output holds one | {pct(r['reference_hit_when_present'])} |",
        f"| `<b>` is the output's own aligned words (self-consistency) | "
        f"{pct(r['self_consistent'])} |",
        f"| empty `<b>` (tagged word aligned with nothing) | {pct(r['empty_tag'])} |",
        f"| `<b>` ends with punctuation (the source tag's does not) | "
        f"{pct(r['tag_takes_punctuation'])} |",
        f"| tags stripped = untagged translation | "
        f"{pct(r['same_translation_as_untagged'])} |",
        f"| BLEU, tags stripped vs untagged | {r['bleu_stripped_vs_untagged']} |",
        f"| BLEU, tags stripped vs references | {r['bleu_stripped_vs_references']} |",
        f"| BLEU, untagged vs references | {r['bleu_untagged_vs_references']} |",
        "", f"Seconds: {r['seconds']}.", "",
        "| tagged source | output | reference words aligned with the tag | hit |",
        "| --- | --- | --- | --- |"]
    cell = lambda t: "`" + t.replace("`", "'").replace("|", "\\|") + "`"  # noqa: E731
    for row in r["rows"][:examples]:
        lines.append(f"| {cell(row['tagged'])} | {cell(row['output'])} | "
                     f"{', '.join(row['reference_words']) or '(none)'} | "
                     f"{'yes' if row['reference_hit'] else 'no'} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("path", help="an export or run directory (as keras-attn serve takes)")
    p.add_argument("--dev", default=DEV, help="English<TAB>French lines")
    p.add_argument("--sentences", type=int, default=300)
    p.add_argument("--pick", choices=["longest", "random"], default="longest")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch", type=int, default=32, help="texts per request")
    p.add_argument("--engine", choices=["auto", "savedmodel", "translator"], default="auto")
    p.add_argument("--json", default="")
    p.add_argument("--md", default="")
    args = p.parse_args(argv)
    results = run(args, log=lambda m: print(m, flush=True))
    text = markdown(results)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=1, ensure_ascii=False)
            f.write("\n")
    if args.md:
        with open(args.md, "w", encoding="utf-8") as f:
            f.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
