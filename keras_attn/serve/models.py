"""One server, many models, by language pair, and the route a request takes (the direct
model, or two chained through a pivot language). Imports neither TensorFlow nor
CTranslate2.

Example:
    >>> models = Models([(locate("runs/en-fr"), en_fr), (locate("runs/fr-en"), fr_en)])
    >>> [m.pair for m in models.route("en", "fr")]
    [('en', 'fr')]
    >>> models.languages()[0]
    {'code': 'en', 'name': 'English', 'targets': ['fr']}
"""
import contextlib
import dataclasses
import os

from keras_attn.serve.api import ApiError
from keras_attn.serve.attention import Attention
from keras_attn.serve.batcher import Batcher
from keras_attn.serve.locate import locate
from keras_attn.serve.versions import Versions, model_name


@dataclasses.dataclass
class Model:
    """One served model: its artefact, replicas, :class:`~keras_attn.serve.batcher.Batcher`
    and :class:`~keras_attn.serve.attention.Attention`, and its
    :class:`~keras_attn.serve.versions.Versions` (``versions.name``: its name at
    ``GET /v1/models/{name}``). A new version replaces ``artefact`` and ``replicas``."""

    artefact: object
    replicas: object
    batcher: Batcher
    attention: Attention
    versions: Versions = None

    @property
    def pair(self):
        """``(source code, target code)``."""
        return (self.artefact.source[0], self.artefact.target[0])


def check_pairs(artefacts, paths=None):
    """Refuse two artefacts of one ``(source, target)`` pair (``ValueError`` naming both);
    ``paths``: what each came from (default: their paths)."""
    seen = {}
    for i, artefact in enumerate(artefacts):
        pair = (artefact.source[0], artefact.target[0])
        where = paths[i] if paths else artefact.path
        if pair in seen:
            raise ValueError(
                f"two models translate {pair[0]} -> {pair[1]}: {seen[pair]} and {where}; a "
                "server routes a pair to one model: serve one of them (or set another pair "
                "in one run's config.json: source_lang, target_lang)")
        seen[pair] = where
    return artefacts


def find_artefacts(paths, engine="savedmodel"):
    """``[(path, Artefact)]`` of ``paths``, in order: each path is what
    :func:`~keras_attn.serve.locate.locate` resolves, or else a folder whose subfolders
    are (sorted by name).

    Raises:
        FileNotFoundError: a path that is neither.
        ValueError: two of one pair (:func:`check_pairs`).
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    found = []
    for path in paths:
        try:
            found.append((os.fspath(path), locate(path, engine)))
            continue
        except FileNotFoundError as e:
            error = e
        inside = []
        for name in sorted(os.listdir(path)) if os.path.isdir(path) else ():
            sub = os.path.join(path, name)
            if os.path.isdir(sub) and not name.startswith("."):
                with contextlib.suppress(FileNotFoundError):
                    inside.append((sub, locate(sub, engine)))
        if not inside:
            raise FileNotFoundError(f"{error} (nor do its subfolders hold one)") from None
        found.extend(inside)
    check_pairs([a for _, a in found], [p for p, _ in found])
    return found


class Models:
    """The served models by language pair, and the routes between the languages.

    Args:
        entries: ``[(artefact, replicas)]`` in order (the first is the default pair).
        max_batch, wait_ms, queue_size: each model's
            :class:`~keras_attn.serve.batcher.Batcher`'s.
        make: ``make(artefact)``: replicas loaded and started for an artefact (a new
            version's: :class:`~keras_attn.serve.versions.Watcher`); None: versions are
            reported, not loaded.
        log: called with a line when a model changes version.

    Attributes:
        sources, targets, codes: the source, target and all language codes, in the models'
            order. first: the first model. by_pair: ``{(source, target): Model}``.
            by_name: ``{name: Model}`` (the base folder's name; ``-source-target`` added
            where two models' folders share one).

    Raises:
        ValueError: no entry, or two of one pair.
    """

    def __init__(self, entries, max_batch=32, wait_ms=0.0, queue_size=256, make=None,
                 log=print):
        entries = list(entries)
        if not entries:
            raise ValueError("`entries` must hold at least one (artefact, replicas). "
                             "Received: entries=[]")
        check_pairs([a for a, _ in entries])
        self.make, self.log = make, log
        names = [model_name(a) for a, _ in entries]
        names = [n if names.count(n) == 1 else f"{n}-{a.source[0]}-{a.target[0]}"
                 for n, (a, _) in zip(names, entries)]
        self.models = [Model(a, r, Batcher(r, max_batch, wait_ms, queue_size), Attention(a),
                             Versions(name, a, a.engine))
                       for name, (a, r) in zip(names, entries)]
        self.by_name = {m.versions.name: m for m in self.models}
        self.first = self.models[0]
        self.by_pair = {m.pair: m for m in self.models}
        self.sources = tuple(dict.fromkeys(s for s, _ in self.by_pair))
        self.targets = tuple(dict.fromkeys(t for _, t in self.by_pair))
        self.codes = tuple(dict.fromkeys(c for pair in self.by_pair for c in pair))
        self.names = {}
        for m in self.models:
            for code, name in (m.artefact.source, m.artefact.target):
                self.names.setdefault(code, name)

    def __len__(self):
        return len(self.models)

    def __iter__(self):
        return iter(self.models)

    def route(self, source, target):
        """The models ``source`` -> ``target`` goes through: ``[direct]``, or ``[source ->
        pivot, pivot -> target]`` (the first pivot in the models' order).

        Raises:
            ApiError: 400 naming the pairs served, when neither exists.
        """
        hops = self._hops(source, target)
        if hops:
            return hops
        served = ", ".join(f"{s} -> {t}" for s, t in self.by_pair)
        raise ApiError(400, f"{source} -> {target} is not supported: this server translates "
                            f"{served} (and through a pivot language where two of them "
                            "chain; GET /languages lists every target of each source)")

    def _hops(self, source, target):
        """:meth:`route`'s models, or [] when there is no route."""
        if (source, target) in self.by_pair:
            return [self.by_pair[source, target]]
        return next(([m, self.by_pair[m.pair[1], target]] for m in self.models
                     if source != target and m.pair[0] == source and m.pair[1] != target
                     and (m.pair[1], target) in self.by_pair), [])

    def reachable(self, source, target):
        return bool(self._hops(source, target))

    def targets_of(self, source):
        """The targets ``source`` reaches: direct first, then through a pivot."""
        direct = [t for s, t in self.by_pair if s == source]
        return direct + [c for c in self.codes if c not in direct and self.reachable(source, c)]

    def sources_of(self, target):
        """The sources that reach ``target`` (``source: "auto"`` chooses among them)."""
        return tuple(c for c in self.sources if c != target and self.reachable(c, target))

    def languages(self):
        """``GET /languages``: every language with the targets it reaches."""
        return [{"code": code, "name": self.names[code], "targets": self.targets_of(code)}
                for code in self.codes]

    def start(self):
        for m in self.models:
            m.batcher.start()

    async def stop(self):
        for m in self.models:
            await m.batcher.stop()

    def close(self):
        """Close every model's replicas and attention (blocking)."""
        for m in self.models:
            m.replicas.close()
            m.attention.close()
