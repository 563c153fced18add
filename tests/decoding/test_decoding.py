"""Greedy and beam search: cache vs reference, beam vs greedy, graph modes, a
trained model through ``translate``."""
import collections
import pathlib
import warnings

import numpy as np
import pytest
import tensorflow as tf

from tests.support import layer_checks as lc
from keras_attn import data, decoding, models
from keras_attn.kernels import fastpath

ROOT = pathlib.Path(__file__).resolve().parents[2]
RUN = ROOT / "exported" / "run"
START, END = 2, 3


# The README's pass decodes the post-norm Transformer; the pre-norm Transformer and Bahdanau
# run every test again in CI's slow pass (tests/export/test_architectures.py decodes all three in
# every artefact).
@pytest.fixture(scope="module", params=["transformer",
                                        pytest.param("transformer_prenorm", marks=pytest.mark.slow),
                                        pytest.param("bahdanau", marks=pytest.mark.slow)])
def model(request):
    tf.keras.utils.set_random_seed(1)
    if request.param == "bahdanau":
        return models.bahdanau_seq2seq(40, 30, embed_size=16, num_hiddens=32, num_layers=2,
                                       dropout=0.0)
    return models.transformer_seq2seq(40, 30, num_hiddens=32, ffn_num_hiddens=64, num_heads=4,
                                      num_layers=2, dropout=0.0, max_len=64,
                                      norm_first=request.param.endswith("prenorm"))


SOURCE = np.array([[5, 6, 7, 8, 3, 0, 0], [9, 10, 3, 0, 0, 0, 0], [11, 12, 13, 14, 15, 16, 3]],
                  "int32")


def model_log_prob_terms(model, steps):
    """``log_prob_terms`` of the ``model`` fixture's models over SOURCE (the pre-norm
    Transformer's count: its final LayerNorms are the post-norm one's and two more)."""
    if models.model_kind(model) == "bahdanau":
        logit_terms = lc.bahdanau_terms(16, 32, 2, SOURCE.shape[1], steps)
    else:
        logit_terms = lc.transformer_terms(32, 64, 4, 2, SOURCE.shape[1], steps,
                                           norm_first=True)
    return lc.log_prob_terms(logit_terms, 30, steps)


def _check_rows(tokens):
    """Rows end at END (included) and are 0 after it; 0 and START never appear before."""
    for row in np.asarray(tokens):
        ends = np.flatnonzero(row == END)
        body = row[: ends[0] + 1] if len(ends) else row
        assert 0 not in body and START not in body
        if len(ends):
            assert (row[ends[0] + 1:] == 0).all()


def test_cached_equals_naive(model):
    cached = decoding.greedy_search(model, SOURCE, 20, START, END, use_cache=True)
    naive = decoding.greedy_search(model, SOURCE, 20, START, END, use_cache=False)
    np.testing.assert_array_equal(cached, naive)
    _check_rows(cached)


def test_cached_equals_naive_on_a_model_that_stops():
    """A model trained a little so that rows end at different steps (padding after END)."""
    tf.keras.utils.set_random_seed(0)
    m = models.transformer_seq2seq(12, 12, 16, 32, 2, 1, dropout=0.0, max_len=32)
    out = decoding.greedy_decode_fixed(m, SOURCE % 12, 16, START, END)
    ref = decoding.greedy_decode_fixed(m, SOURCE % 12, 16, START, END, use_cache=False)
    for key in ("tokens", "lengths"):
        np.testing.assert_array_equal(out[key], ref[key])
    logit_terms = lc.transformer_terms(16, 32, 2, 1, SOURCE.shape[1], 16)
    lc.assert_close(out["log_prob"], ref["log_prob"],
                    terms=lc.log_prob_terms(logit_terms, 12, 16))


def test_beam_size_one_equals_greedy(model):
    greedy = decoding.greedy_search(model, SOURCE, 20, START, END)
    tokens, scores = decoding.beam_search(model, SOURCE, beam_size=1, alpha=0.6, max_len=20,
                                          start_id=START, end_id=END)
    np.testing.assert_array_equal(tokens[:, 0], greedy)
    assert np.isfinite(scores).all()


