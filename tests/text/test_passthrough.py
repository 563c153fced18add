"""What must not be translated passes through (keras_attn.text.spans, the pipeline's
``passed_through``): the rules on each kind of span, against spans written here; the cut
and the put-back on odd input and on the fixture file every runtime's tests load
(tests/fixtures/spans_fixtures.json); the option reaching Translator, the SavedModel engine, the
TFLite runtimes (on by default where the export's ``serving_default`` passes through) and
``POST /translate``; on the tiny SentencePiece run (slow), every span of each kind back
byte-identical, the option off changing that, and the runtimes around the TFLite files
giving ``serving_default``'s text.
"""
import json
import os

import pytest

from tests.support import guards
from keras_attn.text import spans
from keras_attn.translation import pipeline

from tests.support import ROOT
EXPORTED = os.path.join(ROOT, "exported")
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "spans_fixtures.json")


def fixture_cases():
    """The cases of tests/fixtures/spans_fixtures.json (scripts/make_spans_fixtures.py)."""
    with open(FIXTURES, encoding="utf-8") as f:
        return json.load(f)["cases"]


# --- one rule, every runtime: the fixture file ----------------------------------------------
def test_the_fixture_file_holds_what_the_rule_gives():
    """Every runtime's tests load the file: it must be the reference's answers (rewrite it
    with scripts/make_spans_fixtures.py after a deliberate change of the rule)."""
    cases = fixture_cases()
    for case in cases:
        c = spans.cut(case["source"])
        assert {"rest": c.rest, "only_spans": c.only_spans,
                "groups": [{"text": g.text, "start": g.start, "mode": g.mode,
                            "anchor": g.anchor, "before": g.before, "after": g.after,
                            "closing": g.closing, "kinds": list(g.kinds)}
                           for g in c.groups]} == case["cut"], case["source"]
        placed, aligned = spans.put_back(c, case["translation"], case["alignment"])
        assert {"translation": placed, "alignment": aligned} == case["put_back"], case["source"]
    # The corners the cases stand for are there.
    groups = [g for case in cases for g in case["cut"]["groups"]]
    assert {g["mode"] for g in groups} == {"after", "before", "glued"}
    assert {k for g in groups for k in g["kinds"]} == set(spans.KINDS)
    assert any(g["closing"] for g in groups) and any(g["anchor"] < 0 for g in groups)
    assert any(case["cut"]["only_spans"] for case in cases)
    assert any(case["alignment"] is None for case in cases)
    # Placed by the alignment, not at the proportional place, somewhere.
    assert any(spans.put_back(spans.cut(case["source"]), case["translation"])[0]
               != case["put_back"]["translation"] for case in cases if case["alignment"])


def test_the_rules_are_one_json_document():
    from keras_attn.text import documents, span_rules
    from keras_attn.text.rules import rules_data

    data = json.loads(json.dumps(rules_data()))
    assert [tuple(r) for r in data["documents"]["rules"]] == list(documents.RULES)
    assert [tuple(r) for r in data["spans"]["rules"]] == list(span_rules.RULES)
    assert data["spans"]["final_stop"] == span_rules.FINAL_STOP


# --- the rules ------------------------------------------------------------------------------
@pytest.mark.parametrize("text, expected", [
    ("See https://example.com/a?b=1&c=d#top, then stop.",
     [("url", "https://example.com/a?b=1&c=d#top")]),
    ("Go to www.example.org.", [("url", "www.example.org")]),
    ("(ftp://files.example.net/x.tar.gz)", [("url", "ftp://files.example.net/x.tar.gz")]),
    ("Write to tom.smith+news@mail.example.co.uk today.",
     [("email", "tom.smith+news@mail.example.co.uk")]),
    ("Run `pip install keras` first.", [("code", "`pip install keras`")]),
    ("This is <b>bold</b> and<br/>this <a href=\"x.html\">a link</a>.",
     [("tag", "<b>"), ("tag", "</b>"), ("tag", "<br/>"), ("tag", '<a href="x.html">'),
      ("tag", "</a>")]),
    ("It costs 9,116 dollars, 3.14 each, at 10:30 on 2008-11-05 (1/2 off, -5 now).",
     [("number", "9,116"), ("number", "3.14"), ("number", "10:30"),
      ("number", "2008-11-05"), ("number", "1/2"), ("number", "-5")]),
    ("Great \U0001f642 and \U0001f44d\U0001f3fd, family \U0001f468\u200d\U0001f469\u200d"
     "\U0001f467, flag \U0001f1eb\U0001f1f7, heart \u2764\ufe0f, keycap 1\ufe0f\u20e3.",
     [("emoji", "\U0001f642"), ("emoji", "\U0001f44d\U0001f3fd"),
      ("emoji", "\U0001f468\u200d\U0001f469\u200d\U0001f467"),
      ("emoji", "\U0001f1eb\U0001f1f7"), ("emoji", "\u2764\ufe0f"),
      ("emoji", "1\ufe0f\u20e3")]),
], ids=["url", "www", "ftp-in-parentheses", "email", "code", "tags", "numbers", "emoji"])
def test_each_rule_finds_its_spans(text, expected):
    assert [(s.kind, s.text) for s in spans.find(text)] == expected


