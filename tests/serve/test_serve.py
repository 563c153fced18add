"""``keras-attn serve`` (keras_attn.serve): LibreTranslate's API over the committed dates
model (``exported/``), against ``Translator`` of ``exported/run``.

A real uvicorn serves the app on a free loopback port (in a thread; SIGTERM in a real
subprocess). Faults are made without timing: an engine held by a gate keeps a request in
flight while the test looks at ``GET /metrics``' gauges; every fault is followed by a good request
that is answered.
"""
import asyncio
import contextlib
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import threading

import httpx
import numpy as np
import pytest

from tests.support import guards
from tests.support.servers import running, serve_process, wait_until
from keras_attn.decoding.options import DecodingOptions
from keras_attn.serve import api, limits
from keras_attn.serve.app import Settings, create_app
from keras_attn.serve.batcher import Batcher, QueueFull
from keras_attn.serve.locate import locate
from keras_attn.serve.replicas import InProcessReplicas

from tests.support import ROOT
EXPORTED = os.path.join(ROOT, "exported")
DATES = ["3 March 2021", "le 4 juillet 1999", "Wed, 3 Mar 2021", "25/12/1999", "1 Jan 1900"]
BODY = {"source": "dates", "target": "iso"}


# --- fixtures -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def artefact():
    return locate(EXPORTED)


@pytest.fixture(scope="module")
def engine(artefact):
    """The SavedModel engine on the plain options signature: these tests check the HTTP
    layer, and each batch shape of the compiled one would compile first (its answers are
    translate_v2's: tests/export/test_compiled_signature.py)."""
    from keras_attn.serve.engines import load_engine

    return load_engine(artefact, xla=False)


@pytest.fixture(scope="module")
def translator():
    from keras_attn.translator import Translator

    return Translator.from_run_dir(os.path.join(EXPORTED, "run"))


class GatedEngine:
    """The engine, but each call waits for ``gate`` (a threading.Event) first."""

    def __init__(self, engine):
        self.engine = engine
        self.gate = threading.Event()
        self.calls = []

    def translate(self, texts, options, confidence=True):
        self.calls.append((list(texts), options))
        if not self.gate.wait(guards.timeout(30)):
            raise RuntimeError("the test never opened the gate")
        return self.engine.translate(texts, options, confidence)


@contextlib.contextmanager
def served(artefact, engine, **settings):
    """``(url, app)`` of a server over ``engine`` with ``Settings(**settings)`` (its request
    timeout a hang guard, unless the test sets one)."""
    settings.setdefault("timeout", guards.timeout(30))
    app = create_app(artefact, InProcessReplicas(engine), Settings(**settings))
    with running(app) as url:
        yield url, app


@pytest.fixture(scope="module")
def server(artefact, engine):
    with served(artefact, engine) as (url, _):
        yield url


def post(url, **kwargs):
    return httpx.post(url + "/translate", timeout=guards.timeout(30), **kwargs)


def good(url):
    """A good request after a fault: answered."""
    response = post(url, json={"q": "3 March 2021", **BODY})
    assert response.status_code == 200, response.text
    assert response.json()["translatedText"] == "2021-03-03"


def health(url):
    return httpx.get(url + "/health", timeout=guards.timeout(5)).json()


def frontend_settings(url):
    return httpx.get(url + "/frontend/settings", timeout=guards.timeout(5)).json()


def gauge(url, name):
    """A gauge of ``GET /metrics``, read with prometheus-client's own parser:
    ``keras_attn_batches_in_flight``, ``keras_attn_queue_depth``."""
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(url + "/metrics", timeout=guards.timeout(5)).text
    return next(f.samples[0].value for f in text_string_to_metric_families(text)
                if f.name == name)


def in_flight(url):
    return gauge(url, "keras_attn_batches_in_flight")


