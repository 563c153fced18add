"""``keras-attn serve``: a translation service speaking LibreTranslate's API.

A thin layer over the exported artefacts (no decoding of its own): the SavedModel's
``translate`` signature or the CTranslate2 model decode; this package batches the requests
of concurrent clients and answers HTTP.

Modules, one job each:

* :mod:`.locate`: a run or export directory -> the artefact to load (``Artefact``).
* :mod:`.models`: every model served, by language pair, and a request's route (one model,
  or two through a pivot language).
* :mod:`.engines`: the registry of engines (``SavedModelEngine``, ``CTranslate2Engine``)
  and what each can do: texts + ``DecodingOptions`` -> n-best lists.
* :mod:`.replicas`: the engine in this process, or in ``--replicas`` worker processes.
* :mod:`.batcher`: requests decoded together, by option set; bounded queue and timeouts.
* :mod:`.app`: the Starlette application; :mod:`.routes`: its routes, by concern;
  :mod:`.spec`: their declarations and OpenAPI document; :mod:`.http`: bodies, fields,
  errors; :mod:`.api`: LibreTranslate's fields and answers; :mod:`.limits`, :mod:`.store`,
  :mod:`.cache`: keys, request limits, suggestions and cached answers (in this process,
  SQLite or Redis); :mod:`.files`, :mod:`.markup`: documents and HTML with their
  formatting; :mod:`.detect`, :mod:`.metrics`, :mod:`.attention`: ``/detect``,
  ``/metrics``, the page's heatmap. :mod:`.server`: uvicorn and the replicas.

Example:
    >>> from keras_attn.serve import serve
    >>> serve("exported", port=5000)           # CLI: keras-attn serve exported
    >>> serve(["runs/en-fr", "runs/fr-en"])     # keras-attn serve runs/en-fr runs/fr-en

May import: export, training, viz, the translator and everything below them; never
cli.
"""
from keras_attn.serve.locate import Artefact, locate  # noqa: F401  (no TensorFlow import)


def serve(*args, **kwargs):
    """:func:`keras_attn.serve.server.serve` (imported on first use)."""
    from keras_attn.serve.server import serve as run

    return run(*args, **kwargs)
