"""A ``--data`` value (local path or URL, plain text or ``.zip``) as a local corpus file,
written atomically (an interrupted download never leaves a half file).
"""
import logging
import os
import urllib.parse
import urllib.request
import zipfile
from pathlib import Path

from keras_attn.core import runs

logger = logging.getLogger(__name__)


def _is_url(value):
    return urllib.parse.urlparse(str(value)).scheme in ("http", "https", "ftp", "file")


def _extract_corpus(zip_path, cache_dir):
    with zipfile.ZipFile(zip_path) as zf:
        members = [m for m in zf.namelist()
                   if m.endswith(".txt") and not Path(m).name.startswith("_")]
        if not members:
            raise ValueError(f"No corpus .txt file in {zip_path}. Members: {zf.namelist()}")
        preferred = [m for m in members if Path(m).name == "fra.txt"]
        member = (preferred or sorted(members))[0]
        target = Path(cache_dir) / Path(zip_path).stem / Path(member).name
        if not target.exists():
            runs.atomic_write_bytes(target, zf.read(member))
    return target


def resolve_data(url_or_path, cache_dir=None):
    """Turn a `--data` value (URL or local path) into a local corpus file's `pathlib.Path`:
    a URL is downloaded once into `cache_dir` (default `~/.cache/keras_attn`), a `.zip`
    extracted there (its `.txt`, `fra.txt` preferred); any other path is returned as is.
    Raises FileNotFoundError for a local path that does not exist, OSError when the
    download failed.

    Example:
        >>> resolve_data(D2L_FRA_ENG_URL, "runs/cache")   # keras_attn.data.D2L_FRA_ENG_URL
        PosixPath('runs/cache/fra-eng/fra.txt')
    """
    cache_dir = Path(cache_dir or Path.home() / ".cache" / "keras_attn").expanduser()
    if _is_url(url_or_path):
        url = str(url_or_path)
        name = Path(urllib.parse.urlparse(url).path).name or "corpus.txt"
        local = cache_dir / name
        if not local.exists():
            logger.info("Downloading %s to %s", url, local)
            try:
                with urllib.request.urlopen(url, timeout=60) as response:
                    runs.atomic_write_bytes(local, response.read())
            except OSError as e:  # urllib.error.URLError is an OSError
                raise OSError(f"Could not download {url}: {e}") from e
    else:
        local = Path(url_or_path).expanduser()
        if not local.exists():
            raise FileNotFoundError(f"Data file not found: {local} (give a path or a URL)")
    if local.suffix == ".zip":
        return _extract_corpus(local, cache_dir)
    return local


def absolute_location(value):
    """A ``--data`` value as a run stores it: a local path made absolute (``~`` expanded), so
    the run reads its corpus from any folder; a URL, or "" (none), as given.

    Example:
        >>> absolute_location("fra-eng")           # run in /home/me
        '/home/me/fra-eng'
    """
    if not value or _is_url(value):
        return value
    return os.path.abspath(os.path.expanduser(value))


def run_location(value, run_dir, flag="--data"):
    """Where a run's stored ``--data`` value (``flag``) is read from another folder: a URL,
    "" or an absolute path as stored; a relative path (a run trained before paths were
    stored absolute: relative to the folder ``keras-attn train`` ran in) from the current
    folder, else from the folders above ``run_dir`` (whose ``--output`` usually sat in it).

    Raises:
        FileNotFoundError: the corpus is in none of those places; the message says to pass
            ``flag`` with where it is now.
    Example:
        >>> run_location("fra-eng", "/home/me/runs/fra60")   # from /tmp: /home/me/fra-eng
        '/home/me/fra-eng'
    """
    if not value or _is_url(value):
        return value
    path = os.path.expanduser(value)
    if os.path.isabs(path):
        if os.path.exists(path):
            return path
        raise FileNotFoundError(f"the corpus of the run {run_dir!r}, {path}, is not there any "
                                f"more: pass {flag} with where it is now")
    folder, tried = os.path.abspath(run_dir), [os.getcwd()]
    while os.path.dirname(folder) != folder:
        folder = os.path.dirname(folder)
        tried.append(folder)
    for base in tried:
        if os.path.exists(os.path.join(base, path)):
            return os.path.join(base, path)
    raise FileNotFoundError(
        f"the corpus of the run {run_dir!r} is stored as {value!r}, a path relative to the "
        "folder `keras-attn train` ran in (a run trained before paths were stored absolute), "
        f"and it is neither in this folder nor in a folder above the run: run the command in "
        f"that folder, or pass {flag} with the corpus's path")
