#!/usr/bin/env python
"""Draw every attention map of a trained translator for one sentence.

    python scripts/plot_attention.py RUN_DIR "le 3 mars 2021" --out docs/figures
    python scripts/plot_attention.py RUN_DIR "le 3 mars 2021" --out docs/figures --docs

Writes ``<out>/<name>_encoder_self.png``, ``..._decoder_self.png`` and
``..._decoder_cross.png`` (a Bahdanau run: only ``..._decoder_cross.png``); ``--docs`` also
writes ``positional_encoding.png`` and ``schedules.png``.
"""
import argparse
import os


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", help="training run directory (config.json, model.keras)")
    parser.add_argument("sentence", help="source sentence to translate and draw")
    parser.add_argument("--out", default=".", help="output folder (default: .)")
    parser.add_argument("--name", default=None,
                        help="file name prefix (default: the run directory's name)")
    parser.add_argument("--padding", type=int, default=2,
                        help="padding positions appended to the source (default: 2)")
    parser.add_argument("--docs", action="store_true",
                        help="also draw the positional encoding and the learning-rate schedules")
    args = parser.parse_args(argv)

    from keras_attn import viz  # noqa: PLC0415  (after --help, which needs no TensorFlow)
    from keras_attn.translator import Translator  # noqa: PLC0415

    name = args.name or os.path.basename(os.path.normpath(args.run_dir))
    prefix = os.path.join(args.out, name)
    translation, figures = viz.plot_translation_attention(
        Translator.from_run_dir(args.run_dir), args.sentence, prefix, args.padding)
    print(f"{args.sentence!r} -> {translation!r}")
    for kind in figures:
        print(f"wrote {prefix}_{kind.replace('/', '_')}.png")
    if args.docs:
        for fn, file in ((viz.plot_positional_encoding, "positional_encoding.png"),
                         (viz.plot_schedules, "schedules.png")):
            fn(path=os.path.join(args.out, file))
            print(f"wrote {os.path.join(args.out, file)}")


if __name__ == "__main__":
    main()
