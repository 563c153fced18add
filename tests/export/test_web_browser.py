"""The web export (``keras-attn export RUN --format web``) in headless Chromium: the folder
served by a plain static file server on loopback that is stopped once the page's model is
loaded (``window.kerasAttn.ready``), then translating on its own, as the SavedModel's
``serving_default`` does: the committed dates model (``exported/run`` against the committed
SavedModel) and the committed tiny SentencePiece run (``tests/fixtures/tiny_sentencepiece_run``,
spans passed through, against ``Translator``, which the slow pass holds equal to
``serving_default``: tests/export/test_spans_graph.py); bad input answered with a readable message
while the page keeps working; and ``keras-attn serve``'s page switched to translate in the
browser with a served model's web export.

Marked ``browser`` (CI's browser pass; tests/serve/test_browser.py says when they run and skip).
"""
import json
import os
import shutil

import pytest

from tests.support import guards
from tests.support import run_fixtures
from benchmarks.web import PageError, open_offline, static_server
from tests.serve.test_browser import (driver, open_page, set_text,  # noqa: F401
                                     shown_translation, wait_for)

pytestmark = pytest.mark.browser

from tests.support import ROOT
EXPORTED = os.path.join(ROOT, "exported")
# Sentences of the tiny run's domain with spans of every kind, several sentences, none.
SENTENCE_INPUTS = ["Hello! How are you?", "I'm hungry. It's raining.\n\nCall me tomorrow.",
                   "Visit https://example.com/a?b=1 today.", "Mail tom@example.com at 10:30!",
                   "Run `pip install keras` now \U0001f642.", "I like 3 cats and 12 dogs.",
                   "Where is the station?", "1 2 3", "", "  Tom isn't here.  "]


