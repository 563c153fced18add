#!/usr/bin/env python
"""Query a TF Serving server that serves a keras_attn translator (REST or gRPC).

Examples::

    python scripts/serve_client.py "3 March 2021" "le 4 juillet 1999"          # REST :8501
    python scripts/serve_client.py --rest localhost:8501 --columnar "3 March 2021"
    python scripts/serve_client.py --grpc localhost:8500 "3 March 2021"        # needs
        # pip install "tensorflow-serving-api==2.21.*"
    echo "3 March 2021" | python scripts/serve_client.py                      # lines on stdin

Each request is built by a function separate from the one that sends it
(``build_rest_request`` / ``build_grpc_request``), so the request can be checked against
the SavedModel's signature without a server. The REST client uses only the standard
library; the gRPC client imports ``grpc`` and ``tensorflow_serving`` lazily.

The ``serving_default`` signature takes ``text`` (string ``(B,)``) and returns
``translation`` (string), ``score`` (float32) and ``truncated`` (bool), one per input.
"""
import argparse
import base64
import json
import sys
import urllib.error
import urllib.request

MODEL_NAME = "translator"
SIGNATURE = "serving_default"
INPUT_NAME = "text"
OUTPUT_NAMES = ("translation", "score", "truncated")


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


def build_rest_request(texts, model_name=MODEL_NAME, signature=SIGNATURE,
                       host="localhost:8501", columnar=False):
    """The REST predict request for ``texts``.

    Args:
        texts: list of str (or bytes).
        model_name: TF Serving model name. signature: signature name.
        host: ``HOST:PORT`` of the REST API.
        columnar: ``{"inputs": {"text": [...]}}`` instead of the row format
            ``{"instances": [{"text": ...}, ...]}``.

    Returns:
        ``(url, payload)``: the URL to POST to and the JSON-serialisable body.

    Example:
        >>> build_rest_request(["3 March 2021"])[1]
        {'signature_name': 'serving_default', 'instances': [{'text': '3 March 2021'}]}
    """
    values = [_json_string(t) for t in texts]
    url = f"http://{host}/v1/models/{model_name}:predict"
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
    size = len(outputs[OUTPUT_NAMES[0]])
    return [{name: _from_json(outputs[name][i]) for name in outputs} for i in range(size)]


def _from_json(value):
    """Undo TF Serving's ``{"b64": ...}`` wrapping of non-UTF-8 strings."""
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


def build_grpc_request(texts, model_name=MODEL_NAME, signature=SIGNATURE):
    """A ``tensorflow_serving.apis.predict_pb2.PredictRequest`` for ``texts``.

    The input ``text`` is a ``DT_STRING`` tensor of shape ``(len(texts),)``.

    Example:
        >>> request = build_grpc_request(["3 March 2021"])
        >>> request.inputs["text"].string_val
        [b'3 March 2021']
    """
    _, predict_pb2, _ = _serving_api()
    from tensorflow.core.framework import tensor_pb2, tensor_shape_pb2, types_pb2

    request = predict_pb2.PredictRequest()
    request.model_spec.name = model_name
    request.model_spec.signature_name = signature
    tensor = tensor_pb2.TensorProto(
        dtype=types_pb2.DT_STRING,
        tensor_shape=tensor_shape_pb2.TensorShapeProto(
            dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=len(texts))]),
        string_val=[_as_bytes(t) for t in texts])
    request.inputs[INPUT_NAME].CopyFrom(tensor)
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
    """Rows from a ``PredictResponse``."""
    columns = {}
    for name, tensor in response.outputs.items():
        if tensor.string_val:
            columns[name] = [v.decode("utf-8", "replace") for v in tensor.string_val]
        elif tensor.float_val:
            columns[name] = list(tensor.float_val)
        elif tensor.bool_val:
            columns[name] = list(tensor.bool_val)
        else:
            columns[name] = list(tensor.int_val)
    size = max((len(v) for v in columns.values()), default=0)
    return [{name: values[i] for name, values in columns.items() if i < len(values)}
            for i in range(size)]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("texts", nargs="*", help="sentences (default: lines of stdin)")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--rest", metavar="HOST:PORT", help="REST API (default localhost:8501)")
    where.add_argument("--grpc", metavar="HOST:PORT", help="gRPC API, e.g. localhost:8500")
    parser.add_argument("--model-name", default=MODEL_NAME)
    parser.add_argument("--signature", default=SIGNATURE)
    parser.add_argument("--columnar", action="store_true", help="REST columnar format")
    parser.add_argument("--timeout", type=float, default=30.0)
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args(argv)
    texts = args.texts or [line.rstrip("\n") for line in sys.stdin]
    try:
        if args.grpc:
            rows = send_grpc(build_grpc_request(texts, args.model_name, args.signature),
                             args.grpc, args.timeout)
        else:
            url, payload = build_rest_request(texts, args.model_name, args.signature,
                                              args.rest or "localhost:8501", args.columnar)
            rows = send_rest(url, payload, args.timeout)
    except (RuntimeError, ImportError) as e:
        print(f"serve_client: error: {e}", file=sys.stderr)
        return 1
    for source, row in zip(texts, rows):
        if args.json:
            print(json.dumps({"source": source, **row}, ensure_ascii=False))
        else:
            flag = "  (input truncated)" if row.get("truncated") else ""
            print(f"{row.get('translation')}\t{row.get('score', float('nan')):.3f}{flag}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
