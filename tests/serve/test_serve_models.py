"""One server, many models (``keras-attn serve PATH [PATH ...]``, keras_attn.serve.models):
routing by ``source``/``target``, a pivot language between two chained models, ``auto``
among the served sources, ``/detect`` and ``/languages`` of several models and of one, the
errors, the memory logged per model, and LibreTranslate's published client over real HTTP.

The models are the committed tiny dates run (tests/fixtures/tiny_dates_run) relabelled: one
Keras ``Translator`` behind an engine per pair, each engine recording what it was sent, so
that the test sees which model answered (their weights are the same). Paths are resolved
for real (``locate`` on copies of the run with an export folder); only loading is the
test's (the SavedModel engines are tests/serve/test_serve.py's).
"""
import dataclasses
import json
import os
import re
import shutil
import threading

import httpx
import pytest

from tests.support import ROOT, guards
from tests.support.servers import running
from keras_attn.serve import api
from keras_attn.serve.app import Settings, create_app
from keras_attn.serve.locate import Artefact
from keras_attn.serve.models import Models, check_pairs, find_artefacts
from keras_attn.serve.replicas import InProcessReplicas

from tests.support import run_fixtures

DATES = ["3 March 2021", "le 4 juillet 1999", "Wed, 3 Mar 2021"]
FRENCH = "Il fait très beau aujourd'hui, alors nous allons nous promener dans le parc."
ENGLISH = "The weather is lovely today, so we are going for a walk in the park."
GERMAN_NAME = "German"


@pytest.fixture(scope="module")
def translator():
    from keras_attn.translator import Translator

    return Translator.from_run_dir(run_fixtures.TINY_DATES_RUN)


class RecordingEngine:
    """The tiny run's ``Translator`` as an engine (the Python engine: no SavedModel to
    load), recording every batch it is sent."""

    _lock = threading.Lock()  # one Translator behind every engine

    def __init__(self, translator):
        self.translator = translator
        self.calls = []

    def translate(self, texts, options, confidence=True, passthrough=None):
        self.calls.append(list(texts))
        if passthrough is not None:
            options = dataclasses.replace(options, passthrough=passthrough)
        kwargs = {k: v for k, v in dataclasses.asdict(options).items() if v is not None}
        with self._lock:
            return self.translator.translate_nbest(list(texts), confidence=confidence,
                                                   **kwargs)


NAMES = {"en": "English", "fr": "French", "de": GERMAN_NAME}


def artefact(source, target):
    return Artefact("savedmodel", f"/models/{source}-{target}", 32, (source, NAMES[source]),
                    (target, NAMES[target]), None)


def models_of(translator, *pairs):
    """``(Models, {pair: engine})`` of relabelled copies of the tiny run."""
    engines = {pair: RecordingEngine(translator) for pair in pairs}
    return Models([(artefact(*pair), InProcessReplicas(e)) for pair, e in engines.items()]), \
        engines


def serving_models(translator, *pairs):
    """A real server of relabelled copies of the tiny run: yields ``(url, engines, app)``."""
    models, engines = models_of(translator, *pairs)
    app = create_app(models, settings=Settings(timeout=guards.timeout(30)))
    with running(app) as url:
        yield url, engines, app


@pytest.fixture(scope="module")
def two(translator):
    """A real server of en->fr and fr->en."""
    yield from serving_models(translator, ("en", "fr"), ("fr", "en"))


@pytest.fixture(scope="module")
def chain(translator):
    """A real server of en->fr and fr->de (en->de only through fr)."""
    yield from serving_models(translator, ("en", "fr"), ("fr", "de"))


def post(url, route="/translate", **body):
    return httpx.post(url + route, json=body, timeout=guards.timeout(30))


def translate(url, **body):
    response = post(url, **body)
    assert response.status_code == 200, response.text
    return response.json()


