"""The benchmark suite in ``benchmarks/`` (timing, FLOP counts, op profiles, the report) and
``scripts/bench.py``'s options; ``benchmarks/`` never imports ``scripts/``.

``benchmarks`` imports from the repository root (``pytest.ini``: ``pythonpath = .``).
"""
import ast
import collections
import json
import os
import pathlib
import types

import numpy as np
import pytest
import tensorflow as tf

from benchmarks import cli, common, report, timing

from tests.support import ROOT as REPO


def test_mha_flops_by_hand():
    # B=1, L=2, d=4: projections 4*2*1*2*16 = 256, attention 2*2*1*4*4 = 64.
    assert common.mha_flops(1, 2, 4) == 320
    assert common.mha_flops(1, 2, 4, backward=True) == 960


def test_seq2seq_flops_by_hand():
    # One layer each, B=1, S=T=1, d=1, f=1, V=1:
    # encoder 8 + 4 + 4 = 16; decoder 8 + 4 + 4 + 4 + 4 = 24 plus cross K/V 4; output 2.
    assert common.seq2seq_forward_flops(1, 1, 1, 1, 1, 1, 1) == 16 + 24 + 4 + 2
    assert common.seq2seq_train_flops(1, 1, 1, 1, 1, 1, 1) == 3 * 46
    # Batch 32, 64 tokens each side, d 256, FFN 1024, 2 layers, a vocabulary of 8,000:
    # 72.68 GFLOP per training step.
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
    by_type = common.op_profile(fn, steps=2)
    assert "MatMul" in dict(by_type)
    assert all(ms >= 0 for _, ms in by_type)
    assert [ms for _, ms in by_type] == sorted((ms for _, ms in by_type), reverse=True)


def test_machine_info_is_json():
    info = common.machine_info()
    assert info["cpu_count"] >= 1
    json.dumps(info)


def test_parse_args():
    args = cli.parse_args(["--quick", "--sections", "mha,decode"])
    assert args.sections == ["mha", "decode"] and args.repeats == 3 and args.warmup == 1
    with pytest.raises(SystemExit):
        cli.parse_args(["--sections", "mha,nope"])


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


def test_a_benchmark_without_an_output_writes_to_a_new_folder(tmp_path):
    """The default output is a new folder per run, never over the committed
    measurements in research/."""
    from benchmarks.results import ROOT, fresh_dir

    first, second = fresh_dir("bench", root=tmp_path), fresh_dir("bench", root=tmp_path)
    assert first != second and os.listdir(first) == os.listdir(second) == []
    assert os.path.basename(first).endswith("-bench")
    assert os.path.relpath(ROOT, REPO) == os.path.join("research", "results")


