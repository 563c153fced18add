"""Every decoding option reaches every surface under its one name: the flags of the CLI,
the fields of ``POST /translate``, the OpenAPI document of ``GET /spec`` (the forms of
``GET /docs`` are drawn from it), the newest serving signature's inputs, and the options
tables of docs/serving.md, docs/serving_contract.md and docs/cli.md.

The reference is :data:`keras_attn.decoding.options.OPTIONS`; each surface is read on its
own (a parser, an app's answer, a snapshot file, a Markdown table), so that a surface that
lacks an option, or names it otherwise, fails here.
"""
import dataclasses
import json
import os
import re

import pytest

from keras_attn.decoding.options import DECODING_NAMES, OPTIONS
from keras_attn.text import glossary as glossaries

from tests.support import ROOT
# A valid value of each option other than its default, written here: a new option fails
# test_every_option_has_a_value_here until it has one.
VALUES = {"beam_size": 3, "num_hypotheses": 2, "length_penalty": 0.25, "max_length": 20,
          "target_prefix": "20", "sampling_topk": 5, "sampling_topp": 0.75,
          "sampling_temperature": 0.5, "seed": 11, "return_alignments": True,
          "repetition_penalty": 1.5, "no_repeat_ngram_size": 3, "max_length_factor": 2.5,
          "passthrough": False, "glossary": {"ticket": "billet"}}
JSON_TYPES = {"int32": "integer", "float32": "number", "string": "string", "bool": "boolean",
              "glossary": "object"}
# How a form writes a value (a glossary: the object as JSON text), and a flag (its file).
FORM = {"glossary": json.dumps, "passthrough": lambda v: str(v).lower()}
# The CLI commands that decode, and the options each takes (the others take the whole set).
COMMANDS = {"translate": tuple(OPTIONS), "evaluate": ("beam_size", "length_penalty"),
            "score": ("length_penalty",)}


def read(path):
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        return f.read()


def flag(name):
    return "--" + name.replace("_", "-")


def test_every_option_has_a_value_here():
    assert list(VALUES) == list(OPTIONS)
    for name, value in VALUES.items():
        OPTIONS[name].check(value)
        assert value != OPTIONS[name].default, name


# --- the command line ----------------------------------------------------------------------
def cli_value(name, value, folder):
    """A value as its flag takes it: a switch, on/off, a glossary's file, a number."""
    if name == "glossary":
        path = folder / "glossary.tsv"
        path.write_text("".join(f"{s}\t{t}\n" for s, t in value.items()), "utf-8")
        return [flag(name), str(path)]
    if OPTIONS[name].dtype == "bool":
        return [flag(name), "on" if value else "off"] if OPTIONS[name].default is None \
            else [flag(name)]
    return [flag(name), str(value)]


def as_taken(name, value):
    """A value as the options object keeps it (a glossary: its checked pairs)."""
    return glossaries.entries(value) if name == "glossary" else value


@pytest.mark.parametrize("command", list(COMMANDS))
def test_each_decoding_command_takes_its_options_as_flags_of_their_names(command, tmp_path):
    from keras_attn import cli

    parser = cli.build_parser()
    argv = [command, "RUN"]
    for name in COMMANDS[command]:
        argv += cli_value(name, VALUES[name], tmp_path)
    args = parser.parse_args(argv)
    assert {name: getattr(args, name) for name in COMMANDS[command]} == {
        name: as_taken(name, VALUES[name]) for name in COMMANDS[command]}
    # No option under another name, none left out: the flags of options are exactly these.
    sub = next(a for a in parser._subparsers._group_actions[0].choices.values()
               if a.prog.endswith(" " + command))
    dests = {a.dest for a in sub._actions} & set(OPTIONS)
    assert dests == set(COMMANDS[command])


# --- HTTP ----------------------------------------------------------------------------------
@pytest.mark.parametrize("form", [False, True], ids=["json", "form"])
def test_every_option_is_a_field_of_translate(form):
    from keras_attn.serve import api

    values = {name: FORM.get(name, lambda v: str(v).lower() if isinstance(v, bool)
                             else str(v))(v) if form else v for name, v in VALUES.items()}
    request = api.parse_fields({"q": "x", "source": "dates", "target": "iso", **values},
                               ("dates", "iso"), form)
    assert dataclasses.asdict(request.options) == {n: as_taken(n, v) for n, v in VALUES.items()}


