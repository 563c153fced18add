"""keras_attn's package surface: every public submodule reachable as an attribute."""
import subprocess
import sys

import guards
import keras_attn

CHECK = """
import sys
import keras_attn as ka
assert "tensorflow" not in sys.modules, "import keras_attn imported TensorFlow"
assert "keras" not in sys.modules, "import keras_attn imported Keras"
for name in ka.SUBMODULES:
    module = getattr(ka, name)
    assert module.__name__ == "keras_attn." + name, module.__name__
print("reached", len(ka.SUBMODULES))
"""


def test_every_submodule_is_an_attribute_in_a_fresh_interpreter():
    out = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True,
                         timeout=guards.timeout(10))
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"reached {len(keras_attn.SUBMODULES)}" in out.stdout


def test_the_promised_submodules_are_listed():
    promised = {"ops", "layers", "models", "schedules", "losses", "text", "data", "decoding",
                "export", "viz"}
    assert promised <= set(keras_attn.SUBMODULES)
    assert promised <= set(dir(keras_attn))


def test_unknown_attribute_raises_attribute_error():
    try:
        keras_attn.not_a_module
    except AttributeError as e:
        assert "not_a_module" in str(e)
    else:
        raise AssertionError("keras_attn.not_a_module did not raise AttributeError")


def test_no_private_keras_imports_in_the_package():
    import pathlib

    root = pathlib.Path(keras_attn.__file__).parent
    offenders = [str(p.relative_to(root)) for p in root.rglob("*.py")
                 if "keras.src" in p.read_text(encoding="utf-8")]
    assert offenders == [], f"keras.src used in {offenders}"


def _import_graph():
    """``{module: {modules it imports}}`` over keras_attn's files, function-level imports
    included (every ``import`` statement anywhere in the file)."""
    import ast
    import pathlib

    root = pathlib.Path(keras_attn.__file__).parent
    modules = {}
    for path in root.rglob("*.py"):
        parts = path.relative_to(root.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        modules[name] = path

    def resolve(name):  # the module a dotted name refers to (a module, or its package)
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name

    graph = {}
    for name, path in modules.items():
        edges = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                targets = [f"{node.module}.{alias.name}" for alias in node.names]
            else:
                continue
            edges |= {resolve(t) for t in targets if t.startswith("keras_attn")}
        # A package's __init__ importing its own submodules is not an arrow upward.
        graph[name] = {e for e in edges if e and e != name}
    return graph


def test_no_import_cycle_in_the_package():
    """Arrows run one way only (cli -> training/export -> translator/decoding -> models ->
    layers -> ops): no module reaches itself through imports, function-level ones
    included; a package's ``__init__`` re-exporting its submodules is not counted."""
    graph = _import_graph()
    for package in [m for m in graph if any(k.startswith(m + ".") for k in graph)]:
        graph[package] = {e for e in graph[package] if not e.startswith(package + ".")}
    state, cycles = {}, []

    def visit(node, stack):
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)
    assert "keras_attn.training" not in graph["keras_attn.translator"]
