"""``keras-attn`` as a real subprocess: every bad input gives one error line, no traceback,
a non-zero exit, and leaves nothing that blocks the corrected command; a corpus with bad
lines trains on the good ones and reports the bad ones by line number.

Each subprocess pays TensorFlow's import, so the error commands are started together (a
few at a time) by one module fixture and the tests check one result each; further bad
inputs go through ``keras_attn.cli.main`` in this process.
"""
import concurrent.futures
import dataclasses
import json
import os
import pty
import re
import shutil
import subprocess
import sys

import pytest

from tests.support import FIXTURES, ROOT, guards
from keras_attn.core import runs
from keras_attn.core.config import TrainConfig

TINY = ["--num-hiddens", "16", "--ffn-num-hiddens", "32", "--num-heads", "2",
        "--num-layers", "1", "--batch-size", "64", "--no-export"]
TINY_DATES = ["--num-train", "50", "--num-valid", "5", "--num-test", "5", *TINY]


def keras_attn_command():
    exe = shutil.which("keras-attn")
    return [exe] if exe else [sys.executable, "-m", "keras_attn.cli"]


def run_cli(args):
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONUNBUFFERED": "1"}
    return subprocess.run(keras_attn_command() + [str(a) for a in args], capture_output=True,
                          text=True, env=env, timeout=guards.timeout(15))


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
# Run as real `keras-attn` subprocesses (each pays TensorFlow's import, so only these: a
# data error, an argparse error and a run-directory error, one of each kind of exit).
SUBPROCESS_CASES = {
    "missing data file": (
        lambda t: ["train", "--task", "tatoeba", "--data", "/nonexistent/fra.txt",
                   "--output", t / "out"], 1, ["not found", "/nonexistent/fra.txt"], None),
    "unknown option": (lambda t: ["train", "--bogus"], 2,
                       ["unrecognized arguments: --bogus"], None),
    "translate: not a run directory": (
        lambda t: ["translate", t, "3 March 2021"], 1, ["is not a run directory"], None),
}
# The same checks through keras_attn.cli.main in this process (same code path after the
# console-script entry point, no TensorFlow import per case).
IN_PROCESS_CASES = {
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
    "evaluate: negative length penalty": (
        lambda t: ["evaluate", t, "--beam-size", "4", "--length-penalty", "-1"], 1,
        ["--length-penalty must be >= 0", "-1.0"], None),
    "translate: corrupt config.json": (
        lambda t: ["translate", t / "run", "3 March 2021"], 1,
        ["config.json", "is not valid JSON"], _setup_run_with_bad_config),
    "subword tokenizer for the dates task": (
        lambda t: ["train", "--tokenizer", "wordpiece", "--output", t / "out"], 2,
        ["--tokenizer applies to --task tatoeba only", "--task dates --tokenizer wordpiece"],
        None),
    "char tokenizer for the tatoeba task": (
        lambda t: ["train", "--task", "tatoeba", "--tokenizer", "char", "--output", t / "out"],
        2, ["--tokenizer", "invalid choice: 'char'", "sentencepiece", "wordpiece"], None),
}
# A bad option must not leave a config.json that refuses the corrected command.
NOTHING_WRITTEN = ("missing data file", "num_heads not dividing num_hiddens", "zero epochs",
                   "dropout out of range", "ffn dropout out of range",
                   "subword tokenizer for the dates task", "char tokenizer for the tatoeba task")

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


SUBCOMMANDS = ["train", "translate", "evaluate", "export", "score", "serve", "calibrate"]
HELP_CHECK = """
import contextlib, io, json, sys
from keras_attn import cli
out = io.StringIO()
with contextlib.redirect_stdout(out):
    try:
        cli.main(sys.argv[1:])
    except SystemExit as e:
        code = e.code
print(json.dumps({"code": code, "help": out.getvalue(),
                  "tensorflow": "tensorflow" in sys.modules, "keras": "keras" in sys.modules}))
"""


def option_helps(help_text):
    """``{"--name": its help text}`` for every entry of the ``options:`` section."""
    section = help_text.split("\noptions:\n", 1)[1]
    entries = re.split(r"\n(?=  -)", section.strip("\n"))
    return {entry.split()[0].rstrip(","): " ".join(entry.split()) for entry in entries}


