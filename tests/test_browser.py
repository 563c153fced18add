"""The web page of ``keras-attn serve`` in a real browser: headless Chromium driven by
Selenium over the committed dates model (``exported/``), against ``Translator`` of
``exported/run``.

Marked ``browser``, and run only when chosen: ``pytest -m browser tests/test_browser.py``
(CI's browser pass, which installs Debian's ``chromium`` and ``chromium-driver`` first).
Other runs (the README's ``-m "not slow"``) skip them, as does a machine without Selenium,
``chromium`` or ``chromedriver`` (the reason says which is missing);
``KERAS_ATTN_REQUIRE_BROWSER=1`` turns that skip into a failure, so that a pass that
installed them cannot go green without running them.

``KERAS_ATTN_SCREENSHOT=docs/serve_page.png`` also saves the page, as the first test
leaves it (a translation, a word hovered, the heatmap), to that file: how the README's
screenshot is made.
"""
import dataclasses
import os
import shutil
import subprocess
import sys
import time

import httpx
import numpy as np
import pytest

import guards
from servers import free_port, running

pytestmark = pytest.mark.browser

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXPORTED = os.path.join(ROOT, "exported")
REQUIRED = os.environ.get("KERAS_ATTN_REQUIRE_BROWSER", "") == "1"
SENTENCE = "3 March 2021"


# --- the browser -----------------------------------------------------------------------------
def _chosen(config):
    """``-m`` names the browser marker (and does not leave it out)."""
    expression = config.option.markexpr or ""
    return "browser" in expression and "not browser" not in expression


def _missing():
    """Why the browser cannot start here (None: it can)."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[test]')"
    for name, variable in (("chromium", "KERAS_ATTN_CHROMIUM"),
                           ("chromedriver", "KERAS_ATTN_CHROMEDRIVER")):
        if not (os.environ.get(variable) or shutil.which(name)):
            return (f"no {name} on PATH (apt-get install chromium chromium-driver, or set "
                    f"{variable})")
    return None


@pytest.fixture(scope="module")
def driver(request):
    """Headless Chromium through chromedriver (both found on PATH: no download)."""
    if not (REQUIRED or _chosen(request.config)):
        pytest.skip("browser tests run when chosen: pytest -m browser (CI's browser pass)")
    reason = _missing()
    if reason is not None:
        if REQUIRED:
            pytest.fail(f"KERAS_ATTN_REQUIRE_BROWSER=1 but {reason}")
        pytest.skip(reason)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = os.environ.get("KERAS_ATTN_CHROMIUM") or shutil.which("chromium")
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                 "--window-size=1100,1000", "--force-device-scale-factor=1"):
        options.add_argument(flag)
    service = Service(os.environ.get("KERAS_ATTN_CHROMEDRIVER") or shutil.which("chromedriver"))
    browser = webdriver.Chrome(options=options, service=service)
    browser.set_script_timeout(guards.timeout(30))
    try:
        yield browser
    finally:
        browser.quit()


def wait_for(driver, condition, what, seconds=30):
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        return WebDriverWait(driver, guards.timeout(seconds), poll_frequency=0.05).until(
            lambda d: condition(d))
    except Exception as e:  # TimeoutException: say what, and what the page says
        error = driver.find_element("id", "error").text
        raise AssertionError(f"gave up waiting for {what} (page error: {error!r})") from e


# --- the servers -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """``keras-attn serve exported`` in a process of its own, as a user starts it."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log_path = tmp_path_factory.mktemp("serve") / "serve.log"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [ROOT] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "keras_attn.cli", "serve", EXPORTED,
                                 "--port", str(port), "--replicas", "1", "--threads", "1"],
                                cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + guards.timeout(20)
        while True:
            assert proc.poll() is None, log_path.read_text()
            try:
                if httpx.get(url + "/health", timeout=5).json()["status"] == "ok":
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "the server did not answer /health"
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(guards.timeout(10))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert "Traceback" not in log_path.read_text(), log_path.read_text()


@pytest.fixture(scope="module")
def translator():
    from keras_attn.translator import Translator

    return Translator.from_run_dir(os.path.join(EXPORTED, "run"))


# --- the page --------------------------------------------------------------------------------
def translate_on_page(driver, url, text):
    """Open the page, type ``text``, press Translate; wait for the n-best list."""
    from selenium.webdriver.common.by import By

    driver.get(url + "/")
    wait_for(driver, lambda d: "Model:" in d.find_element(By.ID, "about").text,
             "the page to read /languages and /health")
    box = driver.find_element(By.ID, "text")
    box.clear()
    box.send_keys(text)
    driver.find_element(By.ID, "go").click()
    wait_for(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#output tr.hypothesis"),
             "the translation")


def page_option(driver, name):
    return int(driver.find_element("id", name).get_attribute("value"))


