"""The web page of ``keras-attn serve`` in a real browser: headless Chromium driven by
Selenium over the committed dates model (``exported/``), against ``Translator`` of
``exported/run``.

Marked ``browser``, and run only when chosen: ``pytest -m browser tests/serve/test_browser.py``
(CI's browser pass, which installs Debian's ``chromium`` and ``chromium-driver`` first).
Other runs (the README's ``-m "not slow"``) skip them, as does a machine without Selenium,
``chromium`` or ``chromedriver`` (the reason says which is missing);
``KERAS_ATTN_REQUIRE_BROWSER=1`` turns that skip into a failure, so that a pass that
installed them cannot go green without running them.

``KERAS_ATTN_SCREENSHOTS=docs/figures`` also saves the page at desktop (1280x800) and phone
(390x844) widths, light and dark, and its inspection view, into that folder
(``serve_page_*.png``): how docs/serving.md's screenshots are made.
"""
import contextlib
import dataclasses
import os
import shutil

import httpx
import numpy as np
import pytest

from tests.support import guards
from tests.support.servers import running, serve_process

pytestmark = pytest.mark.browser

from tests.support import ROOT
EXPORTED = os.path.join(ROOT, "exported")
REQUIRED = os.environ.get("KERAS_ATTN_REQUIRE_BROWSER", "") == "1"
SENTENCE = "3 March 2021"
PARAGRAPH = "3 March 2021. 4 May 1999.\n5 June 2001"
KEY = "page-test-key"


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
                 "--window-size=1280,900", "--force-device-scale-factor=1"):
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
@contextlib.contextmanager
def serving(log_dir, *flags):
    """``keras-attn serve exported FLAGS`` in a process of its own, as a user starts it."""
    log_path = log_dir / "serve.log"
    with serve_process([EXPORTED, "--replicas", "1", "--threads", "1", *flags], log_path,
                       seconds=40) as (url, _):
        yield url
    assert "Traceback" not in log_path.read_text(), log_path.read_text()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with serving(tmp_path_factory.mktemp("serve")) as url:
        yield url


@pytest.fixture(scope="module")
def translator():
    from keras_attn.translator import Translator

    return Translator.from_run_dir(os.path.join(EXPORTED, "run"))


# --- the page --------------------------------------------------------------------------------
def open_page(driver, url):
    """Load the page; wait until it has read /languages and /frontend/settings."""
    driver.get(url + "/")
    wait_for(driver, lambda d: "Model:" in d.find_element("id", "about").text,
             "the page to read its settings")


def translations_asked(driver):
    """How many POST /translate the page has sent since it was loaded."""
    return driver.execute_script(
        "return performance.getEntriesByType('resource')"
        ".filter(e => new URL(e.name).pathname.endsWith('/translate')).length")


def set_text(driver, text):
    """The source pane's text, as one paste (one input event)."""
    driver.execute_script(
        "const t = document.getElementById('text'); t.value = arguments[0];"
        "t.dispatchEvent(new Event('input'));", text)


def shown_translation(driver, expected, what="the translation"):
    wait_for(driver, lambda d: d.find_element("id", "translation").text == expected,
             f"{what} {expected!r} (shown: {driver.find_element('id', 'translation').text!r})")


def inspect_on_page(driver, url, text):
    """Open the page and its inspection view, paste ``text``; wait for the n-best list."""
    from selenium.webdriver.common.by import By

    open_page(driver, url)
    driver.find_element(By.ID, "inspect-toggle").click()
    set_text(driver, text)
    wait_for(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#output tr.hypothesis"),
             "the n-best list")


def page_option(driver, name):
    return int(driver.find_element("id", name).get_attribute("value"))


def active_id(driver):
    return driver.execute_script("return document.activeElement && document.activeElement.id")