def test_spec_and_docs_describe_every_option():
    from starlette.testclient import TestClient

    from keras_attn.serve.app import Settings, create_app
    from keras_attn.serve.locate import locate
    from keras_attn.serve.replicas import InProcessReplicas

    app = create_app(locate(os.path.join(ROOT, "exported")), InProcessReplicas(None),
                     Settings())
    with TestClient(app) as client:
        document = client.get("/spec").json()
        page = client.get("/docs").text
    content = document["paths"]["/translate"]["post"]["requestBody"]["content"]
    assert set(content) == {"application/json", "application/x-www-form-urlencoded",
                            "multipart/form-data"}
    for kind, media in content.items():
        fields = media["schema"]["properties"]
        form = kind != "application/json"  # a form's glossary is its JSON text
        assert {name: fields[name]["type"] for name in OPTIONS if name in fields} == {
            name: "string" if form and opt.dtype == "glossary" else JSON_TYPES[opt.dtype]
            for name, opt in OPTIONS.items()}
    # /docs holds no field of its own: it draws each operation's form from /spec.
    assert 'fetch("spec")' in page and "schema.properties" in page
    assert not any(f'"{name}"' in page for name in OPTIONS)


# --- the graph -----------------------------------------------------------------------------
def test_the_newest_serving_signature_takes_every_option_under_its_name():
    """The snapshot of what ``exported/`` ships (keras_attn/export/signatures.json): every
    decoding option; the newest signature of a text export (translate_v4) every option,
    a glossary as its two string inputs."""
    from keras_attn.export.option_sets import (GLOSSARY_SIGNATURE, LATEST_OPTIONS_SIGNATURE,
                                                OPTION_SIGNATURES)
    from keras_attn.export.request import OPTION_SPECS

    snapshot = json.loads(read("keras_attn/export/signatures.json"))["artefacts"]
    for artefact in ("saved_model", "tflite_text_float32"):
        inputs = snapshot[artefact][LATEST_OPTIONS_SIGNATURE]["inputs"]
        assert {name: spec["dtype"] for name, spec in inputs.items() if name != "text"} == {
            name: OPTIONS[name].dtype for name in DECODING_NAMES}, artefact
    newest = {name: OPTION_SPECS[name].name for name in OPTION_SIGNATURES[GLOSSARY_SIGNATURE]}
    assert newest == {i: ("string" if o.dtype == "glossary" else o.dtype)
                      for o in OPTIONS.values() for i in o.inputs}


# --- the docs ------------------------------------------------------------------------------
def table_after(text, heading):
    """The rows of the first Markdown table after the line starting with ``heading``."""
    lines = text[text.index(heading):].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split(" | ")])
    return rows


def test_serving_md_lists_every_field_of_translate():
    rows = table_after(read("docs/serving.md"), "## Routes")
    fields = next(row[1] for row in rows if row[0] == "`POST /translate`")
    named = set(re.findall(r"`(\w+)`", fields))
    assert set(OPTIONS) <= named, sorted(set(OPTIONS) - named)


def test_serving_contract_md_lists_every_option_of_the_signatures():
    rows = table_after(read("docs/serving_contract.md"), "## The options signatures")
    named = {n for row in rows for n in re.findall(r"`(\w+)`", row[1])}
    assert set(OPTIONS) <= named, sorted(set(OPTIONS) - named)


def test_cli_md_gives_every_option_its_flag_and_commands():
    rows = table_after(read("docs/cli.md"), "## One name per option")
    documented = {re.fullmatch(r"`(\w+)`", row[0]).group(1):
                  (re.match(r"`(--[\w-]+)`", row[1]).group(1),
                   tuple(c.strip() for c in row[2].split(",")))
                  for row in rows}
    assert documented == {name: (flag(name), tuple(c for c, names in COMMANDS.items()
                                                   if name in names)) for name in OPTIONS}
