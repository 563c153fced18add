"""Glossaries: the rules (keras_attn.text.glossary), the request pipeline's step
(keras_attn.translation.glossary) and the SavedModel graph's ops
(keras_attn.export.glossary_graph) held equal on the shared cases of
tests/fixtures/glossary_cases.json; bad glossaries named; the options object, the HTTP fields,
the key store and the CLI flags that carry them."""
import json
import os
import pathlib
import sqlite3

import pytest

from keras_attn.decoding.options import OPTIONS, TranslationOptions
from keras_attn.text import glossary as g
from keras_attn.text.term_placement import apply
from keras_attn.translation.glossary import outside_spans, with_glossary
from tests.support import FIXTURES

CASES = json.loads((pathlib.Path(FIXTURES) / "glossary_cases.json")
                   .read_text("utf-8"))
ENTRIES = g.entries(CASES["glossary"])
IDS = [c["name"] for c in CASES["cases"]]


# --- the rules (Python) ---------------------------------------------------------------------
@pytest.mark.parametrize("case", CASES["cases"], ids=IDS)
def test_python_rules_give_the_shared_cases(case):
    found = g.find(case["sentence"], ENTRIES,
                   outside_spans(case["sentence"]) if case["passthrough"] else ())
    assert [[m.start, m.end, m.source] for m in found] == case["found"]
    assert apply(case["sentence"], found, case["translation"], case["alignment"]) == (
        case["expected"], case["expected_alignment"])


@pytest.mark.parametrize("case", CASES["cases"], ids=IDS)
def test_every_term_found_comes_out_once_and_nothing_else_moves(case):
    """Independent of the expected strings: each target appears (whole word, as written)
    at least as often as its source term was found, and a sentence without a term is
    byte-identical."""
    found = g.find(case["sentence"], ENTRIES,
                   outside_spans(case["sentence"]) if case["passthrough"] else ())
    out, _ = apply(case["sentence"], found, case["translation"], case["alignment"])
    if not found:
        assert out == case["translation"]
    for target in {m.target for m in found}:
        wanted = sum(m.target == target for m in found)
        assert g.count(target, out) >= wanted, (target, out)
        put_in = sum(g.count(target, m.target) for m in found)  # "billet" in "billet de train"
        assert g.count(target, out) <= g.count(target, case["translation"]) + put_in


def test_find_is_whole_words_any_case_longest_first():
    terms = g.entries({"ticket": "billet", "train ticket": "billet de train", "e": "x"})
    found = g.find("A TRAIN\tTicket, tickets, e-ticket, ticket_b.", terms)
    assert [(m.source, "A TRAIN\tTicket, tickets, e-ticket, ticket_b."[m.start:m.end])
            for m in found] == [("train ticket", "TRAIN\tTicket"), ("e", "e"),
                                ("ticket", "ticket"), ("ticket", "ticket")]


@pytest.mark.parametrize("glossary, says", [
    ("ticket", "must be an object"),
    (["ticket", "billet"], "must be an object"),
    ({"ticket": 3}, "must be strings"),
    ({1: "a"}, "must be strings"),
    ({" ": "billet"}, "empty source term"),
    ({"ticket": ""}, "empty target term"),
    ({"a" * (g.MAX_TERM_CHARS + 1): "b"}, f"at most {g.MAX_TERM_CHARS} characters"),
    ({f"t{k}": "x" for k in range(g.MAX_TERMS + 1)}, f"at most {g.MAX_TERMS} terms"),
    ({"a\nb": "c"}, "one line"),
    ({"!!": "c"}, "a letter or a digit"),
    ({"Ticket": "billet", "ticket ": "titre"}, "two targets"),
    ({"train  ticket": "a", "Train ticket": "b"}, "two targets"),
])
def test_a_bad_glossary_is_named(glossary, says):
    with pytest.raises(ValueError, match="`glossary`") as e:
        g.entries(glossary)
    assert says in str(e.value)
    with pytest.raises(ValueError, match=says):
        TranslationOptions(glossary=glossary)


def test_entries_are_canonical_and_merged_later_first():
    assert g.entries({" ticket ": " billet ", "Ticket": "billet"}) == (("ticket", "billet"),)
    assert g.entries(None) == ()
    assert g.merged({"ticket": "billet", "train": "train"}, {"TICKET": "titre"}) == (
        ("train", "train"), ("TICKET", "titre"))


