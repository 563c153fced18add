"""Reliability: bad input to layers and whole models, empty and all-padding sequences,
decoding with nothing to attend to, resuming a killed ``keras-attn train``, mixed-precision
training of the default dates model, and padding / permutation properties of whole models.

Complements test_ops.py, the layers' test modules (test_multi_head_attention.py,
test_transformer.py, ...) and test_models.py (rank, batch, valid_lens and num_heads errors,
out-of-range valid_lens, float16 rows with no valid key and finite logits for bad ids are
tested there, not repeated here); atomic writes under a simulated crash are test_runs.py's.
"""
import csv
import dataclasses
import functools
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import keras
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from tests.support import guards
from tests.support import layer_checks as lc
from keras_attn import data, decoding, layers, models
from keras_attn.core import runs
from keras_attn.text import tokenizers as text
from keras_attn.training import recipes as training
from keras_attn.layers import (AddNorm, AdditiveAttention, BahdanauDecoder,
                               DotProductAttention, Dropout, LearnedPositionalEmbedding,
                               MaskedSoftmax, MultiHeadAttention, NadarayaWatson, PositionalEncoding,
                               PositionWiseFFN, Seq2SeqEncoder, TiedLogits, TransformerDecoder,
                               TransformerDecoderBlock, TransformerEncoder,
                               TransformerEncoderBlock)

VOCAB, START, END = 20, 2, 3
KINDS = ["transformer", "bahdanau"]
# The same, Bahdanau in CI's slow pass only (its decoding and property runs take the longest).
KINDS_FAST = ["transformer", pytest.param("bahdanau", marks=pytest.mark.slow)]


def np_(x):
    return lc.as_numpy(x)


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype("float32")


# ----------------------------------------------------------------------------------------
# from_config with unknown keys or bad values: ValueError naming the key, never TypeError

LAYER_FACTORIES = {
    AddNorm: lambda: AddNorm(0.1),
    AdditiveAttention: lambda: AdditiveAttention(8),
    BahdanauDecoder: lambda: BahdanauDecoder(VOCAB, 6, 8, 1),
    DotProductAttention: lambda: DotProductAttention(0.1),
    Dropout: lambda: Dropout(0.1, seed=1),
    LearnedPositionalEmbedding: lambda: LearnedPositionalEmbedding(16),
    MaskedSoftmax: lambda: MaskedSoftmax(),
    MultiHeadAttention: lambda: MultiHeadAttention(8, 2),
    NadarayaWatson: lambda: NadarayaWatson(learnable=True),
    PositionalEncoding: lambda: PositionalEncoding(16),
    PositionWiseFFN: lambda: PositionWiseFFN(16, 8),
    Seq2SeqEncoder: lambda: Seq2SeqEncoder(VOCAB, 6, 8, 1),
    TiedLogits: lambda: TiedLogits(),
    TransformerDecoder: lambda: TransformerDecoder(VOCAB, 8, 16, 2, 1),
    TransformerDecoderBlock: lambda: TransformerDecoderBlock(8, 16, 2),
    TransformerEncoder: lambda: TransformerEncoder(VOCAB, 8, 16, 2, 1),
    TransformerEncoderBlock: lambda: TransformerEncoderBlock(8, 16, 2),
}


def test_every_registered_layer_is_covered():
    registered = {obj for name, obj in keras.saving.get_custom_objects().items()
                  if name.startswith("keras_attn>") and isinstance(obj, type)
                  and issubclass(obj, keras.layers.Layer)}
    public = {getattr(layers, n) for n in dir(layers)
              if isinstance(getattr(layers, n), type)
              and issubclass(getattr(layers, n), keras.layers.Layer)}
    assert registered | public <= set(LAYER_FACTORIES), registered | public - set(LAYER_FACTORIES)


