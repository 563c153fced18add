"""keras_attn.export.ctranslate2: a run as a CTranslate2 model, checked against our decoders.

The session's small dates Transformer (conftest's ``tiny_dates``, committed) is exported;
CTranslate2 must reproduce our greedy outputs token for token (``Translator`` and the
SavedModel), score our outputs with the same log-probabilities, and agree with our beam
search as far as the two algorithms allow. Other architectures (biases, pre-norm, tied
embeddings, another epsilon) are compared on random weights, teacher-forced.
"""
import dataclasses
import json
import os
import shutil
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests.support import guards

ctranslate2 = pytest.importorskip(
    "ctranslate2", reason="CTranslate2 is not installed (pip install -e '.[ctranslate2]')")

from keras_attn import cli, data, export, models  # noqa: E402

from keras_attn.core import runs

from keras_attn.text import tokenizers as text

from keras_attn.training import recipes as training
from keras_attn.export import ctranslate2 as ct2_export  # noqa: E402
from keras_attn.export import ctranslate2_compare as ct2_compare  # noqa: E402
from keras_attn.export import ctranslate2_runtime as ct2_runtime  # noqa: E402
from keras_attn.layers import TransformerDecoder, TransformerEncoder  # noqa: E402
from keras_attn.decoding.options import CONTROL_DEFAULTS  # noqa: E402
from keras_attn.core.special_tokens import END_ID  # noqa: E402
from keras_attn.translation import pipeline  # noqa: E402
from keras_attn.translator import Translator  # noqa: E402

# CTranslate2 picks its kernels from the CPU (CT2_FORCE_CPU_ISA caps them): the agreement
# tests run again under other CPUs' kernels in CI.
pytestmark = pytest.mark.kernels

NUM_INPUTS = 200
from tests.support import ROOT as REPO


# --- fixtures ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def run(tiny_dates):
    """The session's tiny dates run and its SavedModel (conftest.tiny_dates, shared with
    the export tests)."""
    return {"dir": tiny_dates["run_dir"], "inputs": tiny_dates["inputs"],
            "saved_model": os.path.join(tiny_dates["export_dir"], "saved_model",
                                        export.MODEL_NAME, "1")}


@pytest.fixture(scope="module")
def translator(run):
    return Translator.from_run_dir(run["dir"])


@pytest.fixture(scope="module")
def exported(run, tmp_path_factory):
    path = str(tmp_path_factory.mktemp("ct2_export") / "dates_ct2")
    return ct2_export.export_ctranslate2(run["dir"], path)


@pytest.fixture(scope="module")
def ct2(exported):
    return ct2_runtime.CTranslate2Translator(exported["path"], intra_threads=2)


@pytest.fixture(scope="module")
def source(run, translator):
    return translator.encode(run["inputs"]).numpy()


@pytest.fixture(scope="module")
def committed(tmp_path_factory):
    """The committed, trained dates model (exported/run) exported to CTranslate2 (float32),
    with 200 held-out dates: where agreement measures the export, not near ties of a
    barely trained model."""
    run_dir = os.path.join(REPO, "exported", "run")
    if not os.path.isfile(os.path.join(run_dir, "model.keras")):
        pytest.skip("exported/run (the committed default model) is missing")
    translator = Translator.from_run_dir(run_dir)
    path = str(tmp_path_factory.mktemp("ct2_committed") / "ct2")
    ct2_export.CTranslate2Exporter().export(translator, path, samples=["3 March 2021"])
    held_out = [s for s, _ in data.dates_splits(30000, 1000, 2000, seed=0)["test"][:200]]
    return {"translator": translator, "sentences": held_out,
            "prefixes": ("2020", "19", "1999-12"),
            "ct2": ct2_runtime.CTranslate2Translator(path, intra_threads=2),
            # Measured: every best hypothesis equal with CTranslate2's AVX-512 and AVX2
            # kernels (docs/decoding_options.md); at most 3 % of 200 may differ.
            "min_best_agreement": 0.97}


