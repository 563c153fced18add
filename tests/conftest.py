"""Test-wide settings and the shared end-to-end fixtures.

- TensorFlow starts quiet and every test starts from a fixed seed.
- The trained runs that several test files read (the committed tiny dates run with its
  exports, a tiny SentencePiece run with its exports) are built once for a version of the
  code, also under pytest-xdist: the first worker to need one builds it under a file lock
  in ``.fixture_cache/``, the others (and later sessions: CI's other passes) read it
  (:func:`build_once`).
- The ``kernels`` marker: tests whose results hang on floating-point rounding (layer values,
  decoding tokens, artefacts equal token for token). CI runs them again under other CPUs'
  kernels (``.ci/run``); the whole files listed in ``KERNEL_FILES`` carry it, other files
  mark single tests.
- The ``heavy`` marker: tests that need no trained run of the session but take seconds of
  compute each (a committed export loaded, many decoders traced, subprocesses). They count
  as ``slow``: the README's ``-m "not slow"`` leaves them to ``.ci/run --extended`` (CI runs
  those of ``SMOKE``), whose other-CPU passes, which run ``kernels and not slow``, take them
  back with ``or heavy``.
  Every test that reads the ``tiny_dates`` export (built once, about two minutes on 2
  cores) is heavy, and so is every test of ``HEAVY_FILES``; other files mark single tests.
- The ``smoke`` marker: the slow and heavy tests CI runs (``SMOKE``: one per end-to-end
  path on the committed export, none that trains or exports); ``.ci/run --extended`` runs
  every slow test. A name in ``SMOKE`` that its file no longer holds fails the collection.
"""
import hashlib
import json
import os
import pathlib
import shutil

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402  (after the log level, so TensorFlow starts quiet)
import pytest  # noqa: E402
import unittest.mock  # noqa: E402

TESTS = pathlib.Path(__file__).resolve().parent
REPO = TESTS.parent

# Files by their path under tests/ (TESTS).
# Every test of these files compares floats (tolerances derived in tests/support/layer_checks.py).
KERNEL_FILES = {
    "layers/test_add_norm.py", "layers/test_additive_attention.py", "layers/test_bahdanau.py",
    "layers/test_dot_product_attention.py", "layers/test_dropout.py", "layers/test_ffn.py",
    "layers/test_multi_head_attention.py", "layers/test_nadaraya_watson.py",
    "layers/test_positional.py", "layers/test_transformer.py", "layers/test_transformer_blocks.py",
    "kernels/test_fastpath.py", "kernels/test_tf_attention.py", "ops/test_ops.py",
    "schedules/test_schedules.py", "training/test_losses.py", "decoding/test_decoding.py",
}
# Every test of these files loads an export or traces decoders for seconds (the committed
# model's SavedModel, TFLite files and CTranslate2 model; searches under XLA).
HEAVY_FILES = {
    "export/test_export.py", "export/test_exported.py", "export/test_request.py",
    "export/test_ctranslate2.py", "export/test_documents_artefacts.py", "serve/test_signature.py",
    "decoding/test_scoring.py", "decoding/test_decoding.py", "decoding/test_decoding_options.py",
    "decoding/test_repetition.py",
}
# The slow and heavy tests CI runs (a test id, or a file for all of its tests): a route, a
# command or an artefact of the committed export per end-to-end path, each a minute or less
# on 2 cores, none that trains or exports (but test_serve_fields.py: a CTranslate2 export of
# exported/run, seconds, is the only way to serve that engine). The others (the tiny dates
# and SentencePiece runs exported for the session and every decoding option through their
# artefacts, training for minutes, every architecture through every artefact, killed and
# resumed runs, every page's examples) run in ``.ci/run --extended``.
SMOKE = {
    "tests/export/test_exported.py",
    "tests/integration/test_engines_agree.py::test_savedmodel_engine_and_its_graph",
    "tests/integration/test_exported_readme.py::test_rest_stand_in_maps_json_as_tf_serving",
    "tests/models/test_models.py::test_trained_model_save_load[bahdanau]",
    "tests/cli/test_cli.py::test_translate_file_mode_honours_every_flag[plain]",
    "tests/serve/test_serve_load.py::test_wrk_counts_what_the_server_answered",
    "tests/serve/test_serve_models.py::test_the_command_serves_two_savedmodels_from_one_process",
    "tests/translation/test_translation.py::test_serve_ctranslate2_imports_no_tensorflow[1]",
    "tests/text/test_passthrough.py::test_serve_passes_spans_through_when_asked",
    "tests/integration/test_docs.py::test_the_site_builds_strictly",
    "tests/serve/test_serve_fields.py",
    "tests/serve/test_glossary_serve.py::test_a_request_glossary_is_put_in_and_said",
    "tests/serve/test_serve_versions.py::test_a_version_copied_beside_is_served_live_without_a_failed_request",
    "tests/serve/test_hostile_files.py::test_the_server_answers_it_over_http[docx-member-declares-2GiB]",
    "tests/serve/test_hostile_files.py::test_the_server_answers_it_over_http[docx-external-entity-http]",
    "tests/serve/test_hostile_files.py::test_the_server_answers_it_over_http[odt-billion-laughs]",
    "tests/serve/test_hostile_files.py::test_the_server_answers_it_over_http[txt-line-flood]",
    "tests/serve/test_hostile_files.py::test_the_server_answers_it_over_http[docx-near-every-limit]",
}


def _under_tests(item):
    """The test file's path under tests/, as KERNEL_FILES and HEAVY_FILES name it."""
    try:
        return item.path.resolve().relative_to(TESTS).as_posix()
    except ValueError:  # a file collected from outside tests/
        return None


