"""API keys and request limits, as LibreTranslate's ``--api-keys`` and ``--req-limit``.

* ``--req-limit N``: each client may send ``N`` translation requests a minute (a client is
  its API key, or its address without one); more are answered 429. ``-1``: no limit.
* ``--api-keys FILE``: one key a line, optionally followed by that key's own limit a minute
  (``KEY 120``); ``#`` starts a comment. A request whose ``api_key`` is not in the file is
  answered 403 ("Invalid API key"). With ``--req-limit 0`` a request without a key is
  refused (LibreTranslate's way to require keys: 400, "Please contact the server operator
  to get an API key"), and a key without its own limit has none.

Example:
    >>> keys = read_api_keys("keys.txt")          # {"k1": None, "k2": 120}
    >>> limiter = RateLimiter(default_limit=60, keys=keys)
    >>> limiter.allow("k1")                       # True, until the 61st call this minute
"""
import collections
import time

WINDOW_S = 60.0


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
        clock: seconds (``time.monotonic``; tests pass their own).
    """

    def __init__(self, default_limit=-1, keys=None, clock=time.monotonic):
        if isinstance(default_limit, bool) or not isinstance(default_limit, int) \
                or default_limit < -1:
            raise ValueError(f"`req_limit` must be an integer >= -1 (-1: no limit). "
                             f"Received: req_limit={default_limit!r}")
        self.default_limit = default_limit
        self.keys = keys
        self.clock = clock
        self._seen = collections.defaultdict(collections.deque)

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
        now = self.clock()
        seen = self._seen[api_key if api_key is not None else client]
        while seen and seen[0] <= now - WINDOW_S:
            seen.popleft()
        if len(seen) >= limit:
            return False
        seen.append(now)
        return True