@pytest.fixture(scope="module")
def helps():
    """``keras-attn [SUB] --help`` run in fresh interpreters: {SUB or "": result dict}."""
    def run(sub):
        argv = [sub, "--help"] if sub else ["--help"]
        proc = subprocess.run([sys.executable, "-c", HELP_CHECK, *argv], capture_output=True,
                              text=True, timeout=guards.timeout(5))
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)

    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip(["", *SUBCOMMANDS], pool.map(run, ["", *SUBCOMMANDS])))


@pytest.mark.parametrize("sub", ["", *SUBCOMMANDS])
def test_help_imports_neither_tensorflow_nor_keras(helps, sub):
    result = helps[sub]
    assert result["code"] == 0
    assert result["help"].startswith(f"usage: keras-attn {sub}".rstrip())
    assert not result["tensorflow"], "--help imported TensorFlow"
    assert not result["keras"], "--help imported Keras"


@pytest.mark.parametrize("sub", ["", *SUBCOMMANDS])
def test_every_option_help_shows_its_default(helps, sub):
    options = option_helps(helps[sub]["help"])
    assert "--verbose" in options
    for name, text in options.items():
        if name != "-h":
            assert "default" in text, text


def test_train_help_gives_the_default_of_each_task(helps):
    options = option_helps(helps["train"]["help"])
    assert "(default: 128 for dates, 256 for tatoeba)" in options["--num-hiddens"]
    assert "(default: 48 for dates, 64 for tatoeba)" in options["--max-len"]
    # docs/budget.md: no dropout trained the better English-French model within an hour
    assert "(default: 0.1 for dates, 0.0 for tatoeba)" in options["--dropout"]
    assert "(default: 4)" in options["--num-heads"]  # the same for both tasks
    assert "{sentencepiece,wordpiece}" in options["--tokenizer"]
    assert "default: sentencepiece" in options["--tokenizer"]


@pytest.mark.parametrize("sub", ["", *SUBCOMMANDS])
def test_help_has_no_doubled_default_and_no_empty_choice(helps, sub):
    """Each option's help says its default once, never an empty one, and lists no empty
    choice (argparse's ``{a,b}``)."""
    for name, text in option_helps(helps[sub]["help"]).items():
        assert text.count("(default:") <= 1, text
        assert not re.search(r"\(default: *\)", text), text
        for choices in re.findall(r"\{([^{}]*)\}", text):
            assert all(choices.split(",")), text


def test_serve_runs_one_replica_by_default_and_says_what_a_replica_costs(helps):
    """One replica was the fastest on 2 cores (research/serve_load_*.md); each
    SavedModel replica holds about 1.2 GB, a CTranslate2 one 0.1 GB, which the help says."""
    from keras_attn import cli

    assert cli.build_parser().parse_args(["serve", "exported"]).replicas == 1
    text = " ".join(option_helps(helps["serve"]["help"])["--replicas"].split())
    assert "1.2 GB of memory per SavedModel replica" in text
    assert "0.1 GB per CTranslate2 replica" in text and "(default: 1," in text


def test_version(capsys):
    import keras_attn
    from keras_attn import cli

    with pytest.raises(SystemExit) as e:
        cli.main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out == f"keras-attn {keras_attn.__version__}\n"


@pytest.mark.parametrize("command", ["evaluate", "calibrate"])
def test_data_says_where_a_runs_corpus_is_now(command, tmp_path):
    """``--data`` and ``--target-data`` replace the stored corpus of a text run; a dates run
    has none, and the flag is refused rather than ignored."""
    from keras_attn.cli import build_parser
    from keras_attn.cli.console import corpus_config

    for task in ("tatoeba", "dates"):
        run = tmp_path / task
        run.mkdir()
        runs.write_json(str(run / "config.json"), dataclasses.asdict(TrainConfig(
            task=task, data="/old/fra-eng" if task == "tatoeba" else "")))
    args = build_parser().parse_args([command, str(tmp_path / "tatoeba"), "--data", "here"])
    assert corpus_config(args).data == "here" and corpus_config(args).task == "tatoeba"
    args = build_parser().parse_args([command, str(tmp_path / "tatoeba")])
    assert corpus_config(args).data == "/old/fra-eng"
    args = build_parser().parse_args([command, str(tmp_path / "dates"), "--data", "x.txt"])
    with pytest.raises(ValueError, match="a dates run makes its own"):
        corpus_config(args)


