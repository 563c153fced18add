"""keras_attn.export: SavedModel (TF Serving), TFLite text/builtin targets, serving client.

One small dates Transformer (committed in tests/fixtures) is exported once per test session
(conftest's ``tiny_dates``, shared with the CTranslate2 tests); every
artefact is compared with ``Translator.translate`` (``keras_attn.decoding``) on the same
inputs.
"""
import base64
import http.server
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests.support import guards
from tests.support import layer_checks as lc
from keras_attn import cli, export, models
from keras_attn.core import runs
from keras_attn.text import tokenizers as text
from keras_attn.translator import Translator


REPO = Path(__file__).resolve().parents[2]
NUM_INPUTS = 60
LONG = ("3 March 2021 " * 800)[:10_000]
ROBUST = {
    "empty": b"",
    "whitespace": b" \t   ",
    "10k_chars": LONG.encode(),
    "invalid_utf8": b"\xff\xfe 3 May \xc3",
}
FRESH_PROCESS = r"""
import json, sys
sys.modules["keras_attn"] = None  # importing keras_attn would fail: prove it is not needed
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the ops of a WordPiece export)

path, inputs = sys.argv[1], json.load(open(sys.argv[2]))
model = tf.saved_model.load(path)
serve = model.signatures["serving_default"]
out = serve(text=tf.constant([bytes.fromhex(h) for h in inputs], tf.string))
empty = serve(text=tf.zeros([0], tf.string))
print(json.dumps({
    "translation": [t.decode("utf-8") for t in out["translation"].numpy().tolist()],
    "score": out["score"].numpy().tolist(),
    "truncated": out["truncated"].numpy().tolist(),
    "empty": {k: list(v.shape) for k, v in empty.items()},
    "loaded": sorted(m for m in sys.modules if m.startswith("keras_attn") and sys.modules[m]),
}))
"""


# --- fixtures ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def artefacts(tiny_dates):
    """The session's tiny dates run and its ``export_run`` output (conftest.tiny_dates)."""
    return {"run_dir": tiny_dates["run_dir"], "export_dir": tiny_dates["export_dir"],
            "inputs": tiny_dates["inputs"][:NUM_INPUTS]}


@pytest.fixture(scope="module")
def run(artefacts):
    return {"dir": artefacts["run_dir"], "inputs": artefacts["inputs"]}


@pytest.fixture(scope="module")
def translator(run):
    return Translator.from_run_dir(run["dir"])


@pytest.fixture(scope="module")
def reference(run, translator):
    return translator.translate(run["inputs"])


@pytest.fixture(scope="module")
def exported(artefacts):
    export_dir = artefacts["export_dir"]
    return {"dir": export_dir,
            "report": runs.read_json(os.path.join(export_dir, "export_report.json")),
            "saved_model": os.path.join(export_dir, "saved_model", "translator", "1")}


@pytest.fixture(scope="module")
def loaded(exported):
    return tf.saved_model.load(exported["saved_model"])


def _decode(strings):
    return [s.decode("utf-8") for s in np.asarray(strings).tolist()]


