"""The SavedModel's XLA-compiled options signature (``translate_v2_xla``,
``keras_attn.export.request``): the inputs and outputs of ``translate_v2`` and its answers
(the same translations, alignments and truncation flags; scores and confidences within the
float32 roundings of a search) for greedy requests, which it compiles, and for beam search
and sampling, which it hands to ``translate_v2``'s graph; the server's engine calls it
where the export has it and ``--xla`` asks for it (off by default)."""
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from tests.support import layer_checks as lc
from keras_attn.decoding import DecodingOptions
from keras_attn.export import runtime
from keras_attn.export.option_sets import (COMPILED_BUCKETS, COMPILED_SIGNATURES,
                                           LATEST_OPTIONS_SIGNATURE, compiled_signature)
from keras_attn.translator import Translator

from tests.support import ROOT
COMPILED = LATEST_OPTIONS_SIGNATURE + "_xla"
DATES = ["3 March 2021", "le 4 juillet 1999", "Wed, 3 Mar 2021", "25/12/1999", "1 Jan 1900"]
# The last text holds two sentences: the request's rows are not its texts.
ENGLISH = ["Thank you!", "I'm hungry.", "Who is it?", "Call me tomorrow.",
           "It's raining. I'm cold and hungry."]
CASES = [
    {},
    dict(return_alignments=True),
    dict(target_prefix="PREFIX", max_length=9),
    dict(repetition_penalty=1.5, no_repeat_ngram_size=2, max_length_factor=0.8),
    dict(beam_size=3, num_hypotheses=2, return_alignments=True),  # translate_v2's graph
    dict(sampling_topk=5, sampling_temperature=1.5, beam_size=2, num_hypotheses=2, seed=7),
]
# One text, a count padded to its bucket, and more rows than the largest bucket (chunks).
COUNTS = (1, 3, COMPILED_BUCKETS[-1] + 1)


def test_compiled_signature_names_its_twin():
    assert COMPILED_SIGNATURES == {COMPILED: LATEST_OPTIONS_SIGNATURE,
                                   "translate_v3_xla": "translate_v3",
                                   "translate_v4_xla": "translate_v4"}
    assert compiled_signature("translate_v2", ["translate_v2", COMPILED]) == COMPILED
    assert compiled_signature("translate_v2", ["translate_v2"]) is None
    assert compiled_signature("translate", ["translate", COMPILED]) is None


def test_serve_flag_turns_the_compiled_signature_on(monkeypatch):
    from keras_attn.cli import build_parser

    def parse(*argv):
        return build_parser().parse_args(["serve", "exported", *argv])

    assert parse().xla is False and parse("--xla").xla is True
    monkeypatch.setenv("KERAS_ATTN_SERVE_XLA", "1")
    assert parse().xla is True