@pytest.mark.parametrize("cls", list(LAYER_FACTORIES), ids=lambda c: c.__name__)
def test_from_config_rejects_unknown_keys(cls):
    config = LAYER_FACTORIES[cls]().get_config()
    assert type(cls.from_config(config)) is cls  # the real config still works
    with pytest.raises(ValueError, match=r"\['bogus_key'\].*Received: bogus_key=42"):
        cls.from_config({**config, "bogus_key": 42})
    # Through the registry too, as loading a .keras file does.
    serialized = keras.saving.serialize_keras_object(LAYER_FACTORIES[cls]())
    serialized["config"]["bogus_key"] = 42
    with pytest.raises(ValueError, match="bogus_key"):
        keras.saving.deserialize_keras_object(serialized)


@pytest.mark.parametrize("cls, key, value, words", [
    (MultiHeadAttention, "num_heads", 3, ["num_hiddens=8", "num_heads=3"]),
    (DotProductAttention, "dropout", 1.0, ["dropout=1.0"]),
    (PositionalEncoding, "max_len", 0, ["max_len=0"]),
    (TransformerEncoder, "num_layers", 0, ["num_layers"]),
], ids=lambda x: getattr(x, "__name__", str(x)))
def test_from_config_bad_values_raise_value_error(cls, key, value, words):
    """Keras's Layer.from_config re-raises every constructor error as TypeError."""
    config = {**LAYER_FACTORIES[cls]().get_config(), key: value}
    with pytest.raises(ValueError) as info:
        cls.from_config(config)
    for word in words:
        assert word in str(info.value)


def test_from_config_keeps_a_mixed_precision_policy():
    with lc.global_policy("mixed_float16"):
        config = MultiHeadAttention(8, 2).get_config()
    clone = MultiHeadAttention.from_config(config)
    assert clone.compute_dtype == "float16" and clone.variable_dtype == "float32"


# ----------------------------------------------------------------------------------------
# Attention layers: fully masked rows through bool / Keras masks, no keys at all

B, Q, K, D = 2, 3, 4, 8
QUERIES, KEYS, VALUES = rand(B, Q, D, seed=1), rand(B, K, D, seed=2), rand(B, K, D, seed=3)
ATTENTION = {"dot": lambda **kw: DotProductAttention(**kw),
             "mha": lambda **kw: MultiHeadAttention(D, 2, **kw),
             "additive": lambda **kw: AdditiveAttention(D, **kw)}


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("name, how", [(n, h) for n in ATTENTION
                                       for h in ("mask", "keys_mask", "causal+mask")
                                       if not (n == "additive" and h == "causal+mask")])
def test_fully_masked_row_is_zero_in_low_precision(name, how, dtype):
    """Row 0 has no key to attend to (through ``mask=``, a Keras ``keys_mask`` or a
    causal mask AND a padding mask): its weights and output are exactly 0, no NaN."""
    layer = ATTENTION[name](dtype=dtype)
    keep = np.array([[False] * K, [True, True, False, True]])
    kwargs = {"mask": keep} if how == "mask" else {"keys_mask": keep}
    queries = QUERIES
    if how == "causal+mask":  # self-attention: query 0 sees key 0 only, masked in row 0
        kwargs = {"mask": np.array([[False, True, True, True], [True] * K]),
                  "use_causal_mask": True}
        queries = KEYS
    output, weights = layer(queries, KEYS, VALUES, return_attention_scores=True, **kwargs)
    assert keras.backend.standardize_dtype(weights.dtype) == dtype
    output, weights = np_(output), np_(weights)
    assert np.all(np.isfinite(output)) and np.all(np.isfinite(weights))
    if how == "causal+mask":
        w0 = weights[0, :, 0] if weights.ndim == 4 else weights[0, 0]
        assert np.all(w0 == 0) and np.all(output[0, 0] == 0)
    else:
        assert np.all(weights[0] == 0) and np.all(output[0] == 0)
        # each weight rounded once to the dtype, by <= eps/2 of itself, so <= eps/2 over a
        # row summing to 1 (factor 1: twice that)
        rows = weights[1].sum(-1)
        lc.assert_close(rows, np.ones_like(rows), terms=1, factor=1, dtype=dtype)


