"""What must not be translated, passed through inside the SavedModel's graph
(keras_attn.export.spans_graph): the TensorFlow cut and put-back give what the Python ones
(keras_attn.text.spans, the reference) give, on the fixture file every runtime's tests load
(tests/fixtures/spans_fixtures.json), on odd sentences written here and on held-out sentences
with spans inserted, with translations and alignments made up here; the tiny SentencePiece
run's ``serving_default`` gives every span back as the Translator does, and the runtimes
around its TFLite files, with their defaults, give ``serving_default``'s text (slow).
"""
import os
import random
import subprocess
import sys

import pytest

from tests.support import guards

from keras_attn.text import spans

from tests.support import ROOT
DEV = os.path.join(ROOT, "..", "shared", "data", "fra-eng", "dev.txt")
MODES = {"after": 0, "before": 1, "glued": 2}
ODD = [
    "Call me at 10:30.", "Visit https://x.org today.", "https://x.org is down.",
    "It ends here https://x.org", "Make it <b>bold</b> now.", "Mail a@b.org at 9:30 \U0001f642",
    "No span at all.", "", "1 2 3 4 5 6 7 8 9 10", "COVID-19 spreads.", "An MP3 player.",
    "The 3rd time.", "x = foo(bar, 3) + 1", "Hello \U0001f44b world \U0001f30d.",
    "  spaced  1  out  ", "Il a dit\u202f: 42\u202f!", "10:30\U0001f642.", "<br/>", "`x` `y`",
    "42!", "a<b>b</b>c 5", "It was 1.5a or 3 .", "caf\u00e9 3 \u00e9t\u00e9 4\u00e9",
    "Write to tom.smith+news@mail.example.co.uk (or www.example.org), 9,116 times.",
    "\u00a0 https://a.org\u00a0x", "He said: fine.", "Keras\u2122 and (c) 2024-ish",
]


def made_up(texts, seed=0):
    """Per text a translation of what its cut leaves (its words upper-cased, sometimes
    reversed, sometimes with French spacing before a final "!") and an alignment (random
    pairs, sometimes none)."""
    rng = random.Random(seed)
    translations, alignments = [], []
    for text in texts:
        words = [w.upper() for w in spans.cut(text).rest.split()]
        if rng.random() < 0.3:
            words = words[::-1]
        if rng.random() < 0.2:
            words.append("\u202f!")
        translations.append(" ".join(words))
        pairs = [f"{i}-{rng.randrange(max(len(words), 1))}"
                 for i in range(len(words)) if rng.random() < 0.8]
        alignments.append(" ".join(pairs) if rng.random() < 0.9 else "")
    return translations, alignments


def both_ways(texts):
    """The graph's cut and put-back of ``texts`` with :func:`made_up` translations, in one
    traced function, beside the Python ones: two lists of per-text tuples."""
    import tensorflow as tf

    from keras_attn.export import spans_graph

    translations, alignments = made_up(texts)

    @tf.function
    def graph(texts, translations, alignments):
        plan = spans_graph.cut(texts)
        placed = spans_graph.put_back(plan, translations, alignments,
                                      tf.range(tf.shape(texts)[0]))
        return plan, placed

    plan, (placed, renumbered) = graph(tf.constant(texts, tf.string),
                                       tf.constant(translations), tf.constant(alignments))
    got, expected = [], []
    for k, text in enumerate(texts):
        c = spans.cut(text)
        expected.append((c.rest, c.only_spans, [MODES[g.mode] for g in c.groups],
                         [g.anchor for g in c.groups],
                         *spans.put_back(c, translations[k], alignments[k])))
        got.append((plan["rest"][k].numpy().decode(), bool(plan["only_spans"][k]),
                    plan["mode"][k].numpy().tolist(), plan["anchor"][k].numpy().tolist(),
                    placed[k].numpy().decode(), renumbered[k].numpy().decode()))
    return got, expected


def test_the_graph_gives_the_fixture_files_cuts_and_put_backs():
    import tensorflow as tf

    from keras_attn.export import spans_graph
    from tests.text.test_passthrough import fixture_cases

    cases = fixture_cases()
    texts = tf.constant([c["source"] for c in cases])

    @tf.function
    def graph(texts, translations, alignments):
        plan = spans_graph.cut(texts)
        return plan, spans_graph.put_back(plan, translations, alignments,
                                          tf.range(tf.shape(texts)[0]))

    # The graph takes "" for no alignment (its put-back then renumbers nothing but the groups).
    plan, (placed, renumbered) = graph(texts, tf.constant([c["translation"] for c in cases]),
                                       tf.constant([c["alignment"] or "" for c in cases]))
    modes = {v: k for k, v in MODES.items()}
    for k, case in enumerate(cases):
        groups = case["cut"]["groups"]
        assert (plan["rest"][k].numpy().decode(), bool(plan["only_spans"][k]),
                [modes[m] for m in plan["mode"][k].numpy().tolist()],
                plan["anchor"][k].numpy().tolist()) == (
            case["cut"]["rest"], case["cut"]["only_spans"], [g["mode"] for g in groups],
            [g["anchor"] for g in groups]), case["source"]
        assert placed[k].numpy().decode() == case["put_back"]["translation"], case["source"]
        if case["alignment"] is not None:
            assert renumbered[k].numpy().decode() == case["put_back"]["alignment"]


