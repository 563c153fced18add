"""Start the service: resolve the paths, load the replicas, run the app under uvicorn.

Example:
    >>> serve("exported", port=5000)       # CLI: keras-attn serve exported
    >>> serve(["runs/en-fr", "runs/fr-en"])  # keras-attn serve runs/en-fr runs/fr-en
"""
import os

from keras_attn.serve.app import Settings, create_app


def default_replicas():
    """The cores this process may use: one replica each."""
    cores = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else ()  # Linux
    return max(len(cores) or os.cpu_count() or 1, 1)


def default_threads(engine, replicas, cores=None):
    """Intra-op threads of each replica: 1 with several; with one, the engine's
    ``default_threads`` of the ``cores``."""
    from keras_attn.serve.engines import ENGINES

    return 1 if replicas > 1 else ENGINES[engine].default_threads(cores or default_replicas())


def make_replicas(artefact, replicas, threads=None, log=print, xla=False):
    """``InProcessReplicas`` for one replica, ``ProcessReplicas`` for more, started
    (``threads`` None: :func:`default_threads`)."""
    from keras_attn.serve import engines
    from keras_attn.serve.api import check_int
    from keras_attn.serve.replicas import InProcessReplicas, ProcessReplicas

    check_int("replicas", replicas, 1)
    if threads is None:
        threads = default_threads(artefact.engine, replicas)
    check_int("threads", threads, 0, " (0: every core)")
    log(f"loading {artefact.engine} {artefact.path}: {replicas} replica(s), "
        f"{threads or 'default'} intra-op thread(s) each")
    if replicas == 1:
        engine = engines.load_engine(artefact, threads, xla)
        if getattr(engine, "signature_name", None):
            log(f"signature {engine.signature_name}: warming up "
                f"{len(engine.warm_sizes)} batch shape(s)")
        engines.warm_up(engine)
        return InProcessReplicas(engine)
    pool = ProcessReplicas(artefact, replicas, threads, xla, log=log)
    pids = pool.start()
    log(f"replicas ready: processes {pids}")
    return pool


def rss_mb(pid="self"):
    """The resident memory of a process in MB (Linux's ``/proc``), or None elsewhere."""
    try:
        with open(f"/proc/{pid}/statm") as f:
            pages = int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def load_models(paths, engine="savedmodel", replicas=1, threads=None, log=print, xla=False,
                settings=None, make=None):
    """The :class:`~keras_attn.serve.models.Models` of ``paths`` (a path or a list:
    :func:`~keras_attn.serve.models.find_artefacts`), each with its replicas and batcher
    (sized by ``settings``), the memory each takes logged. ``make``: as
    :func:`make_replicas` (the default); it also loads a model's new versions
    (:mod:`keras_attn.serve.versions`)."""
    from keras_attn.serve.models import Models, find_artefacts

    settings = settings or Settings()
    make = make or make_replicas
    entries = []
    for path, artefact in find_artefacts(paths, engine):
        before = rss_mb()
        pool = make(artefact, replicas, threads, log, xla)
        pids = getattr(pool, "pids", None)
        if pids:
            sizes = [rss_mb(pid) for pid in pids]
            memory = (f"{round(sum(sizes))} MB in {len(pids)} worker processes"
                      if None not in sizes else "in worker processes")
        else:
            after = rss_mb()
            memory = (f"+{round(after - before)} MB" if None not in (before, after)
                      else "memory not measured here")
        log(f"loaded {artefact.source[0]}->{artefact.target[0]} from {path} ({memory})")
        entries.append((artefact, pool))
    return Models(entries, settings.max_batch, settings.batch_wait_ms, settings.queue_size,
                  make=lambda artefact: make(artefact, replicas, threads, log, xla), log=log)


def serve(path, engine="savedmodel", host="127.0.0.1", port=5000, replicas=None,
          threads=None, settings=None, graceful_s=None, log=print, xla=False):
    """Serve ``path`` until SIGTERM / Ctrl-C (the requests in flight are answered first).

    Args:
        path: what :func:`load_models` reads.
        engine: a name of :data:`~keras_attn.serve.engines.ENGINES`.
        replicas: engine copies (default: one per core). threads: intra-op threads of each.
        settings: :class:`~keras_attn.serve.app.Settings`.
        graceful_s: longest wait for the requests in flight at shutdown (default: the
            request timeout plus 5 s).
    """
    import uvicorn

    settings = settings or Settings()
    models = load_models(path, engine, default_replicas() if replicas is None else replicas,
                         threads, log, xla, settings)
    app = create_app(models, settings=settings)
    for heatmaps in (model.attention for model in models):
        # Loaded by the first POST /attention, not here: most servers never draw a heatmap.
        log(f"attention heatmaps from the Keras model of {heatmaps.run_dir} (loaded at the "
            "first POST /attention)" if heatmaps.unavailable is None
            else f"POST /attention answers 501: {heatmaps.unavailable}")
    base = f"http://{host}:{port}{settings.url_prefix}"
    pairs = ", ".join(f"{s} -> {t}" for s, t in models.by_pair)
    log(f"serving {pairs} on {base}/ (LibreTranslate's "
        f"API: POST /translate, /translate_file, /detect, ...; every route at {base}/docs)")
    poll = settings.file_system_poll_wait_seconds
    for model in models:
        versions = model.versions
        watched = (f"new versions in {versions.base} looked for every {poll:g} s"
                   if versions.base and poll > 0 else "no new versions looked for")
        log(f"model {versions.name}: {model.pair[0]} -> {model.pair[1]}, version "
            f"{versions.serving} ({watched}; status at {base}/v1/models/{versions.name})")
    # A proxy's headers (X-Forwarded-For, X-Forwarded-Proto: the scheme of the download
    # links) are read only when told to trust them; uvicorn reads them by default.
    config = uvicorn.Config(
        app, host=host, port=port, log_level="warning",
        proxy_headers=settings.trust_forwarded_for,
        timeout_graceful_shutdown=settings.timeout + 5 if graceful_s is None else graceful_s)
    uvicorn.Server(config).run()
    return 0
