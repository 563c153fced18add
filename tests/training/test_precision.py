"""``--mixed-precision auto``: the precision a run picks for its machine, and what it ships.

A mixed-precision run trains in bfloat16 or float16 but decodes, evaluates and exports in
float32: :func:`keras_attn.models.float32_model` rebuilds it under the float32 policy with
the same (float32) variables.
"""
import json

import keras
import numpy as np
import pytest

from keras_attn import cli, models
from keras_attn.training import precision

from tests.support import layer_checks as lc

AMX_CPU = {"avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"}
AVX2_CPU = {"sse4_2", "avx", "avx2", "fma"}


@pytest.mark.parametrize("name, flags, environ, has_gpu, policy", [
    ("auto", AMX_CPU, {}, False, "mixed_bfloat16"),
    ("auto", {"avx512f", "avx512_bf16"}, {}, False, "mixed_bfloat16"),
    ("auto", AVX2_CPU, {}, False, ""),
    ("auto", set(), {}, False, ""),  # not Linux, or /proc unreadable
    # oneDNN off or capped below AVX512_BF16: TensorFlow emulates bfloat16, float32 wins.
    ("auto", AMX_CPU, {"TF_ENABLE_ONEDNN_OPTS": "0"}, False, ""),
    ("auto", AMX_CPU, {"ONEDNN_MAX_CPU_ISA": "AVX2"}, False, ""),
    ("auto", AMX_CPU, {"ONEDNN_MAX_CPU_ISA": "avx512_core_amx"}, False, "mixed_bfloat16"),
    ("auto", AMX_CPU, {}, True, ""),
    # A policy given by name is kept whatever the machine.
    ("", AMX_CPU, {}, False, ""),
    ("mixed_bfloat16", AVX2_CPU, {}, False, "mixed_bfloat16"),
    ("mixed_float16", AVX2_CPU, {}, True, "mixed_float16"),
])
def test_auto_takes_bfloat16_only_where_the_cpu_computes_it(name, flags, environ, has_gpu,
                                                            policy):
    chosen, why = precision.resolve(name, flags=flags, environ=environ, has_gpu=has_gpu,
                                    backend="tensorflow")
    assert chosen == policy
    assert why  # the log line says why


@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_auto_keeps_float32_on_the_other_backends(backend):
    assert precision.resolve("auto", flags=AMX_CPU, environ={}, has_gpu=False,
                             backend=backend)[0] == ""


def test_cpu_flags_reads_the_first_processor(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nmodel name\t: Some CPU\n"
                       "flags\t\t: fpu avx2 amx_bf16\nprocessor\t: 1\nflags\t\t: fpu\n")
    assert precision.cpu_flags(str(cpuinfo)) == {"fpu", "avx2", "amx_bf16"}
    assert precision.cpu_flags(str(tmp_path / "missing")) == set()


CONFIG = dict(model="transformer", src_vocab_size=23, tgt_vocab_size=19, num_hiddens=32,
              ffn_num_hiddens=64, num_heads=4, num_layers=2, dropout=0.0, max_len=12)


