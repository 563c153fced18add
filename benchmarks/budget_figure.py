"""BLEU against wall minutes: our budgeted English->French runs beside the KerasHub recipe.

Ours: one point per run directory trained with ``--time-budget`` (its ``metrics.json``: the
budget in minutes, BLEU as written and D2L-normalised on dev.txt). The KerasHub recipe: the
points that :mod:`benchmarks.kerashub_recipe` scored along its training (wall minutes of
training so far; its output is lower case, so only its D2L-normalised BLEU is comparable).

Example:
    python -m benchmarks.budget_figure runs/fra15 runs/fra30 runs/fra60 \\
        --series "dropout 0=runs/fra60_d0" \\
        --kerashub "run 1=docs/benchmarks/kerashub_recipe.json" \\
        --kerashub "run 2=docs/benchmarks/kerashub_recipe_2.json" \\
        --output docs/figures/budget_bleu.png
"""
import argparse
import json
import os

from benchmarks.results import fresh_dir

LABEL = "keras_attn, --time-budget"  # the legend of runs given without a label
KERASHUB = "KerasHub keras.io recipe"


def our_points(run_dirs):
    """``[(minutes, bleu, bleu_d2l, run_dir)]`` of budgeted runs, by budget."""
    points = []
    for run_dir in run_dirs:
        with open(os.path.join(run_dir, "metrics.json"), encoding="utf-8") as f:
            metrics = json.load(f)
        budget = metrics.get("budget", {}).get("time_budget")
        if not budget:
            raise ValueError(f"{run_dir} was not trained with --time-budget (no budget in "
                             "metrics.json)")
        points.append((budget / 60, metrics["bleu"], metrics["bleu_d2l"], run_dir))
    return sorted(points)


def kerashub_points(path):
    """``[(minutes, bleu_d2l)]`` along the recipe's training."""
    with open(path, encoding="utf-8") as f:
        record = json.load(f)
    return [(p["train_minutes"], p["bleu_d2l"]) for p in record["points"]]


def plot(ours, kerashub, output, title=""):
    """Draw the figure. ``ours``: the points of :func:`our_points`, or a list of
    ``(label, points)`` series (one colour each: as written solid, D2L-normalised dashed).
    ``kerashub``: the points of :func:`kerashub_points`, or a list of ``(label, points)``
    (one run of the recipe each)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if ours and not isinstance(ours[0][0], str):
        ours = [(LABEL, ours)]
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for k, (label, points) in enumerate(ours):
        x = [p[0] for p in points]
        color = f"C{k}"
        ax.plot(x, [p[1] for p in points], "o-", color=color, label=f"{label} (as written)")
        ax.plot(x, [p[2] for p in points], "o--", color=color, alpha=0.6,
                label=f"{label} (D2L-normalised)")
    if kerashub and not isinstance(kerashub[0][0], str):
        kerashub = [("", kerashub)]
    for k, (label, points) in enumerate(kerashub):
        name = f"{KERASHUB}, {label}" if label else KERASHUB
        ax.plot([p[0] for p in points], [p[1] for p in points], "s:v:^:"[2 * k % 6:][:2],
                color=f"C{len(ours) + k}",  # the colours after our series'
                label=f"{name} (D2L-normalised)")
    ax.set_xlabel("wall minutes (ours: the whole budget; KerasHub: training so far)")
    ax.set_ylabel("BLEU on dev.txt (2,000 sentences)")
    ax.set_title(title or "English -> French on a 2-core CPU")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
    fig.savefig(output, dpi=120)
    plt.close(fig)
    return output


def parse_series(text):
    """``"LABEL=DIR[,DIR...]"`` -> ``(label, [dirs])``."""
    label, sep, dirs = text.partition("=")
    if not sep or not label or not dirs:
        raise argparse.ArgumentTypeError(f"expected LABEL=DIR[,DIR...], got {text!r}")
    return label, dirs.split(",")


def parse_kerashub(text):
    """``"[LABEL=]PATH"`` -> ``(label, path)`` (label "" when none)."""
    label, sep, path = text.rpartition("=")
    if sep and not path:
        raise argparse.ArgumentTypeError(f"expected [LABEL=]PATH, got {text!r}")
    return label, path


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="*", help="run directories trained with --time-budget")
    p.add_argument("--label", default=LABEL,
                   help="the legend of the runs given as arguments (default: %(default)s)")
    p.add_argument("--series", type=parse_series, action="append", default=[],
                   metavar="LABEL=DIR[,DIR...]",
                   help="another series of budgeted runs (repeatable)")
    p.add_argument("--kerashub", type=parse_kerashub, action="append", default=[],
                   metavar="[LABEL=]PATH",
                   help="benchmarks.kerashub_recipe's JSON (repeatable: one run each)")
    p.add_argument("--title", default="")
    p.add_argument("--output", default="",
                   help="PNG (default: budget_bleu.png in a new benchmarks/results/ folder)")
    args = p.parse_args(argv)
    args.output = args.output or os.path.join(fresh_dir("budget_figure"), "budget_bleu.png")
    series = [(args.label, args.runs)] if args.runs else []
    series = [(label, our_points(dirs)) for label, dirs in series + args.series]
    theirs = [(label, kerashub_points(path)) for label, path in args.kerashub]
    print(plot(series, theirs, args.output, args.title))


if __name__ == "__main__":
    main()
