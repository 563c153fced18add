#!/usr/bin/env python
"""Query a TF Serving server that serves a keras_attn translator (REST or gRPC).

Examples::

    python scripts/serve_client.py "3 March 2021" "le 4 juillet 1999"          # REST :8501
    python scripts/serve_client.py --rest localhost:8501 --columnar "3 March 2021"
    python scripts/serve_client.py --grpc localhost:8500 "3 March 2021"        # needs
        # pip install "tensorflow-serving-api==2.21.*"
    echo "3 March 2021" | python scripts/serve_client.py                      # lines on stdin
    python scripts/serve_client.py --option beam_size=4 --option num_hypotheses=2 \
        --option return_alignments=true "3 March 2021"     # the ``translate_v2`` signature

Each request is built by a function separate from the one that sends it
(``build_rest_request`` / ``build_grpc_request``), so the request can be checked against
the SavedModel's signature without a server. The REST client uses only the standard
library; the gRPC client imports ``grpc`` and ``tensorflow_serving`` lazily.

The ``serving_default`` signature takes ``text`` (string ``(B,)``) and returns
``translation`` (string), ``score`` (float32) and ``truncated`` (bool), one per input.

The options signatures (``keras_attn.export.contract.OPTION_SIGNATURES``: ``translate``
with the options it first shipped with, ``translate_v2`` with every decoding option of
API.md, "Decoding options per request"; each frozen) take ``text`` plus their options as
inputs: ``options=`` of the builders (``--option NAME=VALUE`` here) fills the ones not
given with :data:`OPTION_DEFAULTS`, and goes to the newest signature unless another is
named. They return ``translations``, ``scores``, ``confidences`` and ``alignments``
``(B, N)`` and ``truncated`` ``(B,)``; a REST request for one is columnar (its options are
scalars, not one value per sentence).
"""
import argparse
import base64
import json
import sys
import urllib.error
import urllib.request

from keras_attn.decoding.options import DECODING_NAMES, GLOSSARY_INPUTS, OPTIONS
from keras_attn.export.contract import LATEST_OPTIONS_SIGNATURE, OPTION_SIGNATURES
from keras_attn.export.option_sets import GLOSSARY_SIGNATURE, PASSTHROUGH_SIGNATURE
from keras_attn.text import glossary as glossaries

MODEL_NAME = "translator"
SIGNATURE = "serving_default"
INPUT_NAME = "text"
OUTPUT_NAMES = ("translation", "score", "truncated")
TRANSLATE_SIGNATURE = LATEST_OPTIONS_SIGNATURE  # what ``options=`` go to by default
# The options signatures' inputs with the values a request sends when it does
# not choose, from the options' one declaration (keras_attn.decoding.options, which imports
# neither Keras nor TensorFlow): ``length_penalty`` -1 and ``max_length`` 0 mean the
# export's own values, an empty ``target_prefix`` no prefix (one string: for every
# sentence; B strings: one each).
OPTION_DEFAULTS = {name: [] if OPTIONS[name].dtype == "string"
                   else OPTIONS[name].signature_value(OPTIONS[name].default)
                   for name in DECODING_NAMES}
# translate_v3's: spans pass through (only an export that passes them through has it);
# translate_v4's: a glossary, no term (``options={"glossary": {...}}`` fills both).
OPTION_DEFAULTS["passthrough"] = True
OPTION_DEFAULTS.update({name: [] for name in GLOSSARY_INPUTS})


def options_signature(options):
    """The signature ``options`` go to when none is named: :data:`TRANSLATE_SIGNATURE`,
    ``translate_v3`` when they set ``passthrough``, ``translate_v4`` with a ``glossary``."""
    options = options or {}
    if "glossary" in options:
        return GLOSSARY_SIGNATURE
    return PASSTHROUGH_SIGNATURE if "passthrough" in options else TRANSLATE_SIGNATURE


def _as_bytes(text):
    return text if isinstance(text, bytes) else str(text).encode("utf-8")


def _json_string(text):
    """A JSON value for a string tensor element: the text, or ``{"b64": ...}`` for bytes
    that are not UTF-8 (TF Serving decodes that form into the raw bytes)."""
    raw = _as_bytes(text)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return {"b64": base64.b64encode(raw).decode("ascii")}


