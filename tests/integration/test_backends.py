"""Every Keras backend: the layers, models, losses, schedules and decoding on TensorFlow, JAX
and PyTorch.

Two kinds of tests:
- The ``test_on_this_backend_*`` tests use ``keras.ops`` and NumPy only, so they run under
  whichever backend Keras was started with; CI runs this file under
  ``KERAS_BACKEND=jax`` and ``KERAS_BACKEND=torch`` too.
- The ``test_across_backends_*`` tests (TensorFlow process only) start one subprocess per
  backend (Keras fixes its backend at import), give every layer the same weights and inputs,
  and compare outputs and gradients with the TensorFlow run; and export a model trained on
  JAX.

Tolerances: float32 results that each sum ``n`` products agree to
``8 * eps32 * n * max|reference|`` between two correct implementations.
"""
import json
import os
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest
from keras import ops

from tests.support import guards
from keras_attn import decoding, layers, models, schedules
from keras_attn.training import losses

BACKEND = keras.backend.backend()
EPS = np.finfo("float32").eps
if BACKEND == "jax":
    import jax

    if jax.default_backend() == "gpu" and jax.config.jax_default_matmul_precision is None:
        # JAX's default float32 matmul on an NVIDIA GPU runs in TensorFloat-32: 10 bits of
        # mantissa, so every product's rounding is TF32's.
        EPS = 2.0 ** -10
OTHER_BACKENDS = ("jax", "torch")


def np_(x):
    return np.asarray(ops.convert_to_numpy(x))


def toy_batch(seed=0, batch=6):
    rng = np.random.default_rng(seed)
    src = rng.integers(3, 30, (batch, 7)).astype("int32")
    src[0, 4:] = 0
    tgt_in = rng.integers(3, 30, (batch, 5)).astype("int32")
    tgt_in[:, 0] = 1
    tgt_in[1, 3:] = 0
    tgt_out = np.concatenate([tgt_in[:, 1:], np.full((batch, 1), 2)], 1).astype("int32")
    tgt_out[1, 2:] = 0
    return {"source": src, "target_in": tgt_in}, tgt_out


def build(kind, dropout=0.1):
    if kind == "transformer":
        return models.transformer_seq2seq(30, 30, num_hiddens=16, ffn_num_hiddens=32,
                                          num_heads=2, dropout=dropout, max_len=32)
    return models.bahdanau_seq2seq(30, 30, embed_size=8, num_hiddens=16, dropout=dropout)


# --- on this backend ---------------------------------------------------------------------------
@pytest.mark.skipif(BACKEND == "tensorflow", reason="on TensorFlow: test_models (training, "
                    "saving) and test_decoding (cached = uncached, beams); CI runs this under "
                    "JAX and PyTorch")