def test_beam_search_keeps_alpha_and_the_rest_name_it_length_penalty(model):
    """API.md promises ``beam_search(alpha=)``: no warning there. ``beam_decode_fixed`` and
    ``score`` name the option ``length_penalty`` and take ``alpha=`` with a warning; both
    names with different values raise."""
    kwargs = dict(max_len=12, start_id=START, end_id=END)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tokens, scores = decoding.beam_search(model, SOURCE, beam_size=2, alpha=1.0, **kwargs)
    assert not [w for w in caught if "length_penalty" in str(w.message)]
    new = decoding.beam_decode_fixed(model, SOURCE, 2, length_penalty=1.0, **kwargs)
    with pytest.warns(DeprecationWarning, match="`alpha` is deprecated"):
        old = decoding.beam_decode_fixed(model, SOURCE, 2, alpha=1.0, **kwargs)
    np.testing.assert_array_equal(old["scores"], new["scores"])
    np.testing.assert_array_equal(scores, new["scores"])
    with pytest.warns(DeprecationWarning), pytest.raises(TypeError, match="alpha"):
        decoding.beam_decode_fixed(model, SOURCE, 2, 1.0, alpha=0.5, **kwargs)
    target = np.asarray(tokens[:, 0])
    new = decoding.score(model, SOURCE, target, START, END, length_penalty=1.0)
    with pytest.warns(DeprecationWarning, match="`alpha` is deprecated"):
        old = decoding.score(model, SOURCE, target, START, END, alpha=1.0)
    np.testing.assert_array_equal(old["score"], new["score"])
    with pytest.warns(DeprecationWarning), pytest.raises(TypeError, match="alpha"):
        decoding.score(model, SOURCE, target, START, END, alpha=1.0, length_penalty=0.5)


def teacher_forced_log_prob(model, source, tokens):
    """Summed log-probability of ``tokens`` ``(B, T)`` (0 after the end) by one teacher-forced
    model call, with the samplers' banned ids (``decoding.log_probs``)."""
    tokens = np.asarray(tokens)
    target_in = np.concatenate([np.full((len(tokens), 1), START, "int32"), tokens[:, :-1]], 1)
    logits = model({"source": source, "target_in": target_in}, training=False)
    log_probs = np.asarray(decoding.log_probs(logits, START))
    picked = np.take_along_axis(log_probs, tokens[..., None], axis=-1)[..., 0]
    return np.where(tokens == 0, 0.0, picked).sum(-1)


def test_best_beam_scores_at_least_greedy(model):
    alpha = 0.6
    greedy = decoding.greedy_decode_fixed(model, SOURCE, 20, START, END)
    greedy_score = greedy["log_prob"] / decoding.length_penalty(greedy["lengths"], alpha)
    # The greedy sequence scored independently by teacher forcing agrees with the search.
    terms = model_log_prob_terms(model, 20)
    lc.assert_close(teacher_forced_log_prob(model, SOURCE, greedy["tokens"]),
                    greedy["log_prob"], terms=terms)
    tokens, scores = decoding.beam_search(model, SOURCE, beam_size=4, alpha=alpha, max_len=20,
                                          start_id=START, end_id=END)
    assert tokens.shape[:2] == (3, 4)
    # at least greedy's score, up to the roundings of two computations of it
    slack = lc.tolerance(greedy_score, terms=2 * terms)
    assert (np.asarray(scores[:, 0]) >= np.asarray(greedy_score) - slack).all()
    assert (np.diff(np.asarray(scores), axis=1) <= 0).all()  # best first (top_k: exact)
    for b in range(4):
        _check_rows(tokens[:, b])


def test_eager_function_and_xla_agree(model):
    def run(s):
        return decoding.greedy_decode_fixed(model, s, 16, START, END)["tokens"]

    eager = run(tf.constant(SOURCE))
    graph = tf.function(run)(tf.constant(SOURCE))
    xla = tf.function(run, jit_compile=True)(tf.constant(SOURCE))
    np.testing.assert_array_equal(eager, graph)
    np.testing.assert_array_equal(eager, xla)


@pytest.mark.skipif(not fastpath.enabled(), reason="rows leave the loop on the fast path only")
@pytest.mark.parametrize("model, kind", [("transformer_prenorm", "sample"),
                                          ("bahdanau", "greedy")], indirect=["model"])
