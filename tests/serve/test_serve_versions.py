"""New model versions served live, as TF Serving serves them (keras_attn.serve.versions):
which version folder is complete, the swap under requests that keep coming (none fails),
TF Serving's model status JSON at ``GET /v1/models/{name}``, and the whole path through
``keras-attn serve`` with a version copied beside the serving one; and a replica process
killed under load replaced, failing only the batch it held."""
import asyncio
import json
import os
import shutil
import signal
import threading
import time

import httpx
import pytest

from tests.support import guards
from tests.support.servers import running, serve_process, wait_until
from keras_attn.decoding.options import DecodingOptions
from keras_attn.serve.app import Settings, create_app
from keras_attn.serve.engines import CTranslate2Engine
from keras_attn.serve.locate import Artefact
from keras_attn.serve.models import Models
from keras_attn.serve.replicas import InProcessReplicas
from keras_attn.serve.versions import Versions, Watcher, artefact_of

from tests.support import ROOT
EXPORTED = os.path.join(ROOT, "exported")
BODY = {"source": "dates", "target": "iso"}


def version(base, number, files=("saved_model.pb", "variables/variables.index")):
    folder = base / str(number)
    for name in files:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(b"x")
    return folder


def artefact(path, pair=("dates", "iso"), engine="savedmodel"):
    return Artefact(engine, str(path), 24, (pair[0], pair[0]), (pair[1], pair[1]))


@pytest.fixture
def base(tmp_path):
    folder = tmp_path / "translator"
    version(folder, 1)
    return folder


# --- which version: complete and still ------------------------------------------------------
def test_a_version_is_taken_once_complete_and_still_for_two_looks(base):
    versions = Versions("translator", artefact(base / "1"), "savedmodel")
    assert (versions.base, versions.serving) == (str(base), 1)
    version(base, 2, files=("saved_model.pb",))  # half written: no variables yet
    (base / "3.tmp").mkdir()                      # not a number: never a version
    for _ in range(3):
        assert versions.wanted() is None
    version(base, 2, files=("variables/variables.index",))
    assert versions.wanted() is None              # complete, seen once
    (base / "2" / "variables" / "variables.data-00000-of-00001").write_bytes(b"growing")
    assert versions.wanted() is None              # still being written
    assert versions.wanted() == (2, str(base / "2"))


def test_a_version_that_failed_waits_for_its_files_to_change(base):
    versions = Versions("translator", artefact(base / "1"), "savedmodel")
    version(base, 2)
    versions.wanted()
    assert versions.wanted() == (2, str(base / "2"))
    versions.failed(2, "ValueError: not a SavedModel")
    assert versions.wanted() is None and versions.wanted() is None
    (base / "2" / "saved_model.pb").write_bytes(b"fixed, longer")
    versions.wanted()
    assert versions.wanted() == (2, str(base / "2"))


def test_a_lower_version_is_served_only_when_the_serving_one_is_removed(base):
    """TF Serving's latest policy: the highest version on disk; removing a bad version 2
    rolls back to 1."""
    version(base, 2)
    versions = Versions("translator", artefact(base / "2"), "savedmodel")
    versions.wanted()
    assert versions.wanted() is None              # 1 is lower: 2 stays
    shutil.rmtree(base / "2")
    versions.wanted()
    assert versions.wanted() == (1, str(base / "1"))


def test_the_status_is_tf_servings_model_status(base):
    versions = Versions("translator", artefact(base / "1"), "savedmodel")
    assert versions.status() == [{"version": "1", "state": "AVAILABLE", "status": {
        "error_code": "OK", "error_message": ""}}]
    versions.set(2, "LOADING")
    versions.failed(3, "ValueError: broken")
    assert [(s["version"], s["state"], s["status"]["error_code"]) for s in versions.status()] \
        == [("3", "END", "UNKNOWN"), ("2", "LOADING", "OK"), ("1", "AVAILABLE", "OK")]
    assert versions.status(7) == []
    unversioned = Versions("ctranslate2", artefact(base, engine="ctranslate2"), "ctranslate2")
    assert unversioned.base is None and unversioned.wanted() is None
    assert unversioned.status()[0]["version"] == "0"


def test_a_version_of_another_pair_is_refused(base):
    serving = artefact(base / "1")
    version(base, 2)
    meta = base / "2" / "assets.extra"
    meta.mkdir()
    (meta / "keras_attn.json").write_text(json.dumps({"languages": {
        "source": {"code": "en", "name": "English"},
        "target": {"code": "fr", "name": "French"}}}))
    with pytest.raises(ValueError, match="translates en -> fr, not dates -> iso"):
        artefact_of(serving, str(base / "2"))
    assert artefact_of(serving, str(base / "1")).path == str(base / "1")


