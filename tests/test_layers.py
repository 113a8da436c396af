"""The package's folders are its layers, and an import goes down them, never up or in a circle.

Every import of every module counts: at module level, inside functions, and type-only ones under
``TYPE_CHECKING``. The layers, bottom-up (README, "How the code is laid out"):

| # | folder | what lives there |
|---|---|---|
| 0 | ``remote/``, ``job.py``, ``integrations/``, ``errors.py`` | what travels to the job's machine (the job API and the framework callbacks beside it); the error tree |
| 1 | ``store/`` | the project on disk |
| 2 | ``transport/``, ``machines/`` | how a machine is reached; what a machine is |
| 3 | ``jobs/`` | the job model and the rules every backend shares |
| 4 | ``backends/`` | one folder per way of launching |
| 5 | ``run/``, ``verify/``, ``deliver/`` | the verbs of the arc |
| 6 | ``views/`` | what the front doors show |
| 7 | ``api.py`` | the one API |
| 8 | ``magics.py``, ``widgets.py``, ``cli/``, ``server_ext.py``, ``args.py`` | the front doors |
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import rgt_jupyter

PKG = Path(rgt_jupyter.__file__).parent
NAME = "rgt_jupyter"

#: The layer of each top-level part of the package.
LAYERS = {
    "remote": 0,
    "job": 0,
    "integrations": 0,
    "errors": 0,
    "store": 1,
    "transport": 2,
    "machines": 2,
    "jobs": 3,
    "backends": 4,
    "run": 5,
    "verify": 5,
    "deliver": 5,
    "views": 6,
    "api": 7,
    "magics": 8,
    "widgets": 8,
    "cli": 8,
    "server_ext": 8,
    "args": 8,
    "__init__": 9,
    "__main__": 9,
}
#: Imports between parts of one layer that are allowed: DELIVER discloses VERIFY's findings; the
#: public ``rgt_jupyter.job`` is the travelling module; every front door reads the one flag
#: table; the magics display the live widget; the framework integrations call the job API.
SIDEWAYS = {
    ("deliver", "verify"),
    ("job", "remote"),
    ("integrations", "job"),
    ("magics", "args"),
    ("cli", "args"),
    ("server_ext", "args"),
    ("magics", "widgets"),
}
#: A function-level import says why it is deferred, on its own line.
MARKER = "# deferred:"


def modules() -> dict[str, Path]:
    """Every module of the package, by dotted name."""
    out = {}
    for path in sorted(PKG.rglob("*.py")):
        parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


MODULES = modules()


def part(module: str) -> str:
    """The top-level part of the package a module belongs to (``rgt_jupyter`` itself: ``__init__``)."""
    rest = module.split(".")[1:]
    return rest[0] if rest else "__init__"


def imports(module: str) -> list[tuple[str, ast.stmt, bool]]:
    """``(imported module, statement, inside a function)`` for every import of the package's own
    modules that ``module`` makes."""
    path = MODULES[module]
    tree = ast.parse(path.read_text())
    base = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    in_function: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            in_function.update(id(n) for n in ast.walk(node) if n is not node)
    found: list[tuple[str, ast.stmt, bool]] = []
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.ImportFrom):
            if node.level:
                root = base[: len(base) - (node.level - 1)]
                source = ".".join(root + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                sub = f"{source}.{alias.name}"
                targets.append(sub if sub in MODULES else source)
        elif isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        else:
            continue
        for target in targets:
            if target == NAME or target.startswith(NAME + "."):
                found.append((target, node, id(node) in in_function))
    return found


GRAPH = {m: {t for t, _, _ in imports(m) if t != m} for m in MODULES}


def test_every_part_of_the_package_has_a_layer() -> None:
    assert {part(m) for m in MODULES} <= set(LAYERS), sorted(
        {part(m) for m in MODULES} - set(LAYERS)
    )


def test_imports_go_down_the_layers() -> None:
    """A module imports its own part or a lower layer, lazily or not, type-only or not."""
    upward = []
    for module, targets in GRAPH.items():
        src = part(module)
        for target in targets:
            dst = part(target)
            if dst == src or (src, dst) in SIDEWAYS:
                continue
            if LAYERS[dst] >= LAYERS[src]:
                upward.append(f"{module} -> {target} ({LAYERS[src]} -> {LAYERS[dst]})")
    assert not upward, "imports that do not go down the layers:\n" + "\n".join(sorted(upward))


def test_no_module_imports_a_backend_but_through_the_registry() -> None:
    """Outside ``backends/``, a backend is reached by name (``rgt_jupyter.backends``), never by
    importing its module: adding a backend touches no generic code."""
    reached = [
        f"{m} -> {t}"
        for m, targets in GRAPH.items()
        if part(m) != "backends"
        for t in targets
        if part(t) == "backends" and t != f"{NAME}.backends"
    ]
    assert not reached, "\n".join(sorted(reached))


def test_the_travelling_files_import_nothing_of_the_package() -> None:
    """Each file of ``remote/`` runs alone on the job's machine: it imports no module of the
    package, not even one beside it."""
    bad = [f"{m} -> {t}" for m, targets in GRAPH.items() if part(m) == "remote" for t in targets]
    assert not bad, "\n".join(bad)


def test_the_integrations_import_only_the_job_api() -> None:
    """``integrations/`` travels beside the job API, where nothing else of the package is:
    its files import ``rgt_jupyter.job`` and nothing else of the package."""
    bad = [
        f"{m} -> {t}"
        for m, targets in GRAPH.items()
        if part(m) == "integrations"
        for t in targets
        if t not in (f"{NAME}.job", f"{NAME}.integrations")
    ]
    assert not bad, "\n".join(bad)


def test_no_import_cycles() -> None:
    """No two modules import each other, directly or through others, counting every import."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    cycles: list[list[str]] = []
    counter = [0]
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in GRAPH[v]:
            if w not in MODULES:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in MODULES:
        if v not in index:
            visit(v)
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_no_module_imports_another_modules_private_names() -> None:
    """What a module keeps to itself starts with ``_``; inside a subpackage, what its files
    share has no underscore (the package boundary marks what is internal)."""
    private = []
    for module in MODULES:
        for target, node, _ in imports(module):
            if isinstance(node, ast.ImportFrom) and target != module:
                for alias in node.names:
                    if alias.name.startswith("_") and not alias.name.startswith("__"):
                        private.append(f"{module}: {alias.name} from {target}")
    assert not private, "\n".join(sorted(set(private)))


