"""The run directory: what a training run writes and what inference/export read back.

Layout of ``RUN_DIR``::

    config.json          every option of the run, vocabulary sizes, special ids
    src.model            source SentencePiece model (Tatoeba runs), or
    src_vocab.txt        source vocabulary (one token a line; id = line number)
    tgt.model            target SentencePiece model, or tgt_vocab.txt
    backup/              BackupAndRestore state (resume after an interruption)
    budget.json          a --time-budget run: training time spent at the last backup
    checkpoints/         best weights by validation loss
    logs/                TensorBoard logs;  training_log.csv: one row an epoch
    model.keras          the final model (also loadable without keras_attn's source)
    metrics.json         test-split results and sample translations
    calibration.json     the confidence's calibrator, fitted on the validation split
    export/              SavedModel and TFLite files (``keras-attn export``)
"""
import json
import os
import tempfile


def atomic_write_bytes(path, content):
    """Write ``content`` to ``path`` through :func:`atomic_save`: a reader never sees half a
    file, even if the process is killed mid-write."""
    def write(tmp):
        with open(tmp, "wb") as f:
            f.write(content)
            f.flush()
            os.fsync(f.fileno())

    atomic_save(path, write)


def atomic_write_text(path, text):
    """:func:`atomic_write_bytes` for UTF-8 text (newlines written as given)."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_save(path, save):
    """Call ``save(tmp)`` on a temporary path of its own beside ``path`` (same suffix), then
    rename it to ``path``; an error leaves any previous ``path`` intact."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=os.path.basename(path))
    os.close(fd)
    try:
        save(tmp)
        os.chmod(tmp, _default_file_mode())  # mkstemp makes it 0600; open() would not
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _default_file_mode():
    """The mode ``open(path, "w")`` gives a new file: 0o666 less the process umask."""
    umask = os.umask(0o022)
    os.umask(umask)
    return 0o666 & ~umask


def write_json(path, obj):
    atomic_write_text(path, json.dumps(obj, indent=2, ensure_ascii=False, sort_keys=True) + "\n")


def read_json(path):
    with open(path, encoding="utf-8") as f:
        try:
            return json.load(f)
        except json.JSONDecodeError as e:  # a ValueError that does not name the file
            raise ValueError(f"{path} is not valid JSON: {e}") from None


# Each named path inside a run directory (the module docstring says what each holds).
_PATHS = {"config": "config.json", "src_vocab": "src_vocab.txt", "tgt_vocab": "tgt_vocab.txt",
          "src_model": "src.model", "tgt_model": "tgt.model", "backup": "backup",
          "best": "checkpoints/best.weights.h5", "logs": "logs",
          "csv": "training_log.csv", "model": "model.keras", "metrics": "metrics.json",
          "calibration": "calibration.json", "budget": "budget.json", "export": "export"}


def paths(run_dir):
    """Named paths inside a run directory."""
    return {name: os.path.join(run_dir, *path.split("/")) for name, path in _PATHS.items()}
