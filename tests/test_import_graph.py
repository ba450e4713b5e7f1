"""The repository's import graph has no circle (issue 38).

Every Python file of the repository is a node: the package's modules by their dotted names, the scripts of
`training/`, `benchmarks/`, `studies/`, `scripts/`, `tests/` and `docs/hooks.py` by their paths. An edge is an
`import` or `from ... import` statement anywhere in a file, at module level or inside a function (a circle that a
function-level import defers still ties the two modules together). Relative imports resolve against the file's
package; a bare name resolves as the scripts put their folders on `sys.path`: a module of the file's own folder first,
then one of `SIBLING_FOLDERS` (tests import the benchmarks and training scripts so). `from package import name` is an
edge to the submodule `package.name` where there is one, to the package otherwise. Importing a submodule also runs its
packages' `__init__.py`, but a package importing its own submodules is no circle: those implicit edges are left out.
Modules loaded by path (`importlib.util.spec_from_file_location`) are not followed.
"""

import ast
from pathlib import Path


REPO = Path(__file__).resolve().parent.parent
PACKAGE = "hf_simple_attn"
# Folders outside the package (their files are scripts, named by path), and where a bare import looks after the
# importing file's own folder.
SCRIPT_FOLDERS = ("training", "benchmarks", "studies", "scripts", "tests", "docs")
SIBLING_FOLDERS = ("benchmarks", "training")
# Installed under another name (`pyproject.toml`'s `package-dir`).
RENAMED_PACKAGES = {"model_cards": f"{PACKAGE}.model_cards"}


def module_files(repo: Path = REPO) -> dict[str, Path]:
    """Every Python file of the repository, by its module name (dotted in the package, a path elsewhere)."""
    modules = {}
    for path in sorted((repo / PACKAGE).rglob("*.py")):
        parts = path.relative_to(repo).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    for folder, package in RENAMED_PACKAGES.items():
        for path in sorted((repo / folder).glob("*.py")):
            modules[package if path.stem == "__init__" else f"{package}.{path.stem}"] = path
    for folder in SCRIPT_FOLDERS:
        for path in sorted((repo / folder).glob("*.py")):
            modules[path.relative_to(repo).with_suffix("").as_posix()] = path
    return modules


def is_package(name: str, modules: dict[str, Path]) -> bool:
    return modules[name].name == "__init__.py"


def imported_names(tree: ast.Module, module: str, modules: dict[str, Path]) -> list[tuple[str, list[str]]]:
    """(absolute dotted name, names imported from it) of every import statement in `tree`, relative ones resolved;
    no names for `import name`."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((alias.name, []) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module.split(".") if is_package(module, modules) else module.split(".")[:-1]
                package = package[: len(package) - (node.level - 1)]
                base = ".".join(package + ([base] if base else []))
            found.append((base, [alias.name for alias in node.names]))
    return found


def resolve(name: str, importer: str, modules: dict[str, Path]) -> str | None:
    """The module of the repository that `import name` in `importer` runs, or None (the standard library, a
    third-party package)."""
    if "/" in importer and "." not in name:
        folder = importer.rsplit("/", 1)[0]
        for candidate in (f"{folder}/{name}", *(f"{sibling}/{name}" for sibling in SIBLING_FOLDERS)):
            if candidate in modules:
                return candidate
    parts = name.split(".")
    while parts:  # `import a.b.c` where only a.b is ours (an attribute path) still runs a.b
        candidate = ".".join(parts)
        if candidate in modules and "/" not in candidate:
            return candidate
        parts.pop()
    return None


def import_graph(repo: Path = REPO) -> dict[str, set[str]]:
    """{module: the repository's modules it imports}, at module level and inside functions alike."""
    modules = module_files(repo)
    graph = {}
    for module, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        edges = set()
        for base, names in imported_names(tree, module, modules):
            imported = resolve(base, module, modules)
            # `from package import submodule` runs the submodule; any other name comes from `base` itself.
            submodules = {resolve(f"{base}.{name}", module, modules) for name in names} - {None, imported}
            edges |= submodules
            if not names or len(submodules) < len(names):
                edges.add(imported)
        edges.discard(None)
        edges.discard(module)
        graph[module] = edges
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One circle of `graph` as [a, b, ..., a], or None: a depth-first search that meets a module still on its
    path."""
    on_path, done, path = set(), set(), []

    def visit(node: str) -> list[str] | None:
        on_path.add(node)
        path.append(node)
        for target in sorted(graph.get(node, ())):
            if target in on_path:
                return path[path.index(target) :] + [target]
            if target not in done:
                cycle = visit(target)
                if cycle:
                    return cycle
        on_path.discard(node)
        path.pop()
        done.add(node)
        return None

    for node in sorted(graph):
        if node not in done:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def test_the_cycle_finder_finds_a_circle_and_only_a_circle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set(), "d": {"a", "c"}}) is None
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"x": {"y"}, "y": {"z"}, "z": {"y"}}) == ["y", "z", "y"]


def test_function_level_and_relative_imports_are_edges(tmp_path):
    package = tmp_path / PACKAGE
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("from .sub import low\n")
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "low.py").write_text("def helper():\n    from ..high import value\n    return value\n")
    (package / "high.py").write_text("from .sub.low import helper\nvalue = 1\n")
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "common.py").write_text("import os\nimport hf_simple_attn.high\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text("import common\nfrom hf_simple_attn import sub\n")
    graph = import_graph(tmp_path)
    assert graph == {
        PACKAGE: {f"{PACKAGE}.sub.low"},
        f"{PACKAGE}.high": {f"{PACKAGE}.sub.low"},
        f"{PACKAGE}.sub": set(),
        f"{PACKAGE}.sub.low": {f"{PACKAGE}.high"},
        "benchmarks/common": {f"{PACKAGE}.high"},
        "tests/test_x": {"benchmarks/common", f"{PACKAGE}.sub"},
    }
    assert find_cycle(graph) == [f"{PACKAGE}.high", f"{PACKAGE}.sub.low", f"{PACKAGE}.high"]


def test_the_repository_imports_without_a_circle():
    graph = import_graph()
    assert set(graph) == set(module_files()) and "docs/hooks" in graph and f"{PACKAGE}.model_cards" in graph
    # A function-level import, a sibling script, a benchmark that a test imports: the edges a circle may hide in.
    assert f"{PACKAGE}.modeling.modeling_simple_attn_marian" in graph[f"{PACKAGE}.deploy.shortlist"]
    assert "benchmarks/gpu_common" in graph["benchmarks/bench_gpu"]
    assert "benchmarks/bench_gpu" in graph["tests/test_benchmarks_smoke"]
    cycle = find_cycle(graph)
    assert cycle is None, "import circle: " + " -> ".join(cycle)
