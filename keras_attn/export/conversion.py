"""TFLite conversion of staged SavedModels (TensorFlow-only).

An exporter traces its graphs once, in the exporting process, and stages them
(:func:`stage`): a SavedModel holding the traced functions as signatures and the variables
and tokenizers they capture, nothing that could be traced again. A :class:`Conversion`
turns one staged SavedModel into a flatbuffer (:func:`convert`), one quantization at a time,
so the float32 and int8 files of a target share one trace. Run as
``python -m keras_attn.export.conversion``, this module is a worker process of
:class:`keras_attn.export.workers.ConversionPool`: a job a line on stdin, an answer a line
on stdout.

Example:
    >>> stage({"serving_default": fn}, [module.captured_variables], "stage/encoder")
    >>> content = convert(Conversion("stage/encoder", ("serving_default",), "int8"))
"""
import dataclasses
import json
import struct
import sys
import time
# Whether :func:`convert` calls the converter's conversion of a SavedModel directly (True)
# or through ``tf.lite.TFLiteConverter.from_saved_model(...).convert()`` (False, the public
# path). The public path loads the whole SavedModel into Python twice, once to list its
# signatures and once for error messages' debug information, a third of a conversion's time;
# the direct path reads the graph once, as the converter itself does, and leaves out the
# flatbuffer's ``CONVERSION_METADATA`` entry (the converter's options, which the export
# report records). tests/test_export_speed.py converts both ways and compares the files.
DIRECT_CONVERSION = True
REPLY = "keras_attn.conversion "  # a worker's answer line (TensorFlow may write others)


@dataclasses.dataclass(frozen=True)
class Conversion:
    """One flatbuffer from a staged SavedModel.

    Args:
        saved_model: the staged SavedModel's folder (:func:`stage`).
        signature_keys: the signatures converted, in this order.
        quantization: ``"float32"``, ``"float16"`` (float16 weights) or ``"int8"``
            (dynamic-range: int8 weights, float activations).
        allow_custom_ops: tensorflow-text's kernels may stay as custom ops (the text
            target; its ops are checked after).
        aliases: ``(key, alias, ((input, renamed), ...))`` triples: a signature ``alias``
            added on the subgraph of ``key`` (:func:`alias_signature`).
        name: what the conversion makes, for its error message.
        direct: :data:`DIRECT_CONVERSION` when the conversion was asked for.
    """

    saved_model: str
    signature_keys: tuple
    quantization: str = "float32"
    allow_custom_ops: bool = False
    aliases: tuple = ()
    name: str = "the model"
    direct: bool = dataclasses.field(default_factory=lambda: DIRECT_CONVERSION)


def stage(functions, trackables, path):
    """Save ``functions`` (``{signature key: concrete function}``, traced) as a SavedModel at
    ``path`` for :func:`convert`, with ``trackables`` (the variables and tokenizers they
    capture) and nothing else: a module's own ``tf.function`` s would be traced again by the
    save."""
    import tensorflow as tf

    holder = tf.Module(name="staged")
    holder.captured = list(trackables)
    tf.saved_model.save(holder, path, signatures=dict(functions),
                        options=tf.saved_model.SaveOptions(experimental_custom_gradients=False))
    return path


def _converter(conversion):
    import tensorflow as tf

    keys = list(conversion.signature_keys)
    if not conversion.direct:
        return tf.lite.TFLiteConverter.from_saved_model(conversion.saved_model,
                                                        signature_keys=keys)
    from tensorflow.lite.python import lite

    class Direct(lite.TFLiteSavedModelConverterV2):
        """``from_saved_model``'s converter without the two Python loads of the SavedModel."""

        def convert(self):
            graph_def, _, _ = self._load_saved_model(self.saved_model_dir,
                                                     self._saved_model_tags)
            return self._convert_from_saved_model(graph_def)

    return Direct(conversion.saved_model, {tf.saved_model.SERVING}, keys)


def convert(conversion):
    """The flatbuffer of ``conversion`` (bytes), its aliases added.

    Raises:
        ValueError: the converter refused the graph (its message, with the conversion's
            ``name``).
    """
    import tensorflow as tf

    converter = _converter(conversion)
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    converter.allow_custom_ops = conversion.allow_custom_ops
    # An older options signature calls the newest: told that a called function is inlined
    # in each caller, the converter does not first fail, then retry so.
    converter._experimental_guarantee_all_funcs_one_use = True
    if conversion.quantization == "float16":
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.target_spec.supported_types = [tf.float16]
    elif conversion.quantization == "int8":
        converter.optimizations = [tf.lite.Optimize.DEFAULT]  # dynamic-range int8 weights
    try:
        content = converter.convert()
    except Exception as e:  # the converter raises ConverterError with the op list
        raise ValueError(f"TFLite conversion of {conversion.name} failed: {e}") from None
    for key, alias, inputs in conversion.aliases:
        content = alias_signature(content, key, alias, dict(inputs))
    return content


