"""API keys and request limits, as LibreTranslate's ``--api-keys`` and ``--req-limit``:
``N`` translation requests a minute per client (API key, else address; 429 beyond); an
unknown key is 403; with ``--req-limit 0`` a key is required (400). The windows are this
process's (:class:`MemoryWindows`) or shared in Redis (:class:`RedisWindows`).

Example:
    >>> keys = read_api_keys("keys.txt")          # {"k1": None, "k2": 120}
    >>> limiter = RateLimiter(default_limit=60, keys=keys)
    >>> limiter.allow("k1")                       # True, until the 61st call this minute
"""
import collections
import time

from keras_attn.serve.api import ApiError, bad_request, check_int

WINDOW_S = 60.0
REDIS_PREFIX = "keras_attn:req:"
# One atomic step of a sliding window in a sorted set (member: a unique id, score: the time):
# drop what left the window, count, and add this request when there is room.
_REDIS_HIT = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1] - ARGV[2])
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[3]) then return 0 end
redis.call('ZADD', KEYS[1], ARGV[1], ARGV[4])
redis.call('PEXPIRE', KEYS[1], math.ceil(ARGV[2] * 1000))
return 1
"""


class MemoryWindows:
    """Each client's requests of the last ``WINDOW_S`` seconds, in this process."""

    def __init__(self):
        self._seen = collections.defaultdict(collections.deque)

    def hit(self, bucket, limit, now):
        """Count one request of ``bucket`` at ``now``; False (not counted) when ``limit``
        are in the window already."""
        seen = self._seen[bucket]
        while seen and seen[0] <= now - WINDOW_S:
            seen.popleft()
        if len(seen) >= limit:
            return False
        seen.append(now)
        return True


class RedisWindows:
    """:class:`MemoryWindows` kept in Redis (``url``: ``redis://[:password@]host:port/db``),
    shared by every server on it; the clock is each server's ``time.time``."""

    def __init__(self, url):
        import redis

        self.client = redis.Redis.from_url(url)
        self.client.ping()  # a wrong URL fails at start, not at the first request
        self._hit = self.client.register_script(_REDIS_HIT)
        self._count = 0

    def hit(self, bucket, limit, now):
        self._count += 1
        member = f"{now:.6f}:{id(self)}:{self._count}"
        return bool(self._hit(keys=[REDIS_PREFIX + bucket],
                              args=[now, WINDOW_S, limit, member]))


def windows(url):
    """The window storage of a ``--shared-storage`` URL (``memory://`` or ``redis://``)."""
    if url in (None, "", "memory://"):
        return MemoryWindows()
    if url.startswith(("redis://", "rediss://", "unix://")):
        return RedisWindows(url)
    raise ValueError(f"`shared_storage` must be memory:// or a redis:// URL. "
                     f"Received: shared_storage={url!r}")


def read_api_keys(path):
    """``{key: limit a minute or None}`` from an API key file (module docstring)."""
    keys = {}
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            words = line.split("#", 1)[0].split()
            if not words:
                continue
            if len(words) > 2 or (len(words) == 2 and not words[1].isdigit()):
                raise ValueError(f"{path}:{number}: expected `KEY` or `KEY LIMIT` (requests a "
                                 f"minute). Received: {line.strip()!r}")
            keys[words[0]] = int(words[1]) if len(words) == 2 else None
    return keys


class RateLimiter:
    """Sliding one-minute window of requests per client.

    Args:
        default_limit: requests a minute of a client without its own limit (-1: none).
        keys: ``{api_key: limit or None}`` (:func:`read_api_keys`), or None.
        clock: seconds (default ``time.monotonic``; ``time.time`` with a shared storage).
        storage: :class:`MemoryWindows` (default) or :class:`RedisWindows`.
    """

    def __init__(self, default_limit=-1, keys=None, clock=None, storage=None):
        self.default_limit = check_int("req_limit", default_limit, -1, " (-1: no limit)")
        self.keys = keys
        self.storage = storage or MemoryWindows()
        shared = not isinstance(self.storage, MemoryWindows)
        self.clock = clock or (time.time if shared else time.monotonic)

    def limit_of(self, api_key):
        """Requests a minute allowed to ``api_key`` (None: keyless), -1 for no limit."""
        if api_key is not None and self.keys and api_key in self.keys:
            if self.keys[api_key] is not None:
                return self.keys[api_key]
            if self.default_limit == 0:  # keys required: a key without a limit has none
                return -1
        return self.default_limit

    def allow(self, client, api_key=None):
        """Count one request of ``client``; False when it is over its limit."""
        limit = self.limit_of(api_key)
        if limit < 0:
            return True
        bucket = "key:" + api_key if api_key is not None else "ip:" + client
        return self.storage.hit(bucket, limit, self.clock())


def client_address(request):
    """The client's address: ``X-Forwarded-For``'s first with ``--trust-forwarded-for``."""
    forwarded = request.headers.get("x-forwarded-for", "")
    if request.app.state.settings.trust_forwarded_for and forwarded:
        return forwarded.split(",")[0].strip()
    return request.client.host if request.client else ""


def check_access(request, fields):
    """A request's ``api_key`` and limits (the app's ``Settings`` and ``RateLimiter``): 403
    for an unknown key, 400 for a missing required key, 429 over the limit. Returns the
    client's characters per text (its key's own ``char_limit``, or ``--char-limit``)."""
    settings, limiter = request.app.state.settings, request.app.state.limiter
    keys = settings.api_keys
    key = (fields.get("api_key") or None) if keys is not None else None
    if key is not None and key not in keys:
        raise ApiError(403, "Invalid API key")
    if keys is not None and key is None and settings.req_limit == 0:
        raise bad_request(f"Visit {settings.get_api_key_link} to get an API key"
                          if settings.get_api_key_link
                          else "Please contact the server operator to get an API key")
    if not limiter.allow(client_address(request), key):
        raise ApiError(429, f"Slowdown: {limiter.limit_of(key)} per 1 minute")
    # A KeyStore's key may have its own; a file's keys ({key: limit}) have none.
    own = keys.char_limit(key) if key is not None and hasattr(keys, "char_limit") else None
    return settings.char_limit if own is None else own
