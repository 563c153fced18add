#!/usr/bin/env python
"""Nadaraya–Watson kernel regression (D2L 11.2): average, non-parametric, parametric.

    python scripts/kernel_regression.py --out docs/figures

Prints the training loss of every epoch and writes ``<out>/kernel_regression_predictions.png``
and ``<out>/kernel_regression_attention.png``.
"""
import argparse
import os


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=".", help="output folder (default: .)")
    parser.add_argument("--epochs", type=int, default=5, help="SGD steps (default: 5)")
    parser.add_argument("--seed", type=int, default=0, help="data seed (default: 0)")
    args = parser.parse_args(argv)

    from keras_attn import viz  # noqa: PLC0415  (after --help, which needs no TensorFlow)

    prefix = os.path.join(args.out, "kernel_regression")
    result = viz.kernel_regression_demo(prefix, epochs=args.epochs, seed=args.seed)
    for name, mse in result["test_mse"].items():
        print(f"test MSE, {name}: {mse:.4f}")
    print(f"wrote {prefix}_predictions.png and {prefix}_attention.png")


if __name__ == "__main__":
    main()