def test_the_graph_cuts_and_puts_back_as_python_does():
    got, expected = both_ways(ODD)
    assert got == expected
    # The cases the sentences stand for are there: groups of each mode, spans alone.
    assert {m for row in expected for m in row[2]} == {0, 1, 2}
    assert any(row[1] for row in expected)


@pytest.mark.slow  # ~200 sentences through the traced functions
@pytest.mark.skipif(not os.path.exists(DEV), reason="the fra-eng corpus (../shared/data) is "
                    "not on this machine")
def test_the_graph_agrees_on_held_out_sentences_with_spans():
    from benchmarks.passthrough import spans_of

    with open(DEV, encoding="utf-8") as f:
        english = [line.split("\t")[0] for line in f][:200]
    texts = [text for text, _, _ in spans_of(english, seed=3)]
    got, expected = both_ways(texts)
    assert [k for k in range(len(texts)) if got[k] != expected[k]] == []


def test_rules_read_alike_by_re_and_re2():
    """The rules keep to what both engines read: RE2 (TensorFlow's) accepts each, and
    finds where ``re`` does on a line of every kind."""
    import tensorflow as tf

    line = ("See https://example.com/a?b=1, mail tom@example.org, run `ls -la`, <b>bold</b>, "
            "\U0001f44d\U0001f3fd and 9,116.")
    for name, pattern in spans.RULES:
        found = [s.text for s in spans.find(line) if s.kind == name]
        assert found, name
        matched = tf.strings.regex_full_match(tf.constant(found), pattern).numpy()
        assert matched.all(), (name, found)


@pytest.mark.slow  # the tiny SentencePiece run, trained and exported for the session
def test_serving_default_passes_spans_through_as_the_translator_does(tiny_sentencepiece):
    import tensorflow as tf

    from keras_attn.translator import Translator

    run_dir = tiny_sentencepiece["run_dir"]
    texts = ["Visit https://example.com/path?q=1 today.", "Send it to tom@example.com please.",
             "1 2 3 4 5 6 7 8 9 10", "Run `pip install keras` now \U0001f642.",
             "He paid 9,116 dollars. Call me at 10:30!", "I like cats.", ""]
    loaded = tf.saved_model.load(os.path.join(run_dir, "export", "saved_model", "translator",
                                              "1"))
    out = loaded.signatures["serving_default"](text=tf.constant(texts))
    served = [t.decode() for t in out["translation"].numpy()]
    assert served == Translator.from_run_dir(run_dir).translate(texts, passthrough=True)
    for text, translation in zip(texts, served):
        for span in spans.find(text):
            assert span.text in translation, (text, translation)
    assert served[2] == texts[2]  # spans alone: itself, score 0, confidence 1
    assert float(out["score"][2]) == 0.0 and float(out["confidence"][2]) == 1.0


@pytest.mark.slow  # the tiny SentencePiece run, trained and exported for the session
def test_the_tflite_runtimes_give_serving_defaults_text(tiny_sentencepiece):
    """With their defaults, the runtimes around the text file and the builtin folder pass
    spans through as ``serving_default`` does, placed by the same word alignment."""
    import tensorflow as tf

    from keras_attn.export.builtin_runtime import BuiltinTextRuntime
    from keras_attn.export.runtime import run_tflite_text, tflite_settings
    from keras_attn.text import spans as span_rules

    export = os.path.join(tiny_sentencepiece["run_dir"], "export")
    texts = ["Visit https://example.com/path?q=1 today.", "Send it to tom@example.com please.",
             "He paid 9,116 dollars. Call me at 10:30!", "I like 3 cats and 12 dogs.",
             "Run `pip install keras` now \U0001f642.", "1 2 3", "I like cats.", ""]
    serve = tf.saved_model.load(os.path.join(export, "saved_model", "translator", "1"))
    want = [t.decode() for t in serve.signatures["serving_default"](
        text=tf.constant(texts))["translation"].numpy()]
    text_file = os.path.join(export, "tflite", "text_float32.tflite")
    with open(text_file, "rb") as f:
        assert tflite_settings(f.read())["passthrough"] is True
    assert [t.decode() for t in run_tflite_text(text_file, texts)["translation"]] == want
    builtin = BuiltinTextRuntime(os.path.join(export, "tflite", "builtin_float32"))
    assert builtin.passthrough and builtin.files.step_name == "decode_step_v3"
    assert [t.decode() for t in builtin.translate(texts)["translation"]] == want
    for text, out in zip(texts, want):
        assert all(span.text in out for span in span_rules.find(text)), (text, out)


