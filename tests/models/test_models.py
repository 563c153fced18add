"""The two translators from ``keras_attn.models``: causality, padding invariance, learning a
copy task with ``model.fit``, ``.keras`` save/load with the schedule and masked
loss/metric, mixed precision, XLA training, and ``attention_maps``."""
import keras
import numpy as np
import pytest

from tests.support import layer_checks as lc
from keras_attn import models
from keras_attn.training.losses import MaskedAccuracy, MaskedSparseCategoricalCrossentropy
from keras_attn.schedules import NoamSchedule

VOCAB, START, END = 20, 2, 3  # copy task: tokens 4..19, lengths 3..8
KINDS = ["transformer", "bahdanau"]


def build(kind, **kwargs):
    """A small model of ``kind`` (dropout 0 so outputs are deterministic)."""
    if kind == "transformer":
        return models.transformer_seq2seq(VOCAB, VOCAB, **{
            "num_hiddens": 16, "ffn_num_hiddens": 32, "num_heads": 2, "num_layers": 2,
            "dropout": 0.0, **kwargs})
    return models.bahdanau_seq2seq(VOCAB, VOCAB, **{
        "embed_size": 8, "num_hiddens": 16, "num_layers": 2, "dropout": 0.0, **kwargs})


def terms(kind, src_len, tgt_len, trained=False, num_layers=2):
    """Roundings of the logits of ``build(kind, num_layers=...)`` (or of the ``trained``
    fixture's model) for sources and targets of these lengths (``terms`` of lc.tolerance)."""
    if kind == "transformer":
        return (lc.transformer_terms(64, 128, 4, 2, src_len, tgt_len) if trained else
                lc.transformer_terms(16, 32, 2, num_layers, src_len, tgt_len))
    return (lc.bahdanau_terms(32, 64, 1, src_len, tgt_len) if trained else
            lc.bahdanau_terms(8, 16, num_layers, src_len, tgt_len))


def copy_data(n, seed, lo=3, hi=8):
    """Source = random tokens; target_in = START + tokens; target_out = tokens + END."""
    rng = np.random.default_rng(seed)
    src = np.zeros((n, hi), "int32")
    tgt_in = np.zeros((n, hi + 1), "int32")
    tgt_out = np.zeros((n, hi + 1), "int32")
    for i in range(n):
        k = rng.integers(lo, hi + 1)
        tokens = rng.integers(4, VOCAB, k)
        src[i, :k] = tokens
        tgt_in[i, 0], tgt_in[i, 1:k + 1] = START, tokens
        tgt_out[i, :k], tgt_out[i, k] = tokens, END
    return {"source": src, "target_in": tgt_in}, tgt_out


def logits(model, source, target_in):
    return lc.as_numpy(model({"source": np.asarray(source, "int32"),
                              "target_in": np.asarray(target_in, "int32")}))


def np_masked_accuracy(y, pred_logits):
    real = y != 0
    return float(np.mean(pred_logits.argmax(-1)[real] == y[real]))


SRC = np.array([[5, 6, 7, 8, 0, 0], [4, 9, 11, 12, 10, 13]], "int32")
TGT = np.array([[2, 5, 6, 7, 8, 0], [2, 4, 9, 11, 12, 10]], "int32")


# ----------------------------------------------------------------------------------------
# Causality and padding


def test_transformer_is_causal():
    model = build("transformer")
    base = logits(model, SRC, TGT)
    tol = {"terms": terms("transformer", 6, 6), "scale": np.abs(base).max()}
    for t in range(1, TGT.shape[1]):
        changed = TGT.copy()
        changed[:, t] = 4 + (changed[:, t] + 1) % (VOCAB - 4)
        out = logits(model, SRC, changed)
        lc.assert_close(out[:, :t], base[:, :t], **tol)
        assert not lc.is_close(out[1, t], base[1, t], **tol)


@pytest.mark.parametrize("kind", KINDS)
def test_padding_invariance(kind):
    model = build(kind)
    base = logits(model, SRC, TGT)
    real = TGT != 0
    tol = {"terms": terms(kind, 10, 9), "scale": np.abs(base).max()}  # padded lengths
    more_src = logits(model, np.pad(SRC, ((0, 0), (0, 4))), TGT)
    lc.assert_close(more_src[real], base[real], **tol)
    more_tgt = logits(model, SRC, np.pad(TGT, ((0, 0), (0, 3))))[:, :TGT.shape[1]]
    lc.assert_close(more_tgt[real], base[real], **tol)
    # A real source token where there was padding does change the logits.
    other = SRC.copy()
    other[0, 4] = 7
    assert not lc.is_close(logits(model, other, TGT)[0], base[0], **tol)


