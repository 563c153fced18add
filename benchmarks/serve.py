"""Section ``serve`` (TensorFlow, opt-in): the same weights through every serving engine,
each alone in a fresh process (``benchmarks.serve_engine``): ms per sentence, target
tokens/s, the ratio to CTranslate2 of the same precision, and agreement.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import tensorflow as tf

from benchmarks.artefact_agreement import utf8
from benchmarks.timing import log, spread
from keras_attn.core.runs import read_json
from keras_attn.translation.pipeline import pad

FRA_SIZE = dict(num_hiddens=256, ffn_num_hiddens=1024, num_heads=4, num_layers=2)
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FRA_DATA = os.path.join("..", "shared", "data", "fra-eng")  # Tatoeba, when no fra run is given
FRA_STEPS = 300


def bench_serve(args, peak):
    """Greedy translation of the same sources through every serving artefact of the same
    weights (:data:`ENGINES`), with the same threads. Models: the dates run (``--run-dir``,
    else ``exported/run``, else trained here briefly) and an English-French-sized one
    (``--serve-fra-run-dir``, else trained for :data:`FRA_STEPS` on :data:`FRA_DATA`;
    ``--quick``: random init on the dates vocabularies)."""
    try:
        from keras_attn.export import ctranslate2 as ct2_export
    except ImportError as e:
        return {"available": False, "reason": str(e)}
    work = tempfile.mkdtemp(prefix="keras_attn_bench_serve_")
    threads = args.threads or os.cpu_count() or 1
    count = 4 if args.quick else 64  # sentences a timed pass
    try:
        dates = _serve_dates_run(args, work)
        out = {"available": True, "models": {},
               "config": {"threads": threads, "ctranslate2": f"intra_threads={threads}, "
                          "inter_threads=1", "tensorflow": f"intra-op threads {threads}, "
                          "inter-op threads 1", "tflite": f"num_threads={threads}",
                          "processes": "each engine alone in a fresh process per round, "
                          "engine order rotated every round", "rounds": args.serve_rounds,
                          "repeats_per_round": args.repeats, "clock": args.clock,
                          "decoding": "greedy, max_len of the run, stops at [END]",
                          "sentences": count, "batches": args.serve_batches},
               "target_tokens": "tokens the SavedModel generates (translate_ids, [END] "
                                "included); tokens/s = those / seconds, for every engine"}
        for name in [m for m in ("dates", "fra") if m in args.serve_models]:
            run_dir, how = (dates, "") if name == "dates" else _serve_fra_run(args, work, dates)
            if run_dir is None:
                out["models"][name] = {"available": False, "reason": how}
                continue
            out["models"][name] = _serve_one(args, ct2_export, run_dir, work, name, threads,
                                             count)
            if how:
                out["models"][name]["weights"] = how
        return out
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _has_run(path):
    return bool(path) and os.path.exists(os.path.join(path, "config.json"))


def _serve_dates_run(args, work):
    if _has_run(args.run_dir):
        return args.run_dir
    committed = os.path.join(REPO, "exported", "run")
    if _has_run(committed) and not args.quick:
        return committed
    from keras_attn.training import recipes as training

    run_dir = os.path.join(work, "dates_run")
    log(f"  training a small dates model into {run_dir}")
    config = training.TrainConfig(task="dates", num_hiddens=64, ffn_num_hiddens=128,
                                  num_train=3000, num_valid=100, num_test=100, batch_size=64,
                                  epochs=1 if args.quick else 3, max_len=32, warmup=200,
                                  dropout=0.0, label_smoothing=0.0)
    training.train(config, run_dir, log=lambda *a: None)
    return run_dir


def _serve_fra_run(args, work, dates_run):
    """(run_dir, how the weights were made), or (None, why not)."""
    if _has_run(args.serve_fra_run_dir):
        return args.serve_fra_run_dir, f"given run {args.serve_fra_run_dir}"
    from keras_attn.core import runs
    from keras_attn.training import recipes as training

    if args.quick:  # random init, the dates vocabularies: a smoke run of the code path
        run_dir = os.path.join(work, "fra_random")
        os.makedirs(run_dir)
        config = runs.read_json(os.path.join(dates_run, "config.json"))
        config.update(num_hiddens=32, ffn_num_hiddens=64, num_heads=4, num_layers=2)
        for name in ("src_vocab", "tgt_vocab"):
            shutil.copy(runs.paths(dates_run)[name], runs.paths(run_dir)[name])
        runs.write_json(runs.paths(run_dir)["config"], config)
        training.build_model(config).save(runs.paths(run_dir)["model"])
        return run_dir, "random init (--quick: d 32, the dates vocabularies)"
    data_dir, steps = FRA_DATA, FRA_STEPS
    if not os.path.isdir(data_dir):
        return None, f"no Tatoeba data at {data_dir} and no --serve-fra-run-dir"
    run_dir = os.path.join(work, "fra_run")
    log(f"  training the English-French-sized model for {steps} steps into {run_dir}")
    # A short cosine schedule: the default Noam warmup (4000 steps) would leave a few
    # hundred steps at a learning rate too small to produce sentence-like output.
    config = training.TrainConfig(**dict(
        training.TASK_DEFAULTS["tatoeba"], task="tatoeba", data=data_dir, steps=steps,
        schedule="cosine", peak_lr=1e-3, warmup=max(steps // 10, 1), **FRA_SIZE))
    metrics = training.train(config, run_dir, log=lambda *a: None)
    return run_dir, (f"trained {steps} steps on {data_dir} (batch {config.batch_size}, cosine "
                     f"1e-3); test BLEU {metrics.get('bleu')}")


def _serve_sentences(run_dir, n):
    """``n`` source sentences of the run's task: its test split (dates: generated)."""
    from keras_attn import data
    from keras_attn.core import runs
    from keras_attn.training import recipes as training

    config = training.TrainConfig(**runs.read_json(os.path.join(run_dir, "config.json")))
    if config.task == "dates":
        return [s for s, _ in data.generate_dates(n, seed=123)]
    splits, _ = training.load_splits(config, log=lambda *a: None)
    return [s for s, _ in splits["test"][:n]]


