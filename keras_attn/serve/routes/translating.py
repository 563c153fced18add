"""``POST /translate``, ``/attention``, ``/detect`` and ``/suggest`` (fields and answers:
:mod:`keras_attn.serve.api`), each request routed by ``source`` and ``target``.

Example:
    >>> await best(request.app.state, ["3 March 2021"])
    ['2021-03-03']
"""
import asyncio
import dataclasses
import time

from starlette.responses import JSONResponse

from keras_attn.decoding.options import DecodingOptions
from keras_attn.serve import api, engines, http, limits, markup, terms
from keras_attn.serve import detect as identify


async def routed(state, source, target, texts):
    """``(models, detected)``: the models ``source`` -> ``target`` goes through and, for
    ``source="auto"``, ``(code, confidence)`` of the source chosen (langid's likeliest
    among the sources that reach ``target``; a one-model server's own, 100)."""
    models, detected = state.models, None
    if source == "auto":
        if len(models) == 1:
            detected = (models.first.pair[0], 100.0)
        else:
            among = models.sources_of(target)
            if not among:
                raise api.bad_request(f"no source of this server is translated into "
                                      f"{target} (GET /languages)")
            found = await asyncio.get_running_loop().run_in_executor(
                None, identify.detect, texts, among)
            detected = (found[0]["language"], found[0]["confidence"])
        source = detected[0]
    return models.route(source, target), detected


async def _hop(state, model, req, timing=None, hops=1):
    """``req`` through one model of ``hops`` (its options checked against that model's
    artefact; the glossary of :func:`keras_attn.serve.terms.for_model`)."""
    req = dataclasses.replace(req, options=terms.for_model(state, req, model, hops))
    try:
        engines.check_options(model.artefact, req.options)
    except ValueError as e:
        raise api.bad_request(f"Invalid request: {e}") from None
    if req.format == "html":
        return await markup.translate_html(model.batcher, req, state.settings.timeout,
                                           alignments=state.capabilities.alignments)
    # Confidences only when the answer shows them (``hypotheses``): on CTranslate2 they
    # are one more pass over every hypothesis.
    return await model.batcher.submit(req.texts, req.options, state.settings.timeout,
                                      confidence=req.hypotheses, timing=timing)


async def translated(state, req, timing=None, hops=None):
    """Per text of a checked ``TranslateRequest``, its hypotheses (``timing``: as
    ``Batcher.submit``'s; ``hops``: default :func:`routed`'s). Through a pivot, the first
    model's greedy translation is what the second translates."""
    if hops is None:
        hops, _ = await routed(state, req.source, req.target, req.texts)
    for model in hops[:-1]:
        first = dataclasses.replace(req, options=DecodingOptions(
            passthrough=req.options.passthrough, glossary=req.options.glossary),
            alternatives=0, hypotheses=False)
        results = await _hop(state, model, first, hops=len(hops))
        req = dataclasses.replace(req, texts=[hyps[0]["translation"] for hyps in results])
    return await _hop(state, hops[-1], req, timing, len(hops))


async def best(state, texts, hops=None, options=None, api_key=None):
    """The engine's translation of each text with the default options (greedy) or
    ``options`` (``passthrough`` and ``glossary``, with the server's and ``api_key``'s
    glossaries); through ``hops`` (default: the first model)."""
    hops = hops or [state.models.first]
    req = api.TranslateRequest(list(texts), True, hops[0].pair[0], hops[-1].pair[1], "text",
                               0, options or DecodingOptions(), False, api_key)
    return [hyps[0]["translation"] for hyps in await translated(state, req, hops=hops)]


async def translate(request):
    state, settings = request.app.state, request.app.state.settings
    started = time.perf_counter()
    fields, form, _ = await http.read_fields(request)
    char_limit = limits.check_access(request, fields)
    req = api.parse_fields(fields, state.languages, form)
    api.check_limits(req, char_limit, settings.batch_limit, settings.alternatives_limit)
    timing = {"read": time.perf_counter() - started}
    key = state.cache.key(req, terms.key_glossaries(state, req)) \
        if state.cache.applies(req) else None
    answer = None if key is None else state.cache.get(key)
    if answer is not None:
        timing["cache"] = time.perf_counter() - started - timing["read"]
    else:
        hops, detected = await routed(state, req.source, req.target, req.texts)
        pivot = hops[0].pair[1] if len(hops) > 1 else None
        results = await translated(state, req, timing, hops)
        source, confidence = detected or (req.source, 100.0)
        answer = api.answer(req, results, source, confidence, pivot)
        state.metrics.observe_translation(len(req.texts), source, req.target, pivot)
        if key is not None:
            state.cache.put(key, answer)
    return JSONResponse(answer, headers=http.server_timing(timing, started))


async def attention(request):
    state = request.app.state
    fields, _, _ = await http.read_fields(request)
    limits.check_access(request, fields)
    text, translation = api.parse_attention_fields(fields, state.languages)
    model = state.models.first
    source, target = api.check_languages(fields, state.languages, required=False)
    if len(state.models) > 1 and target is not None:
        hops, _ = await routed(state, source or "auto", target, [text])
        if len(hops) > 1:
            raise api.bad_request(f"no one model translates {hops[0].pair[0]} -> {target}: "
                                  "a heatmap is one model's attention")
        model = hops[0]
    if model.attention.unavailable is not None:
        raise api.ApiError(501, f"Cannot compute attention: {model.attention.unavailable}")
    if translation is None:  # the engine's greedy translation, as /translate gives it
        translation = (await best(state, [text], [model]))[0]
    out = await asyncio.wait_for(
        asyncio.wrap_future(model.attention.submit(text, translation)), state.settings.timeout)
    return JSONResponse({"translatedText": translation, **out})


async def detect(request):
    fields, form, _ = await http.read_fields(request)
    limits.check_access(request, fields)
    texts, _ = api.texts_of(fields.get("q"), form)
    # A server of several models names its sources only; one model: every language.
    models = request.app.state.models
    among = models.sources if len(models) > 1 else None
    loop = asyncio.get_running_loop()
    return JSONResponse(await loop.run_in_executor(None, identify.detect, texts, among))


async def suggest(request):
    fields, form, _ = await http.read_fields(request)
    store = request.app.state.settings.suggestions
    if store is None:
        raise api.ApiError(403, "Suggestions are disabled on this server.")
    q, s, source, target = api.required_strings(fields, ["q", "s", "source", "target"], form)
    await asyncio.get_running_loop().run_in_executor(None, store.add, q, s, source, target)
    return JSONResponse({"success": True})


ROUTES = (translate, attention, detect, suggest)