def test_read_tsv(tmp_path):
    path = tmp_path / "g.tsv"
    path.write_text("# terms\nticket\tbillet\n\nNew York\tNew York\n", "utf-8")
    assert g.read_tsv(path) == (("ticket", "billet"), ("New York", "New York"))
    path.write_text("ticket\tbillet\nno tab here\n", "utf-8")
    with pytest.raises(ValueError, match="line 2.*one tab"):
        g.read_tsv(path)


# --- the pipeline's step --------------------------------------------------------------------
def _fixed(case):
    """A translator that answers the case's translation and alignment."""
    return lambda sentences: [[{"translation": case["translation"], "score": -1.0,
                                "alignment": case["alignment"]}] for _ in sentences]


# (the cases with spans: the engine translates the sentence without them, tested on a run)
@pytest.mark.parametrize("case", [c for c in CASES["cases"] if not c["passthrough"]],
                         ids=[c["name"] for c in CASES["cases"] if not c["passthrough"]])
def test_pipeline_step_puts_the_terms_in(case):
    hyp = with_glossary([case["sentence"]], _fixed(case), ENTRIES,
                        keep_alignments=False)[0][0]
    assert hyp["translation"] == case["expected"]
    assert "alignment" not in hyp
    assert hyp["applied_terms"] == {s: t for _, _, s in case["found"]
                                    for s2, t in ENTRIES if s2 == s}


def test_options_hold_the_glossary_and_passthrough():
    opts = TranslationOptions(glossary={"ticket": "billet"}, passthrough=False)
    assert opts.glossary == (("ticket", "billet"),) and hash(opts)
    assert opts == TranslationOptions(glossary=[("ticket", "billet")], passthrough=False)
    assert TranslationOptions().resolve(8, passthrough=True).passthrough is True
    assert opts.resolve(8, passthrough=True).passthrough is False
    assert OPTIONS["glossary"].inputs == ("glossary_source", "glossary_target")
    from keras_attn.decoding.options import DECODING_NAMES, DecodingOptions

    assert DecodingOptions is TranslationOptions
    assert "glossary" not in DECODING_NAMES and "passthrough" not in DECODING_NAMES


# --- the graph (TensorFlow ops) -------------------------------------------------------------
@pytest.fixture(scope="module")
def graph():
    """``(sentences, translations, alignments, sources, targets) -> (found, out)``: the
    graph's :func:`find` and :func:`with_glossary` (spans passed through) around a
    translator that answers the given translations; traced once."""
    import tensorflow as tf

    from keras_attn.export import glossary_graph

    strings = tf.TensorSpec([None], tf.string)

    @tf.function(input_signature=[strings] * 5)
    def run(sentences, translations, alignments, sources, targets):
        def translate(rows, keep_alignments):
            n = tf.size(rows)
            return {"translations": translations[:, None], "alignments": alignments[:, None],
                    "scores": tf.zeros([n, 1]), "confidences": tf.ones([n, 1]),
                    "truncated": tf.zeros([n], tf.bool)}

        found = glossary_graph.find(sentences, glossary_graph.checked(sources, targets))
        return found, glossary_graph.with_glossary(sentences, translate, sources, targets,
                                                   True, True)

    def call(cases, glossary=ENTRIES):
        return run(*(tf.constant([c[k] for c in cases], tf.string)
                     for k in ("sentence", "translation", "alignment")),
                   tf.constant([s for s, _ in glossary], tf.string),
                   tf.constant([t for _, t in glossary], tf.string))
    return call


def test_graph_gives_the_shared_cases(graph):
    from keras_attn.text import spans

    # The graph passes spans through in every case: the others hold none.
    assert all(c["passthrough"] or not spans.find(c["sentence"]) for c in CASES["cases"])
    found, out = graph(CASES["cases"])
    for k, case in enumerate(CASES["cases"]):
        got = out["translations"][k, 0].numpy().decode()
        assert (got, out["alignments"][k, 0].numpy().decode()) == (
            case["expected"], case["expected_alignment"]), case["name"]
        counts = out["applied_terms"][k].numpy()
        want = [sum(s == src for _, _, s in case["found"]) for src, _ in ENTRIES]
        assert counts.tolist() == want, case["name"]
        if not case["passthrough"]:  # bytes there, characters here
            sentence = case["sentence"]
            starts = found["start"][k].numpy().tolist()
            assert starts == [len(sentence[:a].encode()) for a, _, _ in case["found"]]


