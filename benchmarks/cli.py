"""Benchmark suite: keras_attn against Keras / keras_hub, one process, interleaved.

Sections (``--sections``; default all but ``serve``): ``mha`` (``MultiHeadAttention``
against Keras's), ``train`` (a training step against the same config built from keras_hub
layers), ``decode`` (greedy decoding, cached and naive, against keras_hub's loop) and
``serve`` (every artefact translating the same sources, against CTranslate2; see
:func:`benchmarks.serve.bench_serve`). Every comparison alternates the sides on every
repeat and reports the median, the ratio ours/theirs and GFLOP/s against the float32
matmul peak; writes ``--json`` and ``--md`` (docs/benchmarks.md).

    python scripts/bench.py                          # full suite (quiet machine!)
    python scripts/bench.py --quick                  # smoke run, tiny sizes
    python scripts/bench.py --sections mha,decode --threads 1 --clock cpu
"""
import argparse
import datetime
import json
import os
import sys

from benchmarks import common
from benchmarks.decode import bench_decode
from benchmarks.mha import bench_mha
from benchmarks.report import markdown
from benchmarks.results import fresh_dir
from benchmarks.serve import ENGINES, REFERENCE_ENGINES, bench_serve
from benchmarks.timing import CLOCKS, log
from benchmarks.train import bench_train

DEFAULT_SECTIONS = ("mha", "train", "decode")
SECTIONS = DEFAULT_SECTIONS + ("serve",)  # serve: opt-in (trains a model)
RUNNERS = {"mha": bench_mha, "train": bench_train, "decode": bench_decode,
           "serve": bench_serve}


def _list(kind=str):
    """A comma-separated option's values, each read as ``kind``."""
    return lambda s: [kind(x.strip()) for x in s.split(",") if x.strip()]


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sections", type=_list(), default=",".join(DEFAULT_SECTIONS),
                    help=f"comma-separated subset of {','.join(SECTIONS)} (default: all "
                         "but serve)")
    ap.add_argument("--quick", action="store_true", help="tiny sizes and repeats (smoke run)")
    ap.add_argument("--repeats", type=int, default=None, help="timed repeats (default 9; quick 3)")
    ap.add_argument("--warmup", type=int, default=None, help="untimed calls (default 2; quick 1)")
    ap.add_argument("--threads", type=int, default=0,
                    help="TF intra/inter-op threads (0 = default)")
    ap.add_argument("--clock", choices=sorted(CLOCKS), default="wall",
                    help="wall (default) or cpu (process CPU time; use with --threads 1)")
    ap.add_argument("--profile", action="store_true",
                    help="also record the op types taking most time on each side")
    ap.add_argument("--mha-lengths", type=_list(int), default=None)
    ap.add_argument("--train-policies", type=_list(), default=["float32", "mixed_bfloat16"])
    ap.add_argument("--train-dropouts", type=_list(float),
                    default=[0.1, 0.0], help="0.1 (the target) and extra float32 rows")
    ap.add_argument("--run-dir", default="/tmp/run_default", help="'serve': the trained dates run")
    ap.add_argument("--serve-fra-run-dir", default="",
                    help="'serve': an English-French run (default: trained briefly)")
    ap.add_argument("--serve-rounds", type=int, default=None,
                    help="'serve': rounds, each engine once per round in its own process "
                         "(default 5; quick 1)")
    ap.add_argument("--serve-batches", type=_list(int),
                    default=None, help="'serve': batch sizes (default 1,32; quick 1,2)")
    ap.add_argument("--serve-engines", type=_list(),
                    default=None, help="'serve': engines to time (default: all; "
                    f"{', '.join(REFERENCE_ENGINES)} always)")
    ap.add_argument("--serve-models", type=_list(),
                    default=["dates", "fra"], help="'serve': models (default: dates,fra)")
    ap.add_argument("--note", default="", help="free text for the results (machine state, ...)")
    ap.add_argument("--render", metavar="JSON", default=None,
                    help="only rewrite --md from an existing results file")
    ap.add_argument("--json", default="", help="results file (default: bench.json in a new "
                    "research/results/ folder)")
    ap.add_argument("--md", default="", help="Markdown table (default: bench.md beside --json)")
    args = ap.parse_args(argv)
    bad = sorted(set(args.sections) - set(SECTIONS))
    if bad:
        ap.error(f"unknown sections {bad}; choose from {','.join(SECTIONS)}")
    for name, quick, full in (("repeats", 3, 9), ("warmup", 1, 2), ("serve_rounds", 1, 5),
                              ("serve_batches", [1, 2], [1, 32])):
        if getattr(args, name) is None:
            setattr(args, name, quick if args.quick else full)
    engines = set(ENGINES if args.serve_engines is None else args.serve_engines)
    if engines - set(ENGINES):
        ap.error(f"unknown --serve-engines {sorted(engines - set(ENGINES))}; "
                 f"choose from {','.join(ENGINES)}")
    # the references (ratios, agreement) and the int8 yardstick where int8 is timed
    engines |= set(REFERENCE_ENGINES) | (
        {"ctranslate2_int8"} if any(e.endswith("int8") for e in engines) else set())
    args.serve_engines = [e for e in ENGINES if e in engines]
    if set(args.serve_models) - {"dates", "fra"}:
        ap.error(f"--serve-models: dates and/or fra. Received: {','.join(args.serve_models)}")
    return args


def main(argv=None):
    args = parse_args(argv)
    if not args.json and not args.render:
        args.json = os.path.join(fresh_dir("bench"), "bench.json")
    args.md = args.md or os.path.splitext(args.json or args.render)[0] + ".md"
    if args.render:
        with open(args.render) as f:
            results = json.load(f)
        if args.note:
            results["note"] = args.note
        _write(args.md, markdown(results))
        log(f"wrote {args.md}")
        return results
    common.configure_threads(args.threads)
    results = {"created": datetime.datetime.now().isoformat(timespec="seconds"),
               "command": " ".join(sys.argv), "quick": args.quick, "clock": args.clock,
               "threads": args.threads, "repeats": args.repeats, "warmup": args.warmup,
               "note": args.note, "machine": common.machine_info()}
    results["peak"] = common.matmul_peak(1024 if args.quick else 4096, args.repeats,
                                         args.warmup, args.clock)
    log(f"float32 matmul peak: {results['peak']['gflops']} GFLOP/s; "
        f"load average {results['machine'].get('load_average')}")
    results["sections"] = {}
    for name in args.sections:
        log(f"[{name}]")
        results["sections"][name] = RUNNERS[name](args, results["peak"])
    if hasattr(os, "getloadavg"):
        results["machine"]["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    _write(args.json, json.dumps(results, indent=2))
    _write(args.md, markdown(results))
    log(f"wrote {args.json} and {args.md}")
    return results


def _write(path, content):
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        f.write(content + "\n")
