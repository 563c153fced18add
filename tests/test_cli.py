"""``keras-attn`` as a real subprocess: every bad input gives one error line, no traceback,
a non-zero exit, and leaves nothing that blocks the corrected command; a corpus with bad
lines trains on the good ones and reports the bad ones by line number.

Each subprocess pays TensorFlow's import, so the error commands are started together (a
few at a time) by one module fixture and the tests check one result each; further bad
inputs go through ``keras_attn.cli.main`` in this process.
"""
import concurrent.futures
import dataclasses
import os
import shutil
import subprocess
import sys

import pytest

from keras_attn import runs
from keras_attn.training import TrainConfig

TINY = ["--num-hiddens", "16", "--ffn-num-hiddens", "32", "--num-heads", "2",
        "--num-layers", "1", "--batch-size", "64", "--no-export"]
TINY_DATES = ["--num-train", "50", "--num-valid", "5", "--num-test", "5", *TINY]


def keras_attn_command():
    exe = shutil.which("keras-attn")
    return [exe] if exe else [sys.executable, "-m", "keras_attn.cli"]


def run_cli(args, timeout=240):
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONUNBUFFERED": "1"}
    return subprocess.run(keras_attn_command() + [str(a) for a in args], capture_output=True,
                          text=True, env=env, timeout=timeout)


def tatoeba_lines():
    """96 good English<TAB>French<TAB>attribution lines, deterministic."""
    nouns = [("cat", "chat"), ("dog", "chien"), ("house", "maison"), ("car", "voiture"),
             ("tree", "arbre"), ("book", "livre"), ("bird", "oiseau"), ("fish", "poisson")]
    verbs = [("I see", "Je vois"), ("You have", "Tu as"), ("We like", "Nous aimons"),
             ("They want", "Ils veulent")]
    sizes = [("", ""), (" big", " grand"), (" small", " petit")]
    return [f"{v} the{a} {n}.\t{fv} le{fa} {fn}.\tCC-BY 2.0".encode()
            for v, fv in verbs for n, fn in nouns for a, fa in sizes]


# Lines 4, 8 and 11 of the corpus are bad: (line number, bytes, words of the reason).
BAD_LINES = [(4, b"only one field", "found 1"),
             (8, b"bad \xff\xfe utf8\tmauvais", "invalid UTF-8"),
             (11, b"a\tb\tc\td", "found 4")]


def write_bad_corpus(path):
    lines = tatoeba_lines()
    for line_no, raw, _ in BAD_LINES:
        lines.insert(line_no - 1, raw)
    path.write_bytes(b"\n".join(lines) + b"\n")


def write_other_run(run_dir):
    """A run directory whose config.json has other options than TINY_DATES."""
    config = TrainConfig(num_hiddens=64, ffn_num_hiddens=128, num_heads=2, num_layers=1)
    runs.write_json(os.path.join(run_dir, "config.json"), dataclasses.asdict(config))


def _setup_run_with_bad_config(t):
    (t / "run").mkdir()
    (t / "run" / "config.json").write_text("{oops")


# name: (args given tmp, expected exit code, words of the error line, setup(tmp) or None).
# Run as real `keras-attn` subprocesses (each pays TensorFlow's import, so only these).
SUBPROCESS_CASES = {
    "missing data file": (
        lambda t: ["train", "--task", "tatoeba", "--data", "/nonexistent/fra.txt",
                   "--output", t / "out"], 1, ["not found", "/nonexistent/fra.txt"], None),
    "data is a folder without train.txt": (
        lambda t: ["train", "--task", "tatoeba", "--data", t / "folder", "--output", t / "out"],
        1, ["not found", "train.txt"], lambda t: (t / "folder").mkdir()),
    "empty corpus": (
        lambda t: ["train", "--task", "tatoeba", "--data", t / "empty.txt", "--output",
                   t / "out"], 1, ["No valid sentence pair", "read 0 lines"],
        lambda t: (t / "empty.txt").write_bytes(b"")),
    "output under a regular file": (
        lambda t: ["train", *TINY_DATES, "--output", t / "file" / "x"], 1,
        ["cannot create the output directory", "file/x", "Not a directory"],
        lambda t: (t / "file").write_text("")),
    "unknown option": (lambda t: ["train", "--bogus"], 2,
                       ["unrecognized arguments: --bogus"], None),
    "translate: not a run directory": (
        lambda t: ["translate", t, "3 March 2021"], 1, ["is not a run directory"], None),
}
# The same checks through keras_attn.cli.main in this process (same code path after the
# console-script entry point, no TensorFlow import per case).
IN_PROCESS_CASES = {
    "corpus of bad lines only": (
        lambda t: ["train", "--task", "tatoeba", "--data", t / "bad.txt", "--output", t / "out"],
        1, ["No valid sentence pair", "line 1: invalid UTF-8", "line 2: expected 2 or 3"],
        lambda t: (t / "bad.txt").write_bytes(b"\xff\xfe\tx\nno tab here\n")),
    "unreachable data URL": (
        lambda t: ["train", "--task", "tatoeba", "--data", "http://127.0.0.1:9/fra.txt",
                   "--output", t / "out"], 1, ["Could not download", "127.0.0.1:9"], None),
    "num_heads not dividing num_hiddens": (
        lambda t: ["train", *TINY_DATES, "--num-heads", "3", "--output", t / "out"], 1,
        ["num_hiddens=16", "num_heads=3"], None),
    "zero epochs": (
        lambda t: ["train", *TINY_DATES, "--epochs", "0", "--output", t / "out"], 1,
        ["epochs=0"], None),
    "dropout out of range": (
        lambda t: ["train", *TINY_DATES, "--dropout", "1.5", "--output", t / "out"], 1,
        ["dropout=1.5"], None),
    "ffn dropout out of range": (
        lambda t: ["train", *TINY_DATES, "--ffn-dropout", "-0.5", "--output", t / "out"], 1,
        ["ffn_dropout=-0.5"], None),
    "other options in an existing run directory": (
        lambda t: ["train", *TINY_DATES, "--output", t / "run"], 1,
        ["holds a run with other options", "num_hiddens"], lambda t: write_other_run(t / "run")),
    "option value of the wrong type": (lambda t: ["train", "--epochs", "many"], 2,
                                       ["--epochs", "invalid int value: 'many'"], None),
    "evaluate: not a run directory": (
        lambda t: ["evaluate", t], 1, ["is not a run directory"], None),
    "translate: corrupt config.json": (
        lambda t: ["translate", t / "run", "3 March 2021"], 1,
        ["config.json", "is not valid JSON"], _setup_run_with_bad_config),
}
# A bad option must not leave a config.json that refuses the corrected command.
NOTHING_WRITTEN = ("missing data file", "num_heads not dividing num_hiddens", "zero epochs",
                   "dropout out of range", "ffn dropout out of range")

