"""``keras-attn serve``'s settings fail closed (keras_attn.cli.settings): every flag and its
environment variable are read by one reader, and a value it cannot read stops the command
with exit status 2 and a message naming the flag, the variable and what it accepts. The
settings are found by walking the parser, so a flag added later is tested here at once (and
fails until it has a bad value below)."""
import os
import subprocess
import sys

import pytest

from tests.support import guards
from keras_attn.cli import build_parser, settings

from tests.support import ROOT
SWITCH = object()  # a flag without a value: the flag's bad form is --flag=perhaps
# A value each setting's reader must refuse, from its variable and from its flag.
BAD = {
    "--host": "local host", "--port": "http", "--engine": "onnx", "--replicas": "0",
    "--threads": "-1", "--xla": SWITCH, "--max-batch": "0", "--batch-wait-ms": "-1",
    "--queue-size": "two", "--timeout": "0", "--api-keys": "/nonexistent/keys.txt",
    "--req-limit": "abc", "--max-body-bytes": "1e6", "--char-limit": "5k",
    "--batch-limit": "many", "--alternatives-limit": "1.5", "--api-keys-db-path": "",
    "--get-api-key-link": "see our site", "--shared-storage": "postgres://db/0",
    "--req-limit-storage": "memory", "--translation-cache": "k1, k2",
    "--suggestions": SWITCH, "--suggestions-db-path": " ",
    "--disable-files-translation": SWITCH, "--files-dir": "",
    "--disable-web-ui": SWITCH, "--frontend-timeout": "-5",
    "--frontend-language-source": "en fr", "--frontend-language-target": "",
    "--url-prefix": "/lt?x=1", "--trust-forwarded-for": SWITCH, "--metrics": SWITCH,
    "--metrics-auth-token": "", "--file-system-poll-wait-seconds": "-1",
    "--glossary": "/nonexistent/terms.tsv",
}
NOT_SETTINGS = {"--help": "help", "--verbose": "the console's, every command has it"}


def serve_parser():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    return sub.choices["serve"]


def _settings():
    return {flag: env for flag, env, _ in serve_parser().settings.values()}


SETTINGS = _settings()


def parse(*argv):
    return build_parser().parse_args(["serve", "exported", *argv])


def refused(capsys, *argv):
    """The message of a parse that must stop with exit status 2."""
    with pytest.raises(SystemExit) as stopped:
        parse(*argv)
    assert stopped.value.code == 2
    return capsys.readouterr().err


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch):
    for env in SETTINGS.values():
        monkeypatch.delenv(env, raising=False)


def test_every_option_is_a_setting_with_a_bad_value():
    flags = {a.option_strings[-1] for a in serve_parser()._actions if a.option_strings}
    loose = flags - set(SETTINGS) - set(NOT_SETTINGS)
    assert not loose, f"options without an environment variable and reader: {loose}"
    assert set(SETTINGS) == set(BAD), "each setting needs a bad value in BAD (and only they)"
    assert len(set(SETTINGS.values())) == len(SETTINGS), "two settings share a variable"


@pytest.mark.parametrize("flag", sorted(SETTINGS))
def test_a_bad_variable_stops_the_command_naming_it(flag, monkeypatch, capsys):
    env = SETTINGS[flag]
    value = "perhaps" if BAD[flag] is SWITCH else BAD[flag]
    monkeypatch.setenv(env, value)
    message = refused(capsys)
    assert f"{env}={value!r}" in message and f"the variable of {flag}" in message, message
    assert "expected" in message, message


@pytest.mark.parametrize("flag", sorted(SETTINGS))
def test_a_bad_flag_stops_the_command_naming_it(flag, capsys):
    argv = [f"{flag}=perhaps"] if BAD[flag] is SWITCH else [f"{flag}={BAD[flag]}"]
    message = refused(capsys, *argv)
    assert f"argument {flag}" in message, message