# --- LibreTranslate's API ---------------------------------------------------------------------
@pytest.mark.kernels
@pytest.mark.heavy  # the committed SavedModel served
def test_json_and_form_bodies_give_the_translators_text(server, translator):
    expected = translator.translate(DATES)
    response = post(server, json={"q": DATES, **BODY})
    assert response.status_code == 200, response.text
    assert response.json() == {"translatedText": expected}
    for i, sentence in enumerate(DATES[:2]):
        by_json = post(server, json={"q": sentence, **BODY}).json()
        by_form = post(server, data={"q": sentence, **BODY}).json()
        by_multipart = post(server, files={"q": (None, sentence), "source": (None, "dates"),
                                           "target": (None, "iso")}).json()
        assert by_json == by_form == by_multipart == {"translatedText": expected[i]}


@pytest.mark.kernels
def test_the_published_libretranslate_client(server, translator):
    from libretranslatepy import LibreTranslateAPI

    client = LibreTranslateAPI(server + "/")
    assert [client.translate(s, "dates", "iso") for s in DATES] == translator.translate(DATES)
    assert client.translate(DATES[0], "auto", "iso") == translator.translate(DATES[:1])[0]
    languages = client.languages()
    assert languages[0] == {"code": "dates", "name": "Dates as people write them",
                            "targets": ["iso"]}


@pytest.mark.kernels
@pytest.mark.heavy  # beam search through the SavedModel
def test_alternatives_are_the_translators_nbest(server, translator):
    nbest = translator.translate_nbest(DATES, beam_size=4, num_hypotheses=4)
    body = post(server, json={"q": DATES, "alternatives": 3, "return_scores": True,
                              **BODY}).json()
    assert body["translatedText"] == [hyps[0]["translation"] for hyps in nbest]
    assert body["alternatives"] == [[h["translation"] for h in hyps[1:]] for hyps in nbest]
    for got, expected in zip(body["hypotheses"], nbest):
        np.testing.assert_allclose([h["score"] for h in got], [h["score"] for h in expected],
                                   rtol=1e-4, atol=1e-4)
    one = post(server, json={"q": DATES[0], "alternatives": 2, **BODY}).json()
    assert one == {"translatedText": nbest[0][0]["translation"],
                   "alternatives": [h["translation"] for h in nbest[0][1:3]]}


@pytest.mark.kernels
@pytest.mark.parametrize("options", [
    dict(return_alignments=True),
    dict(beam_size=3, num_hypotheses=2, length_penalty=1.0),
    dict(sampling_topk=5, sampling_temperature=1.5, seed=7),
    dict(target_prefix="19", max_length=12),
], ids=lambda o: ",".join(o))
@pytest.mark.heavy  # every option through the SavedModel's graph
def test_our_decoding_options_are_extra_fields(server, translator, options):
    expected = translator.translate_nbest(DATES, **options)
    body = post(server, json={"q": DATES, "return_scores": True, **options, **BODY}).json()
    assert body["translatedText"] == [hyps[0]["translation"] for hyps in expected]
    for got, want in zip(body["hypotheses"], expected):
        assert [h["translation"] for h in got] == [h["translation"] for h in want]
        np.testing.assert_allclose([h["score"] for h in got], [h["score"] for h in want],
                                   rtol=1e-4, atol=1e-4)
        assert [h.get("alignment") for h in got] == [h.get("alignment") for h in want]
    # Form bodies carry them as strings.
    form = {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in options.items()}
    by_form = post(server, data={"q": DATES[0], **form, **BODY}).json()
    assert by_form["translatedText"] == expected[0][0]["translation"]


def test_languages_health_and_what_the_engine_can_do(server):
    """``/health`` is LibreTranslate's, exactly; the engine and its capabilities are in
    ``/frontend/settings`` (the page reads them)."""
    from keras_attn.serve.engines import SavedModelEngine

    languages = httpx.get(server + "/languages").json()
    assert [entry["code"] for entry in languages] == ["dates", "iso"]
    assert health(server) == {"status": "ok"}
    settings = frontend_settings(server)
    assert (settings["engine"], settings["replicas"]) == ("savedmodel", 1)
    assert {k: settings[k] for k in ("sampling", "alignments", "max_beam_size", "scoring",
                                     "confidence")} == dataclasses.asdict(
        SavedModelEngine.capabilities)


