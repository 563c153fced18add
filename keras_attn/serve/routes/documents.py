"""``POST /translate_file`` and ``GET /download_file/{filename}``: a document translated with
its formatting (:mod:`keras_attn.serve.files`), kept for its download.

Example:
    >>> httpx.post(url + "/translate_file", data={"source": "dates", "target": "iso"},
    ...            files={"file": ("dates.txt", b"3 March 2021")}).json()
    {'translatedFileUrl': 'http://.../download_file/<uuid>.dates.txt'}
"""
from starlette.responses import FileResponse, JSONResponse

from keras_attn.decoding.options import DecodingOptions
from keras_attn.serve import api, files, http, limits, untrusted
from keras_attn.serve.routes.translating import best, routed, translated


async def translate_file(request):
    state = request.app.state
    fields, form, uploads = await http.read_fields(request)
    if state.settings.disable_files_translation:
        raise api.ApiError(403, "Files translation are disabled on this server.")
    limits.check_access(request, fields)
    upload = uploads.get("file")
    if upload is None:
        raise api.bad_request("Invalid request: missing file parameter")
    source, target = api.check_languages(fields, state.languages)
    if not upload.filename:
        raise api.bad_request("Invalid request: empty file")
    if files.extension(upload.filename) is None:
        raise api.bad_request("Invalid request: file format not supported")
    chosen = api.text_options(fields, form)  # passthrough, glossary
    api_key = fields.get("api_key") or None

    route = []  # the models, routed at the first texts (``auto``: detected on them)

    async def hops(texts):
        if not route:
            route.extend((await routed(state, source, target, texts))[0])
        return route

    async def plain(texts):
        return await best(state, texts, await hops(texts), DecodingOptions(**chosen), api_key)

    async def as_html(fragments):
        req = api.parse_fields({"q": fragments, "source": source, "target": target,
                                "format": "html", "api_key": api_key, **chosen},
                               state.languages)
        return [hyps[0]["translation"]
                for hyps in await translated(state, req, hops=await hops(fragments))]

    try:
        data = await files.translate_file(upload.filename, await upload.read(), plain,
                                          as_html, state.file_slots)
    except untrusted.Refused as e:  # not what it says it is, malformed, or past a limit
        raise api.ApiError(e.status, f"Invalid request: {e}") from None
    except ValueError as e:
        raise api.bad_request(f"Invalid request: {e}") from None
    name = state.downloads.put(upload.filename, data)
    return JSONResponse({"translatedFileUrl": str(request.url_for("download_file",
                                                                  filename=name))})


async def download_file(request):
    if request.app.state.settings.disable_files_translation:
        raise api.bad_request("Files translation are disabled on this server.")
    name = request.path_params["filename"]
    path = request.app.state.downloads.path(name)
    if path is None:
        if "/" in name or name.startswith("."):
            raise api.bad_request("Invalid filename")
        raise api.ApiError(404, f"No such file: {name} (unknown, or expired)")
    return FileResponse(path, filename=name.split(".", 1)[1],
                        media_type="application/octet-stream")


ROUTES = (translate_file, download_file)
