"""Glossaries over HTTP: a request's ``glossary`` on ``/translate`` and
``/translate_file``, the server's (``--glossary``) and an API key's (stored with the keys)
merged under it, ``appliedTerms`` in the answer, bad glossaries a 400 naming the problem,
the key store's table beside LibreTranslate's and ``keras-attn serve keys glossary``.

The model is the committed tiny dates run (tests/fixtures/tiny_dates_run) as in
tests/serve/test_serve_models.py: one Keras ``Translator`` behind a recording engine per pair. On
characters a whole translation is one word: a term of the source ("March") takes it over,
which is all the routes need to show.
"""
import json
import sqlite3

import httpx
import pytest

from tests.support import guards
from tests.support.servers import running
from tests.serve.test_serve_models import RecordingEngine, artefact
from keras_attn.serve.app import Settings, create_app
from keras_attn.serve.models import Models
from keras_attn.serve.replicas import InProcessReplicas
from keras_attn.serve.store import KeyStore

from tests.support import run_fixtures

pytestmark = pytest.mark.heavy  # the tiny run's Translator traced for the module
DATE = "3 March 2021"
BODY = {"source": "en", "target": "fr"}


@pytest.fixture(scope="module")
def translator():
    from keras_attn.translator import Translator

    return Translator.from_run_dir(run_fixtures.TINY_DATES_RUN)


def serve(translator, settings=None, pairs=(("en", "fr"),)):
    engines = {pair: RecordingEngine(translator) for pair in pairs}
    models = Models([(artefact(*pair), InProcessReplicas(e)) for pair, e in engines.items()])
    return running(create_app(models, settings=settings or Settings(
        timeout=guards.timeout(30))))


def post(url, route="/translate", **kwargs):
    return httpx.post(url + route, timeout=guards.timeout(30), **kwargs)


def ok(url, **body):
    response = post(url, json={**BODY, **body})
    assert response.status_code == 200, response.text
    return response.json()


@pytest.fixture(scope="module")
def url(translator):
    with serve(translator) as address:
        yield address


def test_a_request_glossary_is_put_in_and_said(url, translator):
    plain = ok(url, q=DATE)
    assert "appliedTerms" not in plain
    got = ok(url, q=DATE, glossary={"march": "MARS"})
    assert got["translatedText"] == "MARS" and got["appliedTerms"] == {"march": "MARS"}
    # a term the text does not hold: byte-identical, nothing applied
    same = ok(url, q=DATE, glossary={"July": "JUILLET"})
    assert same["translatedText"] == plain["translatedText"] and same["appliedTerms"] == {}
    batch = ok(url, q=[DATE, "4 July 1999"], glossary={"July": "JUIL"})
    assert batch["appliedTerms"] == [{}, {"July": "JUIL"}]
    assert batch["translatedText"][1] == "JUIL"
    assert translator.translate(["4 July 1999"], glossary={"July": "JUIL"}) == ["JUIL"]
    html = ok(url, q="<p>3 <b>March</b> 2021</p>", format="html", glossary={"March": "MARS"})
    assert html["appliedTerms"] == {"March": "MARS"} and "MARS" in html["translatedText"]
    assert html["translatedText"].startswith("<p>")


def test_a_form_sends_the_glossary_as_json_text(url):
    response = post(url, data={**BODY, "q": DATE, "glossary": json.dumps({"March": "M"})})
    assert response.status_code == 200, response.text
    assert response.json()["translatedText"] == "M"


@pytest.mark.parametrize("glossary, says", [
    ("March", "object"),
    (["March", "M"], "object"),
    ({"March": 3}, "strings"),
    ({"March": " "}, "empty target term"),
    ({"a" * 201: "b"}, "at most 200 characters"),
    ({f"t{k}": "x" for k in range(1001)}, "at most 1000 terms"),
    ({"March": "M", "march": "N"}, "two targets"),
])
def test_a_bad_glossary_is_a_400_naming_it(url, glossary, says):
    response = post(url, json={**BODY, "q": DATE, "glossary": glossary})
    assert response.status_code == 400
    assert "`glossary`" in response.json()["error"] and says in response.json()["error"]