@pytest.fixture(scope="module", params=["dates", "sentencepiece"])
def exported(request, tmp_path_factory):
    """``(Translator, loaded SavedModel, its path, texts, prefix, config)``: the run
    exported with its options signatures."""
    from keras_attn.export.saved_model import export_saved_model

    if request.param == "dates":
        run_dir, texts, prefix = os.path.join(ROOT, "exported", "run"), DATES, "19"
    else:
        run_dir = request.getfixturevalue("tiny_sentencepiece")["run_dir"]
        texts, prefix = ENGLISH, "Je"
    translator = Translator.from_run_dir(run_dir)
    out = tmp_path_factory.mktemp(f"compiled_{request.param}")
    export_saved_model(translator, out)
    path = os.path.join(out, "translator", "1")
    with open(os.path.join(run_dir, "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    return translator, tf.saved_model.load(path), path, texts, prefix, config


def call(loaded, name, texts, **options):
    inputs = runtime.option_inputs(DecodingOptions.from_kwargs(**options))
    out = loaded.signatures[name](text=tf.constant(texts, tf.string),
                                  **{k: tf.constant(v) for k, v in inputs.items()})
    return {k: v.numpy() for k, v in out.items()}


def score_terms(config):
    """Roundings of a hypothesis's score (``lc.tolerance``'s ``terms``): the logits of
    each of ``max_len`` steps, a log-softmax over the target vocabulary, their sum."""
    n = config["max_len"]
    logits = lc.transformer_terms(config["num_hiddens"], config["ffn_num_hiddens"],
                                  config["num_heads"], config["num_layers"], n, n,
                                  norm_first=bool(config.get("norm_first", False)))
    return lc.log_prob_terms(logits, config["tgt_vocab_size"], n)


@pytest.mark.slow
@pytest.mark.kernels
@pytest.mark.parametrize("options", CASES, ids=lambda o: ",".join(o) or "defaults")
def test_compiled_signature_answers_as_translate_v2(exported, options):
    translator, loaded, _, texts, prefix, config = exported
    options = {k: prefix if v == "PREFIX" else v for k, v in options.items()}
    for count in COUNTS:
        batch = (texts * count)[:count]
        expected = call(loaded, LATEST_OPTIONS_SIGNATURE, batch, **options)
        got = call(loaded, COMPILED, batch, **options)
        for key in ("translations", "alignments", "truncated"):
            np.testing.assert_array_equal(got[key], expected[key], err_msg=f"{key} {count}")
        terms = score_terms(config)
        lc.assert_close(got["scores"], expected["scores"], terms=terms, err_msg=str(count))
        log_prob_tolerance = lc.tolerance(expected["scores"], terms=terms)
        np.testing.assert_allclose(
            got["confidences"], expected["confidences"], rtol=0, err_msg=str(count),
            atol=lc.confidence_tolerance(translator.calibrator, log_prob_tolerance))


@pytest.mark.slow
def test_compiled_signature_has_translate_v2s_inputs_and_outputs(exported):
    from keras_attn.export.saved_model import saved_model_report, saved_model_signatures

    path = exported[2]
    signatures = saved_model_signatures(path)
    assert signatures[COMPILED] == signatures[LATEST_OPTIONS_SIGNATURE]
    assert saved_model_report(path)["xla_ops"] == []  # the other signatures run without XLA
    out = call(exported[1], COMPILED, [])
    assert out["translations"].shape == (0, 1) and out["scores"].shape == (0, 1)


@pytest.mark.slow
@pytest.mark.parametrize("bad, name", [
    (dict(beam_size=0), "beam_size"), (dict(sampling_topp=0.0), "sampling_topp"),
    (dict(max_length=1000), "max_length"), (dict(max_length=2, target_prefix="PREFIX"),
                                            "target_prefix")])
def test_compiled_signature_refuses_bad_options_as_translate_v2(exported, bad, name):
    loaded, texts, prefix = exported[1], exported[3], exported[4]
    bad = {k: prefix * 3 if v == "PREFIX" else v for k, v in bad.items()}
    inputs = {k: tf.constant(v) for k, v in runtime.option_inputs(DecodingOptions()).items()}
    inputs.update({k: tf.constant([v] if k == "target_prefix" else v, inputs[k].dtype)
                   for k, v in bad.items()})
    with pytest.raises(tf.errors.InvalidArgumentError, match=name):
        loaded.signatures[COMPILED](text=tf.constant(texts), **inputs)
    assert call(loaded, COMPILED, texts)["translations"].shape == (len(texts), 1)


@pytest.mark.slow
def test_engine_calls_the_compiled_signature_when_told_to(exported):
    from keras_attn.serve.engines import SavedModelEngine

    path, texts = exported[2], exported[3]
    compiled, plain = SavedModelEngine(path, xla=True), SavedModelEngine(path)
    # The newest options signature: translate_v4 where the export passes spans through.
    newest = "translate_v4" if "glossary_source" in plain._dtypes else LATEST_OPTIONS_SIGNATURE
    assert newest == ("translate_v2" if exported[0].passthrough is False else "translate_v4")
    assert (compiled.signature_name, compiled.warm_sizes) == (newest + "_xla",
                                                              COMPILED_BUCKETS)
    assert (plain.signature_name, plain.warm_sizes) == (newest, (1,))
    for options in (DecodingOptions(), DecodingOptions(beam_size=2, num_hypotheses=2)):
        got, expected = compiled.translate(texts, options), plain.translate(texts, options)
        assert [[h["translation"] for h in hyps] for hyps in got] == [
            [h["translation"] for h in hyps] for hyps in expected]
