"""The routes' declarations (:class:`Endpoint`), and the OpenAPI 3 document (``GET /spec``)
made from them: the app mounts its handlers by the same declarations, so the document
cannot list a route the server lacks, or miss one.

Example:
    >>> document = openapi(ENDPOINTS, version="0.1.0")
    >>> sorted(document["paths"])[:3]
    ['/attention', '/detect', '/docs']
"""
import dataclasses
from typing import Optional

from keras_attn.decoding.options import DECODING_NAMES, OPTIONS
from keras_attn.serve.engines import Capabilities

ERROR = {"type": "object", "properties": {"error": {"type": "string",
                                                    "description": "What went wrong"}},
         "required": ["error"]}
TEXTS = {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]}
LANGUAGE = {"type": "object", "properties": {"code": {"type": "string"},
                                             "name": {"type": "string"}}}
DETECTIONS = {"type": "array", "items": {"type": "object", "properties": {
    "confidence": {"type": "number", "minimum": 0, "maximum": 100},
    "language": {"type": "string", "description": "ISO 639-1 code"}}}}
VERSION_STATUS = {"type": "array", "items": {"type": "object", "properties": {
    "version": {"type": "string"},
    "state": {"type": "string", "enum": ["START", "LOADING", "AVAILABLE", "UNLOADING", "END"]},
    "status": {"type": "object", "properties": {"error_code": {"type": "string"},
                                                "error_message": {"type": "string"}}}}}}
ERROR_TEXT = {400: "Invalid request (the message names the field)", 401: "Unauthorized",
              403: "Refused (a key, or a feature off)", 404: "Not found",
              405: "Wrong method", 413: "Body over --max-body-bytes",
              429: "Over the request limit", 500: "Translation error",
              501: "Not available with this artefact", 503: "Queue full (Retry-After)",
              504: "Timed out"}


@dataclasses.dataclass(frozen=True)
class Field:
    """One field of a request. ``type``: a JSON Schema type, ``"file"`` (a multipart upload)
    or ``"text"`` (a string, or in JSON a list of strings)."""

    name: str
    type: str = "string"
    required: bool = False
    description: str = ""
    example: object = None


@dataclasses.dataclass(frozen=True)
class Endpoint:
    """A route: ``method path``, what it reads (``fields``; ``in_path``: the path's
    parameters) and its answers (``schema`` of the 200 answer, None: not JSON; ``errors``:
    its error statuses; ``media``: the 200 answer's media type)."""

    path: str
    method: str
    name: str
    summary: str
    tag: str = "translate"
    fields: tuple = ()
    in_path: tuple = ()
    schema: Optional[dict] = None
    media: str = "application/json"
    errors: tuple = (405,)


_KEY = Field("api_key", description="API key (with --api-keys)")
_SOURCE = Field("source", required=True, description="Source language code, or auto",
                example="en")
_TARGET = Field("target", required=True, description="Target language code", example="fr")
_LIMITED = (400, 403, 405, 413, 429)
JSON_TYPES = {"int32": "integer", "float32": "number", "string": "string", "bool": "boolean",
              "glossary": "object"}
# Every option, from its one declaration (keras_attn.decoding.options), then ours.
_OPTIONS = tuple(Field(o.name, JSON_TYPES[o.dtype], description=o.help)
                 for o in OPTIONS.values())
_DECODING = _OPTIONS + (
    Field("return_scores", "boolean", description="The n-best list with scores"),)
# What a file's translation takes of them: those that are no decoding option.
_FILE_OPTIONS = tuple(f for f in _OPTIONS if f.name not in DECODING_NAMES)
_FLAG = {"type": "boolean"}

