"""What makes the export fast does not change what it makes.

- The serving graphs traced without AutoGraph (``kernels.fastpath.AUTOGRAPH``) hold the same
  ops as with it.
- A staged SavedModel converted directly (``export.conversion.DIRECT_CONVERSION``) gives the
  file the public ``TFLiteConverter.from_saved_model`` gives, and the alias signature
  prepended to a flatbuffer is the one the flatbuffer object API appends; a worker process
  converts to the same bytes as this process.
- An unchanged run exported again keeps its artefacts (``export.reuse``), and an export
  that left files out is completed by the next one.
"""
import collections
import os

import numpy as np
import pytest
import tensorflow as tf

from tests.support import ROOT, run_fixtures
from keras_attn.core import runs
from keras_attn.export import base, conversion, reuse, runtime, tflite, workers
from keras_attn.kernels import fastpath

EXPORTED_TEXT = os.path.join(ROOT,
                             "exported", "tflite", "text_float32.tflite")


def _ops(concrete):
    """The op types of a traced function and of every function it calls, with counts."""
    graph = concrete.graph.as_graph_def()
    ops = collections.Counter(node.op for node in graph.node)
    for fn in graph.library.function:
        ops.update(node.op for node in fn.node_def)
    return ops


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    run_dir = str(tmp_path_factory.mktemp("speed") / "run")
    run_fixtures.copy_tiny_dates_run(run_dir)
    return base.run_parts(run_dir)[1]


def test_a_graph_function_refuses_python_control_flow_on_a_tensor():
    """Without AutoGraph a Python ``if`` on a tensor fails the trace (it is not converted in
    silence): the graphs that trace without it have no such ``if``."""
    def branchy(x):
        if tf.reduce_any(x > 0):
            return x
        return -x

    spec = [tf.TensorSpec([None], tf.float32)]
    with pytest.raises(TypeError, match="tf.Tensor"):
        fastpath.graph_function(branchy, spec).get_concrete_function()
    assert tf.function(branchy, input_signature=spec).get_concrete_function() is not None


@pytest.mark.slow  # four modules traced twice
def test_the_graphs_traced_without_autograph_are_those_traced_with_it(parts, monkeypatch):
    from keras_attn.export.builtin import BuiltinModule
    from keras_attn.export.modules import TranslatorModule

    def traced(autograph):
        monkeypatch.setattr(fastpath, "AUTOGRAPH", autograph)
        saved = TranslatorModule(parts, for_tflite=False)
        functions = {name: fn.get_concrete_function()
                     for name, fn in saved.signatures().items()}
        text = TranslatorModule(parts, for_tflite=True, text_ops="tftext")
        functions.update({f"tflite {k}": fn for k, fn in text.tflite_functions().items()})
        builtin = BuiltinModule(parts.model, parts.max_len, parts.calibrator)
        functions.update({f"builtin {k}": fn for file in builtin.tflite_functions().values()
                          for k, fn in file.items()})
        return {name: _ops(fn) for name, fn in functions.items()}

    without, with_autograph = traced(False), traced(True)
    assert without.keys() == with_autograph.keys()
    for name in without:
        assert without[name] == with_autograph[name], name


@pytest.fixture(scope="module")
def staged_encoder(parts, tmp_path_factory):
    from keras_attn.export.builtin import BuiltinModule

    module = BuiltinModule(parts.model, parts.max_len, parts.calibrator)
    functions = module.tflite_functions()["encoder"]
    path = str(tmp_path_factory.mktemp("staged") / "encoder")
    return conversion.stage(functions, [module.captured_variables], path), tuple(functions)


def _run_encoder(content, key, max_len):
    interpreter = runtime.text_interpreter(model_content=content)
    source = np.zeros((1, max_len), np.int32)
    source[0, :4] = [5, 6, 7, 3]
    return interpreter.get_signature_runner(key)(source=source)


@pytest.mark.slow  # three conversions and a worker process
def test_direct_and_public_conversions_and_a_worker_make_the_same_file(
        staged_encoder, parts, monkeypatch, tmp_path):
    path, keys = staged_encoder
    direct = conversion.convert(conversion.Conversion(path, keys, "int8", direct=True))
    public = conversion.convert(conversion.Conversion(path, keys, "int8", direct=False))
    assert tflite.tflite_ops(direct) == tflite.tflite_ops(public)
    assert tflite.signatures_of(direct) == tflite.signatures_of(public)
    ours, theirs = (_run_encoder(c, keys[0], parts.max_len) for c in (direct, public))
    assert ours.keys() == theirs.keys()
    for name in ours:
        np.testing.assert_array_equal(ours[name], theirs[name])
    # The public file only adds the converter's metadata (its options, a few hundred bytes).
    assert 0 < len(public) - len(direct) < 1000
    with workers.ConversionPool(workers=1) as pool:
        answer = pool.submit(conversion.Conversion(path, keys, "int8"),
                             str(tmp_path / "w.tflite")).result()
    with open(answer["output"], "rb") as f:
        assert f.read() == direct
    assert answer["seconds"] > 0 and answer["cpu_seconds"] > 0


