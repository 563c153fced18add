"""What the commands share on the console: TensorFlow imported quietly, ``--verbose``, a
progress bar on a terminal, and ``--data`` for the commands that read a run's corpus."""
import dataclasses
import importlib
import os
import re
import sys
import tempfile

# A C++ log line ("I0000 00:00:1795461471.834732    4177 port.cc:153] oneDNN custom ...")
# or absl's notice before them. TensorFlow writes some while it loads, before its log level
# applies, so they are dropped from stderr around the import.
_CPP_LOG_LINE = re.compile(r"[IWEF]\d{4} \d\d:\d\d:\d+\.\d+ +\d+ [^ \]]+:\d+\] "
                           r"|WARNING: All log messages before absl::InitializeLog\(\)")


def add_verbose(parser, default):
    parser.add_argument("--verbose", action="store_true", default=default,
                        help="show TensorFlow's C++ log lines (default: hidden, unless "
                             "TF_CPP_MIN_LOG_LEVEL is set)")


def quiet_tensorflow(verbose):
    """Import TensorFlow with its C++ log lines hidden (unless ``verbose``): the lines it
    writes while loading are filtered out of stderr, later ones hidden by
    ``TF_CPP_MIN_LOG_LEVEL`` 3 (unless the user set it)."""
    if verbose or "tensorflow" in sys.modules:
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    if os.environ["TF_CPP_MIN_LOG_LEVEL"] in ("", "0"):
        return
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            importlib.import_module("tensorflow")
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            for line in captured.read().decode("utf-8", "replace").splitlines(keepends=True):
                if not _CPP_LOG_LINE.match(line):
                    sys.stderr.write(line)
            sys.stderr.flush()


def progress_bar(label, stream=None, width=30):
    """A ``progress(done, total)`` callable drawing a bar on ``stream`` (default stderr).

    Returns None when the stream is not a terminal (a pipe or a log file gets no bar). Work
    done in one call (``done == total`` at the first report) draws nothing.

    Example:
        >>> report = progress_bar("translating")  # None when stderr is not a terminal
        >>> report and report(64, 128)            # "translating [===...   ] 64/128"
    """
    stream = stream or sys.stderr
    if not stream.isatty():
        return None
    drawn = False

    def report(done, total):
        nonlocal drawn
        if not drawn and done >= total:
            return
        drawn = True
        filled = width * done // max(total, 1)
        stream.write(f"\r{label} [{'=' * filled}{'.' * (width - filled)}] {done}/{total}")
        if done >= total:
            stream.write("\n")
        stream.flush()

    return report


def add_corpus_flags(p):
    """``--data`` and ``--target-data``: where a run's corpus is now, if it moved."""
    p.add_argument("--data", default=None,
                   help="the run's corpus where it is now, if it moved (default: the path "
                        "keras-attn train stored in the run's config.json)")
    p.add_argument("--target-data", default=None, metavar="FILE",
                   help="as --data, for a run trained on two aligned files: the target "
                        "side's file (default: the stored one)")


def corpus_config(args):
    """The run's :class:`~keras_attn.core.config.TrainConfig`, with ``--data`` and
    ``--target-data`` where given (a ValueError for a run without a corpus)."""
    from keras_attn.core import runs
    from keras_attn.core.config import TrainConfig

    config = TrainConfig.from_dict(runs.read_json(runs.paths(args.run_dir)["config"]))
    given = {k: getattr(args, k) for k in ("data", "target_data") if getattr(args, k)}
    if given and config.task == "dates":
        raise ValueError("--data and --target-data name a run's corpus; a dates run makes "
                         f"its own. Received: {given}")
    return dataclasses.replace(config, **given) if given else config
