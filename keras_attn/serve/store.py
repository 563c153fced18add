"""State several servers can share: API keys (:class:`KeyStore`, with each key's glossary)
and suggestions (:class:`SuggestionStore`) in SQLite files, in LibreTranslate's tables (a
key's glossary in a table of ours beside them, which LibreTranslate never reads). Every
call opens its own connection (SQLite locks the file; WAL mode lets readers run beside a
writer).

Example:
    >>> keys = KeyStore("db/api_keys.db")
    >>> key = keys.add(req_limit=120)        # a new uuid4
    >>> key in keys, keys[key], keys.char_limit(key)
    (True, 120, None)
    >>> keys.set_glossary(key, {"ticket": "billet"})
    >>> keys.glossary(key, ("en", "fr"))
    (('ticket', 'billet'),)
"""
import contextlib
import os
import sqlite3
import uuid

from keras_attn.serve.api import check_int
from keras_attn.text import glossary as glossaries

EVERY_PAIR = ""  # a key's glossary for every language pair it translates


@contextlib.contextmanager
def _connect(path):
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    connection = sqlite3.connect(path, timeout=30)
    try:
        connection.execute("PRAGMA journal_mode=WAL")
        with connection:  # commits, or rolls back on an error
            yield connection
    finally:
        connection.close()


class _Table:
    """A table of LibreTranslate's in the SQLite file ``path`` (and ours: ``more``)."""

    schema = ""
    more = ()

    def __init__(self, path):
        self.path = str(path)
        with _connect(self.path) as db:
            for schema in (self.schema, *self.more):
                db.execute(f"CREATE TABLE IF NOT EXISTS {schema}")


class KeyStore(_Table):
    """API keys with their requests a minute and characters per text: a mapping ``key ->
    req_limit`` for :class:`~keras_attn.serve.limits.RateLimiter`, plus :meth:`char_limit`.

    Args:
        path: the SQLite file (made, with its folder, when missing).
    """

    schema = ('api_keys ("api_key" TEXT NOT NULL, "req_limit" INTEGER NOT NULL, '
              '"char_limit" INTEGER DEFAULT NULL, PRIMARY KEY("api_key"))')
    # Each key's glossary: one row a term, per language pair ("src-tgt", or EVERY_PAIR).
    more = ('glossaries ("api_key" TEXT NOT NULL, "pair" TEXT NOT NULL, '
            '"source_term" TEXT NOT NULL, "target_term" TEXT NOT NULL, '
            'PRIMARY KEY("api_key", "pair", "source_term"))',)

    def _row(self, key):
        with _connect(self.path) as db:
            return db.execute("SELECT req_limit, char_limit FROM api_keys WHERE api_key = ?",
                              (key,)).fetchone()

    def __contains__(self, key):
        return isinstance(key, str) and self._row(key) is not None

    def __getitem__(self, key):
        row = self._row(key)
        if row is None:
            raise KeyError(key)
        return row[0]

    def char_limit(self, key):
        """The key's own characters per text, or None (the server's ``--char-limit``)."""
        row = self._row(key)
        return None if row is None else row[1]

    def add(self, req_limit, key=None, char_limit=None):
        """Add (or replace) ``key`` (default: a new uuid4); the key."""
        for name, value in (("req_limit", req_limit), ("char_limit", char_limit)):
            if value is not None:
                check_int(name, value, -1, " (-1: no limit)")
        if req_limit is None:
            raise ValueError("`req_limit` is required (requests a minute; -1: no limit)")
        key = key or str(uuid.uuid4())
        with _connect(self.path) as db:
            db.execute("INSERT OR REPLACE INTO api_keys (api_key, req_limit, char_limit) "
                       "VALUES (?, ?, ?)", (key, req_limit, char_limit))
        return key

    def remove(self, key):
        """Remove ``key`` (and its glossaries); False when it was not there."""
        with _connect(self.path) as db:
            db.execute("DELETE FROM glossaries WHERE api_key = ?", (key,))
            return db.execute("DELETE FROM api_keys WHERE api_key = ?", (key,)).rowcount > 0

    def set_glossary(self, key, glossary, pair=EVERY_PAIR):
        """Give ``key`` (one of the store's) ``glossary`` (a dict, or
        :func:`keras_attn.text.glossary.entries` pairs) for requests of ``pair``
        (``"src-tgt"``; :data:`EVERY_PAIR`: all), in place of the one it had."""
        entries = glossaries.entries(glossary)
        if key not in self:
            raise ValueError(f"no such key in {self.path}: {key}")
        with _connect(self.path) as db:
            db.execute("DELETE FROM glossaries WHERE api_key = ? AND pair = ?", (key, pair))
            db.executemany("INSERT INTO glossaries (api_key, pair, source_term, target_term) "
                           "VALUES (?, ?, ?, ?)", [(key, pair, s, t) for s, t in entries])

    def remove_glossary(self, key, pair=EVERY_PAIR):
        """Remove ``key``'s glossary of ``pair``; False when it had none."""
        with _connect(self.path) as db:
            return db.execute("DELETE FROM glossaries WHERE api_key = ? AND pair = ?",
                              (key, pair)).rowcount > 0

    def glossaries(self, key):
        """``{pair: entries}`` of ``key``'s glossaries."""
        with _connect(self.path) as db:
            rows = db.execute("SELECT pair, source_term, target_term FROM glossaries WHERE "
                              "api_key = ? ORDER BY pair, rowid", (key,)).fetchall()
        out = {}
        for pair, source, target in rows:
            out.setdefault(pair, []).append((source, target))
        return {pair: tuple(terms) for pair, terms in out.items()}

    def glossary(self, key, pair):
        """The terms of ``key`` for a request of ``pair`` (``(source, target)`` codes): its
        glossary for every pair, under the one of that pair."""
        if key is None:
            return ()
        found = self.glossaries(key)
        return glossaries.merged(found.get(EVERY_PAIR, ()), found.get("-".join(pair), ()))

    def all(self):
        """``[(key, req_limit, char_limit)]`` in key order."""
        with _connect(self.path) as db:
            return db.execute("SELECT api_key, req_limit, char_limit FROM api_keys "
                              "ORDER BY api_key").fetchall()


class SuggestionStore(_Table):
    """Translations clients suggest (``POST /suggest``).

    Args:
        path: the SQLite file (made, with its folder, when missing).
    """

    schema = ('suggestions ("q" TEXT NOT NULL, "s" TEXT NOT NULL, "source" TEXT NOT NULL, '
              '"target" TEXT NOT NULL)')

    def add(self, q, s, source, target):
        with _connect(self.path) as db:
            db.execute("INSERT INTO suggestions (q, s, source, target) VALUES (?, ?, ?, ?)",
                       (q, s, source, target))

    def all(self):
        """``[(q, s, source, target)]`` in the order they came."""
        with _connect(self.path) as db:
            return db.execute("SELECT q, s, source, target FROM suggestions "
                              "ORDER BY rowid").fetchall()

    def export(self, path, source=None, target=None):
        """Write the suggestions (of one language pair when given) as ``q<TAB>s`` lines
        (tabs and line breaks inside a text become spaces); how many were written."""
        rows = [(q, s) for q, s, src, tgt in self.all()
                if (source is None or src == source) and (target is None or tgt == target)]
        with open(path, "w", encoding="utf-8") as f:
            for q, s in rows:
                f.write(" ".join(q.split()) + "\t" + " ".join(s.split()) + "\n")
        return len(rows)