@pytest.fixture(scope="module")
def sentencepiece(tiny_sentencepiece, tmp_path_factory):
    """The session's tiny SentencePiece English->French run exported to CTranslate2, on its
    16 training sources (run_fixtures.PAIRS)."""
    from tests.support import run_fixtures

    translator = Translator.from_run_dir(tiny_sentencepiece["run_dir"])
    path = str(tmp_path_factory.mktemp("ct2_sentencepiece") / "ct2")
    ct2_export.CTranslate2Exporter().export(translator, path, samples=["Hello!"])
    ct2 = ct2_runtime.CTranslate2Translator(path, intra_threads=2)
    # The repetition controls off on both sides (a subword run has them on by default):
    # these tests rescore hypotheses teacher-forced, under the model's own probabilities.
    off = dict(CONTROL_DEFAULTS["character"])
    translator.controls, ct2.controls = dict(off), dict(off)
    # Spans ("2:30") are placed by alignments in Translator, proportionally in CTranslate2
    # (docs/real_text.md): these tests compare the decoding, so neither passes them through.
    translator.passthrough = ct2.passthrough = False
    return {"translator": translator, "sentences": [en for en, _ in run_fixtures.PAIRS],
            "prefixes": ("Je", "Il est"), "ct2": ct2,
            # Measured: 16 of 16 (AVX-512 and AVX2); 3 of 16 may differ (a barely trained
            # model: a near tie is a property of a row, not of the export).
            "min_best_agreement": 0.8}


def _rows(ids):
    return [[t for t in row if t != 0] for row in np.asarray(ids).tolist()]


def _agreement(a, b):
    return sum(x == y for x, y in zip(a, b)) / len(a)


# --- the exported directory ----------------------------------------------------------------
def test_forced_cpu_isa_is_in_force(exported):
    """``CT2_FORCE_CPU_ISA`` (CI's other-CPU pass) selects CTranslate2's kernels: its log
    names the ISA it selected when a model loads."""
    wanted = os.environ.get("CT2_FORCE_CPU_ISA")
    if not wanted:
        pytest.skip("CT2_FORCE_CPU_ISA is not set: CTranslate2 chooses by the CPU")
    code = "import ctranslate2, sys; ctranslate2.Translator(sys.argv[1], device='cpu')"
    proc = subprocess.run([sys.executable, "-c", code, exported["path"]], capture_output=True,
                          text=True, env=dict(os.environ, CT2_VERBOSE="1"),
                          timeout=guards.timeout(5))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"Selected ISA: {wanted}" in proc.stdout + proc.stderr, proc.stderr[-2000:]



def test_layout_and_report(exported):
    path = exported["path"]
    # CTranslate2 writes one shared_vocabulary.json when both vocabularies are equal (as
    # here: char_vocab's extra characters), else source_ and target_vocabulary.json.
    vocab_json = ("shared_vocabulary.json" if os.path.exists(
        os.path.join(path, "shared_vocabulary.json")) else "target_vocabulary.json")
    assert set(os.listdir(path)) == {
        "config.json", "keras_attn.json", "model.bin", "src_vocab.txt", "tgt_vocab.txt"} | (
        {vocab_json} if vocab_json.startswith("shared") else
        {"source_vocabulary.json", "target_vocabulary.json"})
    assert not [n for n in os.listdir(os.path.dirname(path)) if n.startswith(".tmp-")]
    config = runs.read_json(os.path.join(path, "config.json"))
    assert config["add_source_eos"] is True and config["layer_norm_epsilon"] == 1e-5
    assert config["decoder_start_token"] == "<s>" and config["eos_token"] == "</s>"
    vocab = runs.read_json(os.path.join(path, vocab_json))
    assert vocab[:4] == ["<blank>", "<unk>", "<s>", "</s>"]
    ours = text.load_vocab(os.path.join(path, "tgt_vocab.txt"))
    assert vocab[4:] == ours[4:] and ours[:4] == text.RESERVED_TOKENS
    assert exported["architecture"] == {"num_layers": [2, 2], "num_heads": 4,
                                        "pre_norm": False, "epsilon": 1e-5,
                                        "use_bias": [False, False], "tie_embeddings": False}
    samples = exported["samples"]  # the run's samples, checked while exporting
    assert samples["agreement"] == 1.0 and samples["max_logprob_diff"] < 1e-4
    assert exported["total_bytes"] == sum(exported["files"].values())
    meta = runs.read_json(os.path.join(path, "keras_attn.json"))
    assert meta["max_len"] == 32 and meta["decoding"]["min_decoding_length"] == 0