CORPUS_ARGS = ["--task", "tatoeba", "--num-valid", "5", "--vocab-size", "60", "--epochs", "1",
               "--max-len", "8", *TINY]


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """Run every SUBPROCESS_CASES command, 3 at a time."""
    jobs = {}
    root = tmp_path_factory.mktemp("cli")
    for i, (name, (args, _, _, setup)) in enumerate(SUBPROCESS_CASES.items()):
        tmp = root / f"case{i}"
        tmp.mkdir()
        if setup:
            setup(tmp)
        jobs[name] = (args(tmp), tmp)
    with concurrent.futures.ThreadPoolExecutor(max_workers=3) as pool:
        futures = {name: pool.submit(run_cli, args) for name, (args, _) in jobs.items()}
        return {name: (f.result(), jobs[name][1]) for name, f in futures.items()}


def error_lines(stderr):
    return [line for line in stderr.splitlines() if "error:" in line]


def check_error(stderr, words):
    lines = error_lines(stderr)
    assert len(lines) == 1, stderr
    assert lines[0].startswith("keras-attn"), lines
    for word in words:
        assert word in lines[0], lines[0]


@pytest.mark.parametrize("name", list(SUBPROCESS_CASES))
def test_bad_input_gives_one_line_error(results, name):
    _, code, words, _ = SUBPROCESS_CASES[name]
    proc, tmp = results[name]
    assert proc.returncode == code, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr
    check_error(proc.stderr, words)
    if name in NOTHING_WRITTEN:
        assert not (tmp / "out" / "config.json").exists()


@pytest.mark.parametrize("name", list(IN_PROCESS_CASES))
def test_bad_input_gives_one_line_error_in_process(name, tmp_path, capsys):
    from keras_attn import cli

    args, code, words, setup = IN_PROCESS_CASES[name]
    if setup:
        setup(tmp_path)
    try:
        rc = cli.main([str(a) for a in args(tmp_path)])
    except SystemExit as e:  # argparse
        rc = e.code
    assert rc == code
    check_error(capsys.readouterr().err, words)
    if name in NOTHING_WRITTEN:
        assert not (tmp_path / "out" / "config.json").exists()


def test_unreadable_file():
    if os.geteuid() == 0:
        pytest.skip("running as root: chmod 000 does not stop root from reading; the "
                    "'data is a folder' case covers a path that cannot be read as a corpus")
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "fra.txt")
        with open(path, "wb") as f:
            f.write(b"Go.\tVa !\n")
        os.chmod(path, 0)
        proc = run_cli(["train", "--task", "tatoeba", "--data", path, "--output",
                        os.path.join(tmp, "out")])
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    lines = error_lines(proc.stderr)
    assert len(lines) == 1 and "Permission denied" in lines[0], proc.stderr


@pytest.mark.slow
def test_bad_lines_are_reported_and_training_goes_on(tmp_path):
    corpus, run_dir = tmp_path / "corpus.txt", tmp_path / "fra"
    write_bad_corpus(corpus)
    proc = run_cli(["train", *CORPUS_ARGS, "--data", corpus, "--output", run_dir])
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    assert "Traceback" not in output
    good = len(tatoeba_lines())
    assert f"read {good + len(BAD_LINES)} lines, kept {good} pairs, 3 bad lines" in output
    for line_no, _, reason in BAD_LINES:
        assert f"line {line_no}: " in output and reason in output
    # valid and test: 5 English sentences each, the rest trains.
    assert f"data: {good - 10} train, 5 valid, 5 test pairs" in proc.stdout
    metrics = runs.read_json(run_dir / "metrics.json")
    assert metrics["num_sentences"] == 5 and "bleu" in metrics
