"""The serving contract (keras_attn.export.contract, docs/serving_contract.md): a client
written against a shipped export keeps working on every later one."""
import copy
import os

import numpy as np
import pytest

from keras_attn.decoding.options import DECODING_NAMES, OPTIONS
from keras_attn.export import contract, option_sets
from keras_attn.export.option_sets import COMPILED_SIGNATURES

from tests.support import ROOT
EXPORTED = os.path.join(ROOT, "exported")


def _spec(dtype, shape, default=False):
    return {"dtype": dtype, "shape": shape, **({"default": True} if default else {})}


SHIPPED = {"saved_model": {
    "serving_default": {"inputs": {"text": _spec("string", [-1])},
                        "outputs": {"translation": _spec("string", [-1]),
                                    "score": _spec("float32", [-1])}},
    "translate": {"inputs": {"text": _spec("string", [-1]),
                             "beam_size": _spec("int32", [], default=True)},
                  "outputs": {"translations": _spec("string", [-1, -1])}},
    "step": {"inputs": {"cache": _spec("float32", [1, 4, 48, 32])},
             "outputs": {"logits": _spec("float32", [1, -1])}}}}


def _changed(edit):
    current = copy.deepcopy(SHIPPED)
    edit(current["saved_model"])
    return contract.breaking_changes(SHIPPED, current)


@pytest.mark.parametrize("edit, says", [
    (lambda s: s.pop("translate"), "'translate' was removed"),
    (lambda s: s["serving_default"]["inputs"].update(texts=s["serving_default"]["inputs"]
                                                     .pop("text")), "input 'text' was removed"),
    (lambda s: s["translate"]["inputs"]["beam_size"].update(dtype="int64"), "int32 -> int64"),
    (lambda s: s["translate"]["inputs"].update(seed=_spec("int32", [])), "new inputs ['seed']"),
    (lambda s: s["translate"]["inputs"].update(seed=_spec("int32", [], True)), "new inputs"),
    (lambda s: s["translate"]["inputs"]["beam_size"].pop("default"), "lost its default"),
    (lambda s: s["serving_default"]["outputs"].pop("score"), "output 'score' was removed"),
    (lambda s: s["serving_default"]["outputs"]["score"].update(shape=[-1, 1]), "rank"),
    (lambda s: s["serving_default"]["inputs"]["text"].update(shape=[1]), "shape"),
    (lambda s: s["step"]["inputs"]["cache"].update(shape=[1, 4, 64, 32]), "shape"),
    (lambda s: s["step"]["outputs"]["logits"].update(shape=[1, -1, 1]), "rank"),
])
def test_a_change_that_breaks_a_client_is_named(edit, says):
    problems = _changed(edit)
    assert any(says in p for p in problems), problems  # a rename: one removed, one new


@pytest.mark.parametrize("edit", [
    lambda s: s.update(translate_v2=copy.deepcopy(s["translate"])),      # a new signature
    lambda s: s["serving_default"]["outputs"].update(confidence=_spec("float32", [-1])),
    lambda s: s["step"]["inputs"]["cache"].update(shape=[1, 4, -1, 32]),  # accepts more
    lambda s: s["step"]["outputs"]["logits"].update(shape=[1, 7]),        # promises more
    lambda s: s["translate"]["inputs"]["text"].update(default=True),      # gains a default
])
def test_a_change_that_keeps_every_client_is_allowed(edit):
    assert _changed(edit) == []


def test_an_artefact_an_export_leaves_out_is_no_break():
    assert contract.breaking_changes(SHIPPED, {}) == []


def test_generic_view_ignores_the_models_size():
    step = SHIPPED["saved_model"]["step"]
    other = {"step": {"inputs": {"cache_0": _spec("float32", [1, 8, 32, 16]),
                                 "cache_1": _spec("float32", [1, 8, 32, 16])},
                      "outputs": step["outputs"]}}
    mine = {"step": {"inputs": {"cache_0": step["inputs"]["cache"]},
                     "outputs": step["outputs"]}}
    assert contract.generic(other) == contract.generic(mine)
    assert contract.generic(mine)["step"]["inputs"] == {
        "cache_<i>": _spec("float32", [-1, -1, -1, -1])}