# --- greedy: token for token -----------------------------------------------------------------
def test_greedy_equals_translator_token_for_token(run, translator, ct2, source):
    ours = np.asarray(translator.translate_ids(source))
    theirs = ct2.translate_ids(source)
    assert _rows(theirs) == _rows(ours)
    assert ct2.translate(run["inputs"]) == translator.translate(run["inputs"])


def test_greedy_equals_saved_model(run, ct2, source):
    loaded = tf.saved_model.load(run["saved_model"])
    ids = loaded.signatures[export.IDS_SIGNATURE](source=tf.constant(source))["tokens"]
    assert _rows(ct2.translate_ids(source)) == _rows(ids.numpy())
    texts = loaded.signatures[export.SERVING_SIGNATURE](text=tf.constant(run["inputs"]))
    assert ct2.translate(run["inputs"]) == [t.decode() for t in texts["translation"].numpy()]


def test_plain_ctranslate2_api(run, translator, exported):
    """What a client without keras_attn does: our tokens in, CTranslate2's options."""
    model = ctranslate2.Translator(exported["path"], intra_threads=2)
    ct2 = ct2_runtime.CTranslate2Translator(exported["path"])
    tokens = ct2.encode(run["inputs"][:20])  # our tokenizer's strings, no </s>
    results = model.translate_batch(tokens, beam_size=1, min_decoding_length=0,
                                    max_decoding_length=32, max_input_length=32)
    out = ["".join(t[2:] if t.startswith("##") else t for t in r.hypotheses[0])
           for r in results]  # character vocabulary: "##c" pieces
    assert out == translator.translate(run["inputs"][:20])


def test_log_probs_match(run, translator, ct2):
    result = ct2_compare.compare(translator, ct2, run["inputs"][:64])
    assert result["agreement"] == 1.0
    print("max |log p(ours) - log p(CTranslate2)|:", result["max_logprob_diff"])
    assert result["max_logprob_diff"] < 1e-4


# --- beam search: as far as the algorithms agree ---------------------------------------------
def test_beam_agreement(translator, ct2, source):
    ours_0 = _rows(translator.translate_ids(source, beam_size=4, length_penalty=0.0))
    ours_6 = _rows(translator.translate_ids(source, beam_size=4, length_penalty=0.6))
    agree = {
        # Theirs and ours (GNMT's alpha) at 0: both rank by the sum of log-probabilities.
        "alpha0_vs_length_penalty0": _agreement(ours_0, _rows(ct2.translate_ids(
            source, 4, ct2_options={"length_penalty": 0.0, "num_hypotheses": 1}))),
        # beam_size hypotheses with raw scores, reranked with the GNMT penalty.
        "alpha0.6_vs_reranked": _agreement(ours_6, _rows(ct2.translate_ids(source, 4, 0.6))),
        # CTranslate2's own length normalisation: a different ranking.
        "alpha0.6_vs_length_penalty1": _agreement(ours_6, _rows(ct2.translate_ids(
            source, 4, ct2_options={"length_penalty": 1.0, "num_hypotheses": 1}))),
    }
    print("beam agreement with CTranslate2:", json.dumps(agree))
    assert agree["alpha0_vs_length_penalty0"] >= 0.95
    assert agree["alpha0.6_vs_reranked"] >= 0.95


# --- per-request decoding options (API.md): the same as Translator's where CTranslate2 can ----
# The tiny SentencePiece run is trained and exported for the session (~75 s): slow pass.
MODELS = ["committed", pytest.param("sentencepiece", marks=pytest.mark.slow)]


def _texts(nbest):
    """The best translation of each sentence."""
    return [hyps[0]["translation"] for hyps in nbest]


def _best_scores_diff(ours, theirs):
    """Largest difference between the two engines' scores of equal best translations."""
    return max([0.0] + [abs(a[0]["score"] - b[0]["score"]) for a, b in zip(ours, theirs)
                        if a[0]["translation"] == b[0]["translation"]])


