"""noa_core's modules import each other without cycles, lazy (function-level) imports included.

Every ``import`` and ``from ... import`` of a noa_core module, at any depth of any file, is an edge;
``from noa_core import x`` is an edge to the module ``noa_core.x`` when x is a module, else to
``noa_core`` itself.
"""

from __future__ import annotations

import ast
import itertools
import textwrap
from pathlib import Path

import noa_core

Edges = dict[str, dict[str, str]]  # module -> imported module -> where ("file:line")


def module_names(package_dir: Path, package: str) -> dict[str, Path]:
    """Every module of the package, by dotted name (a package by its own name, for __init__.py)."""
    names = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = path.relative_to(package_dir).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names[".".join((package, *parts))] = path
    return names


def _known(name: str, modules: dict[str, Path]) -> str | None:
    """``name`` if it is a module, else its longest dotted prefix that is one (None: not ours)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def import_edges(package_dir: Path, package: str) -> Edges:
    """The modules each module of the package imports, with where each import is written."""
    modules = module_names(package_dir, package)
    edges: Edges = {name: {} for name in modules}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:  # relative: from the package holding this module, up level - 1
                    base = name if is_package else name.rpartition(".")[0]
                    for _ in range(node.level - 1):
                        base = base.rpartition(".")[0]
                    source = ".".join(p for p in (base, node.module) if p)
                else:
                    source = node.module or ""
                targets = [f"{source}.{alias.name}" if f"{source}.{alias.name}" in modules else source
                           for alias in node.names]
            else:
                continue
            for target in targets:
                imported = _known(target, modules)
                if imported is not None and imported != name:
                    edges[name].setdefault(imported, f"{path.relative_to(package_dir.parent)}:{node.lineno}")
    return edges


def cycles(edges: Edges) -> list[list[str]]:
    """One cycle (``[a, b, ..., a]``) through each group of modules that import each other."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def connect(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges[v]:
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(edges):
        if v not in index:
            connect(v)
    return [_cycle_within(group, edges) for group in groups]


def _cycle_within(group: list[str], edges: Edges) -> list[str]:
    """A shortest cycle from the group's first module back to it, staying inside the group."""
    start, members = group[0], set(group)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following = []
        for v in frontier:
            for w in sorted(edges[v]):
                if w == start:
                    return paths[v] + [start]
                if w in members and w not in paths:
                    paths[w] = paths[v] + [w]
                    following.append(w)
        frontier = following
    raise AssertionError(f"no cycle through {group}")  # a strongly connected group always has one


def describe(cycle: list[str], edges: Edges) -> str:
    return " -> ".join(cycle) + "\n" + "\n".join(
        f"    {a} imports {b} at {edges[a][b]}" for a, b in itertools.pairwise(cycle))


def test_noa_core_has_no_import_cycles():
    package_dir = Path(noa_core.__file__).parent
    edges = import_edges(package_dir, "noa_core")
    found = cycles(edges)
    assert not found, "import cycles in noa_core:\n" + "\n".join(describe(c, edges) for c in found)


# noa_core's folders from the bottom up: a module imports only modules of its own layer or of layers below it.
# The foundation: errors, limits and the late-bound providers (noa_core/*.py). The package root is the face
# users import, above everything: only its constants (__version__) may be imported from below.
LAYERS = ("foundation", "array", "kernels", "compute", "io", "particles", "images", "fourier", "geometry", "tomography",
          "pictures", "operations", "run")


def layer_of(module: str) -> int:
    parts = module.split(".")
    if len(parts) == 1:
        return len(LAYERS)
    return 0 if len(parts) == 2 and parts[1] not in LAYERS else LAYERS.index(parts[1])


def test_each_folder_imports_only_its_own_layer_and_those_below():
    edges = import_edges(Path(noa_core.__file__).parent, "noa_core")
    folders = {p.name for p in Path(noa_core.__file__).parent.iterdir() if (p / "__init__.py").exists()}
    assert folders == set(LAYERS[1:]), "a new folder needs its place in LAYERS"
    upward = [f"{a} imports {b} at {where}" for a, targets in edges.items() for b, where in targets.items()
              if layer_of(b) > layer_of(a) and not (b == "noa_core" and _only_constants(a))]
    assert not upward, "imports that go up a layer:\n" + "\n".join(upward)


def _only_constants(module: str) -> bool:
    """Whether ``module`` imports from the package root only its constants (``__version__``, ``SUMMARY``)."""
    path = Path(noa_core.__file__).parent.joinpath(*module.split(".")[1:]).with_suffix(".py")
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module == "noa_core":
            if any(alias.name not in ("__version__", "SUMMARY") for alias in node.names):
                return False
        elif isinstance(node, ast.Import) and any(alias.name == "noa_core" for alias in node.names):
            return False
    return True


def test_the_array_core_sits_below_the_kernels_that_serve_it():
    edges = import_edges(Path(noa_core.__file__).parent, "noa_core")
    assert set(edges["noa_core.array.array"]) <= {"noa_core.array.dtypes", "noa_core.array.layout",
                                                  "noa_core.errors", "noa_core.providers"}
    assert set(edges["noa_core.providers"]) == set()  # kernels reach the array through it, installed from above
    assert set(edges["noa_core.array.layout"]) == {"noa_core.errors"}
    for module in ("noa_core.compute.reduction", "noa_core.compute.indexwise"):
        assert "noa_core.compute.elementwise" not in edges[module]
        assert "noa_core.compute.dispatch" in edges[module]