def _serve_client():
    path = REPO / "scripts" / "serve_client.py"
    spec = importlib.util.spec_from_file_location("serve_client", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --- layout and report ---------------------------------------------------------------------
def test_export_run_layout_and_report(exported, translator):
    d, report = exported["dir"], exported["report"]
    assert os.path.isfile(os.path.join(exported["saved_model"], "saved_model.pb"))
    sm = runs.read_json(os.path.join(d, "saved_model", "translator", "1.report.json"))
    assert sm["signatures"]["serving_default"] == {
        "method": "tensorflow/serving/predict",
        "inputs": {"text": {"dtype": "string", "shape": [-1]}},
        "outputs": {"confidence": {"dtype": "float32", "shape": [-1]},
                    "score": {"dtype": "float32", "shape": [-1]},
                    "translation": {"dtype": "string", "shape": [-1]},
                    "truncated": {"dtype": "bool", "shape": [-1]}}}
    assert sm["signatures"]["translate_ids"]["inputs"] == {
        "source": {"dtype": "int32", "shape": [-1, -1]}}
    assert set(sm["signatures"]["translate_ids"]["outputs"]) == {"tokens", "lengths", "score"}
    # Character vocabularies: core ops only, no XLA op, nothing for TF Serving to lack.
    assert sm["text_ops"] == "core" and sm["non_core_ops"] == [] and sm["xla_ops"] == []
    assert sm["total_bytes"] == sum(sm["files"].values()) > 0
    assert report["saved_model"]["signatures"] == sm["signatures"]
    # The session's export is float32 only; int8 files (same exporter) are checked on the
    # committed exported/ run (test_exported).
    assert set(report["tflite"]) == {"text_float32", "builtin_float32"}
    for key, rep in report["tflite"].items():
        assert os.path.exists(rep["path"]) and rep["total_bytes"] > 0, key
    assert sorted(os.listdir(os.path.join(d, "tflite", "builtin_float32"))) == [
        "decoder_step.tflite", "encoder.tflite", "metadata.json", "src_vocab.txt",
        "tgt_vocab.txt"]
    tfl = report["tflite"]
    assert tfl["text_float32"]["ops"]["custom"] == [
        "FastWordpieceTokenizeWithOffsets", "RaggedTensorToTensor",
        "TFText>ByteSplitWithOffsets", "TFText>FastWordpieceDetokenize"]
    assert tfl["text_float32"]["ops"]["flex"] == []
    assert tfl["text_float32"]["signatures"]["serving_default"]["inputs"] == {
        "text": {"dtype": "string", "shape": [-1]}}
    # Every artefact was run on the run's sample sentences; float32 agrees exactly.
    agreement = report["samples"]["agreement_with_saved_model"]
    assert agreement["text_float32"] == agreement["builtin_float32"] == 1.0
    assert set(agreement) == set(report["tflite"]) == set(
        report["samples"]["agreement_measured_on"])
    assert report["warnings"] == []  # dates: raw text in, nothing to normalise
    assert sm["tf_serving_lacks"] == []
    # Nothing that looks like a version but is not one; no temporary leftovers.
    listing = sorted(os.listdir(os.path.join(d, "saved_model", "translator")))
    assert listing == ["1", "1.report.json"]


# --- SavedModel ------------------------------------------------------------------------------
@pytest.mark.slow  # a TensorFlow process (test_exported loads the committed one so)
def test_saved_model_in_fresh_process_matches_translator(run, exported, reference, tmp_path):
    raw = [s.encode() for s in run["inputs"]] + list(ROBUST.values())
    (tmp_path / "inputs.json").write_text(json.dumps([b.hex() for b in raw]))
    script = tmp_path / "load_saved_model.py"
    script.write_text(FRESH_PROCESS)
    proc = subprocess.run([sys.executable, str(script), exported["saved_model"],
                           str(tmp_path / "inputs.json")], capture_output=True, text=True,
                          timeout=guards.timeout(15), env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["loaded"] == []
    n = len(run["inputs"])
    assert out["translation"][:n] == reference
    assert out["truncated"] == [False] * n + [False, False, True, False]
    assert np.all(np.isfinite(out["score"]))
    assert out["empty"] == {"confidence": [0], "score": [0], "translation": [0],
                            "truncated": [0]}
    assert len(out["translation"]) == len(raw)


@pytest.mark.slow  # saved_model_cli in a process (the fresh-process test runs in-suite)
def test_saved_model_cli_run(exported, translator):
    cli_path = shutil.which("saved_model_cli") or os.path.join(os.path.dirname(sys.executable),
                                                               "saved_model_cli")
    proc = subprocess.run(
        [cli_path, "run", "--dir", exported["saved_model"], "--tag_set", "serve",
         "--signature_def", "serving_default", "--input_exprs", 'text=["3 March 2021"]'],
        capture_output=True, text=True, timeout=guards.timeout(15),
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    expected = translator.translate(["3 March 2021"])[0]
    assert "Result for output key translation:" in proc.stdout
    assert f"[b'{expected}']" in proc.stdout


@pytest.mark.kernels
def test_translate_ids_signature(loaded, translator, run):
    source = translator.encode(run["inputs"][:20])
    out = loaded.signatures["translate_ids"](source=source)
    np.testing.assert_array_equal(out["tokens"].numpy(),
                                  np.asarray(translator.translate_ids(source)))
    assert out["lengths"].dtype == tf.int32 and out["score"].dtype == tf.float32
    # Width 0, empty batch and out-of-vocabulary ids are answered, not crashed on.
    ids_fn = loaded.signatures["translate_ids"]
    assert ids_fn(source=tf.zeros((2, 0), tf.int32))["tokens"].shape[0] == 2
    assert ids_fn(source=tf.zeros((0, 5), tf.int32))["tokens"].shape[0] == 0
    bad = ids_fn(source=tf.constant([[10 ** 6, -5, 3]], tf.int32))
    assert np.isfinite(bad["score"].numpy()).all()


@pytest.mark.parametrize("case", sorted(ROBUST))
def test_saved_model_robust_inputs(loaded, case):
    out = loaded.signatures["serving_default"](text=tf.constant([ROBUST[case]], tf.string))
    assert out["translation"].shape == (1,) and np.isfinite(out["score"].numpy()).all()
    assert out["truncated"].numpy().tolist() == [case == "10k_chars"]


def test_saved_model_empty_batch(loaded):
    out = loaded.signatures["serving_default"](text=tf.zeros([0], tf.string))
    assert {k: tuple(v.shape) for k, v in out.items()} == {
        "translation": (0,), "score": (0,), "confidence": (0,), "truncated": (0,)}


# --- TFLite ---------------------------------------------------------------------------------
@pytest.mark.kernels
def test_tflite_text_float32_matches_translator(exported, run, reference):
    out = export.run_tflite_text(exported["report"]["tflite"]["text_float32"]["path"],
                                 run["inputs"])
    assert _decode(out["translation"]) == reference
    assert not out["truncated"].any()


@pytest.mark.kernels
def test_tflite_builtin_float32_matches_translator(exported, run, translator, reference):
    source = translator.encode(run["inputs"]).numpy()
    out = export.run_tflite_builtin(exported["report"]["tflite"]["builtin_float32"]["path"],
                                    source)
    got = _decode(translator.tgt_tokenizer.detokenize(tf.constant(out["tokens"])))
    assert got == reference
    expected = np.asarray(translator.translate_ids(source))  # the same ids, not just the text
    width = expected.shape[1]
    np.testing.assert_array_equal(out["tokens"][:, :width], expected)
    assert not out["tokens"][:, width:].any()
    # The step file keeps the confidence's running statistics: the Translator's confidence
    # of the same greedy hypotheses, within what the log-probabilities' agreement allows.
    confidences = [h[0]["confidence"] for h in translator.translate_nbest(run["inputs"])]
    np.testing.assert_allclose(out["confidence"], confidences,
                               atol=lc.confidence_tolerance(translator.calibrator, 1e-4))


@pytest.mark.slow  # two int8 exports of the default-sized model (~15 s on 2 idle cores)
def test_tflite_int8_agrees_on_the_trained_model(tmp_path):
    """What int8 keeps, measured where it means something: the committed, trained dates
    model (exported/run) exported now, on 200 held-out dates (100 % agreement with float32
    Keras measured with AVX-512 kernels; 95 % leaves room for other CPUs' roundings)."""
    from keras_attn import data

    committed = REPO / "exported" / "run"
    if not (committed / "model.keras").is_file():
        pytest.skip("exported/run (the committed default model) is missing")
    trained = Translator.from_run_dir(str(committed))
    held_out = [s for s, _ in data.dates_splits(30000, 1000, 2000, seed=0)["test"][:200]]
    float32 = trained.translate(held_out)
    export.export_tflite(trained, str(tmp_path / "text.tflite"), "text", "int8")
    export.export_tflite(trained, str(tmp_path / "builtin"), "builtin", "int8")
    text_out = _decode(export.run_tflite_text(str(tmp_path / "text.tflite"),
                                              held_out)["translation"])
    ids = export.run_tflite_builtin(str(tmp_path / "builtin"),
                                    trained.encode(held_out).numpy())["tokens"]
    builtin_out = _decode(trained.tgt_tokenizer.detokenize(tf.constant(ids)))
    agree_text = np.mean([a == b for a, b in zip(text_out, float32)])
    agree_builtin = np.mean([a == b for a, b in zip(builtin_out, float32)])
    print(f"int8 exact agreement with float32 Keras (committed model): text {agree_text:.1%}, "
          f"builtin {agree_builtin:.1%}")
    assert len(text_out) == len(builtin_out) == len(float32)
    assert agree_text >= 0.95 and agree_builtin >= 0.95


@pytest.mark.parametrize("case", sorted(ROBUST) + ["empty_batch"])
def test_tflite_text_robust_inputs(exported, loaded, case):
    path = exported["report"]["tflite"]["text_float32"]["path"]
    batch = [] if case == "empty_batch" else [ROBUST[case]]
    out = export.run_tflite_text(path, batch)
    assert out["translation"].shape == out["score"].shape == out["truncated"].shape == (len(batch),)
    if batch:
        assert np.isfinite(out["score"]).all()
        assert out["truncated"].tolist() == [case == "10k_chars"]
        saved = loaded.signatures["serving_default"](text=tf.constant(batch, tf.string))
        assert out["translation"].tolist() == saved["translation"].numpy().tolist()


def test_builtin_flatbuffers_have_only_builtin_ops(exported):
    # float32 here; the committed int8 files: test_exported.
    folder = exported["report"]["tflite"]["builtin_float32"]["path"]
    for name in ("encoder.tflite", "decoder_step.tflite"):
        with open(os.path.join(folder, name), "rb") as f:
            ops = export.check_builtin_only(f.read(), name)
        assert ops["flex"] == ops["custom"] == [] and "FULLY_CONNECTED" in ops["builtin"]


def test_builtin_check_rejects_flex_and_custom_ops(exported):
    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def shout(s):
        return tf.strings.regex_replace(s, "a", "A")

    converter = tf.lite.TFLiteConverter.from_concrete_functions([shout.get_concrete_function()])
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS,
                                           tf.lite.OpsSet.SELECT_TF_OPS]
    flex_model = converter.convert()
    assert export.tflite_ops(flex_model)["flex"] == ["FlexStaticRegexReplace"]
    with pytest.raises(ValueError, match="FlexStaticRegexReplace"):
        export.check_builtin_only(flex_model, "shout")
    with pytest.raises(ValueError, match=r"Flex \(Select TF\) ops \['FlexStaticRegexReplace'\]"):
        export.check_text_ops(flex_model, "shout")
    with open(exported["report"]["tflite"]["text_float32"]["path"], "rb") as f:
        with pytest.raises(ValueError, match="FastWordpieceTokenizeWithOffsets"):
            export.check_builtin_only(f.read(), "text model")


class _Shout(tf.Module):
    """A text module whose graph needs a Flex op (``StaticRegexReplace``)."""

    captured_variables, src_tokenizer, tgt_tokenizer, max_beam_size = [], None, None, 1

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text")])
    def serve(self, text):
        return {"translation": tf.strings.regex_replace(text, "a", "A")}

    def tflite_functions(self):
        return {"serving_default": self.serve.get_concrete_function()}


def test_text_target_refuses_flex_ops(translator, tmp_path, monkeypatch):
    module = _Shout()
    exporter = export.TFLiteTextExporter()
    with pytest.raises(ValueError, match=r"Flex \(Select TF\) ops \['StaticRegexReplace'\]"):
        exporter.convert(module.tflite_functions(), [], "shout")
    # Through the whole export: refused before anything is published.
    monkeypatch.setattr(export.TFLiteTextExporter, "build_module", lambda self, parts: module)
    with pytest.raises(ValueError, match="StaticRegexReplace"):
        exporter.export(translator, tmp_path / "text.tflite")
    assert os.listdir(tmp_path) == []


def test_text_target_has_only_builtin_and_tftext_ops(exported):
    # float32 here; the committed int8 file: test_exported.
    with open(exported["report"]["tflite"]["text_float32"]["path"], "rb") as f:
        ops = export.check_text_ops(f.read())
    assert ops["flex"] == [] and set(ops["custom"]) <= export.TFTEXT_TFLITE_OPS


def test_builtin_target_needs_a_transformer(translator, tmp_path):
    model = models.bahdanau_seq2seq(translator.src_tokenizer.vocab_size,
                                    translator.tgt_tokenizer.vocab_size, 8, 8, 1)
    parts = export.Parts(model, translator.src_tokenizer, translator.tgt_tokenizer, 16)
    with pytest.raises(ValueError, match="Transformer models only"):
        export.export_tflite(parts, tmp_path / "b", target="builtin")
    assert not (tmp_path / "b").exists()


@pytest.mark.kernels
@pytest.mark.slow  # builds and exports a model of its own
def test_bahdanau_saved_model_and_text_tflite(translator, tmp_path):
    keras.utils.set_random_seed(0)
    model = models.bahdanau_seq2seq(translator.src_tokenizer.vocab_size,
                                    translator.tgt_tokenizer.vocab_size, 16, 32, 1)
    tr = Translator(model, translator.src_tokenizer, translator.tgt_tokenizer, max_len=16)
    sources = ["3 March 2021", "", "4 May 1999", LONG]
    reference = tr.translate(sources)
    report = export.export_saved_model(tr, tmp_path / "sm")
    assert report["xla_ops"] == [] and report["non_core_ops"] == []
    out = tf.saved_model.load(report["path"]).signatures["serving_default"](
        text=tf.constant(sources))
    assert _decode(out["translation"]) == reference
    assert out["truncated"].numpy().tolist() == [False, False, False, True]
    tfl = export.export_tflite(tr, tmp_path / "text.tflite", "text")
    # Keras's GRU loops need a static batch in TFLite: one sentence per call, and no
    # `translate` signature (beams need B * K rows).
    assert tfl["signatures"]["serving_default"]["inputs"]["text"]["shape"] == [1]
    assert set(tfl["signatures"]) == {"serving_default", "translate_sentences"}
    assert _decode(export.run_tflite_text(tfl["path"], sources)["translation"]) == reference


# --- options, atomicity and overwrite -------------------------------------------------------
@pytest.mark.parametrize("make, match", [
    (lambda: export.SavedModelExporter(beam_size=0), "beam_size=0"),
    (lambda: export.SavedModelExporter(version=-1), "version=-1"),
    (lambda: export.SavedModelExporter(version="1"), "version='1'"),
    (lambda: export.SavedModelExporter(model_name="a/b"), "model_name='a/b'"),
    (lambda: export.SavedModelExporter(text_ops="fast"), "text_ops='fast'"),
    (lambda: export.SavedModelExporter(length_penalty=-1), "length_penalty=-1"),
    (lambda: export.SavedModelExporter(overwrite="yes"), "overwrite='yes'"),
    (lambda: export.TFLiteTextExporter("int4"), "quantization='int4'"),
    (lambda: export.TFLiteTextExporter(beam_size=1.5), "beam_size=1.5"),
    (lambda: export.TFLiteBuiltinExporter("int16"), "quantization='int16'"),
    (lambda: export.TFLiteBuiltinExporter(beam_size=4), "beam_size=4"),
])
def test_exporter_options_checked_in_constructor(make, match):
    with pytest.raises(ValueError, match=re.escape(match)):
        make()  # no model, no path: nothing but the options is looked at


@pytest.mark.parametrize("exporter", [export.SavedModelExporter, export.TFLiteTextExporter])
def test_exporters_take_alpha_as_length_penalty_s_deprecated_name(exporter):
    with pytest.warns(DeprecationWarning, match="length_penalty"):
        assert exporter(beam_size=2, alpha=1.5).length_penalty == 1.5
    with pytest.warns(DeprecationWarning), pytest.raises(TypeError, match="alpha"):
        exporter(alpha=1.5, length_penalty=0.3)


def test_the_report_keeps_alpha_beside_length_penalty():
    """Reports written before named the option ``alpha`` (the committed ones still do): a
    new report names it ``length_penalty`` and writes ``alpha`` beside it."""
    from types import SimpleNamespace
    from keras_attn.export.base import decoding_info

    tokenizer = SimpleNamespace(vocab_size=9)
    info = decoding_info(SimpleNamespace(max_len=8, src_tokenizer=tokenizer,
                                         tgt_tokenizer=tokenizer), 4, 1.5, False)
    assert info["length_penalty"] == info["alpha"] == 1.5
    committed = runs.read_json(REPO / "exported" / "saved_model" / "translator" / "1.report.json")
    assert committed["decoding"]["alpha"] == 0.6


@pytest.mark.parametrize("kwargs, match", [
    ({"target": "gpu"}, "target"), ({"quantization": "int4"}, "quantization"),
    ({"beam_size": 0}, "beam_size"), ({"max_len": 1}, "max_len")])
def test_export_tflite_bad_arguments(translator, tmp_path, kwargs, match):
    with pytest.raises(ValueError, match=match):
        export.export_tflite(translator, tmp_path / "m.tflite", **kwargs)
    assert os.listdir(tmp_path) == []


class _HalfWritten(export.Exporter):
    """Writes two files of a folder, then fails (in ``write`` or in ``check``)."""
    format = "test"

    def __init__(self, fail_in, overwrite=False):
        super().__init__(overwrite)
        self.fail_in = fail_in

    def write(self, parts, path):
        os.makedirs(path)
        for name in ("a.bin", "b.bin"):
            runs.atomic_write_bytes(os.path.join(path, name), b"partial")
        if self.fail_in == "write":
            raise OSError("disk full")
        return {}

    def check(self, parts, path, samples):
        if self.fail_in == "check":
            raise RuntimeError("the artefact does not load")


@pytest.mark.parametrize("fail_in", ["write", "check"])
def test_failed_export_leaves_no_partial_dir(translator, tmp_path, fail_in):
    with pytest.raises((OSError, RuntimeError)):
        _HalfWritten(fail_in).export(translator, tmp_path / "artefact")
    assert os.listdir(tmp_path) == []  # no artefact, no .tmp- folder
    # With overwrite=True, a failed export leaves the previous artefact as it was.
    (tmp_path / "artefact").mkdir()
    (tmp_path / "artefact" / "old.bin").write_bytes(b"old")
    with pytest.raises((OSError, RuntimeError)):
        _HalfWritten(fail_in, overwrite=True).export(translator, tmp_path / "artefact")
    assert os.listdir(tmp_path) == ["artefact"]
    assert os.listdir(tmp_path / "artefact") == ["old.bin"]


def _raise_midway(module, path, signatures):
    os.makedirs(os.path.join(path, "variables"), exist_ok=True)
    with open(os.path.join(path, "saved_model.pb"), "wb") as f:
        f.write(b"half a model")
    raise KeyboardInterrupt  # as if the user pressed Ctrl-C while saving


@pytest.mark.slow  # a SavedModel export, interrupted
def test_interrupted_saved_model_export_leaves_no_version(translator, tmp_path, monkeypatch):
    monkeypatch.setattr(export.SavedModelExporter, "_save", staticmethod(_raise_midway))
    with pytest.raises(KeyboardInterrupt):
        export.export_saved_model(translator, tmp_path, version=3)
    assert os.listdir(tmp_path / "translator") == []  # no "3", no temporary folder


def test_interrupted_builtin_export_leaves_no_folder(translator, tmp_path, monkeypatch):
    # Conversion is stubbed: what is tested is writing the folder (files, then fail).
    from keras_attn.export import tflite as tflite_export

    answer = {"output": "", "seconds": 1.0, "cpu_seconds": 1.0}
    monkeypatch.setattr(export.TFLiteBuiltinExporter, "converted", lambda self, parts: setattr(
        self, "_metadata", {}) or {name: (b"tflite", answer)
                                   for name in ("encoder", "decoder_step")})
    monkeypatch.setattr(export.TFLiteBuiltinExporter, "check_ops",
                        staticmethod(lambda content, name: {}))
    monkeypatch.setattr(tflite_export, "signatures_of", lambda content: {})

    def fail(path, obj):
        raise OSError("disk full")

    monkeypatch.setattr(runs, "write_json", fail)
    with pytest.raises(OSError, match="disk full"):
        export.export_tflite(translator, tmp_path / "builtin_float32", target="builtin")
    assert os.listdir(tmp_path) == []


def test_reexport_refuses_existing_version(run, exported, translator, capsys):
    base = os.path.join(exported["dir"], "saved_model")
    with pytest.raises(FileExistsError, match="overwrite=True"):
        export.export_saved_model(translator, base, version=1)
    with pytest.raises(FileExistsError, match="overwrite"):
        export.export_run(run["dir"], export_dir=exported["dir"])
    with pytest.raises(FileExistsError):
        export.export_tflite(translator, exported["report"]["tflite"]["text_float32"]["path"])
    assert cli.main(["export", run["dir"], "--export-dir", exported["dir"]]) == 1
    assert "already exist" in capsys.readouterr().err


@pytest.fixture(scope="module")
def overwritten(exported, translator, tmp_path_factory):
    """A copy of the exported version 1, overwritten by a tensorflow-text, beam-2 export."""
    base = tmp_path_factory.mktemp("overwrite")
    shutil.copytree(exported["saved_model"], base / "translator" / "1")
    report = export.export_saved_model(translator, base, version=1, overwrite=True,
                                       beam_size=2, text_ops="tftext", request_signature=False)
    return {"base": base, "report": report}


@pytest.mark.slow  # a second SavedModel export (tensorflow-text ops, beam 2)
def test_overwrite_replaces_version(overwritten, translator, run):
    base, report = overwritten["base"], overwritten["report"]
    assert sorted(os.listdir(base / "translator")) == ["1", "1.report.json"]
    assert report["decoding"]["beam_size"] == 2 and report["text_ops"] == "tftext"
    import tensorflow_text

    assert report["non_core_ops"] == [
        {"op": op, "registered_by": "tensorflow_text", "version": tensorflow_text.__version__}
        for op in ("FastWordpieceTokenizeWithOffsets", "TFText>FastWordpieceDetokenize")]
    loaded = tf.saved_model.load(report["path"])
    # request_signature=False: no `translate` signature, nor its function kept beside
    # (`score`, one teacher-forced pass, is always there).
    assert set(loaded.signatures) == {"serving_default", "translate_ids", "score"}
    assert not hasattr(loaded, "translate")
    out = loaded.signatures["serving_default"](text=tf.constant(run["inputs"][:20]))
    assert _decode(out["translation"]) == translator.translate(run["inputs"][:20], beam_size=2)


@pytest.mark.slow  # the tensorflow-text export of test_overwrite_replaces_version
def test_tftext_saved_model_in_fresh_process(overwritten, translator, run, tmp_path):
    script = tmp_path / "load_saved_model.py"
    script.write_text(FRESH_PROCESS)
    inputs = run["inputs"][:10]
    (tmp_path / "inputs.json").write_text(json.dumps([s.encode().hex() for s in inputs]))
    proc = subprocess.run([sys.executable, str(script), overwritten["report"]["path"],
                           str(tmp_path / "inputs.json")], capture_output=True, text=True,
                          timeout=guards.timeout(15), env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["translation"] == translator.translate(inputs, beam_size=2)


# --- a WordPiece run trained on normalised text ------------------------------------------------
WORD_SAMPLES = ["I am COLD!", "Where is the station?", "He runs.", "We have to go now."]


# The English-French corpus beside the checkout: an uncalibrated run's export fits its
# calibrator on the run's validation split, read from the corpus its config names.
FRA_ENG = Path(__file__).resolve().parents[3] / "shared" / "data" / "fra-eng"


@pytest.fixture(scope="module")
def word_run(tmp_path_factory):
    """A WordPiece run (random weights) whose inputs are normalised (``Translator.normalize``),
    exported by ``export_run``: its text target cannot normalise inside the file."""
    import dataclasses

    from keras_attn.core.config import TrainConfig

    if not (FRA_ENG / "train.txt").exists():
        pytest.skip(f"the English-French corpus ({FRA_ENG}) is not on this machine: the "
                    "export calibrates this run on its validation split")
    root = tmp_path_factory.mktemp("word_run")
    run_dir = str(root / "run")
    p = runs.paths(run_dir)
    os.makedirs(run_dir)
    corpus = ["i am cold .", "where is the station ?", "we have to go now .", "he runs ."]
    vocab = text.learn_wordpiece_vocab(corpus * 20, vocab_size=80)
    text.save_vocab(vocab, p["src_vocab"])
    text.save_vocab(vocab, p["tgt_vocab"])
    config = dataclasses.asdict(TrainConfig(
        task="tatoeba", data=str(FRA_ENG), tokenizer="wordpiece", num_hiddens=16, ffn_num_hiddens=32,
        num_heads=2, num_layers=1, dropout=0.0, max_len=8, src_vocab_size=len(vocab),
        tgt_vocab_size=len(vocab)))
    runs.write_json(p["config"], config)
    keras.utils.set_random_seed(0)
    models.build_model(config).save(p["model"])
    runs.write_json(p["metrics"], {"samples": [{"source": s} for s in WORD_SAMPLES]})
    report = export.export_run(run_dir, export_dir=str(root / "export"),
                               quantizations=("float32",), log=lambda *a: None,
                               request_signature=False)
    return {"dir": run_dir, "report": report, "translator": Translator.from_run_dir(run_dir)}


@pytest.mark.slow  # builds and exports a model of its own
def test_word_level_text_target_says_it_expects_normalised_input(word_run):
    report, translator = word_run["report"], word_run["translator"]
    assert translator.normalize  # the premise: a WordPiece run on normalised text
    text_report = report["tflite"]["text_float32"]
    assert len(text_report["warnings"]) == 1 and "normalised input" in text_report["warnings"][0]
    assert report["warnings"] == ["text_float32: " + text_report["warnings"][0]]
    assert "warnings" not in report["saved_model"] and "warnings" not in report["tflite"][
        "builtin_float32"]
    assert text_report["decoding"]["normalize_input"] is False
    assert report["saved_model"]["decoding"]["normalize_input"] is True


@pytest.mark.slow  # builds and exports a model of its own
def test_word_level_agreement_is_measured_on_raw_text_and_same_ids(word_run):
    report, translator = word_run["report"], word_run["translator"]
    samples = report["samples"]
    assert samples["sources"] == WORD_SAMPLES  # raw: capitals, no space before "!"
    assert samples["agreement_measured_on"]["text_float32"].startswith("raw text")
    assert samples["agreement_measured_on"]["builtin_float32"].startswith("Translator.encode")
    # The text file got the raw strings, exactly what an app passes.
    raw = export.run_tflite_text(report["tflite"]["text_float32"]["path"], WORD_SAMPLES)
    assert samples["translations"]["text_float32"] == _decode(raw["translation"])
    loaded = tf.saved_model.load(report["saved_model"]["path"])
    saved = loaded.signatures["serving_default"](text=tf.constant(WORD_SAMPLES))
    assert samples["translations"]["saved_model"] == _decode(saved["translation"])
    expected = np.mean([a == b for a, b in zip(_decode(raw["translation"]),
                                               _decode(saved["translation"]))])
    assert samples["agreement_with_saved_model"]["text_float32"] == expected
    # The builtin loop and translate_ids got the same ids.
    source = translator.encode(WORD_SAMPLES)
    ids = export.run_tflite_builtin(report["tflite"]["builtin_float32"]["path"], source.numpy())
    reference = loaded.signatures["translate_ids"](source=source)["tokens"].numpy()
    same = [[t for t in a if t] == [t for t in b if t]
            for a, b in zip(ids["tokens"].tolist(), reference.tolist())]
    assert samples["agreement_with_saved_model"]["builtin_float32"] == np.mean(same)


# --- which ops the SavedModels need: what a stock TF Serving runs ------------------------------
@pytest.fixture(scope="module")
def serving_allowlist():
    return export.serving_allowlist()


def test_serving_allowlist_is_core_tf_plus_linked_tftext(serving_allowlist):
    assert {"StatelessWhile", "StringLower", "StaticRegexReplace", "UnicodeDecode",
            "FastWordpieceTokenizeWithOffsets", "TFText>FastSentencepieceTokenize"} \
        <= serving_allowlist
    assert not [op for op in serving_allowlist if op.startswith("Xla")]
    assert "TFText>RoundRobinTrim" not in serving_allowlist  # not linked before TF Serving 2.20


@pytest.mark.slow  # builds and exports a model of its own
def test_saved_model_ops_are_allowlisted(exported, overwritten, word_run, serving_allowlist):
    """Every op of the char (core ops), the tensorflow-text and the normalising WordPiece
    SavedModel is one a stock TF Serving runs with XLA off."""
    for path in (exported["saved_model"], overwritten["report"]["path"],
                 word_run["report"]["saved_model"]["path"]):
        ops = export.saved_model_ops(path)
        assert "StatefulPartitionedCall" in ops  # the lister reads the function library too
        assert not [op for op in ops if op.startswith("Xla")], path
        assert sorted(set(ops) - serving_allowlist) == [], path
    assert runs.read_json(os.path.join(exported["dir"], "saved_model", "translator",
                                       "1.report.json"))["tf_serving_lacks"] == []


# --- pieces ---------------------------------------------------------------------------------
def test_core_char_tokenizer_matches_tokenizer(translator):
    for tok in (translator.src_tokenizer, translator.tgt_tokenizer):
        core = export.CoreCharTokenizer(tok)
        strings = [b"", b"   ", b"3 March 2021", "\u00e9t\u00e9 1999".encode(), "ab\u4e00".encode(),
                   b"\xff\xfe abc", LONG.encode(), b"x[END]", b"#a", b"[UN"]
        assert (core.tokenize(tf.constant(strings)).to_list()
                == tok.tokenize(tf.constant(strings)).to_list())
        rng = np.random.default_rng(0)
        ids = rng.integers(-3, tok.vocab_size + 5, size=(500, 12)).astype(np.int32)
        ids[rng.random(ids.shape) < 0.2] = text.UNK_ID
        ids[rng.random(ids.shape) < 0.1] = text.PAD_ID
        np.testing.assert_array_equal(core.detokenize(tf.constant(ids)).numpy(),
                                      tok.detokenize(tf.constant(ids)).numpy())
    word_tok = text.Tokenizer(text.learn_wordpiece_vocab(["je suis là ."] * 5, vocab_size=40))
    assert not export.CoreCharTokenizer.supports(word_tok)


@pytest.mark.parametrize("shape, start, update", [
    ((2, 5), (0, 3), (2, 1)), ((2, 5, 3, 4), (0, 2, 0, 0), (2, 1, 3, 4)),
    ((3, 6), (1, 2), (2, 3)), ((4,), (0,), (4,))])
def test_portable_slice_update_matches_keras(shape, start, update):
    from keras_attn import ops as attn_ops

    rng = np.random.default_rng(1)
    x = rng.normal(size=shape).astype("float32")
    u = rng.normal(size=update).astype("float32")
    expected = keras.ops.convert_to_numpy(keras.ops.slice_update(x, start, u))
    dynamic_axis = 1 if len(shape) > 1 else 0  # one start index is a graph tensor

    @tf.function
    def update(x, u, index):
        starts = list(start)
        starts[dynamic_axis] = index
        return attn_ops.slice_update(x, tuple(starts), u)

    got = update(tf.constant(x), tf.constant(u), tf.constant(start[dynamic_axis]))
    np.testing.assert_array_equal(got.numpy(), expected)
    assert "Xla" not in str([op.type for op in update.get_concrete_function(
        tf.constant(x), tf.constant(u), tf.constant(0)).graph.get_operations()])


# --- the runtime module ---------------------------------------------------------------------
RUNTIME_PROCESS = r"""
import json, sys
import numpy as np
from keras_attn.export import runtime
out = runtime.run_tflite_builtin(sys.argv[1], np.array(json.loads(sys.argv[2]), np.int32))
print(json.dumps({"tokens": out["tokens"].tolist(), "loaded": sorted(
    m for m in ("keras", "tensorflow", "tensorflow_text") if m in sys.modules)}))
"""


@pytest.mark.kernels
def test_runtime_loop_needs_neither_keras_nor_tensorflow(exported, run, translator):
    folder = exported["report"]["tflite"]["builtin_float32"]["path"]
    source = translator.encode(run["inputs"][:3]).numpy()
    proc = subprocess.run([sys.executable, "-c", RUNTIME_PROCESS, folder,
                           json.dumps(source.tolist())], capture_output=True, text=True,
                          timeout=guards.timeout(15), env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["loaded"] == []
    np.testing.assert_array_equal(out["tokens"], export.run_tflite_builtin(folder, source)["tokens"])


# --- serving client -------------------------------------------------------------------------
def _signature_inputs(loaded):
    return loaded.signatures["serving_default"].structured_input_signature[1]


def test_rest_request_matches_signature(loaded):
    client = _serve_client()
    inputs = _signature_inputs(loaded)
    url, payload = client.build_rest_request(["3 March 2021", b"\xff"], "translator")
    assert url == "http://localhost:8501/v1/models/translator:predict"
    assert payload["signature_name"] in loaded.signatures
    assert all(set(row) == set(inputs) for row in payload["instances"])
    assert inputs["text"].dtype == tf.string and inputs["text"].shape.as_list() == [None]
    assert payload["instances"][0]["text"] == "3 March 2021"
    assert payload["instances"][1]["text"] == {"b64": base64.b64encode(b"\xff").decode()}
    _, columnar = client.build_rest_request(["a", "b"], columnar=True)
    assert set(columnar["inputs"]) == set(inputs) and columnar["inputs"]["text"] == ["a", "b"]


def test_grpc_request_matches_signature(loaded):
    pytest.importorskip("tensorflow_serving.apis",
                        reason="tensorflow-serving-api is not installed (pip install "
                               "'tensorflow-serving-api==2.21.*')")
    client = _serve_client()
    inputs = _signature_inputs(loaded)
    request = client.build_grpc_request(["3 March 2021", "x"], "translator")
    assert request.model_spec.name == "translator"
    assert request.model_spec.signature_name in loaded.signatures
    assert set(request.inputs) == set(inputs)
    tensor = request.inputs["text"]
    assert tensor.dtype == inputs["text"].dtype.as_datatype_enum
    assert [d.size for d in tensor.tensor_shape.dim] == [2]
    assert tf.make_ndarray(tensor).tolist() == [b"3 March 2021", b"x"]


def test_translate_signature_requests_carry_every_option():
    """``options=`` / ``--option NAME=VALUE``: the REST (columnar) and gRPC requests for
    the newest options signature carry every input of ``export.request.input_signature``
    (every runtime but TF Serving needs them all), each one parsed by the signature's dtype
    into its shape, as TF Serving parses JSON; the options not given are the "not set"
    values. A request for an older signature carries its inputs only."""
    from keras_attn.export import contract, request as export_request

    client = _serve_client()
    specs = {spec.name: spec for spec in export_request.input_signature()}
    options = {"beam_size": 4, "num_hypotheses": 2, "length_penalty": 0.6,
               "target_prefix": "2020", "return_alignments": True}
    _, payload = client.build_rest_request(["3 March 2021", b"\xff"], options=options)
    assert payload["signature_name"] == contract.LATEST_OPTIONS_SIGNATURE
    inputs = payload["inputs"]
    # passthrough is translate_v3's, the glossary translate_v4's (an export that passes
    # spans through has them).
    v2_defaults = {k: v for k, v in client.OPTION_DEFAULTS.items()
                   if k not in ("passthrough", "glossary_source", "glossary_target")}
    assert set(inputs) == set(specs) == set(v2_defaults) | {"text"}
    json_types = {tf.int32: int, tf.float32: float, tf.bool: bool, tf.string: list}
    for name, value in inputs.items():
        assert type(value) is json_types[specs[name].dtype], (name, value)
        if specs[name].dtype == tf.string:
            value = [base64.b64decode(v["b64"]) if isinstance(v, dict) else v for v in value]
        assert specs[name].shape.is_compatible_with(tf.constant(value, specs[name].dtype).shape)
    assert {k: inputs[k] for k in options} == {**options, "target_prefix": ["2020"]}
    assert (inputs["max_length"], inputs["sampling_topk"], inputs["seed"]) == (0, 1, 0)
    _, plain = client.build_rest_request(["x"], signature="translate_v2")  # every default
    assert plain["inputs"] == {"text": ["x"], **v2_defaults}
    _, v3 = client.build_rest_request(["x"], options={"passthrough": False})
    assert v3["signature_name"] == "translate_v3"
    assert v3["inputs"] == {"text": ["x"], **v2_defaults, "passthrough": False}
    _, first = client.build_rest_request(["x"], signature="translate")
    assert set(first["inputs"]) == {"text", *contract.OPTION_SIGNATURES["translate"]}
    with pytest.raises(ValueError, match="unknown decoding option"):
        client.build_rest_request(["x"], signature="translate",
                                  options={"repetition_penalty": 1.2})
    with pytest.raises(ValueError, match="unknown decoding option"):
        client.build_rest_request(["x"], options={"beam": 4})
    assert dict(map(client._parse_option, ["beam_size=4", "return_alignments=true",
                                           "length_penalty=0.6", "target_prefix=a=b"])) == {
        "beam_size": 4, "return_alignments": True, "length_penalty": 0.6, "target_prefix": "a=b"}
    for bad in ("beam=4", "beam_size", "beam_size=x", "return_alignments=yes"):
        with pytest.raises(ValueError):
            client._parse_option(bad)
    rows = client.parse_rest_response({"outputs": {
        "translations": [["2021-03-03", {"b64": "/w=="}]], "scores": [[-0.46, -3.3]],
        "alignments": [["0-0", ""]], "truncated": [False]}})
    assert rows == [{"translations": ["2021-03-03", "\ufffd"], "scores": [-0.46, -3.3],
                     "alignments": ["0-0", ""], "truncated": False}]

    pytest.importorskip("tensorflow_serving.apis",
                        reason="tensorflow-serving-api is not installed")
    request = client.build_grpc_request(["3 March 2021", "x"], options=options)
    assert (request.model_spec.signature_name == contract.LATEST_OPTIONS_SIGNATURE
            and set(request.inputs) == set(specs))
    for name, tensor in request.inputs.items():
        assert tensor.dtype == specs[name].dtype.as_datatype_enum, name
        assert specs[name].shape.is_compatible_with(tf.make_ndarray(tensor).shape), name
    assert tf.make_ndarray(request.inputs["target_prefix"]).tolist() == [b"2020"]
    assert tf.make_ndarray(request.inputs["length_penalty"]) == np.float32(0.6)


class _FakeRestServing(http.server.BaseHTTPRequestHandler):
    """Answers ``/v1/models/translator:predict`` like TF Serving, with the SavedModel."""
    loaded = None

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        fn = self.loaded.signatures[body.get("signature_name", "serving_default")]
        names = set(fn.structured_input_signature[1])
        rows = body.get("instances")
        columns = body.get("inputs") or {n: [r[n] for r in rows] for n in names}
        if self.path != "/v1/models/translator:predict" or set(columns) != names:
            self.send_response(400)
            self.end_headers()
            self.wfile.write(json.dumps({"error": f"bad request {sorted(columns)}"}).encode())
            return
        values = [base64.b64decode(v["b64"]) if isinstance(v, dict) else v.encode()
                  for v in columns["text"]]
        out = {k: v.numpy().tolist() for k, v in fn(text=tf.constant(values, tf.string)).items()}
        out["translation"] = [t.decode("utf-8") for t in out["translation"]]
        answer = ({"predictions": [{k: out[k][i] for k in out} for i in range(len(values))]}
                  if rows is not None else {"outputs": out})
        self.send_response(200)
        self.end_headers()
        self.wfile.write(json.dumps(answer).encode())

    def log_message(self, *args):
        pass


@pytest.mark.parametrize("columnar", [False, True])
def test_rest_client_round_trip(loaded, translator, columnar):
    client = _serve_client()
    _FakeRestServing.loaded = loaded
    server = http.server.HTTPServer(("127.0.0.1", 0), _FakeRestServing)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        host = f"127.0.0.1:{server.server_port}"
        texts = ["3 March 2021", "1999-07-04", LONG]
        # The client's default timeout (30 s) is for a real server; here a hang guard
        # scaled to the machine's load, so a slow, loaded machine does not fail the test.
        rows = client.send_rest(*client.build_rest_request(texts, host=host, columnar=columnar),
                                timeout=guards.timeout(5))
        assert [r["translation"] for r in rows] == translator.translate(texts)
        assert [r["truncated"] for r in rows] == [False, False, True]
        with pytest.raises(RuntimeError, match="HTTP 400"):
            client.send_rest(*client.build_rest_request(texts, "other_model", host=host),
                             timeout=guards.timeout(5))
    finally:
        server.shutdown()
        server.server_close()


def test_grpc_client_round_trip(loaded, translator):
    pytest.importorskip("tensorflow_serving.apis",
                        reason="tensorflow-serving-api is not installed")
    import grpc
    from concurrent import futures
    from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

    class Servicer(prediction_service_pb2_grpc.PredictionServiceServicer):
        def Predict(self, request, context):
            fn = loaded.signatures[request.model_spec.signature_name]
            out = fn(**{k: tf.constant(tf.make_ndarray(v)) for k, v in request.inputs.items()})
            response = predict_pb2.PredictResponse()
            for k, v in out.items():
                response.outputs[k].CopyFrom(tf.make_tensor_proto(v.numpy()))
            return response

    client = _serve_client()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(Servicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        texts = ["3 March 2021", "le 4 juillet 1999"]
        rows = client.send_grpc(client.build_grpc_request(texts), f"127.0.0.1:{port}",
                                timeout=guards.timeout(5))  # a hang guard, as above
        assert [r["translation"] for r in rows] == translator.translate(texts)
        assert [r["truncated"] for r in rows] == [False, False]
    finally:
        server.stop(None)
