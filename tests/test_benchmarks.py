"""The benchmark suite in ``benchmarks/`` (timing, FLOP counts, op profiles, the report, the
``backends`` section) and ``scripts/bench.py``'s options.

``benchmarks`` imports from the repository root (``pytest.ini``: ``pythonpath = .``).
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from benchmarks import backends, cli, common, report, timing
from benchmarks.export import bench_export
import guards

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_mha_flops_by_hand():
    # B=1, L=2, d=4: projections 4*2*1*2*16 = 256, attention 2*2*1*4*4 = 64.
    assert common.mha_flops(1, 2, 4) == 320
    assert common.mha_flops(1, 2, 4, backward=True) == 960


def test_seq2seq_flops_by_hand():
    # One layer each, B=1, S=T=1, d=1, f=1, V=1:
    # encoder 8 + 4 + 4 = 16; decoder 8 + 4 + 4 + 4 + 4 = 24 plus cross K/V 4; output 2.
    assert common.seq2seq_forward_flops(1, 1, 1, 1, 1, 1, 1) == 16 + 24 + 4 + 2
    assert common.seq2seq_train_flops(1, 1, 1, 1, 1, 1, 1) == 3 * 46
    # The configuration: 72.68 GFLOP per training step.
    assert round(common.seq2seq_train_flops(32, 64, 64, 256, 1024, 2, 8000) / 1e9, 2) == 72.68


def test_interleaved_alternates_order_and_warms_up():
    calls = []
    fns = {"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}
    times = timing.interleaved(fns, repeats=3, warmup=2)
    assert calls == ["a", "a", "b", "b", "a", "b", "b", "a", "a", "b"]
    assert {k: len(v) for k, v in times.items()} == {"a": 3, "b": 3}


def test_interleaved_rejects_unknown_clock():
    with pytest.raises(ValueError, match="clock"):
        timing.interleaved({"a": lambda: None}, clock="sundial")


def test_summarize():
    s = timing.summarize([0.001, 0.003, 0.002])
    assert s["median_ms"] == 2.0 and s["min_ms"] == 1.0 and s["max_ms"] == 3.0
    assert s["repeats"] == 3


def test_block_waits_on_nests():
    out = {"a": [tf.ones(2), (tf.zeros(1), None)], "b": 1.5}
    assert timing.block(out) is out


def test_op_profile_finds_the_matmul():
    a = tf.random.normal((64, 64))
    fn = tf.function(lambda: tf.nn.relu(tf.matmul(a, a)))
    by_type, by_name = common.op_profile(fn, steps=2)
    assert "MatMul" in dict(by_type)
    assert by_name and all(ms >= 0 for _, ms in by_name)


def test_machine_info_is_json():
    info = common.machine_info()
    assert info["cpu_count"] >= 1
    json.dumps(info)


def test_parse_args():
    args = cli.parse_args(["--quick", "--sections", "mha,decode"])
    assert args.sections == ["mha", "decode"] and args.repeats == 3 and args.warmup == 1
    with pytest.raises(SystemExit):
        cli.parse_args(["--sections", "mha,nope"])


def test_markdown_export_not_available():
    results = {"created": "now", "quick": True, "clock": "wall", "threads": 0,
               "machine": {"cpu": "x", "cpu_count": 2, "tensorflow": "t", "keras": "k"},
               "peak": {"n": 8, "gflops": 1.0},
               "sections": {"export": {"available": False, "reason": "no trained run at /x"}}}
    text = report.markdown(results)
    assert "Not available: no trained run at /x" in text


def test_export_section_reports_missing_run(tmp_path):
    args = cli.parse_args(["--quick", "--run-dir", str(tmp_path / "none")])
    out = bench_export(args, {"gflops": 1.0})
    assert out["available"] is False and "no trained run" in out["reason"]


@pytest.mark.parametrize("backward", [False, True])
def test_mha_matmul_floor_is_the_layers_matmuls_and_nothing_else(backward):
    b, n, d, h = 2, 6, 16, 4
    floor = tf.function(common.mha_matmul_floor(b, n, d, h, backward=backward))
    graph = floor.get_concrete_function(tf.TensorSpec((b, n, d), tf.float32)).graph
    flops, types = 0, set()
    for op in graph.get_operations():
        types.add(op.type)
        if op.type in ("MatMul", "BatchMatMulV2"):
            a = op.inputs[0].shape.as_list()
            adj = op.get_attr("transpose_a" if op.type == "MatMul" else "adj_x")
            flops += 2 * int(np.prod(op.outputs[0].shape.as_list())) * a[-2 if adj else -1]
    assert flops == common.mha_flops(b, n, d, backward=backward)
    compute = types - {"Placeholder", "Const", "Reshape", "Identity", "NoOp"}
    assert compute == ({"MatMul", "BatchMatMulV2", "AddN"} if backward
                       else {"MatMul", "BatchMatMulV2"})
    outputs = floor(tf.random.normal((b, n, d)))
    shapes = [tuple(t.shape) for t in (outputs if backward else [outputs])]
    assert shapes == ([(b * n, d), (d, d), (d, d), (d, d), (d, d)] if backward else [(b * n, d)])
    assert all(np.isfinite(t.numpy()).all() for t in (outputs if backward else [outputs]))


# --- the backends section --------------------------------------------------------------------
def test_parse_args_backends():
    assert cli.parse_args([]).backends == ["tensorflow", "jax", "torch"]
    assert "backends" in cli.parse_args([]).sections
    assert cli.parse_args(["--backends", "jax,torch"]).backends == ["jax", "torch"]
    with pytest.raises(SystemExit):
        cli.parse_args(["--backends", "jax,mxnet"])


def test_backend_row_medians_spreads_and_paired_ratios():
    raw = {"backend": "jax", "versions": {"jax": "0"}, "threads": "default", "train_jit": True,
           "times": {"train_ours": [0.1, 0.2, 0.4], "train_keras_hub": [0.2, 0.2, 0.4],
                     "decode_ours": [0.016, 0.032, 0.016], "decode_keras_hub": [0.032] * 3}}
    row = backends.backend_row(raw, tokens_per_step=100, num_tokens=16, flops=1e9,
                               peak_gflops=100.0)
    t, d = row["train"], row["decode"]
    assert t["ours_tokens_per_s"] == 500 and t["ours_tokens_per_s_range"] == [250, 1000]
    assert t["keras_hub_tokens_per_s"] == 500 and t["speedup"] == 1.0
    assert t["speedup_range"] == [1.0, 2.0]  # per round: keras_hub time / ours time
    assert t["ours_mfu_pct"] == 5.0  # 1 GFLOP in 0.2 s: 5 GFLOP/s of 100
    assert d["ours_ms_per_token"] == 1.0 and d["ours_ms_per_token_range"] == [1.0, 2.0]
    assert d["keras_hub_ms_per_token"] == 2.0 and d["ratio"] == 0.5
    assert d["ratio_range"] == [0.5, 1.0]
    assert t["jit"] is True and d["compiled"].startswith("jax.jit")


def test_markdown_backends_rows_and_unavailable_backend():
    raw = {"backend": "torch", "versions": {"torch": "2"}, "threads": 1, "train_jit": False,
           "times": {k: [0.1, 0.2] for k in ("train_ours", "train_keras_hub", "decode_ours",
                                             "decode_keras_hub")}}
    section = {"config": {"train": {"d": 8}, "decode": {"tokens": 4}, "repeats": 2,
                          "ratio": "ours / keras_hub"},
               "train_gflop_per_step": 0.1,
               "rows": [backends.backend_row(raw, 10, 4, 1e6, 1.0),
                        {"backend": "jax", "available": False,
                         "reason": "exit 1: Traceback\nImportError: no jax"}]}
    results = {"created": "now", "quick": True, "clock": "wall", "threads": 0,
               "machine": {"cpu": "x", "cpu_count": 2, "tensorflow": "t", "keras": "k"},
               "peak": {"n": 8, "gflops": 1.0}, "sections": {"backends": section}}
    text = report.markdown(results)
    assert "| torch 2 | no | 67 (50-100) | 67 (50-100) | 1.000 (1.000-1.000) |" in text
    assert "| jax | not available: ImportError: no jax |" in text


@pytest.mark.slow  # keras_hub's sampler traced on a model
def test_keras_hub_sampler_decoding_equals_the_hand_written_loop():
    from benchmarks.decode import KerasHubGreedy
    from benchmarks.references import seq2seq_models

    cfg = dict(vocab=40, d=16, heads=2, ffn=32, layers=2)
    tf.random.set_seed(0)
    _, theirs = seq2seq_models(cfg, dropout=0.0, max_len=16)
    source = tf.constant(np.random.default_rng(0).integers(4, 40, (3, 5)), tf.int32)
    hub = KerasHubGreedy(theirs, num_tokens=6, start_id=2)
    sampled = tf.function(hub.greedy)(source).numpy()
    looped = tf.function(hub.decode)(source).numpy()
    assert sampled.shape == (3, 6)
    np.testing.assert_array_equal(sampled, looped)


@pytest.mark.slow
def test_bench_backends_section_on_jax(tmp_path):
    """The entry point, the parent and a JAX subprocess, at tiny sizes (about a minute)."""
    out_json, out_md = tmp_path / "bench.json", tmp_path / "bench.md"
    proc = subprocess.run(
        [sys.executable, os.path.join(REPO, "scripts", "bench.py"), "--sections", "backends",
         "--backends", "jax", "--quick", "--repeats", "1", "--warmup", "0", "--threads", "1",
         "--json", str(out_json), "--md", str(out_md)],
        cwd=tmp_path, capture_output=True, text=True, timeout=guards.timeout(60))
    assert proc.returncode == 0, proc.stderr[-3000:]
    (row,) = json.loads(out_json.read_text())["sections"]["backends"]["rows"]
    assert row["available"], row.get("reason", "")[-3000:]
    assert row["backend"] == "jax" and row["train"]["jit"] is True
    for key in ("ours_tokens_per_s", "keras_hub_tokens_per_s", "speedup"):
        assert row["train"][key] > 0
    for key in ("ours_ms_per_token", "keras_hub_ms_per_token", "ratio"):
        assert row["decode"][key] > 0
    assert "| jax " in out_md.read_text()


def test_budget_figure_reads_budgeted_runs_only(tmp_path):
    from benchmarks import budget_figure

    for name, budget in (("b60", 3600.0), ("b15", 900.0)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "metrics.json").write_text(json.dumps(
            {"bleu": budget / 100, "bleu_d2l": budget / 90, "budget": {"time_budget": budget}}))
    points = budget_figure.our_points([tmp_path / "b60", tmp_path / "b15"])
    assert [p[:3] for p in points] == [(15.0, 9.0, 10.0), (60.0, 36.0, 40.0)]
    (tmp_path / "epochs").mkdir()
    (tmp_path / "epochs" / "metrics.json").write_text(json.dumps({"bleu": 1, "bleu_d2l": 1}))
    with pytest.raises(ValueError, match="--time-budget"):
        budget_figure.our_points([tmp_path / "epochs"])
    png = budget_figure.plot(points, [(10.0, 20.0)], str(tmp_path / "f.png"))
    assert open(png, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    # Several series from the command line: LABEL=DIR[,DIR...]
    budget_figure.main([str(tmp_path / "b15"), "--series", f"other={tmp_path / 'b60'}",
                        "--output", str(tmp_path / "g.png")])
    assert open(tmp_path / "g.png", "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(SystemExit):
        budget_figure.main(["--series", "no-equals-sign"])
    # Runs of the KerasHub recipe, labelled or not: [LABEL=]PATH, repeatable.
    for name, minutes in (("k1.json", 10.0), ("k2.json", 20.0)):
        (tmp_path / name).write_text(json.dumps(
            {"points": [{"train_minutes": minutes, "bleu_d2l": 5.0}]}))
    assert budget_figure.parse_kerashub("run 1=a=b.json") == ("run 1=a", "b.json")
    assert budget_figure.parse_kerashub("k.json") == ("", "k.json")
    budget_figure.main([str(tmp_path / "b15"), "--kerashub", str(tmp_path / "k1.json"),
                        "--kerashub", f"second={tmp_path / 'k2.json'}",
                        "--output", str(tmp_path / "h.png")])
    assert open(tmp_path / "h.png", "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(SystemExit):
        budget_figure.main(["--kerashub", "label-but-no-path="])


def test_kerashub_recipe_joins_apostrophes_and_hyphens():
    from benchmarks.kerashub_recipe import natural

    assert natural("j ' ai faim .") == "j'ai faim ."
    assert natural("est - ce que tu viens ?") == "est-ce que tu viens ?"


@pytest.mark.slow  # two traced decoders and their timed rounds (~15 s)
def test_finished_rows_benchmark(tmp_path):
    """benchmarks.finished_rows on the committed tiny dates run: both loops give the same
    tokens (the script checks), and the JSON has a row per batch size."""
    from benchmarks import finished_rows

    out = tmp_path / "rows.json"
    record = finished_rows.main([os.path.join(REPO, "tests", "data", "tiny_dates_run"),
                                 "--batches", "1:2,4:2", "--rounds", "1",
                                 "--output", str(out)])
    assert json.loads(out.read_text()) == record
    assert set(record["batches"]) == {"1", "4"}
    for row in record["batches"].values():
        assert row["rows_kept"] > 0 and row["rows_leave"] > 0 and row["target_tokens"] > 0
        assert row["speedup_range"][0] <= row["speedup_median"] <= row["speedup_range"][1]


def test_a_benchmark_without_an_output_writes_to_a_new_folder(tmp_path):
    """The default output is a new folder per run, never the committed docs/benchmarks/."""
    from benchmarks.results import ROOT, fresh_dir

    first, second = fresh_dir("bench", root=tmp_path), fresh_dir("bench", root=tmp_path)
    assert first != second and os.listdir(first) == os.listdir(second) == []
    assert os.path.basename(first).endswith("-bench")
    assert os.path.relpath(ROOT, REPO) == os.path.join("benchmarks", "results")