@pytest.mark.parametrize("passthrough", [True, False])
def test_the_export_check_reads_the_text_files_as_serving_default_reads(passthrough):
    """export_run's sample agreement: the text files' runtime passes spans through exactly
    when the SavedModel's serving_default does (else a number in a sample would fail a
    float32 file that decodes the same)."""
    from keras_attn.export.all_targets import compare_samples

    seen = []

    class SavedModel:
        def run_samples(self, path, translator, sources):
            return {"translation": ["at 5" if passthrough else "at five"]}

    class TextFile:
        key, agreement_on = "text_float32", "translation"

        def run_samples(self, path, translator, sources, passthrough=False):
            seen.append(passthrough)
            return {"translation": ["at 5" if passthrough else "at five"]}

    report = {"saved_model": {"path": "sm", "passthrough": passthrough},
              "tflite": {"text_float32": {"path": "text.tflite"}}}
    out = compare_samples(None, SavedModel(), report, [TextFile()], ["at 5"])
    assert seen == [passthrough]
    assert out["agreement_with_saved_model"] == {"text_float32": 1.0}


@pytest.mark.slow  # the tiny SentencePiece run, trained and exported for the session
def test_translate_v3_passes_spans_through_as_the_translator_does(tiny_sentencepiece):
    """The options signature with ``passthrough`` (translate_v3): n-best hypotheses and
    their alignments as the Python pipeline gives them; off, it is translate_v2; the
    older signatures and the compiled twins keep their answers."""
    import numpy as np
    import tensorflow as tf

    from keras_attn.decoding.options import DecodingOptions
    from keras_attn.export import runtime, saved_model
    from keras_attn.export.option_sets import OPTION_SIGNATURES
    from keras_attn.translator import Translator

    run_dir = tiny_sentencepiece["run_dir"]
    path = os.path.join(run_dir, "export", "saved_model", "translator", "1")
    loaded = tf.saved_model.load(path)
    sigs = saved_model.saved_model_signatures(path)
    assert {"translate_v3", "translate_v3_xla", "translate_v2", "translate_v2_xla"} <= set(sigs)
    assert sigs["translate_v3"]["inputs"]["passthrough"]["default"] is True
    translator = Translator.from_run_dir(run_dir)
    texts = ["Visit https://example.com/path?q=1 today.", "1 2 3 4 5 6 7 8 9 10",
             "He paid 9,116 dollars. Call me at 10:30!", "I like cats.", ""]

    def call(name, opts, passthrough=False):
        inputs = runtime.option_inputs(opts, OPTION_SIGNATURES[name.replace("_xla", "")],
                                       passthrough)
        out = loaded.signatures[name](text=tf.constant(texts), **inputs)
        return ([[t.decode() for t in row] for row in out["translations"].numpy()],
                [[a.decode() for a in row] for row in out["alignments"].numpy()],
                out["scores"].numpy().tolist())

    for asked in (False, True):
        opts = DecodingOptions(beam_size=2, num_hypotheses=2, return_alignments=asked)
        translations, alignments, scores = call("translate_v3", opts, passthrough=True)
        want = translator.translate_nbest(texts, passthrough=True, confidence=False,
                                          beam_size=2, num_hypotheses=2,
                                          return_alignments=asked)
        assert translations == [[h["translation"] for h in hyps] for hyps in want]
        if asked:  # (not asked: as translate_v2's, below)
            assert alignments == [[h.get("alignment", "") for h in hyps] for hyps in want]
        assert scores[1] == [0.0, 0.0]  # spans alone: itself
        for text, row in zip(texts, translations):
            for span in spans.find(text):
                assert all(span.text in t for t in row), (text, row)
        assert call("translate_v3", opts) == call("translate_v2", opts)
    greedy = DecodingOptions()
    for twin, passthrough in (("translate_v3", True), ("translate_v2", False)):
        compiled, plain = (call(name, greedy, passthrough) for name in (twin + "_xla", twin))
        assert compiled[:2] == plain[:2]
        # XLA rounds the scores' sums in its own order (float32, terms of order 1).
        assert np.allclose(compiled[2], plain[2], rtol=0, atol=1e-4)


def test_first_imported_inside_a_trace_it_still_works_outside_it():
    # A module-level tensor made while a tf.function traces belongs to that graph: a later
    # trace that reads it fails ("out of scope"). The export's serving function imports this
    # module lazily, inside its trace.
    code = ("import tensorflow as tf\n"
            "@tf.function\n"
            "def first(t):\n"
            "    from keras_attn.export import spans_graph\n"
            "    return spans_graph.cut(t)['rest']\n"
            "first(tf.constant(['Call me at 10:30.']))\n"
            "from keras_attn.export import spans_graph\n"
            "print(spans_graph.cut(tf.constant(['See https://example.com now.']))['rest'][0]"
            ".numpy().decode())\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, timeout=guards.timeout(120))
    assert out.returncode == 0, out.stderr[-3000:]
