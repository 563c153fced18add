"""Cached greedy decoding of two revisions side by side, at batch 1 and 32, one thread.

Each revision's ``keras_attn/`` is extracted (``git archive``) into a temporary folder and
measured in a fresh subprocess per revision and round, the revisions alternating, so both
see the same machine (useful on a shared one: the ratio is taken within a round). Two
models: the committed dates run (``exported/run``) through ``TranslatorModule.translate_ids``
(the SavedModel's decoding graph, traced by each revision), 32 date strings one at a time
and as one batch, and through the exported and reloaded SavedModel's ``serving_default``
(strings in, strings out: what TF Serving runs); and a random model of the English-French
size (d 256, FFN 1024, 4 heads, 2+2 layers, vocabularies 8,000) decoding 64 steps (the end
id's bias pushed down) through ``TranslatorModule.translate_ids`` too (the graph every
revision exports; a bare ``tf.function`` around ``keras_attn.decoding`` gets fixed buffers
since the kernel policy, growing caches before). Process CPU time, medians of repeats; the
summary gives head/base medians and the min-max of the per-round ratios.

Usage (from the repository root):
    python -m benchmarks.decode_revisions --base 4809bb2 --head HEAD --rounds 8
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

CHILD = r'''
import json, sys, tempfile, time
import numpy as np, tensorflow as tf, keras
from keras_attn import decoding, export, models
from keras_attn.translator import Translator

def timed(fn, repeats):
    times = []
    for _ in range(repeats):
        c0 = time.process_time(); fn(); times.append(time.process_time() - c0)
    return float(np.median(times))

out = {}
tr = Translator.from_run_dir(sys.argv[1])
days = ["3 March 2021", "le 14 juillet 1989", "Wed, 3 Mar 2021", "04/03/2021",
        "March 5, 1999", "5 mai 2002", "Tuesday 9 August 1977", "12.11.2011"]
ids = tr.encode([days[i % len(days)] for i in range(32)])
fn = export.TranslatorModule(export.Parts(tr.model, tr.src_tokenizer, tr.tgt_tokenizer,
                                          tr.max_len)).translate_ids
one = [ids[i:i + 1] for i in range(32)]
fn(ids); fn(one[0])
out["dates_b1_ms_per_sentence"] = 1e3 * timed(lambda: [fn(s) for s in one], 5) / 32
out["dates_b32_ms_per_sentence"] = 1e3 * timed(lambda: fn(ids), 15) / 32
texts = [days[i % len(days)] for i in range(32)]
with tempfile.TemporaryDirectory() as tmp:
    export.export_saved_model(tr, tmp, request_signature=False)
    serve = tf.saved_model.load(f"{tmp}/translator/1").signatures["serving_default"]
    one_text = [tf.constant(texts[i:i + 1]) for i in range(32)]
    all_text = tf.constant(texts)
    serve(text=all_text); serve(text=one_text[0])
    out["serve_b1_ms_per_sentence"] = 1e3 * timed(lambda: [serve(text=t) for t in one_text], 5) / 32
    out["serve_b32_ms_per_sentence"] = 1e3 * timed(lambda: serve(text=all_text), 15) / 32
keras.utils.set_random_seed(0)
m = models.transformer_seq2seq(8000, 8000, 256, 1024, 4, 2, 0.0, max_len=128)
bias = m.get_layer("decoder").dense.bias
b = bias.numpy(); b[3] = -1e4; bias.assign(b)
g = export.TranslatorModule(export.Parts(m, tr.src_tokenizer, tr.tgt_tokenizer, 64)).translate_ids
rng = np.random.default_rng(0)
for batch in (1, 32):
    src = tf.constant(rng.integers(4, 8000, (batch, 20)).astype("int32"))
    g(src)
    out[f"enfr_b{batch}_ms_per_step"] = 1e3 * timed(lambda: g(src), 7 if batch == 1 else 3) / 64
print("RESULT " + json.dumps(out))
'''


def extract(revision, folder):
    archive = subprocess.run(["git", "archive", revision, "keras_attn"], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", folder], input=archive, check=True)
    return folder


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", required=True)
    parser.add_argument("--head", default="HEAD")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--run-dir", default=os.path.join("exported", "run"))
    parser.add_argument("--json", default="")
    args = parser.parse_args(argv)
    run_dir = os.path.abspath(args.run_dir)
    with tempfile.TemporaryDirectory() as base_dir, tempfile.TemporaryDirectory() as head_dir:
        paths = {"base": extract(args.base, base_dir), "head": extract(args.head, head_dir)}
        rounds = {"base": [], "head": []}
        for r in range(args.rounds):
            for name in (("base", "head") if r % 2 == 0 else ("head", "base")):
                env = dict(os.environ, PYTHONPATH=paths[name], TF_CPP_MIN_LOG_LEVEL="3",
                           KERAS_BACKEND="tensorflow", TF_NUM_INTRAOP_THREADS="1",
                           TF_NUM_INTEROP_THREADS="1")
                load = os.getloadavg()[0]
                proc = subprocess.run([sys.executable, "-c", CHILD, run_dir], env=env,
                                      capture_output=True, text=True,
                                      cwd=tempfile.gettempdir())
                lines = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
                if not lines:
                    raise RuntimeError(f"{name} failed:\n{proc.stderr[-3000:]}")
                rounds[name].append(dict(json.loads(lines[0][len("RESULT "):]), load=load))
                print(f"round {r + 1} {name}: {rounds[name][-1]}", flush=True)
    summary = {}
    for key in rounds["head"][0]:
        if key == "load":
            continue
        ratios = [h[key] / b[key] for h, b in zip(rounds["head"], rounds["base"])]
        summary[key] = {"base": statistics.median(x[key] for x in rounds["base"]),
                        "head": statistics.median(x[key] for x in rounds["head"]),
                        "head_over_base": statistics.median(ratios),
                        "min": min(ratios), "max": max(ratios)}
        s = summary[key]
        print(f"{key:28s} base {s['base']:7.3f} head {s['head']:7.3f} head/base "
              f"{s['head_over_base']:.3f} ({s['min']:.3f}-{s['max']:.3f})")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"base": args.base, "head": args.head, "rounds": rounds,
                       "summary": summary}, f, indent=2)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
