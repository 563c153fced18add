"""``keras-attn serve``: run or export directories as a LibreTranslate-compatible HTTP
service (:mod:`keras_attn.serve`), and ``keras-attn serve keys add/remove/list`` and
``suggestions export FILE`` for the state servers share. LibreTranslate's options read its
``LT_*`` variables, the others ``KERAS_ATTN_SERVE_<NAME>``, each by the rule of
:mod:`keras_attn.cli.settings` (a value that cannot be read stops the command).
"""
import argparse
import dataclasses
import os

from keras_attn.cli import settings
from keras_attn.cli.console import add_verbose
from keras_attn.serve.engines import ENGINES  # imports neither TensorFlow nor CTranslate2

# One replica: the fastest layout measured on 2 cores (docs/cli.md); --replicas N for more.
DEFAULT_REPLICAS = 1


def add_parser(sub):
    p = sub.add_parser(
        "serve", help="serve a model over HTTP (LibreTranslate's API)",
        description="Serve an exported model over HTTP with LibreTranslate's API (POST "
                    "/translate, /translate_file, /detect, /suggest; GET /languages, "
                    "/frontend/settings, /spec, /docs, /health, /metrics, /v1/models); "
                    "concurrent requests are batched. Stop with Ctrl-C or SIGTERM: requests "
                    "in flight are answered first. `keras-attn serve keys add/remove/list` "
                    "manages the API keys, `keras-attn serve suggestions export FILE` "
                    "writes the suggestions as a corpus (docs/serving.md). Every option "
                    "also reads its environment variable (given in its help); a value that "
                    "cannot be read, from either, stops the command.")
    p.add_argument("path", metavar="RUN_OR_EXPORT_DIR",
                   help="a run directory (its export/), an export directory, or `exported`; "
                        "several (`keras-attn serve runs/en-fr runs/fr-en`), or a folder "
                        "whose subfolders are exports: every model is served, each request "
                        "routed by its source and target (a pair no model translates goes "
                        "through a pivot language where two models chain)")
    setting = p.add_setting
    setting("--host", "LT_HOST", "127.0.0.1", "address to listen on (default: "
            "%(default)s)", read=HOST)
    setting("--port", "LT_PORT", 5000, "port (default: %(default)s)",
            read=settings.integer(0, 65535))
    setting("--engine", "KERAS_ATTN_SERVE_ENGINE", "savedmodel",
            "the SavedModel's options signature, or the CTranslate2 export (keras-attn "
            "export RUN --format ctranslate2); /frontend/settings says what the engine can "
            "do (default: %(default)s)", read=settings.choice(tuple(ENGINES)),
            metavar="{" + ",".join(ENGINES) + "}")
    setting("--replicas", "KERAS_ATTN_SERVE_REPLICAS", DEFAULT_REPLICAS,
            "engine copies decoding batches at once; more than 1 runs them in worker "
            "processes, each holding its own engine (one that dies is replaced): about 1.2 "
            "GB of memory per SavedModel replica (TensorFlow; 1.4 GB with --xla), 0.1 GB per "
            "CTranslate2 replica (research/serve_load_*.md) (default: %(default)s, "
            "the fastest measured on 2 cores)", read=settings.integer(1))
    setting("--threads", "LT_THREADS", None,
            "intra-op threads of each replica; 0 = the engine's default (every core) "
            "(default: 1 with several replicas; with one, 0 for ctranslate2 and every core "
            "but one for the SavedModel)", read=settings.integer(0))
    setting("--xla", "KERAS_ATTN_SERVE_XLA", False,
            "call the SavedModel's XLA-compiled options signature (translate_v2_xla: greedy "
            "decoding compiled, the same answers, every batch shape compiled at start) where "
            "the export has it; faster for small models, slower at batch 32 for the "
            "English-French recipe's (docs/serving.md) (default: off, translate_v2)",
            is_switch=True)
    setting("--max-batch", "KERAS_ATTN_SERVE_MAX_BATCH", 32,
            "most sentences decoded together (default: %(default)s)",
            read=settings.integer(1))
    setting("--batch-wait-ms", "KERAS_ATTN_SERVE_BATCH_WAIT_MS", 0.0,
            "longest wait of a request for others to join its batch, in milliseconds; 0: a "
            "free replica takes what is waiting at once (requests that arrive while it "
            "decodes form the next batch) (default: %(default)s)", read=settings.number(0))
    setting("--queue-size", "KERAS_ATTN_SERVE_QUEUE_SIZE", 256,
            "most requests waiting; more are answered 503 with Retry-After "
            "(default: %(default)s)", read=settings.integer(1))
    setting("--timeout", "KERAS_ATTN_SERVE_TIMEOUT", 30.0,
            "seconds a request may take; longer ones are answered 504 (default: "
            "%(default)s)", read=settings.number(0, above=True))
    setting("--api-keys", "LT_API_KEYS", None,
            "API keys: alone, the database of --api-keys-db-path (`keras-attn serve keys "
            "add`); with a FILE, its keys, one a line (`KEY` or `KEY LIMIT`): a file that is "
            "missing, unreadable or holds no key stops the command; an unknown key is "
            "answered 403. The variable: true (the database), false, or a FILE "
            "(default: no keys)", read=key_file, env_read=keys_variable, metavar="FILE",
            nargs="?", const=True)
    setting("--req-limit", "LT_REQ_LIMIT", -1,
            "requests a minute per client (key or address); -1: no limit; 0 with "
            "--api-keys: a key is required (default: %(default)s)",
            read=settings.integer(-1, note=" (-1: no limit)"))
    setting("--max-body-bytes", "KERAS_ATTN_SERVE_MAX_BODY_BYTES", 1_000_000,
            "largest request body; larger ones are answered 413 (default: %(default)s)",
            read=settings.integer(1))
    setting("--file-system-poll-wait-seconds",
            "KERAS_ATTN_SERVE_FILE_SYSTEM_POLL_WAIT_SECONDS", 1.0,
            "seconds between two looks for a new numbered version of each served model "
            "(TF Serving's flag of the same name): a complete one is loaded beside the "
            "serving one and takes over without a restart or a failed request "
            "(docs/deploy.md); 0: never look (default: %(default)s)",
            read=settings.number(0))
    setting("--glossary", "KERAS_ATTN_SERVE_GLOSSARY", None,
            "terms every request gets (source<TAB>target lines, UTF-8; a term mapped to "
            "itself is not translated), for every language pair or, as en-fr=FILE.tsv, for "
            "one; repeatable (the variable: several separated by " + repr(os.pathsep) + "); "
            "an API key's glossary (`keras-attn serve keys glossary`) and a request's "
            "`glossary` win over it for a term they share (default: none)",
            read=glossary_flag, env_read=glossary_variable, action=Appended,
            dest="glossaries", metavar="[SRC-TGT=]FILE.tsv")
    add_libretranslate_options(p)
    add_verbose(p, argparse.SUPPRESS)
    return p