@pytest.mark.parametrize("flag", sorted(f for f in SETTINGS if BAD[f] is SWITCH))
def test_a_switch_variable_reads_only_true_or_false(flag, monkeypatch, capsys):
    dest = flag[2:].replace("-", "_")
    for word in settings.TRUE + ("TRUE", "On", " yes "):
        monkeypatch.setenv(SETTINGS[flag], word)
        assert getattr(parse(), dest) is True, word
    for word in settings.FALSE + ("False", "OFF"):
        monkeypatch.setenv(SETTINGS[flag], word)
        assert getattr(parse(), dest) is False, word
    monkeypatch.setenv(SETTINGS[flag], "true")
    assert getattr(parse(), dest) is True
    for word in ("", "perhaps", "2", "t", "enabled"):
        monkeypatch.setenv(SETTINGS[flag], word)
        assert SETTINGS[flag] in refused(capsys)


def test_a_flag_wins_over_its_variable_and_the_default_stands_alone(monkeypatch):
    assert (parse().port, parse().api_keys, parse().url_prefix) == (5000, None, "")
    monkeypatch.setenv("LT_PORT", "6001")
    assert parse().port == 6001 and parse("--port", "7000").port == 7000
    monkeypatch.setenv("LT_URL_PREFIX", "lt/")
    assert parse().url_prefix == "/lt"


# --- the keys: no spelling turns them off in silence ----------------------------------------
@pytest.fixture
def key_file(tmp_path):
    path = tmp_path / "keys.txt"
    path.write_text("# the team's keys\nk1\nk2 120\n", encoding="utf-8")
    return str(path)


def test_a_key_file_from_the_variable_requires_its_keys(key_file, monkeypatch):
    from keras_attn.serve.limits import read_api_keys

    monkeypatch.setenv("LT_API_KEYS", key_file)
    assert parse().api_keys == key_file
    assert read_api_keys(parse().api_keys) == {"k1": None, "k2": 120}
    assert parse("--api-keys", key_file).api_keys == key_file
    monkeypatch.setenv("LT_API_KEYS", "true")     # LibreTranslate's: the key database
    assert parse().api_keys is True
    monkeypatch.setenv("LT_API_KEYS", "false")
    assert parse().api_keys is None and parse("--api-keys").api_keys is True


@pytest.mark.parametrize("spelling", ["perhaps", "", " ", "True1", "keys.txt", "FOLDER",
                                      "EMPTY", "COMMENTS", "BAD_LINE"])
def test_every_other_spelling_of_the_keys_stops_the_command(spelling, tmp_path,
                                                            monkeypatch, capsys):
    (tmp_path / "empty.txt").write_text("", encoding="utf-8")
    (tmp_path / "comments.txt").write_text("# no key yet\n\n", encoding="utf-8")
    (tmp_path / "bad.txt").write_text("k1 many\n", encoding="utf-8")
    value = {"FOLDER": str(tmp_path), "EMPTY": str(tmp_path / "empty.txt"),
             "COMMENTS": str(tmp_path / "comments.txt"),
             "BAD_LINE": str(tmp_path / "bad.txt")}.get(spelling, spelling)
    monkeypatch.chdir(tmp_path)  # keys.txt: no such file here
    monkeypatch.setenv("LT_API_KEYS", value)
    message = refused(capsys)
    assert "LT_API_KEYS" in message and "--api-keys" in message, message
    assert "key file" in message, message
    if value.strip():  # the flag with the same file
        assert "argument --api-keys" in refused(capsys, "--api-keys", value)


def test_the_command_exits_2_before_loading_anything(tmp_path):
    """The real command, as an operator starts it: exit status 2 and the message, with no
    model path that exists (nothing was loaded)."""
    env = dict(os.environ, LT_API_KEYS=str(tmp_path / "keys.txt"), PYTHONPATH=ROOT)
    done = subprocess.run([sys.executable, "-m", "keras_attn.cli", "serve",
                           str(tmp_path / "no-model")], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=guards.timeout(10))
    assert done.returncode == 2, done.stderr
    assert "LT_API_KEYS=" in done.stderr and "No such file" in done.stderr, done.stderr
