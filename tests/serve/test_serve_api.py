"""LibreTranslate's whole surface of ``keras-attn serve``: every route's status codes and
fields, ``/spec`` against an OpenAPI validator, ``/detect`` on real sentences, files
translated with their formatting, errors that reach a real socket client, the state several
servers share (SQLite keys and suggestions, request limits in a real ``redis-server``), the
Prometheus metrics and LibreTranslate's options and ``LT_*`` variables.

A real uvicorn serves the app on a free loopback port (tests/support/servers.py) over the committed
dates model (``exported/``)."""
import io
import os
import re
import shutil
import socket
import subprocess
import zipfile

import httpx
import pytest

from tests.support import guards
from tests.support.servers import free_port, running, wait_until
from tests.serve.test_serve import BODY, DATES, artefact, engine, good, post, served  # noqa: F401
from keras_attn.serve import store
from keras_attn.serve.app import Settings, create_app
from keras_attn.serve.replicas import InProcessReplicas

# Real sentences, each in its language (ISO 639-1).
SENTENCES = {
    "en": ["The weather is lovely today, so we are going for a walk in the park.",
           "I have never seen such a beautiful sunset over the ocean.",
           "Could you please tell me where the nearest train station is?",
           "She has been learning to play the piano for three years.",
           "We should finish this report before the meeting tomorrow morning."],
    "fr": ["Il fait très beau aujourd'hui, alors nous allons nous promener dans le parc.",
           "Je n'ai jamais vu un aussi beau coucher de soleil sur l'océan.",
           "Pourriez-vous me dire où se trouve la gare la plus proche ?",
           "Elle apprend à jouer du piano depuis trois ans.",
           "Nous devrions terminer ce rapport avant la réunion de demain matin."],
    "de": ["Das Wetter ist heute herrlich, also gehen wir im Park spazieren.",
           "Ich habe noch nie einen so schönen Sonnenuntergang über dem Meer gesehen.",
           "Könnten Sie mir bitte sagen, wo der nächste Bahnhof ist?",
           "Sie lernt seit drei Jahren Klavier spielen.",
           "Wir sollten diesen Bericht vor der Besprechung morgen früh fertigstellen."],
    "es": ["Hoy hace un tiempo precioso, así que vamos a pasear por el parque.",
           "Nunca he visto una puesta de sol tan bonita sobre el océano.",
           "¿Podría decirme dónde está la estación de tren más cercana?",
           "Ella lleva tres años aprendiendo a tocar el piano.",
           "Deberíamos terminar este informe antes de la reunión de mañana por la mañana."],
}


@pytest.fixture(scope="module")
def server(artefact, engine, tmp_path_factory):  # noqa: F811
    suggestions = store.SuggestionStore(tmp_path_factory.mktemp("db") / "suggestions.db")
    with served(artefact, engine, suggestions=suggestions) as (url, app):
        yield url, app


def get(url, **kwargs):
    return httpx.get(url, timeout=guards.timeout(30), **kwargs)


def translate(url, **fields):
    response = post(url, json={**BODY, **fields})
    assert response.status_code == 200, response.text
    return response.json()["translatedText"]


# --- the published client ---------------------------------------------------------------------
@pytest.mark.heavy  # a real server and LibreTranslate's client
def test_the_published_client_detects_and_translates(server):
    from libretranslatepy import LibreTranslateAPI

    url, _ = server
    client = LibreTranslateAPI(url + "/")
    assert client.translate(DATES[0], "dates", "iso") == translate(url, q=DATES[0])
    detections = client.detect(SENTENCES["fr"][0])
    assert detections[0]["language"] == "fr"
    assert 0 <= detections[-1]["confidence"] <= detections[0]["confidence"] <= 100