@pytest.mark.parametrize("kind", ["transformer", "bahdanau"])
def test_on_this_backend_models_train_save_load_and_decode(kind, tmp_path):
    x, y = toy_batch()
    model = build(kind)
    model.compile(keras.optimizers.Adam(schedules.NoamSchedule(16, warmup_steps=10)),
                  loss=losses.MaskedSparseCategoricalCrossentropy(0.1),
                  metrics=[losses.MaskedAccuracy()])
    history = model.fit(x, y, epochs=3, batch_size=3, verbose=0)
    assert np.isfinite(history.history["loss"]).all()
    assert history.history["loss"][-1] < history.history["loss"][0]
    # dropout is active in training only: two training calls differ, inference calls agree
    a, b = (np_(model(x, training=True)) for _ in range(2))
    assert not np.allclose(a, b)
    np.testing.assert_array_equal(np_(model(x)), np_(model(x)))
    path = str(tmp_path / "model.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    expected = np_(model(x))
    np.testing.assert_allclose(np_(loaded(x)), expected, rtol=0,
                               atol=8 * EPS * 64 * np.abs(expected).max())
    cached = np_(decoding.greedy_search(model, x["source"], 10, 1, 2))
    reference = np_(decoding.greedy_search(model, x["source"], 10, 1, 2, use_cache=False))
    np.testing.assert_array_equal(cached, reference)
    tokens, scores = decoding.beam_search(model, x["source"], beam_size=3, max_len=10,
                                          start_id=1, end_id=2)
    tokens, scores = np_(tokens), np_(scores)
    assert tokens.shape[:2] == (6, 3) and (np.diff(scores, axis=1) <= 1e-6).all()


@pytest.mark.parametrize("kind", ["transformer", "bahdanau"])
def test_on_this_backend_score_gives_the_searches_their_scores(kind):
    """decoding.score (forced decoding, keras.ops only) on this backend: greedy's summed
    log-probability and beam search's normalised scores back, for every hypothesis."""
    x, _ = toy_batch()
    model = build(kind, dropout=0.0)
    source = x["source"]
    greedy = decoding.greedy_decode_fixed(model, source, 10, 1, 2)
    scored = decoding.score(model, source, greedy["tokens"], 1, 2, 0.6)
    expected = np_(greedy["log_prob"])
    # Sums of 10 log-probabilities, each over logits of < 64-term products.
    atol = 8 * EPS * 64 * 10 * max(np.abs(expected).max(), 1.0)
    np.testing.assert_allclose(np_(scored["log_prob"]), expected, rtol=0, atol=atol)
    np.testing.assert_array_equal(np_(scored["lengths"]), np_(greedy["lengths"]))
    beam = decoding.beam_decode_fixed(model, source, 3, 0.6, 10, 1, 2)
    flat = np.reshape(np_(beam["tokens"]), (-1, 10))
    rescored = decoding.score(model, np.repeat(source, 3, axis=0), flat, 1, 2, 0.6)
    np.testing.assert_allclose(np.reshape(np_(rescored["score"]), (-1, 3)), np_(beam["scores"]),
                               rtol=0, atol=atol)


def test_on_this_backend_layers_mask_padding_and_return_weights():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(2, 5, 8)).astype("float32")
    lens = np.array([3, 5])
    mask = np.arange(5)[None, :] < lens[:, None]
    for layer in (layers.DotProductAttention(), layers.AdditiveAttention(8),
                  layers.MultiHeadAttention(8, 2)):
        out, w = layer(x, x, x, valid_lens=lens, return_attention_scores=True)
        out_m, w_m = layer(x, x, x, mask=mask, return_attention_scores=True)
        w, w_m = np_(w), np_(w_m)
        assert (w[0, ..., 3:] == 0).all()  # padding keys get exactly zero weight
        # the same keys masked two ways: the same arithmetic, so the same bits
        np.testing.assert_array_equal(w, w_m)
        np.testing.assert_allclose(w.sum(-1), 1.0, rtol=0, atol=8 * EPS * 5)
        np.testing.assert_array_equal(np_(out), np_(out_m))
    soft = np_(layers.MaskedSoftmax()(ops.convert_to_tensor(x[:, :, :5]),
                                      valid_lens=np.array([0, 2])))
    assert (soft[0] == 0).all() and not np.isnan(soft).any()


