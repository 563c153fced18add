"""Every artefact of a run against ``Translator`` with its defaults: the same translations?

For every distinct English input of a Tatoeba file, each artefact answers as its page calls
it, with no options: ``serving_default``, the options signatures (through
``SavedModelEngine``), ``tflite/text_<q>``, ``tflite/builtin_<q>`` (``--builtin-limit``: the
first N inputs) and ``ctranslate2/<q>`` (``--ct2-dir``; int8 in ``<dir>_int8``). Spans are
not passed through; a missing artefact is skipped.

    python -m benchmarks.artefact_agreement RUN --data fra-eng/dev.txt --json OUT.json
"""
import argparse
import importlib.util
import json
import os
import platform
import sys
import time

from benchmarks.results import fresh_dir

QUANTIZATIONS = ("float32", "int8")


def read_sources(path):
    """The distinct English sentences of a Tatoeba file, in file order, as written."""
    with open(path, encoding="utf-8") as f:
        return list(dict.fromkeys(line.rstrip("\n").split("\t")[0] for line in f))


def batched(fn, items, batch_size=64):
    """``fn`` over ``items`` in slices of ``batch_size``, its results concatenated."""
    out = []
    for i in range(0, len(items), batch_size):
        out.extend(fn(items[i: i + batch_size]))
    return out


def utf8(strings):
    """str for every bytes of ``strings`` (a signature's string output, or its tensor)."""
    strings = strings.numpy() if hasattr(strings, "numpy") else strings
    return [s.decode("utf-8", "replace") if isinstance(s, bytes) else str(s) for s in strings]


def _split_joined(translate_sentences):
    """``batch -> translations``: each text split with ``split_for_tflite``, every sentence
    in one call of ``translate_sentences``, joined with ``join_from_tflite``."""
    from keras_attn.export import runtime

    def call(batch):
        sentences, counts, separators = runtime.split_for_tflite(batch)
        out = translate_sentences(sentences) if len(sentences) else sentences
        return runtime.join_from_tflite(out, counts, separators)

    return call


def text_file(path):
    """``batch -> translations`` through the TFLite text file ``path`` as docs/tflite.md
    calls it (``translate_sentences``; a file exported before it: ``run_tflite_text``)."""
    from keras_attn.export import runtime

    interpreter = runtime.text_interpreter(model_path=path)
    key = runtime.TFLITE_SENTENCES_SIGNATURE
    if key in interpreter.get_signature_list():
        runner = interpreter.get_signature_runner(key)
        return _split_joined(lambda sentences: runner(sentences=sentences)["translation"])
    return _split_joined(lambda sentences: runtime.run_tflite_text(
        path, sentences, split=False)["translation"])


def builtin_files(translator, folder):
    """``batch -> translations`` through the builtin folder's reference loop
    (``runtime.run_tflite_builtin``), the sentences encoded and detokenized by
    ``translator``."""
    from keras_attn.export import runtime

    def translate(sentences):
        ids = translator.encode(utf8(sentences)).numpy()
        return translator.detokenize(runtime.run_tflite_builtin(folder, ids)["tokens"])

    return _split_joined(translate)


def compare(texts, reference, got, seconds, keep=5, names=("reference", "artefact")):
    """The share of ``got`` identical to ``reference`` over ``texts``, and the first
    ``keep`` differences (each ``{"source", names[0], names[1]}``, cut to 200 characters)."""
    differ = [i for i, (a, b) in enumerate(zip(reference, got)) if a != b]
    return {"inputs": len(got), "identical": len(got) - len(differ),
            "identical_fraction": round(1 - len(differ) / max(len(got), 1), 4),
            "seconds": round(seconds, 2),
            "differences": [{"source": texts[i][:200], names[0]: reference[i][:200],
                             names[1]: got[i][:200]} for i in differ[:keep]]}


def artefacts(translator, export_dir, ct2_dir):
    """``(name, loader or the reason it is skipped)`` for every artefact of the export; a
    loader returns ``batch -> translations``."""
    from keras_attn.export import option_sets, runtime, saved_model
    from keras_attn.export.contract import ARTEFACTS

    saved = os.path.join(export_dir, ARTEFACTS["saved_model"])
    signatures = (saved_model.saved_model_signatures(saved) if os.path.isdir(saved) else {})
    for name in ("serving_default", *option_sets.OPTION_SIGNATURES):
        key = f"saved_model/{name}"
        if not signatures:
            yield key, f"no SavedModel at {saved}"
        elif name not in signatures:
            yield key, f"the SavedModel has no {name!r} signature (exported before it)"
        elif name == "serving_default":
            yield key, lambda: _serving_default(saved)
        else:
            yield key, lambda name=name: _options_signature(saved, name)
    for q in QUANTIZATIONS:
        path = os.path.join(export_dir, ARTEFACTS[f"tflite_text_{q}"])
        yield f"tflite/text_{q}", (
            (lambda path=path: text_file(path)) if os.path.isfile(path) else f"no {path}")
    for q in QUANTIZATIONS:
        folder = os.path.join(export_dir, ARTEFACTS[f"tflite_builtin_{q}"])
        present = all(os.path.isfile(os.path.join(folder, f)) for f in runtime.BUILTIN_FILES)
        yield f"tflite/builtin_{q}", (
            (lambda folder=folder: builtin_files(translator, folder)) if present
            else f"no {' and '.join(runtime.BUILTIN_FILES)} in {folder}")
    for q in QUANTIZATIONS:
        path = ct2_dir + ("" if q == "float32" else f"_{q}")
        if importlib.util.find_spec("ctranslate2") is None:
            yield f"ctranslate2/{q}", "ctranslate2 is not installed"
        elif not os.path.isfile(os.path.join(path, "model.bin")):
            yield f"ctranslate2/{q}", (f"no CTranslate2 model at {path} (keras-attn export "
                                       f"RUN --format ctranslate2 --quantization {q})")
        else:
            yield f"ctranslate2/{q}", lambda path=path: _ctranslate2(path)