@pytest.mark.parametrize("name", list(ATTENTION))
def test_no_keys_at_all_gives_zeros(name):
    """Zero keys (K=0) is a defined input: weights (.., Q, 0), output zeros."""
    output, weights = ATTENTION[name]()(QUERIES, KEYS[:, :0], VALUES[:, :0],
                                        return_attention_scores=True)
    assert weights.shape[-2:] == (Q, 0)
    assert np_(output).shape[:2] == (B, Q) and np.all(np_(output) == 0)


# ----------------------------------------------------------------------------------------
# Whole models: empty sequences, ids outside the vocabulary, too long, decoding


@functools.lru_cache(maxsize=None)
def model_of(kind):
    keras.utils.set_random_seed(3)
    if kind == "transformer":
        return models.transformer_seq2seq(VOCAB, VOCAB, 16, 32, 2, 2, dropout=0.0, max_len=32)
    return models.bahdanau_seq2seq(VOCAB, VOCAB, 8, 16, 2, dropout=0.0)


def model_terms(kind, src_len, tgt_len):
    """Roundings of ``model_of(kind)``'s logits (``terms`` of lc.tolerance)."""
    if kind == "transformer":
        return lc.transformer_terms(16, 32, 2, 2, src_len, tgt_len)
    return lc.bahdanau_terms(8, 16, 2, src_len, tgt_len)


def logits(kind, source, target_in):
    return np_(model_of(kind)({"source": np.asarray(source, "int32"),
                               "target_in": np.asarray(target_in, "int32")}))


SRC = np.array([[5, 6, 7, 8, 0], [4, 9, 11, 0, 0]], "int32")
TGT = np.array([[2, 5, 6, 7], [2, 4, 9, 0]], "int32")


@pytest.mark.parametrize("kind", KINDS)
def test_empty_source_is_like_an_all_padding_source(kind):
    empty = logits(kind, np.zeros((2, 0)), TGT)
    assert empty.shape == (2, 4, VOCAB) and np.all(np.isfinite(empty))
    lc.assert_close(empty, logits(kind, np.zeros((2, 5)), TGT), terms=model_terms(kind, 5, 4))


@pytest.mark.parametrize("kind", KINDS)
def test_empty_target_and_empty_batch(kind):
    assert logits(kind, SRC, np.zeros((2, 0))).shape == (2, 0, VOCAB)
    assert logits(kind, np.zeros((0, 5)), np.zeros((0, 4))).shape == (0, 4, VOCAB)


@pytest.mark.parametrize("kind", KINDS)
def test_out_of_vocabulary_ids_read_as_unk(kind):
    """Ids < 0 or >= vocab_size give exactly what [UNK] (id 1) gives, in both inputs."""
    bad_src = np.array([[VOCAB, 6, -1, 8, 0], [4, 2 ** 30, 11, 0, 0]], "int32")
    bad_tgt = np.array([[2, -7, 6, VOCAB + 1], [2, 4, 9, 0]], "int32")
    unk = lambda x: np.where((x < 0) | (x >= VOCAB), 1, x)  # noqa: E731
    np.testing.assert_array_equal(logits(kind, bad_src, bad_tgt),
                                  logits(kind, unk(bad_src), unk(bad_tgt)))


def test_sequence_longer_than_max_len_names_max_len():
    with pytest.raises(ValueError, match=r"max_len.*Received: max_len=32"):
        logits("transformer", np.ones((1, 40)), TGT[:1])


def check_decoded_rows(tokens, max_len):
    """Rows as greedy_search promises: no start/padding id before the end, 0 after it."""
    assert tokens.dtype == np.int32 and tokens.ndim == 2 and tokens.shape[1] <= max_len
    for row in tokens:
        ends = np.flatnonzero(row == END)
        stop = ends[0] + 1 if len(ends) else len(row)
        assert np.all(row[:stop] != 0) and np.all(row[:stop] != START)
        assert np.all(row[stop:] == 0)


