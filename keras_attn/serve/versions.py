"""New numbered versions of a served model, served live as TF Serving serves them.

A model served from a numbered folder (``exported/saved_model/translator/1``; a
CTranslate2 model in ``MODEL/1/``) has a base folder (``.../translator``) whose integer
subfolders are its versions; its name is the base folder's name (``translator``). Every
``--file-system-poll-wait-seconds`` the :class:`Watcher` looks at each base: the highest
*complete* version is the one to serve (TF Serving's "latest" policy: a higher one is an
upgrade, the serving one removed with a lower one left is a rollback). Complete means the
engine's ``version_files`` are there (a SavedModel's ``saved_model.pb`` and
``variables/variables.index``; CTranslate2's ``model.bin`` and ``keras_attn.json``) and the
folder's listing (every file's path, size and modification time) is the same at two looks
in a row: a folder still being copied is left alone until the copy stops. The new version
is loaded beside the serving one in the background (its own replicas), takes the next
batches, and the old one is closed once the batches it holds are answered: no request
fails and none waits for the load. A version that fails to load is reported (``END`` with
its error) and not tried again until its files change; the serving one stays.

:class:`Versions` holds one model's states as TF Serving's ``GET /v1/models/{name}``
answers them (``model_version_status``). A model served from a folder that is not numbered
(an unversioned CTranslate2 export) is version ``0`` and is never replaced.

Example:
    >>> versions = Versions("translator", locate("exported"), "savedmodel")
    >>> versions.status()
    [{'version': '1', 'state': 'AVAILABLE', 'status': {'error_code': 'OK', 'error_message': ''}}]
"""
import asyncio
import contextlib
import dataclasses
import os

from keras_attn.serve.engines import ENGINES
from keras_attn.serve.locate import artefact_languages

UNVERSIONED = 0


def split_version(path):
    """``(base, version)`` of an artefact's folder: ``(.../translator, 1)`` for
    ``.../translator/1``; ``(path, None)`` for a folder whose name is not an integer."""
    path = os.path.abspath(path)
    base, name = os.path.split(path)
    return (base, int(name)) if name.isdigit() else (path, None)


def model_name(artefact):
    """The name ``GET /v1/models/{name}`` knows a model by: its base folder's name."""
    return os.path.basename(split_version(artefact.path)[0])


def listing(folder):
    """Every file under ``folder`` as ``(relative path, size, modification time)``, sorted:
    two equal listings a poll apart say the folder is not being written."""
    found = []
    for root, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(root, name)
            with contextlib.suppress(FileNotFoundError):
                stat = os.stat(path)
                found.append((os.path.relpath(path, folder), stat.st_size, stat.st_mtime_ns))
    return tuple(sorted(found))


def complete(folder, engine):
    """Whether the version ``folder`` holds the files ``engine`` needs to load it."""
    return all(os.path.isfile(os.path.join(folder, name))
               for name in ENGINES[engine].version_files)


@dataclasses.dataclass
class _State:
    state: str
    error_code: str = "OK"
    error_message: str = ""


class Versions:
    """One served model's versions and their states.

    Args:
        name: the model's name (:func:`model_name`).
        artefact: the artefact serving now (its path's folder is its version).
        engine: the engine's name (what makes a version complete).

    Attributes:
        base: the folder of the numbered versions, or None (an unversioned artefact).
        serving: the version serving now.
    """

    def __init__(self, name, artefact, engine):
        self.name, self.engine = name, engine
        base, version = split_version(artefact.path)
        self.base = base if version is not None else None
        self.serving = UNVERSIONED if version is None else version
        self.states = {self.serving: _State("AVAILABLE")}
        self._seen = {}    # version -> its listing at the last look
        self._failed = {}  # version -> the listing it failed to load with

    def set(self, version, state, error=None):
        """Record ``version``'s state (TF Serving's START, LOADING, AVAILABLE, UNLOADING,
        END); ``error``: why it failed (its status then says UNKNOWN)."""
        self.states[version] = _State(state, "UNKNOWN" if error else "OK", error or "")

    def status(self, version=None):
        """TF Serving's ``model_version_status``: every version this server has held or
        tried, newest first (or only ``version``; [] when it has not)."""
        return [{"version": str(v), "state": s.state,
                 "status": {"error_code": s.error_code, "error_message": s.error_message}}
                for v, s in sorted(self.states.items(), reverse=True)
                if version is None or v == version]

    def wanted(self):
        """``(version, folder)`` to serve instead of the serving one, or None: the highest
        complete version whose listing held still since the last look, when it is higher
        than the serving one or the serving one's folder is gone (reads the disk)."""
        if self.base is None or not os.path.isdir(self.base):
            return None
        stable, seen = [], {}
        for name in os.listdir(self.base):
            folder = os.path.join(self.base, name)
            if name.isdigit() and os.path.isdir(folder) and complete(folder, self.engine):
                version = int(name)
                seen[version] = listing(folder)
                if seen[version] == self._seen.get(version) != self._failed.get(version):
                    stable.append(version)
        self._seen = seen
        target = max(stable, default=None)
        if target is None or target == self.serving or (
                target < self.serving and self.serving in seen):
            return None
        return target, os.path.join(self.base, str(target))

    def failed(self, version, error):
        """``version`` could not be served: END with ``error``, not tried again until its
        files change."""
        self.set(version, "END", error)
        self._failed[version] = self._seen.get(version)