def test_on_this_backend_blocks_stacks_and_positions():
    """Values against numpy written here (FFN, add & norm, Nadaraya-Watson, sinusoidal
    positions) and, for the blocks, what must hold on any backend: a Keras mask equals
    ``valid_lens``, and padded keys change nothing. Every layer is also compared with
    TensorFlow by value and gradient (``test_across_backends_*``)."""
    rng = np.random.default_rng(2)
    x = rng.normal(size=(2, 6, 8)).astype("float32")
    # ~16 products per output (d=8, hidden 16), values O(1)
    atol = 8 * EPS * 16 * max(np.abs(x).max(), 1.0)

    ffn = layers.PositionWiseFFN(16, 8)
    out = np_(ffn(x))
    w1, b1, w2, b2 = (np_(w) for w in (ffn.dense1.kernel, ffn.dense1.bias, ffn.dense2.kernel,
                                       ffn.dense2.bias))
    np.testing.assert_allclose(out, np.maximum(x @ w1 + b1, 0) @ w2 + b2, rtol=0,
                               atol=atol * np.abs(out).max())

    y = rng.normal(size=x.shape).astype("float32")
    z = x + y
    mean, var = z.mean(-1, keepdims=True), z.var(-1, keepdims=True)
    np.testing.assert_allclose(np_(layers.AddNorm()(x, y)), (z - mean) / np.sqrt(var + 1e-5),
                               rtol=0, atol=atol * 4)

    nw = layers.NadarayaWatson()
    queries, keys = np.linspace(0, 1, 4), np.linspace(-1, 2, 6)
    values = np.sin(keys)
    scores = -((queries[:, None] - keys[None, :]) ** 2) / 2
    weights = np.exp(scores - scores.max(1, keepdims=True))
    weights /= weights.sum(1, keepdims=True)
    np.testing.assert_allclose(np_(nw(queries.astype("float32"), keys.astype("float32"),
                                      values.astype("float32"))), weights @ values,
                               rtol=0, atol=16 * EPS)

    lens = np.array([2, 6])
    keep = np.arange(6)[None, :] < lens[:, None]
    noisy = np.where(keep[..., None], x, 100.0).astype("float32")  # padding changed
    for block in (layers.TransformerEncoderBlock(8, 16, 2, use_bias=True),
                  layers.TransformerEncoderBlock(8, 16, 2, norm_first=True)):
        by_lens = np_(block(x, valid_lens=lens))
        np.testing.assert_array_equal(np_(block(x, mask=keep)), by_lens)
        np.testing.assert_allclose(np_(block(noisy, valid_lens=lens))[keep], by_lens[keep],
                                   rtol=0, atol=atol * np.abs(by_lens).max())
    dec = layers.TransformerDecoderBlock(8, 16, 2)
    by_lens = np_(dec(x[:, :4], x, enc_valid_lens=lens))
    np.testing.assert_allclose(np_(dec(x[:, :4], noisy, enc_valid_lens=lens)), by_lens,
                               rtol=0, atol=atol * np.abs(by_lens).max())
    # causal: the first 3 target positions do not see the 4th
    np.testing.assert_allclose(np_(dec(x[:, :3], x, enc_valid_lens=lens)), by_lens[:, :3],
                               rtol=0, atol=atol * np.abs(by_lens).max())

    pe = np_(layers.PositionalEncoding(max_len=10)(np.zeros((1, 4, 8), "float32")))
    i, j = np.arange(4)[:, None], np.arange(0, 8, 2)[None, :]
    # the table is float32 of values in [-1, 1]: one rounding, eps32 / 2
    np.testing.assert_allclose(pe[0, :, 0::2], np.sin(i / 10000 ** (j / 8)), rtol=0, atol=EPS)
    np.testing.assert_allclose(pe[0, :, 1::2], np.cos(i / 10000 ** (j / 8)), rtol=0, atol=EPS)
    with pytest.raises(ValueError, match="max_len"):
        layers.PositionalEncoding(max_len=3)(np.zeros((1, 4, 8), "float32"))