@pytest.mark.heavy  # the committed text file unpacked into Python objects
@pytest.mark.skipif(not os.path.exists(EXPORTED_TEXT), reason="exported/ is missing")
def test_what_is_prepended_to_a_flatbuffer_is_what_the_object_api_appends(monkeypatch):
    """An alias signature and the export settings, prepended as a new root table, read back
    as those the flatbuffer object API appends: the same signatures, settings and
    translations, the old file unchanged after the prefix."""
    with open(EXPORTED_TEXT, "rb") as f:
        content = f.read()
    key, alias = runtime.TFLITE_TEXT_SIGNATURE, "sentences_again"
    aliases, settings = ((key, alias, {"text": "again"}),), {"passthrough": True, "x": [1]}
    prepended = conversion.edit(content, aliases, settings)
    monkeypatch.setattr(conversion, "DIRECT_CONVERSION", False)
    appended = conversion.edit(content, aliases, settings)
    assert tflite.signatures_of(prepended) == tflite.signatures_of(appended)
    assert tflite.signatures_of(prepended)[alias]["inputs"] == {
        "again": {"dtype": "string", "shape": [-1]}}
    assert runtime.tflite_settings(prepended) == runtime.tflite_settings(appended) == settings
    assert runtime.tflite_settings(content) == {}
    # The old file follows the new root unchanged, at a 16-byte boundary.
    assert prepended.endswith(content) and (len(prepended) - len(content)) % 16 == 0
    texts = np.array([b"3 March 2021", b"le 4 juillet 1999"], dtype=object)
    outs = [runtime.text_interpreter(model_content=c).get_signature_runner(alias)(again=texts)
            for c in (prepended, appended)]
    assert outs[0]["translation"].tolist() == outs[1]["translation"].tolist()
    assert outs[0]["translation"].tolist() == runtime.run_tflite_text(
        content, texts, split=False)["translation"].tolist()


def test_default_workers_follow_the_cores_and_the_memory():
    assert workers.default_workers(4, cpus=2, available=16e9) == 1  # a core for the export
    assert workers.default_workers(4, cpus=16, available=16e9) == 4  # no more than the jobs
    assert workers.default_workers(4, cpus=8, available=6e9) == 2  # 2.5 GB each
    assert workers.default_workers(4, cpus=1, available=16e9) == 0  # one core: no worker
    with pytest.raises(ValueError, match="workers"):
        workers.ConversionPool(workers=-1)


def test_the_run_fingerprint_follows_what_an_artefact_is_made_from(tmp_path):
    run_dir = str(tmp_path / "run")
    run_fixtures.copy_tiny_dates_run(run_dir)
    first = reuse.run_fingerprint(run_dir)
    p = runs.paths(run_dir)
    runs.write_json(p["metrics"], {"samples": []})  # not an input of any artefact
    assert reuse.run_fingerprint(run_dir) == first
    with open(p["tgt_vocab"], "a", encoding="utf-8") as f:
        f.write("x\n")
    assert reuse.run_fingerprint(run_dir) != first
    one = reuse.artefact_fingerprint(first, {"quantization": "int8"})
    assert one != reuse.artefact_fingerprint(first, {"quantization": "float32"})
    assert not reuse.reusable({"fingerprint": one, "path": str(tmp_path / "gone")}, one)
    assert reuse.reusable({"fingerprint": one, "path": run_dir}, one)
    assert not reuse.reusable({"fingerprint": one, "path": run_dir}, first)


@pytest.mark.slow  # three exports of the tiny run
def test_an_export_keeps_what_an_unchanged_run_exported_and_completes_the_rest(tmp_path):
    from keras_attn import export

    run_dir = str(tmp_path / "run")
    run_fixtures.copy_tiny_dates_run(run_dir)
    quiet = dict(log=lambda *a: None, request_signature=False)
    first = export.export_run(run_dir, quantizations=(), **quiet)  # the SavedModel alone
    saved = first["saved_model"]["path"]
    made = os.path.getmtime(os.path.join(saved, "saved_model.pb"))
    # Without --overwrite: the SavedModel is kept, the TFLite files are made.
    second = export.export_run(run_dir, quantizations=("float32",), **quiet)
    assert second["reused"] == ["saved_model"] and second["saved_model"]["reused"]
    assert os.path.getmtime(os.path.join(saved, "saved_model.pb")) == made
    assert set(second["tflite"]) == {"text_float32", "builtin_float32"}
    assert all(v == "passed" for v in second["samples"]["check"].values())
    third = export.export_run(run_dir, quantizations=("float32",), **quiet)
    assert third["reused"] == ["builtin_float32", "saved_model", "text_float32"]
    # Another setting (a beam in the graphs) is another artefact: refused, then remade.
    with pytest.raises(FileExistsError, match="overwrite"):
        export.export_run(run_dir, quantizations=("float32",), beam_size=2, **quiet)
    # A changed run (its calibrator refitted) is another run: its old artefacts are not kept.
    calibration = runs.paths(run_dir)["calibration"]
    fitted = runs.read_json(calibration)
    runs.write_json(calibration, dict(fitted, bias=fitted["bias"] + 0.5))
    with pytest.raises(FileExistsError, match="another run"):
        export.export_run(run_dir, quantizations=(), **quiet)
