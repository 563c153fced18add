"""docs/deploy.md holds: the systemd unit it ships passes ``systemd-analyze verify``, its
environment file is read by ``keras-attn serve``'s parser (every path absolute), and the
nginx configuration it ships, started unprivileged on loopback ports with TLS, serves
``keras-attn serve --url-prefix /lt`` at the sub-path, client addresses taken from the
proxy's header only with ``--trust-forwarded-for``.

nginx and systemd-analyze are Debian's (CI's deploy pass installs them); without them these
tests skip, or fail with ``KERAS_ATTN_REQUIRE_NGINX=1`` / ``KERAS_ATTN_REQUIRE_SYSTEMD=1``.
"""
import os
import pathlib
import re
import shutil
import subprocess

import httpx
import pytest

from tests.support import doc_examples
from tests.support import guards
from tests.support.servers import free_port, serve_process, wait_until

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "deploy.md"
SHIPPED = ROOT / "docs" / "deploy"
UNIT, ENV, NGINX_CONF = (SHIPPED / "keras-attn.service", SHIPPED / "serve.env",
                         SHIPPED / "nginx.conf")
EXECUTABLE = "/opt/keras-attn/venv/bin/keras-attn"
EXPORTED = str(ROOT / "exported")
BODY = {"q": "3 March 2021", "source": "dates", "target": "iso"}


def binary(name, variable, fallback=None):
    """The path of ``name``, or a skip (a failure when ``variable`` is 1)."""
    found = shutil.which(name) or (fallback if fallback and os.path.exists(fallback) else None)
    if found is None:
        if os.environ.get(variable) == "1":
            pytest.fail(f"{name} is not installed and {variable}=1 (Debian: apt-get install "
                        f"{'systemd' if name == 'systemd-analyze' else name})")
        pytest.skip(f"{name} is not installed (Debian: apt-get install "
                    f"{'systemd' if name == 'systemd-analyze' else name})")
    return found


# --- the page shows the files it ships ------------------------------------------------------
def test_the_page_shows_the_shipped_files_as_they_are():
    shown = {block.text for block in doc_examples.blocks(str(PAGE))}
    for shipped in (UNIT, ENV, NGINX_CONF):
        assert shipped.read_text(encoding="utf-8") in shown, f"{shipped.name} differs"


def test_the_environment_file_is_read_by_the_servers_rule(monkeypatch):
    """Every variable of serve.env is one of the command's, read without error, and every
    path it gives is absolute."""
    from tests.cli.test_serve_settings import SETTINGS, parse

    for env in SETTINGS.values():
        monkeypatch.delenv(env, raising=False)
    pairs = [line.split("=", 1) for line in ENV.read_text(encoding="utf-8").splitlines()
             if line.strip() and not line.startswith("#")]
    assert {name for name, _ in pairs} <= set(SETTINGS.values())
    for name, value in pairs:
        monkeypatch.setenv(name, value)
        if name.endswith(("_PATH", "_DIR")):
            assert os.path.isabs(value), f"{name} must be absolute: {value}"
    args = parse()
    assert (args.url_prefix, args.trust_forwarded_for, args.api_keys) == ("/lt", True, True)
    assert args.api_keys_db_path.startswith("/var/lib/keras-attn/")
    assert args.files_dir.startswith("/var/lib/keras-attn/")


# --- systemd ------------------------------------------------------------------------------------
def _verify(analyze, unit_text, tmp_path):
    """``systemd-analyze verify`` of the unit, its ExecStart's program a stand-in (verify
    requires it to exist); its exit status and what it printed."""
    stand_in = tmp_path / "keras-attn"
    stand_in.write_text("#!/bin/sh\n")
    stand_in.chmod(0o755)
    unit = tmp_path / "keras-attn.service"
    unit.write_text(unit_text.replace(EXECUTABLE, str(stand_in)), encoding="utf-8")
    done = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True,
                          timeout=guards.timeout(10))
    return done.returncode, (done.stdout + done.stderr).strip()


@pytest.mark.deploy
def test_the_systemd_unit_verifies(tmp_path):
    analyze = binary("systemd-analyze", "KERAS_ATTN_REQUIRE_SYSTEMD")
    text = UNIT.read_text(encoding="utf-8")
    assert f"ExecStart={EXECUTABLE} serve " in text
    for line in ("Restart=on-failure", "RestartPreventExitStatus=2", "KillSignal=SIGTERM",
                 "EnvironmentFile=/etc/keras-attn/serve.env", "StateDirectory=keras-attn"):
        assert line in text.splitlines(), line
    assert _verify(analyze, text, tmp_path) == (0, "")
    # The check can fail: a misspelt key and a bad value are reported.
    broken = text.replace("Restart=on-failure", "Restart=sometimes").replace(
        "KillSignal=", "KillSignall=")
    code, said = _verify(analyze, broken, tmp_path)
    assert "Unknown key" in said and "restart specifier" in said, said