@pytest.mark.parametrize("command", ["translate", "evaluate", "score"])
def test_one_name_per_decoding_option(command):
    """``--length-penalty`` (CTranslate2's name) is the option in every command that takes
    it; ``--alpha``, the earlier name of translate's, sets the same option, so giving both
    cannot disagree: the last given wins, as for any flag given twice."""
    from keras_attn import cli

    parser = cli.build_parser()
    args = parser.parse_args([command, "RUN", "--length-penalty", "1.5"])
    assert args.length_penalty == 1.5 and not hasattr(args, "alpha")
    if command == "translate":
        args = parser.parse_args([command, "RUN", "--length-penalty", "1.5", "--alpha", "0.2"])
        assert args.length_penalty == 0.2
        assert parser.parse_args([command, "RUN"]).length_penalty is None  # the artefact's


def test_a_deprecated_flag_name_says_so(capsys):
    from keras_attn import cli

    assert cli.build_parser().parse_args(["translate", "RUN", "--alpha", "1"]).length_penalty == 1
    assert "--alpha is deprecated; it is --length-penalty" in capsys.readouterr().err


@pytest.mark.parametrize("argv, stored", [
    ([], ("", "")),
    (["--task", "tatoeba"], ("auto", "")),
    (["--mixed-precision", "float32", "--distribute", "none"], ("", "")),
    (["--task", "tatoeba", "--mixed-precision", "float32"], ("", "")),
    (["--mixed-precision", "auto"], ("auto", "")),
    (["--mixed-precision", "mixed_bfloat16", "--distribute", "mirrored"],
     ("mixed_bfloat16", "mirrored")),
])
def test_train_choices_name_their_default(argv, stored):
    """The defaults of --mixed-precision and --distribute have a name on the command line
    (float32, none) and are stored as config.json holds them (""); the tatoeba recipe lets
    the machine choose its precision (auto)."""
    from keras_attn import cli
    from keras_attn.cli.train import config_from_args

    args = cli.build_parser().parse_args(["train", *argv])
    assert (config_from_args(args).mixed_precision, args.distribute) == stored


def test_train_rejects_an_unknown_choice(capsys):
    from keras_attn import cli

    with pytest.raises(SystemExit) as e:
        cli.build_parser().parse_args(["train", "--mixed-precision", "float64"])
    assert e.value.code == 2
    assert "invalid choice: 'float64'" in capsys.readouterr().err


# translate's flags: per flag, argv with it and a baseline argv without it, whose outputs
# for the committed dates model on SENTENCE differ; both as arguments and as a --file.
SENTENCE = "3 March 2021"
BEAM = ["--beam-size", "2", "--json"]
SAMPLING = ["--sampling-topk", "5", "--sampling-temperature", "3", "--seed", "7",
            "--sampling-topp", "0.9"]
CONTROLS = ["--repetition-penalty", "3", "--no-repeat-ngram-size", "1",
            "--max-length-factor", "0.5"]
TRANSLATE_FLAGS = {
    "plain": ([], None),
    "--confidence": (["--confidence"], []),
    "--json": (["--json"], []),
    "--num-hypotheses": (["--beam-size", "3", "--num-hypotheses", "2"], ["--beam-size", "3"]),
    "--length-penalty": ([*BEAM, "--length-penalty", "1.5"], BEAM),
    "--alpha": ([*BEAM, "--alpha", "1.5"], BEAM),
    "--max-length": (["--max-length", "5"], []),
    "--target-prefix": (["--target-prefix", "1999"], []),
    "--sampling-topk": ([*SAMPLING, "--json"], ["--json"]),
    "--return-alignments": (["--return-alignments"], []),
    "--repetition-penalty": ([*CONTROLS, "--json"], ["--json"]),
    "--passthrough": (["--passthrough", "on"], []),
    "--glossary": (["--glossary", os.path.join(FIXTURES, "glossary_dates.tsv")], []),
}
# The ones --file ignored (heavy: the committed model decodes a file); the rest: slow.
FAST_FLAGS = ("--confidence", "--num-hypotheses")


