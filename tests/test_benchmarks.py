"""keras_attn.benchmarks (timing, FLOP counts, op profiles) and scripts/bench.py's plumbing."""
import json
import os
import sys

import numpy as np
import pytest
import tensorflow as tf

from keras_attn import benchmarks as bm

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "scripts"))
import bench  # noqa: E402


def test_mha_flops_by_hand():
    # B=1, L=2, d=4: projections 4*2*1*2*16 = 256, attention 2*2*1*4*4 = 64.
    assert bm.mha_flops(1, 2, 4) == 320
    assert bm.mha_flops(1, 2, 4, backward=True) == 960


def test_seq2seq_flops_by_hand():
    # One layer each, B=1, S=T=1, d=1, f=1, V=1:
    # encoder 8 + 4 + 4 = 16; decoder 8 + 4 + 4 + 4 + 4 = 24 plus cross K/V 4; output 2.
    assert bm.seq2seq_forward_flops(1, 1, 1, 1, 1, 1, 1) == 16 + 24 + 4 + 2
    assert bm.seq2seq_train_flops(1, 1, 1, 1, 1, 1, 1) == 3 * 46
    # The configuration: 72.68 GFLOP per training step.
    assert round(bm.seq2seq_train_flops(32, 64, 64, 256, 1024, 2, 8000) / 1e9, 2) == 72.68


def test_interleaved_alternates_order_and_warms_up():
    calls = []
    fns = {"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}
    times = bm.interleaved(fns, repeats=3, warmup=2)
    assert calls == ["a", "a", "b", "b", "a", "b", "b", "a", "a", "b"]
    assert {k: len(v) for k, v in times.items()} == {"a": 3, "b": 3}


def test_interleaved_rejects_unknown_clock():
    with pytest.raises(ValueError, match="clock"):
        bm.interleaved({"a": lambda: None}, clock="sundial")


def test_summarize():
    s = bm.summarize([0.001, 0.003, 0.002])
    assert s["median_ms"] == 2.0 and s["min_ms"] == 1.0 and s["repeats"] == 3


def test_op_profile_finds_the_matmul():
    a = tf.random.normal((64, 64))
    fn = tf.function(lambda: tf.nn.relu(tf.matmul(a, a)))
    by_type, by_name = bm.op_profile(fn, steps=2)
    assert "MatMul" in dict(by_type)
    assert by_name and all(ms >= 0 for _, ms in by_name)


def test_machine_info_is_json():
    info = bm.machine_info()
    assert info["cpu_count"] >= 1
    json.dumps(info)


def test_parse_args():
    args = bench.parse_args(["--quick", "--sections", "mha,decode"])
    assert args.sections == ["mha", "decode"] and args.repeats == 3 and args.warmup == 1
    with pytest.raises(SystemExit):
        bench.parse_args(["--sections", "mha,nope"])


def test_markdown_export_not_available():
    results = {"created": "now", "quick": True, "clock": "wall", "threads": 0,
               "machine": {"cpu": "x", "cpu_count": 2, "tensorflow": "t", "keras": "k"},
               "peak": {"n": 8, "gflops": 1.0},
               "sections": {"export": {"available": False, "reason": "no trained run at /x"}}}
    text = bench.markdown(results)
    assert "Not available: no trained run at /x" in text


def test_export_section_reports_missing_run(tmp_path):
    args = bench.parse_args(["--quick", "--run-dir", str(tmp_path / "none")])
    out = bench.bench_export(args, {"gflops": 1.0})
    assert out["available"] is False and "no trained run" in out["reason"]


@pytest.mark.parametrize("backward", [False, True])
def test_mha_matmul_floor_is_the_layers_matmuls_and_nothing_else(backward):
    b, n, d, h = 2, 6, 16, 4
    floor = tf.function(bm.mha_matmul_floor(b, n, d, h, backward=backward))
    graph = floor.get_concrete_function(tf.TensorSpec((b, n, d), tf.float32)).graph
    flops, types = 0, set()
    for op in graph.get_operations():
        types.add(op.type)
        if op.type in ("MatMul", "BatchMatMulV2"):
            a = op.inputs[0].shape.as_list()
            adj = op.get_attr("transpose_a" if op.type == "MatMul" else "adj_x")
            flops += 2 * int(np.prod(op.outputs[0].shape.as_list())) * a[-2 if adj else -1]
    assert flops == bm.mha_flops(b, n, d, backward=backward)
    compute = types - {"Placeholder", "Const", "Reshape", "Identity", "NoOp"}
    assert compute == ({"MatMul", "BatchMatMulV2", "AddN"} if backward
                       else {"MatMul", "BatchMatMulV2"})
    outputs = floor(tf.random.normal((b, n, d)))
    shapes = [tuple(t.shape) for t in (outputs if backward else [outputs])]
    assert shapes == ([(b * n, d), (d, d), (d, d), (d, d), (d, d)] if backward else [(b * n, d)])
    assert all(np.isfinite(t.numpy()).all() for t in (outputs if backward else [outputs]))