def tab_to(driver, found, what, presses=40):
    """Press Tab until ``found(active element)``; that element."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    for _ in range(presses):
        ActionChains(driver).send_keys(Keys.TAB).perform()
        element = driver.switch_to.active_element
        if found(element):
            return element
    raise AssertionError(f"Tab never reached {what}")


# --- plain translation -------------------------------------------------------------------------
def test_typing_translates_after_a_pause_as_plain_text(driver, server, translator):
    """Typed key by key, the text is translated once the typing stops (not once a key); the
    first translation is plain text: no n-best list, no scores."""
    from selenium.webdriver.common.by import By

    open_page(driver, server)
    assert driver.find_element(By.ID, "inspect-panel").is_displayed() is False
    driver.find_element(By.ID, "text").send_keys(SENTENCE)
    shown_translation(driver, translator.translate([SENTENCE])[0])
    # A request a key would be len(SENTENCE) of them; debounced, one (two if the typing
    # paused for the page's delay on a loaded machine).
    assert 1 <= translations_asked(driver) <= 3 < len(SENTENCE)
    assert driver.find_elements(By.CSS_SELECTOR, "#output tr.hypothesis") == []
    assert driver.find_element(By.ID, "counter").text == f"{len(SENTENCE)} characters"
    assert driver.find_element(By.ID, "translation").get_attribute("aria-live") == "polite"
    assert driver.find_element(By.ID, "translation").get_attribute("aria-busy") == "false"
    assert driver.find_element(By.ID, "error").text == ""


def test_a_paragraph_is_one_request_and_the_server_splits_it(driver, server, translator):
    """Several sentences on several lines: one /translate with the whole text, answered as
    the Translator translates the whole text (each sentence on its own, lines kept); the
    translation pane is busy while it waits."""
    open_page(driver, server)
    before = translations_asked(driver)
    driver.execute_script(  # the loading state: the translation pane's aria-busy over time
        "window.ariaBusySeen = []; new MutationObserver(() => window.ariaBusySeen.push(document"
        ".getElementById('translation').getAttribute('aria-busy')))"
        ".observe(document.getElementById('translation'), {attributes: true,"
        " attributeFilter: ['aria-busy']});")
    set_text(driver, PARAGRAPH)
    expected = translator.translate([PARAGRAPH])[0]
    lines = expected.split("\n")
    assert len(lines) == 2 and lines[1] == translator.translate(["5 June 2001"])[0]
    shown_translation(driver, expected)
    assert translations_asked(driver) - before == 1
    wait_for(driver, lambda d: d.execute_script("return window.ariaBusySeen") == ["true", "false"],
             "the pane busy while translating, then not")


def test_a_file_round_trip(driver, server, translator, tmp_path):
    """The file tab: a .txt uploaded to /translate_file; the download link holds each line's
    translation."""
    from selenium.webdriver.common.by import By

    source = ["3 March 2021", "", "14 July 1789"]
    path = tmp_path / "dates.txt"
    path.write_text("\n".join(source) + "\n", encoding="utf-8")
    open_page(driver, server)
    driver.find_element(By.ID, "tab-files").click()
    assert driver.find_element(By.ID, "files-panel").is_displayed()
    assert not driver.find_element(By.ID, "text-panel").is_displayed()
    driver.find_element(By.ID, "file").send_keys(str(path))
    driver.find_element(By.ID, "translate-file").click()
    link = wait_for(driver, lambda d: [e for e in d.find_elements(By.ID, "download")
                                       if e.is_displayed()], "the download link")[0]
    assert link.get_attribute("download") == "dates.txt"
    response = httpx.get(link.get_attribute("href"), timeout=guards.timeout(30))
    assert response.status_code == 200
    translated = translator.translate([source[0], source[2]])
    assert response.text == "\n".join([translated[0], "", translated[1]]) + "\n"


def test_the_glossary_box_sends_its_terms(driver, server, translator, tmp_path):
    """The glossary box (one pair a line) goes with every text and file request; the page
    says which terms were applied, and a line it cannot read."""
    from selenium.webdriver.common.by import By

    open_page(driver, server)
    driver.find_element(By.CSS_SELECTOR, "#glossary-box summary").click()
    driver.execute_script(
        "const g = document.getElementById('glossary'); g.value = arguments[0];"
        "g.dispatchEvent(new Event('input'));", "# terms\nMarch = MARS\nJuly\tJUL")
    set_text(driver, SENTENCE)
    terms = {"March": "MARS", "July": "JUL"}
    shown_translation(driver, translator.translate([SENTENCE], glossary=terms)[0])
    wait_for(driver, lambda d: d.find_element(By.ID, "glossary-note").text
             == "Applied: March → MARS", "the applied terms")
    assert driver.find_element(By.ID, "glossary-count").text == "(2 terms)"
    path = tmp_path / "dates.txt"
    path.write_text("14 July 1789\n", encoding="utf-8")
    driver.find_element(By.ID, "tab-files").click()
    driver.find_element(By.ID, "file").send_keys(str(path))
    driver.find_element(By.ID, "translate-file").click()
    link = wait_for(driver, lambda d: [e for e in d.find_elements(By.ID, "download")
                                       if e.is_displayed()], "the download link")[0]
    response = httpx.get(link.get_attribute("href"), timeout=guards.timeout(30))
    assert response.text == translator.translate(["14 July 1789"], glossary=terms)[0] + "\n"
    driver.find_element(By.ID, "tab-text").click()
    driver.execute_script(
        "const g = document.getElementById('glossary'); g.value = 'no pair here';"
        "g.dispatchEvent(new Event('input'));")
    wait_for(driver, lambda d: "source = target" in d.find_element(By.ID, "error").text,
             "the glossary's error")
    driver.execute_script("localStorage.removeItem('keras-attn.glossary')")


def test_an_api_key_and_the_character_limit(driver, tmp_path):
    """A server that needs a key (--api-keys --req-limit 0): without one the page shows the
    server's error; with the key typed in the field (kept across a reload) the translation.
    The counter counts against --char-limit, and a text over it is not sent."""
    from selenium.webdriver.common.by import By

    from keras_attn.serve.store import KeyStore

    db = str(tmp_path / "keys.db")
    KeyStore(db).add(-1, KEY)
    with serving(tmp_path, "--api-keys", "--api-keys-db-path", db, "--req-limit", "0",
                 "--char-limit", "20") as url:
        open_page(driver, url)
        driver.execute_script("localStorage.removeItem('keras-attn.api_key')")
        open_page(driver, url)
        set_text(driver, SENTENCE)
        wait_for(driver, lambda d: "API key" in d.find_element(By.ID, "error").text,
                 "the error of a request without a key")
        assert driver.find_element(By.ID, "translation").text == ""
        assert driver.find_element(By.ID, "counter").text == f"{len(SENTENCE)} / 20"
        driver.find_element(By.ID, "api_key").send_keys(KEY)
        expected = httpx.post(url + "/translate", json={
            "q": SENTENCE, "source": "dates", "target": "iso", "api_key": KEY},
            timeout=guards.timeout(30)).json()["translatedText"]
        shown_translation(driver, expected, "the translation with the key")
        assert driver.find_element(By.ID, "error").text == ""
        # The key stays in localStorage: a reload translates with it.
        open_page(driver, url)
        assert driver.find_element(By.ID, "api_key").get_attribute("value") == KEY
        set_text(driver, SENTENCE)
        shown_translation(driver, expected, "the translation after a reload")
        # Over the limit: the counter says so and no request goes out.
        before = translations_asked(driver)
        set_text(driver, SENTENCE + " and more words")
        wait_for(driver, lambda d: "limit of 20" in d.find_element(By.ID, "error").text,
                 "the character-limit error")
        assert "over" in driver.find_element(By.ID, "counter").get_attribute("class").split()
        assert translations_asked(driver) == before


def test_keyboard_only(driver, server, translator):
    """Tab and Enter alone: type, translate, copy, open the inspection view, and focus a
    word to light the words aligned with it. Each focused control shows a focus ring."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    open_page(driver, server)
    driver.execute_script("document.activeElement.blur(); window.focus()")
    enter = lambda: ActionChains(driver).send_keys(Keys.ENTER).perform()  # noqa: E731

    def by_id(name):
        return lambda element: element.get_attribute("id") == name

    tab_to(driver, by_id("text"), "the source pane")
    ActionChains(driver).send_keys(SENTENCE).perform()
    go = tab_to(driver, by_id("go"), "Translate")
    assert go.value_of_css_property("outline-style") != "none"
    enter()
    shown_translation(driver, translator.translate([SENTENCE])[0])
    tab_to(driver, by_id("copy"), "Copy")
    enter()
    wait_for(driver, lambda d: "Copied" in d.find_element(By.ID, "status").text, "Copied")
    toggle = tab_to(driver, by_id("inspect-toggle"), "the inspection toggle")
    enter()
    assert toggle.get_attribute("aria-pressed") == "true"
    wait_for(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#output tr.hypothesis"),
             "the n-best list")
    expected = translator.translate_nbest([SENTENCE], beam_size=page_option(driver, "beam_size"),
                                          num_hypotheses=page_option(driver, "num_hypotheses"),
                                          return_alignments=True)[0][0]
    word = 1  # "March"
    aligned = sorted({j for i, j in (map(int, p.split("-"))
                                     for p in expected["alignment"].split()) if i == word})
    first = driver.find_elements(By.CSS_SELECTOR, "#output tr.hypothesis")[0]
    span = first.find_elements(By.CSS_SELECTOR, "span[data-side=source]")[word]
    tab_to(driver, lambda e: e == span, "the word 'March'")
    assert "hl" in span.get_attribute("class").split()
    lit = [int(s.get_attribute("data-index"))
           for s in first.find_elements(By.CSS_SELECTOR, "span[data-side=target].hl")]
    assert lit == aligned


