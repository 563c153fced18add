"""What the commands share on the console: TensorFlow imported quietly, ``--verbose``, and
a progress bar on a terminal."""
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