def pytest_collection_modifyitems(config, items):
    if not any("::" in str(arg) for arg in config.args):  # whole files collected
        ids = {item.nodeid for item in items}
        files = {item.nodeid.split("::")[0] for item in items}
        lost = sorted(n for n in SMOKE if n.split("::")[0] in files and n not in ids | files)
        if lost:
            raise pytest.UsageError(f"tests/conftest.py SMOKE names tests that are gone: {lost}")
    for item in items:
        if item.nodeid in SMOKE or item.nodeid.split("::")[0] in SMOKE:
            item.add_marker(pytest.mark.smoke)
        if _under_tests(item) in KERNEL_FILES:
            item.add_marker(pytest.mark.kernels)
        if item.get_closest_marker("slow") is not None:
            continue  # slow in its own right (a run trained for the session): not heavy
        if _under_tests(item) in HEAVY_FILES or "tiny_dates" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.heavy)
        if item.get_closest_marker("heavy") is not None:
            item.add_marker(pytest.mark.slow)


_TF_SEEDED = []  # TensorFlow's global seed is set once per process (see _seed)


@pytest.fixture(autouse=True)
def _seed():
    """Seed Python, NumPy and Keras (its global SeedGenerator: layer weights and dropout
    masks repeat) before every test; TensorFlow's global seed once per process.
    ``tf.random.set_seed`` clears TensorFlow's kernel cache, so calling it before every test
    made every loaded SavedModel optimise its graphs again at its first call (~2 s each);
    TensorFlow's own random ops are seeded per op from the global seed and a counter."""
    try:
        import tensorflow as tf
    except ImportError:  # a JAX or PyTorch install without TensorFlow (test_backends.py)
        keras.utils.set_random_seed(0)
        return
    if _TF_SEEDED:
        with unittest.mock.patch.object(tf.random, "set_seed", lambda seed: None):
            keras.utils.set_random_seed(0)
    else:
        keras.utils.set_random_seed(0)
        _TF_SEEDED.append(True)


# Where the shared runs are kept between test sessions (CI's passes share them): one folder
# per run and version of the code that builds it. KERAS_ATTN_TEST_FIXTURE_CACHE=0 builds
# them in the session's temporary folder instead.
FIXTURE_CACHE = REPO / ".fixture_cache"


def fixture_key():
    """A digest of everything a shared run is built from: the package's and the fixtures'
    code, the committed tiny runs, and the TensorFlow and Keras versions."""
    import tensorflow as tf

    digest = hashlib.sha256(f"{tf.__version__} {keras.__version__}".encode())
    sources = sorted((REPO / "keras_attn").rglob("*.py")) + sorted((TESTS / "fixtures").rglob("*"))
    for path in sources + [TESTS / "support" / "run_fixtures.py", TESTS / "conftest.py"]:
        if path.is_file():
            digest.update(path.relative_to(REPO).as_posix().encode() + b"\0")
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def build_once(tmp_path_factory, name, build):
    """``build(folder) -> JSON-able result``, run once for this version of the code.

    The folder is ``.fixture_cache/NAME-KEY`` (:func:`fixture_key`): later sessions (CI's
    other passes, a re-run) read it until the code changes, and a new key replaces the
    older folders of ``NAME``. Under pytest-xdist the workers meet there too: the first to
    take the lock builds, the others block on the lock, then read the result. Tests must
    only read what was built (copy it to change it).
    """
    if os.environ.get("KERAS_ATTN_TEST_FIXTURE_CACHE", "1") == "0":
        shared = tmp_path_factory.getbasetemp()
        if os.environ.get("PYTEST_XDIST_WORKER"):
            shared = shared.parent
        root = shared / f"shared-{name}"
    else:
        root = FIXTURE_CACHE / f"{name}-{fixture_key()}"
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as lock:
        import fcntl  # POSIX; the suite runs on Linux and macOS

        fcntl.flock(lock, fcntl.LOCK_EX)
        done = root / "done.json"
        if not done.exists():
            for old in root.parent.glob(f"{name}-*"):
                if old != root:
                    shutil.rmtree(old, ignore_errors=True)
            for entry in root.iterdir():  # what an interrupted build left
                if entry.name != ".lock":
                    shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
            keras.utils.set_random_seed(0)
            done.write_text(json.dumps(build(root)))
        return json.loads(done.read_text())


@pytest.fixture(scope="session")
def tiny_dates(tmp_path_factory):
    """The committed tiny dates run (``tests/fixtures/tiny_dates_run``, copied) and
    ``export_run``'s float32 output (SavedModel, TFLite text and builtin files, report; no
    ``translate`` signature): ``{"run_dir", "export_dir", "inputs"}`` (held-out source
    dates). int8 and the ``translate`` signature are checked on the committed ``exported/``
    files (test_exported, test_request), made by the same ``export_run``."""

    def build(root):
        from tests.support import run_fixtures
        from keras_attn import export

        run_dir, export_dir = str(root / "run"), str(root / "export")
        sources = run_fixtures.copy_tiny_dates_run(run_dir)
        export.export_run(run_dir, export_dir=export_dir, log=lambda *a: None,
                          quantizations=("float32",), request_signature=False)
        return {"run_dir": run_dir, "export_dir": export_dir, "inputs": sources}

    return build_once(tmp_path_factory, "tiny_dates", build)


@pytest.fixture(scope="session")
def tiny_sentencepiece(tmp_path_factory):
    """A small English->French SentencePiece run trained on ``run_fixtures.PAIRS`` and
    exported into ``RUN/export``: ``{"run_dir"}``."""

    def build(root):
        from tests.support import run_fixtures

        return {"run_dir": run_fixtures.train_tiny_sentencepiece_run(root)}

    return build_once(tmp_path_factory, "tiny_sentencepiece", build)