HOST = settings.pattern(r"[A-Za-z0-9_.-]+|[0-9A-Fa-f:.]+",
                        "an IP address or a host name (0.0.0.0: every interface)")
STORAGE = settings.pattern(r"memory://|(redis|rediss|unix)://\S+",
                           "memory:// or a redis://HOST:PORT/DB URL")
URL_PREFIX = settings.pattern(
    r"/?([A-Za-z0-9._~!$&'()*+,;=:@%-]+/?)*", "a path such as /lt (empty: none)",
    convert=lambda t: ("/" + t.strip("/")) if t.strip("/") else "")


def glossary_flag(text):
    """One ``--glossary`` value read: ``(None or (source, target), entries)``."""
    from keras_attn.serve import terms

    try:
        return terms.read_flag(text)
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise argparse.ArgumentTypeError(
            f"{e}; expected FILE.tsv or SRC-TGT=FILE.tsv (source<TAB>target lines)") from None


def glossary_variable(text):
    """``KERAS_ATTN_SERVE_GLOSSARY``: ``--glossary`` values separated by ``os.pathsep``."""
    return [glossary_flag(item) for item in text.split(os.pathsep) if item.strip()]


class Appended(argparse.Action):
    """A repeatable setting: each value given is added to the list (the default, a
    ``settings.Unset``, is none)."""

    def __call__(self, parser, namespace, values, option_string=None):
        items = getattr(namespace, self.dest, None)
        items = list(items) if isinstance(items, list) else []
        setattr(namespace, self.dest, items + [values])


def key_file(text):
    """``--api-keys FILE``: the file, once it is read and holds at least one key."""
    from keras_attn.serve.limits import read_api_keys

    accepts = "a file of API keys, one a line (`KEY` or `KEY LIMIT`)"
    try:
        keys = read_api_keys(text)
    except (OSError, UnicodeDecodeError) as e:
        raise argparse.ArgumentTypeError(
            f"cannot read {text!r} ({e.strerror if isinstance(e, OSError) else e}); "
            f"expected {accepts}") from None
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{e}; expected {accepts}") from None
    if not keys:
        raise argparse.ArgumentTypeError(f"{text!r} holds no key; expected {accepts}")
    return text


def keys_variable(text):
    """``LT_API_KEYS``: true (the database, as ``--api-keys`` alone), false (no keys), or
    the path of a key file (:func:`key_file`)."""
    word = text.strip().lower()
    if word in settings.TRUE + settings.FALSE:
        return True if word in settings.TRUE else None
    try:
        return key_file(text)
    except argparse.ArgumentTypeError as e:
        raise argparse.ArgumentTypeError(f"expected true (the key database), false, or a "
                                         f"key file: {e}") from None


