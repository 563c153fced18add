"""The TFLite files on texts of several sentences: no text lost in silence.

The TFLite text file runs no regex op, so it cannot split a text into sentences as the
SavedModel's graph does (docs/documents.md). Its signatures take sentences and flag every
string they cannot vouch is one (``needs_split``); split before the file and joined after,
as exported/README.md shows, the answer is the SavedModel's ``serving_default`` answer. The
reference is the SavedModel of the same export, on texts of several sentences.
"""
import ast
import functools
import os
import re

import numpy as np
import pytest
import tensorflow as tf

from keras_attn.text import documents
from keras_attn.decoding.options import DecodingOptions
from keras_attn.export import runtime
from keras_attn.export.option_sets import LATEST_OPTIONS_SIGNATURE

from tests.support import ROOT
README = os.path.join(ROOT, "exported", "README.md")
DATE_TEXTS = ["3 March 2021. 4 July 1999", "13 Jul 1914\n\n  Wed, 3 Mar 2021",
              "2038-04-01!  5 nov. 2008\n", "", "   ", "3 March 2021"]
ENGLISH_TEXTS = ["I'm hungry. It's raining.", "Hello! How are you?\n\nThank you!",
                 "  Tom isn't here.  We are in Paris.", "Call me tomorrow.", "", "Go ahead!"]


@functools.lru_cache(maxsize=None)
def saved_model(export_dir):
    import tensorflow_text  # noqa: F401 (a SentencePiece SavedModel's ops)

    return tf.saved_model.load(os.path.join(export_dir, "saved_model", "translator", "1"))


def saved_model_translation(export_dir, texts):
    out = saved_model(export_dir).signatures["serving_default"](
        text=tf.constant(texts, tf.string))
    return [t.decode("utf-8") for t in out["translation"].numpy()]


def readme_block():
    """exported/README.md's example of the on-device call for texts of several sentences."""
    with open(README, encoding="utf-8") as f:
        blocks = re.findall(r"```python\n(.*?)```", f.read(), re.S)
    (block,) = [b for b in blocks if '"translate_sentences"' in b]
    return block


def run_readme_block(path, texts):
    """The README's block, as written, on the file ``path`` and ``texts``."""
    source = readme_block()
    assert "exported/tflite/text_float32.tflite" in source and "texts = [" in source
    source = source.replace('"exported/tflite/text_float32.tflite"', repr(path))
    source = re.sub(r"^texts = \[.*$", lambda _: f"texts = {texts!r}", source, flags=re.M)
    namespace = {}
    exec(compile(source, README, "exec"), namespace)  # noqa: S102 (our own README)
    return namespace["translations"]


def check_text_file(export_dir, texts):
    path = os.path.join(export_dir, "tflite", "text_float32.tflite")
    want = saved_model_translation(export_dir, texts)
    assert any(len(documents.split(t).sentences) > 1 for t in texts)
    # The documented call: split, the sentence signature, join.
    assert run_readme_block(path, texts) == want
    assert [t.decode("utf-8") for t in runtime.run_tflite_text(path, texts)["translation"]] \
        == want
    # Called on the texts as they stand, the file flags each one that is not a bare sentence
    # (the SavedModel's answer may then hold more), and equals the SavedModel where it does
    # not flag.
    interpreter = runtime.text_interpreter(model_path=path)
    direct = interpreter.get_signature_runner("serving_default")(text=runtime.text_array(texts))
    flags = direct["needs_split"].tolist()
    assert flags == [not (len(s.sentences) == 1 and s.separators == ["", ""])
                     for s in map(documents.split, texts)]
    got = [t.decode("utf-8") for t in direct["translation"]]
    assert [g for g, w, f in zip(got, want, flags) if not f] == \
        [w for w, f in zip(want, flags) if not f]
    # translate_sentences is serving_default under a name that says what it takes.
    sentences = interpreter.get_signature_runner("translate_sentences")
    assert list(sentences.get_input_details()) == ["sentences"]
    same = sentences(sentences=runtime.text_array(texts))
    assert sorted(same) == sorted(direct)
    for key in direct:
        np.testing.assert_array_equal(same[key], direct[key])
    return path


def check_builtin_loop(export_dir, run_dir, texts):
    """The builtin files' reference loop per sentence, joined: the SavedModel's text."""
    from keras_attn.translator import Translator

    translator = Translator.from_run_dir(run_dir)
    sentences, counts, separators = runtime.split_for_tflite(texts)
    sources = [s.decode("utf-8") for s in sentences]
    out = runtime.run_tflite_builtin(os.path.join(export_dir, "tflite", "builtin_float32"),
                                     translator.encode(sources).numpy())
    words = translator.tgt_tokenizer.detokenize(tf.constant(out["tokens"])).numpy()
    assert runtime.join_from_tflite(words, counts, separators) == \
        saved_model_translation(export_dir, texts)


def test_tflite_text_file_gives_the_saved_models_text_for_documents(tiny_dates):
    path = check_text_file(tiny_dates["export_dir"], DATE_TEXTS)
    # The README block's own texts, and as many values in its comment (the comment's are
    # the committed export's; here the fixture's SavedModel is the reference).
    block = readme_block()
    texts = ast.literal_eval(re.search(r"^texts = (\[.*\])$", block, re.M).group(1))
    comment = re.search(r"print\(translations\)\s+# (.*)", block).group(1)
    assert run_readme_block(path, texts) == saved_model_translation(
        tiny_dates["export_dir"], texts)
    assert len(ast.literal_eval(comment)) == len(texts)


@pytest.mark.slow  # the builtin loop in Python, one token per call (~20 s)
def test_builtin_loop_by_sentence_gives_the_saved_models_text(tiny_dates):
    check_builtin_loop(tiny_dates["export_dir"], tiny_dates["run_dir"], DATE_TEXTS)


@pytest.mark.slow  # trains and exports the tiny SentencePiece run (conftest)
def test_sentencepiece_tflite_gives_the_saved_models_text_for_documents(tiny_sentencepiece):
    run_dir = tiny_sentencepiece["run_dir"]
    export_dir = os.path.join(run_dir, "export")
    path = check_text_file(export_dir, ENGLISH_TEXTS)
    # (The builtin files' loop is checked on the dates run.) The newest options signature,
    # which takes every option, flags alike, and split/joined (run_tflite_options) gives
    # the SavedModel's answer to the same signature.
    options = runtime.option_inputs(DecodingOptions())
    runner = runtime.text_interpreter(model_path=path).get_signature_runner(
        LATEST_OPTIONS_SIGNATURE)
    flags = runner(text=runtime.text_array(ENGLISH_TEXTS), **options)["needs_split"]
    assert flags.tolist() == [True, True, True, False, True, False]
    want = saved_model(export_dir).signatures[LATEST_OPTIONS_SIGNATURE](
        text=tf.constant(ENGLISH_TEXTS),
        **{k: tf.constant(v) for k, v in options.items()})["translations"].numpy()
    got = runtime.run_tflite_options(path, ENGLISH_TEXTS)["translations"]
    assert got.tolist() == want.tolist()