def sent(engines, pair):
    """The texts each call of the engine of ``pair`` got since the last look."""
    calls = list(engines[pair].calls)
    engines[pair].calls.clear()
    return calls


# --- routing -----------------------------------------------------------------------------------
def test_each_pair_is_answered_by_its_model(two, translator):
    url, engines, _ = two
    for engine in engines.values():
        engine.calls.clear()
    expected = translator.translate(DATES)
    assert translate(url, q=DATES, source="en", target="fr") == {"translatedText": expected}
    assert sent(engines, ("en", "fr")) == [DATES] and sent(engines, ("fr", "en")) == []
    assert translate(url, q=DATES[0], source="fr", target="en") == {
        "translatedText": expected[0]}
    assert sent(engines, ("fr", "en")) == [DATES[:1]] and sent(engines, ("en", "fr")) == []


def test_a_pair_no_model_reaches_is_400_naming_the_pairs_served(two):
    url, _, _ = two
    for source, target, words in (("en", "en", ["en -> en", "en -> fr, fr -> en"]),
                                  ("de", "fr", ["de is not supported"]),
                                  ("en", "de", ["de is not supported"])):
        response = post(url, q="3 March 2021", source=source, target=target)
        assert response.status_code == 400, response.text
        for word in words:
            assert word in response.json()["error"]


def test_a_pair_without_a_model_goes_through_the_pivot(chain, translator):
    url, engines, _ = chain
    for engine in engines.values():
        engine.calls.clear()
    middle = translator.translate(DATES)
    by_hand = translator.translate(middle)
    assert translate(url, q=DATES, source="en", target="de") == {
        "translatedText": by_hand, "pivot": "fr"}
    assert sent(engines, ("en", "fr")) == [DATES]
    assert sent(engines, ("fr", "de")) == [middle]
    # a direct pair says no pivot
    assert "pivot" not in translate(url, q=DATES[0], source="fr", target="de")


def test_a_file_goes_through_the_pivot_too(chain, translator):
    url, _, _ = chain
    response = httpx.post(url + "/translate_file", data={"source": "en", "target": "de"},
                          files={"file": ("dates.txt", "\n".join(DATES).encode())},
                          timeout=guards.timeout(30))
    assert response.status_code == 200, response.text
    download = httpx.get(response.json()["translatedFileUrl"], timeout=guards.timeout(30))
    assert download.text.splitlines() == translator.translate(translator.translate(DATES))


@pytest.mark.slow  # traces the beam search (~15 s)
def test_through_the_pivot_the_options_are_the_last_models(chain, translator):
    url, _, _ = chain
    middle = translator.translate(DATES[:1])
    body = translate(url, q=DATES[0], source="en", target="de", alternatives=1)
    nbest = translator.translate_nbest(middle[:1], beam_size=2, num_hypotheses=2)[0]
    assert body == {"translatedText": nbest[0]["translation"],
                    "alternatives": [nbest[1]["translation"]], "pivot": "fr"}


def test_auto_chooses_among_the_sources_that_reach_the_target(chain, translator):
    url, engines, _ = chain
    body = translate(url, q=FRENCH, source="auto", target="de")
    assert body["detectedLanguage"]["language"] == "fr" and "pivot" not in body
    assert 50 < body["detectedLanguage"]["confidence"] <= 100
    body = translate(url, q=ENGLISH, source="auto", target="de")
    assert body["detectedLanguage"]["language"] == "en" and body["pivot"] == "fr"
    # fr is the only source translated into... nothing reaches en: 400
    response = post(url, q=ENGLISH, source="auto", target="en")
    assert response.status_code == 400


def test_detect_names_only_the_served_sources(two, chain):
    for url, sources in ((two[0], {"en", "fr"}), (chain[0], {"en", "fr"})):
        answer = httpx.post(url + "/detect", json={"q": FRENCH},
                            timeout=guards.timeout(30)).json()
        assert answer[0]["language"] == "fr"
        assert {d["language"] for d in answer} <= sources
        assert abs(sum(d["confidence"] for d in answer) - 100) < 0.5


