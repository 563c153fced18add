"""The glossary a request is translated with: the server's for the model's language pair
(``keras-attn serve --glossary [SRC-TGT=]FILE.tsv``), under the API key's (stored with the
keys, :class:`~keras_attn.serve.store.KeyStore`), under the request's own (its ``glossary``
field): the later wins for a term they share.

Example:
    >>> server = read_flags(["glossary.tsv", "en-fr=legal.tsv"])
    >>> sorted(server)
    [None, ('en', 'fr')]
"""
import dataclasses

from keras_attn.serve.api import bad_request
from keras_attn.text import glossary as glossaries


def read_flag(value):
    """One ``--glossary`` value (``FILE.tsv`` for every language pair, ``SRC-TGT=FILE.tsv``
    for one) -> ``(None or (source, target), entries)``.

    Raises:
        ValueError: a file that cannot be read as a glossary (naming it and the line), or
            a pair that is not ``src-tgt``; OSError: no such file.
    """
    pair, sep, path = value.partition("=")
    if not sep:
        return None, glossaries.read_tsv(value)
    codes = tuple(pair.split("-"))
    if len(codes) != 2 or not all(codes):
        raise ValueError(f"a glossary's language pair is SRC-TGT (en-fr). Received: {pair!r}")
    return codes, glossaries.read_tsv(path)


def read_flags(values):
    """``--glossary`` values (or what :func:`read_flag` made of them) ->
    ``{None or (source, target): entries}``, the terms of one pair merged."""
    out = {}
    for value in values or ():
        pair, entries = value if isinstance(value, tuple) else read_flag(value)
        out[pair] = glossaries.merged(out.get(pair, ()), entries)
    return out


def key_glossaries(state, request):
    """``{pair: entries}`` of the request's API key (none without a key store)."""
    keys = state.settings.api_keys
    if request.api_key is None or not hasattr(keys, "glossaries"):
        return {}
    return keys.glossaries(request.api_key)


def for_model(state, request, model, hops=1):
    """``request.options`` with the glossary ``model`` translates it with: the server's for
    its pair, under the key's, under the request's. Through a pivot (``hops`` > 1) a model
    takes the server's alone: a request's or a key's terms map its source language to its
    target language, which no one model of the route translates.

    Raises:
        ApiError: 400: a request's or key's glossary through a pivot, or the merged
            glossary over :data:`keras_attn.text.glossary.MAX_TERMS` terms.
    """
    server = state.settings.glossaries or {}
    own = server.get(None, ()), server.get(model.pair, ())
    keys = state.settings.api_keys
    key = keys.glossary(request.api_key, (request.source, request.target)) \
        if request.api_key is not None and hasattr(keys, "glossary") else ()
    if hops > 1:
        if request.options.glossary or key:
            raise bad_request(
                f"Invalid request: a glossary needs one model translating {request.source} "
                f"-> {request.target}; this server goes through a pivot ({model.pair[0]} -> "
                f"{model.pair[1]} is one of its models)")
        key, mine = (), ()
    else:
        mine = request.options.glossary
    if not any((*own, key)):
        return request.options if hops == 1 else dataclasses.replace(request.options,
                                                                     glossary=())
    try:
        merged = glossaries.merged(*own, key, mine)
    except ValueError as e:
        raise bad_request(f"Invalid request: {e} (the server's, the API key's and the "
                          "request's glossaries merged)") from None
    return dataclasses.replace(request.options, glossary=merged)
