"""Servers for the tests of ``keras-attn serve`` (test_serve, test_browser): a free
loopback port, waiting for a condition, a real uvicorn in a thread."""
import contextlib
import socket
import threading
import time

import guards


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