@pytest.mark.parametrize("kind", KINDS_FAST)
@pytest.mark.heavy  # traces the searches
def test_greedy_search_on_all_padding_source(kind):
    model = model_of(kind)
    source = np.array([[0, 0, 0, 0], [5, 6, 7, 0]], "int32")
    tokens = np.asarray(decoding.greedy_search(model, source, 6, START, END))
    check_decoded_rows(tokens, 6)
    again = np.asarray(decoding.greedy_search(model, source, 6, START, END, use_cache=False))
    np.testing.assert_array_equal(again, tokens)
    # Each row as if decoded alone; an all-padding source decodes like an empty one.
    for i in range(2):
        alone = np.asarray(decoding.greedy_search(model, source[i:i + 1], 6, START, END))
        np.testing.assert_array_equal(alone[0], tokens[i, :alone.shape[1]])
        assert np.all(tokens[i, alone.shape[1]:] == 0)
    empty = np.asarray(decoding.greedy_search(model, np.zeros((1, 0), "int32"), 6, START, END))
    np.testing.assert_array_equal(empty[0], tokens[0, :empty.shape[1]])
    beams, scores = decoding.beam_search(model, source, beam_size=2, max_len=6, start_id=START,
                                         end_id=END)
    beams, scores = np.asarray(beams), np.asarray(scores)
    assert beams.shape[:2] == (2, 2) and np.all(np.isfinite(scores))
    for row in beams.reshape(-1, beams.shape[-1]):
        check_decoded_rows(row[None], 6)


# ----------------------------------------------------------------------------------------
# Properties


@functools.lru_cache(maxsize=None)
def encoder_block():
    keras.utils.set_random_seed(5)
    block = TransformerEncoderBlock(D, 16, 2, use_bias=True)
    block(rand(1, 3, D))
    return block


@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_property_encoder_block_is_permutation_equivariant(data):
    """Self-attention + FFN without positions: permuting the positions (and the padding
    mask with them) permutes the outputs."""
    length = data.draw(st.integers(1, 6), label="length")
    x = data.draw(hnp.arrays(np.float32, (1, length, D), elements=st.floats(-3, 3, width=32)))
    keep = data.draw(hnp.arrays(np.bool_, (1, length)), label="keep")
    perm = np.array(data.draw(st.permutations(range(length)), label="perm"))
    block = encoder_block()
    out = np_(block(x, mask=keep))
    lc.assert_close(block(x[:, perm], mask=keep[:, perm]), out[:, perm],
                    terms=lc.encoder_block_terms(D, 16, 2, length))


@pytest.mark.parametrize("kind", KINDS_FAST)
@settings(max_examples=15, deadline=None)
@given(data=st.data())
@pytest.mark.heavy  # a property over many paddings
def test_property_padding_never_changes_real_positions(kind, data):
    """Whole model: more source padding, or more target padding, leaves the logits of
    every real target position unchanged."""
    ids = st.integers(4, VOCAB - 1)
    src_lens = data.draw(st.lists(st.integers(1, 6), min_size=2, max_size=2), label="src_lens")
    tgt_lens = data.draw(st.lists(st.integers(1, 5), min_size=2, max_size=2), label="tgt_lens")
    src = np.zeros((2, max(src_lens)), "int32")
    tgt = np.zeros((2, max(tgt_lens)), "int32")
    for i in range(2):
        src[i, :src_lens[i]] = data.draw(hnp.arrays(np.int32, src_lens[i], elements=ids))
        tgt[i, :tgt_lens[i]] = data.draw(hnp.arrays(np.int32, tgt_lens[i], elements=ids))
    tgt[:, 0] = START
    src_pad = data.draw(st.integers(1, 4), label="src_pad")
    tgt_pad = data.draw(st.integers(0, 3), label="tgt_pad")
    real = tgt != 0
    base = logits(kind, src, tgt)
    padded = logits(kind, np.pad(src, ((0, 0), (0, src_pad))), np.pad(tgt, ((0, 0), (0, tgt_pad))))
    terms = model_terms(kind, src.shape[1] + src_pad, tgt.shape[1] + tgt_pad)
    lc.assert_close(padded[:, :tgt.shape[1]][real], base[real], terms=terms)