def _rescored_diff(m, **options):
    """Every CTranslate2 hypothesis of the n-best lists against our model's score of the
    same ids (teacher-forced): the sum of the log-probabilities after the prefix, divided
    for beam search by ((5 + n) / 6) ** length_penalty. (Texts cannot be matched: two
    SentencePiece segmentations can give one text.)"""
    ct2, translator = m["ct2"], m["translator"]
    opts = ct2.options(**options)
    prefix = ct2.prefix_tokens(opts.target_prefix)
    nbest = ct2.decode_nbest(ct2.encode(m["sentences"]), opts, prefix)
    flat = [(ids, score) for hyps in nbest for ids, score in hyps]
    tokens = np.zeros((len(flat), max(len(ids) for ids, _ in flat)), np.int32)
    for r, (ids, _) in enumerate(flat):
        tokens[r, : len(ids)] = ids
    source = np.repeat(translator.encode(m["sentences"]).numpy(), [len(h) for h in nbest], 0)
    log_probs = ct2_compare.per_token_log_probs(translator.model, source, tokens)
    diff = 0.0
    for r, (ids, score) in enumerate(flat):
        ours = float(log_probs[r, len(prefix): len(ids)].sum())
        if opts.beam_size > 1:
            ours /= ((5.0 + len(ids)) / 6.0) ** opts.length_penalty
        diff = max(diff, abs(ours - score))
    return diff


@pytest.mark.parametrize("name", MODELS)
def test_options_greedy_equals_translator(request, name):
    """Greedy through the options: the same text and score (the summed log-probability) as
    Translator.translate_nbest, also with a shorter max_length."""
    m = request.getfixturevalue(name)
    ours = m["translator"].translate_nbest(m["sentences"])
    theirs = m["ct2"].translate_nbest(m["sentences"])
    assert _texts(theirs) == _texts(ours)
    assert all(len(hyps) == 1 for hyps in theirs)
    assert _best_scores_diff(ours, theirs) < 1e-4  # summed log-probabilities, no penalty
    assert _rescored_diff(m) < 1e-4
    # The confidence: the export's calibrator (its weights in keras_attn.json) on features of
    # score_batch's log-probabilities. The features that can move are the mean and least
    # token log-probabilities, by at most the 1e-4 the engines' sums agree within; the
    # sigmoid's slope is at most 1/4.
    cal = m["translator"].calibrator
    assert m["ct2"].calibrator.weights == cal.weights
    slope = 0.25 * sum(abs(cal.weights[i]) / cal.scale[i] for i in (0, 1))
    conf = [(a[0]["confidence"], b[0]["confidence"]) for a, b in zip(ours, theirs)]
    assert max(abs(a - b) for a, b in conf) <= slope * 1e-4 + 1e-6, conf
    # max_length counts target tokens, [END] included, in both.
    short = m["ct2"].translate_nbest(m["sentences"], max_length=5)
    assert _texts(short) == _texts(m["translator"].translate_nbest(m["sentences"],
                                                                   max_length=5))
    assert m["ct2"].translate(m["sentences"], sampling_temperature=0.5) == _texts(ours)


@pytest.mark.parametrize("name", MODELS)
def test_greedy_confidence_from_the_search_logits_equals_score_batch(request, name,
                                                                   monkeypatch):
    """Greedy decoding reads the confidence's log-probabilities from the search's own
    logits, the repetition penalty undone: the features equal those of a score_batch pass
    (float32 log-softmax against CTranslate2's: 1e-5 of their scale), with no such pass;
    hypotheses cut by max_length (no [END] step) are scored by score_batch."""
    m = request.getfixturevalue(name)
    ct2, opts = m["ct2"], m["ct2"].options(repetition_penalty=1.5)
    source = pipeline.pad([row[: ct2.max_len - 1] + [END_ID]
                           for row in ct2.tokenize(m["sentences"])])
    calls = []
    score_batch = ct2.translator.score_batch

    class Spy:  # the ctranslate2.Translator's methods cannot be set on it
        def __getattr__(self, name):
            return getattr(translator, name)

        def score_batch(self, *args, **kwargs):
            calls.append(len(args[0]))
            return score_batch(*args, **kwargs)

    translator = ct2.translator
    monkeypatch.setattr(ct2, "translator", Spy())
    read = ct2.decode(source, opts, confidence=True)
    assert calls == []
    monkeypatch.setattr(ct2, "_search_log_probs", lambda result, penalty: None)
    passed = ct2.decode(source, opts, confidence=True)
    assert calls == [len(m["sentences"])]
    np.testing.assert_array_equal(read["tokens"], passed["tokens"])
    scale = np.abs(passed["features"]).max()
    np.testing.assert_allclose(read["features"], passed["features"], rtol=0, atol=1e-5 * scale)
    monkeypatch.undo()
    calls.clear()
    monkeypatch.setattr(ct2, "translator", Spy())
    cut = ct2.decode(source, ct2.options(max_length=2), confidence=True)
    assert calls == [len(m["sentences"])] and cut["features"].shape[0] == len(m["sentences"])