# saved_model_translate_xla: the newest options signature's XLA-compiled twin
# (translate_v2_xla; its batch shapes compile during the warm-up passes).
ENGINES = ("saved_model_translate_ids", "saved_model_serving_default", "saved_model_translate",
           "saved_model_translate_xla", "tflite_text_float32",
           "tflite_text_int8", "ctranslate2_float32", "ctranslate2_int8")


# Timed in every run: the ratios' yardstick and the agreement's references.
REFERENCE_ENGINES = ("saved_model_translate_ids", "saved_model_serving_default",
                     "ctranslate2_float32")


def yardstick(engine):
    """The CTranslate2 engine of the same precision (int8 files against int8)."""
    return "ctranslate2_int8" if engine.endswith("int8") else "ctranslate2_float32"


def _export_all(translator, run_dir, work, label, ct2_export, engines):
    """The artefacts of ``run_dir`` that ``engines`` run, under ``work``: engine -> path,
    sizes, unavailable."""
    from keras_attn import export

    log(f"  [{label}] exporting {run_dir}")
    requests = ("saved_model_translate", "saved_model_translate_xla")
    sm = export.export_saved_model(translator, os.path.join(work, f"{label}_sm"),
                                   request_signature=any(e in engines for e in requests))
    paths = {e: sm["path"] for e in ("saved_model_translate_ids", "saved_model_serving_default",
                                     *requests) if e in engines}
    sizes = {"saved_model": sm["total_bytes"]}
    unavailable = {}
    for q in ("float32", "int8"):
        tflite, ct2 = f"tflite_text_{q}", f"ctranslate2_{q}"
        if tflite in engines:
            try:  # a target that fails to export is reported, the other engines still timed
                rep = export.export_tflite(translator, os.path.join(
                    work, f"{label}_text_{q}.tflite"), "text", q)
            except Exception as e:  # noqa: BLE001
                unavailable[tflite] = f"{type(e).__name__}: {e}"[:500]
                log(f"  [{label}] {tflite} not available: {unavailable[tflite]}")
            else:
                paths[tflite], sizes[tflite] = rep["path"], rep["total_bytes"]
        if ct2 in engines:
            rep = ct2_export.export_ctranslate2(run_dir, os.path.join(
                work, f"{label}_ct2_{q}"), q, log=lambda *a: None)
            paths[ct2], sizes[ct2] = rep["path"], rep["total_bytes"]
    return paths, sizes, unavailable