def test_options_signatures_are_frozen_in_the_snapshot():
    """Each options signature's inputs are the code's frozen set; the newest takes every
    option (a new option of keras_attn.decoding.options needs a new signature)."""
    snapshot = contract.load_snapshot()
    # The committed export is a character model: no pass-through, no translate_v3 or v4.
    shipped = option_sets.exported_options_signatures(for_tflite=False, passthrough=False)
    for artefact in ("saved_model", "tflite_text_float32", "tflite_text_int8"):
        for name in shipped:
            options = contract.OPTION_SIGNATURES[name]
            assert set(snapshot[artefact][name]["inputs"]) == {"text", *options}, (artefact,
                                                                                   name)
        for name in option_sets.TEXT_SIGNATURES:
            assert name not in snapshot[artefact]
    assert set(contract.OPTION_SIGNATURES[contract.LATEST_OPTIONS_SIGNATURE]) == set(
        DECODING_NAMES)
    assert list(contract.OPTION_SIGNATURES) == ["translate", "translate_v2", "translate_v3",
                                                "translate_v4"]
    assert len(contract.OPTION_SIGNATURES["translate"]) == 10  # as it first shipped
    assert contract.OPTION_SIGNATURES["translate_v3"] == (
        *contract.OPTION_SIGNATURES["translate_v2"], "passthrough")
    # Every option of the options object is an input of the newest: the glossary as two.
    assert contract.OPTION_SIGNATURES["translate_v4"] == (
        *contract.OPTION_SIGNATURES["translate_v3"], *OPTIONS["glossary"].inputs)
    assert option_sets.exported_options_signatures(True, True) == shipped
    # A compiled twin (translate_v2_xla) takes and gives exactly what its signature does.
    for name, twin in COMPILED_SIGNATURES.items():
        if twin in shipped:
            assert snapshot["saved_model"][name] == snapshot["saved_model"][twin], name
        assert name not in snapshot["tflite_text_float32"]
    # Every option input of the SavedModel has its default (TF Serving fills it in).
    for name in shipped:
        inputs = snapshot["saved_model"][name]["inputs"]
        assert [k for k, v in inputs.items() if not v.get("default")] == ["text"], name


def test_newest_options_signature():
    assert contract.newest_options_signature({"translate", "serving_default"}) == "translate"
    assert contract.newest_options_signature(["translate_v2", "translate"]) == "translate_v2"
    with pytest.raises(ValueError, match="no options signature"):
        contract.newest_options_signature(["serving_default"])


def test_committed_export_keeps_the_contract():
    """exported/ breaks nothing of the snapshot, and the snapshot records all it ships."""
    current = contract.artefact_signatures(EXPORTED)
    shipped = contract.load_snapshot()
    assert set(current) == set(contract.ARTEFACTS)
    assert contract.breaking_changes(shipped, current) == []
    unrecorded = contract.breaking_changes(current, shipped)
    assert unrecorded == [], ("exported/ ships signatures or outputs the snapshot lacks: "
                              "python -m keras_attn.export.contract exported")


def test_tiny_export_keeps_the_contract(tiny_dates):
    """The tests' tiny export (another model size, no options signatures): every signature
    it has keeps the snapshot's; the builtin files' up to the model's size and depth."""
    current = contract.artefact_signatures(tiny_dates["export_dir"])
    shipped = contract.load_snapshot()
    assert {"saved_model", "tflite_text_float32", "tflite_builtin_float32"} <= set(current)
    for artefact, sigs in current.items():
        old = {k: v for k, v in shipped[artefact].items()
               if k not in contract.OPTION_SIGNATURES and k not in COMPILED_SIGNATURES}
        if artefact.startswith("tflite_builtin"):
            old, sigs = contract.generic(old), contract.generic(sigs)
        assert contract.breaking_changes({artefact: old}, {artefact: sigs}) == [], artefact


def test_runtime_sends_only_what_a_signature_takes():
    """The TFLite runtime and the SavedModel engine call the newest options signature an
    artefact has; an older one without the repetition controls still translates, and
    refuses a request that sets one (it cannot honour it)."""
    from keras_attn.decoding.options import DecodingOptions
    from keras_attn.export import runtime

    old = contract.OPTION_SIGNATURES["translate"]
    inputs = runtime.option_inputs(DecodingOptions(beam_size=2), old)
    assert list(inputs) == [n for n in OPTIONS if n in old] and inputs["beam_size"] == 2
    assert inputs["target_prefix"].dtype == object and inputs["seed"].dtype == np.int32
    with pytest.raises(ValueError, match="`repetition_penalty` is not an input"):
        runtime.option_inputs(DecodingOptions(repetition_penalty=1.5), old)
    assert set(runtime.option_inputs(DecodingOptions())) == set(DECODING_NAMES)
