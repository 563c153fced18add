"""Running a markdown page's examples as a reader would (tests of exported/README.md; any
page: ``run_block(block, ...)`` for each of ``blocks(path)``).

Every fenced block of a page is run, or marked with the reason it is not, in an HTML
comment on the line before its fence (shown on GitHub as nothing, in the file as text)::

    <!-- not run: needs docker -->

A block marked ``<!-- continues the previous block -->`` runs after the python block above
it, in the same process (``interpreter`` built there is used here).

* ``python`` blocks run as a script in a fresh Python (cwd: the repository root).
* Shell blocks (no language, ``bash``, ``sh``, ``console``) are commands, a line ending in
  ``\\`` or an open quote continuing on the next; each runs with bash. ``curl`` and
  ``scripts/serve_client.py`` commands for ``localhost:8501`` are sent to
  :class:`RestStandIn`: TF Serving's REST API answered by the SavedModel.
* Comment lines right after a command or after a python block's code are its expected
  output (starting ``# e.g.``: an illustration, not checked; a line with ``...``: skipped): JSON compared as
  JSON, other lines as a sequence of words and numbers in the output; numbers match to
  :data:`TOLERANCE` (answers in a page are rounded).
"""
import base64
import contextlib
import dataclasses
import http.server
import json
import math
import os
import re
import shlex
import subprocess
import sys
import threading

from tests.support import guards

from tests.support import ROOT
SHELL = ("", "bash", "sh", "console", "shell")
NOT_RUN = re.compile(r"<!--\s*not run:\s*(.*?)\s*-->")
CONTINUES = re.compile(r"<!--\s*continues the previous block\s*-->")
# Absolute tolerance of a number in an expected answer: pages round scores to 4 decimals,
# and a re-export's float32 arithmetic moves them by ~1e-5.
TOLERANCE = 1e-3
SERVING_HOST = "localhost:8501"


@dataclasses.dataclass
class Block:
    """One fenced block: where it starts (1-based line of the fence), its language, its
    text (dedented), why it is not run (None: it runs) and whether it continues the
    python block before it."""

    path: str
    line: int
    lang: str
    text: str
    not_run: str = None
    continues: bool = False

    @property
    def id(self):
        return f"{os.path.basename(self.path)}:{self.line}"


def blocks(path):
    """Every fenced block of the markdown file ``path``."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    found, i, before = [], 0, ""
    while i < len(lines):
        fence = re.match(r"^(\s*)```(\w*)\s*$", lines[i])
        if not fence:
            if lines[i].strip():
                before = lines[i]
            i += 1
            continue
        indent, start = len(fence.group(1)), i
        i += 1
        body = []
        while i < len(lines) and lines[i].strip() != "```":
            body.append(lines[i][indent:] if lines[i][:indent].isspace() else lines[i])
            i += 1
        mark = NOT_RUN.search(before)
        found.append(Block(path, start + 1, fence.group(2), "\n".join(body) + "\n",
                           mark.group(1) if mark else None, bool(CONTINUES.search(before))))
        before, i = "", i + 1
    return found


EXAMPLE_LANGS = ("python", "bash", "sh", "shell", "console")
COMMAND = re.compile(r"^\s*(\$ |keras-attn\b|python3?\b|pip\b|curl\b|docker\b|saved_model_cli\b|"
                     r"tensorflow_model_server\b|bash\b|echo\b|printf\b|[A-Z_]+=\S*\s)")


def _first_line(block):
    return next((line for line in block.text.splitlines()
                 if line.strip() and not line.lstrip().startswith("#")), "")


def examples(paths):
    """Every example block of the markdown files ``paths``: a block whose language is one
    of :data:`EXAMPLE_LANGS`, or without a language whose first line is a command."""
    return [block for path in paths for block in blocks(str(path))
            if block.lang in EXAMPLE_LANGS or (block.lang == "" and
                                                COMMAND.match(_first_line(block)))]


# --- what a block says it prints -------------------------------------------------------------
def commands(text):
    """A shell block's commands, each with its expected output: ``[(command, [lines])]``."""
    found, buf = [], []
    for line in text.splitlines():
        if not buf and line.lstrip().startswith("#"):
            if found:
                found[-1][1].append(line.lstrip()[1:].strip())
            continue
        if not buf and not line.strip():
            continue
        buf.append(line)
        joined = "\n".join(buf)
        if joined.rstrip().endswith("\\"):
            continue
        try:
            shlex.split(joined, comments=True)
        except ValueError:  # an open quote: the command goes on
            continue
        found.append((joined, []))
        buf = []
    return found


