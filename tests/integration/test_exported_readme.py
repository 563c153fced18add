"""exported/README.md, the committed model's card: it is what scripts/make_exported.py
writes from the run's figures, and every command and code block of it runs against the
committed export as written (tests/support/doc_examples.py), or says in the page why it
cannot run here."""
import importlib.util
import json
import os

import pytest

from tests.support import doc_examples

PAGE = os.path.join(doc_examples.ROOT, "exported", "README.md")
SAVED_MODEL = os.path.join(doc_examples.ROOT, "exported", "saved_model", "translator", "1")
BLOCKS = doc_examples.blocks(PAGE)
RUN = [b for b in BLOCKS if b.not_run is None]


def test_every_block_runs_or_says_why_not():
    for block in BLOCKS:
        if block.not_run is not None:
            assert len(block.not_run) > 10, f"{block.id}: say why it is not run"
        else:
            assert block.lang in ("python", *doc_examples.SHELL), block.id
    langs = [b.lang for b in RUN]
    assert langs.count("python") >= 4 and len(RUN) >= 7, [b.id for b in RUN]
    # What the card promises is run: a call of each artefact, every REST body, saved_model_cli.
    text = "".join(b.text for b in RUN)
    for needed in ("keras-attn translate exported/run", 'signatures["serving_default"]',
                   '"instances"', '"inputs"', '"b64"', '"translate"', '"translate_v2"',
                   "saved_model_cli run", 'get_signature_runner("translate")',
                   '"translate_sentences"', "run_tflite_builtin"):
        assert needed in text, needed


def test_the_card_is_short():
    with open(PAGE, encoding="utf-8") as f:
        assert len(f.read().splitlines()) <= 150


def _make_exported():
    spec = importlib.util.spec_from_file_location(
        "make_exported", os.path.join(doc_examples.ROOT, "scripts", "make_exported.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _committed(path):
    with open(os.path.join(doc_examples.ROOT, "exported", path), encoding="utf-8") as f:
        return json.load(f)


def test_the_card_is_what_make_exported_writes_from_the_committed_run():
    """The card's figures are the committed run's (config, metrics, export report): the
    template filled in from them is the card, and other figures give another card."""
    from keras_attn import data

    make = _make_exported()
    config, metrics = _committed("run/config.json"), _committed("run/metrics.json")
    report = _committed("export_report.json")
    fields = make.card_fields(config, metrics, report, len(data.DATE_FORMATS))
    with open(PAGE, encoding="utf-8") as f:
        card = f.read()
    assert make.render_card(fields) == card, "run the card's template again: " \
        "python scripts/make_exported.py --run-dir exported/run (or edit scripts/exported_card.md)"
    assert f"{metrics['exact_match']:.2%}".replace("%", " %") in card
    assert f"{metrics['num_sentences']:,} held-out test dates" in card
    other = make.card_fields(config, dict(metrics, exact_match=0.5), report,
                             len(data.DATE_FORMATS))
    assert "50.00 %" in make.render_card(other) and make.render_card(other) != card


def test_the_card_refuses_a_placeholder_it_has_no_value_for(tmp_path):
    make = _make_exported()
    template = tmp_path / "card.md"
    template.write_text("# {{title}}\n{{missing}}\n", encoding="utf-8")
    assert make.render_card({"title": "T", "missing": "m"}, str(template)) == "# T\nm\n"
    with pytest.raises(KeyError, match="missing"):
        make.render_card({"title": "T"}, str(template))


def test_commands_and_expected_outputs_are_read():
    block = next(b for b in RUN if "saved_model_cli run" in b.text)
    commands = doc_examples.commands(block.text)
    assert [c.split()[0] for c, _ in commands] == ["saved_model_cli"]
    assert commands[0][1][1] == "Result for output key translations: [[b'2021-03-03' " \
                                "b'2021-03-23']]"
    doc_examples.check_output(["Result for output key scores: [[-0.4608 -3.3092]]"],
                              "Result for output key scores:\n[[-0.46077 -3.30923]]\n")
    with pytest.raises(AssertionError):
        doc_examples.check_output(["Result for output key scores: [[-0.4608 -3.3092]]"],
                                  "Result for output key scores:\n[[-0.46077 -3.40923]]\n")
    with pytest.raises(AssertionError):
        doc_examples.check_output(['{"outputs": {"translations": [["2020-03-03"]]}}'],
                                  '{"outputs": {"translations": [["2021-03-03"]]}}')


@pytest.fixture(scope="module")
def stand_in():
    return doc_examples.RestStandIn(SAVED_MODEL)


@pytest.fixture(scope="module")
def rest_host(stand_in):
    with stand_in.serving() as host:
        yield host


@pytest.mark.slow  # loads the SavedModel (~5 s)
def test_rest_stand_in_maps_json_as_tf_serving(stand_in):
    """Row and columnar bodies give the same tensors; b64 is bytes; TF Serving's refusals
    (an int32 given 4.0, an input the signature lacks, a missing one without default)."""
    rows = stand_in.predict({"instances": [{"text": "3 March 2021"},
                                           {"text": {"b64": "MyBNYXJjaCAyMDIx"}}]})
    columns = stand_in.predict({"inputs": {"text": ["3 March 2021", "3 March 2021"]}})
    assert rows[0] == columns[0] == 200
    assert [p["translation"] for p in rows[1]["predictions"]] == \
        columns[1]["outputs"]["translation"] == ["2021-03-03"] * 2
    bare = stand_in.predict({"instances": ["3 March 2021"]})  # one input: bare values
    assert bare[1]["predictions"][0]["translation"] == "2021-03-03"
    text_only = stand_in.predict({"signature_name": "translate",
                                  "inputs": {"text": ["3 March 2021"]}})
    assert text_only[1]["outputs"]["translations"] == [["2021-03-03"]]  # the defaults
    for body, says in [
            ({"signature_name": "translate", "inputs": {"text": ["x"], "beam_size": 4.0}},
             "JSON integers"),
            ({"signature_name": "translate", "inputs": {"text": ["x"],
                                                        "repetition_penalty": 1.0}},
             "Sent extra"),
            ({"signature_name": "score", "inputs": {"source": ["x"]}}, "does not match"),
            ({"signature_name": "nope", "inputs": {"text": ["x"]}}, "not found"),
            ({"inputs": {"text": ["x"]}, "instances": [{"text": "x"}]}, "exactly one")]:
        status, answer = stand_in.predict(body)
        assert status == 400 and says in answer["error"], (body, answer)


@pytest.mark.slow  # each block is a TensorFlow process or a request (~5-20 s each)
@pytest.mark.parametrize("block", RUN, ids=lambda b: b.id)
def test_block_runs_as_written(block, request):
    before = [b for b in BLOCKS[:BLOCKS.index(block)] if b.lang == "python"]
    host = None
    if doc_examples.SERVING_HOST in block.text or "serve_client.py" in block.text:
        host = request.getfixturevalue("rest_host")
    doc_examples.run_block(block, before[-1] if before else None, host=host)