@pytest.mark.parametrize("text", [
    "COVID-19 spreads.", "An MP3 player.", "The 3rd time.", "a < b and c > d", "e.g. this.",
    "He said: fine.", "Keras\u2122 and (c) 2024-ish", "Hello, world!", ""])
def test_words_the_model_should_translate_are_no_spans(text):
    found = [s.text for s in spans.find(text)]
    assert found == (["2024"] if "2024" in text else [])


def test_a_url_holding_an_address_or_a_number_is_one_url():
    """At one position the first rule wins; a span found earlier wins over one inside it."""
    assert [(s.kind, s.text) for s in spans.find(
        "https://user@example.com:8080/v1.2 and `x = 3.14`")] == [
        ("url", "https://user@example.com:8080/v1.2"), ("code", "`x = 3.14`")]


# --- the cut --------------------------------------------------------------------------------
@pytest.mark.parametrize("sentence, rest", [
    ("Visit https://x.org today.", "Visit today."),
    ("Call me at 10:30.", "Call me at."),
    ("https://x.org is down.", "is down."),
    ("It ends here https://x.org", "It ends here"),
    ("Make it <b>bold</b> now.", "Make it bold now."),
    ("Mail a@b.org at 9:30 \U0001f642", "Mail at"),
    ("No span at all.", "No span at all."),
])
def test_cut_leaves_the_words_around_the_spans(sentence, rest):
    assert spans.cut(sentence).rest == rest


@pytest.mark.parametrize("sentence", [
    "", "1 2 3 4 5 6 7 8 9 10", "https://a.org https://b.org", "10:30\U0001f642.",
    "<br/>", "`x` `y`", "42!"])
def test_a_sentence_of_spans_alone_is_its_own_translation(sentence):
    c = spans.cut(sentence)
    assert c.only_spans == bool(sentence)
    calls = []
    out = pipeline.passed_through([sentence], lambda s: calls.append(s) or [], 2)
    assert calls == []  # the model is never asked
    assert [h["translation"] for h in out[0]] == [sentence, sentence]
    assert out[0][0]["score"] == 0.0


def test_adjacent_spans_are_one_group_put_back_as_written():
    c = spans.cut("Links: https://a.org  https://b.org\t\U0001f642 here.")
    assert [g.text for g in c.groups] == ["https://a.org  https://b.org\t\U0001f642"]
    assert c.rest == "Links: here."
    out, _ = spans.put_back(c, "Liens : ici.", "0-0 0-1 1-2")
    assert "https://a.org  https://b.org\t\U0001f642" in out


