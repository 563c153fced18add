"""keras_attn's package surface: every public submodule reachable as an attribute."""
import subprocess
import sys

import pytest

from tests.support import guards
import keras_attn

CHECK = """
import sys
import keras_attn as ka
assert "tensorflow" not in sys.modules, "import keras_attn imported TensorFlow"
assert "keras" not in sys.modules, "import keras_attn imported Keras"
for name in ka.SUBMODULES:
    module = getattr(ka, name)
    assert module.__name__ == "keras_attn." + name, module.__name__
print("reached", len(ka.SUBMODULES))
"""


@pytest.mark.heavy  # imports every module in a fresh interpreter
def test_every_submodule_is_an_attribute_in_a_fresh_interpreter():
    out = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True,
                         timeout=guards.timeout(10))
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"reached {len(keras_attn.SUBMODULES)}" in out.stdout


def test_the_promised_submodules_are_listed():
    promised = {"ops", "layers", "models", "schedules", "losses", "text", "data", "decoding",
                "export", "viz"}
    assert promised <= set(keras_attn.SUBMODULES) | set(keras_attn.MOVED)
    assert promised <= set(dir(keras_attn))
    assert keras_attn.losses.__name__ == "keras_attn.training.losses"  # moved, still reachable


def test_unknown_attribute_raises_attribute_error():
    try:
        keras_attn.not_a_module
    except AttributeError as e:
        assert "not_a_module" in str(e)
    else:
        raise AssertionError("keras_attn.not_a_module did not raise AttributeError")


def test_no_private_keras_imports_in_the_package():
    import pathlib

    root = pathlib.Path(keras_attn.__file__).parent
    offenders = [str(p.relative_to(root)) for p in root.rglob("*.py")
                 if "keras.src" in p.read_text(encoding="utf-8")]
    assert offenders == [], f"keras.src used in {offenders}"