@pytest.mark.parametrize("policy", ["mixed_bfloat16", "mixed_float16"])
def test_float32_model_computes_a_mixed_run_in_float32(policy):
    """The copy holds the same variables, computes every layer in float32 and gives what a
    float32 model with those weights gives; the mixed model differs from it by its rounding
    (bfloat16 keeps 8 bits of mantissa, float16 11)."""
    with lc.global_policy(policy):
        keras.utils.set_random_seed(0)
        mixed = models.build_model(CONFIG)
    with lc.global_policy("mixed_float16"):  # whatever the process's policy, the copy's is
        copy = models.float32_model(mixed, {**CONFIG, "mixed_precision": policy})
    assert copy is not mixed
    assert {layer.compute_dtype for layer in copy.layers} == {"float32"}
    assert mixed.get_layer("decoder").compute_dtype != "float32"
    for a, b in zip(mixed.get_weights(), copy.get_weights()):
        np.testing.assert_array_equal(a, b)
    with lc.global_policy("float32"):
        reference = models.build_model(CONFIG)
    reference.set_weights(mixed.get_weights())
    rng = np.random.default_rng(0)
    batch = {"source": rng.integers(1, 23, (3, 7)).astype("int32"),
             "target_in": rng.integers(1, 19, (3, 5)).astype("int32")}
    expected = keras.ops.convert_to_numpy(reference(batch))
    np.testing.assert_allclose(keras.ops.convert_to_numpy(copy(batch)), expected,
                               rtol=1e-6, atol=1e-6 * np.abs(expected).max())
    got_mixed = keras.ops.convert_to_numpy(keras.ops.cast(mixed(batch), "float32"))
    assert np.abs(got_mixed - expected).max() > 0  # it did round
    eps = {"mixed_bfloat16": 2.0 ** -8, "mixed_float16": 2.0 ** -11}[policy]
    # Rounding at every stage of 2+2 layers: a few dozen roundings of the logits' scale.
    np.testing.assert_allclose(got_mixed, expected, atol=64 * eps * np.abs(expected).max())


def test_float32_model_keeps_a_float32_run():
    model = models.build_model(CONFIG)
    assert models.float32_model(model, {**CONFIG, "mixed_precision": ""}) is model
    assert models.float32_model(model, CONFIG) is model  # runs from before the option


def test_auto_run_stores_its_choice_and_loads_in_float32(tmp_path, capsys, monkeypatch):
    """``train --mixed-precision auto`` on a machine that has bfloat16 (pretended here, so the
    test runs on every CPU: bfloat16 is emulated where it is not native) trains in
    mixed_bfloat16, says so, stores it in config.json, keeps it on resume, and the run
    loads for decoding in float32."""
    from keras_attn.translation import run

    monkeypatch.setattr(precision, "resolve",
                        lambda name, **kw: (("mixed_bfloat16", "auto: pretended")
                                            if name == "auto" else (name, "as given")))
    argv = ["train", "--task", "dates", "--num-train", "200", "--num-valid", "20",
            "--num-test", "10", "--num-hiddens", "16", "--ffn-num-hiddens", "32",
            "--num-heads", "2", "--num-layers", "1", "--batch-size", "32", "--no-export",
            "--mixed-precision", "auto", "--output", str(tmp_path)]
    policy = keras.config.dtype_policy()
    try:
        assert cli.main([*argv, "--steps", "2"]) == 0
        out = capsys.readouterr().out
        assert "precision: mixed_bfloat16 (auto: pretended)" in out
        config = json.loads((tmp_path / "config.json").read_text())
        assert config["mixed_precision"] == "mixed_bfloat16"
        # Resumed where auto would choose otherwise: the run keeps its precision.
        monkeypatch.setattr(precision, "resolve", lambda name, **kw: ("", "auto: pretended"))
        assert cli.main([*argv, "--steps", "3"]) == 0
        assert "precision: mixed_bfloat16 (auto: as the run being resumed)" in (
            capsys.readouterr().out)
    finally:  # training sets the process's policy: later tests start from the same one
        keras.config.set_dtype_policy(policy)
    assert keras.config.dtype_policy().name == policy.name  # train() put it back
    model = run.load(str(tmp_path))[0]
    assert {layer.compute_dtype for layer in model.layers} == {"float32"}


def test_train_puts_the_policy_back_when_it_raises(tmp_path):
    """A run that fails after choosing its precision (here: data that does not exist) leaves
    the process's policy as it found it."""
    from keras_attn.core.config import TrainConfig
    from keras_attn.training import recipes

    before = keras.config.dtype_policy().name
    with pytest.raises((FileNotFoundError, ValueError, OSError)):
        recipes.train(TrainConfig(task="tatoeba", data=str(tmp_path / "missing.txt"),
                                  mixed_precision="mixed_bfloat16"), str(tmp_path / "run"),
                      log=lambda *a: None)
    assert keras.config.dtype_policy().name == before
