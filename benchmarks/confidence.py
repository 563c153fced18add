"""How well a run's confidence tells acceptable translations from the others.

On the run's test split (each source once, with all its references; for the dates task
also ``--extra-dates`` more held-out dates, never in any split, so that the few errors are
many enough to rank) every source is translated by ``Translator.translate_nbest`` with the
defaults (what ``serving_default`` decodes), and each confidence is compared with whether
the translation is acceptable (:func:`keras_attn.training.calibration.acceptable`: dates exact,
text sentence chrF >= 50): AUROC, expected calibration error (10 bins) and the reliability
table; then the confidences of :data:`benchmarks.repetition.ODD_INPUTS` (markup, code,
URLs, emoji, ...; for the dates model none is a date). Draws the reliability diagram.

Usage:
    python -m benchmarks.confidence exported/run --json docs/benchmarks/confidence_dates.json \\
        --md docs/benchmarks/confidence_dates.md --plot docs/figures/reliability_dates.png
"""
import argparse
import json
import sys
import time


def reliability_plot(rows, path):
    """A reliability diagram per task: mean confidence against share acceptable, per bin,
    with the bins' sizes; ``rows``: ``[(name, table)]`` of
    :func:`keras_attn.decoding.confidence.expected_calibration_error`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(rows), figsize=(4.2 * len(rows), 4.0), squeeze=False)
    for ax, (name, table, ece) in zip(axes[0], rows):
        ax.plot([0, 1], [0, 1], color="0.6", linestyle="--", linewidth=1, label="calibrated")
        conf = [r[3] for r in table]
        share = [r[4] for r in table]
        counts = [r[2] for r in table]
        ax.plot(conf, share, marker="o", color="C0", label=f"bins (ECE {ece:.3f})")
        for c, s, n in zip(conf, share, counts):
            ax.annotate(str(n), (c, s), textcoords="offset points", xytext=(4, -10), fontsize=7)
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1.02)
        ax.set_xlabel("confidence (bin mean)")
        ax.set_ylabel("share acceptable")
        ax.set_title(name, fontsize=10)
        ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir")
    parser.add_argument("--extra-dates", type=int, default=20000,
                        help="dates task: more held-out dates beyond every split")
    parser.add_argument("--json", default="")
    parser.add_argument("--md", default="")
    parser.add_argument("--plot", default="")
    args = parser.parse_args(argv)

    import numpy as np

    from benchmarks.repetition import ODD_INPUTS
    from keras_attn import data
    from keras_attn.training import calibration
    from keras_attn.core import runs
    from keras_attn.training import recipes as training
    from keras_attn.core.config import TrainConfig
    from keras_attn.decoding.confidence import auroc, expected_calibration_error
    from keras_attn.translator import Translator

    translator = Translator.from_run_dir(args.run_dir)
    config = TrainConfig.from_dict(runs.read_json(runs.paths(args.run_dir)["config"]))
    splits, refs = training.load_splits(config, log=lambda *a: None)
    sets = {}
    if refs is not None:
        sets["test"] = ([s for s, _ in splits["test"]], refs)
    else:
        sets["test"] = calibration.grouped(splits["test"])
    if config.task == "dates" and args.extra_dates:
        seen = len(splits["train"])
        more = data.dates_splits(config.num_train + args.extra_dates, config.num_valid,
                                 config.num_test, seed=config.seed)["train"][seen:]
        sets["test + extra dates"] = calibration.grouped(splits["test"] + more)
    record = {"run_dir": args.run_dir, "task": config.task,
              "calibration": translator.calibrator.report, "sets": {}}
    plot_rows, lines = [], []
    for name, (sources, references) in sets.items():
        t0 = time.time()
        hyps = [h[0] for h in translator.translate_nbest(sources)]
        conf = np.array([h["confidence"] for h in hyps])
        y = calibration.acceptable(config.task, [h["translation"] for h in hyps], references)
        ece, table = expected_calibration_error(conf, y)
        row = {"num": len(sources), "acceptable_share": round(float(y.mean()), 4),
               "auroc": round(auroc(conf, y), 4), "ece": round(ece, 4),
               "mean_confidence": round(float(conf.mean()), 4),
               "reliability": [[round(v, 4) if isinstance(v, float) else v for v in r]
                               for r in table],
               "seconds": round(time.time() - t0, 1)}
        record["sets"][name] = row
        plot_rows.append((f"{config.task}: {name} ({len(sources)})", table, ece))
        print(f"{name}: {len(sources)} sentences, acceptable {row['acceptable_share']:.3f}, "
              f"AUROC {row['auroc']:.3f}, ECE {row['ece']:.3f}", flush=True)
    odd = [h[0] for h in translator.translate_nbest(ODD_INPUTS)]
    record["odd"] = [{"source": s, "translation": h["translation"],
                      "confidence": round(h["confidence"], 4)} for s, h in zip(ODD_INPUTS, odd)]
    odd_conf = np.array([h["confidence"] for h in odd])
    record["odd_summary"] = {"num": len(odd), "below_0.1": int((odd_conf < 0.1).sum()),
                             "max": round(float(odd_conf.max()), 4),
                             "median": round(float(np.median(odd_conf)), 4)}
    print(f"odd inputs: {record['odd_summary']}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(record, f, indent=1, ensure_ascii=False)
            f.write("\n")
    if args.plot:
        reliability_plot(plot_rows, args.plot)
    if args.md:
        lines = [f"Run `{args.run_dir}` ({config.task}); calibrator fitted on "
                 f"{record['calibration'].get('num_valid')} validation sources and "
                 f"{record['calibration'].get('num_noise')} random-vocabulary sources "
                 f"(acceptable: {record['calibration'].get('acceptable')}).", "",
                 "| set | sentences | acceptable | AUROC | ECE | mean confidence |",
                 "| --- | --- | --- | --- | --- | --- |"]
        for name, row in record["sets"].items():
            lines.append(f"| {name} | {row['num']} | {row['acceptable_share']:.3f} | "
                         f"{row['auroc']:.3f} | {row['ece']:.3f} | {row['mean_confidence']:.3f} |")
        s = record["odd_summary"]
        lines += ["", f"Odd inputs ({s['num']}, benchmarks/repetition.py): {s['below_0.1']} "
                      f"with confidence below 0.1, median {s['median']:.3f}, max {s['max']:.3f}.",
                  "", "| odd input | translation | confidence |", "| --- | --- | --- |"]
        for r in record["odd"]:
            cell = lambda t: t.replace("|", "\\|").replace("\n", "\\n")  # noqa: E731
            lines.append(f"| {cell(r['source'])} | {cell(r['translation'])} | "
                         f"{r['confidence']:.3f} |")
        with open(args.md, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
