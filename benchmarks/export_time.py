"""How long ``keras-attn export RUN`` takes, in all and per artefact (issue 72).

Each repeat is the command in a fresh process (imports included, nothing kept from an earlier
export), into a new folder; the breakdown is its ``export_report.json``'s ``seconds``: the
tracing and staging each TFLite target shares, the SavedModel, each file's conversion (in
worker processes), the sample check, and the CPU seconds of the exporting process and of the
conversions. The table shows the medians over ``--repeats``.

    python -m benchmarks.export_time exported/run runs/fra60 --repeats 3
"""
import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from benchmarks.results import add_output_args, run_and_write
from benchmarks.timing import cpu_info


def export_once(run_dir, workers):
    """One ``keras-attn export`` of ``run_dir`` in a new process: its wall seconds and
    report's ``seconds``, with every artefact's."""
    folder = tempfile.mkdtemp(prefix="export-time-")
    try:
        command = [sys.executable, "-m", "keras_attn.cli", "export", run_dir, "--export-dir",
                   folder, "--workers", str(workers)]
        began = time.monotonic()
        subprocess.run(command, check=True, capture_output=True,
                       env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
        wall = time.monotonic() - began
        with open(os.path.join(folder, "export_report.json")) as f:
            report = json.load(f)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return {"command": round(wall, 2), **report["seconds"],
            "artefacts": {"saved_model": report["saved_model"]["seconds"],
                          **{k: v["seconds"] for k, v in report["tflite"].items()}}}


def run(args, log=print):
    model, flags = cpu_info()
    results = {"machine": {"cpu": model or platform.machine(), "cores": os.cpu_count(),
                           "avx512": "avx512f" in flags, "load": os.getloadavg()[0]},
               "workers": args.workers, "runs": {}}
    for run_dir in args.run_dirs:
        repeats = []
        for i in range(args.repeats):
            repeats.append(export_once(run_dir, args.workers))
            log(f"{run_dir} #{i + 1}: {repeats[-1]['command']:.1f} s "
                f"(export {repeats[-1]['total']:.1f} s)")
        results["runs"][run_dir] = {"repeats": repeats, "median": {
            key: round(statistics.median(r[key] for r in repeats), 2)
            for key in ("command", "total", "saved_model", "samples", "cpu", "workers_cpu")}}
    return results


def markdown(results):
    lines = ["| run | command | export | SavedModel | traced and staged | converted (per file) |"
             " samples | CPU here / converting |", "| --- | " + "---: | " * 7]
    for run_dir, res in results["runs"].items():
        m, last = res["median"], res["repeats"][-1]
        staged = ", ".join(f"{k} {v:.1f}" for k, v in last["trace_and_stage"].items())
        converted = ", ".join(f"{k} {v:.1f}" for k, v in last["convert"].items())
        lines.append(f"| {run_dir} | {m['command']:.1f} | {m['total']:.1f} | "
                     f"{m['saved_model']:.1f} | {staged} | {converted} | {m['samples']:.1f} | "
                     f"{m['cpu']:.0f} / {m['workers_cpu']:.0f} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("run_dirs", nargs="+", help="run directories (exported/run: the dates "
                    "model committed)")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--workers", default="auto", help="conversion processes (0: none)")
    add_output_args(ap, "export_time")
    return run_and_write(ap.parse_args(argv), run, markdown)


if __name__ == "__main__":
    sys.exit(main())
