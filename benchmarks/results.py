"""Where a benchmark writes when no output is given: a new folder per run.

``benchmarks/results/<UTC date and time>-<name>/`` (ignored by git), so that running a
benchmark never overwrites the figures committed under ``docs/benchmarks/``; pass the
command's output option to write elsewhere.
"""
import datetime
import os

ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                    "benchmarks", "results")


def fresh_dir(name, root=ROOT):
    """A new, empty folder ``root/<YYYYmmdd-HHMMSS>-<name>`` (a suffix if taken)."""
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d-%H%M%S")
    base = os.path.join(root, f"{stamp}-{name}")
    path, n = base, 1
    while True:
        try:
            os.makedirs(path)
            return path
        except FileExistsError:
            n += 1
            path = f"{base}-{n}"