def artefact_of(serving, folder):
    """The artefact of the version ``folder`` of the model ``serving`` serves: its own
    ``max_len`` and languages where it has them, else the serving one's.

    Raises:
        ValueError: its languages are not the serving model's (a server routes a pair to
            one model: another pair is another model, not a version).
    """
    engine = ENGINES[serving.engine]
    languages = artefact_languages(folder) or (serving.source, serving.target)
    if (languages[0][0], languages[1][0]) != (serving.source[0], serving.target[0]):
        raise ValueError(f"{folder} translates {languages[0][0]} -> {languages[1][0]}, "
                         f"not {serving.source[0]} -> {serving.target[0]} as the versions "
                         "beside it: serve it as a model of its own")
    max_len = engine.max_len(folder) or serving.max_len
    return dataclasses.replace(serving, path=folder, max_len=int(max_len),
                               source=languages[0], target=languages[1])


class Watcher:
    """Looks for new versions of every model every ``interval`` seconds and serves them
    (module docstring).

    Args:
        models: the :class:`~keras_attn.serve.models.Models` (its ``make`` loads replicas
            for an artefact; without one, versions are reported but not loaded).
        interval: seconds between two looks; 0: never look.
        log: called with a line at each change.
    """

    def __init__(self, models, interval, log=print):
        self.models, self.interval, self.log = models, interval, log
        self._task = self._stop = None

    def start(self):
        """Start looking (inside the running event loop), if there is anything to watch."""
        if self.interval > 0 and self.models.make is not None and any(
                m.versions.base for m in self.models):
            self._stop = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self):
        """Stop looking; a version being loaded is finished first (never left half made)."""
        if self._task is not None:
            self._stop.set()
            await self._task

    async def _run(self):
        while True:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self.interval)
                return
            await self.poll()

    async def poll(self):
        """One look at every model's versions; a version to serve is loaded and swapped in
        before this returns."""
        for model in self.models:
            try:
                found = await asyncio.to_thread(model.versions.wanted)
            except OSError as e:  # the base became unreadable: keep serving, say so
                self.log(f"model {model.versions.name}: cannot read {model.versions.base} "
                         f"({e})")
                continue
            if found is not None:
                await self.load(model, *found)

    async def load(self, model, version, folder):
        """Load ``version`` of ``model`` beside the serving one, swap it in, drain and close
        the old one."""
        versions, name = model.versions, model.versions.name
        versions.set(version, "LOADING")
        self.log(f"model {name}: loading version {version} ({folder})")
        try:
            artefact = artefact_of(model.artefact, folder)
            replicas = await asyncio.to_thread(self.models.make, artefact)
        except Exception as e:  # noqa: BLE001  (any failure to load: reported, old stays)
            versions.failed(version, f"{type(e).__name__}: {e}")
            self.log(f"model {name}: version {version} failed to load, version "
                     f"{versions.serving} stays: {e}")
            return
        old_version, old = versions.serving, model.replicas
        model.artefact, model.replicas = artefact, replicas
        versions.serving = version
        versions.set(version, "AVAILABLE")
        versions.set(old_version, "UNLOADING")
        await model.batcher.swap(replicas)  # returns once the old one's batches are answered
        await asyncio.to_thread(old.close)
        versions.set(old_version, "END")
        self.log(f"model {name}: version {version} serving; version {old_version} unloaded")
