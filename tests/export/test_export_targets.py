"""keras_attn.export.EXPORT_TARGETS: every ``keras-attn export --format`` is a registered
target (name, what it writes, its function, its options), and the command dispatches
through the registry with no per-format branch."""
import argparse
import ast
import importlib
import pathlib
import types

import pytest

from keras_attn import cli
from keras_attn.export import EXPORT_TARGETS, ExportTarget

CLI_EXPORT = pathlib.Path(__file__).resolve().parents[2] / "keras_attn" / "cli" / "export.py"
CALLS = []


def fake_export(run_dir, **kwargs):
    CALLS.append((run_dir, kwargs))
    return {}


def test_every_target_is_declared_and_its_function_exists():
    assert {"tf", "saved_model", "ctranslate2"} <= set(EXPORT_TARGETS)
    for name, target in EXPORT_TARGETS.items():
        assert target.name == name and target.writes
        module, _, function = target.function.partition(":")
        if name == "ctranslate2":
            pytest.importorskip("ctranslate2")
        assert callable(getattr(importlib.import_module(module), function))


def test_cli_dispatches_through_the_registry(monkeypatch, tmp_path):
    """A target added to the registry is a --format with its own flags, nothing else."""
    monkeypatch.setitem(EXPORT_TARGETS, "fake", ExportTarget(
        "fake", "nothing", f"{__name__}:fake_export", {"quantization": "float32"},
        {"fixed": 1}))
    CALLS.clear()
    assert cli.main(["export", str(tmp_path), "--format", "fake"]) == 0
    assert cli.main(["export", str(tmp_path), "--format", "fake", "--quantization", "int8"]) == 0
    assert [c[1]["quantization"] for c in CALLS] == ["float32", "int8"]
    assert all(c[1]["fixed"] == 1 and c[1]["overwrite"] is False for c in CALLS)
    assert cli.main(["export", str(tmp_path), "--format", "fake", "--version", "2"]) == 1
    assert len(CALLS) == 2


def test_saved_model_alone_is_export_run_without_tflite(monkeypatch, tmp_path):
    from keras_attn.export import all_targets

    monkeypatch.setattr(all_targets, "export_run", fake_export)
    CALLS.clear()
    assert cli.main(["export", str(tmp_path), "--format", "saved_model", "--version", "3"]) == 0
    ((_, kwargs),) = CALLS
    assert kwargs["quantizations"] == () and kwargs["version"] == 3 and kwargs["beam_size"] == 1