def test_detect_among_codes_langid_does_not_know():
    from keras_attn.serve.detect import detect

    assert [d["language"] for d in detect("3 March 2021", among=("dates", "iso"))] == [
        "dates", "iso"]
    assert detect(FRENCH, among=("dates", "fr"))[0] == {"confidence": 100.0, "language": "fr"}
    assert detect(FRENCH, among=("en", "pt-BR", "fr"))[0]["language"] == "fr"


# --- /languages ----------------------------------------------------------------------------------
def test_languages_lists_each_source_with_every_target_it_reaches(two, chain):
    assert httpx.get(two[0] + "/languages").json() == [
        {"code": "en", "name": "English", "targets": ["fr"]},
        {"code": "fr", "name": "French", "targets": ["en"]}]
    assert httpx.get(chain[0] + "/languages").json() == [
        {"code": "en", "name": "English", "targets": ["fr", "de"]},
        {"code": "fr", "name": "French", "targets": ["de"]},
        {"code": "de", "name": GERMAN_NAME, "targets": []}]


def test_a_one_model_server_answers_as_before(translator):
    """``/languages`` is the source with its target, then the target with none, as a
    one-model server always answered; ``auto`` is its source at confidence 100, ``/detect``
    names any language."""
    models, _ = models_of(translator, ("en", "fr"))
    with running(create_app(models, settings=Settings(timeout=guards.timeout(30)))) as url:
        assert httpx.get(url + "/languages").json() == [
            {"code": "en", "name": "English", "targets": ["fr"]},
            {"code": "fr", "name": "French", "targets": []}]
        assert translate(url, q=DATES[0], source="auto", target="fr")["detectedLanguage"] == {
            "confidence": 100.0, "language": "en"}
        german = "Das Wetter ist heute herrlich, also gehen wir im Park spazieren."
        assert httpx.post(url + "/detect", json={"q": german},
                          timeout=guards.timeout(30)).json()[0]["language"] == "de"


# --- the published client over real HTTP -----------------------------------------------------------
def test_the_published_libretranslate_client(two, chain, translator):
    from libretranslatepy import LibreTranslateAPI

    expected = translator.translate(DATES[:1])[0]
    client = LibreTranslateAPI(two[0] + "/")
    assert client.translate(DATES[0], "en", "fr") == expected
    assert client.translate(DATES[0], "fr", "en") == expected
    assert [entry["code"] for entry in client.languages()] == ["en", "fr"]
    assert client.detect(FRENCH)[0]["language"] == "fr"
    through = LibreTranslateAPI(chain[0] + "/")
    assert through.translate(DATES[0], "en", "de") == translator.translate([expected])[0]
    assert through.translate(ENGLISH, "auto", "de") == translator.translate(
        translator.translate([ENGLISH]))[0]


def test_metrics_count_each_pair(chain):
    from tests.serve.test_serve_api import metric

    url, _, _ = chain
    before = httpx.get(url + "/metrics").text
    translate(url, q=DATES[:2], source="en", target="de")
    text = httpx.get(url + "/metrics").text
    assert metric(text, "keras_attn_translations_total", source="en", target="de",
                  pivot="fr") - metric(before, "keras_attn_translations_total", source="en",
                                       target="de", pivot="fr") == 2
    assert metric(text, "keras_attn_batch_texts_count", source="fr", target="de") >= 1
    assert "keras_attn_queue_depth 0.0" in text