def option_values(options, signature=TRANSLATE_SIGNATURE):
    """Every option input of the options signature ``signature``: :data:`OPTION_DEFAULTS`
    (those it takes) updated with ``options`` (a dict by option name; a ``target_prefix`` string becomes a list of
    one). Values are cast to the default's type (JSON ``4`` for an int32 input, ``0.6`` for
    a float32 one), so TF Serving parses them.

    Raises:
        ValueError: an unknown option name (or one ``signature`` does not take).
    """
    names = OPTION_SIGNATURES[signature]
    options = dict(options)
    if "glossary" in options and GLOSSARY_INPUTS[0] in names:  # (source, target) lists
        pairs = glossaries.entries(options.pop("glossary"))
        options.update(zip(GLOSSARY_INPUTS, ([s for s, _ in pairs], [t for _, t in pairs])))
    unknown = sorted(set(options) - set(names))
    if unknown:
        raise ValueError(f"unknown decoding option(s) {unknown}; the options of "
                         f"{signature} are {list(names)}")
    values = {name: OPTION_DEFAULTS[name] for name in names}
    for name, value in options.items():
        if name == "target_prefix":
            value = [value] if isinstance(value, (str, bytes)) else list(value)
        elif name in GLOSSARY_INPUTS:
            value = list(value)
        else:
            value = type(OPTION_DEFAULTS[name])(value)
        values[name] = value
    return values


def build_rest_request(texts, model_name=MODEL_NAME, signature=None,
                       host="localhost:8501", columnar=False, options=None):
    """The REST predict request for ``texts``.

    Args:
        texts: list of str (or bytes).
        model_name: TF Serving model name. signature: signature name (default
            ``serving_default``, or :data:`TRANSLATE_SIGNATURE` when ``options`` are given).
        host: ``HOST:PORT`` of the REST API.
        columnar: ``{"inputs": {"text": [...]}}`` instead of the row format
            ``{"instances": [{"text": ...}, ...]}``.
        options: decoding options (dict by name) for an options signature; with them
            (or with ``signature`` one of them) the request is columnar and carries every
            option input of that signature (:func:`option_values`).

    Returns:
        ``(url, payload)``: the URL to POST to and the JSON-serialisable body.

    Example:
        >>> build_rest_request(["3 March 2021"])[1]
        {'signature_name': 'serving_default', 'instances': [{'text': '3 March 2021'}]}
        >>> build_rest_request(["3 March 2021"], options={"beam_size": 4})[1]["inputs"]["beam_size"]
        4
    """
    signature = signature or (SIGNATURE if options is None else options_signature(options))
    values = [_json_string(t) for t in texts]
    url = f"http://{host}/v1/models/{model_name}:predict"
    if options is not None or signature in OPTION_SIGNATURES:
        inputs = option_values(options or {}, signature)
        for name in ("target_prefix", *GLOSSARY_INPUTS):
            if name in inputs:
                inputs[name] = [_json_string(p) for p in inputs[name]]
        return url, {"signature_name": signature, "inputs": {INPUT_NAME: values, **inputs}}
    if columnar:
        return url, {"signature_name": signature, "inputs": {INPUT_NAME: values}}
    return url, {"signature_name": signature,
                 "instances": [{INPUT_NAME: v} for v in values]}