# Beam 4 in the README pass; 2 and 3 (8-10 s each) in CI's slow pass.
@pytest.mark.parametrize("beam_size", [pytest.param(2, marks=pytest.mark.slow),
                                       pytest.param(3, marks=pytest.mark.slow), 4])
@pytest.mark.parametrize("name", MODELS)
def test_options_beam_nbest(request, name, beam_size):
    """n-best lists: CTranslate2's beam (finished hypotheses leave the beam) reranked with
    the GNMT penalty against ours (finished hypotheses keep their slot): the best
    hypotheses agree on (nearly) all sentences; lower ranks are other hypotheses more
    often (a property of the algorithms, printed, not asserted)."""
    m = request.getfixturevalue(name)
    options = dict(beam_size=beam_size, num_hypotheses=beam_size, length_penalty=0.6)
    ours = m["translator"].translate_nbest(m["sentences"], **options)
    theirs = m["ct2"].translate_nbest(m["sentences"], **options)
    assert [len(hyps) for hyps in theirs] == [beam_size] * len(m["sentences"])
    assert all(a["score"] >= b["score"] for hyps in theirs for a, b in zip(hyps, hyps[1:]))
    best = _agreement(_texts(ours), _texts(theirs))
    lists = _agreement([[h["translation"] for h in x] for x in ours],
                       [[h["translation"] for h in x] for x in theirs])
    overlap = sum(len({h["translation"] for h in a} & {h["translation"] for h in b})
                  for a, b in zip(ours, theirs)) / (beam_size * len(ours))
    print(f"{name} beam {beam_size}: best {best:.1%}, whole n-best list {lists:.1%}, "
          f"n-best overlap {overlap:.1%} (ISA {os.environ.get('CT2_FORCE_CPU_ISA', 'auto')})")
    assert best >= m["min_best_agreement"]
    # Both scores are the summed log-probability / ((5 + n) / 6) ** 0.6 (n: [END] included).
    assert _best_scores_diff(ours, theirs) < 1e-4
    assert _rescored_diff(m, **options) < 1e-4


@pytest.mark.parametrize("beam_size", [pytest.param(1, marks=pytest.mark.slow), 3])
@pytest.mark.parametrize("name", MODELS)
def test_options_target_prefix(request, name, beam_size):
    """target_prefix as text: every CTranslate2 output starts with it and is Translator's
    output with the same prefix (greedy: every sentence; beam: as the best hypotheses)."""
    m = request.getfixturevalue(name)
    for prefix in m["prefixes"]:
        ours = m["translator"].translate_nbest(m["sentences"], beam_size=beam_size,
                                               target_prefix=prefix)
        theirs = m["ct2"].translate_nbest(m["sentences"], beam_size=beam_size,
                                          target_prefix=prefix)
        assert all(t.startswith(prefix) for t in _texts(theirs)), (prefix, _texts(theirs))
        same = _agreement(_texts(ours), _texts(theirs))
        print(f"{name} beam {beam_size} target_prefix={prefix!r}: {same:.1%} equal")
        if beam_size == 1:
            assert _texts(theirs) == _texts(ours)
        else:
            assert same >= m["min_best_agreement"]
        # The forced tokens' log-probabilities are in neither score.
        assert _best_scores_diff(ours, theirs) < 1e-4
        assert _rescored_diff(m, beam_size=beam_size, target_prefix=prefix) < 1e-4