@pytest.mark.parametrize("kind", KINDS)
def test_bad_ids_and_empty_sources_give_finite_logits(kind):
    model = build(kind)
    bad = np.array([[VOCAB, VOCAB + 50, 5], [-1, 4, 7]], "int32")
    assert np.all(np.isfinite(logits(model, bad, bad)))
    empty = np.array([[0, 0, 0], [5, 6, 0]], "int32")
    out = logits(model, empty, TGT[:, :3])
    assert out.shape == (2, 3, VOCAB) and np.all(np.isfinite(out))


# ----------------------------------------------------------------------------------------
# attention_maps


def _check_rows(w, key_keep, real_queries, name):
    """``w`` (B, H, Q, K): exactly 0 where ``key_keep`` (B, Q, K) is False; the rows of real
    queries (B, Q) sum to 1. (Rows of padded queries are not specified.)"""
    key_keep = np.broadcast_to(key_keep[:, None], w.shape)
    np.testing.assert_array_equal(w[~key_keep], 0.0, err_msg=name)
    rows = w.sum(-1).transpose(0, 2, 1)[real_queries]  # (n_real, H)
    k = w.shape[-1]  # a float32 softmax over k keys (max, exp, sum, divide), then k summed
    lc.assert_close(rows, np.ones_like(rows), terms=2 * k + 3, err_msg=name)


@pytest.mark.parametrize("kind", KINDS)
def test_attention_maps(kind):
    model = build(kind)
    maps = models.attention_maps(model, {"source": SRC, "target_in": TGT})
    b, s, t = SRC.shape[0], SRC.shape[1], TGT.shape[1]
    src_keep, tgt_keep = SRC != 0, TGT != 0
    cross_keep = np.broadcast_to(src_keep[:, None, :], (b, t, s))
    if kind == "transformer":
        assert models.model_kind(model) == "transformer"
        names = [f"{part}/layer_{i}" for part in ("encoder/self", "decoder/self",
                                                  "decoder/cross") for i in range(2)]
        assert sorted(maps) == sorted(names)
        causal = np.tril(np.ones((t, t), bool))[None]
        for i in range(2):
            enc = maps[f"encoder/self/layer_{i}"]
            assert enc.shape == (b, 2, s, s)
            _check_rows(enc, np.broadcast_to(src_keep[:, None, :], (b, s, s)), src_keep,
                        "encoder")
            dec = maps[f"decoder/self/layer_{i}"]
            assert dec.shape == (b, 2, t, t)
            _check_rows(dec, causal & tgt_keep[:, None, :], tgt_keep, "self")
            first = dec[:, :, 1:, 0]  # not trivially one-hot
            assert not lc.is_close(first, np.ones_like(first), terms=2 * t + 3)
            cross = maps[f"decoder/cross/layer_{i}"]
            assert cross.shape == (b, 2, t, s)
            _check_rows(cross, cross_keep, tgt_keep, "cross")
    else:
        assert models.model_kind(model) == "bahdanau"
        assert list(maps) == ["decoder/cross"]
        w = maps["decoder/cross"]
        assert w.shape == (b, 1, t, s)
        _check_rows(w, cross_keep, tgt_keep, "bahdanau")


def test_model_kind_rejects_other_models():
    other = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, name="decoder")])
    with pytest.raises(ValueError, match="model"):
        models.model_kind(other)


# ----------------------------------------------------------------------------------------
# Training: copy task, save/load, mixed precision, XLA


class StopAt(keras.callbacks.Callback):
    """Stop once the validation token accuracy reaches ``target``."""

    def __init__(self, target):
        super().__init__()
        self.target = target

    def on_epoch_end(self, epoch, logs=None):
        if logs["val_masked_accuracy"] >= self.target:
            self.model.stop_training = True


def compile_for_copy(model, kind):
    if kind == "transformer":
        optimizer = keras.optimizers.Adam(NoamSchedule(64, warmup_steps=200, scale=0.5),
                                          beta_1=0.9, beta_2=0.98, epsilon=1e-9)
    else:
        optimizer = keras.optimizers.Adam(3e-3)
    model.compile(optimizer, loss=MaskedSparseCategoricalCrossentropy(),
                  metrics=[MaskedAccuracy()])


@pytest.fixture(scope="module", params=KINDS)
def trained(request):
    """A model of each kind trained on the copy task (~10-20 s of CPU each)."""
    kind = request.param
    keras.utils.set_random_seed(1)
    if kind == "transformer":
        model = models.transformer_seq2seq(VOCAB, VOCAB, 64, 128, 4, 2, dropout=0.0)
    else:
        model = models.bahdanau_seq2seq(VOCAB, VOCAB, 32, 64, 1, dropout=0.0)
    compile_for_copy(model, kind)
    x, y = copy_data(4000, seed=1)
    model.fit(x, y, batch_size=64, epochs=12, verbose=0,
              validation_data=copy_data(256, seed=2), callbacks=[StopAt(0.98)])
    return kind, model


