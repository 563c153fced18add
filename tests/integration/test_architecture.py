"""The layout is the architecture: import-linter's contracts (``.importlinter``) hold every
arrow between keras_attn's packages downward, and every part of the package is in them."""
import configparser
import pathlib
import subprocess
import sys

import pytest

from tests.support import guards

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "keras_attn"
CONTRACTS = ROOT / ".importlinter"
# The modules that stay at the top: the API contract's ops, models and schedules, and the
# Keras engine the README imports (keras_attn.translator).
LINT = [sys.executable, "-c", "from importlinter.cli import lint_imports_command as c; c()",
        "--no-cache", "--no-logo"]
LOOSE = {"ops", "models", "schedules", "translator"}


def _layers():
    config = configparser.ConfigParser()
    config.read(CONTRACTS)
    lines = config["importlinter:contract:layers"]["layers"].split("\n")
    return [[name.strip() for name in line.split("|")] for line in lines if line.strip()]


def _lint(config_path):
    return subprocess.run(LINT + [str(config_path)], capture_output=True, text=True,
                          cwd=ROOT, timeout=guards.timeout(120))


def test_the_contracts_hold():
    pytest.importorskip("importlinter", reason="import-linter is in the test extras")
    out = _lint(CONTRACTS)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert "0 broken" in out.stdout


def test_an_upward_import_breaks_them(tmp_path):
    """The same contracts over the package with one arrow turned upward (core importing
    serve) must fail: the check above can fail."""
    pytest.importorskip("importlinter", reason="import-linter is in the test extras")
    copy = tmp_path / "keras_attn"
    subprocess.run(["cp", "-r", str(PACKAGE), str(copy)], check=True)
    runs = copy / "core" / "runs.py"
    runs.write_text(runs.read_text() + "\n\ndef _up():\n    from keras_attn.serve import app\n")
    config = tmp_path / ".importlinter"
    config.write_text(CONTRACTS.read_text())
    out = subprocess.run(LINT + [str(config)], capture_output=True, text=True, cwd=tmp_path,
                         env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"},
                         timeout=guards.timeout(120))
    assert out.returncode != 0, out.stdout[-2000:]
    assert "keras_attn.core.runs -> keras_attn.serve.app" in out.stdout


def test_every_part_of_the_package_is_in_a_layer():
    named = {name for layer in _layers() for name in layer}
    parts = {f"keras_attn.{p.stem}" for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    parts |= {f"keras_attn.{p.parent.name}" for p in PACKAGE.glob("*/__init__.py")}
    assert parts == named, f"not in .importlinter: {parts - named}; gone: {named - parts}"


def test_at_most_four_modules_stay_loose_at_the_top():
    loose = {p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    assert loose == LOOSE


def test_every_package_says_what_it_holds_and_may_import():
    for init in sorted(PACKAGE.glob("*/__init__.py")):
        doc = init.read_text(encoding="utf-8").split('"""')[1]
        assert "May import:" in doc, f"{init.relative_to(ROOT)}: no word on what it may import"


def test_no_module_passes_400_lines():
    # A module past 400 lines holds more than one job (split it by job).
    long = {str(p.relative_to(ROOT)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > 400}
    assert not long, f"modules over 400 lines: {long}"


def test_benchmarks_stay_within_their_bounds():
    # benchmarks/ keeps what is rerun: at most 3,300 lines (the serve soak, the web
    # export's benchmark in a browser, the glossary's and the export's time among them), no
    # module over 400.
    sizes = {str(p.relative_to(ROOT)): len(p.read_text(encoding="utf-8").splitlines())
             for p in (ROOT / "benchmarks").rglob("*.py")}
    assert sum(sizes.values()) <= 3300, f"benchmarks/ has {sum(sizes.values())} lines"
    long = {name: n for name, n in sizes.items() if n > 400}
    assert not long, f"benchmark modules over 400 lines: {long}"


ENGINE_NAMES = {"savedmodel", "ctranslate2"}


def _engine_name_comparisons(source):
    """Line numbers where ``source`` compares something with an engine's ``--engine`` name."""
    import ast

    def names(node):  # a constant, or a tuple, list or set of them
        items = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
        return {c.value for c in items if isinstance(c, ast.Constant)}

    return [node.lineno for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Compare)
            and any(names(c) & ENGINE_NAMES for c in [node.left, *node.comparators])]


def test_only_the_engine_registry_compares_engine_names():
    # What an engine can do is read from its registry entry (capabilities, quiet_imports),
    # never decided by its name.
    assert _engine_name_comparisons('if args.engine != "ctranslate2":\n    pass\n') == [1]
    assert _engine_name_comparisons('ok = name in ("x", "savedmodel")\n') == [1]
    found = {str(p.relative_to(ROOT)): lines for p in PACKAGE.rglob("*.py")
             if p.name != "engines.py"
             and (lines := _engine_name_comparisons(p.read_text(encoding="utf-8")))}
    assert not found, f"engine names compared outside serve/engines.py: {found}"
