"""benchmarks/serve_load.py: the figures it reports are the ones it measured.

The summary's ratios are taken per repeat (side by side) and then summarised; ``wrk``'s count
of answered requests agrees with the server's own count. The second test needs Debian's
``wrk`` (CI's slow pass installs it; ``KERAS_ATTN_REQUIRE_WRK=1`` fails instead of skipping).
"""
import os
import shutil
import subprocess
import sys
import types
import urllib.request

import pytest

from tests.support import run_fixtures
from benchmarks import serve_load


def _row(server, rps1, p50_1, rps16, rss):
    return {"server": server, "rss_mb_max": rss, "points": [
        {"clients": 1, "requests_per_s": rps1, "p50_ms": p50_1, "p99_ms": 2 * p50_1,
         "failed": 0},
        {"clients": 16, "requests_per_s": rps16, "p50_ms": 10.0, "p99_ms": 20.0, "failed": 0}]}


def test_summary_takes_ratios_per_repeat_then_their_spread():
    results = {"servers": ["libretranslate", "ctranslate2"], "clients": [1, 16], "repeats": [
        {"servers": [_row("libretranslate", 100.0, 5.0, 200.0, 200.0),
                     _row("ctranslate2", 150.0, 4.0, 500.0, 100.0)],
         "offline": [{"engine": "ctranslate2", "threads": 0, "batch32_sentences_per_s": 600.0,
                      "batch1_median_ms": 2.0}]},
        {"servers": [_row("libretranslate", 50.0, 10.0, 100.0, 220.0),
                     _row("ctranslate2", 100.0, 6.0, 300.0, 110.0)],
         "offline": [{"engine": "ctranslate2", "threads": 0, "batch32_sentences_per_s": 500.0,
                      "batch1_median_ms": 3.0}]}]}
    s = serve_load.summary(results)
    # Per repeat 1.5 and 2.0 (not the ratio of the medians, 125 / 75 = 1.67).
    assert s["ratios"]["ctranslate2"]["requests_per_s_1"] == {
        "median": 1.75, "min": 1.5, "max": 2.0}
    assert s["ratios"]["ctranslate2"]["p50_ms_1"] == {"median": 0.7, "min": 0.6, "max": 0.8}
    assert s["ratios"]["ctranslate2"]["requests_per_s_16"]["min"] == 2.5
    assert s["ratios"]["ctranslate2"]["rss"]["median"] == 0.5
    assert s["servers"]["libretranslate"]["1"]["requests_per_s"] == {
        "median": 75.0, "min": 50.0, "max": 100.0}
    assert s["offline"]["ctranslate2 threads 0"]["batch32_sentences_per_s"]["median"] == 550.0
    table = serve_load.markdown({"machine": {"cpu": "x", "cores": 2,
                                             "load_average_at_start": [0, 0, 0]},
                                 "path": "run", "sentences": 3, "generator": "wrk",
                                 "warmup_s": 1, "duration_s": 2, **results, "summary": s})
    assert "| ctranslate2 | 1 | 125.0 (100.0–150.0) |" in table
    # p50 ratios 0.6 and 0.8: one client waits less than LibreTranslate's in both repeats.
    assert ("- ctranslate2: one client's p50 at most LibreTranslate's: holds in every repeat."
            in table)
    results["repeats"][1]["servers"][1]["points"][0]["p50_ms"] = 12.0  # 1.2 in repeat 2
    table = serve_load.markdown({**results, "machine": {"cpu": "x", "cores": 2,
                                                        "load_average_at_start": [0, 0, 0]},
                                 "path": "run", "sentences": 3, "generator": "wrk",
                                 "warmup_s": 1, "duration_s": 2,
                                 "summary": serve_load.summary(results)})
    assert "holds in some repeats, not all." in table


def test_unknown_server_is_refused():
    with pytest.raises(ValueError, match="unknown server 'tgi'"):
        serve_load.parse_spec("tgi:threads=1")
    assert serve_load.parse_spec("ctranslate2:threads=1,batch_wait_ms=5") == (
        "ctranslate2", {"threads": "1", "batch_wait_ms": "5"})


def test_servers_start_as_installed_alone():
    """keras-attn servers start through ``SERVER_INSTALL``: the CLI gets its arguments and
    jax (a test extra, which TensorFlow loads when present) cannot be imported."""
    done = subprocess.run([sys.executable, "-c", serve_load.SERVER_INSTALL, "serve", "--help"],
                          capture_output=True, text=True, cwd=serve_load.ROOT)
    assert done.returncode == 0 and "--engine" in done.stdout, done.stderr[-2000:]
    hide = serve_load.SERVER_INSTALL.split("runpy.run_module")[0]
    probe = subprocess.run([sys.executable, "-c", hide + "import jax"], capture_output=True,
                           text=True)
    assert probe.returncode == 1 and "import of jax halted" in probe.stderr


def translations_answered(url):
    """The server's own count of ``POST /translate`` answers (``GET /metrics``)."""
    from prometheus_client.parser import text_string_to_metric_families

    text = urllib.request.urlopen(url + "/metrics", timeout=30).read().decode()
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
               if s.name == "keras_attn_http_requests_total"
               and s.labels["route"] == "/translate" and s.labels["method"] == "POST")