# --- /detect ------------------------------------------------------------------------------------
@pytest.mark.heavy  # langid's model loaded
def test_detect_names_the_language_of_real_sentences(server):
    """Each sentence's language, and langid's own module-level classifier agrees (another
    code path of the same library: unnormalised scores)."""
    import langid

    url, _ = server
    right = 0
    for language, sentences in SENTENCES.items():
        for sentence in sentences:
            answer = httpx.post(url + "/detect", json={"q": sentence},
                                timeout=guards.timeout(30))
            assert answer.status_code == 200, answer.text
            detections = answer.json()
            assert len(detections) == 3
            assert [d["confidence"] for d in detections] == sorted(
                (d["confidence"] for d in detections), reverse=True)
            assert detections[0]["language"] == langid.classify(sentence)[0]
            right += detections[0]["language"] == language
    assert right >= 0.9 * sum(len(s) for s in SENTENCES.values())


@pytest.mark.parametrize("q", ["123", "!!!", "3 March 2021", "x", "🙂"])
def test_detect_answers_any_text(server, q):
    url, _ = server
    answer = httpx.post(url + "/detect", data={"q": q}, timeout=guards.timeout(30))
    assert answer.status_code == 200, answer.text
    assert all(0 <= d["confidence"] <= 100 and d["language"] for d in answer.json())


# --- every route: status codes, 405, errors as JSON ---------------------------------------------
@pytest.mark.parametrize("method, path, kwargs, status", [
    ("GET", "/languages", {}, 200),
    ("POST", "/languages", {}, 405),
    ("GET", "/health", {}, 200),
    ("POST", "/health", {}, 405),
    ("GET", "/translate", {}, 405),
    ("POST", "/translate", {"json": {"q": "3 March 2021", **BODY}}, 200),
    ("POST", "/translate", {"json": {"q": "x"}}, 400),
    ("GET", "/detect", {}, 405),
    ("POST", "/detect", {"json": {}}, 400),
    ("GET", "/translate_file", {}, 405),
    ("POST", "/translate_file", {"data": BODY}, 400),
    ("POST", "/translate_file", {"data": BODY, "files": {"file": ("a.pdf", b"%PDF")}}, 400),
    ("POST", "/translate_file", {"data": {"source": "dates", "target": "fr"},
                                 "files": {"file": ("a.txt", b"x")}}, 400),
    ("GET", "/download_file/nothing.txt", {}, 404),
    ("POST", "/download_file/nothing.txt", {}, 405),
    ("GET", "/suggest", {}, 405),
    ("POST", "/suggest", {"json": {"q": "a", "s": "b", "source": "dates"}}, 400),
    ("GET", "/frontend/settings", {}, 200),
    ("POST", "/frontend/settings", {}, 405),
    ("GET", "/spec", {}, 200),
    ("POST", "/spec", {}, 405),
    ("GET", "/docs", {}, 200),
    ("GET", "/metrics", {}, 200),
    ("POST", "/metrics", {}, 405),
    ("GET", "/attention", {}, 405),
    ("GET", "/", {}, 200),
    ("POST", "/", {}, 405),
    ("GET", "/no/such/route", {}, 404),
], ids=lambda v: v if isinstance(v, (str, int)) else None)
def test_every_route_answers_its_status(server, method, path, kwargs, status):
    url, _ = server
    response = httpx.request(method, url + path, timeout=guards.timeout(30), **kwargs)
    assert response.status_code == status, response.text
    if status >= 400:
        assert set(response.json()) == {"error"} and response.json()["error"]
    if status == 405:
        assert response.headers["allow"]


def test_health_and_frontend_settings_have_libretranslates_fields(server):
    url, _ = server
    assert get(url + "/health").json() == {"status": "ok"}  # exactly, as LibreTranslate's
    settings = get(url + "/frontend/settings").json()
    assert settings["charLimit"] == -1 and settings["suggestions"] is True
    assert settings["apiKeys"] is False and settings["keyRequired"] is False
    assert {".txt", ".html", ".docx", ".odt"} <= set(settings["supportedFilesFormat"])
    assert settings["language"]["source"]["code"] == "auto"
    assert settings["language"]["target"]["code"] == "iso"


