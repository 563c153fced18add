"""The Starlette application: LibreTranslate's API over the batcher.

Routes: ``POST /translate`` (:mod:`keras_attn.serve.api`), ``GET /languages``,
``GET /health``, ``POST /attention`` (``q`` and optionally its ``translation``: the
cross-attention matrix, :mod:`keras_attn.serve.attention`), and ``GET /``: a web page
(``static/index.html``: paste text, choose the decoding options, read the translation and
the n-best list with scores, shaded by each hypothesis's ``confidence`` when the artefact
gives one; hovering a word highlights the words it is aligned with; the cross-attention
heatmap of each sentence when ``/health`` says ``"attention": true``) that calls the API as
any client. Every error is LibreTranslate's ``{"error": "..."}``:

=======  ==================================================================================
status   when
=======  ==================================================================================
400      malformed JSON, a missing field, a wrong type or value (the message names it)
403      an ``api_key`` that is not in ``--api-keys``
413      a body over ``--max-body-bytes``
429      a client over ``--req-limit`` (or its key's limit) requests a minute
501      ``POST /attention`` where no Keras model is behind the artefact (the message says why)
503      ``--queue-size`` requests waiting already (with ``Retry-After``, seconds)
504      no answer within ``--timeout`` seconds
=======  ==================================================================================

Example:
    >>> app = create_app(locate("exported"), InProcessReplicas(engine), Settings())
    >>> with starlette.testclient.TestClient(app) as client:
    ...     client.post("/translate", json={"q": "3 March 2021", "source": "dates",
    ...                                     "target": "iso"}).json()
    {'translatedText': '2021-03-03'}
"""
import asyncio
import contextlib
import dataclasses
import json
import os
import urllib.parse
from typing import Optional

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse
from starlette.routing import Route

from keras_attn.decoding.options import DecodingOptions
from keras_attn.serve import api, engines, markup
from keras_attn.serve.attention import Attention
from keras_attn.serve.batcher import Batcher, QueueFull
from keras_attn.serve.limits import RateLimiter


PAGE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static", "index.html")


@dataclasses.dataclass
class Settings:
    """The server's options (the flags of ``keras-attn serve``).

    Args:
        max_batch: most texts decoded together. batch_wait_ms: longest wait for a batch.
        queue_size: most requests waiting (more: 503). timeout: seconds a request may take
            (more: 504). max_body_bytes: largest request body (more: 413).
        api_keys: ``{key: limit or None}`` (``limits.read_api_keys``) or None.
        req_limit: requests a minute per client (-1: no limit).
    """

    max_batch: int = 32
    batch_wait_ms: float = 5.0
    queue_size: int = 256
    timeout: float = 30.0
    max_body_bytes: int = 1_000_000
    api_keys: Optional[dict] = None
    req_limit: int = -1


def _error(status, message, headers=None):
    return JSONResponse({"error": message}, status_code=status, headers=headers)


async def _read_body(request, limit):
    """The body, or 413 past ``limit`` bytes (by ``Content-Length``, or while reading)."""
    length = request.headers.get("content-length", "")
    too_large = api.ApiError(413, f"Request body too large: the limit is {limit} bytes")
    if length.isdigit() and int(length) > limit:
        raise too_large
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large
        chunks.append(chunk)
    return b"".join(chunks)


