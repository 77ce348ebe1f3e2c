"""The import graph of the project, read with ``ast`` (imports inside functions included).

- no circle between modules anywhere in ``recpipe/``, ``components/`` and ``pipelines/``;
- the library (``recpipe/`` except the ``cli`` entry) imports neither kfp nor ``pipelines``;
- only ``recpipe/tracking/`` imports mlflow.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("recpipe", "components", "pipelines")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


def imported_names(path: Path, name: str) -> set[str]:
    """Every module ``path`` imports, anywhere in the file (``from a import b`` gives ``a`` and ``a.b``)."""
    is_pkg = path.name == "__init__.py"
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")
                base = base[: len(base) - node.level + (1 if is_pkg else 0)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            out.add(mod)
            out.update(f"{mod}.{alias.name}" for alias in node.names)
    return out


def project_graph() -> dict[str, set[str]]:
    """Module → the project modules it imports (a package import counts as an edge to its ``__init__``)."""
    mods = modules()
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        edges = {m for m in imported_names(path, name) if m in mods and m != name}
        graph[name] = edges
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def importers_of(prefixes: tuple[str, ...]) -> dict[str, list[str]]:
    """Project module → the imports it makes of any module under ``prefixes``."""
    out = {}
    for name, path in modules().items():
        hits = sorted(
            m for m in imported_names(path, name) if any(m == p or m.startswith(p + ".") for p in prefixes)
        )
        if hits:
            out[name] = hits
    return out


def test_find_cycles_sees_a_circle_through_a_function_import(tmp_path: Path) -> None:
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    f = tmp_path / "m.py"
    f.write_text("def g():\n    from recpipe.train import loop\n")
    assert "recpipe.train.loop" in imported_names(f, "m")


def test_no_import_circles() -> None:
    cycles = find_cycles(project_graph())
    assert not cycles, "import circles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_library_imports_neither_kfp_nor_pipelines() -> None:
    bad = {
        m: hits
        for m, hits in importers_of(("kfp", "pipelines")).items()
        if m.startswith("recpipe") and not m.startswith("recpipe.cli")
    }
    assert not bad, f"library modules importing kfp/pipelines: {bad}"


def test_only_tracking_imports_mlflow() -> None:
    bad = {m: hits for m, hits in importers_of(("mlflow",)).items() if not m.startswith("recpipe.tracking")}
    assert not bad, f"modules importing mlflow outside recpipe.tracking: {bad}"


def test_cli_reaches_pipelines_without_editing_sys_path() -> None:
    for path in (ROOT / "recpipe").rglob("*.py"):
        assert "sys.path" not in path.read_text(), f"{path} edits sys.path"


def test_test_module_basenames_are_unique() -> None:
    """pytest imports test modules by basename (rootdir-relative without packages): two ``test_x.py`` in
    different folders stop the whole collection."""
    seen: dict[str, Path] = {}
    clashes = []
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        if path.name in seen:
            clashes.append(f"{seen[path.name].relative_to(ROOT)} ~ {path.relative_to(ROOT)}")
        seen.setdefault(path.name, path)
    assert not clashes, f"test modules with the same basename: {clashes}"