def test_deferred_imports_say_why() -> None:
    """An import inside a function (one kept out of module level for import time, or to load a
    heavy library only where it is used) says so: ``# deferred: <why>`` on its line. Others
    belong at the top of the module. The travelling files are exempt: they run alone."""
    unmarked = []
    for module, path in MODULES.items():
        if part(module) == "remote":
            continue
        lines = path.read_text().splitlines()
        tree = ast.parse("\n".join(lines))
        for func in ast.walk(tree):
            if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(func):
                if isinstance(node, ast.Import | ast.ImportFrom):
                    text = "\n".join(lines[node.lineno - 1 : node.end_lineno])
                    if MARKER not in text:
                        unmarked.append(f"{path.relative_to(PKG)}:{node.lineno}: {text.strip()}")
    assert not unmarked, "function-level imports that do not say why:\n" + "\n".join(unmarked)


def test_the_root_holds_the_front_doors_and_the_api() -> None:
    """The root of the package is its face: the front doors, the API and the bottom layer's
    two files; everything else lives in the folder of its layer."""
    root = sorted(p.name for p in PKG.glob("*.py"))
    assert root == [
        "__init__.py",
        "__main__.py",
        "api.py",
        "args.py",
        "errors.py",
        "job.py",
        "magics.py",
        "server_ext.py",
        "widgets.py",
    ]


def test_modules_fit_in_a_head() -> None:
    """No module over 650 lines, but the two that travel as one file by design: the agent (it
    runs as ``python agent.py CMD`` beside the job) and the job API (one module a job imports)."""
    whole = {"remote/agent.py", "remote/job.py"}
    long = {
        rel: n
        for p in PKG.rglob("*.py")
        if (rel := p.relative_to(PKG).as_posix()) not in whole
        and (n := len(p.read_text().splitlines())) > 650
    }
    assert not long, long


def test_no_launcher_name_is_compared_outside_the_registry() -> None:
    """Generic code asks a backend what it can do (``get_backend(name).arrays``, ...), never
    compares a launcher's name with a literal."""
    compared = []
    for module, path in MODULES.items():
        if part(module) == "backends":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Compare):
                continue
            sides = [node.left, *node.comparators]
            named = any(
                (isinstance(s, ast.Attribute) and s.attr == "launcher")
                or (
                    isinstance(s, ast.Attribute)
                    and s.attr == "name"
                    and any(w in ast.unparse(s.value) for w in ("launcher", "backend"))
                )
                or (isinstance(s, ast.Constant) and s.value == "launcher")
                or (isinstance(s, ast.Subscript) and "launcher" in ast.unparse(s))
                or (isinstance(s, ast.Call) and "launcher" in ast.unparse(s))
                for s in sides
            )
            literal = any(
                (isinstance(s, ast.Constant) and isinstance(s.value, str) and s.value != "launcher")
                or (
                    isinstance(s, ast.Tuple | ast.Set | ast.List)
                    and any(
                        isinstance(e, ast.Constant) and isinstance(e.value, str) for e in s.elts
                    )
                )
                for s in sides
            )
            if named and literal:
                compared.append(f"{path.relative_to(PKG)}:{node.lineno}: {ast.unparse(node)}")
    assert not compared, "\n".join(compared)