# --- the put-back ---------------------------------------------------------------------------
@pytest.mark.parametrize("sentence, translation, alignment, expected", [
    ("Call me at 10:30.", "Appelle-moi à.", "0-0 1-0 2-1", "Appelle-moi à 10:30."),
    ("Visit https://x.org today.", "Visitez aujourd'hui.", "0-0 1-1",
     "Visitez https://x.org aujourd'hui."),
    ("https://x.org is down.", "est en panne.", "0-0 1-1 1-2", "https://x.org est en panne."),
    ("Make it <b>bold</b> now", "Mets-le en gras maintenant", "0-0 1-0 2-2 3-3",
     "Mets-le en <b>gras</b> maintenant"),
    ("He came at 10:30 \U0001f642!", "Il est venu à\u202f!", "0-0 1-1 1-2 2-3",
     "Il est venu à 10:30 \U0001f642\u202f!"),
    # word order changes: the span follows its word's translation
    ("I saw the red \U0001f642 car.", "J'ai vu la voiture rouge.", "0-0 1-1 2-2 4-3 3-4",
     "J'ai vu la voiture rouge \U0001f642."),
    ("The 3 red cars.", "Les voitures rouges.", "0-0 2-2 3-1", "Les 3 voitures rouges."),
    ("Thanks \U0001f642", "Merci\u202f!", "0-0", "Merci\u202f! \U0001f642"),
], ids=["closing-stop", "middle", "start", "tags", "french-spacing", "reordered",
        "before-a-noun", "emoji-last"])
def test_spans_go_back_after_the_aligned_word(sentence, translation, alignment, expected):
    out, renumbered = spans.put_back(spans.cut(sentence), translation, alignment)
    assert out == expected
    for span in spans.find(sentence):
        assert span.text in out


def test_without_an_alignment_spans_take_their_proportional_place():
    c = spans.cut("Please visit https://x.org for more details today.")
    out, alignment = spans.put_back(c, "Veuillez visiter pour plus de détails aujourd'hui.")
    assert alignment is None
    assert out == "Veuillez visiter https://x.org pour plus de détails aujourd'hui."
    out, _ = spans.put_back(spans.cut("It ends at 10:30."), "Ça finit à.")
    assert out == "Ça finit à 10:30."


def test_the_alignment_is_renumbered_over_the_whole_sentence():
    c = spans.cut("Call me at 10:30 please.")
    out, alignment = spans.put_back(c, "Appelle-moi à s'il te plaît.", "0-0 1-0 2-1 3-4")
    assert out == "Appelle-moi à 10:30 s'il te plaît."
    # source words: Call me at 10:30 please. | target: Appelle-moi à 10:30 s'il te plaît.
    assert alignment == "0-0 1-0 2-1 3-2 4-5"


# --- the pipeline ---------------------------------------------------------------------------
def fake(sentences):
    """A translator that upper-cases and aligns word i with word i."""
    return [[{"translation": s.upper(), "score": -1.0, "confidence": 0.5,
              "alignment": " ".join(f"{i}-{i}" for i in range(len(s.split())))}]
            for s in sentences]


def test_split_and_join_passes_spans_through_every_sentence_and_keeps_the_rest():
    texts = ["Visit https://x.org today. It is 10:30 \U0001f642\n\nBye `ls -l` now.",
             "No span here.", "42"]
    seen = []
    docs = pipeline.split_and_join(texts, lambda s: seen.extend(s) or fake(s),
                                   passthrough=True, keep_alignments=False)
    assert seen == ["Visit today.", "It is", "Bye now.", "No span here."]
    assert docs[0][0]["translation"] == (
        "VISIT https://x.org TODAY. IT IS 10:30 \U0001f642\n\nBYE `ls -l` NOW.")
    assert docs[1][0]["translation"] == "NO SPAN HERE."
    assert docs[2][0]["translation"] == "42" and docs[2][0]["confidence"] == 1.0
    assert all("alignment" not in s for d in docs for s in d[0]["sentences"])
    off = pipeline.split_and_join(texts, fake)
    assert off[0][0]["translation"].startswith("VISIT HTTPS://X.ORG TODAY.")


def test_the_default_follows_the_source_vocabulary(tmp_path):
    class Characters:
        char_level = True

    assert spans.default_for(Characters()) is False
    assert spans.default_for(object()) is True
    assert spans.default_for_run(os.path.join(EXPORTED, "run")) is False  # the dates task
    (tmp_path / "src.model").write_bytes(b"")
    assert spans.default_for_run(str(tmp_path)) is True
    assert spans.default_for_run(None) is False