ENDPOINTS = (
    Endpoint("/translate", "POST", "translate", "Translate text", fields=(
        Field("q", "text", True, "Text(s) to translate", "Hello world!"), _SOURCE, _TARGET,
        Field("format", description="text or html", example="text"),
        Field("alternatives", "integer", description="Number of alternative translations"),
        _KEY) + _DECODING,
        schema={"type": "object", "properties": {
            "translatedText": {"description": "Translated text(s)"},
            "alternatives": {"type": "array"}, "detectedLanguage": {},
            "hypotheses": {"type": "array"},
            "pivot": {"type": "string", "description": "The language between the two "
                      "models that translated (no one model translates the pair)"},
            "appliedTerms": {"description": "With a glossary (the request's, the API "
                             "key's or the server's): per text, the terms found and put "
                             "in, source term -> target term"}}},
        errors=_LIMITED + (500, 503, 504)),
    Endpoint("/translate_file", "POST", "translate_file", "Translate a file (.txt, .html, "
             ".docx, .odt)", fields=(Field("file", "file", True, "File to translate"),
                                    _SOURCE, _TARGET, _KEY) + _FILE_OPTIONS,
             schema={"type": "object", "properties": {"translatedFileUrl": {
                 "type": "string", "description": "Where to download the translation"}}},
             errors=_LIMITED + (500, 503, 504)),
    Endpoint("/download_file/{filename}", "GET", "download_file",
             "Download a translated file", in_path=(Field("filename", required=True),),
             media="application/octet-stream", errors=(400, 404, 405)),
    Endpoint("/detect", "POST", "detect", "Detect the language of a text", fields=(
        Field("q", "text", True, "Text to detect", "What language is this?"), _KEY),
        schema=DETECTIONS, errors=_LIMITED),
    Endpoint("/languages", "GET", "languages", "Supported languages", schema={
        "type": "array", "items": {"type": "object", "properties": {
            "code": {"type": "string"}, "name": {"type": "string"},
            "targets": {"type": "array", "items": {"type": "string"}}}}}),
    Endpoint("/suggest", "POST", "suggest", "Suggest a better translation", tag="feedback",
             fields=(Field("q", required=True, description="Original text"),
                     Field("s", required=True, description="Suggested translation"),
                     _SOURCE, _TARGET, _KEY),
             schema={"type": "object", "properties": {"success": {"type": "boolean"}}},
             errors=_LIMITED),
    Endpoint("/frontend/settings", "GET", "frontend_settings", "The web page's settings",
             tag="misc", schema={"type": "object", "properties": {
                 "charLimit": {"type": "integer"}, "frontendTimeout": {"type": "integer"},
                 "apiKeys": _FLAG, "keyRequired": _FLAG, "suggestions": _FLAG,
                 "filesTranslation": _FLAG,
                 "supportedFilesFormat": {"type": "array", "items": {"type": "string"}},
                 "language": {"type": "object", "properties": {"source": LANGUAGE,
                                                               "target": LANGUAGE}},
                 # ours: the engine and what it can do, the heatmap's availability,
                 # per "source-target" pair the folder of its web export (in-browser)
                 "engine": {"type": "string"}, "replicas": {"type": "integer"},
                 "attention": _FLAG, "webExports": {"type": "object",
                                                    "additionalProperties": {"type": "string"}},
                 **{f.name: _FLAG if f.type is bool else
                                        {"type": "integer", "nullable": True}
                                        for f in dataclasses.fields(Capabilities)}}}),
    Endpoint("/attention", "POST", "attention", "Cross-attention of a translation (the "
             "page's heatmap)", tag="misc", fields=(
                 Field("q", required=True, description="One sentence"),
                 Field("translation", description="Its translation (absent: the engine's)"),
                 Field("source"), Field("target"), _KEY),
             schema={"type": "object"}, errors=_LIMITED + (501, 503, 504)),
    Endpoint("/health", "GET", "health", "Health check: always {\"status\": \"ok\"}",
             tag="misc", schema={"type": "object", "required": ["status"], "properties": {
                 "status": {"type": "string", "enum": ["ok"]}}}),
    Endpoint("/v1/models", "GET", "list_models", "The served models, each with its name and "
             "versions", tag="models", schema={"type": "object", "properties": {
                 "models": {"type": "array", "items": {"type": "object", "properties": {
                     "name": {"type": "string"}, "source": {"type": "string"},
                     "target": {"type": "string"}, "engine": {"type": "string"},
                     "model_version_status": VERSION_STATUS}}}}}),
    Endpoint("/v1/models/{name}", "GET", "model_status", "A model's versions and their "
             "states (TF Serving's model status)", tag="models",
             in_path=(Field("name", required=True),),
             schema={"type": "object", "properties": {
                 "model_version_status": VERSION_STATUS}}, errors=(404, 405)),
    Endpoint("/v1/models/{name}/versions/{version}", "GET", "version_status", "One version's "
             "state (TF Serving's model status)", tag="models",
             in_path=(Field("name", required=True), Field("version", required=True)),
             schema={"type": "object", "properties": {
                 "model_version_status": VERSION_STATUS}}, errors=(404, 405)),
    Endpoint("/metrics", "GET", "metrics", "Prometheus metrics", tag="misc",
             media="text/plain", errors=(401, 405)),
    Endpoint("/spec", "GET", "spec", "This OpenAPI document", tag="misc",
             schema={"type": "object"}),
    Endpoint("/docs", "GET", "docs", "The API's interactive page", tag="misc",
             media="text/html"),
    Endpoint("/", "GET", "page", "The translation page", tag="misc", media="text/html",
             errors=(404, 405)),
)