# --- /spec and /docs -----------------------------------------------------------------------------
def test_spec_is_valid_openapi_and_lists_every_route(server):
    from openapi_spec_validator import validate

    url, app = server
    document = get(url + "/spec").json()
    validate(document)
    declared = {(path, method.upper()) for path, methods in document["paths"].items()
                for method in methods}
    served_routes = {(r.path, m) for r in app.routes for m in r.methods if m != "HEAD"}
    assert declared == served_routes
    page = get(url + "/docs")
    assert page.headers["content-type"].startswith("text/html")
    assert 'fetch("spec")' in page.text


# --- errors reach the client ----------------------------------------------------------------------
def raw_post(url, body, path="/translate", content_type="application/json"):
    """Status line, head and body of a POST written on a plain socket: the whole body is
    sent before the answer is read, as simple clients do."""
    host, port = url.split("//")[1].split(":")
    with socket.create_connection((host, int(port)), timeout=guards.timeout(30)) as s:
        s.sendall(f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: {content_type}"
                  f"\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
                  .encode() + body)
        answer = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            answer += chunk
    head, _, payload = answer.partition(b"\r\n\r\n")
    return head.split(b"\r\n")[0].decode(), head.decode(), payload


def test_an_oversized_body_gets_413_over_a_real_socket(server):
    url, _ = server
    body = b'{"q": "' + b"a" * (5 * 2 ** 20) + b'", "source": "dates", "target": "iso"}'
    status, head, payload = raw_post(url, body)
    assert status.split()[1] == "413", status
    assert "connection: close" in head.lower()
    assert b'"error":"Request body too large: the limit is 1000000 bytes"' in payload
    good(url)


@pytest.mark.parametrize("path, status", [("/languages", 405), ("/no/such/route", 404)])
def test_an_error_before_the_body_is_read_reaches_a_real_socket(server, path, status):
    """The route never reads the body; the answer still reaches the client that writes
    its whole 2 MB body first."""
    url, _ = server
    line, _, payload = raw_post(url, b"x" * (2 * 2 ** 20), path, "text/plain")
    assert line.split()[1] == str(status), line
    assert payload.startswith(b'{"error":')


# --- files ---------------------------------------------------------------------------------------
def translate_file(url, name, data):
    """The translated bytes of a file, through /translate_file and its download."""
    response = httpx.post(url + "/translate_file", data=BODY, files={"file": (name, data)},
                          timeout=guards.timeout(60))
    assert response.status_code == 200, response.text
    download = get(response.json()["translatedFileUrl"])
    assert download.status_code == 200, download.text
    assert name in download.headers["content-disposition"]
    return download.content


def html_answer(url, fragment):
    return translate(url, q=fragment, format="html")


def bold_texts(fragment):
    return [re.sub(r"<[^>]+>", "", m) for m in re.findall(r"<b>(.*?)</b>", fragment)]


def test_a_text_file_is_translated_line_by_line(server):
    url, _ = server
    text = f"{DATES[0]}\n\n  {DATES[1]}\n"
    got = translate_file(url, "dates.txt", text.encode()).decode()
    assert got == f"{translate(url, q=DATES[0])}\n\n  {translate(url, q=DATES[1])}\n"


def test_an_html_file_is_format_html(server):
    url, _ = server
    page = f"<html><body><h1>{DATES[0]}</h1><p>le <b>4 juillet</b> 1999</p></body></html>"
    assert translate_file(url, "page.html", page.encode()).decode() == html_answer(url, page)


def test_a_docx_keeps_its_runs_formatting(server, tmp_path):
    """python-docx writes the document and reads the translation: each paragraph's text is
    its translation, and the bold runs hold what format=html puts inside <b>."""
    import docx

    url, _ = server
    document = docx.Document()
    first = document.add_paragraph("le ")
    first.add_run("4 juillet").bold = True
    first.add_run(" 1999")
    document.add_paragraph(DATES[0])
    buffer = io.BytesIO()
    document.save(buffer)
    out = docx.Document(io.BytesIO(translate_file(url, "letter.docx", buffer.getvalue())))
    paragraphs = [p for p in out.paragraphs if p.text.strip()]
    expected = html_answer(url, "le <b>4 juillet</b> 1999")
    assert paragraphs[0].text == re.sub(r"<[^>]+>", "", expected)
    assert [r.text for r in paragraphs[0].runs if r.bold] == [
        t for t in bold_texts(expected) if t]
    assert paragraphs[1].text == translate(url, q=DATES[0])