@pytest.mark.parametrize("options, match", [
    ({"sampling_topk": 5}, "sampling_topk=5"),
    ({"sampling_topk": 2, "seed": 3}, "sampling_topk=2"),
    ({"return_alignments": True}, "return_alignments=True"),
    ({"beam_size": 2, "num_hypotheses": 3}, "num_hypotheses=3"),
    ({"max_length": 33}, "max_length=33"),  # the tiny run's max_len is 32
    ({"length_penalty": "0.6"}, "length_penalty='0.6'"),
    ({"target_prefix": "1" * 40}, "target_prefix"),
    ({"beam": 4}, "beam"),
])
def test_options_refused_with_the_option_named(ct2, options, match):
    with pytest.raises(ValueError, match=match):
        ct2.translate_nbest(["3 March 2021"], **options)


# --- the command line and int8 --------------------------------------------------------------
@pytest.mark.slow  # two exports (float32, int8) through the command line: 13 s
def test_cli_export_overwrite_and_int8(run, tmp_path, capsys, request):
    run_dir = str(tmp_path / "run")  # a copy: the shared run is only read
    shutil.copytree(run["dir"], run_dir, ignore=shutil.ignore_patterns("export"))
    target = str(tmp_path / "cli_ct2")
    argv = ["export", run_dir, "--format", "ctranslate2", "--export-dir", target]
    assert cli.main(argv) == 0
    assert os.path.isfile(os.path.join(target, "model.bin"))
    assert cli.main(argv) == 1 and "already exists" in capsys.readouterr().err
    assert cli.main(argv + ["--overwrite"]) == 0
    # int8, into the default folder RUN_DIR/export/ctranslate2_int8.
    assert cli.main(["export", run_dir, "--format", "ctranslate2",
                     "--quantization", "int8"]) == 0
    int8_dir = ct2_export.default_dir(run_dir, "int8")
    assert int8_dir == os.path.join(run_dir, "export", "ctranslate2_int8")
    size = {d: os.path.getsize(os.path.join(d, "model.bin")) for d in (target, int8_dir)}
    assert size[int8_dir] < 0.6 * size[target]
    # What int8 keeps is measured on the committed, trained dates model: on the tiny run
    # (barely trained, near ties everywhere) int8 agreement is a property of the CPU's int8
    # kernels (measured 45 % with CTranslate2's AVX2 kernels), not of the export.
    trained_run = request.getfixturevalue("committed")  # skips without exported/run
    committed = os.path.join(REPO, "exported", "run")
    committed_int8 = str(tmp_path / "committed_int8")
    assert cli.main(["export", committed, "--format", "ctranslate2", "--quantization", "int8",
                     "--export-dir", committed_int8]) == 0
    trained, held_out = trained_run["translator"], trained_run["sentences"]
    ids = trained.encode(held_out).numpy()
    ours = _rows(trained.translate_ids(ids))
    theirs = _rows(ct2_runtime.CTranslate2Translator(committed_int8,
                                                    intra_threads=2).translate_ids(ids))
    agreement = _agreement(ours, theirs)
    print(f"int8 greedy agreement with float32 keras_attn (committed model): {agreement:.1%}")
    # Measured 100 % of 400 held-out dates with CTranslate2's AVX-512 and AVX2 kernels.
    assert len(theirs) == len(ours) and agreement >= 0.95


def test_cli_rejects_options_of_the_other_format(run, capsys):
    assert cli.main(["export", run["dir"], "--quantization", "int8"]) == 1
    assert "--quantization applies to --format ctranslate2" in capsys.readouterr().err
    assert cli.main(["export", run["dir"], "--format", "ctranslate2", "--version", "2"]) == 1
    assert "--version applies to --format tf" in capsys.readouterr().err


@pytest.mark.parametrize("kwargs, match", [
    ({"quantization": "int4"}, "quantization='int4'"),
    ({"quantization": "float16"}, "quantization='float16'"),
    ({"overwrite": 1}, "overwrite=1")])