# ----------------------------------------------------------------------------------------
# A killed training run resumes from its last saved epoch

EPOCHS = 3
RESUME_ARGS = ["train", "--num-train", "1500", "--num-valid", "60", "--num-test", "5",
               "--epochs", str(EPOCHS), "--num-hiddens", "32", "--ffn-num-hiddens", "64",
               "--num-heads", "2", "--num-layers", "1", "--batch-size", "32", "--max-len", "32",
               "--no-export"]


def _cli(args):
    """``keras-attn ARGS`` (the console script) and its environment."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONUNBUFFERED": "1"}
    exe = shutil.which("keras-attn")
    return [*([exe] if exe else [sys.executable, "-m", "keras_attn.cli"]), *map(str, args)], env


def read_log(run_dir):
    with open(run_dir / "training_log.csv", newline="") as f:
        return list(csv.DictReader(f))


def _saved_epoch(run_dir):
    path = run_dir / "backup" / "training_metadata.json"
    try:
        return runs.read_json(path)["epoch"]
    except (OSError, ValueError, KeyError):
        return 0


@pytest.mark.slow
def test_killed_training_resumes_from_the_saved_epoch(tmp_path):
    ref_dir, run_dir = tmp_path / "reference", tmp_path / "killed"
    cmd, env = _cli([*RESUME_ARGS, "--output", ref_dir])
    reference = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 text=True)
    try:  # the reference run must not outlive a failure: it would load the next tests
        cmd, env = _cli([*RESUME_ARGS, "--output", run_dir])
        victim = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + guards.timeout(40)
            # Wait for a whole epoch: backed up and logged; then kill during the next one.
            while time.monotonic() < deadline and victim.poll() is None:
                saved = _saved_epoch(run_dir)
                if saved >= 1 and (run_dir / "training_log.csv").exists() \
                        and len(read_log(run_dir)) == saved:
                    break
                time.sleep(0.05)
            assert victim.poll() is None, "training finished before it could be killed"
            victim.send_signal(signal.SIGKILL)
            victim.wait(timeout=guards.timeout(3))
        finally:
            if victim.poll() is None:
                victim.kill()
        saved = _saved_epoch(run_dir)
        assert 1 <= saved < EPOCHS and not (run_dir / "metrics.json").exists()

        cmd, env = _cli([*RESUME_ARGS, "--output", run_dir])
        resumed = subprocess.run(cmd, env=env, capture_output=True, text=True,
                                 timeout=guards.timeout(40))
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr
        started = [int(k) for k in re.findall(rf"^Epoch (\d+)/{EPOCHS}$", resumed.stdout, re.M)]
        assert started == list(range(saved + 1, EPOCHS + 1)), resumed.stdout
        reference_out = reference.communicate(timeout=guards.timeout(40))[0]
    finally:
        if reference.poll() is None:
            reference.kill()
            reference.communicate(timeout=guards.timeout(3))
    assert reference.returncode == 0, reference_out

    rows, ref_rows = read_log(run_dir), read_log(ref_dir)
    assert [int(r["epoch"]) for r in rows] == list(range(EPOCHS))  # no repeat, no gap
    # The resumed epoch continued from the saved weights: its loss is far below a fresh
    # first epoch's.
    first_loss = float(ref_rows[0]["loss"])
    assert float(rows[saved]["loss"]) < 0.9 * first_loss, (rows, ref_rows)
    val, ref_val = float(rows[-1]["val_loss"]), float(ref_rows[-1]["val_loss"])
    print(f"resumed from epoch {saved}: final val_loss {val:.4f}, uninterrupted {ref_val:.4f}")
    # Not a rounding tolerance: the resumed run and the uninterrupted one are two trainings,
    # expected to end at comparable losses, not equal ones.
    assert abs(val - ref_val) <= 0.15 * ref_val, (rows, ref_rows)
    assert runs.read_json(run_dir / "metrics.json")["num_sentences"] == 5


# ----------------------------------------------------------------------------------------
# mixed_float16 training of the default dates model stays finite


@pytest.mark.slow
def test_mixed_float16_training_of_the_default_dates_model_stays_finite(tmp_path):
    """The default dates model (TASK_DEFAULTS sizes, Noam schedule, label smoothing, the
    loss-scaled Adam that compile_model makes) trained for ~200 float16 steps: every
    epoch's loss finite, every weight finite. Less data and no evaluation, for time."""
    defaults = training.TASK_DEFAULTS["dates"]
    names = {f.name for f in dataclasses.fields(training.TrainConfig)}
    config = training.TrainConfig(**{
        **{k: v for k, v in defaults.items() if k in names},
        "num_train": 1600, "num_valid": 64, "num_test": 1, "batch_size": 32,
        "mixed_precision": "mixed_float16"})
    splits = data.dates_splits(config.num_train, config.num_valid, config.num_test)
    src_tok = text.Tokenizer(text.char_vocab([s for s, _ in splits["train"]]))
    tgt_tok = text.Tokenizer(text.char_vocab([t for _, t in splits["train"]], extra_chars=""))
    config.src_vocab_size, config.tgt_vocab_size = src_tok.vocab_size, tgt_tok.vocab_size
    train_ds = data.make_dataset(splits["train"], src_tok, tgt_tok, config.batch_size,
                                 max_len=config.max_len)
    valid_ds = data.make_dataset(splits["valid"], src_tok, tgt_tok, config.batch_size,
                                 shuffle=False, max_len=config.max_len)
    steps = sum(1 for _ in train_ds)
    with lc.global_policy("mixed_float16"):
        model = training.compile_model(training.build_model(config), config, steps)
        history = model.fit(train_ds, validation_data=valid_ds, epochs=4, verbose=0,
                            shuffle=False, callbacks=[keras.callbacks.TerminateOnNaN()])
    assert isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
    assert model.get_layer("decoder").compute_dtype == "float16"
    assert int(model.optimizer.iterations) == 4 * steps >= 200  # a few hundred updates
    losses, val_losses = history.history["loss"], history.history["val_loss"]
    assert len(losses) == 4 and np.all(np.isfinite(losses + val_losses)), history.history
    assert losses[-1] < losses[0]
    for w in model.weights:
        assert np.all(np.isfinite(np_(w))), w.path
    for key in ("num_hiddens", "ffn_num_hiddens", "num_heads", "num_layers"):
        assert getattr(config, key) == defaults[key]


@pytest.mark.slow  # a whole training.train run with evaluation
def test_training_does_not_warn_that_input_ran_out(tmp_path):
    """Keras warned "Your input ran out of data; interrupting training" after the first
    validation pass (bucketed datasets hide their cardinality); nothing is interrupted, but
    a user reading the log cannot know that."""
    import warnings

    from keras_attn.training import recipes as training

    config = training.TrainConfig(num_train=300, num_valid=40, num_test=5, num_hiddens=16,
                                  ffn_num_hiddens=32, num_heads=2, num_layers=1,
                                  batch_size=64, epochs=2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        metrics = training.train(config, str(tmp_path / "run"), log=lambda *a: None)
    assert not [w for w in caught if "ran out of data" in str(w.message)]
    assert metrics["num_sentences"] == 5
