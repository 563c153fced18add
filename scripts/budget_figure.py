#!/usr/bin/env python
"""BLEU against wall minutes: budgeted English→French runs beside the KerasHub recipe.

Ours: one point per run directory trained with ``--time-budget`` (its ``metrics.json``: the
budget, BLEU as written and D2L-normalised on dev.txt). ``RUN:SCORES.json`` takes the scores
from ``keras-attn evaluate RUN``'s output instead, for a short budget whose metrics cover
only the test sentences its time allowed. The KerasHub keras.io recipe: the
points ``benchmarks.kerashub_recipe`` recorded along its training (wall minutes of training;
its output is lower case, so only its D2L-normalised BLEU compares).

Usage:
    keras-attn evaluate runs/fra5 > fra5_scores.json
    python scripts/budget_figure.py runs/fra5:fra5_scores.json runs/fra20 runs/fra60 \\
        --kerashub research/kerashub_recipe_2.json --output budget_bleu.png
"""
import argparse
import json
import os


def our_points(run_dirs):
    """``[(minutes, bleu, bleu_d2l)]`` of budgeted runs, by budget."""
    points = []
    for arg in run_dirs:
        run_dir, _, scores_file = arg.partition(":")
        with open(os.path.join(run_dir, "metrics.json"), encoding="utf-8") as f:
            metrics = json.load(f)
        budget = metrics.get("budget", {}).get("time_budget")
        if not budget:
            raise SystemExit(f"{run_dir}: not trained with --time-budget (metrics.json has no "
                             "budget)")
        if scores_file:
            with open(scores_file, encoding="utf-8") as f:
                metrics = json.load(f)
        points.append((budget / 60, metrics["bleu"], metrics["bleu_d2l"]))
    return sorted(points)


def plot(ours, kerashub, output, title):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    minutes = [p[0] for p in ours]
    ax.plot(minutes, [p[1] for p in ours], "o-", color="C0", label="keras_attn (as written)")
    ax.plot(minutes, [p[2] for p in ours], "o--", color="C0", alpha=0.6,
            label="keras_attn (D2L-normalised)")
    for k, (minutes_, bleu) in enumerate(kerashub):
        ax.plot(minutes_, bleu, "s:", color=f"C{k + 1}",
                label="KerasHub keras.io recipe (D2L-normalised)"
                + (f", run {k + 1}" if len(kerashub) > 1 else ""))
    ax.set_xlabel("wall minutes (ours: the whole budget; KerasHub: training so far)")
    ax.set_ylabel("BLEU on dev.txt (2,000 sentences)")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(output, dpi=120)
    plt.close(fig)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("runs", nargs="+",
                   help="run directories trained with --time-budget, each RUN or RUN:SCORES.json")
    p.add_argument("--kerashub", action="append", default=[], metavar="JSON",
                   help="benchmarks.kerashub_recipe's record (repeatable)")
    p.add_argument("--title", default="English → French on a 2-core CPU")
    p.add_argument("--output", required=True, help="the PNG to write")
    args = p.parse_args(argv)
    theirs = []
    for path in args.kerashub:
        with open(path, encoding="utf-8") as f:
            record = json.load(f)["points"]
        theirs.append(([r["train_minutes"] for r in record], [r["bleu_d2l"] for r in record]))
    plot(our_points(args.runs), theirs, args.output, args.title)
    print(args.output)


if __name__ == "__main__":
    main()