def test_ctranslate2_versions_are_numbered_folders_too(tmp_path):
    base = tmp_path / "ct2"
    for number in (1, 3):
        version(base, number, files=("model.bin", "keras_attn.json"))
    version(base, 4, files=("model.bin",))  # not complete
    assert CTranslate2Engine.find(str(base)) == str(base / "3")
    assert CTranslate2Engine.find(str(base / "3")) == str(base / "3")


# --- the swap, under requests that keep coming ----------------------------------------------
class Tagged:
    """An engine answering ``tag:text``; ``hold`` keeps a batch in flight until set."""

    def __init__(self, tag):
        self.tag, self.hold, self.held = tag, threading.Event(), threading.Event()
        self.hold.set()

    def translate(self, texts, options, confidence=True):
        self.held.set()
        self.hold.wait(guards.timeout(30))
        return [[{"translation": f"{self.tag}:{t}", "score": 0.0}] for t in texts]


class Closing(InProcessReplicas):
    def __init__(self, engine):
        super().__init__(engine)
        self.closed = False

    def close(self):
        super().close()
        self.closed = True


def test_a_new_version_takes_over_without_a_failed_request(base):
    """A batch held by version 1 during the swap is answered by version 1; every request
    after the swap by version 2; version 1 is closed only once its batch is answered."""
    version(base, 2)
    old, new = Tagged("v1"), Tagged("v2")
    old_replicas = Closing(old)
    made = []

    def make(a):
        made.append(a.path)
        return Closing(new)

    models = Models([(artefact(base / "1"), old_replicas)], make=make, log=lambda m: None)
    model = models.first
    watcher = Watcher(models, 0.01, log=lambda m: None)

    async def scenario():
        models.start()
        old.hold.clear()
        held = asyncio.ensure_future(model.batcher.submit(["a"], DecodingOptions()))
        await asyncio.to_thread(old.held.wait, guards.timeout(10))
        loading = asyncio.ensure_future(watcher.load(model, 2, str(base / "2")))
        while model.versions.serving != 2:
            await asyncio.sleep(0.01)
        after = await model.batcher.submit(["b"], DecodingOptions())  # version 2 answers
        assert not loading.done() and not old_replicas.closed  # v1 still holds "a"
        assert [s["state"] for s in model.versions.status()] == ["AVAILABLE", "UNLOADING"]
        old.hold.set()
        await loading
        answers = (await held, after)
        await models.stop()
        return answers

    held, after = asyncio.run(scenario())
    assert held[0][0]["translation"] == "v1:a" and after[0][0]["translation"] == "v2:b"
    assert made == [str(base / "2")] and old_replicas.closed
    assert model.replicas.engine is new and model.artefact.path == str(base / "2")
    assert [(s["version"], s["state"]) for s in model.versions.status()] == [
        ("2", "AVAILABLE"), ("1", "END")]


def test_a_version_that_fails_to_load_leaves_the_serving_one(base):
    version(base, 2)
    old = Tagged("v1")

    def make(a):
        raise ValueError("the SavedModel at '2': no signature")

    models = Models([(artefact(base / "1"), InProcessReplicas(old))], make=make,
                    log=lambda m: None)

    async def scenario():
        models.start()
        await Watcher(models, 0.01, log=lambda m: None).load(models.first, 2, str(base / "2"))
        answer = await models.first.batcher.submit(["a"], DecodingOptions())
        await models.stop()
        return answer

    assert asyncio.run(scenario())[0][0]["translation"] == "v1:a"
    status = models.first.versions.status()
    assert (status[0]["version"], status[0]["state"], status[0]["status"]["error_code"]) == (
        "2", "END", "UNKNOWN") and "no signature" in status[0]["status"]["error_message"]
    assert status[1]["state"] == "AVAILABLE"


def test_the_model_routes_answer_as_tf_serving(base):
    models = Models([(artefact(base / "1"), InProcessReplicas(Tagged("v1"))),
                     (artefact(base.parent / "other" / "translator" / "1", ("iso", "dates")),
                      InProcessReplicas(Tagged("w1")))], log=lambda m: None)
    assert list(models.by_name) == ["translator-dates-iso", "translator-iso-dates"]
    single = Models([(artefact(base / "1"), InProcessReplicas(Tagged("v1")))])
    assert list(single.by_name) == ["translator"]
    with running(create_app(single, settings=Settings(url_prefix="/lt"))) as url:
        get = lambda path: httpx.get(url + "/lt" + path, timeout=guards.timeout(10))  # noqa: E731
        assert get("/v1/models/translator").json() == {"model_version_status": [
            {"version": "1", "state": "AVAILABLE",
             "status": {"error_code": "OK", "error_message": ""}}]}
        assert get("/v1/models/translator/versions/1").json()["model_version_status"][0][
            "version"] == "1"
        assert get("/v1/models").json()["models"][0] == {
            "name": "translator", "source": "dates", "target": "iso", "engine": "savedmodel",
            "model_version_status": single.first.versions.status()}
        missing = get("/v1/models/nope")
        assert missing.status_code == 404
        assert missing.json()["error"].startswith("Could not find any versions of model nope")
        assert get("/v1/models/translator/versions/2").status_code == 404
        assert get("/v1/models/translator/versions/x").status_code == 404


