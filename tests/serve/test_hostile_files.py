"""Hostile and malformed files for ``POST /translate_file`` (keras_attn.serve.untrusted):
the corpus of tests/support/hostile_files.py (made at test time, KB each), each refused with a 4xx
naming why or translated, nothing read from a file or the network that a document names,
nothing written outside the server's folders, memory within the bound docs/serving.md
gives, and the server answering others meanwhile.

The fast tests read each file through ``keras_attn.serve.files`` with a stand-in
translation; the slow ones send it to a real server over HTTP (a few are in CI's smoke
pass: tests/conftest.py SMOKE)."""
import asyncio
import contextlib
import http.server
import io
import os
import threading
import time
import zipfile

import httpx
import pytest

from tests.support import guards
from tests.support import hostile_files
# module fixtures: the committed model
from tests.serve.test_serve import artefact, engine  # noqa: F401
from keras_attn.serve import files, untrusted

SECRET = "SECRET-8a1f-never-in-an-answer"


class Listener:
    """An HTTP server on loopback counting the requests it gets (none may come)."""

    def __init__(self):
        hits = self.hits = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                hits.append(self.path)
                self.send_response(200)
                self.end_headers()
                self.wfile.write(b'<!ENTITY leak "LEAKED">')

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def listener():
    found = Listener()
    yield found
    found.close()


@pytest.fixture(scope="module")
def secret(tmp_path_factory):
    path = tmp_path_factory.mktemp("secret") / "secret.txt"
    path.write_text(SECRET, encoding="utf-8")
    return str(path)


@pytest.fixture(scope="module")
def cases(secret, listener):
    return hostile_files.corpus(secret, listener.url)


NAMES = tuple(hostile_files.corpus("/nonexistent", "http://127.0.0.1:9"))


def test_the_corpus_holds_forty_files_across_the_formats(cases):
    by_format = {}
    for case in cases.values():
        ext = os.path.splitext(case.filename)[1] or "none"
        by_format[ext] = by_format.get(ext, 0) + 1
    assert len(cases) >= 40
    assert all(by_format.get(ext, 0) >= 5 for ext in (".txt", ".html", ".docx", ".odt")), \
        by_format
    refused = [c for c in cases.values() if c.status >= 400]
    assert len(refused) >= 40 and {c.status for c in refused} == {400, 413}
    assert max(len(c.data) for c in cases.values()) < 1_000_000  # under --max-body-bytes


async def _identity(texts):
    return list(texts)


def _read(case):
    return asyncio.run(files.translate_file(case.filename, case.data, _identity, _identity))


@pytest.mark.parametrize("name", NAMES)
def test_each_file_gets_its_answer(name, cases, listener):
    case = cases[name]
    if case.status == 200:
        out = _read(case)
        assert SECRET.encode() not in out and b"LEAKED" not in out
        assert len(out) <= 2 * len(case.data) + 2000  # nothing expanded
    else:
        with pytest.raises(ValueError) as refused:
            _read(case)
        assert case.words in str(refused.value), str(refused.value)
        status = getattr(refused.value, "status", 400)  # "not supported": a plain 400
        assert status == case.status, str(refused.value)
    assert listener.hits == []  # no DTD, entity or include was fetched


def _archive(members):
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, content in members:
            archive.writestr(name, content)
    return zipfile.ZipFile(io.BytesIO(out.getvalue()))


def test_a_member_is_refused_while_it_is_read_not_after(monkeypatch):
    """Past the limit, reading stops within one chunk: the member is never read whole."""
    archive = _archive([("big.bin", b"\0" * 2**20)])
    monkeypatch.setattr(untrusted, "MAX_MEMBER_BYTES", 100_000)
    monkeypatch.setattr(untrusted, "CHUNK_BYTES", 10_000)
    read = []
    opened = archive.open

    def counting(name):
        member = opened(name)
        original = member.read

        def chunk(n=-1):
            assert n > 0, "a member must be read in chunks"
            data = original(n)
            read.append(len(data))
            return data

        member.read = chunk
        return member

    monkeypatch.setattr(archive, "open", counting)
    with pytest.raises(untrusted.Refused) as refused:
        untrusted.read_member(archive, "big.bin")
    assert refused.value.status == 413 and "inflates past" in str(refused.value)
    assert sum(read) <= 100_000 + 10_000


def test_the_whole_archive_is_counted_while_it_is_read():
    archive = _archive([("a.bin", b"a" * 60_000), ("b.bin", b"b" * 60_000)])
    contents = []
    with pytest.raises(untrusted.Refused) as refused:
        budget = 100_000
        for name in ("a.bin", "b.bin"):
            contents.append(untrusted.read_member(archive, name, budget))
            budget -= len(contents[-1])
    assert refused.value.status == 413 and len(contents) == 1


def test_the_xml_parser_resolves_nothing(secret, listener):
    """lxml's own settings, apart from the DTD refusal: an entity stays a reference, an
    external DTD is never fetched."""
    from lxml import etree

    parser = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False,
                             huge_tree=False)
    entity = f'<!DOCTYPE d [<!ENTITY x SYSTEM "file://{secret}">]><d>&x;</d>'.encode()
    assert SECRET.encode() not in etree.tostring(etree.fromstring(entity, parser))
    dtd = f'<!DOCTYPE d SYSTEM "{listener.url}/x.dtd"><d>a</d>'.encode()
    etree.fromstring(dtd, parser)
    assert listener.hits == []
    with pytest.raises(untrusted.Refused, match="declares a DTD"):
        untrusted.parse_xml(entity, "x.xml")