def python_expected(code):
    """The comment lines at column 0 that follow code in a python block."""
    expected, seen_code = [], False
    for line in code.splitlines():
        if line.startswith("#") and seen_code:
            expected.append(line[1:].strip())
        elif line.strip():
            seen_code = True
    return expected


def check_output(expected, output, where=""):
    """Assert that ``output`` says what the ``expected`` comment lines say."""
    lines = [e for e in expected if e and "..." not in e]
    if not lines or expected[0].startswith("e.g."):
        return
    text = "\n".join(lines)
    try:
        want = json.loads(text)
    except ValueError:
        want = None
    if want is not None and isinstance(want, (dict, list)):
        _check_json(want, json.loads(output), where)
        return
    tokens = _tokens(output)
    for line in lines:
        assert _contains(tokens, _tokens(line)), (
            f"{where}: the page says {line!r}; the output is:\n{output[-3000:]}")


def _tokens(text):
    # b'...' literals, numbers, then words and single symbols.
    return re.findall(r"b'[^']*'|-?\d+\.\d+(?:e[-+]?\d+)?|-?\d+|\w+|\S", text)


def _same(a, b):
    try:
        return math.isclose(float(a), float(b), abs_tol=TOLERANCE)
    except ValueError:
        return a == b


def _contains(tokens, part):
    n = len(part)
    return any(all(_same(p, t) for p, t in zip(part, tokens[i:i + n]))
               for i in range(len(tokens) - n + 1))