def _run_engine(spec, work):
    """Run ``benchmarks.serve_engine`` on ``spec`` in a fresh process; its result."""
    name = f"{spec['engine']}_{os.getpid()}"
    spec_path = os.path.join(work, f"{name}.spec.json")
    out_path = os.path.join(work, f"{name}.out.json")
    with open(spec_path, "w", encoding="utf-8") as f:
        json.dump(spec, f)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3",
               PYTHONPATH=os.pathsep.join(p for p in (REPO, os.environ.get("PYTHONPATH")) if p))
    proc = subprocess.run([sys.executable, "-m", "benchmarks.serve_engine", spec_path, out_path],
                          env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"engine {spec['engine']} failed (exit {proc.returncode}):\n"
                           f"{proc.stderr[-3000:]}")
    with open(out_path, encoding="utf-8") as f:
        return json.load(f)


def _serve_one(args, ct2_export, run_dir, work, label, threads, count):
    """Export ``run_dir`` to every engine, then time each alone in a fresh process per
    round (the order rotated each round); ratios are taken within a round, then summarised
    over the rounds."""
    from keras_attn import export
    from keras_attn.text import tokenizers as text
    from keras_attn.export import runtime
    from keras_attn.export.option_sets import COMPILED_SIGNATURES
    from keras_attn.translator import Translator

    translator = Translator.from_run_dir(run_dir)
    paths, sizes, unavailable = _export_all(translator, run_dir, work, label, ct2_export,
                                            args.serve_engines)
    sentences = _serve_sentences(run_dir, count)
    source = translator.encode(sentences).numpy()  # the same ids for every engine
    ct2 = ct2_export.CTranslate2Translator(paths["ctranslate2_float32"], intra_threads=1)
    inputs = {"sentences": sentences, "source_ids": source.tolist(),
              # what the TFLite text target expects (the WordPiece recipe: normalised text)
              "tflite_sentences": ([text.normalize_text(s) for s in sentences]
                                   if translator.normalize else sentences),
              "ct2_tokens": ct2.tokens_from_ids(source)}
    inputs_path = os.path.join(work, f"{label}_inputs.json")
    with open(inputs_path, "w", encoding="utf-8") as f:
        json.dump(inputs, f)
    engines = [e for e in ENGINES if e in paths]
    compiled = next(iter(COMPILED_SIGNATURES))  # translate_v2_xla, the twin of translate_v2
    signatures = {"saved_model_translate_ids": export.IDS_SIGNATURE,
                  "saved_model_serving_default": export.SERVING_SIGNATURE,
                  "saved_model_translate": COMPILED_SIGNATURES[compiled],
                  "saved_model_translate_xla": compiled,
                  "tflite_text_float32": runtime.TFLITE_TEXT_SIGNATURE,
                  "tflite_text_int8": runtime.TFLITE_TEXT_SIGNATURE}
    rounds = max(args.serve_rounds, 1)
    results = {e: [] for e in engines}
    for r in range(rounds):
        order = engines[r % len(engines):] + engines[: r % len(engines)]
        for engine in (order if r % 2 == 0 else order[::-1]):
            spec = {"engine": engine, "path": paths[engine], "inputs": inputs_path,
                    "batches": args.serve_batches, "repeats": args.repeats,
                    "warmup": args.warmup, "threads": threads, "clock": args.clock,
                    "signature": signatures.get(engine),
                    "ct2_options": ct2_export.decoding_options(translator.max_len)}
            results[engine].append(_run_engine(spec, work))
        log(f"  [{label}] round {r + 1}/{rounds}: " + ", ".join(
            f"{e} {1e3 * np.median(results[e][-1]['batches'][str(args.serve_batches[0])]):.0f}"
            for e in engines) + f" ms per pass at batch {args.serve_batches[0]}")

    # Agreement (outputs are deterministic: round 1's).
    outputs = {e: results[e][0]["outputs"] for e in engines}
    ref_ids = outputs["saved_model_translate_ids"]
    target_tokens = sum(len(r) for r in ref_ids)
    decode = translator.tgt_tokenizer.detokenize
    ids = {e: [[ct2.tgt_ids[t] for t in row] for row in outputs[e]]
           for e in engines if e.startswith("ctranslate2")}
    ids["saved_model_translate_ids"] = ref_ids
    texts = {e: utf8(decode(tf.constant(pad(rows)))) for e, rows in ids.items()}
    texts.update({e: outputs[e] for e in engines if e not in ids})
    ref_text = texts["saved_model_serving_default"]
    agreement = {e: {"text_vs_serving_default": _agree(texts[e], ref_text)} for e in engines}
    for e, rows in ids.items():
        agreement[e]["ids_vs_translate_ids"] = _agree(rows, ref_ids)
    for e, a in agreement.items():
        log(f"  [{label}] {e:28s} agreement with the SavedModel: "
            + ", ".join(f"{m} {v:.1%}" for m, v in a.items()))

    result = {"run_dir": os.path.abspath(run_dir), "sentences": len(sentences),
              "target_tokens": target_tokens, "max_len": translator.max_len, "rounds": rounds,
              "model": {k: v for k, v in read_json(os.path.join(run_dir, "config.json")).items()
                        if k in ("task", "num_hiddens", "ffn_num_hiddens", "num_heads",
                                 "num_layers", "src_vocab_size", "tgt_vocab_size")},
              "bytes": sizes, "agreement": agreement, "unavailable": unavailable,
              "batches": {}}
    for b in args.serve_batches:
        # Per round: the median pass of each engine; ratios within the round.
        per_round = {e: [float(np.median(x["batches"][str(b)])) for x in results[e]]
                     for e in engines}
        rows = {}
        for e in engines:
            sec = float(np.median(per_round[e]))
            rows[e] = {"ms_per_sentence": round(1e3 * sec / len(sentences), 3),
                       "tokens_per_s": round(target_tokens / sec, 1),
                       "spread_pct": round(100 * (max(per_round[e]) - min(per_round[e])) / sec,
                                           1),
                       "rounds": len(per_round[e]), "repeats_per_round": args.repeats}
            bases = ("ctranslate2_float32", yardstick(e))
            if e == "saved_model_translate":  # what the options cost at their defaults
                bases += ("saved_model_serving_default",)
            if e == "saved_model_translate_xla" and "saved_model_translate" in per_round:
                bases += ("saved_model_translate",)  # what compiling the decoding gains
            for base in dict.fromkeys(bases):
                ratios = [t_ct2 / t for t, t_ct2 in zip(per_round[e], per_round[base])]
                rows[e][f"vs_{base}"] = spread(ratios, 3)
            v = rows[e][f"vs_{yardstick(e)}"]
            log(f"  [{label}] batch {b:3d} {e:28s} {rows[e]['ms_per_sentence']:8.2f} "
                f"ms/sentence {rows[e]['tokens_per_s']:9.1f} tok/s  x{v['median']} of "
                f"{yardstick(e)} ({v['min']}-{v['max']})")
        result["batches"][str(b)] = rows
    return result


def _agree(a, b):
    return round(sum(x == y for x, y in zip(a, b)) / max(len(b), 1), 4)