def alias_signature(content, key, alias, inputs):
    """The flatbuffer with one more signature, ``alias``, on the subgraph of ``key`` (no
    second copy of the graph): ``inputs`` ``{name in key: name in alias}`` renames inputs.

    With :data:`DIRECT_CONVERSION` the new signature and a new root table go in front of the
    file, pointing into it (:func:`_prepend_alias`, milliseconds); else the whole model is
    unpacked into Python objects and packed again (the flatbuffer object API, seconds)."""
    if DIRECT_CONVERSION:
        aliased = _prepend_alias(bytes(content), key, alias, inputs)
        if aliased is not None:
            return aliased
    import copy

    from tensorflow.lite.tools import flatbuffer_utils

    model = flatbuffer_utils.read_model_from_bytearray(bytearray(content))
    original = next(s for s in model.signatureDefs if s.signatureKey.decode("utf-8") == key)
    sig = copy.deepcopy(original)
    sig.signatureKey = alias.encode("utf-8")
    for tensor in sig.inputs:
        name = tensor.name.decode("utf-8")
        tensor.name = inputs.get(name, name).encode("utf-8")
    model.signatureDefs.append(sig)
    return bytes(flatbuffer_utils.convert_object_to_bytearray(model))


# The TFLite schema's fields (vtable slots) _prepend_alias reads: Model's version (a
# scalar; its other fields are references) and signature_defs; SignatureDef's inputs,
# outputs, signature_key and subgraph_index; TensorMap's name and tensor_index.
_MODEL_VERSION, _MODEL_SIGNATURES, _MODEL_SLOTS = 0, 7, 8
_SIG_INPUTS, _SIG_OUTPUTS, _SIG_KEY, _SIG_SUBGRAPH = 0, 1, 2, 4
_MAP_NAME, _MAP_INDEX = 0, 1


def _fields(buf, table):
    """``{slot: absolute position of the field}`` of the flatbuffer table at ``table``."""
    vtable = table - struct.unpack_from("<i", buf, table)[0]
    size = struct.unpack_from("<H", buf, vtable)[0]
    slots = struct.unpack_from(f"<{(size - 4) // 2}H", buf, vtable + 4)
    return {slot: table + offset for slot, offset in enumerate(slots) if offset}


def _target(buf, field):
    """Where the reference (uoffset) at ``field`` points."""
    return field + struct.unpack_from("<I", buf, field)[0]


def _vector(buf, field):
    """The absolute positions the vector of references at ``field`` points to."""
    at = _target(buf, field)
    return [_target(buf, at + 4 + 4 * i) for i in range(struct.unpack_from("<I", buf, at)[0])]


def _string(buf, field):
    at = _target(buf, field)
    return buf[at + 4: at + 4 + struct.unpack_from("<I", buf, at)[0]].decode("utf-8")


def _u32(buf, field):
    return struct.unpack_from("<I", buf, field)[0]


class _Prefix:
    """Flatbuffer objects written in front of an existing flatbuffer, parents before
    children (a reference points forward): a value is ``("u32", n)``, ``("old", position in
    the old buffer)`` or ``("new", name)`` of an object :meth:`name` d later."""

    def __init__(self, identifier=b"TFL3"):
        self.head = bytearray(b"\0\0\0\0" + identifier)
        self.fixups, self.named = [], {}

    def _align(self, n):
        self.head.extend(b"\0" * (-len(self.head) % n))

    def name(self, name, at):
        self.named[name] = at

    def table(self, values):
        slots = sorted(values)
        width = slots[-1] + 1
        offsets = {slot: 4 + 4 * i for i, slot in enumerate(slots)}
        self._align(4)
        vtable = len(self.head)
        self.head.extend(struct.pack(f"<HH{width}H", 4 + 2 * width, 4 + 4 * len(slots),
                                     *(offsets.get(i, 0) for i in range(width))))
        self._align(4)
        at = len(self.head)
        self.head.extend(struct.pack("<i", at - vtable) + bytes(4 * len(slots)))
        for slot, value in values.items():
            if value[0] == "u32":
                struct.pack_into("<I", self.head, at + offsets[slot], value[1])
            else:
                self.fixups.append((at + offsets[slot], value))
        return at

    def vector(self, references):
        self._align(4)
        at = len(self.head)
        self.head.extend(struct.pack("<I", len(references)) + bytes(4 * len(references)))
        self.fixups.extend((at + 4 + 4 * i, ref) for i, ref in enumerate(references))
        return at

    def string(self, text):
        self._align(4)
        at = len(self.head)
        data = text.encode("utf-8")
        self.head.extend(struct.pack("<I", len(data)) + data + b"\0")
        return at

    def join(self, buf, root):
        """The new flatbuffer: this prefix (rooted at ``root``), padded to a multiple of 16
        bytes, then ``buf``."""
        self._align(16)
        shift = len(self.head)
        struct.pack_into("<I", self.head, 0, root)
        for field, (kind, at) in self.fixups:
            target = at + shift if kind == "old" else self.named[at]
            struct.pack_into("<I", self.head, field, target - field)
        return bytes(self.head) + buf


