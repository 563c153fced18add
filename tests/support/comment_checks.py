"""Running a page's Python example statement by statement, checking what its comments say.

A block runs one top-level statement at a time (``run_and_check``), and after each statement the comments on
its lines are checked. A comment is split into clauses at ``;``; the forms a clause can take:

- a shape, ``NAME (1, 4, 5, 5)``, ``NAME.shape == (2, 3)`` or ``-> (2, 3, 4)``: the shape
  of ``NAME`` (without a name: of the value the statement assigns or computes);
- a value, ``NAME -> VALUE``, ``NAME == VALUE`` or ``-> VALUE`` with a Python literal: that
  value (for ``print(...)``, what it prints);
- a claim of :data:`CLAIMS` in words (``padding keys get 0``, ``greedy: our tokens
  exactly``), checked by its function;
- anything else is prose, unless it looks like a promise (``->``, ``==`` or a tuple of
  integers): then the test fails, so that a new kind of comment gets a check here.
"""
import ast
import contextlib
import io
import re
import tokenize

import numpy as np

NAME = r"(?P<name>[A-Za-z_]\w*)"
SHAPE = r"(?P<shape>\(\s*\d+\s*(?:,\s*\d+\s*)*,?\s*\))"
SHAPE_CLAUSE = re.compile(rf"^(?:{NAME}(?:\.shape)?\s*(?:==|->|:)?\s*|->\s*){SHAPE}$")
VALUE_CLAUSE = re.compile(rf"^{NAME}?\s*(?:->|==)\s*(?P<value>.+)$")
LOOKS_LIKE_A_PROMISE = re.compile(r"->|==|\(\s*\d+\s*,")


# ----------------------------------------------------------------------------------------
# Claims in words: check(statement, namespace, subject, printed, block)


def _padding_keys_get_zero(stmt, namespace, subject, printed, block):
    """Attention weights ``(B, ..., K)`` are 0 at every key whose token id (in the integer
    array the statement builds) is 0."""
    arrays = [np.asarray(_eval(node, namespace)) for node in ast.walk(stmt)
              if _is_call_to(node, "array")]
    tokens = [a for a in arrays if np.issubdtype(a.dtype, np.integer)]
    assert len(tokens) == 1, "the statement should build one array of token ids"
    padding = tokens[0] == 0  # (B, K)
    assert padding.any(), "the example has no padding to check"
    weights = np.asarray(namespace[subject])
    assert weights.shape[0] == padding.shape[0] and weights.shape[-1] == padding.shape[1]
    at_padding = np.moveaxis(weights, -1, 1)[padding]  # (keys at padding, ...)
    assert np.all(at_padding == 0), f"{subject} at padding keys: {at_padding}"


def _greedy_matches_our_translator(stmt, namespace, subject, printed, block):
    """``print(engine.translate(SENTENCES))``: the engine's greedy output is what
    ``keras_attn.translator.Translator`` gives for the run the block exported, token for
    token."""
    from keras_attn.translator import Translator

    assert isinstance(stmt, ast.Expr) and _is_call_to(stmt.value, "print"), ast.unparse(stmt)
    call = stmt.value.args[0]  # engine.translate(SENTENCES)
    assert _is_call_to(call, "translate") and not call.keywords, ast.unparse(call)
    engine = _eval(call.func.value, namespace)
    sentences = ast.literal_eval(call.args[0])
    exports = [n for n in ast.walk(block) if _is_call_to(n, "export_ctranslate2")]
    assert exports, "the block should export a run with export_ctranslate2"
    ours = Translator.from_run_dir(ast.literal_eval(exports[0].args[0]))
    assert printed.strip() == str(ours.translate(sentences))
    source = ours.encode(sentences)
    np.testing.assert_array_equal(engine.translate_ids(source), ours.translate_ids(source))


CLAIMS = {  # words in a comment -> its check
    "padding keys get 0": _padding_keys_get_zero,
    "greedy: our tokens exactly": _greedy_matches_our_translator,
}


# ----------------------------------------------------------------------------------------
# Reading and running the blocks


def _is_call_to(node, name):
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    return (func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)) == name


def _eval(node, namespace, where="a page"):
    return eval(compile(ast.Expression(node), where, "eval"), namespace)


def parse(source, where):
    """The block's statements and its comments ({line number: text})."""
    block = ast.parse(source, filename=where)
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    block.comments = {t.start[0]: t.string.lstrip("#").strip() for t in tokens
                      if t.type == tokenize.COMMENT}
    return block