# --- faults: each answered with LibreTranslate's error, then a good request is answered -------
@pytest.mark.parametrize("kwargs, field", [
    (dict(content=b'{"q": "3 March', headers={"Content-Type": "application/json"}), "JSON"),
    (dict(content=b'["3 March 2021"]', headers={"Content-Type": "application/json"}), "JSON"),
    (dict(json={"q": 5, **BODY}), "`q`"),
    (dict(json={"q": ["a", 3], **BODY}), "`q`"),
    (dict(json={"source": "dates", "target": "iso"}), "missing q"),
    (dict(json={"q": "x", "target": "iso"}), "missing source"),
    (dict(json={"q": "x", "source": "dates", "target": "fr"}), "fr is not supported"),
    (dict(json={"q": "x", "format": "pdf", **BODY}), "pdf format"),
    (dict(json={"q": "x", "beam_size": "four", **BODY}), "`beam_size`"),
    (dict(json={"q": "x", "beam_size": 2.5, **BODY}), "`beam_size`"),
    (dict(json={"q": "x", "sampling_topp": 1.5, **BODY}), "`sampling_topp`"),
    (dict(json={"q": "x", "return_alignments": "yes", **BODY}), "`return_alignments`"),
    (dict(json={"q": "x", "alternatives": -1, **BODY}), "`alternatives`"),
    (dict(json={"q": "x", "beam_size": 9, **BODY}), "`beam_size`"),  # the graph refuses it
    (dict(json={"q": "x", "max_length": 1000, **BODY}), "`max_length`"),
    (dict(data={"q": "x", "seed": "abc", **BODY}), "`seed`"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_bad_requests_are_400_naming_the_field(server, kwargs, field):
    response = post(server, **kwargs)
    assert response.status_code == 400, response.text
    assert field in response.json()["error"]
    good(server)


@pytest.mark.slow  # loads the SavedModel a second time (~15 s)
def test_the_savedmodel_engine_calls_the_signature_it_is_given(artefact, engine):
    """An older options signature answers as the newest where its options are unset, and
    refuses an option it lacks (so it is the one called); an unknown name is refused."""
    from keras_attn.serve.engines import SavedModelEngine

    older = SavedModelEngine(artefact.path, signature="translate")
    options = DecodingOptions(max_length=12)
    assert older.translate(DATES, options) == engine.translate(DATES, options)
    with pytest.raises(ValueError, match="`repetition_penalty` is not an input"):
        older.translate(DATES[:1], DecodingOptions(repetition_penalty=1.5))
    engine.translate(DATES[:1], DecodingOptions(repetition_penalty=1.5))  # the newest has it
    with pytest.raises(ValueError, match="no 'translate_v9' signature"):
        SavedModelEngine(artefact.path, signature="translate_v9")


def test_a_body_over_the_limit_is_413(artefact, engine):
    with served(artefact, engine, max_body_bytes=200) as (url, _):
        response = post(url, json={"q": "3 March 2021 " * 40, **BODY})
        assert response.status_code == 413
        assert "too large" in response.json()["error"]
        good(url)


def test_a_full_queue_is_503_with_retry_after(artefact, engine):
    gated = GatedEngine(engine)
    with served(artefact, gated, queue_size=1, batch_wait_ms=0) as (url, _):
        with concurrent_posts(url) as submit:
            first = submit({"q": DATES[0], **BODY})                # decoding (held)
            wait_until(lambda: in_flight(url) == 1, "the first batch")
            second = submit({"q": DATES[1], "beam_size": 2, **BODY})  # waits in the queue
            wait_until(lambda: gauge(url, "keras_attn_queue_depth") == 1, "the queued request")
            third = post(url, json={"q": DATES[2], **BODY})
            assert third.status_code == 503, third.text
            assert int(third.headers["Retry-After"]) >= 1
            assert "queue is full" in third.json()["error"]
            gated.gate.set()
            assert first.result().status_code == 200
            assert second.result().status_code == 200
        good(url)


def test_a_request_past_its_timeout_is_504(artefact, engine):
    gated = GatedEngine(engine)
    with served(artefact, gated, timeout=1.0) as (url, app):
        try:
            response = post(url, json={"q": DATES[0], **BODY})  # held past its timeout
            assert response.status_code == 504, response.text
            assert "timed out" in response.json()["error"]
        finally:
            gated.gate.set()
        wait_until(lambda: in_flight(url) == 0, "the held batch to end")
        app.state.settings.timeout = 30.0  # the good request is not judged on time
        good(url)


def test_api_keys_and_request_limit(artefact, engine, tmp_path):
    keys = tmp_path / "keys.txt"
    keys.write_text("# key [requests a minute]\ngood\nlimited 2\n")
    with served(artefact, engine, api_keys=limits.read_api_keys(str(keys))) as (url, _):
        response = post(url, json={"q": "3 March 2021", "api_key": "wrong", **BODY})
        assert response.status_code == 403
        assert response.json() == {"error": "Invalid API key"}
        good(url)
        answers = [post(url, data={"q": "3 March 2021", "api_key": "limited", **BODY})
                   for _ in range(3)]
        assert [a.status_code for a in answers] == [200, 200, 429]
        assert "Slowdown" in answers[2].json()["error"]
        response = post(url, json={"q": "3 March 2021", "api_key": "good", **BODY})
        assert response.status_code == 200
        good(url)  # no key: no limit (--req-limit -1)
    with served(artefact, engine, req_limit=1) as (url, _):
        good(url)
        response = post(url, json={"q": "3 March 2021", **BODY})
        assert response.status_code == 429
    with served(artefact, engine, req_limit=0, api_keys={"k": None}) as (url, _):
        assert post(url, json={"q": "x", **BODY}).status_code == 400  # a key is required
        assert post(url, json={"q": "x", "api_key": "k", **BODY}).status_code == 200


def test_read_api_keys_names_a_bad_line(tmp_path):
    path = tmp_path / "keys.txt"
    path.write_text("a 10\nb ten\n")
    with pytest.raises(ValueError, match=r"keys.txt:2"):
        limits.read_api_keys(str(path))


@contextlib.contextmanager
def concurrent_posts(url):
    """``submit(body)`` -> a future of the response of ``POST url/translate``."""
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(4) as pool, \
            httpx.Client(timeout=guards.timeout(30)) as client:
        yield lambda body: pool.submit(client.post, url + "/translate", json=body)


# --- the batcher ---------------------------------------------------------------------------
class RecordingEngine:
    """Echoes each text; records the batches; the first call waits for ``gate``."""

    def __init__(self):
        self.gate = threading.Event()
        self.batches = []

    def translate(self, texts, options, confidence=True):
        if not self.batches:
            self.gate.wait(guards.timeout(30))
        self.batches.append((list(texts), options))
        return [[{"translation": t.upper(), "score": 0.0}] for t in texts]


def test_batches_group_requests_by_option_set():
    greedy, beam = DecodingOptions(), DecodingOptions(beam_size=2)

    async def scenario():
        engine = RecordingEngine()
        batcher = Batcher(InProcessReplicas(engine), max_batch=3, wait_ms=0, queue_size=5)
        batcher.start()
        first = asyncio.ensure_future(batcher.submit(["a"], greedy))
        while batcher.in_flight == 0:
            await asyncio.sleep(0.01)
        # While the replica is busy: four greedy requests (five texts) and one beam search.
        later = [asyncio.ensure_future(batcher.submit(texts, options)) for texts, options in
                 [(["b"], greedy), (["c", "d"], greedy), (["e"], beam), (["f"], greedy),
                  (["g"], greedy)]]
        while batcher.waiting < 5:
            await asyncio.sleep(0.01)
        with pytest.raises(QueueFull):
            await batcher.submit(["x"], greedy)
        engine.gate.set()
        answers = await asyncio.gather(first, *later)
        await batcher.stop()
        return engine.batches, answers

    batches, answers = asyncio.run(scenario())
    assert answers[2] == [[{"translation": "C", "score": 0.0}], [{"translation": "D",
                                                                  "score": 0.0}]]
    # Oldest group first, whole requests up to max_batch texts, options never mixed.
    assert [(texts, options.beam_size) for texts, options in batches] == [
        (["a"], 1), (["b", "c", "d"], 1), (["e"], 2), (["f", "g"], 1)]


def test_a_request_that_timed_out_in_the_queue_is_never_decoded():
    async def scenario():
        engine = RecordingEngine()
        batcher = Batcher(InProcessReplicas(engine), max_batch=4, wait_ms=0)
        batcher.start()
        first = asyncio.ensure_future(batcher.submit(["a"], DecodingOptions()))
        while batcher.in_flight == 0:
            await asyncio.sleep(0.01)
        with pytest.raises(asyncio.TimeoutError):
            await batcher.submit(["late"], DecodingOptions(beam_size=2), timeout=0.05)
        assert batcher.waiting == 0
        engine.gate.set()
        await first
        await batcher.submit(["b"], DecodingOptions())
        await batcher.stop()
        return engine.batches

    assert [texts for texts, _ in asyncio.run(scenario())] == [["a"], ["b"]]


def test_parse_fields_maps_alternatives_to_the_beam():
    request = api.parse_fields({"q": "x", "alternatives": 3, **BODY}, ("dates", "iso"))
    assert (request.options.beam_size, request.options.num_hypotheses) == (4, 4)
    request = api.parse_fields({"q": "x", "alternatives": "2", "beam_size": "6", **BODY},
                               ("dates", "iso"), form=True)
    assert (request.options.beam_size, request.options.num_hypotheses) == (6, 3)


# --- the process: SIGTERM, the CLI, the CTranslate2 engine -----------------------------------
@pytest.mark.slow  # starts a keras-attn process (~25 s on a loaded 2-core machine)
def test_sigterm_answers_the_request_in_flight_then_exits(tmp_path):
    log_path = tmp_path / "serve.log"
    with serve_process([EXPORTED, "--replicas", "1", "--threads", "1"], log_path,
                       seconds=20) as (url, proc):
        texts = DATES * 20
        with concurrent_posts(url) as submit:
            future = submit({"q": texts, "beam_size": 8, "num_hypotheses": 8, **BODY})
            wait_until(lambda: in_flight(url) == 1, "the request to be decoded")
            proc.send_signal(signal.SIGTERM)
            response = future.result()
        assert response.status_code == 200, response.text
        assert len(response.json()["translatedText"]) == len(texts)
        # uvicorn re-raises the signal once it has shut down: the status of a process
        # stopped by SIGTERM (0 if it is ever caught), never a crash.
        assert proc.wait(guards.timeout(10)) in (0, -signal.SIGTERM)
    assert "Traceback" not in log_path.read_text()


@pytest.fixture(scope="module")
def ct2_run(tmp_path_factory):
    """A copy of exported/run with its CTranslate2 export in RUN/export/ctranslate2."""
    from keras_attn.export.ctranslate2 import export_ctranslate2

    run_dir = tmp_path_factory.mktemp("ct2") / "run"
    shutil.copytree(os.path.join(EXPORTED, "run"), run_dir)
    export_ctranslate2(str(run_dir), log=lambda *a: None)
    return str(run_dir)


@pytest.mark.kernels
@pytest.mark.heavy  # a CTranslate2 export of the committed run
def test_the_ctranslate2_engine_gives_the_same_answers(ct2_run, server, translator):
    from keras_attn.serve.engines import load_engine

    artefact = locate(ct2_run, engine="ctranslate2")
    assert artefact.path.endswith(os.path.join("export", "ctranslate2"))
    assert (artefact.source[0], artefact.target[0]) == ("dates", "iso")
    with served(artefact, load_engine(artefact, threads=1)) as (url, _):
        ours = post(server, json={"q": DATES, **BODY}).json()
        theirs = post(url, json={"q": DATES, **BODY}).json()
        assert theirs == ours == {"translatedText": translator.translate(DATES)}
        prefixed = {"q": DATES, "target_prefix": "19", **BODY}
        assert post(url, json=prefixed).json() == post(server, json=prefixed).json()
        # Beam search is CTranslate2's own algorithm (keras_attn.export.ctranslate2): the
        # best hypotheses agree on most sentences; alternatives are there.
        body = post(url, json={"q": DATES, "alternatives": 2, **BODY}).json()
        assert all(len(alternatives) == 2 for alternatives in body["alternatives"])
        # No alignments: the text between any two tags is translated on its own.
        fragment = "<p>3 March 2021 <b>le 4 juillet 1999</b></p>"
        out = post(url, json={"q": fragment, "format": "html", **BODY}).json()
        assert out["translatedText"] == "<p>{} <b>{}</b></p>".format(
            *translator.translate(["3 March 2021", "le 4 juillet 1999"]))
        for field in ("sampling_topk", "return_alignments"):
            value = 5 if field == "sampling_topk" else True
            response = post(url, json={"q": "x", field: value, **BODY})
            assert response.status_code == 400 and f"`{field}`" in response.json()["error"]
        good(url)


def test_locate_names_what_is_missing(tmp_path):
    with pytest.raises(FileNotFoundError, match="ctranslate2"):
        locate(EXPORTED, engine="ctranslate2")
    with pytest.raises(FileNotFoundError, match="not a directory"):
        locate(tmp_path / "nothing")
    with pytest.raises(ValueError, match="engine"):
        locate(EXPORTED, engine="tflite")
    assert locate(os.path.join(EXPORTED, "run")).path == locate(EXPORTED).path


@pytest.mark.slow
def test_replicas_end_with_their_parent():
    """Worker processes ignore SIGTERM (the parent shuts down gracefully and closes them);
    a parent killed outright must not leave them behind."""
    code = ("import time\nfrom keras_attn.serve.locate import locate\n"
            "from keras_attn.serve.replicas import ProcessReplicas\n"
            f"pool = ProcessReplicas(locate({EXPORTED!r}), 2, 1, xla=False)\n"
            "print(pool.start(), flush=True)\ntime.sleep(600)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    try:
        pids = json.loads(proc.stdout.readline())
        assert len(pids) == 2
    finally:
        proc.kill()
        proc.wait()
    wait_until(lambda: not any(os.path.exists(f"/proc/{p}") for p in pids),
               "the replicas to exit", seconds=5)


def test_the_web_page_is_served_and_calls_the_api(server):
    response = httpx.get(server + "/")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    page = response.text
    # The page speaks the same API as every client (relative URLs, so a proxy prefix works).
    # (the browser pass, tests/serve/test_browser.py, drives these calls in Chromium).
    for call in ('"languages", "frontend/settings"', 'post("translate"',
                 'post("attention"', 'fetch("translate_file"'):
        assert call in page
    assert "confidenceCell(" in page  # a hypothesis's confidence, drawn when the answer has one
    for option in ("beam_size", "num_hypotheses", "sampling_topk", "seed", "target_prefix",
                   "return_alignments"):
        assert option in page


# --- POST /attention: the heatmap's matrix, from the run's Keras model -----------------------
def attention(url, **fields):
    return httpx.post(url + "/attention", json=fields, timeout=guards.timeout(30))


def test_attention_rows_are_distributions_over_the_source(server, translator):
    text = "le 4 juillet 1999"
    translation = translator.translate([text])[0]
    response = attention(server, q=text, translation=translation, **BODY)
    assert response.status_code == 200, response.text
    out = response.json()
    assert out["translatedText"] == translation and out["truncated"] is False
    weights = np.array(out["attention"])  # (T, S)
    assert weights.shape == (len(out["target_tokens"]), len(out["source_tokens"]))
    assert "".join(out["target_tokens"][:-1]) == translation  # characters, then [END]
    assert out["source_tokens"][-1] == out["target_tokens"][-1] == "[END]"
    assert len(out["source_words"]) == weights.shape[1]
    assert len(out["target_words"]) == weights.shape[0]
    assert (weights >= 0).all() and np.allclose(weights.sum(axis=1), 1.0, atol=1e-4)
    # The SavedModel's word alignment is this matrix's hard alignment (each target word's
    # tokens point at the source word of their most attended source token): the Keras
    # model's pass and the served graph's agree.
    src_words, tgt_words = np.array(out["source_words"]), np.array(out["target_words"])
    in_words = np.where(src_words >= 0, weights, -1.0)
    pairs = {(int(src_words[in_words[t].argmax()]), int(j)) for t, j in enumerate(tgt_words)
             if j >= 0}
    served = post(server, json={"q": text, "return_alignments": True, **BODY}).json()
    expected = {tuple(map(int, p.split("-"))) for p in
                served["hypotheses"][0]["alignment"].split()}
    assert pairs == expected


def test_attention_without_a_translation_reads_the_engines(server):
    text = "3 March 2021"
    alone = attention(server, q=text, **BODY).json()
    assert alone["translatedText"] == post(server, json={"q": text, **BODY}).json()[
        "translatedText"]
    given = attention(server, q=text, translation=alone["translatedText"]).json()
    assert given == alone


@pytest.mark.parametrize("fields, field", [
    ({"q": ["3 March 2021"]}, "`q`"), ({"translation": "x"}, "missing q"),
    ({"q": "x", "translation": 5}, "`translation`"), ({"q": "x", "target": "fr"}, "fr"),
])
def test_attention_bad_requests_are_400(server, fields, field):
    response = attention(server, **fields)
    assert response.status_code == 400, response.text
    assert field in response.json()["error"]


def test_attention_without_a_keras_model_is_501(artefact, engine, server, tmp_path):
    """No run directory known, or one without trained weights: 501, /frontend/settings
    says so (the page then hides its heatmap), and translation goes on."""
    shutil.copy(os.path.join(EXPORTED, "run", "config.json"), tmp_path / "config.json")
    for run_dir, reason in ((None, "run directory it was exported from is unknown"),
                            (str(tmp_path), "model.keras")):
        with served(dataclasses.replace(artefact, run_dir=run_dir), engine) as (url, _):
            assert frontend_settings(url)["attention"] is False
            response = attention(url, q="3 March 2021", **BODY)
            assert response.status_code == 501, response.text
            assert reason in response.json()["error"]
            good(url)
    assert frontend_settings(server)["attention"] is True  # exported/run has model.keras


# --- format=html -----------------------------------------------------------------------------
def tags_of(fragment):
    """The start and end tags of a fragment, in order, with their attributes."""
    import html.parser

    found = []

    class Collect(html.parser.HTMLParser):
        def handle_starttag(self, tag, attrs):
            found.append(("start", tag, tuple(attrs)))

        def handle_endtag(self, tag):
            found.append(("end", tag))

    Collect().feed(fragment)
    return found


def well_formed(fragment):
    stack = []
    for event in tags_of(fragment):
        if event[0] == "start" and event[1] not in ("br", "img", "hr"):
            stack.append(event[1])
        elif event[0] == "end":
            if not stack or stack.pop() != event[1]:
                return False
    return not stack


def test_markup_follows_the_alignment():
    from keras_attn.serve import markup

    segment = markup.parse("<p>Le <b>4 <i>juillet</i></b> 1999</p>")[1]
    # source words: Le 4 juillet 1999; target words: a b c
    out = markup.rebuild(segment, "a b c", "0-0 1-2 2-1 3-0")
    assert out == "a <b><i>b</i> c</b>"
    # Aligned with nothing: kept, empty, where the segment ends.
    assert markup.rebuild(segment, "a b c", "") == "a b c<b></b><i></i>"
    assert well_formed("<p>" + out + "</p>")


@pytest.mark.kernels
def test_format_html_keeps_the_markup_and_translates_the_text(server, translator):
    fragment = ('<div class="d"><p>Le <b>4 juillet</b> 1999</p><ul><li>3 March 2021</li>'
                '<li><a href="/x?a=1&amp;b=2">25/12/1999</a></li></ul><!-- note --></div>')
    body = post(server, json={"q": [fragment, "1 Jan 1900"], "format": "html", **BODY}).json()
    out = body["translatedText"][0]
    assert tags_of(out) == tags_of(fragment) and well_formed(out)
    assert "<!-- note -->" in out and 'href="/x?a=1&amp;b=2"' in out
    expected = translator.translate(["Le 4 juillet 1999", "3 March 2021", "25/12/1999",
                                     "1 Jan 1900"])
    assert f"<b>{expected[0]}</b>" in out
    assert f"<li>{expected[1]}</li>" in out and f">{expected[2]}</a>" in out
    assert body["translatedText"][1] == expected[3]


def test_default_threads_leave_a_core_to_the_http_process():
    from keras_attn.serve.server import default_threads

    assert default_threads("savedmodel", 1, cores=2) == 1
    assert default_threads("savedmodel", 1, cores=8) == 7
    assert default_threads("savedmodel", 1, cores=1) == 1
    assert default_threads("ctranslate2", 1, cores=2) == 0  # CTranslate2's own default
    assert default_threads("savedmodel", 2, cores=2) == default_threads("ctranslate2", 3) == 1


def test_engines_declare_what_they_can_do_and_nothing_asks_their_names():
    """Every engine of the registry declares its capabilities, and the refusals follow
    them; no module of serve/ or of the serve and decoding commands compares an engine's
    name (the registry is keras_attn/serve/engines.py)."""
    import glob
    import re

    from keras_attn.serve import engines

    for name, engine in engines.ENGINES.items():
        assert engine.name == name and isinstance(engine.capabilities, engines.Capabilities)
        for attribute in ("find", "max_len", "default_threads", "translate", "layout",
                          "export_flags", "quiet_imports"):
            assert hasattr(engine, attribute), (name, attribute)
    savedmodel = locate(EXPORTED)
    for able in (True, False):
        artefact = savedmodel if able else dataclasses.replace(savedmodel, engine="ctranslate2")
        for options, field in ((DecodingOptions(sampling_topk=5), "sampling_topk"),
                               (DecodingOptions(return_alignments=True), "return_alignments")):
            assert engines.ENGINES[artefact.engine].capabilities.sampling is able
            if able:
                assert engines.check_options(artefact, options) is options
            else:
                with pytest.raises(ValueError, match=f"`{field}`.*--engine savedmodel"):
                    engines.check_options(artefact, options)
    compared = re.compile(r"""(==|!=|\bin)\s*\(?["'](savedmodel|ctranslate2)["']"""
                          r"""|["'](savedmodel|ctranslate2)["']\s*(==|!=)""")
    package = os.path.join(ROOT, "keras_attn")
    paths = glob.glob(os.path.join(package, "serve", "**", "*.py"), recursive=True) + [
        os.path.join(package, "cli", name) for name in ("serve.py", "decode.py")]
    for path in paths:
        if not path.endswith(os.path.join("serve", "engines.py")):
            with open(path, encoding="utf-8") as f:
                assert not compared.search(f.read()), path