# --- HTTP -----------------------------------------------------------------------------------
@pytest.mark.parametrize("form", [False, True], ids=["json", "form"])
def test_passthrough_is_a_field_of_translate(form):
    from keras_attn.serve import api

    fields = {"q": "x", "source": "dates", "target": "iso"}
    assert api.parse_fields(fields, ("dates", "iso"), form).passthrough is None
    for value, expected in ((True, True), (False, False)):
        sent = str(value).lower() if form else value
        request = api.parse_fields({**fields, "passthrough": sent}, ("dates", "iso"), form)
        assert request.passthrough is expected
        assert request.options.passthrough is expected  # one field of the options
    with pytest.raises(api.ApiError, match="passthrough"):
        api.parse_fields({**fields, "passthrough": "maybe"}, ("dates", "iso"), form)


def test_spec_describes_the_passthrough_field():
    from keras_attn.serve.spec import ENDPOINTS, openapi

    document = openapi(ENDPOINTS)
    body = document["paths"]["/translate"]["post"]["requestBody"]["content"]
    for media in body.values():
        assert media["schema"]["properties"]["passthrough"]["type"] == "boolean"


@pytest.mark.slow  # loads the committed SavedModel (its first call traces: tens of seconds)
def test_serve_passes_spans_through_when_asked():
    """The dates model (characters: off by default) answers a link as a date; asked, the
    link comes back as it was, and the spans of a date-like text come back byte-identical."""
    from starlette.testclient import TestClient

    from keras_attn.serve.app import Settings, create_app
    from keras_attn.serve.engines import load_engine, warm_up
    from keras_attn.serve.locate import locate
    from keras_attn.serve.replicas import InProcessReplicas

    artefact = locate(EXPORTED)
    engine = load_engine(artefact)
    assert engine.passthrough is False
    warm_up(engine)  # the graph's first call (tens of seconds on busy cores), as serve does
    app = create_app(artefact, InProcessReplicas(engine),
                     Settings(timeout=guards.timeout(30)))
    body = {"source": "dates", "target": "iso"}
    with TestClient(app) as client:
        def ask(**fields):
            response = client.post("/translate", json={**body, **fields})
            assert response.status_code == 200, response.text
            return response.json()["translatedText"]

        link = "https://example.com/a?b=1"
        assert ask(q=link, passthrough=True) == link
        assert ask(q=link) != link
        text = "March 3 \U0001f642 https://x.org"
        out = ask(q=text, passthrough=True, return_alignments=True)
        assert "\U0001f642" in out and "https://x.org" in out


# --- the tiny SentencePiece run -------------------------------------------------------------
SPANS = {"url": "https://example.com/a?b=1", "email": "tom@example.org",
         "number": "9,116", "code": "`pip install x`", "emoji": "\U0001f642",
         "tag": "<b>"}
SENTENCES = ["I'm hungry.", "How are you?", "Thank you!", "It's raining.", "Tom isn't here."]


def with_span(sentence, span, where):
    words = sentence.split()
    words.insert(where % (len(words) + 1), span)
    return " ".join(words)


@pytest.mark.slow  # the tiny SentencePiece run (conftest): trained once, then cached
def test_every_kind_of_span_comes_back_byte_identical(tiny_sentencepiece):
    from keras_attn.translator import Translator

    translator = Translator.from_run_dir(tiny_sentencepiece["run_dir"])
    assert translator.passthrough is True  # SentencePiece: on by default
    texts, inserted = [], []
    for k, (kind, span) in enumerate(SPANS.items()):
        for where, sentence in enumerate(SENTENCES):
            texts.append(with_span(sentence, span, where + k))
            inserted.append(span)
    on = translator.translate(texts)
    assert all(span in out for span, out in zip(inserted, on)), list(zip(texts, on))
    nbest = translator.translate_nbest(texts[:3], beam_size=2, num_hypotheses=2)
    assert all(inserted[k] in h["translation"] for k in range(3) for h in nbest[k])
    assert all("alignment" not in h for hyps in nbest for h in hyps)  # not asked
    off = translator.translate(texts, passthrough=False)
    assert sum(span in out for span, out in zip(inserted, off)) < len(texts) // 2
    assert translator.translate(["1 2 3 4 5 6 7 8 9 10"]) == ["1 2 3 4 5 6 7 8 9 10"]
    # Text without spans: the same translation either way.
    assert translator.translate(SENTENCES) == translator.translate(SENTENCES,
                                                                   passthrough=False)


