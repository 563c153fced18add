"""Decoding options per request: one validated object, ValueError naming the
option and its value for every bad choice."""
import pytest

from keras_attn.decoding.options import NAMES, DecodingOptions


def test_defaults_follow_ctranslate2():
    opts = DecodingOptions()
    assert (opts.beam_size, opts.num_hypotheses, opts.target_prefix) == (1, 1, "")
    assert (opts.sampling_topk, opts.sampling_topp, opts.sampling_temperature) == (1, 1.0, 1.0)
    assert (opts.seed, opts.return_alignments, opts.sampling) == (0, False, False)
    resolved = opts.resolve(max_length_limit=64, length_penalty=0.6)
    assert (resolved.max_length, resolved.length_penalty) == (64, 0.6)
    assert DecodingOptions(max_length=10).resolve(64, 0.6).max_length == 10


@pytest.mark.parametrize("kwargs, name", [
    (dict(beam_size=0), "beam_size"),
    (dict(beam_size=2.0), "beam_size"),
    (dict(beam_size=True), "beam_size"),
    (dict(num_hypotheses=0), "num_hypotheses"),
    (dict(beam_size=2, num_hypotheses=3), "num_hypotheses"),
    (dict(sampling_topk=4, num_hypotheses=2), "num_hypotheses"),
    (dict(sampling_topp=0.0), "sampling_topp"),
    (dict(sampling_topp=1.5), "sampling_topp"),
    (dict(sampling_topp="0.9"), "sampling_topp"),
    (dict(sampling_temperature=0.0), "sampling_temperature"),
    (dict(sampling_temperature=-1.0), "sampling_temperature"),
    (dict(sampling_topk=0), "sampling_topk"),
    (dict(max_length=0), "max_length"),
    (dict(max_length=3.5), "max_length"),
    (dict(seed=2**31), "seed"),
    (dict(seed="1"), "seed"),
    (dict(target_prefix=b"x"), "target_prefix"),
    (dict(return_alignments=1), "return_alignments"),
    (dict(length_penalty="a"), "length_penalty"),
    (dict(length_penalty=float("inf")), "length_penalty"),
    (dict(repetition_penalty=0.0), "repetition_penalty"),
    (dict(repetition_penalty=float("nan")), "repetition_penalty"),
    (dict(no_repeat_ngram_size=-1), "no_repeat_ngram_size"),
    (dict(no_repeat_ngram_size=9), "no_repeat_ngram_size"),
    (dict(no_repeat_ngram_size=2.0), "no_repeat_ngram_size"),
    (dict(max_length_factor=-0.5), "max_length_factor"),
    (dict(max_length_factor="2"), "max_length_factor"),
])
def test_bad_option_names_itself(kwargs, name):
    with pytest.raises(ValueError, match=f"`{name}`"):
        DecodingOptions(**kwargs)


def test_limits_fixed_at_export():
    DecodingOptions(beam_size=4).validate(max_beam_size=4, max_length_limit=64)
    with pytest.raises(ValueError, match=r"`beam_size`.*fixed at export.*beam_size=5"):
        DecodingOptions(beam_size=5).validate(max_beam_size=4)
    with pytest.raises(ValueError, match=r"`max_length`.*max_length=65"):
        DecodingOptions(max_length=65).validate(max_length_limit=64)
    with pytest.raises(ValueError, match="`target_prefix`"):
        DecodingOptions(max_length=3, target_prefix="a b c").validate(prefix_tokens=3)
    with pytest.raises(ValueError, match="`target_prefix`"):
        DecodingOptions(target_prefix="a").validate(max_length_limit=4, prefix_tokens=4)
    DecodingOptions(max_length=4, target_prefix="a").validate(prefix_tokens=3)


def test_every_option_is_declared_once_and_derived_everywhere():
    """The declarations give the names, the CLI flags, the serving signature's inputs and
    the docs table: one more option would appear in each."""
    import argparse

    from keras_attn.cli.decode import add_option_flags
    from keras_attn.decoding.options import OPTIONS, docs_table

    assert tuple(OPTIONS) == NAMES
    parser = argparse.ArgumentParser()
    add_option_flags(parser, skip=())
    flags = {a.dest for a in parser._actions if a.dest != "help"}
    assert flags == set(NAMES)
    table = docs_table()
    assert all(f"| `{name}` |" in table for name in NAMES)
    import pathlib

    page = pathlib.Path(__file__).resolve().parents[2] / "docs" / "decoding.md"
    assert table in page.read_text("utf-8"), (
        "docs/decoding.md's options table: paste keras_attn.decoding.options.docs_table()")
    from keras_attn.export import request, runtime

    # The options signatures' inputs: every decoding option, then translate_v3's
    # passthrough and translate_v4's glossary.
    from keras_attn.decoding.options import DECODING_NAMES, OPTIONS as ALL

    assert list(request.OPTION_SPECS) == [*DECODING_NAMES, "passthrough",
                                          *ALL["glossary"].inputs]
    assert list(runtime.option_inputs(DecodingOptions())) == list(DECODING_NAMES)
    # The artefact's own values travel as the declared unset values.
    inputs = runtime.option_inputs(DecodingOptions())
    assert (inputs["max_length"], inputs["length_penalty"]) == (0, -1.0)


