"""TF Serving's model status routes over the served models: ``GET /v1/models`` (ours: every
model with its name), ``GET /v1/models/{name}`` and ``GET /v1/models/{name}/versions/{version}``
(TF Serving's ``model_version_status``, :mod:`keras_attn.serve.versions`).

Example:
    >>> httpx.get(url + "/v1/models/translator").json()
    {'model_version_status': [{'version': '1', 'state': 'AVAILABLE',
                               'status': {'error_code': 'OK', 'error_message': ''}}]}
"""
from starlette.responses import JSONResponse

from keras_attn.serve import api


def _model(request):
    name = request.path_params["name"]
    model = request.app.state.models.by_name.get(name)
    if model is None:
        served = ", ".join(request.app.state.models.by_name)
        raise api.ApiError(404, f"Could not find any versions of model {name} (this server "
                                f"serves {served}: GET /v1/models)")
    return model


async def list_models(request):
    return JSONResponse({"models": [
        {"name": m.versions.name, "source": m.pair[0], "target": m.pair[1],
         "engine": m.artefact.engine, "model_version_status": m.versions.status()}
        for m in request.app.state.models]})


async def model_status(request):
    return JSONResponse({"model_version_status": _model(request).versions.status()})


async def version_status(request):
    model, text = _model(request), request.path_params["version"]
    found = model.versions.status(int(text)) if text.isdigit() else []
    if not found:
        raise api.ApiError(404, f"Could not find version {text} of model "
                                f"{model.versions.name}")
    return JSONResponse({"model_version_status": found})


ROUTES = (list_models, model_status, version_status)