def add_libretranslate_options(p):
    """LibreTranslate's options (same names, meanings and ``LT_*`` variables) and the state
    servers share."""
    def switch(flag, env, help):
        p.add_setting(flag, env, False, help + " (default: off)", is_switch=True)

    option = p.add_setting
    limit = settings.integer(-1, note=" (-1: none)")
    option("--char-limit", "LT_CHAR_LIMIT", -1, "characters per text; longer ones are "
           "answered 400; a key's own limit overrides it; -1: none (default: %(default)s)",
           read=limit, metavar="N")
    option("--batch-limit", "LT_BATCH_LIMIT", -1, "texts in one request's list `q`; more "
           "are answered 400; -1: none (default: %(default)s)", read=limit, metavar="N")
    option("--alternatives-limit", "LT_ALTERNATIVES_LIMIT", -1, "most `alternatives` a "
           "request may ask; -1: none (default: %(default)s)", read=limit, metavar="N")
    option("--api-keys-db-path", "LT_API_KEYS_DB_PATH", "db/api_keys.db", "the SQLite "
           "file of the API keys (LibreTranslate's table) (default: %(default)s)",
           read=settings.path("the key database"))
    option("--get-api-key-link", "LT_GET_API_KEY_LINK", "", "where the answer to a request "
           "without a required key sends the client (default: none)",
           read=settings.pattern(r"\S*", "a link without spaces"))
    option("--shared-storage", "LT_SHARED_STORAGE", "memory://", "where the request "
           "windows of --req-limit are kept: memory:// (this process) or redis://HOST:PORT/DB "
           "(every server on it shares one limit) (default: %(default)s)", read=STORAGE)
    option("--req-limit-storage", "LT_REQ_LIMIT_STORAGE", "memory://", "LibreTranslate's "
           "name of --shared-storage for the request windows; wins when not memory:// "
           "(default: %(default)s)", read=STORAGE)
    option("--translation-cache", "LT_TRANSLATION_CACHE", "", "answers kept and given again "
           "for the same request: `all`, or the API keys (comma-separated) whose are; in "
           "--shared-storage (Redis: shared by every server on it) (default: none)",
           metavar="all|KEY,KEY", read=settings.pattern(
               r"|all|[^\s,]+(,[^\s,]+)*", "all, or API keys separated by commas"))
    switch("--suggestions", "LT_SUGGESTIONS", "accept POST /suggest (stored in "
           "--suggestions-db-path; otherwise 403)")
    option("--suggestions-db-path", "KERAS_ATTN_SERVE_SUGGESTIONS_DB_PATH",
           "db/suggestions.db", "the SQLite file of the suggestions (default: %(default)s)",
           read=settings.path("the suggestion database"))
    switch("--disable-files-translation", "LT_DISABLE_FILES_TRANSLATION",
           "answer POST /translate_file with 403")
    option("--files-dir", "KERAS_ATTN_SERVE_FILES_DIR", None, "where translated files wait "
           "an hour for their download; servers behind one address share one (default: a "
           "temporary folder)", read=settings.folder("the downloads' folder"))
    switch("--disable-web-ui", "LT_DISABLE_WEB_UI", "answer GET / with 404")
    option("--frontend-timeout", "LT_FRONTEND_TIMEOUT", 500, "the page's wait after typing "
           "before it translates, in milliseconds (default: %(default)s)",
           read=settings.integer(0), metavar="MS")
    code = r"[A-Za-z][A-Za-z0-9_-]*"
    option("--frontend-language-source", "LT_FRONTEND_LANGUAGE_SOURCE", "auto", "the "
           "page's first source language: auto or the model's (default: %(default)s)",
           read=settings.pattern(code, "auto or a language code"))
    option("--frontend-language-target", "LT_FRONTEND_LANGUAGE_TARGET", "locale", "the "
           "page's first target language (the model has one) (default: %(default)s)",
           read=settings.pattern(code, "locale or a language code"))
    option("--url-prefix", "LT_URL_PREFIX", "", "serve every route under this path "
           "(/lt: /lt/translate); / redirects there (default: none)", read=URL_PREFIX)
    switch("--trust-forwarded-for", "LT_TRUST_FORWARDED_FOR", "a client's address (for "
           "--req-limit) is the first of X-Forwarded-For (behind a proxy)")
    switch("--metrics", "LT_METRICS", "accepted for LibreTranslate's command lines: GET "
           "/metrics is always served")
    option("--metrics-auth-token", "LT_METRICS_AUTH_TOKEN", "", "GET /metrics answers 401 "
           "without `Authorization: Bearer TOKEN`; when given, not empty (default: open)",
           read=settings.pattern(r"\S+", "a token without spaces (unset: /metrics open)"))
    # More paths (keras-attn serve PATH [PATH ...]), or: keys ..., suggestions ...
    p.add_argument("words", nargs="*", help=argparse.SUPPRESS)