def test_an_odt_keeps_its_spans_formatting(server):
    """odfpy writes the document and reads the translation (spans by style)."""
    from odf import teletype, text
    from odf.opendocument import OpenDocumentText, load
    from odf.style import Style, TextProperties

    url, _ = server
    document = OpenDocumentText()
    bold = Style(name="Strong", family="text")
    bold.addElement(TextProperties(fontweight="bold"))
    document.automaticstyles.addElement(bold)
    paragraph = text.P(text="le ")
    paragraph.addElement(text.Span(stylename=bold, text="4 juillet"))
    paragraph.addText(" 1999")
    document.text.addElement(paragraph)
    document.text.addElement(text.P(text=DATES[0]))
    buffer = io.BytesIO()
    document.save(buffer)
    data = translate_file(url, "letter.odt", buffer.getvalue())
    assert zipfile.ZipFile(io.BytesIO(data)).namelist()[0] == "mimetype"
    out = load(io.BytesIO(data))
    paragraphs = out.text.getElementsByType(text.P)
    expected = html_answer(url, "le <b>4 juillet</b> 1999")
    assert teletype.extractText(paragraphs[0]) == re.sub(r"<[^>]+>", "", expected)
    spans = [teletype.extractText(s) for s in paragraphs[0].getElementsByType(text.Span)
             if s.getAttribute("stylename") == "Strong"]
    assert spans == [t for t in bold_texts(expected) if t]
    assert teletype.extractText(paragraphs[1]) == translate(url, q=DATES[0])


def test_a_file_that_is_not_its_format_is_400(server):
    url, _ = server
    response = httpx.post(url + "/translate_file", data=BODY,
                          files={"file": ("broken.docx", b"not a zip")},
                          timeout=guards.timeout(30))
    assert response.status_code == 400
    assert "is not a .docx document (a .docx is a zip archive)" in response.json()["error"]


# --- suggestions, keys: SQLite -------------------------------------------------------------------
def test_suggestions_export_as_a_corpus_train_reads(server, tmp_path):
    from keras_attn.data import load_tatoeba

    url, app = server
    pairs = [("3 March 2021", "2021-03-03"), ("le 4\tjuillet 1999", "1999-07-04")]
    for q, s in pairs:
        response = httpx.post(url + "/suggest", data={"q": q, "s": s, **BODY},
                              timeout=guards.timeout(30))
        assert response.json() == {"success": True}
    path = tmp_path / "suggested.tsv"
    assert app.state.settings.suggestions.export(str(path)) == 2
    read, _ = load_tatoeba(str(path), normalize=False)
    assert read == [(" ".join(q.split()), s) for q, s in pairs]


def test_suggest_without_suggestions_is_403(artefact, engine):  # noqa: F811
    with served(artefact, engine) as (url, _):
        response = httpx.post(url + "/suggest", json={"q": "a", "s": "b", **BODY})
        assert response.status_code == 403
        assert response.json() == {"error": "Suggestions are disabled on this server."}


