"""BLEU against wall minutes: our budgeted English->French runs beside the KerasHub recipe.

Ours: one point per run directory trained with ``--time-budget`` (its ``metrics.json``: the
budget in minutes, BLEU as written and D2L-normalised on dev.txt). The KerasHub recipe: the
points that :mod:`benchmarks.kerashub_recipe` scored along its training (wall minutes of
training so far; its output is lower case, so only its D2L-normalised BLEU is comparable).

Example:
    python -m benchmarks.budget_figure runs/fra15 runs/fra30 runs/fra60 \\
        --kerashub docs/benchmarks/kerashub_recipe.json --output docs/figures/budget_bleu.png
"""
import argparse
import json
import os


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
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    if ours:
        x = [p[0] for p in ours]
        ax.plot(x, [p[1] for p in ours], "o-", label="keras_attn, --time-budget (as written)")
        ax.plot(x, [p[2] for p in ours], "o--", label="keras_attn (D2L-normalised)")
    if kerashub:
        ax.plot([p[0] for p in kerashub], [p[1] for p in kerashub], "s:",
                label="KerasHub keras.io recipe (D2L-normalised)")
    ax.set_xlabel("wall minutes (ours: the whole budget; KerasHub: training so far)")
    ax.set_ylabel("BLEU on dev.txt (2,000 sentences)")
    ax.set_title(title or "English -> French on a 2-core CPU")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
    fig.savefig(output, dpi=120)
    plt.close(fig)
    return output


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="*", help="run directories trained with --time-budget")
    p.add_argument("--kerashub", default="", help="benchmarks.kerashub_recipe's JSON")
    p.add_argument("--title", default="")
    p.add_argument("--output", default="docs/figures/budget_bleu.png")
    args = p.parse_args(argv)
    ours = our_points(args.runs)
    theirs = kerashub_points(args.kerashub) if args.kerashub else []
    print(plot(ours, theirs, args.output, args.title))


if __name__ == "__main__":
    main()
