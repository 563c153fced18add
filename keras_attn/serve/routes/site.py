"""What a client reads about the server: ``GET /languages``, ``/frontend/settings`` (the
engine's :class:`~keras_attn.serve.engines.Capabilities` for the page), ``/health``,
``/metrics``, ``/spec``, ``/docs``, ``/`` (the page) and ``/web/<source>-<target>/``, the
static files of a served model's web export (:func:`web_mounts`), with which the page can
translate in the browser instead of asking the server.

Example:
    >>> httpx.get(url + "/health").json()
    {'status': 'ok'}
"""
import dataclasses
import os

from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount
from starlette.staticfiles import StaticFiles

from keras_attn.serve import api, files

STATIC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "static")
PAGE = os.path.join(STATIC, "index.html")
DOCS_PAGE = os.path.join(STATIC, "docs.html")


def _language(pair):
    return dict(zip(("code", "name"), pair))


async def languages(request):
    return JSONResponse(request.app.state.models.languages())


async def frontend_settings(request):
    state, settings = request.app.state, request.app.state.settings
    source = {"code": "auto", "name": "Auto Detect"} \
        if settings.frontend_language_source == "auto" else _language(state.artefact.source)
    keys = settings.api_keys is not None
    return JSONResponse({
        "charLimit": settings.char_limit, "frontendTimeout": settings.frontend_timeout,
        "apiKeys": keys, "keyRequired": keys and settings.req_limit == 0,
        "suggestions": settings.suggestions is not None,
        "filesTranslation": not settings.disable_files_translation,
        "supportedFilesFormat": [] if settings.disable_files_translation
        else list(files.EXTENSIONS),
        "language": {"source": source, "target": _language(state.artefact.target)},
        # ours: the engine and what it can do (the page offers only that), and whether
        # POST /attention has a Keras model to draw heatmaps with
        "engine": state.artefact.engine, "replicas": state.replicas.size,
        "attention": state.attention.unavailable is None,
        # ours: per language pair, where the page finds the model's web export
        "webExports": {} if settings.disable_web_ui else {
            f"{a}-{b}": f"{WEB}/{a}-{b}/" for a, b in web_pairs(state.models)},
        **dataclasses.asdict(state.capabilities)})


async def health(request):
    return JSONResponse({"status": "ok"})


async def metrics(request):
    token = request.app.state.settings.metrics_auth_token
    if token and request.headers.get("authorization") != f"Bearer {token}":
        raise api.ApiError(401, "Unauthorized")
    counters = request.app.state.metrics
    return Response(counters.text(), media_type=counters.content_type)


async def spec(request):
    return JSONResponse(request.app.state.spec)


async def docs(request):
    return FileResponse(DOCS_PAGE, media_type="text/html")


async def page(request):
    if request.app.state.settings.disable_web_ui:
        raise api.ApiError(404, "The web page is disabled on this server")
    return FileResponse(PAGE, media_type="text/html")


ROUTES = (languages, frontend_settings, health, metrics, spec, docs, page)
WEB = "web"  # the web exports' folder in the URL


def web_pairs(models):
    """``{(source, target): web folder}`` of the served models that have a web export."""
    return {m.pair: m.artefact.web for m in models if getattr(m.artefact, "web", None)}


def web_mounts(models, settings):
    """A static ``Mount`` per web export (``/web/<source>-<target>/``); none when the page
    is disabled."""
    if settings.disable_web_ui:
        return []
    return [Mount(f"/{WEB}/{a}-{b}", app=StaticFiles(directory=folder), name=f"web-{a}-{b}")
            for (a, b), folder in web_pairs(models).items()]