@pytest.fixture(scope="module")
def committed_translator():
    from keras_attn.translator import Translator

    if not os.path.isfile(os.path.join(RUN_DIR, "model.keras")):
        pytest.skip("exported/run (the committed default model) is missing")
    return Translator.from_run_dir(RUN_DIR)


def translate_output(argv, translator, monkeypatch, capsys):
    """stdout of ``keras-attn translate RUN_DIR ARGV`` in this process, on ``translator``."""
    from keras_attn import cli
    from keras_attn.translator import Translator

    monkeypatch.setattr(Translator, "from_run_dir", classmethod(lambda cls, d: translator))
    assert cli.main(["translate", RUN_DIR, *argv]) == 0
    return capsys.readouterr().out


def test_every_translate_flag_is_checked_in_file_mode():
    """A flag added to ``translate`` must be added to TRANSLATE_FLAGS (checked below in
    --file mode against the arguments' output)."""
    from keras_attn import cli

    _, commands = cli._parsers()
    shown = {s for a in commands["translate"]._actions for s in a.option_strings}
    checked = {f for argv, _ in TRANSLATE_FLAGS.values() for f in argv if f.startswith("--")}
    assert shown - checked == {"-h", "--help", "--file", "--verbose"}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.heavy if n in FAST_FLAGS
                                               else pytest.mark.slow) for n in TRANSLATE_FLAGS])
def test_translate_file_mode_honours_every_flag(name, committed_translator, tmp_path,
                                                 monkeypatch, capsys):
    """``translate --file`` gives what the same text given as an argument gives, with every
    flag; and each flag changes the output (it is not ignored in either mode)."""
    argv, baseline = TRANSLATE_FLAGS[name]
    path = tmp_path / "doc.txt"
    path.write_text(SENTENCE + "\n", encoding="utf-8")
    direct = translate_output([SENTENCE, *argv], committed_translator, monkeypatch, capsys)
    from_file = translate_output(["--file", str(path), *argv], committed_translator,
                                 monkeypatch, capsys)
    if "--json" in argv:
        (as_text,), (as_file,) = ([json.loads(line) for line in out.splitlines()]
                                  for out in (direct, from_file))
        assert as_file["source"] == SENTENCE + "\n" and as_text["source"] == SENTENCE
        for hyp in as_file["hypotheses"]:  # the file's own line end is kept
            assert hyp["translation"].endswith("\n")
            hyp["translation"] = hyp["translation"][:-1]
        assert as_file["hypotheses"] == as_text["hypotheses"]
    else:  # a text of the arguments ends its line; the file brings its own line end
        assert from_file == direct.replace(SENTENCE + "\n", f"{path}\n", 1)
    if baseline is None:
        assert direct == "2021-03-03\n"
    else:
        without = translate_output([SENTENCE, *baseline], committed_translator, monkeypatch,
                                   capsys)
        assert direct != without, f"{name} did not change the output"


@pytest.mark.parametrize("argv, tokenizer", [
    (["train"], "char"),
    (["train", "--task", "tatoeba"], "sentencepiece"),
    (["train", "--task", "tatoeba", "--tokenizer", "wordpiece"], "wordpiece"),
])
def test_tokenizer_option(argv, tokenizer, tmp_path, monkeypatch, capsys):
    """``keras-attn train`` hands training the tokenizer of its task (or the one asked)."""
    from keras_attn import cli
    from keras_attn.training import recipes as training

    configs = []
    monkeypatch.setattr(training, "train",
                        lambda config, run_dir, **kwargs: configs.append(config) or {"ok": 1})
    assert cli.main([*argv, "--no-export", "--output", str(tmp_path)]) == 0
    assert [c.tokenizer for c in configs] == [tokenizer]