# --- across backends (from the TensorFlow process) ----------------------------------------------
LAYER_SCRIPT = textwrap.dedent('''
    import json, sys
    import numpy as np
    import keras
    from keras import ops
    from keras_attn import layers, models
    from keras_attn.training import losses

    backend = keras.backend.backend()
    rng = np.random.default_rng(0)
    q = rng.normal(size=(2, 4, 8)).astype("float32")
    kv = rng.normal(size=(2, 6, 8)).astype("float32")
    lens = np.array([3, 6])
    src = np.array([[5, 6, 7, 0, 0, 0], [8, 9, 10, 11, 12, 13]], "int32")
    tgt = np.array([[1, 4, 5, 0], [1, 6, 7, 8]], "int32")
    nw_q = np.linspace(0.0, 1.0, 4).astype("float32")
    nw_k = np.linspace(-1.0, 2.0, 6).astype("float32")
    nw_v = np.sin(nw_k).astype("float32")
    h0, h1 = (rng.normal(size=(2, 8)).astype("float32") for _ in range(2))
    # name: (layer, call(layer, *float_inputs) -> one tensor, float_inputs). Every public
    # layer and model; gradients w.r.t. the float inputs and every trainable weight.
    cases = {
        "masked softmax": (layers.MaskedSoftmax(), lambda l, a: l(a, valid_lens=lens), [q]),
        "nadaraya-watson": (layers.NadarayaWatson(learnable=True),
                            lambda l, a, b, c: l(a, b, c), [nw_q, nw_k, nw_v]),
        "dot": (layers.DotProductAttention(), lambda l, a, b: l(a, b, b, valid_lens=lens),
                [q, kv]),
        "additive": (layers.AdditiveAttention(8), lambda l, a, b: l(a, b, b, valid_lens=lens),
                     [q, kv]),
        "mha": (layers.MultiHeadAttention(8, 2, use_bias=True),
                lambda l, a, b: l(a, b, b, valid_lens=lens), [q, kv]),
        "mha causal": (layers.MultiHeadAttention(8, 2),
                       lambda l, a: l(a, a, a, use_causal_mask=True), [q]),
        "positions": (layers.PositionalEncoding(16), lambda l, a: l(a), [q]),
        "learned positions": (layers.LearnedPositionalEmbedding(16), lambda l, a: l(a), [q]),
        "ffn": (layers.PositionWiseFFN(16, 8), lambda l, a: l(a), [q]),
        "addnorm": (layers.AddNorm(), lambda l, a: l(a, a * 2), [q]),
        "encoder block": (layers.TransformerEncoderBlock(8, 16, 2, use_bias=True),
                          lambda l, b: l(b, valid_lens=lens), [kv]),
        "encoder block pre-norm": (layers.TransformerEncoderBlock(8, 16, 2, norm_first=True),
                                   lambda l, b: l(b, valid_lens=lens), [kv]),
        "decoder block": (layers.TransformerDecoderBlock(8, 16, 2),
                          lambda l, a, b: l(a, b, enc_valid_lens=lens), [q, kv]),
        "encoder": (layers.TransformerEncoder(30, 8, 16, 2, 2, max_len=16),
                    lambda l: l(src), []),
        "decoder": (layers.TransformerDecoder(30, 8, 16, 2, 2, max_len=16),
                    lambda l, b: l(tgt, b, enc_valid_lens=lens), [kv]),
        "seq2seq encoder": (layers.Seq2SeqEncoder(30, 8, 8, 2), lambda l: l(src)[0], []),
        "bahdanau decoder": (layers.BahdanauDecoder(30, 8, 8, 2),
                             lambda l, b, s0, s1: l(tgt, b, [s0, s1], enc_valid_lens=lens),
                             [kv, h0, h1]),
        "transformer model": (models.transformer_seq2seq(30, 30, num_hiddens=8,
                                                         ffn_num_hiddens=16, num_heads=2,
                                                         dropout=0.0, max_len=16),
                              lambda m: m({"source": src, "target_in": tgt}), []),
        "tied pre-norm transformer model": (
            models.transformer_seq2seq(30, 30, num_hiddens=8, ffn_num_hiddens=16,
                                       num_heads=2, num_layers=1, dropout=0.0, max_len=16,
                                       norm_first=True, tie_embeddings=True),
            lambda m: m({"source": src, "target_in": tgt}), []),
        "bahdanau model": (models.bahdanau_seq2seq(30, 30, embed_size=8, num_hiddens=8,
                                                   dropout=0.0),
                           lambda m: m({"source": src, "target_in": tgt}), []),
        # Random draws differ between backends: compared by what holds on every backend
        # (test_across_backends_dropout_keeps_and_scales).
        "dropout": (layers.Dropout(0.25, seed=1), lambda l, a: l(a, training=True),
                    [np.ones((64, 256), "float32")]),
    }

    def grads(fn, variables, inputs):
        # Gradients of sum(fn() * ramp) w.r.t. the inputs and the layer's variables.
        if backend == "tensorflow":
            import tensorflow as tf
            xs = [tf.constant(v) for v in inputs]
            with tf.GradientTape() as tape:
                tape.watch(xs)
                out = fn(*xs)
                loss = tf.reduce_sum(out * tf.range(out.shape[-1], dtype=out.dtype))
            return out, tape.gradient(loss, xs + [v.value for v in variables])
        if backend == "jax":
            import jax
            values = [v.value for v in variables]

            def stateless(values, xs):
                with keras.StatelessScope(state_mapping=list(zip(variables, values))):
                    out = fn(*xs)
                return (out * jax.numpy.arange(out.shape[-1])).sum(), out
            (gv, gx), out = jax.grad(stateless, argnums=(0, 1), has_aux=True)(
                values, [jax.numpy.asarray(v) for v in inputs])
            return out, list(gx) + list(gv)
        import torch
        xs = [torch.tensor(v, requires_grad=True) for v in inputs]
        out = fn(*xs)
        loss = (out * torch.arange(out.shape[-1])).sum()
        wanted = xs + [v.value for v in variables]
        return out, torch.autograd.grad(loss, wanted, allow_unused=True)

    results = {}
    for name, (layer, call, inputs) in cases.items():
        call(layer, *inputs)  # build
        for v in sorted(layer.weights, key=lambda v: v.path):
            # the same values on every backend: drawn from the variable's path
            seed = sum(map(ord, v.path))
            v.assign(np.random.default_rng(seed).normal(size=v.shape).astype("float32") * 0.5)
        out, g = grads(lambda *xs: call(layer, *xs), list(layer.trainable_weights), inputs)
        results[name] = {"out": np.asarray(ops.convert_to_numpy(out)).tolist(),
                         "weights": [v.path for v in layer.trainable_weights],
                         "num_inputs": len(inputs),
                         "grads": [None if x is None else np.asarray(
                             ops.convert_to_numpy(x)).tolist() for x in g]}
    rng2 = np.random.default_rng(5)
    logits = rng2.normal(size=(2, 3, 11)).astype("float32")
    labels = np.array([[1, 4, 0], [2, 0, 0]], "int32")
    results["loss"] = {"out": float(ops.convert_to_numpy(
        losses.masked_cross_entropy(labels, logits, 0.1))), "grads": [], "weights": [], "num_inputs": 0}
    json.dump(results, open(sys.argv[1], "w"))
''')


