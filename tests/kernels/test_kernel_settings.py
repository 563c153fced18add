"""The kernel settings a CI pass names are the ones in force.

CI reruns the ``kernels``-marked tests under other CPUs' kernels by environment variables
(``.ci/run``); a variable that TensorFlow ignored would make such a pass check nothing new.
"""
import os
import subprocess
import sys

import pytest

from tests.support import guards

pytestmark = pytest.mark.kernels

ONEDNN_ON = "oneDNN custom operations are on"


def test_onednn_setting_is_in_force():
    """``TF_ENABLE_ONEDNN_OPTS=1`` turns TensorFlow's oneDNN ops on (also on a CPU without
    AVX-512, where the default is off); ``0`` turns them off. TensorFlow says which in its
    first log line."""
    wanted = os.environ.get("TF_ENABLE_ONEDNN_OPTS")
    if wanted not in ("0", "1"):
        pytest.skip("TF_ENABLE_ONEDNN_OPTS is not set: TensorFlow chooses by the CPU")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="0")
    proc = subprocess.run([sys.executable, "-c", "import tensorflow"], capture_output=True,
                          text=True, env=env, timeout=guards.timeout(10))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (ONEDNN_ON in proc.stderr) == (wanted == "1"), proc.stderr[-2000:]
