"""Repetition controls on a trained English->French run: dev BLEU and loops, per setting.

For each setting of ``repetition_penalty``, ``no_repeat_ngram_size`` and
``max_length_factor`` (greedy decoding through ``Translator.translate_nbest``): corpus BLEU
and chrF on the run's test split (dev.txt, every reference), and how many outputs loop, on
dev and on :data:`ODD_INPUTS` (markup, URLs, code, e-mail addresses, emoji, shouting, lists,
repeated words, single characters: input the model was never trained for). An output loops
when it repeats a character 5 times in a row or a word 4 times while its source does not
(:func:`loops`). Writes JSON and a Markdown table; the defaults in
``keras_attn.decoding.options`` come from it.

Usage:
    python -m benchmarks.repetition /work/runs/fra30 --json docs/benchmarks/repetition.json
"""
import argparse
import collections
import json
import re
import sys
import time

ODD_INPUTS = [
    "<b>Hello</b> world.", 'Click <a href="x.html">here</a> to go home.',
    "<p>I am <i>very</i> tired.</p>", "<div class=\"note\">Read me.</div>", "&amp; &lt; &gt;",
    "https://www.example.com/path?query=1&b=2", "Visit http://tatoeba.org now.",
    "www.google.com", "def f(x): return x + 1", "for (int i = 0; i < n; i++) { sum += i; }",
    "print('hello world')", "SELECT * FROM users WHERE id = 3;", "john.doe@example.com",
    "Write to me at tom@mail.fr please.", "I love you ❤️❤️❤️", "😀", "👍 Good job! 🎉",
    "WHERE IS THE STATION?", "I AM VERY ANGRY WITH YOU!!!", "STOP!", "1. Eggs 2. Milk 3. Bread",
    "- apples\n- pears", "a) yes b) no", "no no no no no no", "very very very very good",
    "Tom Tom Tom Tom.", "a", "?", "x", "...", "ha ha ha ha ha ha ha ha", "12345678901234567890",
    "3.14159265358979", "#hashtag @user", "¿Qué tal?", "Guten Morgen, wie geht's?",
    "I I I I I I I I", "the the the the the the",
]
SETTINGS = [
    {},
    {"no_repeat_ngram_size": 3}, {"no_repeat_ngram_size": 4},
    {"repetition_penalty": 1.1}, {"repetition_penalty": 1.2},
    {"max_length_factor": 2.0}, {"max_length_factor": 3.0},
    {"no_repeat_ngram_size": 3, "max_length_factor": 3.0},
    {"no_repeat_ngram_size": 4, "max_length_factor": 3.0},
    {"no_repeat_ngram_size": 3, "repetition_penalty": 1.1, "max_length_factor": 3.0},
    {"no_repeat_ngram_size": 3, "repetition_penalty": 1.2, "max_length_factor": 3.0},
    {"no_repeat_ngram_size": 4, "repetition_penalty": 1.2, "max_length_factor": 3.0},
]
CHAR_RUN = re.compile(r"(\S)\1{4}")
WORD = re.compile(r"\w+", re.UNICODE)


def loops(source, output):
    """Whether ``output`` repeats a character 5 times in a row or a word 4 times (case
    folded) while ``source`` does not."""
    def repeats(text):
        words = collections.Counter(w.lower() for w in WORD.findall(text))
        return bool(CHAR_RUN.search(text)), any(n >= 4 for n in words.values())

    out_char, out_word = repeats(output)
    src_char, src_word = repeats(source)
    return (out_char and not src_char) or (out_word and not src_word)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir")
    parser.add_argument("--limit", type=int, default=0, help="dev sentences (0: all)")
    parser.add_argument("--json", default="")
    parser.add_argument("--md", default="")
    args = parser.parse_args(argv)

    from keras_attn.training import evaluation

    from keras_attn.core import runs

    from keras_attn.training import recipes as training
    from keras_attn.core.config import TrainConfig
    from keras_attn.translator import Translator

    translator = Translator.from_run_dir(args.run_dir)
    config = TrainConfig.from_dict(runs.read_json(runs.paths(args.run_dir)["config"]))
    splits, refs = training.load_splits(config)
    pairs = splits["test"][: args.limit or None]
    refs = refs[: len(pairs)]
    sources = [s for s, _ in pairs]
    rows = []
    for setting in SETTINGS:
        t0 = time.time()
        hyps = [h[0]["translation"] for h in translator.translate_nbest(sources, **setting)]
        odd = [h[0]["translation"] for h in translator.translate_nbest(ODD_INPUTS, **setting)]
        scores = evaluation.corpus_scores(hyps, refs)
        row = {"setting": setting, "bleu": scores["bleu"], "chrf": scores["chrf"],
               "dev_loops": sum(loops(s, h) for s, h in zip(sources, hyps)),
               "odd_loops": sum(loops(s, h) for s, h in zip(ODD_INPUTS, odd)),
               "odd_outputs": odd, "seconds": round(time.time() - t0, 1)}
        rows.append(row)
        print(f"{json.dumps(setting):55s} BLEU {row['bleu']:6.2f} chrF {row['chrf']:6.2f} "
              f"loops dev {row['dev_loops']:3d}/{len(sources)} odd {row['odd_loops']:2d}/"
              f"{len(ODD_INPUTS)}  {row['seconds']} s", flush=True)
    record = {"run_dir": args.run_dir, "num_dev": len(sources), "num_odd": len(ODD_INPUTS),
              "odd_inputs": ODD_INPUTS, "rows": rows}
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(record, f, indent=1, ensure_ascii=False)
            f.write("\n")
    if args.md:
        lines = ["| setting | BLEU | chrF | dev outputs that loop | odd inputs that loop |",
                 "| --- | --- | --- | --- | --- |"]
        for row in rows:
            name = ", ".join(f"`{k}={v}`" for k, v in row["setting"].items()) or "all off"
            lines.append(f"| {name} | {row['bleu']:.2f} | {row['chrf']:.2f} | "
                         f"{row['dev_loops']} / {len(sources)} | {row['odd_loops']} / "
                         f"{len(ODD_INPUTS)} |")
        with open(args.md, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