def _run_backend(backend, script, *args):
    env = dict(os.environ, KERAS_BACKEND=backend, CUDA_VISIBLE_DEVICES="",
               TF_CPP_MIN_LOG_LEVEL="2", JAX_PLATFORMS="cpu")
    out = subprocess.run([sys.executable, "-c", script, *args], env=env, capture_output=True,
                         text=True, timeout=guards.timeout(30))
    assert out.returncode == 0, f"{backend}:\n{out.stderr[-4000:]}"
    return out


@pytest.fixture(scope="module")
def layer_results(tmp_path_factory):
    if BACKEND != "tensorflow":
        pytest.skip("the cross-backend comparison runs from the TensorFlow process")
    folder = tmp_path_factory.mktemp("backends")
    results = {}
    for backend in ("tensorflow",) + OTHER_BACKENDS:
        path = str(folder / f"{backend}.json")
        _run_backend(backend, LAYER_SCRIPT, path)
        results[backend] = json.load(open(path))
    return results


def test_across_backends_every_public_layer_and_model_is_compared():
    """LAYER_SCRIPT builds every layer class keras_attn.layers exports (TiedLogits inside
    the tied Transformer) and both model builders."""
    import re

    public = {name for name in dir(layers) if isinstance(getattr(layers, name), type)
              and issubclass(getattr(layers, name), keras.layers.Layer)}
    built = set(re.findall(r"layers\.([A-Z][A-Za-z0-9]+)\(", LAYER_SCRIPT))
    if "tie_embeddings=True" in LAYER_SCRIPT:
        built.add("TiedLogits")
    assert public and public <= built, public - built
    for builder in ("transformer_seq2seq", "bahdanau_seq2seq"):
        assert f"models.{builder}(" in LAYER_SCRIPT


@pytest.mark.slow  # three processes (TensorFlow, JAX, PyTorch), ~40 s
@pytest.mark.parametrize("backend", OTHER_BACKENDS)
def test_across_backends_same_outputs_and_gradients(layer_results, backend):
    ref, got = layer_results["tensorflow"], layer_results[backend]
    assert set(ref) == set(got)
    for name in ref:
        if name == "dropout":  # random draws: test_across_backends_dropout_keeps_and_scales
            continue
        assert got[name]["weights"] == ref[name]["weights"], name  # same weights, same order
        # every trainable weight gets a gradient on TensorFlow: none is compared vacuously
        assert all(g is not None for g in ref[name]["grads"][ref[name]["num_inputs"]:]), name
        expected = np.asarray(ref[name]["out"])
        # each output is a sum of at most a few hundred float32 products (d=8, FFN 16,
        # two layers), so rounding stays within that many eps of the values' scale
        atol = 8 * EPS * 256 * max(np.abs(expected).max(), 1.0)
        np.testing.assert_allclose(np.asarray(got[name]["out"]), expected, rtol=0, atol=atol,
                                   err_msg=f"{name} on {backend}")
        grads_ref = [np.asarray(g) for g in ref[name]["grads"] if g is not None]
        scale = max([np.abs(g).max() for g in grads_ref] + [1.0])
        for i, (a, b) in enumerate(zip(got[name]["grads"], ref[name]["grads"])):
            if a is None and b is None:  # an input the layer does not read
                continue
            a = np.zeros_like(np.asarray(b)) if a is None else np.asarray(a)
            b = np.zeros_like(a) if b is None else np.asarray(b)
            np.testing.assert_allclose(a, b, rtol=0, atol=8 * EPS * 256 * scale,
                                       err_msg=f"{name} gradient {i} on {backend}")


