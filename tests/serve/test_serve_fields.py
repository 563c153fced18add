"""The answer's fields over HTTP: one multi-sentence text, n-best, through ``POST /translate`` of the
SavedModel engine and of the CTranslate2 engine of the committed run, as plain text and as
``format=html``: every hypothesis of every answer holds the same fields with the same
types (keras_attn.translation.pipeline.join_documents makes them all, HTML's too), and an
HTML answer means what its text's does (docs/documents.md, "A document's answer")."""
import os
import re
import shutil

import pytest

from tests.support import guards

from tests.support import ROOT
EXPORTED = os.path.join(ROOT, "exported")
TEXT = "3 March 2021. Le 4 juillet 1999"
BODY = {"source": "dates", "target": "iso", "alternatives": 1, "return_scores": True}
FORMATS = {"text": TEXT, "html": "<p>3 March 2021. Le <b>4 juillet</b> 1999</p>"}

pytestmark = [pytest.mark.skipif(not os.path.isdir(os.path.join(EXPORTED, "saved_model")),
                                 reason="exported/ (the committed default model) is missing"),
              pytest.mark.heavy]  # loads the SavedModel, exports and loads CTranslate2


def fields(value):
    """A JSON value's shape: a dict's names with their values' shapes, a list's items'."""
    if isinstance(value, dict):
        return {name: fields(v) for name, v in value.items()}
    if isinstance(value, list):
        return [fields(v) for v in value]
    return type(value).__name__


def answers(artefact, engine):
    """Per format, the JSON answer of the server over ``engine``."""
    from starlette.testclient import TestClient

    from keras_attn.serve.app import Settings, create_app
    from keras_attn.serve.replicas import InProcessReplicas

    app = create_app(artefact, InProcessReplicas(engine), Settings(timeout=guards.timeout(60)))
    with TestClient(app) as client:
        out = {}
        for name, q in FORMATS.items():
            response = client.post("/translate", json={**BODY, "q": q, "format": name})
            assert response.status_code == 200, response.text
            out[name] = response.json()
    return out


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """``{(engine, format): answer}``: the committed SavedModel and a CTranslate2 export
    of exported/run."""
    pytest.importorskip("ctranslate2")
    from keras_attn.export.ctranslate2 import export_ctranslate2
    from keras_attn.serve.engines import load_engine
    from keras_attn.serve.locate import locate

    run_dir = str(tmp_path_factory.mktemp("ct2") / "run")
    shutil.copytree(os.path.join(EXPORTED, "run"), run_dir)
    export_ctranslate2(run_dir, log=lambda *a: None)
    out = {}
    for artefact in (locate(EXPORTED), locate(run_dir, engine="ctranslate2")):
        for name, body in answers(artefact, load_engine(artefact, threads=1)).items():
            out[artefact.engine, name] = body
    return out


def test_every_engine_and_format_answers_the_same_fields(served):
    assert set(served) == {(e, f) for e in ("savedmodel", "ctranslate2") for f in FORMATS}
    document = {"translation": "str", "score": "float", "confidence": "float",
                "truncated": "bool"}
    sentence = {**document, "source": "str"}
    assert len(served["savedmodel", "text"]["hypotheses"][0]["sentences"]) == 2
    for key, body in served.items():
        assert set(body) == {"translatedText", "alternatives", "hypotheses"}, key
        assert len(body["hypotheses"]) == 2, key
        for hyp in body["hypotheses"]:
            got = fields(hyp)
            sentences = got.pop("sentences", None)
            assert got == document, (key, hyp)
            # CTranslate2 (no alignments) translates the text between two tags alone
            assert sentences and all(s == sentence for s in sentences), (key, hyp)


def test_an_html_answer_means_what_its_text_means(served):
    """With alignments (the SavedModel) the fragment's one segment is the text: the same
    sentences, scores, confidences; its translation the text's, tags around the words."""
    text, html = (served["savedmodel", f]["hypotheses"] for f in ("text", "html"))
    assert "<p>" in html[0]["translation"] and "<b>" in html[0]["translation"]
    for plain, marked in zip(text, html):
        assert re.sub(r"<[^>]*>", "", marked["translation"]) == plain["translation"]
        assert {**marked, "translation": None} == {**plain, "translation": None}