def _prepend_alias(buf, key, alias, inputs):
    """:func:`alias_signature` by a prefix: a root Model table (the old one's fields, its
    signature list with one more entry), the new SignatureDef, its renamed TensorMaps and
    strings, then the old file unchanged (shifted by a multiple of 16, which keeps every
    alignment). None when the Model holds a field this code does not know."""
    model_fields = _fields(buf, _u32(buf, 0))
    if max(model_fields) >= _MODEL_SLOTS or _MODEL_SIGNATURES not in model_fields:
        return None
    old_sigs = _vector(buf, model_fields[_MODEL_SIGNATURES])
    sig = next(_fields(buf, t) for t in old_sigs if _string(buf, _fields(buf, t)[_SIG_KEY])
               == key)
    maps = [(_fields(buf, t), t) for t in _vector(buf, sig[_SIG_INPUTS])]
    out = _Prefix(buf[4:8])
    root = out.table({**{slot: ("u32", _u32(buf, field)) if slot == _MODEL_VERSION
                         else ("old", _target(buf, field))
                         for slot, field in model_fields.items()},
                      _MODEL_SIGNATURES: ("new", "signatures")})
    out.name("signatures", out.vector([("old", t) for t in old_sigs] + [("new", "sig")]))
    new_sig = {_SIG_INPUTS: ("new", "inputs"), _SIG_OUTPUTS: ("old", _target(
        buf, sig[_SIG_OUTPUTS])), _SIG_KEY: ("new", "key")}
    if _SIG_SUBGRAPH in sig:
        new_sig[_SIG_SUBGRAPH] = ("u32", _u32(buf, sig[_SIG_SUBGRAPH]))
    out.name("sig", out.table(new_sig))
    renamed = {i: inputs[_string(buf, f[_MAP_NAME])] for i, (f, _) in enumerate(maps)
               if _string(buf, f[_MAP_NAME]) in inputs}
    out.name("inputs", out.vector([("new", f"map{i}") if i in renamed else ("old", t)
                                   for i, (_, t) in enumerate(maps)]))
    for i in renamed:  # a field at its default (tensor_index 0) is absent: kept absent
        fields = maps[i][0]
        out.name(f"map{i}", out.table({_MAP_NAME: ("new", f"name{i}"), **(
            {_MAP_INDEX: ("u32", _u32(buf, fields[_MAP_INDEX]))} if _MAP_INDEX in fields
            else {})}))
    out.name("key", out.string(alias))
    for i, name in renamed.items():
        out.name(f"name{i}", out.string(name))
    return out.join(buf, root)


def run_conversion(conversion, output):
    """Convert and write the flatbuffer to ``output``; ``{"output", "seconds",
    "cpu_seconds"}``."""
    began, cpu = time.monotonic(), time.process_time()
    content = convert(conversion)
    with open(output, "wb") as f:
        f.write(content)
    return {"output": output, "seconds": round(time.monotonic() - began, 2),
            "cpu_seconds": round(time.process_time() - cpu, 2)}


def _serve(stdin=sys.stdin, stdout=sys.stdout):
    """A worker's loop: a JSON job a line in, a JSON answer a line out, until stdin closes."""
    import tensorflow  # noqa: F401  (before a job: its time is the start's, not the job's)
    import tensorflow_text  # noqa: F401  (registers the ops a text target's graph holds)

    fields = {f.name for f in dataclasses.fields(Conversion)}
    for line in stdin:
        job = json.loads(line)
        conversion = Conversion(**{k: _tuple(v) for k, v in job.items() if k in fields})
        try:
            answer = run_conversion(conversion, job["output"])
        except Exception as e:  # the exporting process raises it
            answer = {"error": str(e)}
        stdout.write(REPLY + json.dumps(answer) + "\n")
        stdout.flush()


def _tuple(value):
    """JSON's lists back as the tuples a :class:`Conversion` holds."""
    return tuple(map(_tuple, value)) if isinstance(value, list) else value


if __name__ == "__main__":
    _serve()
