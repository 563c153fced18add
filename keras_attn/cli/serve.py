"""``keras-attn serve``: run or export directories as a LibreTranslate-compatible HTTP
service (:mod:`keras_attn.serve`), and ``keras-attn serve keys add/remove/list`` and
``suggestions export FILE`` for the state servers share. LibreTranslate's options read its
``LT_*`` variables, the others ``KERAS_ATTN_SERVE_<NAME>``.
"""
import argparse
import dataclasses
import os

from keras_attn.cli.console import add_verbose
from keras_attn.serve.engines import ENGINES  # imports neither TensorFlow nor CTranslate2

# One replica: the fastest layout measured on 2 cores (docs/cli.md); --replicas N for more.
DEFAULT_REPLICAS = 1


def add_parser(sub):
    p = sub.add_parser(
        "serve", help="serve a model over HTTP (LibreTranslate's API)",
        description="Serve an exported model over HTTP with LibreTranslate's API (POST "
                    "/translate, /translate_file, /detect, /suggest; GET /languages, "
                    "/frontend/settings, /spec, /docs, /health, /metrics); concurrent "
                    "requests are batched. Stop with Ctrl-C or SIGTERM: requests in flight "
                    "are answered first. `keras-attn serve keys add/remove/list` manages "
                    "the API keys, `keras-attn serve suggestions export FILE` writes the "
                    "suggestions as a corpus (docs/serving.md).")
    p.add_argument("path", metavar="RUN_OR_EXPORT_DIR",
                   help="a run directory (its export/), an export directory, or `exported`; "
                        "several (`keras-attn serve runs/en-fr runs/fr-en`), or a folder "
                        "whose subfolders are exports: every model is served, each request "
                        "routed by its source and target (a pair no model translates goes "
                        "through a pivot language where two models chain)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: "
                                                        "%(default)s)")
    p.add_argument("--port", type=int, default=5000, help="port (default: %(default)s)")
    p.add_argument("--engine", choices=list(ENGINES), default="savedmodel",
                   help="the SavedModel's options signature, or the CTranslate2 export "
                        "(keras-attn export RUN --format ctranslate2); /frontend/settings "
                        "says what the engine can do (default: %(default)s)")
    p.add_argument("--replicas", type=int, default=DEFAULT_REPLICAS,
                   help="engine copies decoding batches at once; more than 1 runs them in "
                        "worker processes, each holding its own engine: about 1.2 GB of "
                        "memory per SavedModel replica (TensorFlow; 1.4 GB with --xla), 0.1 GB "
                        "per CTranslate2 replica (docs/benchmarks/serve_load_*.md) (default: %(default)s, "
                        "the fastest measured on 2 cores)")
    p.add_argument("--threads", type=int, default=None,
                   help="intra-op threads of each replica; 0 = the engine's default (every "
                        "core) (default: 1 with several replicas; with one, 0 for "
                        "ctranslate2 and every core but one for the SavedModel)")
    p.add_argument("--xla", action="store_true",
                   help="call the SavedModel's XLA-compiled options signature "
                        "(translate_v2_xla: greedy decoding compiled, the same answers, every "
                        "batch shape compiled at start) where the export has it; faster for "
                        "small models, slower at batch 32 for the English-French recipe's "
                        "(docs/serving.md) (default: off, translate_v2)")
    p.add_argument("--max-batch", type=int, default=32,
                   help="most sentences decoded together (default: %(default)s)")
    p.add_argument("--batch-wait-ms", type=float, default=0.0,
                   help="longest wait of a request for others to join its batch, in "
                        "milliseconds; 0: a free replica takes what is waiting at once "
                        "(requests that arrive while it decodes form the next batch) "
                        "(default: %(default)s)")
    p.add_argument("--queue-size", type=int, default=256,
                   help="most requests waiting; more are answered 503 with Retry-After "
                        "(default: %(default)s)")
    p.add_argument("--timeout", type=float, default=30.0,
                   help="seconds a request may take; longer ones are answered 504 "
                        "(default: %(default)s)")
    p.add_argument("--api-keys", default=None, metavar="FILE", nargs="?", const=True,
                   help="API keys: alone, the database of --api-keys-db-path (`keras-attn "
                        "serve keys add`); with a FILE, its keys, one a line (`KEY` or `KEY "
                        "LIMIT`); an unknown key is answered 403 (default: no keys)")
    p.add_argument("--req-limit", type=int, default=-1,
                   help="requests a minute per client (key or address); -1: no limit; 0 "
                        "with --api-keys: a key is required (default: %(default)s)")
    p.add_argument("--max-body-bytes", type=int, default=1_000_000,
                   help="largest request body; larger ones are answered 413 "
                        "(default: %(default)s)")
    p.add_argument("--glossary", dest="glossaries", action="append", default=None,
                   metavar="[SRC-TGT=]FILE.tsv",
                   help="terms every request gets (source<TAB>target lines, UTF-8; a term "
                        "mapped to itself is not translated), for every language pair or, "
                        "as en-fr=FILE.tsv, for one; repeatable; an API key's glossary "
                        "(`keras-attn serve keys glossary`) and a request's `glossary` win "
                        "over it for a term they share (default: none)")
    add_libretranslate_options(p)
    add_verbose(p, argparse.SUPPRESS)
    return p