def test_server_key_and_request_glossaries_merge_the_request_winning(translator, tmp_path):
    keys = KeyStore(tmp_path / "keys.db")
    key = keys.add(-1)
    keys.set_glossary(key, {"March": "KEY", "July": "KEY"})
    keys.set_glossary(key, {"1999": "KEYPAIR"}, "en-fr")
    settings = Settings(api_keys=keys, timeout=guards.timeout(30),
                        glossaries={None: (("March", "SERVER"), ("July", "SERVER")),
                                    ("en", "fr"): (("Wed", "WED"),)})
    with serve(translator, settings) as address:
        assert ok(address, q=DATE)["translatedText"] == "SERVER"
        assert ok(address, q="Wed, 3 Mar 2021")["appliedTerms"] == {"Wed": "WED"}
        assert ok(address, q=DATE, api_key=key)["translatedText"] == "KEY"
        assert ok(address, q="4 July 1999", api_key=key)["appliedTerms"] == {
            "July": "KEY", "1999": "KEYPAIR"}
        got = ok(address, q=DATE, api_key=key, glossary={"march": "MINE"})
        assert (got["translatedText"], got["appliedTerms"]) == ("MINE", {"march": "MINE"})


def test_a_glossary_needs_one_model_not_a_pivot(translator):
    settings = Settings(timeout=guards.timeout(30), glossaries={("en", "fr"): (("March",
                                                                               "HOP"),)})
    with serve(translator, settings, (("en", "fr"), ("fr", "de"))) as address:
        response = post(address, json={"source": "en", "target": "de", "q": DATE,
                                       "glossary": {"March": "M"}})
        assert response.status_code == 400 and "pivot" in response.json()["error"]
        # the server's glossary of a hop still applies to that hop
        hop = ok(address, q=DATE)
        assert hop["translatedText"] == "HOP"
        assert ok(address, q=DATE, target="de").get("pivot") == "fr"


def test_a_file_is_translated_with_the_glossary(url):
    response = post(url, "/translate_file", data={**BODY, "glossary": json.dumps(
        {"March": "MARS"})}, files={"file": ("dates.txt", f"{DATE}\n4 July 1999\n".encode())})
    assert response.status_code == 200, response.text
    download = httpx.get(response.json()["translatedFileUrl"], timeout=guards.timeout(30))
    lines = download.text.splitlines()
    assert lines[0] == "MARS" and lines[1] != "MARS"
    bad = post(url, "/translate_file", data={**BODY, "glossary": "{\"March\": \"\"}"},
               files={"file": ("dates.txt", DATE.encode())})
    assert bad.status_code == 400 and "`glossary`" in bad.json()["error"]


def test_the_spec_lists_the_glossary_field(url):
    spec = httpx.get(url + "/spec", timeout=guards.timeout(30)).json()
    for route in ("/translate", "/translate_file"):
        content = spec["paths"][route]["post"]["requestBody"]["content"]
        for media, body in content.items():
            field = body["schema"]["properties"]["glossary"]
            assert field["type"] == ("object" if media == "application/json" else "string")
    answer = spec["paths"]["/translate"]["post"]["responses"]["200"]["content"]
    assert "appliedTerms" in answer["application/json"]["schema"]["properties"]


def test_key_glossaries_live_beside_libretranslates_table(tmp_path, capsys):
    """LibreTranslate reads its api_keys table as it wrote it; ours is another table; the
    command sets, shows and removes a key's terms."""
    from keras_attn import cli

    db = tmp_path / "keys.db"
    path = tmp_path / "g.tsv"
    path.write_text("March\tMARS\nTom\tTom\n", "utf-8")
    flags = ["--api-keys-db-path", str(db)]
    assert cli.main(["serve", "keys", "add", "60", "k1", *flags]) == 0
    assert cli.main(["serve", "keys", "glossary", "set", "k1", str(path), *flags]) == 0
    assert cli.main(["serve", "keys", "glossary", "set", "k1", str(path), "en-fr", *flags]) == 0
    capsys.readouterr()
    assert cli.main(["serve", "keys", "glossary", "show", "k1", *flags]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "*\tMarch\tMARS", "*\tTom\tTom", "en-fr\tMarch\tMARS", "en-fr\tTom\tTom"]
    with sqlite3.connect(db) as con:  # LibreTranslate's query and schema
        assert con.execute("SELECT api_key, req_limit, char_limit FROM api_keys").fetchall() \
            == [("k1", 60, None)]
        columns = [row[1] for row in con.execute("PRAGMA table_info(api_keys)")]
        assert columns == ["api_key", "req_limit", "char_limit"]
    assert cli.main(["serve", "keys", "glossary", "remove", "k1", "en-fr", *flags]) == 0
    assert KeyStore(db).glossaries("k1") == {"": (("March", "MARS"), ("Tom", "Tom"))}
    with pytest.raises(ValueError, match="no such key"):
        KeyStore(db).set_glossary("k2", {"a": "b"})
    assert cli.main(["serve", "keys", "remove", "k1", *flags]) == 0
    assert KeyStore(db).glossaries("k1") == {}