def _serving_default(path):
    import tensorflow as tf
    import tensorflow_text  # noqa: F401 (a SentencePiece SavedModel's ops)

    serve = tf.saved_model.load(path).signatures["serving_default"]
    return lambda batch: utf8(serve(text=tf.constant(batch, tf.string))["translation"])


def _options_signature(path, name):
    from keras_attn.decoding.options import DecodingOptions
    from keras_attn.serve.engines import SavedModelEngine

    engine = SavedModelEngine(path, signature=name)
    return lambda batch: [hyps[0]["translation"] for hyps in engine.translate(
        list(batch), DecodingOptions(), passthrough=False)]


def _ctranslate2(path):
    from keras_attn.export.ctranslate2_runtime import CTranslate2Translator

    ct2 = CTranslate2Translator(path)
    return lambda batch: ct2.translate(list(batch), batch_size=max(len(batch), 1),
                                       passthrough=False)


def measure(run_dir, texts, export_dir=None, ct2_dir=None, builtin_limit=0, batch_size=64,
            keep=5, log=print):
    """Each artefact's agreement with ``Translator.translate`` (module docstring) on
    ``texts``.

    Args:
        run_dir: the run. texts: the inputs (str). export_dir: default ``RUN/export``.
        ct2_dir: the float32 CTranslate2 model (default ``EXPORT/ctranslate2``; int8 in
            ``ct2_dir + "_int8"``). builtin_limit: the builtin files on the first N inputs
            only (0: all). keep: differences kept per artefact.

    Returns:
        dict: ``inputs``, ``inputs_several_sentences`` (inputs that hold more than one
        sentence, ``keras_attn.text.documents.split``), and ``artefacts``: per name either
        :func:`compare`'s dict or ``{"skipped": reason}``.
    """
    from keras_attn.export.option_sets import PASSTHROUGH_SIGNATURE
    from keras_attn.text import documents
    from keras_attn.translator import Translator

    export_dir = export_dir or os.path.join(run_dir, "export")
    ct2_dir = ct2_dir or os.path.join(export_dir, "ctranslate2")
    translator = Translator.from_run_dir(run_dir)
    t0 = time.time()
    # The decoding is compared: spans are passed through nowhere but in serving_default of
    # an export that passes them through, one with translate_v3 (called with them off).
    def translations(passthrough):
        return batched(lambda b: translator.translate(b, batch_size=batch_size,
                                                      passthrough=passthrough),
                       texts, batch_size)

    reference = translations(False)
    report = {"run_dir": run_dir, "export_dir": export_dir, "inputs": len(texts),
              "inputs_several_sentences": sum(len(documents.split(t).sentences) > 1
                                              for t in texts),
              "translator_seconds": round(time.time() - t0, 2), "artefacts": {}}
    loaders = dict(artefacts(translator, export_dir, ct2_dir))
    passes_through = callable(loaders[f"saved_model/{PASSTHROUGH_SIGNATURE}"])
    for name, loader in loaders.items():
        if isinstance(loader, str):
            report["artefacts"][name] = {"skipped": loader}
            log(f"{name}: skipped ({loader})")
            continue
        n = min(builtin_limit, len(texts)) if builtin_limit and "builtin" in name else len(texts)
        t0 = time.time()
        got = batched(loader(), texts[:n], batch_size)
        want = (translations(True) if name == "saved_model/serving_default" and passes_through
                else reference)
        entry = compare(texts, want, got, time.time() - t0, keep, ("translator", name))
        report["artefacts"][name] = entry
        log(f"{name}: {entry['identical']}/{n} identical ({entry['identical_fraction']:.2%})")
    return report


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir")
    parser.add_argument("--data", required=True, help="a Tatoeba file (English TAB French)")
    parser.add_argument("--limit", type=int, default=0, help="first N distinct inputs only")
    parser.add_argument("--builtin-limit", type=int, default=0,
                        help="the builtin files on the first N inputs only (slow)")
    parser.add_argument("--export-dir", default="", help="default: RUN_DIR/export")
    parser.add_argument("--ct2-dir", default="",
                        help="the float32 CTranslate2 model (int8: this name + _int8); "
                             "default: EXPORT_DIR/ctranslate2")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--json", default="", help="write the report here (default: a new "
                                                   "folder under research/results/)")
    args = parser.parse_args(argv)
    for flag, least in (("limit", 0), ("builtin_limit", 0), ("batch_size", 1)):
        if getattr(args, flag) < least:
            parser.error(f"--{flag.replace('_', '-')} must be >= {least}")

    texts = read_sources(args.data)[: args.limit or None]
    report = measure(args.run_dir, texts, args.export_dir or None, args.ct2_dir or None,
                     args.builtin_limit, args.batch_size)
    report.update(data=args.data, machine=platform.processor() or platform.machine())
    path = args.json or os.path.join(fresh_dir("artefact_agreement"),
                                     "artefact_agreement.json")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    print(f"inputs: {report['inputs']} ({report['inputs_several_sentences']} of more than one "
          f"sentence); report: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
