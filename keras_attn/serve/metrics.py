"""``GET /metrics``: the server's counters in Prometheus's text format (declared in
:class:`Metrics`; docs/serving.md, "Metrics", lists them). ``route`` is the route's path as
declared, ``unmatched`` for a path no route has (the label set stays small).

Example:
    >>> metrics = Metrics(models)
    >>> app = metrics.middleware(app, routes)     # counts every request (an ASGI app)
    >>> metrics.text()                            # b"# HELP keras_attn_http_requests_total..."
"""
import time

from prometheus_client import (CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge,
                               Histogram, generate_latest)
from starlette.routing import Match

BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


class Metrics:
    """The counters of one app (its own registry: several apps in a process stay apart).

    Args:
        models: the app's :class:`~keras_attn.serve.models.Models` (each model's batcher,
            labelled by its pair).
    """

    content_type = CONTENT_TYPE_LATEST

    def __init__(self, models):
        batchers = [m.batcher for m in models]
        self.registry = CollectorRegistry()
        self.requests = Counter("keras_attn_http_requests", "HTTP requests answered",
                                ["route", "method", "status"], registry=self.registry)
        self.errors = Counter("keras_attn_http_errors", "HTTP answers with a 4xx or 5xx status",
                              ["route", "status"], registry=self.registry)
        self.latency = Histogram("keras_attn_http_request_duration_seconds",
                                 "Seconds from a request's start to its answer's end",
                                 ["route"], registry=self.registry)
        self.batch_texts = Histogram("keras_attn_batch_texts", "Texts per engine call",
                                     ["source", "target"], buckets=BATCH_BUCKETS,
                                     registry=self.registry)
        self.batch_seconds = Histogram("keras_attn_batch_duration_seconds",
                                       "Seconds per engine call", ["source", "target"],
                                       registry=self.registry)
        self.translations = Counter("keras_attn_translations", "Texts translated, by the "
                                    "language pair asked (pivot: the language between two "
                                    "chained models, or empty)",
                                    ["source", "target", "pivot"], registry=self.registry)
        Gauge("keras_attn_queue_depth", "Requests waiting for a replica",
              registry=self.registry).set_function(lambda: sum(b.waiting for b in batchers))
        Gauge("keras_attn_batches_in_flight", "Batches being decoded",
              registry=self.registry).set_function(lambda: sum(b.in_flight for b in batchers))
        for m in models:
            m.batcher.on_batch = lambda texts, seconds, pair=m.pair: self.observe_batch(
                texts, seconds, *pair)

    def observe_batch(self, texts, seconds, source="", target=""):
        self.batch_texts.labels(source, target).observe(texts)
        self.batch_seconds.labels(source, target).observe(seconds)

    def observe_translation(self, texts, source, target, pivot=""):
        """``texts`` texts translated ``source`` -> ``target`` (through ``pivot``)."""
        self.translations.labels(source, target, pivot or "").inc(texts)

    def text(self):
        """The exposition (bytes)."""
        return generate_latest(self.registry)

    def middleware(self, app, routes, prefix=""):
        """``app`` (ASGI), each HTTP request counted under the route of ``routes`` it
        matches (its path past ``prefix``)."""
        async def counted(scope, receive, send):
            if scope["type"] != "http":
                return await app(scope, receive, send)
            path = scope["path"]
            inner = dict(scope, path=path[len(prefix):] or "/") \
                if prefix and path.startswith(prefix) else scope
            route = next((r.path for r in routes if r.matches(inner)[0] != Match.NONE),
                         "unmatched")
            status = [500]

            async def send_status(message):
                if message["type"] == "http.response.start":
                    status[0] = message["status"]
                await send(message)

            started = time.perf_counter()
            try:
                await app(scope, receive, send_status)
            finally:
                code = str(status[0])
                self.requests.labels(route, scope["method"], code).inc()
                if status[0] >= 400:
                    self.errors.labels(route, code).inc()
                self.latency.labels(route).observe(time.perf_counter() - started)

        return counted