def test_evaluate_hands_beam_size_and_length_penalty_to_the_translator(monkeypatch, capsys):
    """``keras-attn evaluate --beam-size --length-penalty`` decodes with both (the settings
    compared in docs/budget.md) and reports them."""
    from keras_attn import cli
    from keras_attn.translator import Translator

    run_dir = os.path.join(ROOT, "exported", "run")
    if not os.path.isfile(os.path.join(run_dir, "model.keras")):
        pytest.skip("exported/run (the committed default model) is missing")
    calls = []
    translate = Translator.translate

    def spy(self, sentences, beam_size=1, length_penalty=0.6, **kwargs):
        calls.append((beam_size, length_penalty))
        return translate(self, sentences, beam_size=beam_size, length_penalty=length_penalty,
                         **kwargs)

    monkeypatch.setattr(Translator, "translate", spy)
    assert cli.main(["evaluate", run_dir, "--beam-size", "2", "--length-penalty", "1.5",
                     "--limit", "4"]) == 0
    assert calls == [(2, 1.5)]
    summary = json.loads(capsys.readouterr().out)  # one JSON object
    assert (summary["beam_size"], summary["length_penalty"]) == (2, 1.5)
    assert summary["num_sentences"] == 4
    assert summary["exact_match"] == 1.0  # the committed model gets 4 dates right with beams


def test_progress_bar_draws_only_on_a_terminal():
    import io

    from keras_attn import cli

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    assert cli.progress_bar("x", stream=io.StringIO()) is None
    stream = Terminal()
    report = cli.progress_bar("translating", stream=stream, width=10)
    report(128, 300)
    report(300, 300)
    assert stream.getvalue() == ("\rtranslating [====......] 128/300"
                                 "\rtranslating [==========] 300/300\n")
    stream = Terminal()
    cli.progress_bar("translating", stream=stream)(2, 2)  # one batch: nothing to watch
    assert stream.getvalue() == ""


# A C++ log line of TensorFlow or absl's notice before them.
CPP_LOG_LINE = re.compile(r"^([IWEF]\d{4} \d\d:\d\d:\d+\.\d+ +\d+ \S+:\d+\]|WARNING: All log "
                          r"messages before absl::InitializeLog)", re.M)
RUN_DIR = os.path.join(ROOT,
                       "exported", "run")
DATES = ["3 March 2021", "le 4 juillet 1999", "Wed, 3 Mar 2021"] * 100  # 3 batches of 128


def run_cli_default_logging(args, **kwargs):
    """``keras-attn ARGS`` with TF_CPP_MIN_LOG_LEVEL unset, as a user would run it."""
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    return subprocess.run(keras_attn_command() + args, env=env, timeout=guards.timeout(15), **kwargs)


@pytest.mark.slow  # a `keras-attn translate` process
def test_translate_hides_tensorflow_logs_and_draws_no_bar_into_a_pipe():
    proc = run_cli_default_logging(["translate", RUN_DIR], input="\n".join(DATES) + "\n",
                                   capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["2021-03-03", "1999-07-04", "2021-03-03"] * 100
    assert not CPP_LOG_LINE.search(proc.stderr), proc.stderr
    assert "\r" not in proc.stderr and "translating" not in proc.stderr, proc.stderr


@pytest.mark.slow  # a `keras-attn translate` process (the pipe case runs in-suite)
def test_verbose_shows_tensorflow_logs():
    proc = run_cli_default_logging(["translate", "--verbose", RUN_DIR, "3 March 2021"],
                                   capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "2021-03-03\n"
    assert CPP_LOG_LINE.search(proc.stderr), proc.stderr


@pytest.mark.slow  # a `keras-attn translate` process (the pipe case runs in-suite)
def test_translate_draws_a_bar_on_a_terminal():
    leader, follower = pty.openpty()
    try:
        proc = run_cli_default_logging(["translate", RUN_DIR], input="\n".join(DATES).encode(),
                                       stdout=subprocess.PIPE, stderr=follower)
    finally:
        os.close(follower)
    terminal = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # Linux: EIO once the terminal is closed and drained
            break
        if not chunk:
            break
        terminal += chunk
    os.close(leader)
    assert proc.returncode == 0, terminal.decode()
    assert len(proc.stdout.splitlines()) == len(DATES)
    terminal = terminal.decode()
    assert "translating [" in terminal and f"{len(DATES)}/{len(DATES)}" in terminal, terminal
    assert not CPP_LOG_LINE.search(terminal), terminal