# Environment variables of the options that were there before LibreTranslate's were added
# (theirs are given where each is declared, in add_libretranslate_options).
ENVIRONMENT = {"host": "LT_HOST", "port": "LT_PORT", "threads": "LT_THREADS",
               "replicas": "KERAS_ATTN_SERVE_REPLICAS",
               "req_limit": "LT_REQ_LIMIT", "api_keys": "LT_API_KEYS",
               "engine": "KERAS_ATTN_SERVE_ENGINE", "max_batch": "KERAS_ATTN_SERVE_MAX_BATCH",
               "xla": "KERAS_ATTN_SERVE_XLA",
               "batch_wait_ms": "KERAS_ATTN_SERVE_BATCH_WAIT_MS",
               "queue_size": "KERAS_ATTN_SERVE_QUEUE_SIZE",
               "timeout": "KERAS_ATTN_SERVE_TIMEOUT",
               "max_body_bytes": "KERAS_ATTN_SERVE_MAX_BODY_BYTES"}
_TRUE, _FALSE = ("TRUE", "True", "true", "1"), ("FALSE", "False", "false", "0")


def add_libretranslate_options(p):
    """LibreTranslate's options (same names, meanings and ``LT_*`` variables) and the state
    servers share; then every option's default from its environment variable."""
    def option(flag, env, default, help, **kwargs):
        p.add_argument(flag, default=default, help=f"{help} [env {env}]", **kwargs)
        ENVIRONMENT[flag[2:].replace("-", "_")] = env

    def switch(flag, env, help):
        option(flag, env, False, help + " (default: off)", action="store_true")

    option("--char-limit", "LT_CHAR_LIMIT", -1, "characters per text; longer ones are "
           "answered 400; a key's own limit overrides it; -1: none (default: %(default)s)",
           type=int, metavar="N")
    option("--batch-limit", "LT_BATCH_LIMIT", -1, "texts in one request's list `q`; more "
           "are answered 400; -1: none (default: %(default)s)", type=int, metavar="N")
    option("--alternatives-limit", "LT_ALTERNATIVES_LIMIT", -1, "most `alternatives` a "
           "request may ask; -1: none (default: %(default)s)", type=int, metavar="N")
    option("--api-keys-db-path", "LT_API_KEYS_DB_PATH", "db/api_keys.db", "the SQLite "
           "file of the API keys (LibreTranslate's table) (default: %(default)s)")
    option("--get-api-key-link", "LT_GET_API_KEY_LINK", "", "where the answer to a request "
           "without a required key sends the client (default: none)")
    option("--shared-storage", "LT_SHARED_STORAGE", "memory://", "where the request "
           "windows of --req-limit are kept: memory:// (this process) or redis://HOST:PORT/DB "
           "(every server on it shares one limit) (default: %(default)s)")
    option("--req-limit-storage", "LT_REQ_LIMIT_STORAGE", "memory://", "LibreTranslate's "
           "name of --shared-storage for the request windows; wins when not memory:// "
           "(default: %(default)s)")
    option("--translation-cache", "LT_TRANSLATION_CACHE", "", "answers kept and given again "
           "for the same request: `all`, or the API keys (comma-separated) whose are; in "
           "--shared-storage (Redis: shared by every server on it) (default: none)",
           metavar="all|KEY,KEY")
    switch("--suggestions", "LT_SUGGESTIONS", "accept POST /suggest (stored in "
           "--suggestions-db-path; otherwise 403)")
    option("--suggestions-db-path", "KERAS_ATTN_SERVE_SUGGESTIONS_DB_PATH",
           "db/suggestions.db", "the SQLite file of the suggestions (default: %(default)s)")
    switch("--disable-files-translation", "LT_DISABLE_FILES_TRANSLATION",
           "answer POST /translate_file with 403")
    option("--files-dir", "KERAS_ATTN_SERVE_FILES_DIR", None, "where translated files wait "
           "an hour for their download; servers behind one address share one (default: a "
           "temporary folder)")
    switch("--disable-web-ui", "LT_DISABLE_WEB_UI", "answer GET / with 404")
    option("--frontend-timeout", "LT_FRONTEND_TIMEOUT", 500, "the page's wait after typing "
           "before it translates, in milliseconds (default: %(default)s)", type=int,
           metavar="MS")
    option("--frontend-language-source", "LT_FRONTEND_LANGUAGE_SOURCE", "auto", "the "
           "page's first source language: auto or the model's (default: %(default)s)")
    option("--frontend-language-target", "LT_FRONTEND_LANGUAGE_TARGET", "locale", "the "
           "page's first target language (the model has one) (default: %(default)s)")
    option("--url-prefix", "LT_URL_PREFIX", "", "serve every route under this path "
           "(/lt: /lt/translate); / redirects there (default: none)")
    switch("--trust-forwarded-for", "LT_TRUST_FORWARDED_FOR", "a client's address (for "
           "--req-limit) is the first of X-Forwarded-For (behind a proxy)")
    switch("--metrics", "LT_METRICS", "accepted for LibreTranslate's command lines: GET "
           "/metrics is always served")
    option("--metrics-auth-token", "LT_METRICS_AUTH_TOKEN", "", "GET /metrics answers 401 "
           "without `Authorization: Bearer TOKEN` (default: open)")
    # More paths (keras-attn serve PATH [PATH ...]), or: keys ..., suggestions ...
    p.add_argument("words", nargs="*", help=argparse.SUPPRESS)
    defaults = {}
    for action in p._actions:
        env = ENVIRONMENT.get(action.dest)
        if env is None:
            continue
        if not action.help.endswith("]"):
            action.help += f" [env {env}]"
        value = os.environ.get(env)
        if isinstance(action.const, bool) or action.nargs == 0:  # a switch, as LibreTranslate
            defaults[action.dest] = (True if value in _TRUE else False if value in _FALSE
                                     else action.default)
        elif value is not None:  # a string: argparse converts it, or names the flag
            defaults[action.dest] = value
    p.set_defaults(**defaults)