# --- paths, duplicates, memory ---------------------------------------------------------------------
def exported_copy(root, name, source, target):
    """A run folder relabelled ``source`` -> ``target``, with an export folder where
    ``locate`` finds a SavedModel (an empty marker: the test loads the Keras run)."""
    run_dir = os.path.join(root, name)
    os.makedirs(os.path.join(run_dir, "export", "saved_model", "translator", "1"))
    shutil.copy(os.path.join(run_fixtures.TINY_DATES_RUN, "config.json"), run_dir)
    with open(os.path.join(run_dir, "config.json")) as f:
        config = json.load(f)
    config.update(source_lang=source, target_lang=target)
    with open(os.path.join(run_dir, "config.json"), "w") as f:
        json.dump(config, f)
    open(os.path.join(run_dir, "export", "saved_model", "translator", "1", "saved_model.pb"),
         "w").close()
    return run_dir


def test_paths_and_folders_of_exports_are_found(tmp_path):
    en_fr = exported_copy(tmp_path / "runs", "en-fr", "en", "fr")
    fr_en = exported_copy(tmp_path / "runs", "fr-en", "fr", "en")
    found = find_artefacts([en_fr, fr_en])
    assert [(p, a.source[0], a.target[0]) for p, a in found] == [
        (en_fr, "en", "fr"), (fr_en, "fr", "en")]
    assert [p for p, _ in find_artefacts(str(tmp_path / "runs"))] == [en_fr, fr_en]
    with pytest.raises(FileNotFoundError, match="nor do its subfolders"):
        find_artefacts([str(tmp_path)])


def test_two_models_of_one_pair_are_refused_at_start(tmp_path, translator):
    first = exported_copy(tmp_path, "a", "en", "fr")
    second = exported_copy(tmp_path, "b", "en", "fr")
    with pytest.raises(ValueError, match=f"two models translate en -> fr: {first} and "
                                         f"{second}"):
        find_artefacts([first, second])
    with pytest.raises(ValueError, match="two models translate en -> fr"):
        check_pairs([artefact("en", "fr"), artefact("en", "fr")])
    with pytest.raises(ValueError, match="two models translate"):
        models_of(translator, ("en", "fr"))[0].__class__(
            [(artefact("en", "fr"), None), (artefact("en", "fr"), None)])


def test_each_model_is_loaded_and_its_memory_stated(tmp_path, translator):
    from keras_attn.serve.server import load_models

    paths = [exported_copy(tmp_path, "en-fr", "en", "fr"),
             exported_copy(tmp_path, "fr-en", "fr", "en")]
    logged, loaded = [], []

    def make(artefact, replicas, threads, log, xla):
        loaded.append((artefact.source[0], artefact.target[0], replicas))
        return InProcessReplicas(RecordingEngine(translator))

    models = load_models(paths, replicas=1, log=logged.append, make=make)
    assert loaded == [("en", "fr", 1), ("fr", "en", 1)]
    assert [m.pair for m in models] == [("en", "fr"), ("fr", "en")]
    for line, path, label in zip(logged, paths, ("en->fr", "fr->en")):
        assert line.startswith(f"loaded {label} from {path} (+") and line.endswith(" MB)")
    models.close()


def test_the_command_takes_several_paths(monkeypatch):
    from keras_attn import cli
    import keras_attn.serve.server as server

    given = []
    monkeypatch.setattr(server, "serve", lambda path, **kwargs: given.append(path) or 0)
    parser = cli.build_parser()
    for argv, expected in ((["serve", "exported"], "exported"),
                           (["serve", "runs/en-fr", "runs/fr-en", "--port", "5001"],
                            ["runs/en-fr", "runs/fr-en"])):
        assert cli.COMMANDS["serve"](parser.parse_args(argv)) == 0
        assert given.pop() == expected


def test_the_answer_carries_the_pivot_field():
    request = api.parse_fields({"q": "x", "source": "en", "target": "de"},
                               (("en", "fr"), ("fr", "de")))
    assert api.answer(request, [[{"translation": "y"}]], "en", pivot="fr") == {
        "translatedText": "y", "pivot": "fr"}