def test_the_text_file_runtime_passes_through_as_its_export_says():
    """The text file carries its export's pass-through (runtime.tflite_settings): the
    runtime's default follows it; a file exported before the settings keeps it off."""
    pytest.importorskip("tensorflow")
    from keras_attn.export.runtime import run_tflite_text, tflite_settings
    from keras_attn.export.tflite import with_settings

    with open(os.path.join(EXPORTED, "tflite", "text_float32.tflite"), "rb") as f:
        older = f.read()
    on = with_settings(older, {"passthrough": True, "beam_size": 1})
    assert tflite_settings(older) == {}
    assert tflite_settings(on) == {"passthrough": True, "beam_size": 1}
    texts = ["https://example.com/a?b=1"]
    assert run_tflite_text(on, texts)["translation"][0].decode() == texts[0]
    assert run_tflite_text(older, texts)["translation"][0].decode() != texts[0]
    assert run_tflite_text(on, texts, passthrough=False)["translation"][0].decode() != texts[0]


def test_the_builtin_runtime_passes_through_as_its_metadata_says(tmp_path):
    import shutil

    from keras_attn.export.builtin_runtime import BuiltinTextRuntime

    folder = str(tmp_path / "builtin")
    shutil.copytree(os.path.join(EXPORTED, "tflite", "builtin_float32"), folder)
    texts = ["https://example.com/a?b=1", "3 March 2021"]
    off = BuiltinTextRuntime(folder).translate(texts)["translation"]
    assert [t.decode() for t in off][1] == "2021-03-03" and off[0].decode() != texts[0]
    with open(os.path.join(folder, "metadata.json"), encoding="utf-8") as f:
        meta = json.load(f)
    with open(os.path.join(folder, "metadata.json"), "w", encoding="utf-8") as f:
        json.dump({**meta, "passthrough": True}, f)
    on = BuiltinTextRuntime(folder).translate(texts)["translation"]
    assert on[0].decode() == texts[0]
    assert on[1].decode() != "2021-03-03"  # (its numbers passed through too: why it is off)


def test_the_tflite_runtime_passes_spans_through_when_asked():
    """The committed dates text file (characters: off unless asked)."""
    pytest.importorskip("tensorflow")
    from keras_attn.export.runtime import run_tflite_options, run_tflite_text

    path = os.path.join(EXPORTED, "tflite", "text_float32.tflite")
    texts = ["https://example.com/a?b=1", "March 3 \U0001f642"]
    on = run_tflite_text(path, texts, passthrough=True)["translation"]
    assert on[0].decode() == texts[0]
    assert "\U0001f642" in on[1].decode()
    off = run_tflite_text(path, texts)["translation"]
    assert off[0].decode() != texts[0]
    nbest = run_tflite_options(path, texts, passthrough=True, beam_size=2, num_hypotheses=2)
    assert nbest["translations"][0].tolist() == [texts[0].encode()] * 2
    assert all("\U0001f642" in t.decode() for t in nbest["translations"][1])
    assert nbest["alignments"][1].tolist() == [b"", b""]  # not asked: none returned


@pytest.mark.slow  # the tiny SentencePiece run (conftest) exported to CTranslate2
def test_ctranslate2_places_spans_by_its_attention(tiny_sentencepiece, tmp_path):
    pytest.importorskip("ctranslate2", reason="CTranslate2 is not installed")
    from keras_attn.export.ctranslate2 import export_ctranslate2
    from keras_attn.export.ctranslate2_runtime import CTranslate2Translator

    path = str(tmp_path / "ct2")
    export_ctranslate2(tiny_sentencepiece["run_dir"], path, log=lambda *a: None)
    ct2 = CTranslate2Translator(path)
    assert ct2.passthrough is True and ct2.aligns is True
    texts = [with_span(s, span, k) for k, (s, span) in enumerate(zip(SENTENCES, SPANS.values()))]
    out = ct2.translate(texts)
    assert all(span in o for span, o in zip(SPANS.values(), out)), list(zip(texts, out))
    off = ct2.translate(texts, passthrough=False)
    assert sum(span in o for span, o in zip(SPANS.values(), off)) < len(texts) // 2
    # Its alignments are asked for inside the pipeline only: a request is still refused.
    with pytest.raises(ValueError, match="return_alignments"):
        ct2.translate_nbest(texts, return_alignments=True)