def send_rest(url, payload, timeout=30.0):
    """POST ``payload`` as JSON; returns a list of ``{"translation", "score", "truncated"}``.

    Raises:
        RuntimeError: the server answered with an error (its message included) or could not
            be reached.
    """
    body = json.dumps(payload).encode("utf-8")
    request = urllib.request.Request(url, data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            answer = json.loads(response.read().decode("utf-8"))
    except urllib.error.HTTPError as e:
        raise RuntimeError(f"{url}: HTTP {e.code}: {e.read().decode('utf-8', 'replace')}") from None
    except urllib.error.URLError as e:
        raise RuntimeError(f"{url}: cannot connect ({e.reason}); is TF Serving running?") from None
    return parse_rest_response(answer)


def parse_rest_response(answer):
    """Rows from a REST answer in the row (``predictions``) or columnar (``outputs``) form."""
    if "error" in answer:
        raise RuntimeError(f"TF Serving error: {answer['error']}")
    if "predictions" in answer:
        return [{k: _from_json(v) for k, v in row.items()} for row in answer["predictions"]]
    outputs = answer["outputs"]
    size = len(next(iter(outputs.values()), []))  # every output is (B, ...)
    return [{name: _from_json(outputs[name][i]) for name in outputs} for i in range(size)]


def _from_json(value):
    """Undo TF Serving's ``{"b64": ...}`` wrapping of non-UTF-8 strings (in lists too:
    an options signature's outputs are ``(B, N)``)."""
    if isinstance(value, list):
        return [_from_json(v) for v in value]
    if isinstance(value, dict) and set(value) == {"b64"}:
        return base64.b64decode(value["b64"]).decode("utf-8", "replace")
    return value


def _serving_api():
    try:
        import grpc
        from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc
    except ImportError as e:
        raise ImportError(
            "the gRPC client needs the TF Serving API protos: pip install "
            f"'tensorflow-serving-api==2.21.*' (and grpcio). Import failed with: {e}") from None
    return grpc, predict_pb2, prediction_service_pb2_grpc


def build_grpc_request(texts, model_name=MODEL_NAME, signature=None, options=None):
    """A ``tensorflow_serving.apis.predict_pb2.PredictRequest`` for ``texts``.

    The input ``text`` is a ``DT_STRING`` tensor of shape ``(len(texts),)``. With
    ``options`` (or ``signature`` an options signature), every option input of
    :func:`option_values`
    too: ``DT_INT32``, ``DT_FLOAT``, ``DT_BOOL`` scalars and ``target_prefix`` a
    ``DT_STRING`` tensor of shape ``(P,)``. ``signature`` as in :func:`build_rest_request`.

    Example:
        >>> request = build_grpc_request(["3 March 2021"])
        >>> request.inputs["text"].string_val
        [b'3 March 2021']
    """
    signature = signature or (SIGNATURE if options is None else options_signature(options))
    _, predict_pb2, _ = _serving_api()
    from tensorflow.core.framework import tensor_pb2, tensor_shape_pb2, types_pb2

    def strings(values):
        return tensor_pb2.TensorProto(
            dtype=types_pb2.DT_STRING,
            tensor_shape=tensor_shape_pb2.TensorShapeProto(
                dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=len(values))]),
            string_val=[_as_bytes(v) for v in values])

    request = predict_pb2.PredictRequest()
    request.model_spec.name = model_name
    request.model_spec.signature_name = signature
    request.inputs[INPUT_NAME].CopyFrom(strings(texts))
    if options is not None or signature in OPTION_SIGNATURES:
        for name, value in option_values(options or {}, signature).items():
            if name in ("target_prefix", *GLOSSARY_INPUTS):
                tensor = strings(value)
            elif isinstance(value, bool):
                tensor = tensor_pb2.TensorProto(dtype=types_pb2.DT_BOOL, bool_val=[value])
            elif isinstance(value, int):
                tensor = tensor_pb2.TensorProto(dtype=types_pb2.DT_INT32, int_val=[value])
            else:
                tensor = tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT, float_val=[value])
            request.inputs[name].CopyFrom(tensor)  # no tensor_shape: a scalar
    return request


def send_grpc(request, host="localhost:8500", timeout=30.0):
    """Send a ``PredictRequest``; returns rows like :func:`send_rest`."""
    grpc, _, prediction_service_pb2_grpc = _serving_api()
    with grpc.insecure_channel(host) as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        try:
            response = stub.Predict(request, timeout=timeout)
        except grpc.RpcError as e:
            raise RuntimeError(f"{host}: gRPC {e.code().name}: {e.details()}") from None
    return parse_grpc_response(response)


