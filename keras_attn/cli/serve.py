"""``keras-attn serve``: a run or export directory as a LibreTranslate-compatible HTTP
service (:mod:`keras_attn.serve`)."""
import argparse

from keras_attn.cli.console import add_verbose

# One replica: on the 2-core CPUs of docs/benchmarks/serve_load_fra30.md and _dates.md the
# best one-replica layout served more requests a second at 16 clients than two replicas on
# both engines and both models (English-French: SavedModel 211 against 132, CTranslate2 266
# against 191; dates: 475 against 301, 429 against 335) and held a third of the memory: each
# replica is a process with its own engine and TensorFlow, 1.1-1.5 GB (3.0-3.7 GB for two).
# Layouts on more than 2 cores are not measured; --replicas N is there for them.
DEFAULT_REPLICAS = 1


def add_parser(sub):
    p = sub.add_parser(
        "serve", help="serve a model over HTTP (LibreTranslate's API)",
        description="Serve an exported model over HTTP with LibreTranslate's API (POST "
                    "/translate, GET /languages) and GET /health; concurrent requests are "
                    "batched. Stop with Ctrl-C or SIGTERM: requests in flight are answered "
                    "first.")
    p.add_argument("path", metavar="RUN_OR_EXPORT_DIR",
                   help="a run directory (its export/), an export directory, or `exported`")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: "
                                                        "%(default)s)")
    p.add_argument("--port", type=int, default=5000, help="port (default: %(default)s)")
    p.add_argument("--engine", choices=["savedmodel", "ctranslate2"], default="savedmodel",
                   help="the SavedModel's translate signature, or the CTranslate2 export "
                        "(keras-attn export RUN --format ctranslate2) (default: %(default)s)")
    p.add_argument("--replicas", type=int, default=DEFAULT_REPLICAS,
                   help="engine copies decoding batches at once; more than 1 runs them in "
                        "worker processes, each holding its own engine and TensorFlow: about "
                        "1.1-1.5 GB of memory per replica (docs/benchmarks/serve_load_*.md) "
                        "(default: %(default)s, the fastest measured on 2 cores)")
    p.add_argument("--threads", type=int, default=None,
                   help="intra-op threads of each replica; 0 = the engine's default (every "
                        "core) (default: 1 with several replicas, 0 with one)")
    p.add_argument("--max-batch", type=int, default=32,
                   help="most sentences decoded together (default: %(default)s)")
    p.add_argument("--batch-wait-ms", type=float, default=5.0,
                   help="longest wait of a request for others to join its batch, in "
                        "milliseconds (default: %(default)s)")
    p.add_argument("--queue-size", type=int, default=256,
                   help="most requests waiting; more are answered 503 with Retry-After "
                        "(default: %(default)s)")
    p.add_argument("--timeout", type=float, default=30.0,
                   help="seconds a request may take; longer ones are answered 504 "
                        "(default: %(default)s)")
    p.add_argument("--api-keys", default=None, metavar="FILE",
                   help="API keys, one a line (`KEY` or `KEY LIMIT`); an unknown key is "
                        "answered 403 (default: no keys)")
    p.add_argument("--req-limit", type=int, default=-1,
                   help="requests a minute per client (key or address); -1: no limit; 0 "
                        "with --api-keys: a key is required (default: %(default)s)")
    p.add_argument("--max-body-bytes", type=int, default=1_000_000,
                   help="largest request body; larger ones are answered 413 "
                        "(default: %(default)s)")
    add_verbose(p, argparse.SUPPRESS)
    return p


def run(args):
    from keras_attn.serve import limits
    from keras_attn.serve.app import Settings
    from keras_attn.serve.server import serve

    for flag, value, low in (("--max-batch", args.max_batch, 1),
                             ("--queue-size", args.queue_size, 1),
                             ("--max-body-bytes", args.max_body_bytes, 1),
                             ("--req-limit", args.req_limit, -1),
                             ("--port", args.port, 0)):
        if value < low:
            raise ValueError(f"{flag} must be >= {low}. Received: {flag} {value}")
    if args.timeout <= 0 or args.batch_wait_ms < 0:
        raise ValueError(f"--timeout must be > 0 and --batch-wait-ms >= 0. Received: "
                         f"--timeout {args.timeout} --batch-wait-ms {args.batch_wait_ms}")
    settings = Settings(max_batch=args.max_batch, batch_wait_ms=args.batch_wait_ms,
                        queue_size=args.queue_size, timeout=args.timeout,
                        max_body_bytes=args.max_body_bytes, req_limit=args.req_limit,
                        api_keys=limits.read_api_keys(args.api_keys) if args.api_keys else None)
    return serve(args.path, engine=args.engine, host=args.host, port=args.port,
                 replicas=args.replicas, threads=args.threads, settings=settings,
                 log=lambda m: print(m, flush=True))