def run(args):
    from keras_attn.serve import limits, store, terms
    from keras_attn.serve.app import Settings
    from keras_attn.serve.server import serve

    if args.path in ("keys", "suggestions"):
        return manage(args)
    paths = [args.path] + list(args.words)  # keras-attn serve PATH [PATH ...]
    # Every value was read and checked by its setting's reader (the parser's settings).
    if args.api_keys is True:
        api_keys = store.KeyStore(args.api_keys_db_path)
    else:
        api_keys = limits.read_api_keys(args.api_keys) if args.api_keys else None
    server_settings = Settings(**{
        **{f.name: getattr(args, f.name) for f in dataclasses.fields(Settings)},
        "api_keys": api_keys,
        "suggestions": store.SuggestionStore(args.suggestions_db_path) if args.suggestions
        else None,
        "shared_storage": args.req_limit_storage if args.req_limit_storage != "memory://"
        else args.shared_storage,
        "translation_cache": tuple(k for k in args.translation_cache.split(",") if k.strip()),
        "glossaries": terms.read_flags(args.glossaries)})
    return serve(paths[0] if len(paths) == 1 else paths, engine=args.engine, host=args.host,
                 port=args.port,
                 replicas=args.replicas, threads=args.threads, settings=server_settings,
                 log=lambda m: print(m, flush=True), xla=args.xla)


def manage(args):
    """``keras-attn serve keys add/remove/list``, ``... keys glossary set/remove/show`` and
    ``... suggestions export FILE``."""
    from keras_attn.serve import store

    words = list(args.words)
    usage = ("usage: keras-attn serve keys add REQ_LIMIT [KEY] [--char-limit N] | keys "
             "remove KEY | keys list | keys glossary set KEY FILE.tsv [SRC-TGT] | keys "
             "glossary remove KEY [SRC-TGT] | keys glossary show KEY | suggestions export "
             "FILE")
    if args.path == "suggestions":
        if len(words) != 2 or words[0] != "export":
            raise ValueError(usage)
        count = store.SuggestionStore(args.suggestions_db_path).export(words[1])
        print(f"{count} suggestion(s) written to {words[1]}")
        return 0
    keys = store.KeyStore(args.api_keys_db_path)
    if words[:1] == ["glossary"]:
        return manage_glossary(keys, words[1:], usage)
    if words[:1] == ["add"] and len(words) in (2, 3):
        try:
            limit = int(words[1])
        except ValueError:
            raise ValueError(f"REQ_LIMIT must be an integer (requests a minute, -1: no "
                             f"limit). Received: {words[1]!r}") from None
        char_limit = args.char_limit if args.char_limit != -1 else None
        print(keys.add(limit, words[2] if len(words) == 3 else None, char_limit))
    elif words[:1] == ["remove"] and len(words) == 2:
        if not keys.remove(words[1]):
            raise ValueError(f"no such key in {args.api_keys_db_path}: {words[1]}")
        print(f"removed {words[1]}")
    elif words == ["list"]:
        for key, limit, char_limit in keys.all():
            print(f"{key}\treq_limit={limit}\tchar_limit="
                  f"{'-' if char_limit is None else char_limit}")
    else:
        raise ValueError(usage)
    return 0


def manage_glossary(keys, words, usage):
    """``keras-attn serve keys glossary set KEY FILE.tsv [SRC-TGT]``, ``remove KEY
    [SRC-TGT]``, ``show KEY``: a key's terms, for every pair or one."""
    from keras_attn.serve import store
    from keras_attn.text import glossary

    action, rest = (words[0], words[1:]) if words else (None, [])
    pair = {"set": rest[2:3], "remove": rest[1:2]}.get(action, [])
    pair = pair[0] if pair else store.EVERY_PAIR
    if pair and len(pair.split("-")) != 2:
        raise ValueError(f"a language pair is SRC-TGT (en-fr). Received: {pair}")
    if action == "set" and len(rest) in (2, 3):
        keys.set_glossary(rest[0], glossary.read_tsv(rest[1]), pair)
        print(f"{rest[0]}: {len(glossary.read_tsv(rest[1]))} term(s) for "
              f"{pair or 'every language pair'}")
    elif action == "remove" and len(rest) in (1, 2):
        if not keys.remove_glossary(rest[0], pair):
            raise ValueError(f"{rest[0]} has no glossary for {pair or 'every language pair'}")
        print(f"removed the glossary of {rest[0]} for {pair or 'every language pair'}")
    elif action == "show" and len(rest) == 1:
        for pair, terms in keys.glossaries(rest[0]).items():
            for source, target in terms:
                print(f"{pair or '*'}\t{source}\t{target}")
    else:
        raise ValueError(usage)
    return 0