def test_finished_rows_leave_the_loop(model, kind):
    """In a TensorFlow graph traced with ``dynamic_shapes`` the rows that have ended leave
    the step's work (``keras_attn.decoding.compacted``): tokens and lengths equal the plain
    loop's (``compact=False``) and eager decoding's, scores up to roundings, with a prefix
    forced on some rows, three samples per row when sampling. The end token is the
    model's most frequent output, so rows end at different steps."""
    source = np.concatenate([SOURCE, SOURCE[::-1] % 20])
    first = decoding.GreedySampler(12, START, END)(model, source)["tokens"].numpy()
    ids, counts = np.unique(first[first > END], return_counts=True)
    end = int(ids[np.argmax(counts)])
    prefix = np.array([[7, 8], [0, 0], [9, 0], [0, 0], [4, 5], [0, 0]], "int32")
    compacted = []

    def run(compact):
        if kind == "greedy":
            sampler = decoding.GreedySampler(12, START, end, compact=compact)
        else:
            sampler = decoding.RandomSampler(12, START, end, samples=3, topk=6, topp=0.9,
                                             temperature=1.5, seed=5, compact=compact)
        with fastpath.using(dynamic_shapes=True):
            if tf.inside_function():
                compacted.append(sampler.compacts())
            out = sampler(model, source, prefix=prefix)
        return out if tf.inside_function() else {k: v.numpy() for k, v in out.items()}

    eager = run(True)
    graph = {k: v.numpy() for k, v in tf.function(lambda: run(True))().items()}
    plain = {k: v.numpy() for k, v in tf.function(lambda: run(False))().items()}
    assert compacted == [True, False]
    with fastpath.using(dynamic_shapes=False):  # fixed buffers: no loop may shrink
        assert not tf.function(lambda: decoding.GreedySampler(12, START, end).compacts())()
    for out in (graph, plain):
        for key in ("tokens", "lengths"):
            np.testing.assert_array_equal(out[key], eager[key])
        lc.assert_close(out["log_prob"], eager["log_prob"],
                        terms=model_log_prob_terms(model, 12))
    ended = eager["lengths"][eager["lengths"] < 12]
    assert len(set(ended.tolist())) >= 2, eager["lengths"]  # rows left at different steps
    assert (eager["tokens"][:, :, 0][prefix[:, 0] > 0] == prefix[prefix[:, 0] > 0, :1]).all()


@pytest.mark.skipif(not fastpath.enabled(), reason="rows leave the loop on the fast path only")
def test_a_graph_for_any_batch_picks_its_loop_by_the_rows(model):
    """Traced for any batch, greedy decoding drops finished rows when there are several
    and runs the plain loop for one row: both give eager decoding's tokens."""
    def greedy(s):
        with fastpath.using(dynamic_shapes=True):
            return decoding.greedy_decode_fixed(model, s, 12, START, END)

    fn = tf.function(greedy, input_signature=[tf.TensorSpec((None, None), tf.int32)])
    for source in (SOURCE, SOURCE[1:2]):
        eager = decoding.greedy_decode_fixed(model, source, 12, START, END)
        graph = fn(tf.constant(source))
        for key in ("tokens", "lengths"):
            np.testing.assert_array_equal(graph[key], eager[key])


def test_beam_search_under_xla(model):
    def run(s):
        return decoding.beam_decode_fixed(model, s, 3, 0.6, 12, START, END)["tokens"]

    np.testing.assert_array_equal(run(tf.constant(SOURCE)),
                                  tf.function(run, jit_compile=True)(tf.constant(SOURCE)))


def test_cross_attention_weights_per_token(model):
    tokens, weights = decoding.greedy_search(model, SOURCE, 10, START, END,
                                             return_attention=True)
    weights = np.asarray(weights)
    assert weights.shape == (3, tokens.shape[1], SOURCE.shape[1])
    np.testing.assert_array_equal(weights[SOURCE[:, None, :].repeat(tokens.shape[1], 1) == 0], 0)
    k = SOURCE.shape[1]  # a float32 softmax over k keys (max, exp, sum, divide), k summed
    lc.assert_close(weights.sum(-1), np.ones(weights.shape[:-1]), terms=2 * k + 3)


def loop_bodies(fn, *args):
    """Op types (with counts) in the body of each while loop of ``fn`` traced for ``args``
    (top level or in a branch of a conditional): the ops that run at every decoding step,
    nested function calls included."""
    graph_def = fn.get_concrete_function(*args).graph.as_graph_def()
    library = {f.signature.name: f for f in graph_def.library.function}
    loops = [n for n in graph_def.node if n.op in ("While", "StatelessWhile")]
    loops += [n for f in graph_def.library.function for n in f.node_def
              if n.op in ("While", "StatelessWhile")]

    def count(function, counts):
        for node in function.node_def:
            counts[node.op] += 1
            if node.op in ("PartitionedCall", "StatefulPartitionedCall"):
                count(library[node.attr["f"].func.name], counts)
        return counts

    return [count(library[loop.attr["body"].func.name], collections.Counter())
            for loop in loops]


