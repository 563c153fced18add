"""The serving contract: what every export keeps, so that a client written against one
export works on every later one (docs/serving_contract.md). Imports neither Keras nor
TensorFlow until :func:`artefact_signatures` is called.

The rule: a shipped signature is frozen (inputs never change, not even by one with a
default; outputs may grow, never shrink or change); a new option set is a new signature.
:data:`SNAPSHOT` records every artefact's signatures as they shipped.

Example:
    >>> breaking_changes(load_snapshot(), artefact_signatures("exported"))
    []
"""
import json
import os
import re

from keras_attn.export.option_sets import (LATEST_OPTIONS_SIGNATURE, OPTION_SIGNATURES,
                                            newest_options_signature)

SNAPSHOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "signatures.json")
# Artefacts of an export folder (``keras-attn export --export-dir DIR``) and where they lie.
ARTEFACTS = {"saved_model": os.path.join("saved_model", "translator", "1"),
             "tflite_text_float32": os.path.join("tflite", "text_float32.tflite"),
             "tflite_text_int8": os.path.join("tflite", "text_int8.tflite"),
             "tflite_builtin_float32": os.path.join("tflite", "builtin_float32"),
             "tflite_builtin_int8": os.path.join("tflite", "builtin_int8")}


def artefact_signatures(export_dir):
    """``{artefact: {signature: {"inputs": {name: spec}, "outputs": {name: spec}}}}`` of the
    artefacts of :data:`ARTEFACTS` in ``export_dir``; a spec is ``{"dtype", "shape"}`` (-1 =
    any size), a SavedModel input with a default also ``"default": true``."""
    from keras_attn.export import runtime, saved_model, tflite

    found = {}
    for artefact, rel in ARTEFACTS.items():
        path = os.path.join(export_dir, rel)
        if not os.path.exists(path):
            continue
        if artefact == "saved_model":
            sigs = saved_model.saved_model_signatures(path)
        else:
            sigs = {}
            for file in ([os.path.join(path, name) for name in runtime.BUILTIN_FILES]
                         if os.path.isdir(path) else [path]):
                with open(file, "rb") as f:
                    sigs.update(tflite.signatures_of(f.read()))
        found[artefact] = {name: {"inputs": sig["inputs"], "outputs": sig["outputs"]}
                           for name, sig in sigs.items()}
    return found


def load_snapshot(path=SNAPSHOT):
    """The committed snapshot (``{"artefacts": ...}`` as :func:`artefact_signatures`)."""
    with open(path, encoding="utf-8") as f:
        return json.load(f)["artefacts"]


def generic(signatures):
    """``signatures`` of one artefact with what depends on the model's size left out: names
    numbered by layer (``cache_k_0``) as one name (``cache_k_<i>``), sizes as -1 (ranks
    kept). Compares a builtin file of another model with the snapshot's."""
    out = {}
    for key, sig in signatures.items():
        out[key] = {side: {re.sub(r"_\d+$", "_<i>", name): {**spec, "shape": (
            None if spec["shape"] is None else [-1] * len(spec["shape"]))}
            for name, spec in specs.items()} for side, specs in sig.items()}
    return out


def breaking_changes(shipped, current, artefacts=None):
    """What ``current`` breaks of ``shipped`` (both :func:`artefact_signatures`' dicts) by
    the module's rule: sentences, one per break. ``artefacts``: only these (default: those
    both have; an artefact that ``current`` lacks is allowed)."""
    problems = []
    names = artefacts or sorted(set(shipped) & set(current))
    for artefact in names:
        for key, old in sorted(shipped[artefact].items()):
            new = current[artefact].get(key)
            where = f"{artefact} signature {key!r}"
            if new is None:
                problems.append(f"{where} was removed")
                continue
            added = sorted(set(new["inputs"]) - set(old["inputs"]))
            if added:
                problems.append(f"{where} has new inputs {added}: its clients do not send "
                                "them (add a new signature instead)")
            for side in ("inputs", "outputs"):
                for name, spec in sorted(old[side].items()):
                    now = new[side].get(name)
                    if now is None:
                        problems.append(f"{where}: {side[:-1]} {name!r} was removed")
                        continue
                    problems += [f"{where}: {side[:-1]} {name!r} {p}"
                                 for p in _spec_changes(spec, now, side == "inputs")]
    return problems


def _spec_changes(old, new, is_input):
    changes = []
    if old["dtype"] != new["dtype"]:
        changes.append(f"changed dtype {old['dtype']} -> {new['dtype']}")
    if old.get("default") and not new.get("default"):
        changes.append("lost its default")
    if old["shape"] is None or new["shape"] is None:
        if old["shape"] != new["shape"] and (is_input or old["shape"] is not None):
            changes.append(f"changed shape {old['shape']} -> {new['shape']}")
        return changes
    if len(old["shape"]) != len(new["shape"]):
        return changes + [f"changed rank {old['shape']} -> {new['shape']}"]
    for a, b in zip(old["shape"], new["shape"]):
        # An input may accept more (a fixed size becoming any), an output may promise more.
        if a != b and not (b == -1 if is_input else a == -1):
            changes.append(f"changed shape {old['shape']} -> {new['shape']}")
            break
    return changes


def write_snapshot(export_dir, path=SNAPSHOT):
    """Record ``export_dir``'s signatures as the snapshot, refused when they break the one
    at ``path`` (a new signature or output is recorded; nothing shipped is dropped).

    Raises:
        ValueError: the breaking changes, one per line.
    """
    current = artefact_signatures(export_dir)
    if os.path.exists(path):
        problems = breaking_changes(load_snapshot(path), current)
        if problems:
            raise ValueError("the export breaks the serving contract:\n" + "\n".join(problems))
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"about": "Every signature that exported/ ships (keras_attn.export."
                            "contract): a later export may add signatures and outputs, "
                            "never change these. Written by `python -m "
                            "keras_attn.export.contract EXPORT_DIR`.",
                   "artefacts": current}, f, indent=1, sort_keys=True)
        f.write("\n")
    return current


if __name__ == "__main__":
    import sys

    if len(sys.argv) != 2:
        sys.exit("usage: python -m keras_attn.export.contract EXPORT_DIR  (writes "
                 f"{os.path.relpath(SNAPSHOT)})")
    try:
        write_snapshot(sys.argv[1])
    except ValueError as e:
        sys.exit(str(e))
