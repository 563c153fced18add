"""Every Python example in README.md runs as written and gives what its comments say (the
forms a comment can take: ``tests/support/comment_checks.py``), and the Quick start keeps the two
commands CI runs.
"""
import ast
import pathlib
import re

import pytest

from tests.support.comment_checks import parse, promises, run_and_check

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)


# ----------------------------------------------------------------------------------------
# Tests


def test_readme_has_examples():
    assert len(BLOCKS) >= 2


def test_readme_comments_show_values():
    """The examples' comments show values (and this file reads at least one of them)."""
    found = [p for i, source in enumerate(BLOCKS)
             for block in [parse(source, f"README.md block {i}")]
             for stmt in block.body for p in promises(stmt, block.comments)]
    assert found, "no comment in README.md's examples shows a value any more"


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_example_gives_the_values_its_comments_show(index, monkeypatch):
    monkeypatch.chdir(README.parent)  # the examples name paths from the repository root
    run_and_check(BLOCKS[index], f"README.md block {index}")


@pytest.mark.parametrize("comment, kind", [
    ("weights (1, 4, 5, 5)", "shape"),
    ("y.shape == (2, 3)", "shape"),
    ("-> (2, 3, 4)", "shape"),
    ("-> ['2021-03-03']", "value"),
    ("n == 3", "value"),
    ("padding keys get 0", "claim"),
    ("the mask propagates", None),
    ("0 = padding", None),
    ("output (2, 3,4) and more", "unknown"),
])
def test_comment_forms(comment, kind):
    """How a clause is read: the forms the module docstring lists."""
    stmt = ast.parse("x = 1").body[0]
    assert [p[0] for p in promises(stmt, {1: comment})] == ([kind] if kind else [])


@pytest.mark.parametrize("source", [
    "import numpy as np\nx = np.zeros((2, 3))   # x (3, 2)\n",
    "y = 1 + 1   # -> 3\n",
    "print([1, 2])   # -> [1, 3]\n",
    "import numpy as np\nw = np.ones((1, 2, 3))\n"
    "t = np.array([[5, 0, 0]])   # w (1, 2, 3); padding keys get 0\n",
    "z = 4   # -> (2, 3,4) shaped\n",
], ids=["shape", "value", "printed", "claim", "unknown form"])
def test_a_comment_the_code_does_not_bear_out_fails(source):
    with pytest.raises(AssertionError):
        run_and_check(source, "a wrong example")


def test_comments_the_code_bears_out_pass():
    source = ("import numpy as np\n"
              "x = np.zeros((2, 3))   # x (2, 3)\n"
              "x.shape   # -> (2, 3)\n"
              "print(sorted({'b', 'a'}))   # -> ['a', 'b']\n"
              "n = len(x)   # n == 2; the rows\n")
    assert run_and_check(source, "a right example") == 4


def test_quick_start_has_exactly_two_commands():
    quick = README.read_text(encoding="utf-8").split("## Quick start", 1)[1].split("\n## ", 1)[0]
    commands = [line for line in quick.splitlines() if line.startswith("$ ")]
    assert len(commands) == 2
    assert "keras-attn train" in commands[0] and "pytest" in commands[1]