# Float ops that TensorFlow's oneDNN rewrite replaces by kernels that parallelise every
# call: on one sentence that fixed cost dominates, so greedy decoding avoids them.
ONEDNN_REWRITTEN = ("MatMul", "BatchMatMul", "BatchMatMulV2", "Softmax", "Transpose",
                    "Einsum", "_FusedMatMul")


def graph_nodes(fn, *args):
    """Every node of ``fn`` traced for ``args``, the functions it calls included."""
    graph_def = fn.get_concrete_function(*args).graph.as_graph_def()
    return list(graph_def.node) + [n for f in graph_def.library.function for n in f.node_def]


@pytest.mark.skipif(not fastpath.enabled(), reason="the budget is the TensorFlow fast path's")
def test_greedy_step_op_budget():
    """A cached greedy step (the decoder's own call) runs at most 125 ops (not counting
    constants) per decoder layer plus 65 (without the one-position kernels of
    tf_step: about 200 per layer), none of them an XLA op (TF Serving runs without
    XLA) or a float op that the oneDNN rewrite takes over. At batch 1 a step costs about
    as many microseconds as it has ops."""
    def greedy(m, dynamic_shapes):
        def fn(s):
            with fastpath.using(dynamic_shapes=dynamic_shapes):
                return decoding.greedy_decode_fixed(m, s, 10, START, END)
        return tf.function(fn)

    totals = {}
    for layers in (1, 2):
        m = models.transformer_seq2seq(40, 30, 32, 64, 4, layers, dropout=0.0, max_len=24)
        fn = greedy(m, dynamic_shapes=True)
        spec = tf.TensorSpec((None, None), tf.int32)
        # In a graph the batch picks one of two loops. Both grow the cache (a concat per
        # layer for keys and values). Several rows: the loop that drops the rows that ended
        # (one concat more for the rows' tokens, one If; nothing written into the batch's
        # buffers at a step where none ends). One row: the loop over every row (one
        # TensorScatterUpdate writes the token).
        compact, plain = sorted(loop_bodies(fn, spec), key=lambda c: -c["StatelessIf"])
        for ops in (compact, plain):
            assert not [op for op in ops if op.startswith("Xla")]
            assert not set(ops) & set(ONEDNN_REWRITTEN), ops
            assert ops["ConcatV2"] >= 2 * layers, ops
        assert compact["ConcatV2"] >= 2 * layers + 1 and compact["TensorScatterUpdate"] == 0
        assert compact["StatelessIf"] + compact["If"] == 1, compact
        assert plain["TensorScatterUpdate"] == 1 and plain["StatelessIf"] + plain["If"] == 0
        totals[layers] = max(sum(n for op, n in ops.items() if op != "Const")
                             for ops in (compact, plain))
        # Without dynamic shapes (TFLite) the cache is preallocated and a position written
        # (TensorScatterUpdate; one more writes the token into the output buffer): one loop.
        (ops,) = loop_bodies(greedy(m, dynamic_shapes=False), spec)
        assert ops["TensorScatterUpdate"] == 2 * layers + 1
    per_layer = totals[2] - totals[1]
    assert per_layer <= 125 and totals[1] - per_layer <= 65, totals


@pytest.mark.parametrize("kwargs, match", [
    (dict(max_len=0), "max_len"), (dict(start_id=0), "start_id"), (dict(end_id=-1), "end_id")])
def test_bad_arguments(model, kwargs, match):
    args = dict(max_len=5, start_id=START, end_id=END) | kwargs
    with pytest.raises(ValueError, match=match):
        decoding.greedy_search(model, SOURCE, **args)


def test_bad_source_and_beam(model):
    with pytest.raises(ValueError, match="source"):
        decoding.greedy_search(model, SOURCE.astype("float32"), 5, START, END)
    with pytest.raises(ValueError, match="beam_size"):
        decoding.beam_search(model, SOURCE, beam_size=0, start_id=START, end_id=END)


needs_run = pytest.mark.skipif(not (RUN / "model.keras").exists(),
                               reason="exported/run (the committed default model) is missing")


@needs_run
def test_trained_dates_model_translates_held_out_dates():
    from keras_attn.translator import Translator

    translator = Translator.from_run_dir(str(RUN))
    pairs = data.dates_splits(30000, 1000, 2000, seed=0)["test"][:300]
    greedy = translator.translate([s for s, _ in pairs])
    assert np.mean([o == t for o, (_, t) in zip(greedy, pairs)]) >= 0.98
    beam = translator.translate([s for s, _ in pairs[:50]], beam_size=3)
    assert np.mean([o == t for o, (_, t) in zip(beam, pairs[:50])]) >= 0.96