def test_keys_managed_by_the_cli_limit_a_running_server(artefact, engine, tmp_path,  # noqa: F811
                                                         capsys):
    from keras_attn.cli import main

    db = str(tmp_path / "keys.db")
    assert main(["serve", "keys", "add", "2", "--api-keys-db-path", db]) == 0
    key = capsys.readouterr().out.strip()
    assert main(["serve", "keys", "add", "-1", "mine", "--char-limit", "5",
                 "--api-keys-db-path", db]) == 0
    capsys.readouterr()
    assert main(["serve", "keys", "list", "--api-keys-db-path", db]) == 0
    listed = capsys.readouterr().out
    assert f"{key}\treq_limit=2\tchar_limit=-" in listed
    assert "mine\treq_limit=-1\tchar_limit=5" in listed
    with served(artefact, engine, api_keys=store.KeyStore(db)) as (url, _):
        codes = [post(url, data={"q": DATES[0], "api_key": key, **BODY}).status_code
                 for _ in range(3)]
        assert codes == [200, 200, 429]
        long = post(url, json={"q": DATES[0], "api_key": "mine", **BODY})
        assert long.status_code == 400
        assert long.json()["error"] == (f"Invalid request: request ({len(DATES[0])}) "
                                        f"exceeds text limit (5)")
        assert main(["serve", "keys", "remove", "mine", "--api-keys-db-path", db]) == 0
        gone = post(url, json={"q": "x", "api_key": "mine", **BODY})
        assert gone.status_code == 403 and gone.json() == {"error": "Invalid API key"}
    assert main(["serve", "keys", "remove", "mine", "--api-keys-db-path", db]) == 1


# --- request limits in Redis ---------------------------------------------------------------------
@pytest.fixture
def redis_url(tmp_path):
    """A real redis-server on a free loopback port (skipped without the binary, unless
    KERAS_ATTN_REQUIRE_REDIS=1)."""
    binary = shutil.which("redis-server")
    if binary is None:
        if os.environ.get("KERAS_ATTN_REQUIRE_REDIS") == "1":
            pytest.fail("redis-server is not installed (apt-get install redis-server) and "
                        "KERAS_ATTN_REQUIRE_REDIS=1")
        pytest.skip("redis-server is not installed (Debian: apt-get install redis-server)")
    import redis

    port = free_port()
    process = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1",
                                "--save", "", "--appendonly", "no", "--dir", str(tmp_path)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"

    def answers():
        try:
            return redis.Redis.from_url(url).ping()
        except redis.exceptions.ConnectionError:
            return False

    try:
        wait_until(answers, "redis-server to answer", 10)
        yield url
    finally:
        process.terminate()
        process.wait(guards.timeout(10))


def test_two_servers_on_one_redis_share_one_limit(artefact, engine, redis_url):  # noqa: F811
    def statuses(storage):
        apps = [create_app(artefact, InProcessReplicas(engine),
                           Settings(req_limit=3, shared_storage=storage,
                                    timeout=guards.timeout(30))) for _ in range(2)]
        with running(apps[0]) as first, running(apps[1]) as second:
            return [httpx.post(url + "/detect", json={"q": "hello"},
                               timeout=guards.timeout(30)).status_code
                    for url in (first, second, first, second, first, second)]

    assert statuses(redis_url) == [200, 200, 200, 429, 429, 429]
    assert statuses("memory://") == [200] * 6  # each process counts its own


class CountingEngine:
    """The engine, counting the texts it is asked to translate."""

    def __init__(self, engine):
        self.engine = engine
        self.texts = []
        self.confidence = []

    def translate(self, texts, options, confidence=True):
        self.texts += list(texts)
        self.confidence.append(confidence)
        return self.engine.translate(texts, options, confidence)


def test_confidences_are_computed_only_for_answers_that_show_them(artefact, engine):  # noqa: F811
    """A plain LibreTranslate request asks the engine for no confidence (CTranslate2 would
    run one more pass for it); ``return_scores`` asks, and each hypothesis has one."""
    counting = CountingEngine(engine)
    app = create_app(artefact, InProcessReplicas(counting),
                     Settings(timeout=guards.timeout(30)))
    with running(app) as url:
        assert post(url, json={**BODY, "q": DATES[0]}).status_code == 200
        scored = post(url, json={**BODY, "q": DATES[1], "return_scores": True}).json()
    assert counting.confidence == [False, True]
    assert all("confidence" in h for h in scored["hypotheses"])