def test_benchmarks_never_import_scripts():
    """scripts/ may import benchmarks/, never the reverse: no cycle between the two."""
    found = []
    for path in sorted(pathlib.Path(REPO, "benchmarks").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            found += [f"{path.name}: {n}" for n in names if n.split(".")[0] == "scripts"]
    assert not found, found


def test_step_ops_counts_a_loops_body_once_per_iteration():
    """benchmarks.step_ops reads the ops a session ran from its trace: a while loop whose
    body multiplies once and adds twice (the value, the counter), lowered as a session
    lowers TF2's functional While (which keeps an iteration counter and its bound as two
    more loop variables), runs per extra iteration one Mul, three AddV2 (the third: the
    While's own counter), one Less and one LoopCond, and moves four loop variables."""
    from benchmarks.step_ops import traced_nodes

    graph = tf.Graph()
    with graph.as_default():
        n = tf.compat.v1.placeholder(tf.int32, ())
        _, x = tf.compat.v1.while_loop(lambda i, x: i < n, lambda i, x: (i + 1, x * 3.0 + 1.0),
                                       (tf.constant(0), tf.constant(1.0)))
    with tf.compat.v1.Session(graph=graph) as sess:
        assert sess.run(x, {n: 2}) == 13.0  # (1 * 3 + 1) * 3 + 1
        counts = {k: collections.Counter(op for op, _ in traced_nodes(sess.run, x, {n: k}))
                  for k in (3, 7)}
    per_iteration = {op: (counts[7][op] - counts[3][op]) / 4 for op in counts[7]}
    assert {op: per_iteration[op] for op in ("Mul", "AddV2", "Less", "LoopCond")} == {
        "Mul": 1, "AddV2": 3, "Less": 1, "LoopCond": 1}, per_iteration
    assert per_iteration["Switch"] == per_iteration["Merge"] == per_iteration["NextIteration"] == 4


@pytest.mark.slow  # the committed SavedModel loaded in a session and traced (~1 minute)
def test_step_ops_of_the_committed_savedmodel():
    from benchmarks.step_ops import measure

    result = measure(os.path.join(REPO, "exported", "saved_model", "translator", "1"),
                     "3 March 2021", short=3, long=6, repeats=1)
    per_step = result["ops_per_step"]
    # Every loop variable goes through Switch, NextIteration and Merge once a step (a cond
    # inside the step adds Switch and Merge of its own).
    assert per_step["Switch"] >= per_step["NextIteration"] > 0, per_step
    assert per_step["Merge"] >= per_step["NextIteration"], per_step
    assert per_step["BatchMatMulV3"] > 0, per_step
    assert all(float(n).is_integer() for n in per_step.values()), per_step
    assert result["total_per_step"] == sum(per_step.values())


@pytest.mark.slow  # the committed SavedModel loaded in a session and traced (~1 minute)
def test_step_ops_profile_splits_a_request_by_op_and_layer():
    from benchmarks.step_ops import profile

    result = profile(os.path.join(REPO, "exported", "saved_model", "translator", "1"),
                     "3 March 2021", runs=2)
    by_type, by_scope = result["by_type"], result["by_scope"]
    ms = [entry["ms"] for entry in by_type.values()]
    assert ms == sorted(ms, reverse=True) and all(m >= 0 for m in ms)
    # The decoder's blocks run in the loop (a step each) and outside it (the confidence's
    # teacher-forced pass); the encoder's only outside.
    assert {"loop: decoder_1/block_0_1", "outside: decoder_1/block_0_1",
            "outside: encoder_1/block_0_1"} <= set(by_scope), by_scope
    assert not any(k.startswith("loop: encoder") for k in by_scope), by_scope
    assert sum(by_scope.values()) == pytest.approx(sum(ms), rel=0.01, abs=0.01)


@pytest.mark.slow  # five sessions of the committed SavedModel, XLA compiling one (minutes)
def test_serving_settings_time_every_setting_on_the_same_translations():
    from benchmarks.step_ops import SETTINGS, serving_settings

    texts = ["3 March 2021", "Sunday, 14 July 1789", "1/2/03", "may 5 1999"]
    result = serving_settings(os.path.join(REPO, "exported", "saved_model", "translator", "1"),
                              texts, repeats=1, batches=(1, 4))
    assert result["same_translations"]  # threads and XLA change the speed, not the tokens
    assert set(result["ms_per_sentence"]) == set(SETTINGS)
    for by_batch in result["ms_per_sentence"].values():
        assert set(by_batch) == {"1", "4"}
        assert all(s["median_ms"] > 0 and s["repeats"] == 1 for s in by_batch.values())


# --- benchmarks.passthrough ------------------------------------------------------------------
def test_passthrough_measure_counts_spans_and_the_words_around_them():
    """An engine that keeps spans when asked and drops every span otherwise: 1.0 and 0.0
    of the spans back, and the words around them the same translation either way."""
    from benchmarks.passthrough import measure
    from keras_attn.text import spans

    def translate(texts, on):
        if on:
            return [t.upper() if not spans.find(t) else t for t in texts]
        return [spans.cut(t).rest for t in texts]

    pairs = [(f"the cat number {k} sat here", f"le chat {k}") for k in range(10)]
    report = measure(translate, pairs)
    assert report["spans_per_kind"] == {kind: 2 for kind in ("url", "email", "number",
                                                            "code", "emoji")}
    assert report["passthrough"]["identical"] == 1.0
    assert report["passthrough_off"]["identical"] == 0.0


def test_plain_bleu_scores_every_reference_with_and_without(tmp_path):
    from benchmarks.passthrough import plain_bleu

    data = tmp_path / "dev.txt"
    first, second = "le train part à 5 heures du matin", "nous avons un très grand chat noir"
    data.write_text(f"It leaves at 5.\tIl part à 5 heures.\nIt leaves at 5.\t{first}\n"
                    f"We have a cat.\t{second}\n", encoding="utf-8")
    seen = []

    def translate(texts, on):
        seen.append((tuple(texts), on))
        return [first if "5" in t else (second if on else "un chat") for t in texts]

    report = plain_bleu(translate, str(data))
    assert seen == [(("It leaves at 5.", "We have a cat."), True),
                    (("It leaves at 5.", "We have a cat."), False)]
    assert report["sentences"] == 2 and report["with_spans"] == 1
    assert report["passthrough"]["bleu"] == 100.0
    assert report["passthrough_off"]["bleu"] < 100.0


# --- benchmarks.export_time ------------------------------------------------------------------
def test_export_time_reports_the_median_command_and_the_report_s_breakdown(monkeypatch):
    from benchmarks import export_time

    seconds = iter([30.0, 10.0, 20.0])

    def once(run_dir, workers):
        wall = next(seconds)
        return {"command": wall + 5, "total": wall, "saved_model": wall / 2, "samples": 1.0,
                "cpu": 2 * wall, "workers_cpu": wall, "trace_and_stage": {"text": 3.0},
                "convert": {"text_float32": 4.0}, "artefacts": {}}

    monkeypatch.setattr(export_time, "export_once", once)
    args = types.SimpleNamespace(run_dirs=["exported/run"], repeats=3, workers="auto")
    results = export_time.run(args, log=lambda *a: None)
    median = results["runs"]["exported/run"]["median"]
    assert (median["command"], median["total"], median["saved_model"]) == (25.0, 20.0, 10.0)
    table = export_time.markdown(results)
    assert "| exported/run | 25.0 | 20.0 | 10.0 | text 3.0 | text_float32 4.0 | 1.0 | 40 / 20 |" \
        in table

# --- benchmarks.glossary ---------------------------------------------------------------------
def test_glossary_benchmark_builds_its_glossary_and_counts_what_came_back(tmp_path):
    from benchmarks.glossary import build_glossary, held_out, markdown, rates

    train = tmp_path / "train.txt"
    train.write_text("".join(f"{en}\t{fr}\n" for en, fr in [
        ("My umbrella is red.", "Mon parapluie est rouge."),
        ("The umbrella broke.", "Le parapluie a cassé."),
        ("Take the airport bus.", "Prends le bus de l'aéroport."),
        ("The airport is far.", "L'aéroport est loin."),
        ("Paris is big.", "Paris est grande.")] * 2), "utf-8")
    glossary = build_glossary(train, min_count=2, min_dice=0.9)
    assert glossary["umbrella"] == "parapluie" and "airport" not in glossary  # elided: left out
    dev = tmp_path / "dev.txt"
    dev.write_text("Where is my umbrella?\tOù est mon parapluie ?\n"
                   "Where is my umbrella?\tOù est mon pépin ?\n"
                   "An umbrella, please.\tUn riflard, s'il te plaît.\n"
                   "Hello.\tBonjour.\n", "utf-8")
    agree, hold, plain, refs = held_out(dev, glossary)
    assert (agree, hold, plain) == (["Where is my umbrella?"],
                                    ["Where is my umbrella?", "An umbrella, please."], ["Hello."])
    assert len(refs["Where is my umbrella?"]) == 2
    got = rates(hold, ["Où est mon parapluie ?", "Un parapluie parapluie."],
                [{"umbrella": "parapluie"}, {}], glossary)
    assert got == {"sentences": 2, "present": 1.0, "once": 0.5, "honest": 0.5}
    row = {"reference": {**got, "without": {"bleu": 1.0}, "with": {"bleu": 2.0}},
           "invented": got, "unchanged": {"identical": 1.0}}
    assert "| ctranslate2 | 100.00% / 50.00% | 1.0 → 2.0 |" in markdown(
        {"engines": {"ctranslate2": row}})