# --- over HTTP, a real server ---------------------------------------------------------------
@pytest.fixture(scope="module")
def http_server(artefact, engine, tmp_path_factory):  # noqa: F811  (test_serve's fixtures)
    from tests.serve.test_serve import served

    folder = tmp_path_factory.mktemp("served")
    with served(artefact, engine, files_dir=str(folder / "files")) as (url, app):
        yield url, folder


FIELDS = {"source": "dates", "target": "iso"}


def send(url, case):
    return httpx.post(url + "/translate_file", data=FIELDS, timeout=guards.timeout(30),
                      files={"file": (case.filename, case.data)})


@pytest.mark.heavy  # a real server over the committed model
@pytest.mark.parametrize("name", NAMES)
def test_the_server_answers_it_over_http(name, cases, http_server, listener):
    url, _ = http_server
    case = cases[name]
    response = send(url, case)
    assert response.status_code == case.status, response.text
    if case.status == 200:
        download = httpx.get(response.json()["translatedFileUrl"], timeout=guards.timeout(30))
        assert download.status_code == 200 and SECRET.encode() not in download.content
    else:
        assert response.headers["content-type"] == "application/json"
        assert case.words in response.json()["error"], response.json()
    assert listener.hits == []
    assert httpx.get(url + "/health", timeout=guards.timeout(5)).status_code == 200


@pytest.mark.heavy
def test_the_server_answers_others_while_hostile_files_arrive(cases, http_server):
    """A client translating and asking /health all along gets only 200s while the whole
    corpus is sent (the archives are read in worker threads)."""
    url, _ = http_server
    statuses, stop = [], threading.Event()

    def other_client():
        with httpx.Client(timeout=guards.timeout(30)) as client:
            while not stop.is_set():
                statuses.append(client.get(url + "/health").status_code)
                statuses.append(client.post(url + "/translate", json={
                    "q": hostile_files.PARAGRAPH, **FIELDS}).status_code)

    thread = threading.Thread(target=other_client)
    thread.start()
    try:
        answered = [send(url, case).status_code for case in cases.values()]
    finally:
        stop.set()
        thread.join(guards.timeout(30))
    assert answered == [case.status for case in cases.values()]
    assert statuses and set(statuses) == {200}


@pytest.mark.heavy
def test_nothing_is_written_outside_the_servers_folders(cases, http_server, monkeypatch,
                                                        tmp_path):
    """The working folder and the temporary folder stay empty, the downloads' folder holds
    one file per translated upload, and no name a file gives (``../../escape.txt``, a
    member ``../../evil.txt``) is written anywhere."""
    import tempfile

    url, folder = http_server
    work, scratch = tmp_path / "work" / "a" / "b", tmp_path / "scratch"
    work.mkdir(parents=True)
    scratch.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    before = set(os.listdir(folder / "files"))
    accepted = sum(send(url, case).status_code == 200 for case in cases.values())
    written = set(os.listdir(folder / "files")) - before
    assert len(written) == accepted == sum(c.status == 200 for c in cases.values())
    assert all(".." not in name and "/" not in name for name in written)
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []
    assert not any(p.name in ("escape.txt", "evil.txt") for p in folder.parent.rglob("*"))


# --- memory and time, the server in its own process ------------------------------------------
@contextlib.contextmanager
def peak_rss(pid, every=0.02):
    """``{"peak": bytes}`` of the process tree's resident memory, sampled in a thread."""
    import psutil

    found, stop = {"peak": 0}, threading.Event()

    def sample():
        while not stop.is_set():
            with contextlib.suppress(psutil.NoSuchProcess):
                parent = psutil.Process(pid)
                total = sum(p.memory_info().rss for p in [parent, *parent.children(True)])
                found["peak"] = max(found["peak"], total)
            time.sleep(every)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield found
    finally:
        stop.set()
        thread.join()


BOUND_MB = 300
BOUND_S = 30
HEAVIEST = ("docx-member-declares-2GiB", "odt-billion-laughs", "docx-external-entity-file",
            "docx-external-entity-http", "docx-member-inflates-past-limit",
            "docx-quadratic-blowup", "docx-tag-flood", "html-inline-tag-flood",
            "docx-near-every-limit")


@pytest.mark.slow  # starts keras-attn serve in a process of its own (~20 s)
def test_the_worst_files_stay_within_the_memory_and_time_bounds(cases, tmp_path):
    """Each answered in under 30 s with the server's resident memory under 300 MB above
    what it held before, and /health answered after: the hostile ones, and the largest
    document the limits let through (a 15 MiB document member of 130,000 elements: the
    bound docs/serving.md gives is this one's)."""
    from tests.support.servers import serve_process
    from tests.serve.test_serve import EXPORTED

    with serve_process([EXPORTED, "--files-dir", tmp_path / "files"],
                       tmp_path / "serve.log") as (url, proc):
        send(url, cases["txt-name-escapes"])  # a first file: the route's imports done
        for name in HEAVIEST:
            with peak_rss(proc.pid) as before:
                time.sleep(0.2)
            started = time.monotonic()
            with peak_rss(proc.pid) as during:
                response = send(url, cases[name])
            seconds = time.monotonic() - started
            grown = (during["peak"] - before["peak"]) / 2**20
            print(f"{name}: {response.status_code} in {seconds:.1f} s, {grown:+.0f} MB")
            assert response.status_code == cases[name].status, (name, response.text)
            assert seconds < BOUND_S, (name, seconds)
            assert grown < BOUND_MB, (name, round(grown))
            assert httpx.get(url + "/health", timeout=guards.timeout(5)).status_code == 200