def test_translate_answers_say_where_their_time_went(artefact, engine):  # noqa: F811
    """``Server-Timing``: the request's read, queue and engine milliseconds within its
    total (a cached answer: read and cache); the engine's share is the batch's own time."""
    app = create_app(artefact, InProcessReplicas(engine),
                     Settings(timeout=guards.timeout(30), translation_cache=("all",)))

    def timing(response):
        assert response.status_code == 200, response.text
        parts = [p.strip().split(";dur=") for p in
                 response.headers["server-timing"].split(",")]
        return {name: float(value) for name, value in parts}

    with running(app) as url:
        first = timing(post(url, json={**BODY, "q": DATES[2]}))
        again = timing(post(url, json={**BODY, "q": DATES[2]}))
    assert list(first) == ["read", "queue", "engine", "total"]
    assert all(v >= 0 for v in first.values())
    assert first["read"] + first["queue"] + first["engine"] <= first["total"] + 0.01  # rounding
    assert first["engine"] > 0
    assert list(again) == ["read", "cache", "total"]


@pytest.mark.parametrize("shared", [False, True], ids=["memory", "redis"])
def test_the_translation_cache_answers_a_repeated_request(artefact, engine,  # noqa: F811
                                                          request, shared):
    """The second server answers what the first translated without calling its engine
    (Redis); one server answers a repeated request from memory; other options are another
    request."""
    storage = request.getfixturevalue("redis_url") if shared else "memory://"
    engines = [CountingEngine(engine), CountingEngine(engine)]
    apps = [create_app(artefact, InProcessReplicas(e),
                       Settings(translation_cache=("all",), shared_storage=storage,
                                timeout=guards.timeout(30))) for e in engines]
    with running(apps[0]) as first, running(apps[1]) as second:
        fields = {"q": DATES[1], "alternatives": 1}
        expected = post(first, json={**BODY, **fields}).json()
        again = post(second if shared else first, json={**BODY, **fields}).json()
        assert again == expected
        assert engines[0].texts == [DATES[1]] and engines[1].texts == []
        assert post(first, json={**BODY, **fields, "beam_size": 3}).status_code == 200
        assert engines[0].texts == [DATES[1], DATES[1]]


# --- LibreTranslate's limits, prefix, metrics ----------------------------------------------------
def test_char_batch_and_alternatives_limits(artefact, engine):  # noqa: F811
    with served(artefact, engine, char_limit=12, batch_limit=2,
                alternatives_limit=1) as (url, _):
        cases = [({"q": DATES[1]}, f"request ({len(DATES[1])}) exceeds text limit (12)"),
                 ({"q": DATES[:3]}, "request (3) exceeds text limit (2)"),
                 ({"q": DATES[0], "alternatives": 2}, "alternatives parameter must be <= 1")]
        for fields, message in cases:
            response = post(url, json={**BODY, **fields})
            assert response.status_code == 400
            assert response.json()["error"] == "Invalid request: " + message
        assert translate(url, q=[DATES[0], DATES[3]]) == [translate(url, q=DATES[0]),
                                                          translate(url, q=DATES[3])]
        good(url)
        assert get(url + "/frontend/settings").json()["charLimit"] == 12


def test_url_prefix_serves_every_route_under_it(artefact, engine):  # noqa: F811
    with served(artefact, engine, url_prefix="/lt") as (url, _):
        assert translate(url + "/lt", q=DATES[0]) == "2021-03-03"
        root = get(url + "/", follow_redirects=False)
        assert root.status_code == 301 and root.headers["location"] == "/lt/"
        assert get(url + "/lt/spec").json()["servers"] == [{"url": "/lt"}]
        assert get(url + "/translate").status_code == 404
        response = httpx.post(url + "/lt/translate_file", data=BODY,
                              files={"file": ("a.txt", DATES[0].encode())})
        assert response.json()["translatedFileUrl"].startswith(url + "/lt/download_file/")


def metric(text, name, **labels):
    from prometheus_client.parser import text_string_to_metric_families

    return sum(sample.value for family in text_string_to_metric_families(text)
               for sample in family.samples
               if sample.name == name and all(sample.labels.get(k) == v
                                              for k, v in labels.items()))