def _check_json(want, got, where):
    if isinstance(want, dict):
        assert isinstance(got, dict) and set(want) <= set(got), (where, want, got)
        for key in want:
            _check_json(want[key], got[key], f"{where}.{key}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), (where, want, got)
        for i, (w, g) in enumerate(zip(want, got)):
            _check_json(w, g, f"{where}[{i}]")
    elif isinstance(want, float):
        assert math.isclose(want, got, abs_tol=TOLERANCE), (where, want, got)
    else:
        assert want == got, (where, want, got)


# --- TF Serving's REST API, answered by a SavedModel ---------------------------------------
class RestStandIn:
    """TF Serving's REST API (``/v1/models/<name>``, ``/metadata``, ``:predict``) over one
    SavedModel, with TF Serving's documented JSON mapping (tensorflow/serving
    ``g3doc/api_rest.md``; ``predict_util.cc``):

    * row format, ``{"instances": [...]}``: one object per example, each input stacked on a
      new axis 0 (a bare value per example when the signature has one input); the answer
      ``{"predictions": [...]}``, one object per example (every output sliced on axis 0);
    * columnar format, ``{"inputs": {...}}``: each input the tensor as given (a bare value
      for a single input); the answer ``{"outputs": {...}}``;
    * ``{"b64": "..."}`` is the bytes it encodes; an integer input needs JSON integers;
    * an input left out takes the SignatureDef's default, an error without one; an input
      the signature lacks is an error (``input size does not match signature``).

    Args:
        path: the SavedModel version folder. name: the model name it is served as.
    """

    def __init__(self, path, name="translator"):
        import tensorflow as tf
        from tensorflow.core.protobuf import saved_model_pb2

        try:
            import tensorflow_text  # noqa: F401  (a SentencePiece model's ops)
        except ImportError:
            pass
        self.tf, self.name = tf, name
        self.loaded = tf.saved_model.load(path)
        proto = saved_model_pb2.SavedModel()
        with open(os.path.join(path, "saved_model.pb"), "rb") as f:
            proto.ParseFromString(f.read())
        self.defs = {k: v for k, v in proto.meta_graphs[0].signature_def.items()
                     if not k.startswith("__")}

    def status(self):
        return {"model_version_status": [{"version": "1", "state": "AVAILABLE", "status": {
            "error_code": "OK", "error_message": ""}}]}

    def metadata(self):
        from google.protobuf import json_format

        return {"model_spec": {"name": self.name, "version": "1"}, "metadata": {
            "signature_def": {"signature_def": {k: json_format.MessageToDict(v)
                                                for k, v in self.defs.items()}}}}

    def predict(self, body):
        """``(HTTP status, answer)`` for a ``:predict`` request body (a dict)."""
        tf = self.tf
        name = body.get("signature_name", "serving_default")
        if name not in self.defs:
            return 400, {"error": f"Serving signature name: \"{name}\" not found in "
                                  "signature def"}
        sig = self.defs[name]
        if ("instances" in body) == ("inputs" in body):
            return 400, {"error": "JSON Value must have exactly one of 'instances' or "
                                  "'inputs'"}
        single = next(iter(sig.inputs)) if len(sig.inputs) == 1 else None
        if "instances" in body:
            rows = body["instances"]
            if single and not all(isinstance(r, dict) and set(r) == {single} for r in rows):
                rows = [{single: r} for r in rows]
            if not rows or any(set(r) != set(rows[0]) for r in rows):
                return 400, {"error": "instances must be objects with the same keys"}
            columns = {k: [r[k] for r in rows] for k in rows[0]}
        else:
            columns = body["inputs"]
            if single and not (isinstance(columns, dict) and set(columns) == {single}):
                columns = {single: columns}
        if len(columns) > len(sig.inputs) or (len(columns) < len(sig.inputs)
                                              and not sig.defaults):
            return 400, {"error": f"input size does not match signature: {len(columns)}!="
                                  f"{len(sig.inputs)} len({sorted(columns)}) != "
                                  f"len({sorted(sig.inputs)})"}
        extra = sorted(set(columns) - set(sig.inputs))
        if extra:
            return 400, {"error": f"input size does not match signature: Sent extra: {extra}"}
        inputs = {}
        for key, info in sig.inputs.items():
            dtype = tf.dtypes.as_dtype(info.dtype)
            if key in columns:
                try:
                    inputs[key] = _tensor(columns[key], dtype)
                except ValueError as e:
                    return 400, {"error": f"input {key}: {e}"}
            elif key in sig.defaults:
                inputs[key] = tf.constant(tf.make_ndarray(sig.defaults[key]), dtype)
            else:
                return 400, {"error": f"Missing input: {key}"}
        try:
            out = self.loaded.signatures[name](**inputs)
        except (tf.errors.InvalidArgumentError, TypeError, ValueError) as e:
            return 400, {"error": str(getattr(e, "message", e))}
        out = {k: _json_value(v.numpy(), k) for k, v in out.items()}
        if "inputs" in body:
            return 200, {"outputs": next(iter(out.values())) if len(out) == 1 else out}
        n = len(next(iter(columns.values())))
        rows = [{k: v[i] for k, v in out.items()} for i in range(n)]
        return 200, {"predictions": [next(iter(r.values())) if len(r) == 1 else r
                                     for r in rows]}

    @contextlib.contextmanager
    def serving(self):
        """The stand-in on a free loopback port, in a thread; yields ``host:port``."""
        stand_in = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _answer(self, status, answer):
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                base = f"/v1/models/{stand_in.name}"
                if self.path == base:
                    return self._answer(200, stand_in.status())
                if self.path == base + "/metadata":
                    return self._answer(200, stand_in.metadata())
                return self._answer(404, {"error": f"unknown path {self.path}"})

            def do_POST(self):
                if self.path != f"/v1/models/{stand_in.name}:predict":
                    return self._answer(404, {"error": f"unknown path {self.path}"})
                try:
                    body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                except ValueError as e:
                    return self._answer(400, {"error": f"JSON Parse error: {e}"})
                self._answer(*stand_in.predict(body))

            def log_message(self, *args):
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield f"127.0.0.1:{server.server_port}"
        finally:
            server.shutdown()
            server.server_close()


def _decoded(value):
    if isinstance(value, dict) and set(value) == {"b64"}:
        return base64.b64decode(value["b64"])
    if isinstance(value, list):
        return [_decoded(v) for v in value]
    return value.encode("utf-8") if isinstance(value, str) else value


def _tensor(value, dtype):
    """A JSON value as TF Serving parses it into a tensor of ``dtype``."""
    import numpy as np
    import tensorflow as tf

    if dtype == tf.string:
        value = _decoded(value)
        return tf.constant(np.array(value, dtype=object).reshape(np.shape(value)), tf.string)

    def leaves(v):
        return [x for item in v for x in leaves(item)] if isinstance(v, list) else [v]

    kinds = {type(x) for x in leaves(value)}
    if dtype.is_integer and not kinds <= {int}:
        raise ValueError(f"{dtype.name} needs JSON integers, got {value!r}")
    if dtype == tf.bool and not kinds <= {bool}:
        raise ValueError(f"bool needs JSON true/false, got {value!r}")
    if dtype.is_floating and not kinds <= {int, float}:
        raise ValueError(f"{dtype.name} needs JSON numbers, got {value!r}")
    return tf.constant(value, dtype)


def _json_value(array, name):
    """A tensor as TF Serving writes it: nested lists; strings as text (``{"b64"}`` for an
    output whose name ends in ``_bytes``)."""
    if array.dtype == object:
        def text(b):
            if name.endswith("_bytes"):
                return {"b64": base64.b64encode(b).decode()}
            return b.decode("utf-8", "replace")
        flat = [text(b) for b in array.reshape(-1)]
        import numpy as np
        return np.array(flat, dtype=object).reshape(array.shape).tolist()
    return array.tolist()


# --- running a block -------------------------------------------------------------------------
def environment():
    """The environment a reader's shell has: this Python's ``bin`` first on ``PATH`` (its
    ``python``, ``saved_model_cli``, ``keras-attn``), the repository importable."""
    return dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep
                + os.environ.get("PATH", ""), PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="3",
                CUDA_VISIBLE_DEVICES="")


