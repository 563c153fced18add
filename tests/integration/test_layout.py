"""The tests mirror the package (CONTRIBUTING.md, "Where a test goes"): every test file sits
in ``tests/<part>/``, named after a part of keras_attn (a subpackage, or a top-level module
without its ``.py``), or in ``tests/integration/`` for suites that cross the parts; at least
80 % of them in package-named folders; none at ``tests/`` itself; every folder of tests a
package (the same basename may live in two folders); CONTRIBUTING.md's table names every
folder; and the tests' docstrings and comments say what is tested, not which tracker issue
asked for it."""
import ast
import io
import pathlib
import re
import tokenize

from tests.support import ROOT

TESTS = pathlib.Path(ROOT) / "tests"
PACKAGE = pathlib.Path(ROOT) / "keras_attn"
CROSS_CUTTING = "integration"
NO_TESTS = {"support", "fixtures"}  # shared helpers; committed files the tests read
SHARE = 0.8  # the least share of test files in package-named folders
# A tracker's number: the word issue and a number, or a hash and two digits or more (Tatoeba's
# sentence numbers sit in strings, which are not read).
ISSUE = re.compile(r"\b[Ii]ssues? \d+|(?<![\w&#/])#\d{2,}\b")


def package_parts(package):
    """The names a test folder may take: keras_attn's subpackages and top-level modules."""
    return ({p.parent.name for p in package.glob("*/__init__.py")}
            | {p.stem for p in package.glob("*.py") if p.stem != "__init__"})


def layout_problems(tests, package):
    """What breaks the layout of the test tree ``tests`` for the package ``package``: one
    sentence per problem, none when it holds."""
    parts = package_parts(package)
    problems = []
    files = sorted(tests.rglob("test_*.py"))
    in_parts = 0
    for path in files:
        where = path.relative_to(tests)
        folder = where.parts[0] if len(where.parts) == 2 else None
        if folder in parts:
            in_parts += 1
        elif folder != CROSS_CUTTING:
            problems.append(f"tests/{where.as_posix()}: not in tests/<part of keras_attn>/ "
                            f"or tests/{CROSS_CUTTING}/")
    for folder in sorted(p for p in tests.iterdir() if p.is_dir()
                         and p.name != "__pycache__" and not p.name.startswith(".")):
        if folder.name not in parts | {CROSS_CUTTING} | NO_TESTS:
            problems.append(f"tests/{folder.name}/: keras_attn has no part of that name "
                            f"(parts: {', '.join(sorted(parts))})")
        if any(folder.glob("test_*.py")) and not (folder / "__init__.py").is_file():
            problems.append(f"tests/{folder.name}/: no __init__.py")
    if files and in_parts < SHARE * len(files):
        problems.append(f"{in_parts} of {len(files)} test files in package-named folders: "
                        f"under {SHARE:.0%}")
    return problems


def issue_numbers(source):
    """Line numbers of the docstrings and comments of ``source`` that name a tracker issue."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc and ISSUE.search(doc):
                found.append(node.body[0].lineno)
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT and ISSUE.search(token.string[1:]):
            found.append(token.start[0])
    return sorted(found)


def test_the_tests_mirror_the_package():
    problems = layout_problems(TESTS, PACKAGE)
    assert not problems, "CONTRIBUTING.md, \"Where a test goes\":\n" + "\n".join(problems)


def test_the_layout_check_finds_what_is_misplaced(tmp_path):
    package, tests = tmp_path / "pkg", tmp_path / "tests"
    (package / "serve").mkdir(parents=True)
    (package / "serve" / "__init__.py").touch()
    (package / "ops.py").touch()
    for name in ("serve/test_a.py", "serve/test_b.py", "ops/test_c.py", "ops/test_d.py",
                 "integration/test_e.py", "support/checks.py"):
        (tests / name).parent.mkdir(parents=True, exist_ok=True)
        (tests / name).touch()
        (tests / name).with_name("__init__.py").touch()
    assert layout_problems(tests, package) == []  # 4 of 5 in package-named folders

    (tests / "test_root.py").touch()
    (tests / "widgets").mkdir()
    (tests / "widgets" / "test_w.py").touch()
    (tests / "serve" / "deep").mkdir()
    (tests / "serve" / "deep" / "test_x.py").touch()
    (tests / "support" / "test_y.py").touch()
    (tests / "ops" / "__init__.py").unlink()
    problems = "\n".join(layout_problems(tests, package))
    assert "tests/test_root.py: not in" in problems
    assert "tests/widgets/test_w.py: not in" in problems
    assert "tests/widgets/: keras_attn has no part of that name (parts: ops, serve)" in problems
    assert "tests/serve/deep/test_x.py: not in" in problems
    assert "tests/support/test_y.py: not in" in problems
    assert "tests/ops/: no __init__.py" in problems
    assert "4 of 9 test files in package-named folders: under 80%" in problems


def test_contributing_names_every_folder_of_tests():
    text = (pathlib.Path(ROOT) / "CONTRIBUTING.md").read_text(encoding="utf-8")
    folders = {p.name for p in TESTS.iterdir() if (p / "__init__.py").is_file()}
    assert folders >= {CROSS_CUTTING, "support"}
    missing = sorted(f for f in folders if f"`tests/{f}/`" not in text)
    assert not missing, f"CONTRIBUTING.md's table does not name: {missing}"


def test_no_test_names_a_tracker_issue():
    found = {str(p.relative_to(TESTS)): lines for p in sorted(TESTS.rglob("*.py"))
             if (lines := issue_numbers(p.read_text(encoding="utf-8")))}
    assert not found, f"say what is tested, not which issue asked for it: {found}"


def test_the_issue_check_reads_docstrings_and_comments_only():
    source = ('"""Decoding (issue 29)."""\n'
              'def test_a():\n    """See #63."""\n'
              '    x = "tatoeba.org #2877272, issue 5 in a string"  # fixed in issue 12\n'
              '    return x  # 2 cores, ##a pieces, C# 10\n')
    assert issue_numbers(source) == [1, 3, 4]
