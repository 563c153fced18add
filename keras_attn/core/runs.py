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


def paths(run_dir):
    """Named paths inside a run directory."""
    return {
        "config": os.path.join(run_dir, "config.json"),
        "src_vocab": os.path.join(run_dir, "src_vocab.txt"),
        "tgt_vocab": os.path.join(run_dir, "tgt_vocab.txt"),
        "src_model": os.path.join(run_dir, "src.model"),
        "tgt_model": os.path.join(run_dir, "tgt.model"),
        "backup": os.path.join(run_dir, "backup"),
        "best": os.path.join(run_dir, "checkpoints", "best.weights.h5"),
        "logs": os.path.join(run_dir, "logs"),
        "csv": os.path.join(run_dir, "training_log.csv"),
        "model": os.path.join(run_dir, "model.keras"),
        "metrics": os.path.join(run_dir, "metrics.json"),
        # the confidence calibrator (keras_attn.training.calibration)
        "calibration": os.path.join(run_dir, "calibration.json"),
        "budget": os.path.join(run_dir, "budget.json"),
        "export": os.path.join(run_dir, "export"),
    }