def test_graph_without_a_term_answers_as_without_a_glossary(graph):
    cases = CASES["cases"][:3]
    for glossary in ((), (("zzz", "q"),)):
        _, out = graph(cases, glossary)
        assert [t.decode() for t in out["translations"][:, 0].numpy()] == [
            c["translation"] for c in cases]
        assert [t.decode() for t in out["alignments"][:, 0].numpy()] == [
            c["alignment"] for c in cases]
        assert out["applied_terms"].shape == (3, len(glossary))


@pytest.mark.parametrize("sources, targets, says", [
    (["ticket"], [], "as many target terms"),
    (["ticket", " "], ["billet", "x"], "empty term"),
    (["a" * (g.MAX_TERM_CHARS + 1)], ["b"], "at most"),
    (["a\nb"], ["c"], "one line"),
    (["!!"], ["c"], "a letter or a digit"),
    (["Ticket", "ticket"], ["billet", "titre"], "two targets"),
])
def test_graph_refuses_a_bad_glossary(sources, targets, says):
    import tensorflow as tf

    from keras_attn.export import glossary_graph

    with pytest.raises(tf.errors.InvalidArgumentError, match=says):
        glossary_graph.checked(tf.constant(sources, tf.string), tf.constant(targets, tf.string))
    glossary_graph.checked(tf.constant(["Ticket", "ticket"]), tf.constant(["b", "b"]))


def test_a_glossary_of_the_most_terms_is_read_alike(graph):
    """MAX_TERMS terms (RE2 refuses a pattern of that many character classes: the
    follower is written once a run), the longest first across terms that end with a
    letter and terms that do not ("C++" before "C")."""
    glossary = g.entries({**{f"term{k}": f"t{k}" for k in range(g.MAX_TERMS - 2)},
                          "C": "c", "C++": "cpp"})
    case = {"sentence": "Use C++ or C with term7 and term77.", "passthrough": False,
            "translation": "Utilise C++ ou C avec term7 et term77.",
            "alignment": "0-0 1-1 2-2 3-3 4-4 5-5 6-6 7-7"}
    found = g.find(case["sentence"], glossary)
    assert [m.target for m in found] == ["cpp", "c", "t7", "t77"]
    expected = apply(case["sentence"], found, case["translation"], case["alignment"])
    assert expected[0] == "Utilise cpp ou c avec t7 et t77."
    _, out = graph([case], glossary)
    assert (out["translations"][0, 0].numpy().decode(),
            out["alignments"][0, 0].numpy().decode()) == expected


def test_the_serving_client_sends_a_glossary_to_translate_v4(tmp_path):
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "serve_client", pathlib.Path(__file__).parents[2] / "scripts" / "serve_client.py")
    client = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(client)
    url, body = client.build_rest_request(["I lost my ticket."], options={
        "glossary": {"ticket": "billet", " Tom": "Tom"}})
    assert body["signature_name"] == "translate_v4"
    assert (body["inputs"]["glossary_source"], body["inputs"]["glossary_target"]) == (
        ["ticket", "Tom"], ["billet", "Tom"])
    assert "glossary_source" not in client.option_values({}, "translate_v3")
    with pytest.raises(ValueError, match="two targets"):
        client.option_values({"glossary": {"a": "b", "A": "c"}}, "translate_v4")


def test_the_servers_glossary_flag_and_variable(tmp_path, monkeypatch):
    """``keras-attn serve --glossary [SRC-TGT=]FILE.tsv``, repeatable, or its variable; a
    file it cannot read stops the command naming the flag."""
    from keras_attn import cli
    from keras_attn.serve import terms

    first, second = tmp_path / "a.tsv", tmp_path / "b.tsv"
    first.write_text("ticket\tbillet\n", "utf-8")
    second.write_text("Tom\tTom\n", "utf-8")
    parser = cli.build_parser()
    args = parser.parse_args(["serve", "exported", "--glossary", str(first),
                              "--glossary", f"en-fr={second}"])
    assert terms.read_flags(args.glossaries) == {None: (("ticket", "billet"),),
                                                 ("en", "fr"): (("Tom", "Tom"),)}
    monkeypatch.setenv("KERAS_ATTN_SERVE_GLOSSARY", f"{first}{os.pathsep}en-fr={second}")
    assert terms.read_flags(parser.parse_args(["serve", "exported"]).glossaries) == \
        terms.read_flags(args.glossaries)
    monkeypatch.delenv("KERAS_ATTN_SERVE_GLOSSARY")
    assert parser.parse_args(["serve", "exported"]).glossaries is None
    second.write_text("Tom\tTom\tTom\n", "utf-8")
    with pytest.raises(SystemExit):
        parser.parse_args(["serve", "exported", "--glossary", str(second)])