# --- end to end: keras-attn serve, a version copied beside the serving one -------------------
@pytest.mark.slow  # keras-attn serve in a process of its own, two versions loaded (~1 min)
def test_a_version_copied_beside_is_served_live_without_a_failed_request(tmp_path):
    """``cp -r 1 2`` beside the serving version while a client sends requests: version 2 is
    AVAILABLE and 1 END at ``/v1/models/translator``, every request answered 200 with the
    right translation; a half-written version 3 (no variables) is never picked up; a
    broken version 4 is reported END with its error and 2 keeps serving."""
    export = tmp_path / "exported"
    shutil.copytree(os.path.join(EXPORTED, "saved_model"), export / "saved_model")
    shutil.copytree(os.path.join(EXPORTED, "run"), export / "run")
    base = export / "saved_model" / "translator"
    poll = 0.5
    with serve_process([export, "--file-system-poll-wait-seconds", poll],
                       tmp_path / "serve.log") as (url, _):
        log = (tmp_path / "serve.log").read_text()
        assert f"model translator: dates -> iso, version 1 (new versions in {base}" in log
        assert httpx.get(url + "/v1/models").json()["models"][0]["name"] == "translator"
        answers, stop = [], threading.Event()

        def client():
            with httpx.Client(timeout=guards.timeout(30)) as session:
                while not stop.is_set():
                    r = session.post(url + "/translate", json={"q": "3 March 2021", **BODY})
                    answers.append((r.status_code, r.json().get("translatedText")))

        def states():
            return {s["version"]: (s["state"], s["status"]["error_code"]) for s in httpx.get(
                url + "/v1/models/translator", timeout=guards.timeout(10)).json()[
                    "model_version_status"]}

        thread = threading.Thread(target=client)
        thread.start()
        try:
            (base / "3").mkdir()
            shutil.copy(base / "1" / "saved_model.pb", base / "3")  # half written
            shutil.copytree(base / "1", base / "2")
            wait_until(lambda: states() == {"2": ("AVAILABLE", "OK"), "1": ("END", "OK")},
                       "version 2 to serve", seconds=120)
            time.sleep(4 * poll)  # more looks: the half-written 3 stays unseen
            assert "3" not in states()
            version(base, 4)  # complete by its files, not a SavedModel
            wait_until(lambda: states().get("4") == ("END", "UNKNOWN"), "version 4's failure",
                       seconds=60)
            assert states()["2"] == ("AVAILABLE", "OK")
            count = len(answers)
            wait_until(lambda: len(answers) > count + 5, "answers after the failure")
        finally:
            stop.set()
            thread.join(guards.timeout(30))
        log = (tmp_path / "serve.log").read_text()
    assert answers and set(answers) == {(200, "2021-03-03")}, set(answers)
    assert "model translator: version 2 serving; version 1 unloaded" in log
    assert "version 4 failed to load, version 2 stays" in log


# --- a replica process killed under load ----------------------------------------------------
@pytest.mark.slow  # two worker processes load the committed SavedModel (~30 s)
def test_a_killed_replica_is_replaced_and_fails_only_the_batch_it_held():
    from keras_attn.serve.locate import locate
    from keras_attn.serve.replicas import ProcessReplicas, ReplicaLost

    logged = []
    pool = ProcessReplicas(locate(EXPORTED), 2, 1, log=logged.append)
    pids = pool.start()
    long_batch = ["3 March 2021"] * 4000  # held for seconds by one worker
    beam = DecodingOptions(beam_size=4)

    async def scenario():
        held = asyncio.ensure_future(pool.translate(long_batch, beam, False))
        await asyncio.sleep(0.5)  # the long batch is on a worker (the first idle one)
        os.kill(pids[0], signal.SIGKILL)
        others = [await pool.translate(["25/12/1999"], DecodingOptions(), False)
                  for _ in range(20)]  # the other worker answers meanwhile
        outcome = await asyncio.gather(held, return_exceptions=True)
        while pool.replaced < 1:
            await asyncio.sleep(0.1)
        after = await asyncio.gather(*[pool.translate(["1 Jan 1900"], DecodingOptions(),
                                                      False) for _ in range(4)])
        return outcome[0], others, after

    try:
        held, others, after = asyncio.run(scenario())
    finally:
        pool.close()
    assert isinstance(held, ReplicaLost), held
    assert all(o[0][0]["translation"] == "1999-12-25" for o in others)
    assert all(a[0][0]["translation"] == "1900-01-01" for a in after)
    assert pool.pids[0] != pids[0] and pool.pids[1] == pids[1]
    assert any(f"replica process {pids[0]} stopped" in line for line in logged)