def wrk_and_a_ctranslate2_model(tmp_path):
    """The tiny dates run's CTranslate2 export, once ``wrk`` and CTranslate2 are there (a
    skip otherwise; a failure without wrk when ``KERAS_ATTN_REQUIRE_WRK=1``)."""
    if shutil.which("wrk") is None:
        if os.environ.get("KERAS_ATTN_REQUIRE_WRK") == "1":
            pytest.fail("wrk is not installed (apt-get install wrk) and KERAS_ATTN_REQUIRE_WRK=1")
        pytest.skip("wrk is not installed (Debian: apt-get install wrk)")
    pytest.importorskip("ctranslate2")
    from keras_attn.export import ctranslate2 as ct2_export
    from keras_attn.translator import Translator

    path = str(tmp_path / "ct2")
    ct2_export.CTranslate2Exporter().export(Translator.from_run_dir(run_fixtures.TINY_DATES_RUN),
                                            path, samples=["3 March 2021"])
    return path


@pytest.mark.slow
def test_wrk_counts_what_the_server_answered(tmp_path):
    path = wrk_and_a_ctranslate2_model(tmp_path)
    args = types.SimpleNamespace(anchor="", anchor_python="", with_test_extras=False)
    dates = ["3 March 2021", "July 4, 1999", "12/25/2000", "1 Jan 1970"]
    with serve_load.Server("ctranslate2:threads=1", {"ctranslate2": path}, args) as server:
        bodies = tmp_path / "bodies.jsonl"
        bodies.write_text("".join(server.body(d) + "\n" for d in dates), encoding="utf-8")
        before = translations_answered(server.url)
        m = serve_load.wrk_load(server.url, str(bodies), clients=4, duration=2)
        after = translations_answered(server.url)
    assert m["failed"] == 0 and m["requests"] > 0
    # wrk stops with up to one request a connection in flight, which the server answers.
    assert m["requests"] <= after - before <= m["requests"] + 4
    assert 0 < m["p50_ms"] <= m["p90_ms"] <= m["p99_ms"]
    assert m["requests_per_s"] == pytest.approx(m["requests"] / m["seconds"], rel=0.01)


# --- benchmarks/serve_soak.py ---------------------------------------------------------------
def test_the_soak_compares_the_loads_first_and_last_windows():
    from benchmarks import serve_soak

    samples = [(t, 100.0 + (t >= 50) * 4.0) for t in range(0, 71)]  # +4 % after 50 s
    m = serve_soak.memory_figures(samples, start=10, end=70, window=10)
    assert (m["first_window_mean_mb"], m["last_window_mean_mb"]) == (100.0, 104.0)
    assert m["change"] == 0.04 and m["within_goal"]
    assert m["samples_first"] == 11 and m["samples_last"] == 11 and m["max_mb"] == 104.0
    grown = serve_soak.memory_figures([(t, 100.0 + t) for t in range(0, 71)], 10, 70, 10)
    assert grown["change"] > 0.05 and not grown["within_goal"]
    assert grown["slope_mb_per_min_after_first_window"] == 60.0
    log = ("replicas ready: processes [11, 12]\nreplica process 11 stopped while decoding a "
           "batch of 3 texts; starting another in its place\nreplica process 12 stopped "
           "holding no batch; starting another in its place\n")
    assert serve_soak.KILLED.findall(log) == [("11", "3"), ("12", "")]
    assert serve_soak.READY.search(log).group(1) == "11, 12"


@pytest.mark.slow  # two servers in processes of their own, a CTranslate2 export (~1 min)
def test_the_soak_reports_memory_and_a_replaced_replica(tmp_path):
    """A short soak on the CTranslate2 engine: every request answered, the memory figures
    from samples of the load, a killed replica's failures no more than the texts it held,
    a new worker in its place, and none failing after."""
    import json

    from benchmarks import serve_soak

    path = wrk_and_a_ctranslate2_model(tmp_path)
    code = serve_soak.main([run_fixtures.TINY_DATES_RUN, "--ctranslate2", path, "--engines",
                            "ctranslate2", "--duration", "6", "--every", "0.5", "--warmup",
                            "1", "--threads", "1", "--kill-duration", "9", "--after-duration",
                            "2", "--replace-timeout", "120", "--out-dir", str(tmp_path),
                            "--name", "soak"])
    assert code == 0
    r = json.loads((tmp_path / "soak.json").read_text())["engines"]["ctranslate2"]
    soak, kill = r["soak"], r["kill"]
    assert soak["load"]["requests"] > 0 and soak["load"]["failed"] == 0
    assert soak["memory"]["samples_first"] >= 2 and soak["memory"]["samples_last"] >= 2
    assert soak["memory"]["first_window_mean_mb"] > 10
    assert kill["replaced"] and kill["new_pid"] != kill["killed_pid"]
    assert kill["load"]["failed"] <= kill["lost_texts"] and kill["failures_explained"]
    assert kill["after_failed"] == 0
    assert "| ctranslate2 |" in (tmp_path / "soak.md").read_text()