def parse_grpc_response(response):
    """Rows from a ``PredictResponse`` (a ``(B, N)`` output gives each row a list of N).

    ``tf.make_ndarray`` reads every encoding of a ``TensorProto`` (typed fields or packed
    ``tensor_content``) with its shape.
    """
    from tensorflow import make_ndarray

    def plain(value):
        if isinstance(value, list):
            return [plain(v) for v in value]
        return value.decode("utf-8", "replace") if isinstance(value, bytes) else value

    columns = {name: plain(make_ndarray(tensor).tolist())
               for name, tensor in response.outputs.items()}
    columns = {name: v if isinstance(v, list) else [v] for name, v in columns.items()}
    size = max((len(v) for v in columns.values()), default=0)
    return [{name: values[i] for name, values in columns.items() if i < len(values)}
            for i in range(size)]


def _parse_option(text):
    """``"beam_size=4"`` -> ``("beam_size", 4)``, typed as :data:`OPTION_DEFAULTS`."""
    name, sep, value = text.partition("=")
    if not sep or name not in OPTION_DEFAULTS:
        raise ValueError(f"--option {text!r}: expected NAME=VALUE with NAME one of "
                         f"{list(OPTION_DEFAULTS)}")
    default = OPTION_DEFAULTS[name]
    if name == "target_prefix":
        return name, value
    if isinstance(default, bool):
        if value.lower() not in ("true", "false", "1", "0"):
            raise ValueError(f"--option {text!r}: {name} is true or false")
        return name, value.lower() in ("true", "1")
    try:
        return name, type(default)(value)
    except ValueError:
        kind = "an integer" if isinstance(default, int) else "a number"
        raise ValueError(f"--option {text!r}: {name} is {kind}") from None


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("texts", nargs="*", help="sentences (default: lines of stdin)")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--rest", metavar="HOST:PORT", help="REST API (default localhost:8501)")
    where.add_argument("--grpc", metavar="HOST:PORT", help="gRPC API, e.g. localhost:8500")
    parser.add_argument("--model-name", default=MODEL_NAME)
    parser.add_argument("--signature", help=f"default {SIGNATURE}, or {TRANSLATE_SIGNATURE} "
                                            f"with --option (or one of "
                                            f"{list(OPTION_SIGNATURES)})")
    parser.add_argument("--option", action="append", default=[], metavar="NAME=VALUE",
                        help="a decoding option of an options signature (repeat it): "
                             + ", ".join(OPTION_DEFAULTS))
    parser.add_argument("--glossary", metavar="FILE.tsv", help="terms put in (source<TAB>target "
                        "lines): the translate_v4 signature")
    parser.add_argument("--columnar", action="store_true", help="REST columnar format")
    parser.add_argument("--timeout", type=float, default=30.0)
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args(argv)
    try:
        options = dict(_parse_option(o) for o in args.option)
        if args.glossary:
            options["glossary"] = glossaries.read_tsv(args.glossary)
        signature = args.signature or (options_signature(options) if options else SIGNATURE)
        if options and signature not in OPTION_SIGNATURES:
            raise ValueError(f"--option is for an options signature {list(OPTION_SIGNATURES)}")
        if signature in OPTION_SIGNATURES:
            option_values(options, signature)
    except ValueError as e:
        parser.error(str(e))
    options = options if signature in OPTION_SIGNATURES else None
    texts = args.texts or [line.rstrip("\n") for line in sys.stdin]
    try:
        if args.grpc:
            rows = send_grpc(build_grpc_request(texts, args.model_name, signature, options),
                             args.grpc, args.timeout)
        else:
            url, payload = build_rest_request(texts, args.model_name, signature,
                                              args.rest or "localhost:8501", args.columnar,
                                              options)
            rows = send_rest(url, payload, args.timeout)
    except (RuntimeError, ImportError) as e:
        print(f"serve_client: error: {e}", file=sys.stderr)
        return 1
    for source, row in zip(texts, rows):
        if args.json:
            print(json.dumps({"source": source, **row}, ensure_ascii=False))
        elif "translations" in row:  # the translate signature: n-best per sentence
            print(source)
            for i, (hyp, score) in enumerate(zip(row["translations"], row["scores"])):
                pairs = row.get("alignments", [""] * (i + 1))[i]
                print(f"  {i + 1}\t{score:.4f}\t{hyp}" + (f"\t{pairs}" if pairs else ""))
        else:
            flag = "  (input truncated)" if row.get("truncated") else ""
            print(f"{row.get('translation')}\t{row.get('score', float('nan')):.3f}{flag}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