def promises(stmt, comments):
    """The checkable clauses of the comments on ``stmt``'s lines, as (kind, clause, match,
    name): a claim is about the name another clause of its comment gives, if any."""
    found = []
    for line in range(stmt.lineno, stmt.end_lineno + 1):
        clauses = [c.strip() for c in comments.get(line, "").split(";") if c.strip()]
        parsed = []
        for clause in clauses:
            if clause in CLAIMS:
                parsed.append(("claim", clause, None))
            elif SHAPE_CLAUSE.match(clause):
                parsed.append(("shape", clause, SHAPE_CLAUSE.match(clause)))
            elif VALUE_CLAUSE.match(clause) and _literal(VALUE_CLAUSE.match(clause)):
                parsed.append(("value", clause, VALUE_CLAUSE.match(clause)))
            elif LOOKS_LIKE_A_PROMISE.search(clause):
                parsed.append(("unknown", clause, None))
        names = [m.group("name") for _, _, m in parsed if m is not None and m.group("name")]
        found += [(kind, clause, match, match.group("name") if match is not None else
                   (names[0] if names else None)) for kind, clause, match in parsed]
    return found


def _literal(match):
    """Whether a value clause's value is a Python literal."""
    try:
        ast.literal_eval(match.group("value"))
    except (ValueError, SyntaxError):
        return False
    return True


def _targets(stmt):
    if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        return [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
    return []


def _run(stmt, namespace, where):
    """Run one statement; returns (what it computes, if an expression, else None; what it
    printed). A ``print(...)`` computes what it printed."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        if isinstance(stmt, ast.Expr):
            value = _eval(stmt.value, namespace, where)
        else:
            exec(compile(ast.Module([stmt], type_ignores=[]), where, "exec"), namespace)
            value = None
    printed = out.getvalue()
    print(printed, end="")  # still shown with pytest -s
    if isinstance(stmt, ast.Expr) and _is_call_to(stmt.value, "print"):
        value = printed.strip()
    return value, printed


def _subject(stmt, name, value, namespace):
    """(name, value) a clause is about: its NAME, else what the statement assigns (one
    target) or computes."""
    if name is None:
        targets = _targets(stmt)
        if not targets:
            return "the statement", value
        assert len(targets) == 1, f"which of {targets} does the comment mean?"
        name = targets[0]
    assert name in namespace, f"the comment names {name!r}, which the block does not define"
    return name, namespace[name]


def _shape(value):
    """An array's or tensor's shape; a shape (a tuple of ints, a TensorShape) itself."""
    if hasattr(value, "shape"):
        return tuple(value.shape)
    if hasattr(value, "as_list"):  # a tf.TensorShape
        value = value.as_list()
    if isinstance(value, (tuple, list)) and all(isinstance(i, int) for i in value):
        return tuple(value)
    return tuple(np.shape(value))


def _check_value(actual, expected, clause):
    if isinstance(actual, str) and not isinstance(expected, str):
        actual = ast.literal_eval(actual)  # what print() showed, read back
    if isinstance(expected, (int, float)) or isinstance(actual, np.ndarray):
        np.testing.assert_allclose(np.asarray(actual, float), np.asarray(expected, float),
                                   rtol=1e-6, err_msg=clause)
    else:
        assert actual == expected, f"{clause}: got {actual!r}"


def _check(promise, stmt, namespace, value, printed, block):
    kind, clause, match, name = promise
    if kind == "unknown":
        raise AssertionError(f"the comment {clause!r} looks like a promised value, but "
                             "tests/integration/test_readme.py cannot check it: add its form there")
    if kind == "claim":
        subject = name or (_targets(stmt)[-1:] or [None])[0]
        CLAIMS[clause](stmt, namespace, subject, printed, block)
        return
    name, actual = _subject(stmt, name, value, namespace)
    if kind == "shape":
        shape = _shape(actual)
        assert shape == ast.literal_eval(match.group("shape")), f"{clause}: {name} has {shape}"
    else:
        _check_value(actual, ast.literal_eval(match.group("value")), clause)


def run_and_check(source, where, namespace=None):
    """Run ``source`` statement by statement in ``namespace`` (a new one if None), checking
    each one's comments; returns the number of promises checked."""
    block = parse(source, where)
    namespace = {} if namespace is None else namespace
    checked = 0
    for stmt in block.body:
        value, printed = _run(stmt, namespace, where)
        for promise in promises(stmt, block.comments):
            _check(promise, stmt, namespace, value, printed, block)
            checked += 1
    return checked