@pytest.mark.slow  # shares the three processes of the comparison above
@pytest.mark.parametrize("backend", ("tensorflow",) + OTHER_BACKENDS)
def test_across_backends_dropout_keeps_and_scales(layer_results, backend):
    """Dropout(0.25) on ones, training: every value is 0 or the exact inverse keep rate,
    the kept fraction is 0.75 within 5 standard deviations, and the gradient of
    sum(y * ramp) is the ramp times the same mask and scale."""
    out = np.asarray(layer_results[backend]["dropout"]["out"])
    grad = np.asarray(layer_results[backend]["dropout"]["grads"][0])
    rate = round(0.25 * 65536) / 65536  # the realised rate (keras_attn.layers.Dropout)
    scale = np.float32(1.0) / np.float32(1.0 - rate)
    kept = out != 0
    np.testing.assert_array_equal(out[kept], scale)
    n = out.size
    assert abs(kept.mean() - (1 - rate)) <= 5 * np.sqrt(rate * (1 - rate) / n)
    ramp = np.arange(out.shape[-1], dtype="float32")
    np.testing.assert_allclose(grad, np.where(kept, scale * ramp, 0.0), rtol=2 * EPS, atol=0)


TRAIN_SCRIPT = textwrap.dedent('''
    import sys
    import numpy as np
    import keras
    from keras import ops
    from keras_attn import decoding, models
    from keras_attn.training import losses

    START, END = 2, 3  # keras_attn.text's ids, which the exported graphs use
    rng = np.random.default_rng(0)
    src = rng.integers(4, 20, (64, 6)).astype("int32")
    rev = src[:, ::-1][:, :5]
    tgt_in = np.concatenate([np.full((64, 1), START, "int32"), rev], 1)
    tgt_out = np.concatenate([rev, np.full((64, 1), END, "int32")], 1)
    model = models.transformer_seq2seq(20, 20, num_hiddens=16, ffn_num_hiddens=32,
                                       num_heads=2, dropout=0.1, max_len=16)
    model.compile("adam", loss=losses.MaskedSparseCategoricalCrossentropy(0.1))
    model.fit({"source": src, "target_in": tgt_in}, tgt_out, epochs=3, batch_size=16,
              verbose=0)
    model.save(sys.argv[1])
    tokens = decoding.greedy_search(model, src[:8], 10, START, END)
    np.save(sys.argv[2], np.asarray(ops.convert_to_numpy(tokens)))
    np.save(sys.argv[3], src[:8])
''')


@pytest.mark.slow
def test_across_backends_a_jax_trained_model_exports_and_translates_alike(tmp_path):
    if BACKEND != "tensorflow":
        pytest.skip("export runs on TensorFlow")
    import tensorflow as tf

    from keras_attn import export
    from keras_attn.text import tokenizers as text

    paths = [str(tmp_path / n) for n in ("model.keras", "tokens.npy", "source.npy")]
    _run_backend("jax", TRAIN_SCRIPT, *paths)
    model = keras.saving.load_model(paths[0])
    expected, source = np.load(paths[1]), np.load(paths[2])
    np.testing.assert_array_equal(
        np_(decoding.greedy_search(model, source, 10, text.START_ID, text.END_ID)), expected)
    vocab = text.char_vocab(["abcdefghijklmnop"])[:20]
    tok = text.Tokenizer(vocab)
    report = export.export_saved_model(export.Parts(model, tok, tok, 10),  # as decoded
                                       str(tmp_path / "sm"), request_signature=False)
    loaded = tf.saved_model.load(report["path"])
    out = loaded.signatures["translate_ids"](source=tf.constant(source))
    got = out["tokens"].numpy()
    width = max(got.shape[1], expected.shape[1])
    pad = lambda a: np.pad(a, [(0, 0), (0, width - a.shape[1])])  # noqa: E731
    np.testing.assert_array_equal(pad(got), pad(expected))
    assert not report["xla_ops"]
