"""The HTTP routes: small functions in modules by concern, each declared in
:data:`keras_attn.serve.spec.ENDPOINTS` under its own name (the OpenAPI ``operationId``),
and each reading what the app shares from ``request.app.state``
(:func:`keras_attn.serve.app.create_app` lists it).

* :mod:`.translating`: ``POST /translate``, ``/attention`` (the page's heatmap: the
  cross-attention matrix, :mod:`keras_attn.serve.attention`), ``/detect``, ``/suggest``.
* :mod:`.documents`: ``POST /translate_file``, ``GET /download_file/{filename}``.
* :mod:`.site`: ``GET /languages``, ``/frontend/settings``, ``/health``, ``/metrics``,
  ``/spec``, ``/docs`` and ``/`` (the web page, ``static/index.html``, which calls the
  API as any client does).

Every error is LibreTranslate's ``{"error": "..."}`` with its status
(:func:`keras_attn.serve.http.guarded`; which status when: docs/serving.md, "Routes").
"""
from starlette.routing import Route

from keras_attn.serve import http, spec
from keras_attn.serve.routes import documents, site, translating

HANDLERS = {f.__name__: f for f in translating.ROUTES + documents.ROUTES + site.ROUTES}


def build():
    """A Starlette ``Route`` per declared endpoint, its handler guarded."""
    return [Route(e.path, http.guarded(HANDLERS[e.name]), methods=[e.method], name=e.name)
            for e in spec.ENDPOINTS]