def run(args):
    from keras_attn.serve import limits, store, terms
    from keras_attn.serve.app import Settings
    from keras_attn.serve.server import serve

    if args.path in ("keys", "suggestions"):
        return manage(args)
    paths = [args.path] + list(args.words)  # keras-attn serve PATH [PATH ...]
    for flag, value, low in (("--max-batch", args.max_batch, 1),
                             ("--queue-size", args.queue_size, 1),
                             ("--max-body-bytes", args.max_body_bytes, 1),
                             ("--req-limit", args.req_limit, -1),
                             ("--char-limit", args.char_limit, -1),
                             ("--batch-limit", args.batch_limit, -1),
                             ("--alternatives-limit", args.alternatives_limit, -1),
                             ("--frontend-timeout", args.frontend_timeout, 0),
                             ("--port", args.port, 0)):
        if value < low:
            raise ValueError(f"{flag} must be >= {low}. Received: {flag} {value}")
    if args.timeout <= 0 or args.batch_wait_ms < 0:
        raise ValueError(f"--timeout must be > 0 and --batch-wait-ms >= 0. Received: "
                         f"--timeout {args.timeout} --batch-wait-ms {args.batch_wait_ms}")
    if args.api_keys is True:
        api_keys = store.KeyStore(args.api_keys_db_path)
    else:
        api_keys = limits.read_api_keys(args.api_keys) if args.api_keys else None
    prefix = args.url_prefix.rstrip("/")
    if prefix and not prefix.startswith("/"):
        prefix = "/" + prefix
    settings = Settings(**{
        **{f.name: getattr(args, f.name) for f in dataclasses.fields(Settings)},
        "api_keys": api_keys, "url_prefix": prefix,
        "suggestions": store.SuggestionStore(args.suggestions_db_path) if args.suggestions
        else None,
        "shared_storage": args.req_limit_storage if args.req_limit_storage != "memory://"
        else args.shared_storage,
        "glossaries": terms.read_flags(args.glossaries),
        "translation_cache": tuple(k for k in args.translation_cache.split(",") if k.strip())})
    return serve(paths[0] if len(paths) == 1 else paths, engine=args.engine, host=args.host,
                 port=args.port,
                 replicas=args.replicas, threads=args.threads, settings=settings,
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
