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
# report records). tests/export/test_export_speed.py converts both ways and compares the files.
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
        settings: a JSON-able dict the file carries as its export settings
            (:func:`with_settings`; None: none).
        name: what the conversion makes, for its error message.
        direct: :data:`DIRECT_CONVERSION` when the conversion was asked for.
    """

    saved_model: str
    signature_keys: tuple
    quantization: str = "float32"
    allow_custom_ops: bool = False
    aliases: tuple = ()
    settings: dict = None
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
    return edit(content, tuple((key, alias, dict(inputs))
                               for key, alias, inputs in conversion.aliases),
                conversion.settings)


def alias_signature(content, key, alias, inputs):
    """The flatbuffer with one more signature, ``alias``, on the subgraph of ``key`` (no
    second copy of the graph): ``inputs`` ``{name in key: name in alias}`` renames inputs."""
    return edit(content, aliases=((key, alias, inputs),))


def with_settings(content, settings):
    """The flatbuffer with ``settings`` (JSON) as its :data:`runtime.TFLITE_SETTINGS`
    metadata (``runtime.tflite_settings`` reads it back)."""
    return edit(content, settings=settings)


def edit(content, aliases=(), settings=None):
    """The flatbuffer with the signatures ``aliases`` (:func:`alias_signature`'s triples)
    and ``settings`` (:func:`with_settings`) added.

    With :data:`DIRECT_CONVERSION` the new root table and what it adds go in front of the
    file, pointing into it (:func:`_prepend`, milliseconds); else the whole model is unpacked
    into Python objects and packed again (the flatbuffer object API, seconds)."""
    if not aliases and settings is None:
        return bytes(content)
    if DIRECT_CONVERSION:
        edited = _prepend(bytes(content), aliases, settings)
        if edited is not None:
            return edited
    import copy

    import numpy as np
    from tensorflow.lite.python import schema_py_generated as schema
    from tensorflow.lite.tools import flatbuffer_utils

    from keras_attn.export.runtime import TFLITE_SETTINGS

    model = flatbuffer_utils.read_model_from_bytearray(bytearray(content))
    for key, alias, inputs in aliases:
        sig = copy.deepcopy(next(s for s in model.signatureDefs
                                 if s.signatureKey.decode("utf-8") == key))
        sig.signatureKey = alias.encode("utf-8")
        for tensor in sig.inputs:
            name = tensor.name.decode("utf-8")
            tensor.name = inputs.get(name, name).encode("utf-8")
        model.signatureDefs.append(sig)
    if settings is not None:
        buffer = schema.BufferT()
        buffer.data = np.frombuffer(json.dumps(settings, sort_keys=True).encode("utf-8"),
                                    np.uint8)
        model.buffers.append(buffer)
        entry = schema.MetadataT()
        entry.name = TFLITE_SETTINGS.encode("utf-8")
        entry.buffer = len(model.buffers) - 1
        model.metadata = [*(model.metadata or []), entry]
    return bytes(flatbuffer_utils.convert_object_to_bytearray(model))


# The TFLite schema's fields (vtable slots) _prepend reads: Model's version (a scalar; its
# other fields are references), buffers, metadata and signature_defs; SignatureDef's inputs,
# outputs, signature_key and subgraph_index; TensorMap's name and tensor_index; Buffer's
# data; Metadata's name and buffer.
_MODEL_VERSION, _MODEL_BUFFERS, _MODEL_METADATA, _MODEL_SIGNATURES, _MODEL_SLOTS = 0, 4, 6, 7, 8
_SIG_INPUTS, _SIG_OUTPUTS, _SIG_KEY, _SIG_SUBGRAPH = 0, 1, 2, 4
_MAP_NAME, _MAP_INDEX = 0, 1
_BUFFER_DATA, _METADATA_NAME, _METADATA_BUFFER = 0, 0, 1


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

    def data(self, data):
        """A vector of bytes starting on a 16-byte boundary (a Buffer's ``data``)."""
        self.head.extend(b"\0" * (-(len(self.head) + 4) % 16))
        at = len(self.head)
        self.head.extend(struct.pack("<I", len(data)) + data)
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


def _prepend(buf, aliases, settings):
    """:func:`edit` by a prefix: a root Model table (the old one's fields, its signature,
    buffer and metadata lists with the new entries), the new tables, vectors and strings,
    then the old file unchanged (shifted by a multiple of 16, which keeps every alignment).
    None when the Model holds a field this code does not know."""
    from keras_attn.export.runtime import TFLITE_SETTINGS

    model = _fields(buf, _u32(buf, 0))
    if max(model) >= _MODEL_SLOTS or not {_MODEL_SIGNATURES, _MODEL_BUFFERS} <= set(model):
        return None
    out = _Prefix(buf[4:8])
    root = {slot: ("u32", _u32(buf, field)) if slot == _MODEL_VERSION
            else ("old", _target(buf, field)) for slot, field in model.items()}
    sigs = _vector(buf, model[_MODEL_SIGNATURES])
    root[_MODEL_SIGNATURES] = ("new", "signatures")
    if settings is not None:
        root[_MODEL_BUFFERS], root[_MODEL_METADATA] = ("new", "buffers"), ("new", "metadata")
    out.name("root", out.table(root))
    out.name("signatures", out.vector([("old", t) for t in sigs]
                                      + [("new", f"sig{i}") for i in range(len(aliases))]))
    later = []  # (name, write): objects written after every parent that points to them
    for i, (key, alias, inputs) in enumerate(aliases):
        sig = next(_fields(buf, t) for t in sigs if _string(buf, _fields(buf, t)[_SIG_KEY])
                   == key)
        maps = [(_fields(buf, t), t) for t in _vector(buf, sig[_SIG_INPUTS])]
        new_sig = {_SIG_INPUTS: ("new", f"inputs{i}"), _SIG_KEY: ("new", f"key{i}"),
                   _SIG_OUTPUTS: ("old", _target(buf, sig[_SIG_OUTPUTS]))}
        if _SIG_SUBGRAPH in sig:
            new_sig[_SIG_SUBGRAPH] = ("u32", _u32(buf, sig[_SIG_SUBGRAPH]))
        out.name(f"sig{i}", out.table(new_sig))
        renamed = {j: inputs[_string(buf, f[_MAP_NAME])] for j, (f, _) in enumerate(maps)
                   if _string(buf, f[_MAP_NAME]) in inputs}
        out.name(f"inputs{i}", out.vector([("new", f"map{i}.{j}") if j in renamed
                                           else ("old", t) for j, (_, t) in enumerate(maps)]))
        for j, name in renamed.items():  # a field at its default (index 0) stays absent
            fields = maps[j][0]
            out.name(f"map{i}.{j}", out.table({_MAP_NAME: ("new", f"name{i}.{j}"), **(
                {_MAP_INDEX: ("u32", _u32(buf, fields[_MAP_INDEX]))}
                if _MAP_INDEX in fields else {})}))
            later.append((f"name{i}.{j}", lambda name=name: out.string(name)))
        later.append((f"key{i}", lambda alias=alias: out.string(alias)))
    if settings is not None:
        buffers = _vector(buf, model[_MODEL_BUFFERS])
        metadata = _vector(buf, model[_MODEL_METADATA]) if _MODEL_METADATA in model else []
        out.name("buffers", out.vector([("old", t) for t in buffers] + [("new", "buffer")]))
        out.name("metadata", out.vector([("old", t) for t in metadata] + [("new", "entry")]))
        out.name("buffer", out.table({_BUFFER_DATA: ("new", "settings")}))
        out.name("entry", out.table({_METADATA_NAME: ("new", "entry name"),
                                     _METADATA_BUFFER: ("u32", len(buffers))}))
        later.append(("entry name", lambda: out.string(TFLITE_SETTINGS)))
        text = json.dumps(settings, sort_keys=True).encode("utf-8")
        later.append(("settings", lambda: out.data(text)))
    for name, write in later:
        out.name(name, write())
    return out.join(buf, out.named["root"])


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