def test_the_page_translates_aligns_and_draws_the_heatmap(driver, server, translator):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    translate_on_page(driver, server, SENTENCE)
    beam, n = page_option(driver, "beam_size"), page_option(driver, "num_hypotheses")
    expected = translator.translate_nbest([SENTENCE], beam_size=beam, num_hypotheses=n,
                                          return_alignments=True)[0]
    # The translation and the n-best list with scores are the Translator's.
    assert driver.find_element(By.ID, "translation-0").text == expected[0]["translation"]
    rows = driver.find_elements(By.CSS_SELECTOR, "#output tr.hypothesis")
    assert len(rows) == n
    for row, hyp in zip(rows, expected):
        cells = row.find_elements(By.TAG_NAME, "td")
        assert float(cells[1].text) == pytest.approx(hyp["score"], abs=1e-3)
        targets = row.find_elements(By.CSS_SELECTOR, "span[data-side=target]")
        assert " ".join(s.text for s in targets) == hyp["translation"]
    # A confidence bar only where the answer carries one (the committed export has none).
    answer = httpx.post(server + "/translate", json={
        "q": SENTENCE, "source": "dates", "target": "iso", "beam_size": beam,
        "num_hypotheses": n, "return_scores": True}, timeout=guards.timeout(30)).json()
    has_confidence = "confidence" in answer["hypotheses"][0]
    assert bool(driver.find_elements(By.CSS_SELECTOR, "td.confidence")) == has_confidence

    # The heatmap: a row per target token, a column per source token, rows of weights
    # summing to 1, as many as the Keras model's tokens of the sentence and translation.
    section = wait_for(driver, lambda d: [e for e in d.find_elements(By.ID, "heatmap-0")
                                          if e.is_displayed()], "the heatmap")[0]
    source_ids = translator.encode([SENTENCE]).numpy()[0]
    target_ids = translator.encode_targets([expected[0]["translation"]])[0].numpy()[0]
    heat_rows = section.find_elements(By.CSS_SELECTOR, "table tr")[1:]
    assert len(heat_rows) == len(target_ids)
    weights = np.array([[float(td.get_attribute("data-weight"))
                         for td in tr.find_elements(By.TAG_NAME, "td")] for tr in heat_rows])
    assert weights.shape == (len(target_ids), len(source_ids))
    assert np.allclose(weights.sum(axis=1), 1.0, atol=1e-3)

    # Hovering a source word of the best hypothesis lights the target words aligned with it
    # (the Translator's alignment) and that word's columns of the heatmap.
    best = rows[0]
    word = 1  # "March"
    pairs = [tuple(map(int, p.split("-"))) for p in expected[0]["alignment"].split()]
    aligned = sorted({j for i, j in pairs if i == word})
    assert aligned, f"the Translator aligns no target word with source word {word}"
    span = best.find_elements(By.CSS_SELECTOR, "span[data-side=source]")[word]
    ActionChains(driver).move_to_element(span).perform()
    wait_for(driver, lambda d: "hl" in span.get_attribute("class").split(), "the highlight")
    lit = [int(s.get_attribute("data-index")) for s in
           best.find_elements(By.CSS_SELECTOR, "span[data-side=target].hl")]
    assert lit == aligned
    assert driver.find_elements(By.CSS_SELECTOR, "#output span.hl[data-side=source]") == [span]
    columns = section.find_elements(By.CSS_SELECTOR, "th.src.hl")
    assert columns and {c.get_attribute("data-word") for c in columns} == {str(word)}
    if os.environ.get("KERAS_ATTN_SCREENSHOT"):
        save_screenshot(driver, os.environ["KERAS_ATTN_SCREENSHOT"])


def save_screenshot(driver, path):
    """The page's whole height, at the window's width, as a PNG."""
    height = driver.execute_script("return document.documentElement.scrollHeight")
    width = driver.get_window_size()["width"]
    driver.set_window_size(width, height + 120)  # the window's frame is not the viewport
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    assert driver.save_screenshot(path), f"could not write {path}"


class Confident:
    """The engine, its hypotheses given a made-up ``confidence`` (1, 1/2, 1/3, ...): what
    an artefact with ``confidences`` answers."""

    def __init__(self, engine):
        self.engine = engine

    def translate(self, texts, options):
        results = self.engine.translate(texts, options)
        for hyps in results:
            for h, hyp in enumerate(hyps):
                hyp["confidence"] = 1.0 / (h + 1)
        return results


def test_confidence_shading_and_no_heatmap_without_a_keras_model(driver):
    """An answer with confidences: a bar per hypothesis, its value in the tooltip. An
    artefact whose run is unknown: no Keras model, so the heatmap section stays hidden."""
    from selenium.webdriver.common.by import By

    from keras_attn.serve.app import create_app
    from keras_attn.serve.engines import load_engine
    from keras_attn.serve.locate import locate
    from keras_attn.serve.replicas import InProcessReplicas

    artefact = dataclasses.replace(locate(EXPORTED), run_dir=None)
    app = create_app(artefact, InProcessReplicas(Confident(load_engine(artefact, threads=1))))
    with running(app) as url:
        translate_on_page(driver, url, SENTENCE)
        rows = driver.find_elements(By.CSS_SELECTOR, "#output tr.hypothesis")
        assert len(rows) == page_option(driver, "num_hypotheses") > 1
        for h, row in enumerate(rows):
            cell = row.find_element(By.CSS_SELECTOR, "td.confidence")
            assert cell.get_attribute("title") == f"confidence {1 / (h + 1):.4f}"
            fill = cell.find_element(By.CSS_SELECTOR, ".bar span")
            width = fill.get_attribute("style").replace(" ", "")  # "width:50%;"
            assert width.startswith("width:") and width.endswith("%;")
            assert float(width[len("width:"):-2]) == pytest.approx(100 / (h + 1), abs=0.1)
        # Shaded by confidence: the first row darker than the last.
        alpha = [float(r.value_of_css_property("background-color").rstrip(")").split(",")[-1])
                 for r in (rows[0], rows[-1])]
        assert alpha[0] > alpha[-1] > 0
        assert not driver.find_element(By.ID, "heatmap-0").is_displayed()
        assert driver.find_element(By.ID, "error").text == ""