def test_unknown_keyword_is_named():
    with pytest.raises(ValueError, match="beam"):
        DecodingOptions.from_kwargs(beam=2)
    assert DecodingOptions.from_kwargs(**{n: getattr(DecodingOptions(), n) for n in NAMES}) \
        == DecodingOptions()


# --- the samplers behind the options (keras.ops, eager) -----------------------------------------
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_attn import decoding, models  # noqa: E402

START, END, MAX = 2, 3, 12
SOURCE = np.array([[5, 6, 7, 8, 3, 0, 0], [9, 10, 3, 0, 0, 0, 0], [11, 12, 13, 14, 15, 16, 3]],
                  "int32")


@pytest.fixture(scope="module")
def model():
    tf.keras.utils.set_random_seed(1)
    return models.transformer_seq2seq(40, 30, num_hiddens=32, ffn_num_hiddens=64, num_heads=4,
                                      num_layers=2, dropout=0.0, max_len=64)


def run(model, prefix=None, **kwargs):
    opts = DecodingOptions(**kwargs).resolve(MAX, 0.6)
    out = decoding.decode(model, SOURCE, opts, MAX, START, END, prefix=prefix)
    return {k: np.asarray(v) for k, v in out.items()}


def reference_log_probs(model, tokens):
    """Per-token log-probabilities of ``tokens`` (B, T) under the model: one teacher-forced
    call of the whole model (no cache), padding and [START] banned as the decoders do
    (``decoding.log_probs``), gathered in numpy."""
    target_in = np.concatenate([np.full((len(SOURCE), 1), START, "int32"), tokens[:, :-1]], 1)
    logits = model({"source": np.asarray(SOURCE, "int32"), "target_in": target_in},
                   training=False)
    lp = np.asarray(decoding.log_probs(logits, START), "float64")
    return np.take_along_axis(lp, tokens[..., None], 2)[..., 0]


def test_uniform_is_the_same_bits_and_uniform():
    u = np.asarray(decoding.uniform(7, np.arange(20000, dtype="int32"), 3))
    np.testing.assert_array_equal(u, np.asarray(decoding.uniform(7, np.arange(20000), 3)))
    assert 0.0 < u.min() and u.max() < 1.0 and abs(u.mean() - 0.5) < 0.01
    assert abs(u.var() - 1 / 12) < 0.003
    other = np.asarray(decoding.uniform(8, np.arange(20000), 3))
    assert abs(np.corrcoef(u, other)[0, 1]) < 0.03  # seeds are not shifted rows


def test_defaults_are_greedy(model):
    greedy = decoding.greedy_decode_fixed(model, SOURCE, MAX, START, END)
    out = run(model)
    np.testing.assert_array_equal(out["tokens"][:, 0], greedy["tokens"])
    np.testing.assert_array_equal(out["scores"][:, 0], greedy["log_prob"])


def test_topk_one_is_greedy_whatever_the_seed(model):
    greedy = run(model)
    for seed in (0, 3):
        np.testing.assert_array_equal(
            run(model, sampling_topk=1, sampling_temperature=3.0, seed=seed)["tokens"],
            greedy["tokens"])


def test_sampling_repeats_with_its_seed(model):
    opts = dict(sampling_topk=30, sampling_temperature=4.0, beam_size=3, num_hypotheses=3)
    a, b = run(model, seed=11, **opts), run(model, seed=11, **opts)
    np.testing.assert_array_equal(a["tokens"], b["tokens"])
    np.testing.assert_array_equal(a["scores"], b["scores"])
    c = run(model, seed=12, **opts)
    assert not np.array_equal(a["tokens"], c["tokens"])
    assert not np.array_equal(a["tokens"][:, 0], a["tokens"][:, 1])  # own stream per sample


def test_topp_tiny_is_greedy(model):
    """Nucleus with p -> 0 keeps only the most likely token."""
    np.testing.assert_array_equal(
        run(model, sampling_topk=30, sampling_topp=1e-6, seed=4)["tokens"], run(model)["tokens"])


def test_nbest_sorted_with_reference_scores(model):
    out = run(model, beam_size=4, num_hypotheses=3, length_penalty=0.6)
    assert out["tokens"].shape[:2] == (3, 3)
    assert (np.diff(out["scores"], axis=1) <= 0).all()
    for n in range(3):
        tokens, lengths = out["tokens"][:, n], out["lengths"][:, n]
        lp = reference_log_probs(model, tokens)
        mask = np.arange(MAX)[None, :] < lengths[:, None]
        expected = (lp * mask).sum(1) / ((5.0 + lengths) / 6.0) ** 0.6
        np.testing.assert_allclose(out["scores"][:, n], expected, rtol=1e-4, atol=1e-4)