# --- many models: the pickers and the swap button ---------------------------------------------
def test_the_language_pickers_and_the_swap_button(driver):
    """A server of en->fr and fr->en (the tiny dates run relabelled,
    tests/serve/test_serve_models.py): the pickers list /languages, a pair is translated by its
    model, and swap turns the pair around with the translation as the new text."""
    from selenium.webdriver.support.ui import Select

    from keras_attn.serve.app import Settings, create_app
    from tests.serve.test_serve_models import models_of

    tiny = tiny_translator()
    models, engines = models_of(tiny, ("en", "fr"), ("fr", "en"))
    with running(create_app(models, settings=Settings(timeout=guards.timeout(30)))) as url:
        open_page(driver, url)
        source, target = (Select(driver.find_element("id", i))
                          for i in ("source-lang", "target-lang"))
        assert [o.get_attribute("value") for o in source.options] == ["auto", "en", "fr"]
        source.select_by_value("en")
        assert [o.get_attribute("value") for o in target.options] == ["fr"]
        set_text(driver, SENTENCE)
        expected = tiny.translate([SENTENCE])[0]
        shown_translation(driver, expected)
        assert engines[("en", "fr")].calls and not engines[("fr", "en")].calls
        swap = driver.find_element("id", "swap")
        wait_for(driver, lambda d: swap.is_enabled(), "the swap button")
        swap.click()
        assert source.first_selected_option.get_attribute("value") == "fr"
        assert target.first_selected_option.get_attribute("value") == "en"
        assert driver.find_element("id", "text").get_attribute("value") == expected
        shown_translation(driver, tiny.translate([expected])[0], "the swapped translation")
        assert engines[("fr", "en")].calls
        assert "French → English" in driver.find_element("id", "about").text


