"""The Starlette application: LibreTranslate's API over the batcher (routes:
:mod:`keras_attn.serve.routes`; with ``url_prefix`` every route is under it).

Example:
    >>> app = create_app(locate("exported"), InProcessReplicas(engine), Settings())
    >>> app = create_app(Models([(en_fr, replicas_a), (fr_en, replicas_b)]))  # many models
    >>> with starlette.testclient.TestClient(app) as client:
    ...     client.post("/translate", json={"q": "3 March 2021", "source": "dates",
    ...                                     "target": "iso"}).json()
    {'translatedText': '2021-03-03'}
"""
import asyncio
import contextlib
import dataclasses
import shutil
import tempfile
from typing import Optional

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.responses import RedirectResponse
from starlette.routing import Mount, Route

from keras_attn import __version__
from keras_attn.serve import engines, files, http, routes, spec
from keras_attn.serve.attention import Attention
from keras_attn.serve.cache import TranslationCache
from keras_attn.serve.limits import RateLimiter, windows
from keras_attn.serve.metrics import Metrics
from keras_attn.serve.models import Models
from keras_attn.serve.versions import Watcher


@dataclasses.dataclass
class Settings:
    """The server's options: each field is the flag of the same name of ``keras-attn
    serve`` (its help says what it does).

    Args:
        api_keys: ``{key: limit or None}`` (``limits.read_api_keys``), a
            :class:`~keras_attn.serve.store.KeyStore`, or None (no keys).
        suggestions: a :class:`~keras_attn.serve.store.SuggestionStore`, or None (403).
        files_dir: None: a temporary folder, removed at shutdown.
        shared_storage: ``memory://`` or a ``redis://`` URL (``--shared-storage`` or
            ``--req-limit-storage``).
        translation_cache: ``("all",)`` or the API keys whose answers are cached.
        glossaries: ``{None or (source, target): entries}``: the server's glossary for
            every request (``None``: of every pair), under the API key's and the
            request's (:func:`keras_attn.serve.terms.read_flags` reads ``--glossary``).
        file_system_poll_wait_seconds: seconds between two looks for a model's new version
            (:class:`~keras_attn.serve.versions.Watcher`; 0: none).

    Example:
        >>> Settings(char_limit=5000, api_keys={"k1": None}, url_prefix="/lt")
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
    glossaries: Optional[dict] = None
    file_system_poll_wait_seconds: float = 1.0


def create_app(artefact, replicas=None, settings=None):
    """The Starlette app serving ``artefact`` (an :class:`~keras_attn.serve.locate.Artefact`)
    with ``replicas`` (closed at shutdown), or every model of a
    :class:`~keras_attn.serve.models.Models`.

    What its routes share is on ``app.state``: ``models``, ``settings``, ``capabilities``
    (the engine's), ``languages`` (``(sources, targets)``), ``limiter``, ``cache``,
    ``metrics``, ``downloads``, ``file_slots`` (documents read at once), ``watcher`` (new
    versions) and ``spec``;
    ``artefact``, ``replicas``, ``batcher`` and ``attention`` are the first model's.
    """
    settings = settings or Settings()
    models = artefact if isinstance(artefact, Models) else Models(
        [(artefact, replicas)], settings.max_batch, settings.batch_wait_ms, settings.queue_size)
    first = models.first
    shared = dict(
        models=models, artefact=first.artefact, settings=settings, replicas=first.replicas,
        batcher=first.batcher, capabilities=engines.ENGINES[first.artefact.engine].capabilities,
        languages=(models.sources, models.targets),
        limiter=RateLimiter(settings.req_limit, settings.api_keys,
                            storage=windows(settings.shared_storage)),
        cache=TranslationCache(settings.translation_cache, settings.shared_storage),
        metrics=Metrics(models), attention=first.attention,
        downloads=files.FileStore(settings.files_dir or tempfile.mkdtemp(prefix="keras-attn-")),
        file_slots=asyncio.Semaphore(files.FILE_SLOTS),
        watcher=Watcher(models, settings.file_system_poll_wait_seconds, models.log),
        spec=spec.openapi(version=__version__, prefix=settings.url_prefix))

    @contextlib.asynccontextmanager
    async def lifespan(app):
        models.start()
        shared["watcher"].start()
        try:
            yield
        finally:
            await shared["watcher"].stop()
            await models.stop()
            await asyncio.get_running_loop().run_in_executor(None, models.close)
            if settings.files_dir is None:  # the temporary folder of this app's downloads
                shutil.rmtree(shared["downloads"].directory, ignore_errors=True)

    served = routes.build()
    web = routes.site.web_mounts(models, settings)  # static files: no API metrics
    prefix = settings.url_prefix.rstrip("/")
    top = [Route("/", lambda request: RedirectResponse(prefix + "/", status_code=301)),
           Mount(prefix, routes=served + web)] if prefix else served + web
    app = Starlette(
        routes=top,
        middleware=[Middleware(CORSMiddleware, allow_origins=["*"],
                               allow_methods=["GET", "POST"],
                               allow_headers=["Authorization", "Content-Type"])],
        exception_handlers={HTTPException: http.not_found_or_not_allowed,
                            Exception: http.server_error},
        lifespan=lifespan)
    for name, value in shared.items():
        setattr(app.state, name, value)
    app.add_middleware(shared["metrics"].middleware, routes=served, prefix=prefix)
    app.add_middleware(http.DrainUnread)
    return app