def _schema(field, form=False):
    """A field's JSON Schema (a form's ``text`` field is one string, its ``object`` the
    object as JSON text)."""
    schema = {"text": {"type": "string"} if form else TEXTS,
              "file": {"type": "string", "format": "binary"},
              "object": {"type": "string", "format": "json"} if form else {
                  "type": "object", "additionalProperties": {"type": "string"}},
              }.get(field.type, {"type": field.type})
    extra = {"description": field.description, "example": field.example}
    return {**schema, **{k: v for k, v in extra.items() if v not in (None, "")}}


def _body(endpoint):
    required = [f.name for f in endpoint.fields if f.required]

    def schema(form):
        return {"schema": {"type": "object", **({"required": required} if required else {}),
                           "properties": {f.name: _schema(f, form) for f in endpoint.fields}}}

    if any(f.type == "file" for f in endpoint.fields):
        return {"required": True, "content": {"multipart/form-data": schema(True)}}
    return {"required": True, "content": {"application/json": schema(False),
                                          "application/x-www-form-urlencoded": schema(True),
                                          "multipart/form-data": schema(True)}}


def _operation(endpoint):
    schema = ((endpoint.schema or {}) if endpoint.media == "application/json"
              else {"type": "string"})
    responses = {"200": {"description": "Success",
                         "content": {endpoint.media: {"schema": schema}}}}
    for status in endpoint.errors:
        responses[str(status)] = {
            "description": ERROR_TEXT.get(status, "Error"),
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
    operation = {"operationId": endpoint.name, "summary": endpoint.summary,
                 "tags": [endpoint.tag], "responses": responses}
    if endpoint.in_path:
        operation["parameters"] = [{"name": f.name, "in": "path", "required": True,
                                    "schema": {"type": "string"}} for f in endpoint.in_path]
    if endpoint.fields:
        operation["requestBody"] = _body(endpoint)
    return operation


def openapi(endpoints=ENDPOINTS, version="0", prefix="", title="keras-attn serve"):
    """The OpenAPI 3.0 document of ``endpoints`` (served under ``prefix``)."""
    paths = {}
    for endpoint in endpoints:
        paths.setdefault(endpoint.path, {})[endpoint.method.lower()] = _operation(endpoint)
    return {"openapi": "3.0.3",
            "info": {"title": title, "version": version,
                     "description": "LibreTranslate's API over a keras_attn translation model."},
            "servers": [{"url": prefix or "/"}],
            "paths": paths,
            "components": {"schemas": {"Error": ERROR}}}
