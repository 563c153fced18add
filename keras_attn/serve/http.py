"""The HTTP plumbing of :mod:`keras_attn.serve.app`: bodies read within a limit, JSON and
form fields, LibreTranslate's JSON errors (:func:`guarded`), ``Server-Timing``, and an
ASGI middleware that drains the unread body before an error answer.

Example:
    >>> fields, form, uploads = await read_fields(request)
"""
import asyncio
import json
import time
import urllib.parse

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse

from keras_attn.serve import api
from keras_attn.serve.batcher import QueueFull
from keras_attn.serve.replicas import ReplicaLost

DRAIN_BYTES = 64 * 2 ** 20  # an oversized body is read (and dropped) up to this, then closed


def error(status, message, headers=None):
    return JSONResponse({"error": message}, status_code=status, headers=headers)


def guarded(handler):
    """The route ``handler``, its failures answered with LibreTranslate's ``{"error": ...}``
    (the statuses: :mod:`keras_attn.serve.routes`)."""
    async def answer(request):
        try:
            return await handler(request)
        except api.ApiError as e:
            return error(e.status, e.message, e.headers)
        except (QueueFull, ReplicaLost) as e:
            return error(503, f"Server busy: {e}", {"Retry-After": str(e.retry_after)})
        except asyncio.TimeoutError:
            timeout = request.app.state.settings.timeout
            return error(504, f"Translation timed out after {timeout:g} s")
        except ValueError as e:  # the engine refused the options
            return error(400, f"Invalid request: {e}")
        except Exception as e:  # noqa: BLE001  (LibreTranslate's 500)
            return error(500, f"Cannot translate text: {e}")

    return answer


async def not_found_or_not_allowed(request, exc):
    """Starlette's 404 and 405, as LibreTranslate's JSON errors."""
    return error(exc.status_code, exc.detail, getattr(exc, "headers", None))


async def server_error(request, exc):
    return error(500, f"Internal error: {exc}")


async def read_fields(request):
    """``(fields, form, uploads)`` of the request's body, read within ``--max-body-bytes``
    (:func:`read_body`, :func:`fields`)."""
    limit = request.app.state.settings.max_body_bytes
    return await fields(request, await read_body(request, limit), max(limit, 1024 * 1024))


async def read_body(request, limit):
    """The body, or 413 past ``limit`` bytes (by ``Content-Length``, or while reading; what
    is left unread is dropped by :class:`DrainUnread` before the answer goes out)."""
    length = request.headers.get("content-length", "")
    too_large = api.ApiError(413, f"Request body too large: the limit is {limit} bytes",
                             {"Connection": "close"})
    if length.isdigit() and int(length) > limit:
        raise too_large
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large
        chunks.append(chunk)
    return b"".join(chunks)


def server_timing(timing, started):
    """A ``Server-Timing`` header of the seconds in ``timing`` (``read``, ``queue``,
    ``engine``, ``cache``) and ``total`` since ``started``, in milliseconds."""
    timing = dict(timing, total=time.perf_counter() - started)
    return {"Server-Timing": ", ".join(f"{name};dur={1000 * seconds:.3f}"
                                       for name, seconds in timing.items())}


class DrainUnread:
    """ASGI middleware: before an error answer (4xx, 5xx) goes out, the unread rest of the
    request body is read and dropped, up to :data:`DRAIN_BYTES` (a client writing its body
    would otherwise see a connection reset instead of the answer); a longer declared body
    is not read and the connection is closed."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope["headers"]).get(b"content-length", b"")
        done = [length.isdigit() and int(length) > DRAIN_BYTES]  # closed without reading

        async def tracked():
            message = await receive()
            if message["type"] != "http.request" or not message.get("more_body", False):
                done[0] = True
            return message

        async def drained(message):
            if message["type"] == "http.response.start" and message["status"] >= 400:
                size = 0
                while not done[0] and size <= DRAIN_BYTES:
                    size += len((await tracked()).get("body", b""))
            await send(message)

        await self.app(scope, tracked, drained)


async def fields(request, body, max_part_size):
    """``(fields, form, uploads)`` of a body: a JSON object, or a form's fields (with the
    query's) and its files (``{name: UploadFile}``)."""
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type == "application/json" or content_type.endswith("+json"):
        try:
            fields = json.loads(body.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise api.bad_request(f"Invalid request: the body is not valid JSON ({e})") from None
        if not isinstance(fields, dict):
            raise api.bad_request("Invalid JSON format: the body must be a JSON object")
        return fields, False, {}
    fields, uploads = dict(request.query_params), {}
    if content_type == "multipart/form-data":
        async def receive():
            return {"type": "http.request", "body": body, "more_body": False}

        try:
            form = await Request(request.scope, receive).form(max_part_size=max_part_size)
        except HTTPException as e:  # python-multipart's refusal of a malformed body
            raise api.bad_request(f"Invalid request: {e.detail}") from None
        fields.update({k: v for k, v in form.items() if isinstance(v, str)})
        uploads = {k: v for k, v in form.items() if not isinstance(v, str)}
    elif body:
        try:
            fields.update(urllib.parse.parse_qsl(body.decode("utf-8"), keep_blank_values=True,
                                                 strict_parsing=False))
        except UnicodeDecodeError as e:
            raise api.bad_request(f"Invalid request: the form body is not UTF-8 ({e})") from None
    return fields, True, uploads
