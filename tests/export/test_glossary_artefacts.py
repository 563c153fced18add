"""A glossary in every artefact: ``Translator``, the SavedModel's
``translate_v4`` (terms put in inside its graph), the SavedModel engine around an older
signature, the TFLite text file's and the builtin files' runtimes and CTranslate2 give the
same answers to the same requests where they decode and align alike, and each puts every
term in.

The committed dates export (``exported/``: characters, no ``translate_v4``: the engines put
the terms in around it) is heavy; the tiny SentencePiece run of the session is slow.
"""
import os

import pytest

from tests.support import run_fixtures

from tests.support import ROOT
EXPORTED = os.path.join(ROOT, "exported")
DATES = ["3 March 2021", "le 4 juillet 1999. 14 July 1789", "Wed, 3 Mar 2021"]
DATES_GLOSSARY = {"March": "MARS", "July": "JUL"}
# Terms of the tiny run's sentences, to made-up targets ("Tom" is not translated).
TERMS = {"hungry": "Faimx", "station": "Garex", "Tom": "Tom", "cat": "Chatx",
         "speak French": "Parlx"}
TEXTS = [en for en, _ in run_fixtures.PAIRS] + [
    "The cat is sleeping at https://example.com/cat today.", "Tom isn't hungry. Who is it?"]


def without_terms(results):
    """Answers with every ``applied_terms`` left out (to compare with a plain request)."""
    if isinstance(results, list):
        return [without_terms(r) for r in results]
    if isinstance(results, dict):
        return {k: without_terms(v) for k, v in results.items() if k != "applied_terms"}
    return results


def plain(results):
    """Per text its hypotheses' translations and applied terms."""
    return [[(h["translation"], h.get("applied_terms")) for h in hyps] for hyps in results]


def check_terms(texts, results, glossary, passthrough=True):
    """Every term found (outside the spans that pass through) comes out as its target,
    exactly once, and is said."""
    from keras_attn.text import glossary as glossaries
    from keras_attn.translation.glossary import outside_spans

    entries = glossaries.entries(glossary)
    for text, hyps in zip(texts, results):
        found = glossaries.find(text, entries, outside_spans(text) if passthrough else ())
        for h in hyps:
            assert h["applied_terms"] == glossaries.applied(found), (text, h)
            for m in found:
                wanted = sum(x.target == m.target for x in found)
                assert glossaries.count(m.target, h["translation"]) == wanted, (text, h)


# --- the committed dates export -------------------------------------------------------------
@pytest.fixture(scope="module")
def dates_translator():
    from keras_attn.translator import Translator

    return Translator.from_run_dir(os.path.join(EXPORTED, "run"))


@pytest.mark.heavy  # the committed SavedModel and TFLite files loaded
def test_the_dates_export_takes_a_glossary_everywhere(dates_translator):
    from keras_attn.decoding.options import TranslationOptions
    from keras_attn.export.builtin_runtime import BuiltinTextRuntime
    from keras_attn.export.runtime import run_tflite_options, run_tflite_text
    from keras_attn.serve.engines import SavedModelEngine

    expected = dates_translator.translate_nbest(DATES, glossary=DATES_GLOSSARY,
                                                confidence=False)
    check_terms(DATES, expected, DATES_GLOSSARY, passthrough=False)  # characters: off
    assert plain(expected) != plain(dates_translator.translate_nbest(DATES, confidence=False))
    engine = SavedModelEngine(os.path.join(EXPORTED, "saved_model", "translator", "1"))
    assert "glossary_source" not in engine._dtypes  # characters: no translate_v4
    got = engine.translate(DATES, TranslationOptions(glossary=DATES_GLOSSARY), False)
    assert plain(got) == plain(expected)
    text = os.path.join(EXPORTED, "tflite", "text_float32.tflite")
    out = run_tflite_text(text, DATES, glossary=DATES_GLOSSARY)
    assert [t.decode() for t in out["translation"]] == [h[0]["translation"] for h in expected]
    assert out["applied_terms"] == [h[0]["applied_terms"] for h in expected]
    nbest = run_tflite_options(text, DATES, glossary=DATES_GLOSSARY)
    assert nbest["applied_terms"] == out["applied_terms"]
    # The committed builtin step gives no attention (an export before decode_step_v3):
    # each term goes to its proportional place, beside the model's word.
    builtin = BuiltinTextRuntime(os.path.join(EXPORTED, "tflite", "builtin_float32"))
    out = builtin.translate(DATES, glossary=DATES_GLOSSARY)
    check_terms(DATES, [[{"translation": t.decode(), "applied_terms": a}]
                        for t, a in zip(out["translation"], out["applied_terms"])],
                DATES_GLOSSARY, passthrough=False)
    with pytest.raises(ValueError, match="`glossary`"):
        builtin.translate(DATES, glossary={"March": ""})