# --- nginx in front, at a sub-path, TLS at the proxy ---------------------------------------------
def _certificate(folder):
    openssl = binary("openssl", "KERAS_ATTN_REQUIRE_NGINX")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True, timeout=guards.timeout(20))
    return cert, key


def nginx_config(folder, listen_port, upstream_port):
    """The shipped server block, its ports and certificate the test's, inside the smallest
    nginx configuration that runs unprivileged: one process, every file in ``folder``."""
    cert, key = _certificate(folder)
    server = NGINX_CONF.read_text(encoding="utf-8")
    server = server.replace("listen 443 ssl;", f"listen 127.0.0.1:{listen_port} ssl;")
    server = re.sub(r"ssl_certificate (\S+);", f"ssl_certificate {cert};", server)
    server = re.sub(r"ssl_certificate_key (\S+);", f"ssl_certificate_key {key};", server)
    assert "127.0.0.1:5000" in server
    server = server.replace("127.0.0.1:5000", f"127.0.0.1:{upstream_port}")
    temp = "\n".join(f"    {kind}_temp_path {folder / kind};"
                     for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    return (f"daemon off;\nmaster_process off;\npid {folder / 'nginx.pid'};\n"
            f"error_log {folder / 'error.log'} warn;\nevents {{}}\nhttp {{\n"
            f"    access_log off;\n{temp}\n{server}\n}}\n")


def client(address):
    """An HTTPS client whose connections come from ``address`` (127.0.0.x: a client of its
    own to the proxy), trusting the test's certificate."""
    return httpx.Client(verify=False, timeout=guards.timeout(30),
                        transport=httpx.HTTPTransport(local_address=address, verify=False))


@pytest.mark.slow  # keras-attn serve in a process of its own, nginx beside it (~30 s)
@pytest.mark.deploy
@pytest.mark.parametrize("trusted", [False, True], ids=["untrusted", "trusted"])
def test_behind_nginx_at_a_sub_path(trusted, tmp_path):
    """Clients 127.0.0.2-4 through nginx (TLS) to ``keras-attn serve --url-prefix /lt
    --req-limit 2``. Trusted (``--trust-forwarded-for``): each client has its own limit, a
    header a client forges changes nothing (nginx replaces it), and the download link is
    https at the proxy's address. Untrusted: every client is the proxy's address (one limit
    between them) and the link is http."""
    nginx = binary("nginx", "KERAS_ATTN_REQUIRE_NGINX", "/usr/sbin/nginx")
    flags = [EXPORTED, "--url-prefix", "/lt", "--req-limit", "2", "--files-dir",
             tmp_path / "files"] + (["--trust-forwarded-for"] if trusted else [])
    with serve_process(flags, tmp_path / "serve.log", health="/lt/health") as (upstream, _):
        port = free_port()
        (tmp_path / "nginx").mkdir()
        conf = tmp_path / "nginx" / "nginx.conf"
        conf.write_text(nginx_config(tmp_path / "nginx", port, upstream.rsplit(":", 1)[1]))
        proxy = subprocess.Popen([nginx, "-p", str(tmp_path / "nginx"), "-c", str(conf)],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        url = f"https://127.0.0.1:{port}/lt"
        try:
            with client("127.0.0.2") as a, client("127.0.0.3") as b, \
                    client("127.0.0.4") as c:
                def up():
                    assert proxy.poll() is None, (tmp_path / "nginx" / "error.log").read_text()
                    try:
                        return a.get(url + "/health").status_code == 200
                    except httpx.HTTPError:
                        return False

                wait_until(up, "nginx to answer /lt/health")
                assert a.get(url + "/health").json() == {"status": "ok"}
                assert a.get(url + "/v1/models/translator").json()["model_version_status"][
                    0]["state"] == "AVAILABLE"
                assert a.get(url + "/metrics").status_code == 403          # the proxy's rule
                assert httpx.get(upstream + "/lt/metrics").status_code == 200  # the scraper's
                sent = c.post(url + "/translate_file", data={"source": "dates",
                                                             "target": "iso"},
                              files={"file": ("d.txt", b"3 March 2021\n")})
                assert sent.status_code == 200, sent.text
                link = sent.json()["translatedFileUrl"]
                answers = [a.post(url + "/translate", json=BODY).status_code for _ in range(2)]
                forged = a.post(url + "/translate", json=BODY,
                                headers={"X-Forwarded-For": "10.9.9.9"}).status_code
                other = b.post(url + "/translate", json=BODY)
                if trusted:
                    assert link.startswith(f"https://127.0.0.1:{port}/lt/download_file/")
                    assert c.get(link).content == b"2021-03-03\n"
                    assert answers == [200, 200] and forged == 429  # a's own limit
                    assert other.status_code == 200                 # b's own limit
                else:
                    assert link.startswith(f"http://127.0.0.1:{port}/lt/download_file/")
                    assert answers == [200, 429] and forged == 429  # one limit: the proxy's
                    assert other.status_code == 429
                    assert other.json()["error"] == "Slowdown: 2 per 1 minute"
        finally:
            proxy.terminate()
            proxy.wait(guards.timeout(10))