async def _fields(request, body):
    """``(fields, form)`` of a body: a JSON object, or a form's fields (with the query's)."""
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type == "application/json" or content_type.endswith("+json"):
        try:
            fields = json.loads(body.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise api.bad_request(f"Invalid request: the body is not valid JSON ({e})") from None
        if not isinstance(fields, dict):
            raise api.bad_request("Invalid JSON format: the body must be a JSON object")
        return fields, False
    fields = dict(request.query_params)
    if content_type == "multipart/form-data":
        async def receive():
            return {"type": "http.request", "body": body, "more_body": False}

        form = await Request(request.scope, receive).form()
        fields.update({k: v for k, v in form.items() if isinstance(v, str)})
    elif body:
        try:
            fields.update(urllib.parse.parse_qsl(body.decode("utf-8"), keep_blank_values=True,
                                                 strict_parsing=False))
        except UnicodeDecodeError as e:
            raise api.bad_request(f"Invalid request: the form body is not UTF-8 ({e})") from None
    return fields, True


def create_app(artefact, replicas, settings=None):
    """The Starlette app serving ``artefact`` with ``replicas``.

    Args:
        artefact: :class:`~keras_attn.serve.locate.Artefact` (languages, limits, engine).
        replicas: ``InProcessReplicas`` or ``ProcessReplicas`` (closed at shutdown).
        settings: :class:`Settings`.
    """
    settings = settings or Settings()
    batcher = Batcher(replicas, settings.max_batch, settings.batch_wait_ms, settings.queue_size)
    limiter = RateLimiter(settings.req_limit, settings.api_keys)
    languages = (artefact.source[0], artefact.target[0])
    heatmaps = Attention(artefact)

    def access_check(fields, client):
        key = fields.get("api_key") or None
        if settings.api_keys is not None:
            if key is not None and key not in settings.api_keys:
                raise api.ApiError(403, "Invalid API key")
            if key is None and settings.req_limit == 0:
                raise api.bad_request("Please contact the server operator to get an API key")
        if not limiter.allow(client, key if settings.api_keys is not None else None):
            limit = limiter.limit_of(key if settings.api_keys is not None else None)
            raise api.ApiError(429, f"Slowdown: {limit} per 1 minute")

    async def checked_fields(request):
        """The request's fields, within the body limit, from a client that may ask."""
        body = await _read_body(request, settings.max_body_bytes)
        fields, form = await _fields(request, body)
        access_check(fields, request.client.host if request.client else "")
        return fields, form

    async def translate(request):
        fields, form = await checked_fields(request)
        req = api.parse_fields(fields, languages, form)
        try:
            engines.check_options(artefact, req.options)
        except ValueError as e:
            raise api.bad_request(f"Invalid request: {e}") from None
        if req.format == "html":
            results = await markup.translate_html(
                batcher, req, settings.timeout, alignments=artefact.engine == "savedmodel")
        else:
            results = await batcher.submit(req.texts, req.options, settings.timeout)
        return JSONResponse(api.answer(req, results, artefact.source[0]))

    async def attention(request):
        fields, _ = await checked_fields(request)
        if heatmaps.unavailable is not None:
            raise api.ApiError(501, f"Cannot compute attention: {heatmaps.unavailable}")
        text, translation = api.parse_attention_fields(fields, languages)
        if translation is None:  # the engine's greedy translation, as /translate gives it
            results = await batcher.submit([text], DecodingOptions(), settings.timeout)
            translation = results[0][0]["translation"]
        out = await asyncio.wait_for(asyncio.wrap_future(heatmaps.submit(text, translation)),
                                     settings.timeout)
        return JSONResponse({"translatedText": translation, **out})

    def libretranslate_errors(handler):
        """``handler``, its failures answered with LibreTranslate's ``{"error": ...}``."""
        async def guarded(request):
            try:
                return await handler(request)
            except api.ApiError as e:
                return _error(e.status, e.message, e.headers)
            except QueueFull as e:
                return _error(503, f"Server busy: {e}", {"Retry-After": str(e.retry_after)})
            except asyncio.TimeoutError:
                return _error(504, f"Translation timed out after {settings.timeout:g} s")
            except ValueError as e:  # the engine refused the options
                return _error(400, f"Invalid request: {e}")
            except Exception as e:  # noqa: BLE001  (LibreTranslate's 500)
                return _error(500, f"Cannot translate text: {e}")

        return guarded

    async def languages_route(request):
        (code, name), (target, _) = artefact.source, artefact.target
        return JSONResponse([{"code": code, "name": name, "targets": [target]},
                             {"code": target, "name": artefact.target[1], "targets": []}])

    async def page(request):
        return FileResponse(PAGE, media_type="text/html")

    async def health(request):
        return JSONResponse({"status": "ok", "engine": artefact.engine,
                             "replicas": replicas.size, "waiting": batcher.waiting,
                             "in_flight": batcher.in_flight,
                             "attention": heatmaps.unavailable is None, **batcher.stats})

    @contextlib.asynccontextmanager
    async def lifespan(app):
        batcher.start()
        try:
            yield
        finally:
            await batcher.stop()
            await asyncio.get_running_loop().run_in_executor(None, replicas.close)
            await asyncio.get_running_loop().run_in_executor(None, heatmaps.close)

    app = Starlette(
        routes=[Route("/", page, methods=["GET"]),
                Route("/translate", libretranslate_errors(translate), methods=["POST"]),
                Route("/attention", libretranslate_errors(attention), methods=["POST"]),
                Route("/languages", languages_route, methods=["GET", "POST"]),
                Route("/health", health, methods=["GET"])],
        middleware=[Middleware(CORSMiddleware, allow_origins=["*"],
                               allow_methods=["GET", "POST"],
                               allow_headers=["Authorization", "Content-Type"])],
        lifespan=lifespan)
    app.state.batcher = batcher
    app.state.settings = settings
    app.state.attention = heatmaps
    return app