def test_metrics_count_requests_errors_and_batches(artefact, engine):  # noqa: F811
    with served(artefact, engine, metrics_auth_token="s3cret") as (url, _):
        for q in DATES[:3]:
            translate(url, q=q)
        get(url + "/translate")                       # 405
        get(url + "/no/such/route")                   # 404
        assert get(url + "/metrics").status_code == 401
        text = get(url + "/metrics", headers={"Authorization": "Bearer s3cret"}).text
        assert metric(text, "keras_attn_http_requests_total", route="/translate",
                      method="POST", status="200") == 3
        assert metric(text, "keras_attn_http_errors_total", route="/translate",
                      status="405") == 1
        assert metric(text, "keras_attn_http_errors_total", route="unmatched",
                      status="404") == 1
        assert metric(text, "keras_attn_http_request_duration_seconds_count",
                      route="/translate") == 4
        assert metric(text, "keras_attn_batch_texts_sum") == 3   # 3 texts (one each)
        assert metric(text, "keras_attn_batch_texts_count") == 3
        assert "keras_attn_queue_depth 0.0" in text


# --- the command line -----------------------------------------------------------------------------
def test_libretranslate_options_and_environment(monkeypatch, tmp_path):
    from keras_attn.cli import build_parser

    keys = tmp_path / "keys.txt"
    keys.write_text("k1\n", encoding="utf-8")
    monkeypatch.setenv("LT_CHAR_LIMIT", "20")
    monkeypatch.setenv("LT_SUGGESTIONS", "true")
    monkeypatch.setenv("LT_API_KEYS", "1")
    monkeypatch.setenv("LT_PORT", "6001")
    monkeypatch.setenv("LT_URL_PREFIX", "/lt")
    monkeypatch.setenv("KERAS_ATTN_SERVE_MAX_BATCH", "8")
    args = build_parser().parse_args(["serve", "exported"])
    assert (args.char_limit, args.suggestions, args.api_keys, args.port, args.url_prefix,
            args.max_batch) == (20, True, True, 6001, "/lt", 8)
    args = build_parser().parse_args(["serve", "exported", "--char-limit", "5",
                                      "--api-keys", str(keys)])
    assert (args.char_limit, args.api_keys) == (5, str(keys))  # a flag wins
    monkeypatch.setenv("LT_CHAR_LIMIT", "many")
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "exported"])


@pytest.mark.slow  # starts a keras-attn process (~25 s on a loaded 2-core machine)
def test_the_command_applies_libretranslates_options(tmp_path):
    """``keras-attn serve`` with LT_* variables and flags: the settings reach the app."""
    import sys

    from tests.serve.test_serve import EXPORTED, ROOT

    db = str(tmp_path / "keys.db")
    store.KeyStore(db).add(-1, "k1", char_limit=40)
    port = free_port()
    url = f"http://127.0.0.1:{port}/lt"
    env = dict(os.environ, LT_CHAR_LIMIT="5", LT_URL_PREFIX="/lt", LT_SUGGESTIONS="true",
               KERAS_ATTN_SERVE_SUGGESTIONS_DB_PATH=str(tmp_path / "s.db"))
    with open(tmp_path / "serve.log", "w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "keras_attn.cli", "serve", EXPORTED, "--port", str(port),
             "--replicas", "1", "--api-keys", "--api-keys-db-path", db],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        def up():
            assert proc.poll() is None, (tmp_path / "serve.log").read_text()
            try:
                return httpx.get(url + "/health").status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(up, "the server to answer /lt/health", seconds=20)
        settings = get(url + "/frontend/settings").json()
        assert (settings["charLimit"], settings["apiKeys"], settings["suggestions"]) == (
            5, True, True)
        over = post(url, json={"q": DATES[0], **BODY})
        assert over.json()["error"] == f"Invalid request: request ({len(DATES[0])}) " \
                                       f"exceeds text limit (5)"
        assert translate(url, q=DATES[0], api_key="k1") == "2021-03-03"  # the key's own limit
    finally:
        proc.terminate()
        proc.wait(guards.timeout(10))
