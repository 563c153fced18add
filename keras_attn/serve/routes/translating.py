"""``POST /translate``, ``/attention``, ``/detect`` and ``/suggest``: texts to and from the
model (fields and answers: :mod:`keras_attn.serve.api`).

Example:
    >>> await best(request.app.state, ["3 March 2021"])
    ['2021-03-03']
"""
import asyncio
import time

from starlette.responses import JSONResponse

from keras_attn.decoding.options import DecodingOptions
from keras_attn.serve import api, engines, http, limits, markup
from keras_attn.serve import detect as identify


async def translated(state, req, timing=None):
    """Per text of a checked ``TranslateRequest``, its hypotheses, once the engine's
    capabilities allow its options (``timing``: as ``Batcher.submit``'s)."""
    try:
        engines.check_options(state.artefact, req.options)
    except ValueError as e:
        raise api.bad_request(f"Invalid request: {e}") from None
    if req.format == "html":
        return await markup.translate_html(state.batcher, req, state.settings.timeout,
                                           alignments=state.capabilities.alignments)
    # Confidences only when the answer shows them (``hypotheses``): on CTranslate2 they
    # are one more pass over every hypothesis.
    return await state.batcher.submit(req.texts, req.options, state.settings.timeout,
                                      confidence=req.hypotheses, timing=timing,
                                      **api.passthrough_of(req))


async def best(state, texts):
    """The engine's translation of each text with the default options (greedy)."""
    results = await state.batcher.submit(texts, DecodingOptions(), state.settings.timeout,
                                         confidence=False)
    return [hyps[0]["translation"] for hyps in results]


async def translate(request):
    state, settings = request.app.state, request.app.state.settings
    started = time.perf_counter()
    fields, form, _ = await http.read_fields(request)
    char_limit = limits.check_access(request, fields)
    req = api.parse_fields(fields, state.languages, form)
    api.check_limits(req, char_limit, settings.batch_limit, settings.alternatives_limit)
    timing = {"read": time.perf_counter() - started}
    key = state.cache.key(req) if state.cache.applies(req) else None
    answer = None if key is None else state.cache.get(key)
    if answer is not None:
        timing["cache"] = time.perf_counter() - started - timing["read"]
    else:
        answer = api.answer(req, await translated(state, req, timing), state.languages[0])
        if key is not None:
            state.cache.put(key, answer)
    return JSONResponse(answer, headers=http.server_timing(timing, started))


async def attention(request):
    state = request.app.state
    fields, _, _ = await http.read_fields(request)
    limits.check_access(request, fields)
    if state.attention.unavailable is not None:
        raise api.ApiError(501, f"Cannot compute attention: {state.attention.unavailable}")
    text, translation = api.parse_attention_fields(fields, state.languages)
    if translation is None:  # the engine's greedy translation, as /translate gives it
        translation = (await best(state, [text]))[0]
    out = await asyncio.wait_for(
        asyncio.wrap_future(state.attention.submit(text, translation)), state.settings.timeout)
    return JSONResponse({"translatedText": translation, **out})


async def detect(request):
    fields, form, _ = await http.read_fields(request)
    limits.check_access(request, fields)
    texts, _ = api.texts_of(fields.get("q"), form)
    loop = asyncio.get_running_loop()
    return JSONResponse(await loop.run_in_executor(None, identify.detect, texts))


async def suggest(request):
    fields, form, _ = await http.read_fields(request)
    store = request.app.state.settings.suggestions
    if store is None:
        raise api.ApiError(403, "Suggestions are disabled on this server.")
    q, s, source, target = api.required_strings(fields, ["q", "s", "source", "target"], form)
    await asyncio.get_running_loop().run_in_executor(None, store.add, q, s, source, target)
    return JSONResponse({"success": True})


ROUTES = (translate, attention, detect, suggest)