def tiny_translator():
    """The tiny dates run's ``Translator`` (one per process)."""
    from tests.support import run_fixtures
    from keras_attn.translator import Translator

    if not _TINY:
        _TINY.append(Translator.from_run_dir(run_fixtures.TINY_DATES_RUN))
    return _TINY[0]


_TINY = []


# --- the inspection view -----------------------------------------------------------------------
def test_the_inspection_view_scores_aligns_and_draws_the_heatmap(driver, server, translator):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    inspect_on_page(driver, server, SENTENCE)
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
    # A confidence bar only where the answer carries one.
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


def test_a_long_heatmap_scrolls_inside_its_box_on_a_phone(driver, server):
    """At a phone's width the heatmap of a long sentence scrolls in its own box; the page
    itself does not scroll sideways."""
    long = "Wednesday, 3 March 2021, in the afternoon"
    try:
        emulate(driver, 390, 844, mobile=True)
        inspect_on_page(driver, server, long)
        section = wait_for(driver, lambda d: [e for e in d.find_elements("id", "heatmap-0")
                                              if e.is_displayed()], "the heatmap")[0]
        inner, outer = driver.execute_script(
            "const s = arguments[0]; return [s.scrollWidth, s.clientWidth]", section)
        assert inner > outer, "the heatmap fits: the sentence is too short to test scrolling"
        page, view = driver.execute_script("const e = document.documentElement;"
                                           "return [e.scrollWidth, e.clientWidth]")
        assert page <= view
    finally:
        driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


class Confident:
    """The engine, its hypotheses given a made-up ``confidence`` (1, 1/2, 1/3, ...): what
    an artefact with ``confidences`` answers."""

    def __init__(self, engine):
        self.engine = engine

    def translate(self, texts, options, confidence=True):
        results = self.engine.translate(texts, options, confidence)
        for hyps in results:
            for h, hyp in enumerate(hyps):
                hyp["confidence"] = 1.0 / (h + 1)
        return results