def serving_default(saved_model_dir, texts):
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (a SentencePiece SavedModel's ops)

    serve = tf.saved_model.load(saved_model_dir).signatures["serving_default"]
    return [t.decode() for t in serve(text=tf.constant(texts))["translation"].numpy()]


@pytest.fixture(scope="module")
def dates_web(tmp_path_factory):
    from keras_attn.export.web import export_web

    folder = str(tmp_path_factory.mktemp("dates") / "web")
    export_web(os.path.join(EXPORTED, "run"), folder, log=lambda *a: None)
    return folder


@pytest.fixture(scope="module")
def tiny_web(tmp_path_factory):
    """The committed tiny SentencePiece run's web folder, exported here."""
    from keras_attn.export.web import export_web

    run_dir = str(tmp_path_factory.mktemp("tiny") / "run")
    shutil.copytree(run_fixtures.TINY_SENTENCEPIECE_RUN, run_dir)
    return export_web(run_dir, log=lambda *a: None)["path"]


@pytest.fixture(scope="module")
def tiny_translator(tiny_web):
    from keras_attn.translator import Translator

    return Translator.from_run_dir(os.path.dirname(os.path.dirname(tiny_web)))


def test_the_dates_folder_translates_offline_as_serving_default(driver, dates_web):  # noqa: F811
    from benchmarks.web import dates_test

    inputs = dates_test(os.path.join(EXPORTED, "run"))[:300]
    want = serving_default(os.path.join(EXPORTED, "saved_model", "translator", "1"), inputs)
    with open_offline(dates_web, driver) as (page, _):
        got = page.translate(inputs)
        # Documents of several sentences and blank ones, split and joined as the graph does.
        several = ["3 March 2021. 4 July 1999", "13 Jul 1914\n\n  Wed, 3 Mar 2021", "", "  "]
        assert page.translate(several) == serving_default(
            os.path.join(EXPORTED, "saved_model", "translator", "1"), several)
    same = sum(a == b for a, b in zip(want, got))
    assert same >= 0.99 * len(inputs), [(i, w, g) for i, w, g in zip(inputs, want, got)
                                         if w != g][:5]


def test_the_sentencepiece_folder_passes_spans_through_as_serving_default(  # noqa: F811
        driver, tiny_web, tiny_translator):
    assert tiny_translator.passthrough
    want = tiny_translator.translate(SENTENCE_INPUTS)
    with open_offline(tiny_web, driver) as (page, _):
        assert page.translate(SENTENCE_INPUTS) == want
        assert "https://example.com/a?b=1" in page.translate([SENTENCE_INPUTS[2]])[0]
        off = page.translate([SENTENCE_INPUTS[2]], {"passthrough": False})[0]
        assert "https://example.com/a?b=1" not in off  # the option reaches the rule
        # The options the loop honours, by DecodingOptions' names.
        short = page.translate(["Thank you thank you thank you."], {"max_length": 3})[0]
        assert len(short.split()) <= 3


@pytest.mark.parametrize("texts, options, message", [
    (["x" * 50_000], {}, "50,000 characters"),
    (["Hello"], {"beam_size": 4}, "beam_size must be 1"),
    (["Hello"], {"source": "de"}, "no source language \"de\""),
    (["Hello"], {"sampling_topk": 5}, "sampling_topk must be 1"),
    (["Hello"], {"bogus": 1}, "unknown option \"bogus\""),
    ("Hello", {}, "array of strings"),
])
def test_bad_input_gets_a_readable_message_and_the_page_goes_on(driver, tiny_web, texts,  # noqa: F811
                                                                  options, message):
    with open_offline(tiny_web, driver) as (page, _):
        with pytest.raises(PageError, match=message.replace("(", r"\(")):
            page.translate(texts, options)
        assert page.translate(["1 2 3"]) == ["1 2 3"]


def test_a_missing_or_corrupt_model_file_is_named_on_the_page(driver, tiny_web, tmp_path):  # noqa: F811
    for damage, expected in (("missing", "HTTP 404"), ("corrupt", "not a model LiteRT.js")):
        folder = str(tmp_path / damage)
        shutil.copytree(tiny_web, folder)
        step = os.path.join(folder, "model", "decoder_step.tflite")
        if damage == "missing":
            os.remove(step)
        else:
            with open(step, "wb") as f:
                f.write(b"not a flatbuffer" * 100)
        with static_server(folder) as served:
            driver.get(served.url + "index.html")
            wait_for(driver, lambda d: "did not load" in d.find_element("id", "status").text,
                     f"the {damage} file's message")
            status = driver.find_element("id", "status").text
            assert "the decoder step" in status and expected in status, status
            # The page stays usable: typing is answered with the reason, not a dead page.
            driver.execute_script("const s = document.getElementById('source');"
                                  "s.value = 'Hello'; s.dispatchEvent(new Event('input'));")
            wait_for(driver, lambda d: expected in d.find_element("id", "status").text,
                     "the reason again after typing")


def test_the_page_translates_as_you_type(driver, tiny_web):  # noqa: F811
    with open_offline(tiny_web, driver) as (page, _):
        want = page.translate(["Where is the station?"])[0]
        driver.execute_script("const s = document.getElementById('source');"
                              "s.value = 'Where is the station?';"
                              "s.dispatchEvent(new Event('input'));")
        wait_for(driver, lambda d: d.find_element("id", "target").get_attribute("value") == want,
                 "the typed text's translation")
        assert "English" in driver.find_element("id", "source-name").text


def test_the_serve_page_switches_to_the_browser(driver, dates_web, tmp_path):  # noqa: F811
    """``keras-attn serve`` over an export with a web folder (the committed dates export,
    its web folder beside it): the page offers the switch, and with it on translates
    without POST /translate."""
    import httpx
    from tests.support.servers import serve_process

    export = str(tmp_path / "exported")
    for name in ("saved_model", "run"):
        shutil.copytree(os.path.join(EXPORTED, name), os.path.join(export, name))
    shutil.copytree(dates_web, os.path.join(export, "web"))
    log = tmp_path / "serve.log"
    with serve_process([export, "--replicas", "1", "--threads", "1"], log,
                       seconds=60) as (url, _):
        settings = httpx.get(url + "/frontend/settings", timeout=guards.timeout(5)).json()
        assert settings["webExports"] == {"dates-iso": "web/dates-iso/"}
        open_page(driver, url)
        assert driver.find_element("id", "where").is_displayed()
        driver.find_element("id", "in-browser").click()
        set_text(driver, "le 4 juillet 1999")
        shown_translation(driver, "1999-07-04", "the browser's translation")
        assert driver.find_element("id", "where-used").text == "Translated in this browser"
        asked = driver.execute_script(
            "return performance.getEntriesByType('resource')"
            ".filter(e => new URL(e.name).pathname.endsWith('/translate')).length")
        assert asked == 0
        driver.find_element("id", "in-browser").click()  # back to the server
        wait_for(driver, lambda d: d.find_element("id", "where-used").text
                 == "Translated on the server", "the server's answer")
    assert "Traceback" not in log.read_text()


def test_the_benchmark_measures_a_folder(driver, dates_web, tmp_path):  # noqa: F811
    """benchmarks/web.py on a few held-out dates: sizes, load times, timings, agreement
    (its own browser; ``driver`` skips it where there is none)."""
    from benchmarks import web

    out = tmp_path / "web.json"
    assert web.main([os.path.join(EXPORTED, "run"), "--data", "dates", "--limit", "6",
                     "--timed", "2", "--export-dir", EXPORTED, "--web-dir", dates_web,
                     "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["inputs"] == 6 and report["timed_inputs"] == 2
    assert report["folder_bytes"]["litert"] > 5e6 and report["folder_bytes"]["model"] > 1e6
    assert set(report["load_seconds"]) == {"saved_model", "tflite_builtin", "chromium"}
    assert set(report["ms_per_text"]) == {"saved_model", "tflite_builtin", "chromium"}
    assert {name: entry["identical"] for name, entry in
            report["agreement_with_saved_model"].items()} == {
        "tflite_builtin": 6, "tflite_text": 6, "chromium": 6}
