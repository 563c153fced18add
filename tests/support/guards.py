"""Hang guards for child processes in tests, scaled to the machine."""
import os


def timeout(expected_seconds):
    """A hang guard for a child process expected to take ``expected_seconds`` on an idle
    2-core machine: ten times that, times the machine's load per core (at least 1), times
    ``KERAS_ATTN_TEST_TIMEOUT_SCALE`` (default 1, for a machine known to be slower).

    It stops a child that hangs so the suite ends; it does not judge a slow one.
    """
    try:
        load = os.getloadavg()[0] / (os.cpu_count() or 1)
    except OSError:  # no load average on this platform
        load = 1.0
    scale = float(os.environ.get("KERAS_ATTN_TEST_TIMEOUT_SCALE", "1"))
    return 10 * expected_seconds * max(1.0, load) * scale
