"""keras_attn.core.runs: the run directory's paths and its atomic writes.

Every file of a run directory is written through a temporary file and a rename
(``atomic_write_bytes`` / ``atomic_save``): a crash or an error while writing leaves the
previous file whole and no temporary file behind. JSON files are UTF-8 and read back with
errors that name the file.
"""
import json
import os

import keras
import pytest

from keras_attn.core import runs


# ----------------------------------------------------------------------------------------

from keras_attn.text import tokenizers as text
from keras_attn.training import recipes as training
# Atomic writes: a crash while writing leaves the previous file, and no partial file


def tiny_model(seed):
    keras.utils.set_random_seed(seed)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile("sgd", "mse")
    return model


def _write_best(path, seed, val_loss):
    callback = training.BestWeightsCheckpoint(str(path))
    callback.set_model(tiny_model(seed))
    callback.on_epoch_end(0, {"val_loss": val_loss})


WRITERS = {
    # name: (write(path, version), file name, function a crash mid-write happens in)
    "bytes (TFLite files)": (
        lambda p, v: runs.atomic_write_bytes(p, b"\x00version %d\r\n" % v), "model.tflite",
        (os, "fsync")),
    "config.json / metrics.json": (
        lambda p, v: runs.write_json(p, {"version": v}), "config.json", (os, "fsync")),
    "vocabulary": (
        lambda p, v: text.save_vocab(["[PAD]", "[UNK]", "[START]", "[END]", f"v{v}"], p),
        "src_vocab.txt", (os, "fsync")),
    "best checkpoint": (
        lambda p, v: _write_best(p, v, 1.0 / (v + 1)), "best.weights.h5",
        (keras.Model, "save_weights")),
    "model.keras": (  # what training does with the final model
        lambda p, v: runs.atomic_save(str(p), tiny_model(v).save), "model.keras",
        (keras.Model, "save")),
}


def _crash(*args, **kwargs):
    raise OSError("simulated crash")


def _partial_write_then_crash(self_or_fd, path=None, *args, **kwargs):
    if path is not None and not isinstance(path, int):
        with open(path, "wb") as f:  # half a file at the temporary path, then the crash
            f.write(b"PK\x03\x04 partial")
    raise OSError("simulated crash")


@pytest.mark.parametrize("crash", ["mid-write", "before rename"])
@pytest.mark.parametrize("name", list(WRITERS))
def test_crash_while_writing_keeps_the_previous_file(name, crash, tmp_path, monkeypatch):
    write, filename, (owner, attr) = WRITERS[name]
    path = tmp_path / filename
    write(path, 1)
    before = path.read_bytes()
    with monkeypatch.context() as m:
        if crash == "before rename":
            m.setattr(os, "replace", _crash)
        else:
            m.setattr(owner, attr, _partial_write_then_crash)
        with pytest.raises(OSError, match="simulated crash"):
            write(path, 2)
    assert path.read_bytes() == before  # the previous file, whole
    assert not [f for f in os.listdir(tmp_path) if ".tmp" in f]  # no temporary left
    write(path, 2)  # and without the crash the new version replaces it
    assert path.read_bytes() != before


def test_atomic_json_has_the_mode_of_a_plain_file(tmp_path):
    """The temporary file is made by mkstemp (mode 0600); the final file must get the
    mode open() gives, so another user can read a shared run directory."""
    runs.write_json(tmp_path / "config.json", {"a": 1})
    (tmp_path / "plain.json").write_text("{}")
    assert (os.stat(tmp_path / "config.json").st_mode & 0o777
            == os.stat(tmp_path / "plain.json").st_mode & 0o777)


# ----------------------------------------------------------------------------------------
# atomic_write_bytes / atomic_save on their own


def test_atomic_write_bytes_writes_the_bytes_and_nothing_else(tmp_path):
    path = tmp_path / "new" / "folder" / "model.tflite"  # folders made as needed
    content = bytes(range(256)) + b"\r\n\x00"
    runs.atomic_write_bytes(path, content)
    assert path.read_bytes() == content  # bytes as given: no newline translation
    runs.atomic_write_bytes(path, b"second")
    assert path.read_bytes() == b"second"
    assert os.listdir(path.parent) == ["model.tflite"]


def test_atomic_save_gives_save_a_temporary_path_of_the_same_suffix(tmp_path):
    path = tmp_path / "checkpoints" / "best.weights.h5"
    seen = []

    def save(tmp):
        seen.append(tmp)
        with open(tmp, "wb") as f:
            f.write(b"weights")

    runs.atomic_save(str(path), save)
    (tmp,) = seen
    assert tmp != str(path) and tmp.endswith(".weights.h5")  # Keras checks the suffix
    assert os.path.dirname(tmp) == str(path.parent)  # same folder: the rename is atomic
    assert path.read_bytes() == b"weights"
    assert os.listdir(path.parent) == ["best.weights.h5"]


@pytest.mark.parametrize("error", [ValueError("bad weights"), KeyboardInterrupt()],
                         ids=["ValueError", "KeyboardInterrupt"])
def test_atomic_save_error_removes_the_temporary_file(tmp_path, error):
    """Any exception, Ctrl-C included, leaves the previous file and no temporary file."""
    path = tmp_path / "model.keras"
    path.write_bytes(b"previous")

    def save(tmp):
        with open(tmp, "wb") as f:
            f.write(b"half a fi")
        raise error

    with pytest.raises(type(error)):
        runs.atomic_save(str(path), save)
    assert path.read_bytes() == b"previous"
    assert os.listdir(tmp_path) == ["model.keras"]


# ----------------------------------------------------------------------------------------
# JSON


def test_json_round_trip_keeps_non_ascii_text_readable(tmp_path):
    obj = {"source": "le 3 mars 2021 — été", "target": "日本",
           "ids": [2, 5, 3], "nested": {"straße": 0.5, "none": None}}
    path = tmp_path / "metrics.json"
    runs.write_json(path, obj)
    assert runs.read_json(path) == obj
    written = path.read_bytes().decode("utf-8")  # UTF-8 on every platform
    assert "été" in written and "\\u" not in written  # characters, not escapes
    assert written.endswith("\n")
    assert json.loads(written) == obj  # plain JSON: any reader can load it


@pytest.mark.parametrize("content", ["{not json", "", '{"a": 1} trailing'],
                         ids=["broken", "empty", "trailing"])
def test_read_json_of_invalid_json_names_the_file(tmp_path, content):
    path = tmp_path / "config.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ValueError) as info:
        runs.read_json(path)
    assert str(path) in str(info.value) and "not valid JSON" in str(info.value)


def test_read_json_of_a_missing_file_raises_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        runs.read_json(tmp_path / "config.json")


# ----------------------------------------------------------------------------------------
# paths()


LAYOUT = {  # name -> path inside the run directory (the module docstring's layout)
    "config": "config.json", "src_vocab": "src_vocab.txt", "tgt_vocab": "tgt_vocab.txt",
    "src_model": "src.model", "tgt_model": "tgt.model", "backup": "backup",
    "best": os.path.join("checkpoints", "best.weights.h5"), "logs": "logs",
    "csv": "training_log.csv", "model": "model.keras", "metrics": "metrics.json",
    "export": "export", "budget": "budget.json", "calibration": "calibration.json",
}


def test_paths_names_every_file_of_the_run_directory():
    run_dir = os.path.join("runs", "dates")
    assert runs.paths(run_dir) == {name: os.path.join(run_dir, rel)
                                   for name, rel in LAYOUT.items()}
    for rel in LAYOUT.values():  # and the module's documented layout lists each of them
        assert rel.split(os.sep)[0] in runs.__doc__, rel