def point_at(command, host):
    """``command`` sent to ``host`` instead of TF Serving's ``localhost:8501``."""
    command = command.replace(SERVING_HOST, host)
    if "serve_client.py" in command and "--rest" not in command and "--grpc" not in command:
        command = command.replace("serve_client.py", f"serve_client.py --rest {host}", 1)
    return command


def run_python(code, cwd=ROOT, seconds=60):
    proc = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=environment(),
                          capture_output=True, text=True, timeout=guards.timeout(seconds))
    assert proc.returncode == 0, f"exit {proc.returncode}:\n{proc.stderr[-4000:]}"
    return proc.stdout


def run_shell(command, cwd=ROOT, seconds=60):
    proc = subprocess.run(["bash", "-c", command], cwd=cwd, env=environment(),
                          capture_output=True, text=True, timeout=guards.timeout(seconds))
    assert proc.returncode == 0, (f"{command}\nexit {proc.returncode}:\n"
                                  f"{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    return proc.stdout


def run_block(block, previous=None, host=None, cwd=ROOT, seconds=60):
    """Run one block (its expected outputs checked); ``previous``: the python block it
    continues; ``host``: where TF Serving's REST API answers (:class:`RestStandIn`)."""
    assert block.not_run is None, f"{block.id} is marked not run: {block.not_run}"
    if block.lang == "python":
        code = (previous.text if block.continues and previous else "") + block.text
        output = run_python(code, cwd, seconds)
        check_output(python_expected(block.text), output, block.id)
        return output
    assert block.lang in SHELL, f"{block.id}: no way to run a {block.lang!r} block"
    outputs = []
    for command, expected in commands(block.text):
        if SERVING_HOST in command or "serve_client.py" in command:
            assert host, f"{block.id}: {command!r} needs the REST stand-in (host=)"
            command = point_at(command, host)
        output = run_shell(command, cwd, seconds)
        check_output(expected, output, f"{block.id}: {command.splitlines()[0]}")
        outputs.append(output)
    return "".join(outputs)
