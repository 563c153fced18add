"""Distributed training: MirroredStrategy on logical CPU devices, two-process multi-worker.

Both run in subprocesses: logical devices and collective ops must be configured before
TensorFlow starts, which conftest (importing keras) has already done in this process.
"""
import json
import os
import socket
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow

TINY = ["--num-hiddens", "32", "--ffn-num-hiddens", "64", "--num-heads", "2",
        "--num-layers", "1", "--dropout", "0", "--batch-size", "64", "--num-train", "512",
        "--num-valid", "64", "--num-test", "16", "--warmup", "200", "--max-len", "48"]

# One process, two logical CPU devices: the same weights and global batches trained on one
# device and under MirroredStrategy must give the same losses.
MIRROR_SCRIPT = r'''
import json
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
import keras
from keras_attn import data, text, training

config = training.TrainConfig(num_hiddens=32, ffn_num_hiddens=64, num_heads=2, num_layers=1,
                              dropout=0.0, batch_size=64, warmup=200, label_smoothing=0.1,
                              max_len=48, num_train=512, num_valid=64, num_test=64)
splits = data.dates_splits(512, 64, 64, seed=0)
src = text.Tokenizer(text.char_vocab([s for s, _ in splits["train"]]))
tgt = text.Tokenizer(text.char_vocab([t for _, t in splits["train"]], extra_chars=""))
config.src_vocab_size, config.tgt_vocab_size = src.vocab_size, tgt.vocab_size
ds = data.make_dataset(splits["train"], src, tgt, 64, shuffle=False, bucket=False,
                       max_len=48).take(4).cache()
keras.utils.set_random_seed(0)
init = training.build_model(config)
init.predict(next(iter(ds))[0], verbose=0)
weights = init.get_weights()
out = {}
for name, strategy in [("single", tf.distribute.get_strategy()),
                       ("mirrored", training.make_strategy("mirrored", cpu_devices=2))]:
    with strategy.scope():
        model = training.compile_model(training.build_model(config), config, 4)
    model.predict(next(iter(ds))[0], verbose=0)
    model.set_weights(weights)
    before = model.evaluate(ds, verbose=0, return_dict=True)["loss"]
    fit = model.fit(ds, epochs=2, verbose=0).history["loss"]
    after = model.evaluate(ds, verbose=0, return_dict=True)["loss"]
    out[name] = {"replicas": strategy.num_replicas_in_sync, "before": before, "fit": fit,
                 "after": after}
print("RESULT " + json.dumps(out))
'''


def _env():
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    env.pop("TF_CONFIG", None)
    return env


def test_mirrored_loss_matches_single_device(tmp_path):
    proc = subprocess.run([sys.executable, "-c", MIRROR_SCRIPT], cwd=tmp_path, env=_env(),
                          capture_output=True, text=True, timeout=150)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(l for l in proc.stdout.splitlines() if l.startswith("RESULT "))
    out = json.loads(line[len("RESULT "):])
    print(out)
    single, mirrored = out["single"], out["mirrored"]
    assert (single["replicas"], mirrored["replicas"]) == (1, 2)
    # Forward only: the same batches, so the same mean (not num_replicas times it).
    assert mirrored["before"] == pytest.approx(single["before"], rel=1e-4)
    # After training steps: the mean of per-replica token means equals the global token
    # mean only up to how tokens split across replicas, so a loose tolerance.
    assert mirrored["fit"] == pytest.approx(single["fit"], rel=1e-2)
    assert mirrored["after"] == pytest.approx(single["after"], rel=1e-2)
    assert mirrored["after"] < mirrored["before"]


def _free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def test_multiworker_two_processes(tmp_path):
    run_dir = tmp_path / "run"
    workers = [f"127.0.0.1:{port}" for port in _free_ports(2)]
    procs = []
    try:
        for index in range(2):
            env = _env()
            env["TF_CONFIG"] = json.dumps({"cluster": {"worker": workers},
                                           "task": {"type": "worker", "index": index}})
            log = open(tmp_path / f"worker{index}.log", "w")
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "keras_attn.cli", "train", "--distribute", "multiworker",
                 *TINY, "--steps", "3", "--output", str(run_dir), "--no-export"],
                cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT))
        codes = [p.wait(timeout=150) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    logs = [(tmp_path / f"worker{i}.log").read_text()[-3000:] for i in range(2)]
    assert codes == [0, 0], logs
    assert "2 replicas" in logs[0] and "worker 1" in logs[1]
    # The chief (worker 0) wrote the run; worker 1 only its temp dir, without results.
    for name in ("metrics.json", "training_log.csv", "checkpoints/best.weights.h5", "logs"):
        assert (run_dir / name).exists(), name
    worker_dir = run_dir / ".worker-1"
    assert worker_dir.is_dir()
    for name in ("metrics.json", "training_log.csv", "checkpoints", "logs", "model.keras"):
        assert not (worker_dir / name).exists(), name
    assert json.loads((run_dir / "metrics.json").read_text())["task"] == "dates"
