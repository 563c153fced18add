"""The HTTP routes, by concern (:mod:`.translating`, :mod:`.documents`, :mod:`.site`,
:mod:`.models`):
each declared in :data:`keras_attn.serve.spec.ENDPOINTS` under its own name, reading what
the app shares from ``request.app.state`` (:func:`keras_attn.serve.app.create_app`). Every
error is LibreTranslate's ``{"error": "..."}`` (:func:`keras_attn.serve.http.guarded`).
"""
from starlette.routing import Route

from keras_attn.serve import http, spec
from keras_attn.serve.routes import documents, models, site, translating

HANDLERS = {f.__name__: f for f in translating.ROUTES + documents.ROUTES + site.ROUTES
            + models.ROUTES}


def build():
    """A Starlette ``Route`` per declared endpoint, its handler guarded."""
    return [Route(e.path, http.guarded(HANDLERS[e.name]), methods=[e.method], name=e.name)
            for e in spec.ENDPOINTS]
