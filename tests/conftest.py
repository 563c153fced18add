"""Test-wide settings: quiet TensorFlow logs and a fixed seed for every test."""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402  (after the log level, so TensorFlow starts quiet)
import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _seed():
    """Seed Python, NumPy and TensorFlow so layer weights and dropout masks repeat."""
    keras.utils.set_random_seed(0)
