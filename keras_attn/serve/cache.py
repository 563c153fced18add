"""LibreTranslate's ``--translation-cache``: answers of ``POST /translate`` kept and given
again for the same request (same texts, languages, format, alternatives and decoding
options), in this process or in Redis (shared by every server on it).

Example:
    >>> cache = TranslationCache(("all",))
    >>> key = cache.key(request)
    >>> cache.get(key) or cache.put(key, answer)
"""
import collections
import dataclasses
import hashlib
import json
import threading

PREFIX = "keras_attn:cache:"


class TranslationCache:
    """Answers by request.

    Args:
        who: ``("all",)`` or the API keys whose requests are cached (empty: none).
        url: ``memory://`` (this process, least recently used first out) or ``redis://``.
        max_entries: most answers kept in memory. ttl_s: seconds an answer lives in Redis.
    """

    def __init__(self, who=(), url="memory://", max_entries=10_000, ttl_s=24 * 3600):
        self.who = frozenset(w.strip() for w in who if w.strip())
        self.max_entries = max_entries
        self.ttl_s = ttl_s
        self._memory = collections.OrderedDict()
        self._lock = threading.Lock()
        self._redis = None
        if self.who and url not in (None, "", "memory://"):
            import redis

            self._redis = redis.Redis.from_url(url)

    def applies(self, request):
        """The request's client uses the cache."""
        return "all" in self.who or (request.api_key is not None
                                     and request.api_key in self.who)

    @staticmethod
    def key(request, *more):
        """The digest of the request but its API key, and of ``more`` (what else the
        answer depends on: the key's glossaries)."""
        fields = dataclasses.asdict(request)
        fields.pop("api_key")
        return hashlib.sha256(json.dumps([fields, *more], sort_keys=True, default=str)
                              .encode("utf-8")).hexdigest()

    def get(self, key):
        """The JSON answer kept for ``key``, or None."""
        if self._redis is not None:
            value = self._redis.get(PREFIX + key)
            return None if value is None else json.loads(value)
        with self._lock:
            if key not in self._memory:
                return None
            self._memory.move_to_end(key)
            return self._memory[key]

    def put(self, key, answer):
        if self._redis is not None:
            self._redis.set(PREFIX + key, json.dumps(answer), ex=self.ttl_s)
            return
        with self._lock:
            self._memory[key] = answer
            self._memory.move_to_end(key)
            while len(self._memory) > self.max_entries:
                self._memory.popitem(last=False)