def test_prefix_is_forced_then_continued(model):
    prefix = np.array([[7, 8], [9, 0], [0, 0]], "int32")
    for kwargs in (dict(), dict(beam_size=4, num_hypotheses=2)):
        out = run(model, prefix=prefix, **kwargs)
        for n in range(out["tokens"].shape[1]):
            np.testing.assert_array_equal(out["tokens"][0, n, :2], [7, 8])
            assert out["tokens"][1, n, 0] == 9
        assert (out["lengths"] >= [[2], [1], [1]]).all()


def test_max_length_per_request(model):
    out = run(model, max_length=4)
    assert (out["lengths"] <= 4).all() and (out["tokens"][..., 4:] == 0).all()
    full = run(model)
    np.testing.assert_array_equal(out["tokens"][..., :4], full["tokens"][..., :4])


# --- Translator on the committed model (exported/run, dates) ------------------------------------
import pathlib  # noqa: E402

RUN = pathlib.Path(__file__).resolve().parents[2] / "exported" / "run"
DATES = ["3 March 2021", "le 4 juillet 1999", "July 5, 1987"]


@pytest.fixture(scope="module")
def translator():
    from keras_attn.translator import Translator
    return Translator.from_run_dir(str(RUN))


@pytest.mark.slow  # traces four decoders of the Translator (test_request checks the options)
def test_translator_defaults_match_translate(translator):
    best = translator.translate(DATES)
    nbest = translator.translate_nbest(DATES)
    assert [h[0]["translation"] for h in nbest] == best
    beam = translator.translate_nbest(DATES, beam_size=4, num_hypotheses=3)
    assert [h[0]["translation"] for h in beam] == translator.translate(DATES, beam_size=4)
    for hyps in beam:
        assert len(hyps) == 3 and hyps[0]["score"] >= hyps[1]["score"] >= hyps[2]["score"]


@pytest.mark.slow  # traces two more decoders
def test_translator_prefix_and_sampling(translator):
    for hyps in translator.translate_nbest(DATES, target_prefix="2020"):
        assert hyps[0]["translation"].startswith("2020")
    opts = dict(sampling_topk=5, sampling_temperature=2.0, beam_size=2, num_hypotheses=2, seed=3)
    assert translator.translate_nbest(DATES, **opts) == translator.translate_nbest(DATES, **opts)


@pytest.mark.parametrize("kwargs, name", [
    (dict(max_length=10_000), "max_length"), (dict(beam_size=0), "beam_size"),
    (dict(max_length=2, target_prefix="2020-03"), "target_prefix"), (dict(beam=2), "beam")])
def test_translator_bad_options(translator, kwargs, name):
    with pytest.raises(ValueError, match=name):
        translator.translate_nbest(DATES, **kwargs)


@pytest.mark.slow  # loads the run and traces two decoders, twice
def test_cli_nbest_and_prefix(capsys):
    from keras_attn import cli
    assert cli.main(["translate", str(RUN), "3 March 2021", "--beam-size", "4",
                     "--num-hypotheses", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "3 March 2021" and len(lines) == 3
    ranks = [line.split("\t") for line in lines[1:]]
    assert [r[0].strip() for r in ranks] == ["1", "2"] and ranks[1][2] == ranks[1][2].strip()
    assert cli.main(["translate", str(RUN), "3 March 2021", "--target-prefix", "2020"]) == 0
    assert capsys.readouterr().out.startswith("2020")


def test_uniform_in_tflite_is_the_same_bits_with_builtins_only():
    """The seed's draws are the same bits in a TFLite file (builtins only, no Flex)."""
    from ai_edge_litert.interpreter import Interpreter

    class Draw(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([], tf.int32), tf.TensorSpec([None], tf.int32),
                                      tf.TensorSpec([], tf.int32)])
        def draw(self, seed, rows, step):
            return {"u": decoding.uniform(seed, rows, step)}

    module = Draw()
    conv = tf.lite.TFLiteConverter.from_concrete_functions(
        [module.draw.get_concrete_function()], module)
    conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    interpreter = Interpreter(model_content=conv.convert())
    runner = interpreter.get_signature_runner(list(interpreter.get_signature_list())[0])
    rows = np.arange(2000, dtype="int32")
    for seed in (0, 7, -123456789, 2**31 - 1):
        for step in (0, 63):
            np.testing.assert_array_equal(
                runner(seed=np.int32(seed), rows=rows, step=np.int32(step))["u"],
                module.draw(seed, rows, step)["u"].numpy())