# --- the command, end to end ---------------------------------------------------------------------
@pytest.mark.slow  # two SavedModels loaded by a server process (~30 s)
def test_the_command_serves_two_savedmodels_from_one_process(tmp_path):
    """``keras-attn serve exported COPY``: the committed dates model and a copy of it
    labelled the other way (``iso -> dates`` in its run's config.json), each loaded with its
    memory stated, both routed, ``/languages`` listing both, LibreTranslate's client."""
    from libretranslatepy import LibreTranslateAPI
    from tests.support.servers import serve_process

    exported = os.path.join(ROOT, "exported")
    copy = tmp_path / "iso-dates"
    shutil.copytree(os.path.join(exported, "saved_model"), copy / "saved_model")
    shutil.copytree(os.path.join(exported, "run"), copy / "run")
    config = json.loads((copy / "run" / "config.json").read_text())
    config.update(source_lang="iso", target_lang="dates")
    (copy / "run" / "config.json").write_text(json.dumps(config))
    log_path = tmp_path / "serve.log"
    with serve_process([exported, copy, "--replicas", "1", "--threads", "1"], log_path,
                       seconds=120) as (url, _):
        client = LibreTranslateAPI(url + "/")
        assert client.languages() == [
            {"code": "dates", "name": "Dates as people write them", "targets": ["iso"]},
            {"code": "iso", "name": "ISO 8601 dates", "targets": ["dates"]}]
        forward = client.translate("3 March 2021", "dates", "iso")
        assert forward == client.translate("3 March 2021", "iso", "dates")  # the same weights
        assert post(url, q="x", source="iso", target="iso").status_code == 400
    text = log_path.read_text()
    for label, path in (("dates->iso", exported), ("iso->dates", str(copy))):
        assert re.search(rf"loaded {label} from {re.escape(path)} \(\+\d+ MB\)", text), text
    assert "serving dates -> iso, iso -> dates on" in text
    assert "Traceback" not in text, text


# --- a model's web export, served beside it --------------------------------------------------
def test_locate_finds_the_web_export_beside_the_artefact(tmp_path):
    from keras_attn.serve.locate import web_export

    export = tmp_path / "export"
    version = export / "saved_model" / "translator" / "1"
    version.mkdir(parents=True)
    assert web_export(str(export), str(version)) is None
    (export / "web").mkdir()  # a folder that is no web export (no model/metadata.json)
    assert web_export(str(export), str(version)) is None
    (export / "web" / "model").mkdir()
    (export / "web" / "model" / "metadata.json").write_text("{}")
    for given in (export, version, export / "saved_model"):
        assert web_export(str(given), str(version)) == str(export / "web"), given


@pytest.mark.parametrize("disabled", [False, True])
def test_a_models_web_export_is_served_beside_it(translator, tmp_path, disabled):
    """The page reads where each pair's web export is (``webExports``) and gets its files
    from ``/web/<source>-<target>/``; none with the page disabled."""
    from starlette.testclient import TestClient

    web = tmp_path / "web"
    (web / "model").mkdir(parents=True)
    (web / "model" / "metadata.json").write_text("{}")
    (web / "keras-attn.js").write_text("export const ok = 1;")
    with_web = dataclasses.replace(artefact("en", "fr"), web=str(web))
    models = Models([(with_web, InProcessReplicas(RecordingEngine(translator))),
                     (artefact("fr", "en"), InProcessReplicas(RecordingEngine(translator)))])
    app = create_app(models, settings=Settings(disable_web_ui=disabled))
    with TestClient(app) as client:
        settings = client.get("/frontend/settings").json()
        assert settings["webExports"] == ({} if disabled else {"en-fr": "web/en-fr/"})
        got = client.get("/web/en-fr/keras-attn.js")
        assert (got.status_code, got.text) == ((404, got.text) if disabled
                                               else (200, "export const ok = 1;"))
        assert client.get("/web/fr-en/keras-attn.js").status_code == 404
        assert client.get("/web/en-fr/../../model/metadata.json").status_code == 404