def test_the_command_names_no_format():
    """No string of a format name in keras_attn/cli/export.py: no if/elif per format."""
    strings = {n.value for n in ast.walk(ast.parse(CLI_EXPORT.read_text()))
               if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    assert not strings & set(EXPORT_TARGETS), strings & set(EXPORT_TARGETS)


def test_parser_choices_are_the_registry():
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    formats = next(a for a in sub.choices["export"]._actions if a.dest == "format")
    assert list(formats.choices) == list(EXPORT_TARGETS)


def test_passthrough_reaches_the_savedmodel_exporter(monkeypatch, tmp_path):
    """``--passthrough`` is a flag of the SavedModel's targets only, its three values reach
    the exporter (auto: None, on: True, off: False), and a bad one is refused before any
    work."""
    from keras_attn.export import all_targets

    monkeypatch.setattr(all_targets, "export_run", fake_export)
    CALLS.clear()
    for value in ("on", "off"):
        assert cli.main(["export", str(tmp_path), "--format", "saved_model",
                         "--passthrough", value]) == 0
    assert cli.main(["export", str(tmp_path), "--format", "tf"]) == 0
    assert [c[1]["passthrough"] for c in CALLS] == ["on", "off", "auto"]
    assert cli.main(["export", str(tmp_path), "--format", "ctranslate2",
                     "--passthrough", "on"]) == 1
    monkeypatch.undo()
    seen = []
    monkeypatch.setattr(all_targets, "SavedModelExporter",
                        lambda *a, **k: seen.append(k["passthrough"]) or 1 / 0)
    for value in ("auto", "on", False):
        with pytest.raises(ZeroDivisionError):
            all_targets.export_run(str(tmp_path), passthrough=value)
    assert seen == [None, True, False]
    with pytest.raises(ValueError, match="passthrough"):
        all_targets.export_run(str(tmp_path), passthrough="yes")


def test_a_deadline_leaves_out_the_int8_files_their_float32_twins_say_will_not_fit(
        monkeypatch, tmp_path):
    """export_run(deadline=..., workers=0): float32 first; an int8 file is made only when its
    float32 twin's measured time still fits before the deadline."""
    from keras_attn.export import all_targets

    now = [0.0]
    took = {"text_float32": 30.0, "builtin_float32": 10.0}  # seconds each file "takes"

    class Fake:
        def __init__(self, quantization, *args, **kwargs):
            self.quantization = quantization

        def supports(self, parts):
            return None

        def settings(self):
            return {"key": self.key}

        def start(self, parts):
            pass

        def path_in(self, folder):
            return str(tmp_path / "never" / self.key)

        def export(self, parts, path):
            now[0] += took.get(self.key, 1.0)
            return {"path": path, "total_bytes": 0, "seconds": {}}

    class Text(Fake):
        target, key = "text", property(lambda self: f"text_{self.quantization}")

    class Builtin(Fake):
        target, key = "builtin", property(lambda self: f"builtin_{self.quantization}")

    made = []
    monkeypatch.setattr(all_targets.time, "monotonic", lambda: now[0])
    monkeypatch.setattr(all_targets, "TFLiteTextExporter", Text)
    monkeypatch.setattr(all_targets, "TFLiteBuiltinExporter", Builtin)
    monkeypatch.setattr(all_targets, "SavedModelExporter", lambda *a, **k: types.SimpleNamespace(
        destination=lambda base: str(tmp_path / "never"), settings=lambda: {},
        export=lambda parts, base: {"path": base}))
    monkeypatch.setattr(all_targets, "run_parts", lambda run_dir: (
        types.SimpleNamespace(normalize=False), types.SimpleNamespace(languages={})))
    monkeypatch.setattr(all_targets, "sample_sources", lambda run_dir: [])
    monkeypatch.setattr(all_targets, "compare_samples", lambda translator, saved, report,
                        tflite, sources: made.append([e.key for e in tflite]) or {
                            "agreement_with_saved_model": {}, "sources": []})
    monkeypatch.setattr(all_targets, "_log_serving", lambda *a: None)
    # 40 s of float32 files end at 40; the text twin (30 s) does not fit before 60, the
    # builtin one (10 s) does.
    report = all_targets.export_run(str(tmp_path), export_dir=str(tmp_path / "x"),
                                    log=lambda *a: None, deadline=60.0, workers=0)
    assert report["left_out"] == ["text_int8"]
    assert made == [["text_float32", "builtin_float32", "builtin_int8"]]
    now[0] = 0.0
    everything = all_targets.export_run(str(tmp_path), export_dir=str(tmp_path / "y"),
                                        log=lambda *a: None, workers=0)
    assert everything["left_out"] == [] and list(everything["tflite"]) == [
        "text_float32", "builtin_float32", "text_int8", "builtin_int8"]


def test_with_workers_a_deadline_leaves_out_the_files_not_converted_by_then(monkeypatch):
    """Converting in worker processes, a file whose conversions have not all ended at the
    deadline is left out (its conversions are abandoned), the others are written."""
    import concurrent.futures
    import time

    from keras_attn.export import all_targets

    def future(done):
        f = concurrent.futures.Future()
        if done:
            f.set_result({})
        return f

    futures = {"text_float32": {"text": future(True)},
               "builtin_float32": {"encoder": future(True), "decoder_step": future(False)},
               "text_int8": {"text": future(False)}}
    staging = types.SimpleNamespace(pool=types.SimpleNamespace(workers=2),
                                    started=futures.__getitem__)
    written = []

    def exporter(key):
        return types.SimpleNamespace(
            key=key, target=key.split("_")[0], path_in=lambda folder: key,
            export=lambda parts, path: written.append(path) or {
                "path": path, "total_bytes": 0, "seconds": {}})

    report = {"tflite": {}, "left_out": []}
    all_targets._collect([exporter(k) for k in futures], None, "tflite", time.monotonic(),
                         staging, report, log=lambda *a: None)
    assert written == ["text_float32"] and list(report["tflite"]) == ["text_float32"]
    assert report["left_out"] == ["builtin_float32", "text_int8"]


def test_the_web_target_refuses_what_its_javascript_cannot_run():
    """Options named in the message; a WordPiece run's tokenizer (no JavaScript twin) is
    refused before anything is converted."""
    from keras_attn.export.base import Parts
    from keras_attn.export.web import WebExporter

    assert EXPORT_TARGETS["web"].options == {"quantization": "float32", "passthrough": "auto",
                                             "wasm": "plain"}
    for kwargs, word in (({"wasm": "jspi"}, "`wasm`"), ({"quantization": "float16"},
                                                         "`quantization`")):
        with pytest.raises(ValueError, match=word):
            WebExporter(**kwargs)
    wordpiece = types.SimpleNamespace(char_level=False, vocab=["[PAD]"])
    chars = types.SimpleNamespace(char_level=True, vocab=["[PAD]"])
    reason = WebExporter().supports(Parts(None, chars, wordpiece, 8))
    assert "tgt tokenizer is WordPiece" in reason


def test_the_web_flags_reach_the_web_target(monkeypatch, tmp_path):
    monkeypatch.setitem(EXPORT_TARGETS, "web", ExportTarget(
        "web", "test", f"{__name__}:fake_export", {"quantization": "float32",
                                                    "passthrough": "auto", "wasm": "plain"}))
    CALLS.clear()
    assert cli.main(["export", str(tmp_path), "--format", "web", "--wasm", "all",
                     "--quantization", "int8"]) == 0
    assert CALLS[-1][1] == {"export_dir": None, "overwrite": False, "log": CALLS[-1][1]["log"],
                            "quantization": "int8", "passthrough": "auto", "wasm": "all"}
    with pytest.raises(SystemExit):
        cli.main(["export", str(tmp_path), "--format", "web", "--wasm", "threads"])
