"""Start the service: resolve the path, load the replicas, run the app under uvicorn.

uvicorn owns the signals: on SIGTERM (or Ctrl-C) it stops accepting connections, waits
for the requests in flight to be answered (at most ``graceful_s`` seconds), then the app's
shutdown stops the batcher and closes the replicas, and the process exits 0.

Example:
    >>> serve("exported", port=5000)       # CLI: keras-attn serve exported
"""
import os

from keras_attn.serve.app import Settings, create_app
from keras_attn.serve.locate import locate


def default_replicas():
    """The cores this process may use: one replica each."""
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except AttributeError:  # not Linux
        return max(os.cpu_count() or 1, 1)


def default_threads(engine, replicas, cores=None):
    """Intra-op threads of each replica of ``engine`` (a name of
    :data:`~keras_attn.serve.engines.ENGINES`) when none are given: 1 with several
    replicas; with one, the engine's own ``default_threads`` of the ``cores``."""
    from keras_attn.serve.engines import ENGINES

    if replicas > 1:
        return 1
    return ENGINES[engine].default_threads(cores or default_replicas())


def make_replicas(artefact, replicas, threads=None, log=print, xla=False):
    """``InProcessReplicas`` for one replica, ``ProcessReplicas`` for more, started.

    Args:
        threads: intra-op threads of each replica (None: :func:`default_threads`).
        xla: the SavedModel's XLA-compiled signature where the export has it
            (:func:`~keras_attn.serve.engines.load_engine`).
    """
    from keras_attn.serve import engines
    from keras_attn.serve.replicas import InProcessReplicas, ProcessReplicas

    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
        raise ValueError(f"`replicas` must be an integer >= 1. Received: replicas={replicas!r}")
    if threads is None:
        threads = default_threads(artefact.engine, replicas)
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 0:
        raise ValueError(f"`threads` must be an integer >= 0 (0: every core). "
                         f"Received: threads={threads!r}")
    log(f"loading {artefact.engine} {artefact.path}: {replicas} replica(s), "
        f"{threads or 'default'} intra-op thread(s) each")
    if replicas == 1:
        engine = engines.load_engine(artefact, threads, xla)
        if getattr(engine, "signature_name", None):
            log(f"signature {engine.signature_name}: warming up "
                f"{len(engine.warm_sizes)} batch shape(s)")
        engines.warm_up(engine)
        return InProcessReplicas(engine)
    pool = ProcessReplicas(artefact, replicas, threads, xla)
    pids = pool.start()
    log(f"replicas ready: processes {pids}")
    return pool


def serve(path, engine="savedmodel", host="127.0.0.1", port=5000, replicas=None,
          threads=None, settings=None, graceful_s=None, log=print, xla=False):
    """Serve ``path`` (a run or export directory) until SIGTERM / Ctrl-C.

    Args:
        path: what :func:`~keras_attn.serve.locate.locate` resolves.
        engine: a name of :data:`~keras_attn.serve.engines.ENGINES` (``"savedmodel"``,
            ``"ctranslate2"``). host, port: where to listen.
        replicas: engine copies (default: one per core). threads: intra-op threads of each.
        settings: :class:`~keras_attn.serve.app.Settings`.
        graceful_s: longest wait for the requests in flight at shutdown (default: the
            request timeout plus 5 s).
        xla: the SavedModel's XLA-compiled signature where the export has it.
    """
    import uvicorn

    settings = settings or Settings()
    artefact = locate(path, engine)
    pool = make_replicas(artefact, default_replicas() if replicas is None else replicas,
                         threads, log, xla)
    app = create_app(artefact, pool, settings)
    heatmaps = app.state.attention
    if heatmaps.unavailable is None:
        # Loaded by the first POST /attention, not here: the Keras model and its traces
        # would add 50-80 MB to every server, most of which never draw a heatmap.
        log(f"attention heatmaps from the Keras model of {heatmaps.run_dir} (loaded at the "
            "first POST /attention)")
    else:
        log(f"POST /attention answers 501: {heatmaps.unavailable}")
    base = f"http://{host}:{port}{settings.url_prefix}"
    log(f"serving {artefact.source[0]} -> {artefact.target[0]} on {base}/ (LibreTranslate's "
        f"API: POST /translate, /translate_file, /detect, ...; every route at {base}/docs)")
    config = uvicorn.Config(
        app, host=host, port=port, log_level="warning",
        timeout_graceful_shutdown=settings.timeout + 5 if graceful_s is None else graceful_s)
    uvicorn.Server(config).run()
    return 0
