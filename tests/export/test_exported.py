"""The committed artefacts in exported/ translate held-out dates.

The SavedModel is loaded in a subprocess that imports only TensorFlow; the builtin-ops
TFLite target is driven by the reference Python loop; the one-file text TFLite target is
run with tensorflow-text's kernels. Float32 artefacts must agree with one another on 200
test dates and int8 may lose at most one point of exact match.
"""
import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from tests.support import guards
from keras_attn import data, export
from keras_attn.text import tokenizers as text

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXPORTED = ROOT / "exported"
N = 200

pytestmark = pytest.mark.skipif(not (EXPORTED / "saved_model" / "translator" / "1").exists(),
                                reason="exported/ artefacts are missing")


@pytest.fixture(scope="module")
def test_pairs():
    metrics = json.loads((EXPORTED / "metrics.json").read_text())
    assert metrics["task"] == "dates"
    # The default run's splits (training.TASK_DEFAULTS["dates"], seed 0).
    return data.dates_splits(30000, 1000, 2000, seed=0)["test"][:N]


def exact(outputs, pairs):
    return float(np.mean([o == t for o, (_, t) in zip(outputs, pairs)]))


@pytest.fixture(scope="module")
def saved_model_outputs(test_pairs, tmp_path_factory):
    inputs = tmp_path_factory.mktemp("sm") / "inputs.json"
    inputs.write_text(json.dumps([s for s, _ in test_pairs]))
    code = (
        "import json, sys\n"
        "sys.modules['keras_attn'] = None  # prove the SavedModel does not need it\n"
        "import tensorflow as tf\n"
        f"m = tf.saved_model.load({str(EXPORTED / 'saved_model' / 'translator' / '1')!r})\n"
        f"texts = json.load(open({str(inputs)!r}))\n"
        "out = m.signatures['serving_default'](text=tf.constant(texts))\n"
        "print(json.dumps([t.decode() for t in out['translation'].numpy().tolist()]))\n"
    )
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=guards.timeout(15))
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_saved_model_translates_held_out_dates(saved_model_outputs, test_pairs):
    assert exact(saved_model_outputs, test_pairs) >= 0.98


def test_text_tflite_matches_saved_model(saved_model_outputs, test_pairs):
    out = export.run_tflite_text(str(EXPORTED / "tflite" / "text_float32.tflite"),
                                 [s for s, _ in test_pairs])
    outputs = [t.decode() for t in out["translation"].tolist()]
    assert outputs == saved_model_outputs


def _builtin(quantization, test_pairs):
    folder = EXPORTED / "tflite" / f"builtin_{quantization}"
    assert sorted(os.listdir(folder)) == [
        "decoder_step.tflite", "encoder.tflite", "metadata.json", "src_vocab.txt",
        "tgt_vocab.txt"]
    tok = text.Tokenizer.from_file(str(folder / "src_vocab.txt"))
    tgt = text.Tokenizer.from_file(str(folder / "tgt_vocab.txt"))
    ids = tok.tokenize(tf.constant([s for s, _ in test_pairs]))
    source = data.prepare_source(tf.cast(ids, tf.int32), 48).to_tensor(0).numpy()
    out = export.run_tflite_builtin(str(folder), source)
    assert np.isfinite(out["log_prob"]).all()
    for row, n in zip(out["tokens"], out["lengths"]):  # padding after the length, only there
        assert 0 < n <= len(row) and not row[n:].any() and row[:n].all()
    return [t.decode() for t in tgt.detokenize(out["tokens"]).numpy().tolist()]


def test_builtin_tflite_loop_matches_saved_model(saved_model_outputs, test_pairs):
    assert _builtin("float32", test_pairs) == saved_model_outputs


def test_int8_loses_at_most_one_point(saved_model_outputs, test_pairs):
    reference = exact(saved_model_outputs, test_pairs)
    text_int8 = export.run_tflite_text(str(EXPORTED / "tflite" / "text_int8.tflite"),
                                       [s for s, _ in test_pairs])
    assert np.isfinite(text_int8["score"]).all()
    text_int8 = [t.decode() for t in text_int8["translation"].tolist()]
    assert exact(text_int8, test_pairs) >= reference - 0.01
    assert exact(_builtin("int8", test_pairs), test_pairs) >= reference - 0.01


def test_int8_files_store_a_byte_per_weight():
    """int8 keeps 1 byte of a weight's 4: the text file (whose decoding graph and tokenizers
    are not quantized) saves more than half of the weights' float32 bytes, the builtin
    files shrink below 60 %."""
    import keras

    model = keras.models.load_model(str(EXPORTED / "run" / "model.keras"), compile=False)
    weights = 4 * model.count_params()
    tflite = EXPORTED / "tflite"

    def size(path):
        return (sum(p.stat().st_size for p in path.iterdir()) if path.is_dir()
                else path.stat().st_size)

    assert size(tflite / "text_float32.tflite") - size(tflite / "text_int8.tflite") > 0.5 * weights
    assert size(tflite / "builtin_int8") < 0.6 * size(tflite / "builtin_float32")


def test_builtin_files_have_no_flex_or_custom_ops():
    for q in ("float32", "int8"):
        for name in ("encoder.tflite", "decoder_step.tflite"):
            export.check_builtin_only((EXPORTED / "tflite" / f"builtin_{q}" / name).read_bytes())


def test_text_files_have_no_flex_ops():
    """Builtins and tensorflow-text's TFLite kernels only: what a phone app links."""
    for q in ("float32", "int8"):
        ops = export.check_text_ops((EXPORTED / "tflite" / f"text_{q}.tflite").read_bytes())
        assert ops["flex"] == [] and set(ops["custom"]) <= export.TFTEXT_TFLITE_OPS


def test_saved_model_ops_run_on_stock_tf_serving():
    ops = set(export.saved_model_ops(str(EXPORTED / "saved_model" / "translator" / "1")))
    assert not [op for op in ops if op.startswith("Xla")]
    assert sorted(ops - export.serving_allowlist()) == []


def test_exported_is_small_and_documented():
    # A budget that keeps the repository light (26.4 MB now: every signature's graph holds
    # its decoders and the confidence's teacher-forced pass; research/NOTES.md).
    total = sum(p.stat().st_size for p in EXPORTED.rglob("*") if p.is_file())
    assert total < 30e6
    for name in ("README.md", "metrics.json", "export_report.json"):
        assert (EXPORTED / name).exists()
    assert json.loads((EXPORTED / "metrics.json").read_text())["exact_match"] >= 0.99
