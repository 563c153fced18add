"""Servers for the tests of ``keras-attn serve`` (test_serve, test_browser, test_serve_models,
test_train_your_pair): a free loopback port, waiting for a condition, a real uvicorn in a
thread, the command in a process of its own."""
import contextlib
import os
import socket
import subprocess
import sys
import threading
import time

import httpx

from tests.support import guards

from tests.support import ROOT


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(condition, what, seconds=30):
    deadline = time.monotonic() + guards.timeout(seconds)
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.02)


@contextlib.contextmanager
def running(app):
    """A real uvicorn serving ``app`` on a free loopback port (in a thread); its URL."""
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=free_port(),
                                           log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_until(lambda: server.started or not thread.is_alive(), "uvicorn to start")
    assert server.started, "uvicorn did not start"
    try:
        yield f"http://127.0.0.1:{server.config.port}"
    finally:
        server.should_exit = True
        thread.join(guards.timeout(10))


@contextlib.contextmanager
def serve_process(args, log_path, cwd=ROOT, seconds=60, health="/health", env=None):
    """``keras-attn serve ARGS --port P`` in a process of its own, as a user starts it (the
    repository's package first on its path), its output in ``log_path``. Yields
    ``(url, proc)`` once ``GET health`` (``/lt/health`` under ``--url-prefix /lt``) answers
    200; terminates it after (killed if it ignores SIGTERM). A process that exits while
    starting fails with its log. ``env``: variables added to this process's."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = dict(os.environ, **(env or {}), PYTHONPATH=os.pathsep.join(
        [ROOT] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "keras_attn.cli", "serve",
                                 *map(str, args), "--port", str(port)], cwd=cwd, env=env,
                                stdout=log, stderr=subprocess.STDOUT)

    def up():
        assert proc.poll() is None, open(log_path, encoding="utf-8").read()
        try:
            return httpx.get(url + health, timeout=5).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_until(up, "keras-attn serve to answer /health", seconds)
        yield url, proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(guards.timeout(30))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