def test_exporter_options_checked_in_constructor(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ct2_export.CTranslate2Exporter(**kwargs)


def test_bad_quantization_writes_nothing(run, tmp_path):
    with pytest.raises(ValueError, match="quantization='int4'"):
        ct2_export.export_ctranslate2(run["dir"], str(tmp_path / "x"), quantization="int4")
    assert os.listdir(tmp_path) == []


# --- other architectures: teacher-forced log-probabilities on random weights ---------------
def _seq2seq(use_bias=False, norm_first=False, tie_embeddings=False, epsilon=1e-5,
             dec_epsilon=None, vocab=(40, 50), dec_layers=2):
    """``models.transformer_seq2seq``'s graph with a choice of LayerNorm epsilon."""
    inputs = {"source": keras.Input((None,), dtype="int32", name="source"),
              "target_in": keras.Input((None,), dtype="int32", name="target_in")}
    kw = dict(num_hiddens=32, ffn_num_hiddens=64, num_heads=4, num_layers=2,
              use_bias=use_bias, max_len=40, norm_first=norm_first)
    encoder = TransformerEncoder(vocab[0], epsilon=epsilon, name="encoder", **kw)
    decoder = TransformerDecoder(vocab[1], epsilon=dec_epsilon or epsilon,
                                 tie_embeddings=tie_embeddings, name="decoder",
                                 **{**kw, "num_layers": dec_layers})
    logits = decoder(inputs["target_in"], encoder(inputs["source"]))
    return keras.Model(inputs, logits)


def _vocab(n, prefix):
    return text.RESERVED_TOKENS + [f"{prefix}{i}" for i in range(n - 4)]


@pytest.mark.parametrize("options", [
    dict(use_bias=True),
    dict(norm_first=True),
    dict(tie_embeddings=True),
    dict(epsilon=1e-3),
    dict(use_bias=True, norm_first=True, tie_embeddings=True, epsilon=1e-6),
    dict(dec_layers=1, tie_embeddings=True),  # a deep encoder, a shallow decoder
], ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()))
def test_architectures_score_like_ours(options, tmp_path):
    keras.utils.set_random_seed(1)
    model = _seq2seq(**options)
    rng = np.random.default_rng(0)  # biases, gammas and betas away from 0 and 1
    model.set_weights([w + rng.normal(0, 0.1, w.shape) for w in model.get_weights()])
    src_vocab, tgt_vocab = _vocab(40, "s"), _vocab(50, "t")
    path = str(tmp_path / "ct2")
    ct2_export.KerasAttnConverter(model, src_vocab, tgt_vocab).convert(path)
    assert runs.read_json(os.path.join(path, "config.json"))["layer_norm_epsilon"] == \
        options.get("epsilon", 1e-5)
    lengths = [5, 9, 1, 12]
    source = np.zeros((4, 13), np.int32)  # tokens, [END], padding
    target = np.zeros((4, 8), np.int32)
    for b, n in enumerate(lengths):
        source[b, :n] = rng.integers(4, 40, n)
        source[b, n] = text.END_ID
        m = 1 + b * 2
        target[b, :m] = rng.integers(4, 50, m)
        target[b, m] = text.END_ID
    ours = ct2_compare.per_token_log_probs(model, source, target)
    translator = ctranslate2.Translator(path)
    scored = translator.score_batch(
        [[src_vocab[t] for t in row if t > text.END_ID] for row in source],
        [[tgt_vocab[t] for t in row if t > text.END_ID] for row in target])
    diff = max(np.abs(np.asarray(r.log_probs) - ours[b, : len(r.log_probs)]).max()
               for b, r in enumerate(scored))
    print(options, "max log-prob difference:", diff)
    assert diff < 1e-4


# --- refusals ------------------------------------------------------------------------------
def test_refuses_bahdanau_run(tmp_path, capsys):
    run_dir = str(tmp_path / "gru")
    os.makedirs(run_dir)
    config = dict(dataclasses.asdict(training.TrainConfig(model="bahdanau", num_hiddens=16)),
                  src_vocab_size=20, tgt_vocab_size=20)
    runs.write_json(runs.paths(run_dir)["config"], config)
    for name in ("src_vocab", "tgt_vocab"):
        text.save_vocab(_vocab(20, "w"), runs.paths(run_dir)[name])
    training.build_model(config).save(runs.paths(run_dir)["model"])
    with pytest.raises(ValueError, match="model='bahdanau'"):
        ct2_export.export_ctranslate2(run_dir)
    assert not os.path.exists(os.path.join(run_dir, "export"))
    assert cli.main(["export", run_dir, "--format", "ctranslate2"]) == 1
    assert "model='bahdanau'" in capsys.readouterr().err