@pytest.mark.slow
def test_fit_learns_copy_task(trained):
    kind, model = trained
    x, y = copy_data(500, seed=3)  # unseen
    accuracy = np_masked_accuracy(y, lc.as_numpy(model.predict(x, verbose=0)))
    assert accuracy > 0.95, (kind, accuracy)
    # The metric agrees with NumPy.
    results = model.evaluate(x, y, verbose=0, return_dict=True)
    # float32 counts of up to 2**24 tokens are exact; the one division rounds once
    lc.assert_close(results["masked_accuracy"], accuracy, terms=1)


@pytest.mark.slow
def test_trained_model_save_load(trained, tmp_path):
    kind, model = trained
    x, y = copy_data(64, seed=4)
    logit_terms = terms(kind, 8, 9, trained=True)  # copy_data: 8 source, 9 target positions
    loaded = lc.check_save_load(model, x, tmp_path, terms=logit_terms)
    assert models.model_kind(loaded) == kind
    assert isinstance(loaded.loss, MaskedSparseCategoricalCrossentropy)
    learning_rate = loaded.optimizer.get_config()["learning_rate"]
    if kind == "transformer":
        schedule = keras.optimizers.schedules.deserialize(learning_rate)
        assert isinstance(schedule, NoamSchedule)
        assert schedule.get_config() == {"d_model": 64, "warmup_steps": 200, "scale": 0.5}
        # the loaded optimizer runs the schedule: its rate is the schedule's at its step
        np.testing.assert_allclose(float(loaded.optimizer.learning_rate),
                                   float(schedule(loaded.optimizer.iterations)), rtol=1e-6)
    assert int(loaded.optimizer.iterations) == int(model.optimizer.iterations) > 0
    # The optimizer state came along: one more step moves both models the same way.
    # The loss: the logits, a log-softmax over VOCAB, the mean over 64 * 9 positions.
    loss_terms = logit_terms + VOCAB + 64 * 9
    lc.assert_close(loaded.train_on_batch(x, y), model.train_on_batch(x, y), terms=loss_terms)
    # After the step: the backward pass (the forward's reductions again, transposed and
    # summed over the batch's 64 * 9 positions) and Adam's update, then the forward pass.
    lc.assert_close(loaded(x), model(x), terms=3 * logit_terms + 64 * 9)
    metrics = loaded.evaluate(x, y, verbose=0, return_dict=True)
    assert "masked_accuracy" in metrics


@pytest.mark.slow  # three mixed-float16 train steps per model, each traced anew
@pytest.mark.parametrize("kind", KINDS)
def test_mixed_float16_training(kind):
    with lc.global_policy("mixed_float16"):
        model = build(kind)
    compile_for_copy(model, kind)
    x, y = copy_data(64, seed=5)
    out = model(x)
    assert keras.backend.standardize_dtype(out.dtype) == "float16"
    decoder = model.get_layer("decoder")
    assert decoder.compute_dtype == "float16" and decoder.variable_dtype == "float32"
    losses = [float(model.train_on_batch(x, y)[0]) for _ in range(3)]
    assert np.all(np.isfinite(losses)), losses
    assert np.all(np.isfinite(lc.as_numpy(model(x))))
    x["source"][0] = 0  # a source with no real token: no NaN in float16 either
    assert np.all(np.isfinite(lc.as_numpy(model(x))))


@pytest.mark.slow  # two trainings per model, one compiled by XLA
@pytest.mark.parametrize("kind", KINDS)
def test_jit_compile_training_matches_eager(kind):
    x, y = copy_data(32, seed=6)
    runs = []
    for jit in (False, True):
        keras.utils.set_random_seed(7)
        model = build(kind, num_layers=1)
        model.compile(keras.optimizers.Adam(1e-2), loss=MaskedSparseCategoricalCrossentropy(),
                      jit_compile=jit)
        runs.append([float(model.train_on_batch(x, y)) for _ in range(3)])
    eager, compiled = runs
    assert np.all(np.isfinite(compiled))
    # Three losses: before any update, the forward's and the loss's roundings; each update
    # adds a backward pass (the forward's reductions again, summed over the 32 * 9
    # positions) and the next forward's. Judged at the first loss's scale.
    step = terms(kind, 8, 9, num_layers=1) + VOCAB + 32 * 9
    lc.assert_close(compiled, eager, terms=3 * 2 * step, scale=eager[0])
    assert compiled[-1] < compiled[0]
