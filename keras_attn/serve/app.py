"""The Starlette application: LibreTranslate's API over the batcher.

Routes (declared once in :mod:`keras_attn.serve.spec`, which ``GET /spec`` describes):

* LibreTranslate's: ``POST /translate`` (:mod:`keras_attn.serve.api`), ``POST
  /translate_file`` and ``GET /download_file/{name}`` (:mod:`keras_attn.serve.files`),
  ``POST /detect`` (:mod:`keras_attn.serve.detect`), ``GET /languages``, ``POST /suggest``
  (with ``--suggestions``: :class:`~keras_attn.serve.store.SuggestionStore`), ``GET
  /frontend/settings``, ``GET /spec`` (OpenAPI 3) and ``GET /docs`` (a page that reads it and
  sends requests), ``GET /health`` (``{"status": "ok", ...}``).
* ours: ``GET /metrics`` (:mod:`keras_attn.serve.metrics`), ``POST /attention`` (``q`` and
  optionally its ``translation``: the cross-attention matrix,
  :mod:`keras_attn.serve.attention`), and ``GET /``: a web page (``static/index.html``: a
  source and a translation pane translating as one types, a file tab, an API-key field;
  its inspection view shows each paragraph's n-best list with scores and ``confidence``,
  the words aligned with a hovered or focused word, and the cross-attention heatmap when
  ``/health`` says ``"attention": true``) that calls the API as any client.

With ``url_prefix`` every route is under it (``/lt/translate``) and ``/`` redirects there.
Every error is LibreTranslate's ``{"error": "..."}``:

=======  ==================================================================================
status   when
=======  ==================================================================================
400      malformed JSON, a missing field, a wrong type or value, a text over ``--char-limit``
         or a list over ``--batch-limit`` (the message names it)
401      ``GET /metrics`` without ``--metrics-auth-token``'s ``Authorization: Bearer``
403      an ``api_key`` that is not a key; ``/suggest`` without ``--suggestions``, files
         with ``--disable-files-translation``
404      no such route, or no such file to download
405      a route asked with another method (``Allow`` says which)
413      a body over ``--max-body-bytes`` (read and dropped up to
         :data:`~keras_attn.serve.http.DRAIN_BYTES`, then the connection is closed, so that
         the client reads the answer: every error answer drains the body so,
         :class:`~keras_attn.serve.http.DrainUnread`)
429      a client over ``--req-limit`` (or its key's limit) requests a minute
500      the engine failed
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
import os
import shutil
import tempfile
import time
from typing import Optional

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.responses import FileResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route

from keras_attn import __version__
from keras_attn.decoding.options import DecodingOptions
from keras_attn.serve import api, detect, engines, files, http, markup, spec, store
from keras_attn.serve.cache import TranslationCache
from keras_attn.serve.attention import Attention
from keras_attn.serve.batcher import Batcher, QueueFull
from keras_attn.serve.limits import RateLimiter, windows
from keras_attn.serve.metrics import Metrics

STATIC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static")
PAGE = os.path.join(STATIC, "index.html")
DOCS_PAGE = os.path.join(STATIC, "docs.html")


@dataclasses.dataclass
class Settings:
    """The server's options (the flags of ``keras-attn serve``; docs/serving.md).

    Args:
        max_batch: most texts decoded together. batch_wait_ms: longest wait for a batch.
        queue_size: most requests waiting (more: 503). timeout: seconds a request may take
            (more: 504). max_body_bytes: largest request body (more: 413).
        api_keys: ``{key: limit or None}`` (``limits.read_api_keys``), a
            :class:`~keras_attn.serve.store.KeyStore`, or None.
        req_limit: requests a minute per client (-1: no limit).
        char_limit: characters per text (-1: no limit; a key's own overrides it).
        batch_limit: texts of a list ``q`` (-1: no limit).
        alternatives_limit: most ``alternatives`` (-1: no limit).
        suggestions: a :class:`~keras_attn.serve.store.SuggestionStore` (``/suggest``), or
            None (403).
        files_dir: where translated files wait for their download (None: a temporary
            folder). disable_files_translation: ``/translate_file`` answers 403.
        disable_web_ui: ``GET /`` answers 404.
        frontend_timeout: the page's translate-as-you-type delay (ms, ``/frontend/settings``).
        frontend_language_source, frontend_language_target: the page's first languages.
        url_prefix: the path every route is under (``""`` or ``/lt``).
        shared_storage: ``memory://`` or a ``redis://`` URL holding the request windows.
        trust_forwarded_for: a client's address is ``X-Forwarded-For``'s first.
        get_api_key_link: where the "get an API key" message points.
        metrics_auth_token: ``GET /metrics`` needs ``Authorization: Bearer TOKEN``.
        translation_cache: ``("all",)`` or the API keys whose answers are cached (in
            ``shared_storage``: :class:`~keras_attn.serve.cache.TranslationCache`).
    """

    max_batch: int = 32
    batch_wait_ms: float = 0.0
    queue_size: int = 256
    timeout: float = 30.0
    max_body_bytes: int = 1_000_000
    api_keys: Optional[object] = None
    req_limit: int = -1
    char_limit: int = -1
    batch_limit: int = -1
    alternatives_limit: int = -1
    suggestions: Optional[object] = None
    files_dir: Optional[str] = None
    disable_files_translation: bool = False
    disable_web_ui: bool = False
    frontend_timeout: int = 500
    frontend_language_source: str = "auto"
    frontend_language_target: str = "locale"
    url_prefix: str = ""
    shared_storage: str = "memory://"
    trust_forwarded_for: bool = False
    get_api_key_link: str = ""
    metrics_auth_token: str = ""
    translation_cache: tuple = ()


def create_app(artefact, replicas, settings=None):
    """The Starlette app serving ``artefact`` with ``replicas``.

    Args:
        artefact: :class:`~keras_attn.serve.locate.Artefact` (languages, limits, engine).
        replicas: ``InProcessReplicas`` or ``ProcessReplicas`` (closed at shutdown).
        settings: :class:`Settings`.
    """
    settings = settings or Settings()
    if isinstance(settings.api_keys, dict) and not isinstance(settings.api_keys,
                                                              store.FileKeys):
        settings.api_keys = store.FileKeys(settings.api_keys)
    batcher = Batcher(replicas, settings.max_batch, settings.batch_wait_ms, settings.queue_size)
    limiter = RateLimiter(settings.req_limit, settings.api_keys,
                          storage=windows(settings.shared_storage))
    metrics = Metrics(batcher)
    cache = TranslationCache(settings.translation_cache, settings.shared_storage)
    languages = (artefact.source[0], artefact.target[0])
    heatmaps = Attention(artefact)
    downloads = files.FileStore(settings.files_dir or tempfile.mkdtemp(prefix="keras-attn-"))
    alignments = artefact.engine == "savedmodel"

    def client_address(request):
        forwarded = request.headers.get("x-forwarded-for", "")
        if settings.trust_forwarded_for and forwarded:
            return forwarded.split(",")[0].strip()
        return request.client.host if request.client else ""

    def access_check(fields, client):
        """403 for an unknown key, 400 for a missing required key, 429 over the limit; the
        client's characters per text."""
        key = fields.get("api_key") or None
        keys = settings.api_keys
        if keys is not None:
            if key is not None and key not in keys:
                raise api.ApiError(403, "Invalid API key")
            if key is None and settings.req_limit == 0:
                raise api.bad_request(
                    f"Visit {settings.get_api_key_link} to get an API key"
                    if settings.get_api_key_link
                    else "Please contact the server operator to get an API key")
        if not limiter.allow(client, key if keys is not None else None):
            limit = limiter.limit_of(key if keys is not None else None)
            raise api.ApiError(429, f"Slowdown: {limit} per 1 minute")
        own = keys.char_limit(key) if keys is not None and key is not None else None
        return settings.char_limit if own is None else own

    async def read_fields(request):
        body = await http.read_body(request, settings.max_body_bytes)
        return await http.fields(request, body, max(settings.max_body_bytes, 1024 * 1024))

    async def checked_fields(request):
        """The request's fields, within the body limit, from a client that may ask."""
        fields, form, _ = await read_fields(request)
        access_check(fields, client_address(request))
        return fields, form

    async def translate_request(req, timing=None):
        """Per text of a checked ``TranslateRequest``, its hypotheses (``timing``: as
        ``Batcher.submit``'s)."""
        try:
            engines.check_options(artefact, req.options)
        except ValueError as e:
            raise api.bad_request(f"Invalid request: {e}") from None
        if req.format == "html":
            return await markup.translate_html(batcher, req, settings.timeout,
                                               alignments=alignments)
        # Confidences only when the answer shows them (``hypotheses``): on CTranslate2 they
        # are one more pass over every hypothesis.
        return await batcher.submit(req.texts, req.options, settings.timeout,
                                    confidence=req.hypotheses, timing=timing)

    async def translate(request):
        started = time.perf_counter()
        fields, form, _ = await read_fields(request)
        char_limit = access_check(fields, client_address(request))
        req = api.parse_fields(fields, languages, form)
        api.check_limits(req, char_limit, settings.batch_limit, settings.alternatives_limit)
        timing = {"read": time.perf_counter() - started}
        cached = cache.applies(req)
        if cached:
            key = cache.key(req)
            answer = cache.get(key)
            if answer is not None:
                timing["cache"] = time.perf_counter() - started - timing["read"]
                return JSONResponse(answer, headers=http.server_timing(timing, started))
        answer = api.answer(req, await translate_request(req, timing), artefact.source[0])
        if cached:
            cache.put(key, answer)
        return JSONResponse(answer, headers=http.server_timing(timing, started))

    async def translate_file(request):
        fields, _, uploads = await read_fields(request)
        if settings.disable_files_translation:
            raise api.ApiError(403, "Files translation are disabled on this server.")
        access_check(fields, client_address(request))
        upload = uploads.get("file")
        if upload is None:
            raise api.bad_request("Invalid request: missing file parameter")
        source, target = api.required_strings(fields, ["source", "target"])
        if not upload.filename:
            raise api.bad_request("Invalid request: empty file")
        if files.extension(upload.filename) is None:
            raise api.bad_request("Invalid request: file format not supported")
        for code, allowed in ((source, (languages[0], "auto")), (target, (languages[1],))):
            if code not in allowed:
                raise api.bad_request(f"{code} is not supported")

        async def as_text(texts):
            results = await batcher.submit(texts, DecodingOptions(), settings.timeout,
                                           confidence=False)
            return [hyps[0]["translation"] for hyps in results]

        async def as_html(fragments):
            req = api.parse_fields({"q": fragments, "source": source, "target": target,
                                    "format": "html"}, languages)
            return [hyps[0]["translation"] for hyps in await translate_request(req)]

        try:
            data = await files.translate_file(upload.filename, await upload.read(), as_text,
                                              as_html)
        except ValueError as e:
            raise api.bad_request(f"Invalid request: {e}") from None
        name = downloads.put(upload.filename, data)
        return JSONResponse({"translatedFileUrl": str(request.url_for("download_file",
                                                                      filename=name))})

    async def download_file(request):
        if settings.disable_files_translation:
            raise api.bad_request("Files translation are disabled on this server.")
        name = request.path_params["filename"]
        path = downloads.path(name)
        if path is None:
            if "/" in name or name.startswith("."):
                raise api.bad_request("Invalid filename")
            raise api.ApiError(404, f"No such file: {name} (unknown, or expired)")
        return FileResponse(path, filename=name.split(".", 1)[1],
                            media_type="application/octet-stream")

    async def detect_route(request):
        fields, form = await checked_fields(request)
        texts = api.detect_texts(fields, form)
        loop = asyncio.get_running_loop()
        return JSONResponse(await loop.run_in_executor(None, detect.detect, texts))

    async def suggest(request):
        fields, form, _ = await read_fields(request)
        if settings.suggestions is None:
            raise api.ApiError(403, "Suggestions are disabled on this server.")
        q, s, source, target = api.required_strings(fields, ["q", "s", "source", "target"],
                                                    form)
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, settings.suggestions.add, q, s, source, target)
        return JSONResponse({"success": True})

    async def attention(request):
        fields, _ = await checked_fields(request)
        if heatmaps.unavailable is not None:
            raise api.ApiError(501, f"Cannot compute attention: {heatmaps.unavailable}")
        text, translation = api.parse_attention_fields(fields, languages)
        if translation is None:  # the engine's greedy translation, as /translate gives it
            results = await batcher.submit([text], DecodingOptions(), settings.timeout,
                                           confidence=False)
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
                return http.error(e.status, e.message, e.headers)
            except QueueFull as e:
                return http.error(503, f"Server busy: {e}", {"Retry-After": str(e.retry_after)})
            except asyncio.TimeoutError:
                return http.error(504, f"Translation timed out after {settings.timeout:g} s")
            except ValueError as e:  # the engine refused the options
                return http.error(400, f"Invalid request: {e}")
            except Exception as e:  # noqa: BLE001  (LibreTranslate's 500)
                return http.error(500, f"Cannot translate text: {e}")

        return guarded

    async def languages_route(request):
        (code, name), (target, _) = artefact.source, artefact.target
        return JSONResponse([{"code": code, "name": name, "targets": [target]},
                             {"code": target, "name": artefact.target[1], "targets": []}])

    async def frontend_settings(request):
        source = {"code": "auto", "name": "Auto Detect"} \
            if settings.frontend_language_source == "auto" \
            else dict(zip(("code", "name"), artefact.source))
        formats = [] if settings.disable_files_translation else list(files.EXTENSIONS)
        return JSONResponse({
            "charLimit": settings.char_limit, "frontendTimeout": settings.frontend_timeout,
            "apiKeys": settings.api_keys is not None,
            "keyRequired": settings.api_keys is not None and settings.req_limit == 0,
            "suggestions": settings.suggestions is not None,
            "filesTranslation": not settings.disable_files_translation,
            "supportedFilesFormat": formats,
            # ours: what the engine can do, so that the page offers only that
            "sampling": artefact.engine != "ctranslate2", "alignments": alignments,
            "language": {"source": source,
                         "target": dict(zip(("code", "name"), artefact.target))}})

    document = spec.openapi(version=__version__, prefix=settings.url_prefix)

    async def spec_route(request):
        return JSONResponse(document)

    async def docs(request):
        return FileResponse(DOCS_PAGE, media_type="text/html")

    async def page(request):
        if settings.disable_web_ui:
            raise api.ApiError(404, "The web page is disabled on this server")
        return FileResponse(PAGE, media_type="text/html")

    async def health(request):
        return JSONResponse({"status": "ok", "engine": artefact.engine,
                             "replicas": replicas.size, "waiting": batcher.waiting,
                             "in_flight": batcher.in_flight,
                             "attention": heatmaps.unavailable is None, **batcher.stats})

    async def metrics_route(request):
        token = settings.metrics_auth_token
        if token and request.headers.get("authorization") != f"Bearer {token}":
            raise api.ApiError(401, "Unauthorized")
        return Response(metrics.text(), media_type=metrics.content_type)

    async def not_found_or_not_allowed(request, exc):
        return http.error(exc.status_code, exc.detail, getattr(exc, "headers", None))

    async def server_error(request, exc):
        return http.error(500, f"Internal error: {exc}")

    @contextlib.asynccontextmanager
    async def lifespan(app):
        batcher.start()
        try:
            yield
        finally:
            await batcher.stop()
            await asyncio.get_running_loop().run_in_executor(None, replicas.close)
            await asyncio.get_running_loop().run_in_executor(None, heatmaps.close)
            if settings.files_dir is None:  # the temporary folder of this app's downloads
                shutil.rmtree(downloads.directory, ignore_errors=True)

    handlers = {"translate": translate, "translate_file": translate_file,
                "download_file": download_file, "detect": detect_route,
                "languages": languages_route, "suggest": suggest,
                "frontend_settings": frontend_settings, "attention": attention,
                "health": health, "metrics": metrics_route, "spec": spec_route, "docs": docs,
                "page": page}
    routes = [Route(e.path, libretranslate_errors(handlers[e.name]), methods=[e.method],
                    name=e.name) for e in spec.ENDPOINTS]
    prefix = settings.url_prefix.rstrip("/")
    if prefix:
        async def to_prefix(request):
            return RedirectResponse(prefix + "/", status_code=301)

        top = [Route("/", to_prefix), Mount(prefix, routes=routes)]
    else:
        top = routes
    app = Starlette(
        routes=top,
        middleware=[Middleware(CORSMiddleware, allow_origins=["*"],
                               allow_methods=["GET", "POST"],
                               allow_headers=["Authorization", "Content-Type"])],
        exception_handlers={HTTPException: not_found_or_not_allowed, Exception: server_error},
        lifespan=lifespan)
    app.state.batcher = batcher
    app.state.settings = settings
    app.state.attention = heatmaps
    app.state.metrics = metrics
    app.state.downloads = downloads
    app.add_middleware(http.Counted, metrics=metrics, routes=routes, prefix=prefix)
    app.add_middleware(http.DrainUnread)
    return app