def test_refuses_what_one_spec_cannot_hold():
    with pytest.raises(ValueError, match="epsilon"):
        ct2_export.check_supported(_seq2seq(epsilon=1e-5, dec_epsilon=1e-6))
    with pytest.raises(ValueError, match="num_heads"):
        inputs = {"source": keras.Input((None,), dtype="int32", name="source"),
                  "target_in": keras.Input((None,), dtype="int32", name="target_in")}
        enc = TransformerEncoder(20, 16, 32, 4, 1, name="encoder")(inputs["source"])
        logits = TransformerDecoder(20, 16, 32, 2, 1, name="decoder")(inputs["target_in"], enc)
        ct2_export.check_supported(keras.Model(inputs, logits))
    clash = text.RESERVED_TOKENS + ["a", "</s>"]
    with pytest.raises(ValueError, match="</s>"):
        ct2_export.ct2_vocab(clash)
    model = models.transformer_seq2seq(6, 6, num_hiddens=16, ffn_num_hiddens=32, num_layers=1)
    with pytest.raises(ValueError, match="</s>"):
        ct2_export.KerasAttnConverter(model, clash, clash)


# --- the benchmark's serve section, smoke-run ------------------------------------------------
@pytest.mark.slow  # 4 engine processes and 3 exports
def test_bench_serve_quick(run, tmp_path):
    """The serve section end to end on the tiny dates run, with the engines a choice leaves
    (the references are always timed; the full set runs in the benchmark itself)."""
    from benchmarks import cli as bench_cli, report as bench_report
    from benchmarks.serve import bench_serve

    args = bench_cli.parse_args(["--quick", "--sections", "serve", "--run-dir", run["dir"],
                                 "--repeats", "1", "--warmup", "0", "--serve-batches", "1,2",
                                 "--threads", "2", "--serve-models", "dates",
                                 "--serve-engines", "tflite_text_float32"])
    assert args.serve_engines == ["saved_model_translate_ids", "saved_model_serving_default",
                                  "tflite_text_float32", "ctranslate2_float32"]
    out = bench_serve(args, {"gflops": 1.0})
    assert out["available"] is True and set(out["models"]) == {"dates"}
    m = out["models"]["dates"]
    engines = set(args.serve_engines) - set(m["unavailable"])
    assert set(m["batches"]) == {"1", "2"}
    for rows in m["batches"].values():
        assert set(rows) == engines
        assert all(r["ms_per_sentence"] > 0 and r["tokens_per_s"] > 0 for r in rows.values())
        # Ratios to CTranslate2 float32, taken within each round.
        assert rows["ctranslate2_float32"]["vs_ctranslate2_float32"]["median"] == 1.0
        for k, r in rows.items():
            expected = rows["ctranslate2_float32"]["ms_per_sentence"] / r["ms_per_sentence"]
            assert r["vs_ctranslate2_float32"]["median"] == pytest.approx(
                expected, rel=0.01, abs=2e-3)
    assert set(m["agreement"]) == engines
    # Trained weights: the same greedy ids and text in every engine.
    assert m["agreement"]["ctranslate2_float32"]["ids_vs_translate_ids"] == 1.0
    assert m["agreement"]["tflite_text_float32"]["text_vs_serving_default"] == 1.0
    with pytest.raises(SystemExit):
        bench_cli.parse_args(["--serve-engines", "tflite_text_float16"])
    md = bench_report.markdown({"created": "now", "quick": True, "clock": "wall", "threads": 2,
                         "machine": {"cpu": "x", "cpu_count": 2, "tensorflow": "t",
                                     "keras": "k"},
                         "peak": {"n": 8, "gflops": 1.0}, "sections": {"serve": out}})
    assert "## Serving engines" in md and "tflite_text_float32" in md