# --- the tiny SentencePiece run -------------------------------------------------------------
@pytest.fixture(scope="module")
def sentencepiece(tiny_sentencepiece):
    from keras_attn.translator import Translator

    run_dir = tiny_sentencepiece["run_dir"]
    return run_dir, Translator.from_run_dir(run_dir)


@pytest.mark.slow  # the tiny SentencePiece run, trained and exported for the session
def test_the_savedmodel_graph_puts_the_terms_in_as_translator_does(sentencepiece):
    from keras_attn.decoding.options import TranslationOptions as Options
    from keras_attn.serve.engines import SavedModelEngine

    run_dir, translator = sentencepiece
    path = os.path.join(run_dir, "export", "saved_model", "translator", "1")
    v4 = SavedModelEngine(path)
    assert v4.signature_name == "translate_v4"
    for options in (dict(), dict(beam_size=2, num_hypotheses=2, return_alignments=True),
                    dict(passthrough=False, return_alignments=True)):
        expected = translator.translate_nbest(TEXTS, glossary=TERMS, confidence=False,
                                              **options)
        check_terms(TEXTS, expected, TERMS, options.get("passthrough", True))
        got = v4.translate(TEXTS, Options(glossary=TERMS, **options), False)
        assert plain(got) == plain(expected), options
        if options.get("return_alignments"):
            assert [[h["alignment"] for h in r] for r in got] == [
                [h["alignment"] for h in r] for r in expected]
        # translate_v2 with the terms put in around it by the engine: the same
        older = SavedModelEngine(path, signature="translate_v2")
        assert plain(older.translate(TEXTS, Options(glossary=TERMS, **options), False)) \
            == plain(expected), options
    # No glossary, or none of its terms: what translate_v3 answers, byte for byte.
    v3 = SavedModelEngine(path, signature="translate_v3")
    before = v3.translate(TEXTS, Options(), False)
    assert v4.translate(TEXTS, Options(), False) == before
    assert without_terms(v4.translate(TEXTS, Options(glossary={"zzz": "q"}), False)) == before
    with pytest.raises(ValueError, match="two targets"):  # the graph's check, named
        v4._sentences(["x"], Options(), False, False, (("a", "b"), ("A", "c")))


@pytest.mark.slow  # the tiny SentencePiece run's TFLite files and a CTranslate2 export of it
def test_tflite_and_ctranslate2_put_every_term_in(sentencepiece, tmp_path):
    from keras_attn.export.runtime import run_tflite_options

    run_dir, translator = sentencepiece
    expected = translator.translate_nbest(TEXTS, glossary=TERMS, confidence=False)
    text = os.path.join(run_dir, "export", "tflite", "text_float32.tflite")
    out = run_tflite_options(text, TEXTS, glossary=TERMS)
    got = [[{"translation": t.decode(), "applied_terms": a}]
           for t, a in zip(out["translations"][:, 0], out["applied_terms"])]
    check_terms(TEXTS, got, TERMS)
    same = sum(g == e for g, e in zip(plain(got), plain(expected)))
    assert same >= len(TEXTS) - 2, (plain(got), plain(expected))  # float32 file, same words
    # The builtin files: the step's attention places the terms (decode_step_v3).
    from keras_attn.export.builtin_runtime import BuiltinTextRuntime

    builtin = BuiltinTextRuntime(os.path.join(run_dir, "export", "tflite", "builtin_float32"))
    out = builtin.translate(TEXTS, glossary=TERMS)
    got = [[{"translation": t.decode(), "applied_terms": a}]
           for t, a in zip(out["translation"], out["applied_terms"])]
    check_terms(TEXTS, got, TERMS)
    assert sum(g == e for g, e in zip(plain(got), plain(expected))) >= len(TEXTS) - 2
    pytest.importorskip("ctranslate2", reason="CTranslate2 is not installed")
    from keras_attn.export.ctranslate2 import export_ctranslate2
    from keras_attn.export.ctranslate2_runtime import CTranslate2Translator

    path = str(tmp_path / "ct2")
    export_ctranslate2(run_dir, path, log=lambda *a: None)
    ct2 = CTranslate2Translator(path)
    results = ct2.translate_nbest(TEXTS, glossary=TERMS, confidence=False)
    check_terms(TEXTS, results, TERMS)  # placed by CTranslate2's own attention
    assert ct2.translate(TEXTS, glossary={"zzz": "q"}) == ct2.translate(TEXTS)