def write_package(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root / "pkg"


def test_lazy_relative_and_package_imports_are_edges(tmp_path):
    package_dir = write_package(tmp_path, {
        "__init__.py": "from pkg.low import thing\n__version__ = '1'\n",
        "low.py": "def thing():\n    from . import high\n    return high\n",
        "high.py": "import pkg.low\nfrom pkg.sub import leaf\n",
        "sub/__init__.py": "",
        "sub/leaf.py": "from .. import __version__\nfrom ..low import thing\n",
    })
    edges = import_edges(package_dir, "pkg")
    assert edges == {
        "pkg": {"pkg.low": "pkg/__init__.py:1"},
        "pkg.low": {"pkg.high": "pkg/low.py:2"},
        "pkg.high": {"pkg.low": "pkg/high.py:1", "pkg.sub.leaf": "pkg/high.py:2"},
        "pkg.sub": {},
        "pkg.sub.leaf": {"pkg": "pkg/sub/leaf.py:1", "pkg.low": "pkg/sub/leaf.py:2"},
    }
    found = cycles(edges)
    assert found == [["pkg", "pkg.low", "pkg.high", "pkg.sub.leaf", "pkg"]]
    assert "pkg.low imports pkg.high at pkg/low.py:2" in describe(found[0], edges)


def test_an_acyclic_package_has_no_cycles(tmp_path):
    package_dir = write_package(tmp_path, {
        "__init__.py": "from pkg import a\n",
        "a.py": "import numpy\nfrom pkg import b\n",
        "b.py": "def f():\n    import pkg.c\n",
        "c.py": "",
    })
    assert cycles(import_edges(package_dir, "pkg")) == []


def function_level_imports(package_dir: Path, package: str, skip: tuple[str, ...] = ()) -> list[str]:
    """``file:line: statement`` of each import of one of the package's modules written inside a function, in every
    file but those under the folders ``skip``. A lazy face's attribute (``from pkg import sub`` at the top,
    ``sub.mod.f()`` at call time) is no import statement: start-up laziness lives in the faces, not in functions."""
    found: list[str] = []
    for path in sorted(package_dir.rglob("*.py")):
        relative = path.relative_to(package_dir)
        if relative.parts[0] in skip:
            continue
        inside: dict[int, ast.stmt] = {}  # line -> import; one in a nested function is walked from each enclosing one
        for function in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                inside.update((node.lineno, node) for node in ast.walk(function) if _imports_from(node, package))
        where = f"{package_dir.name}/{relative.as_posix()}"
        found += [f"{where}:{line}: {ast.unparse(inside[line])}" for line in sorted(inside)]
    return found


def _imports_from(node: ast.AST, package: str) -> bool:
    """Whether ``node`` is an import of one of the package's modules (a relative one always is)."""
    if isinstance(node, ast.Import):
        return any(alias.name.split(".")[0] == package for alias in node.names)
    return isinstance(node, ast.ImportFrom) and (node.level > 0 or (node.module or "").split(".")[0] == package)


def test_noa_core_imports_its_modules_at_the_top_outside_operations():
    """Imports say what a module depends on: a noa_core module is imported at the top of a module (its face where
    start-up must stay light); only optional or heavy third-party libraries (numba.cuda, cupy, zarr, dask, PIL,
    scipy, ...) are imported inside functions. noa_core/operations/ has its own test."""
    found = function_level_imports(Path(noa_core.__file__).parent, "noa_core", skip=("operations",))
    assert not found, "noa_core modules imported inside functions:\n" + "\n".join(found)


def test_function_level_imports_are_found_at_any_depth(tmp_path):
    package_dir = write_package(tmp_path, {
        "__init__.py": "import lazy_loader\n",
        "a.py": ("from pkg import sub\n\ndef f():\n    import numpy\n    return sub.leaf.g()\n\n"
                 "def g():\n    def inner():\n        from .sub import leaf\n    import pkg.b\n"),
        "b.py": "class C:\n    async def m(self):\n        from pkg import a\n",
        "sub/__init__.py": "",
        "sub/leaf.py": "def g():\n    from .. import a\n",
        "skipped/c.py": "def h():\n    from pkg import a\n",
    })
    assert function_level_imports(package_dir, "pkg", skip=("skipped",)) == [
        "pkg/a.py:9: from .sub import leaf", "pkg/a.py:10: import pkg.b", "pkg/b.py:3: from pkg import a",
        "pkg/sub/leaf.py:2: from .. import a"]


def test_operations_import_noa_core_numpy_and_scipy_only_at_the_top():
    """noa_core/operations/ keeps its declarations light by naming their work (spec.Implementation: a module and a
    function, imported on the first call), not by imports inside functions: a declaration imports light modules at
    its top, its implementation module NumPy and the domain modules at its top."""
    operations_dir = Path(noa_core.__file__).parent / "operations"
    found = [where for package in ("noa_core", "numpy", "scipy")
             for where in function_level_imports(operations_dir, package)]
    assert not found, "imports inside functions in noa_core/operations/:\n" + "\n".join(found)
