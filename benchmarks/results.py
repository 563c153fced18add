"""Where a benchmark writes when no output is given: a new folder per run,
``research/results/<UTC date and time>-<random>-<name>/`` (ignored by git), never over the
measurements committed under ``research/``.
"""
import datetime
import json
import os
import tempfile

# Beside the research log, out of the documentation site; not committed until chosen.
ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                    "research", "results")


def fresh_dir(name, root=ROOT):
    """A new, empty folder ``root/<YYYYmmdd-HHMMSS>-<random>-<name>``."""
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d-%H%M%S")
    os.makedirs(root, exist_ok=True)
    return tempfile.mkdtemp(prefix=f"{stamp}-", suffix=f"-{name}", dir=root)


def add_output_args(parser, name):
    """``--name`` (default ``name``) and ``--out-dir`` (default: :func:`fresh_dir`)."""
    parser.add_argument("--name", default=name)
    parser.add_argument("--out-dir", default="", help="folder for NAME.json and NAME.md "
                        "(default: a new research/results/ folder)")


def run_and_write(args, run, markdown):
    """``run(args, log=print)``; ``NAME.json`` and ``NAME.md`` (``markdown(results)``, also
    printed) written into ``args.out_dir`` or a fresh folder named after ``args.name``."""
    results = run(args, log=lambda m: print(m, flush=True))
    out_dir = args.out_dir or fresh_dir(args.name)
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, args.name + ".json"), "w") as f:
        json.dump(results, f, indent=1)
    with open(os.path.join(out_dir, args.name + ".md"), "w") as f:
        f.write(text := markdown(results))
    print(text)
    return 0