def test_confidence_shading_and_no_heatmap_without_a_keras_model(driver):
    """An answer with confidences: a bar per hypothesis, its value in the tooltip. An
    artefact whose run is unknown: no Keras model, so the heatmap section stays hidden."""
    from selenium.webdriver.common.by import By

    from keras_attn.decoding.options import DecodingOptions
    from keras_attn.serve.app import create_app
    from keras_attn.serve.engines import load_engine
    from keras_attn.serve.locate import locate
    from keras_attn.serve.replicas import InProcessReplicas

    artefact = dataclasses.replace(locate(EXPORTED), run_dir=None)
    # xla=False: the page is tested; the compiled signature would compile at first use.
    engine = load_engine(artefact, threads=1, xla=False)
    # The signature's first call optimises its graph (10-30 s on 2 busy cores): done here,
    # as keras-attn serve does before it listens, not inside the page's 30 s.
    engine.translate(["1"], DecodingOptions())
    app = create_app(artefact, InProcessReplicas(Confident(engine)))
    with running(app) as url:
        inspect_on_page(driver, url, SENTENCE)
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


def test_sampling_options_follow_what_the_engine_can_do(driver):
    """Temperature and seed are offered only with sampling (top-k > 1) on an engine that
    samples; an engine that cannot (/frontend/settings' ``sampling``, ``alignments``: the
    CTranslate2 engine's) gets none of the three, nor alignments."""
    from selenium.webdriver.common.by import By

    from keras_attn.serve.app import create_app
    from keras_attn.serve.engines import load_engine
    from keras_attn.serve.locate import locate
    from keras_attn.serve.replicas import InProcessReplicas

    artefact = locate(EXPORTED)
    engine = load_engine(artefact, threads=1, xla=False)  # as above
    enabled = lambda name: driver.find_element(By.ID, name).is_enabled()  # noqa: E731
    with running(create_app(artefact, InProcessReplicas(engine))) as url:
        open_page(driver, url)
        driver.find_element(By.ID, "inspect-toggle").click()
        assert enabled("sampling_topk") and enabled("alignments")
        assert not enabled("sampling_temperature") and not enabled("seed")
        topk = driver.find_element(By.ID, "sampling_topk")
        topk.clear()
        topk.send_keys("5")
        assert enabled("sampling_temperature") and enabled("seed")
    as_ctranslate2 = dataclasses.replace(artefact, engine="ctranslate2", run_dir=None)
    with running(create_app(as_ctranslate2, InProcessReplicas(engine))) as url:
        settings = httpx.get(url + "/frontend/settings").json()
        assert settings["sampling"] is False and settings["alignments"] is False
        open_page(driver, url)
        driver.find_element(By.ID, "inspect-toggle").click()
        for name in ("sampling_topk", "sampling_temperature", "seed", "alignments"):
            assert not enabled(name), name
        assert "ctranslate2" in driver.find_element(By.ID, "sampling-note").text


# --- screenshots -------------------------------------------------------------------------------
def emulate(driver, width, height, mobile=False, dark=False):
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
        "width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile})
    driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": [
        {"name": "prefers-color-scheme", "value": "dark" if dark else "light"}]})


@pytest.mark.skipif(not os.environ.get("KERAS_ATTN_SCREENSHOTS"),
                    reason="KERAS_ATTN_SCREENSHOTS=FOLDER saves the page's screenshots")
def test_screenshots(driver, server):
    """The page at desktop and phone widths, light and dark, and its inspection view."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    folder = os.environ["KERAS_ATTN_SCREENSHOTS"]
    os.makedirs(folder, exist_ok=True)
    text = "3 March 2021. 14 July 1789.\nFriday, 5 June 2001"
    try:
        for name, width, height, mobile in (("desktop", 1280, 800, False),
                                            ("phone", 390, 844, True)):
            for dark in (False, True):
                emulate(driver, width, height, mobile, dark)
                open_page(driver, server)
                driver.execute_script("localStorage.clear()")
                set_text(driver, text)
                wait_for(driver, lambda d: d.find_element("id", "translation").text,
                         "the translation")
                path = os.path.join(folder, f"serve_page_{name}{'_dark' if dark else ''}.png")
                assert driver.save_screenshot(path), path
        emulate(driver, 1280, 1000)
        inspect_on_page(driver, server, SENTENCE)
        wait_for(driver, lambda d: [e for e in d.find_elements("id", "heatmap-0")
                                    if e.is_displayed()], "the heatmap")
        span = driver.find_elements(By.CSS_SELECTOR, "#output span[data-side=source]")[1]
        height = driver.execute_script("return document.documentElement.scrollHeight")
        emulate(driver, 1280, height)
        ActionChains(driver).move_to_element(span).perform()
        assert driver.save_screenshot(os.path.join(folder, "serve_page_inspect.png"))
    finally:
        driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
        driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})
