"""The import graph of the project, read with ``ast`` (imports inside functions included), with every module
named in a string counted as an import: a ``"module"`` or ``"module:attribute"`` literal imports that module
(registries, launch command lines), and each catalogue entry's strings (``recpipe/config/catalogue.py``) are
imports of the module that resolves them (the catalogue's ``RESOLVED_BY``).

- no circle between modules anywhere in ``recpipe/``, ``components/`` and ``pipelines/``;
- no upward arrow: a module imports only modules on its own floor or below (:data:`FLOORS`, as
  docs/architecture.md draws them);
- no lazy ``__getattr__`` face on any module;
- the library (``recpipe/`` except the ``cli`` entry) imports neither kfp nor ``pipelines``;
- only ``recpipe/tracking/`` imports mlflow.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

from recpipe.config import catalogue

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("recpipe", "components", "pipelines")
CATALOGUE = "recpipe.config.catalogue"

# The floors, bottom first (docs/architecture.md): a module may import its own floor and the ones below.
FLOORS: tuple[tuple[str, ...], ...] = (
    (
        "recpipe.config",
        "recpipe.runlog",
        "recpipe.integrity",
        "recpipe.redact",
        "recpipe.auc",
        "recpipe.fastexit",
        "recpipe",
    ),
    ("recpipe.data",),
    ("recpipe.features",),
    ("recpipe.batch",),
    ("recpipe.models",),
    ("recpipe.train",),
    ("recpipe.eval",),
    ("recpipe.export",),
    ("recpipe.tracking",),
    ("recpipe.launch",),
    ("recpipe.stages",),
    ("recpipe.pipeline",),
    ("recpipe.tzrec",),
    ("components",),
    ("pipelines",),
    ("recpipe.cli",),
)
# A model's config section (``recpipe/models/<name>/config.py``) stands on the ground floor: the config
# validates ``model:`` with it, so it may import only the ground floor.
SECTION = re.compile(r"^recpipe\.models\.\w+\.config$")


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


def named_in_strings(path: Path) -> set[str]:
    """Every ``"a.b.c"`` or ``"a.b.c:attr"`` string literal in ``path`` (the candidates for module names)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value.partition(":")[0].strip()
            if re.fullmatch(r"[A-Za-z_]\w*(\.\w+)+", text):
                out.add(text)
    return out


def catalogue_edges() -> dict[str, set[str]]:
    """Resolver module → the modules the catalogue's strings name for it."""
    out: dict[str, set[str]] = {}
    for table, resolvers in catalogue.RESOLVED_BY.items():
        for entry in getattr(catalogue, table).values():
            for field in dataclasses.fields(entry):
                value = getattr(entry, field.name)
                if isinstance(value, str):
                    out.setdefault(resolvers[field.name], set()).add(value.partition(":")[0])
    return out


def project_graph() -> dict[str, set[str]]:
    """Module → the project modules it imports, in code or by a string naming them (a package import
    counts as an edge to its ``__init__``)."""
    mods = modules()
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        named = named_in_strings(path) if name != CATALOGUE else set()
        graph[name] = {m for m in imported_names(path, name) | named if m in mods and m != name}
    for resolver, named in catalogue_edges().items():
        graph[resolver] |= {m for m in named if m in mods and m != resolver}
    return graph


def floor(module: str) -> int:
    """The floor of ``module``: the longest prefix in :data:`FLOORS` that it is or sits under (``recpipe``
    alone is the package's ``__init__``, its version: the ground floor)."""
    if SECTION.match(module):
        return 0
    best, level = -1, -1
    for i, prefixes in enumerate(FLOORS):
        for p in prefixes:
            inside = module == p or (module.startswith(p + ".") and p != "recpipe")
            if inside and len(p) > best:
                best, level = len(p), i
    assert level >= 0, f"{module} is on no floor: add it to FLOORS and docs/architecture.md"
    return level


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """``a -> b`` for every import of a higher floor's module."""
    return sorted(
        f"{a} (floor {floor(a)}) -> {b} (floor {floor(b)})"
        for a, edges in graph.items()
        for b in edges
        if floor(b) > floor(a)
    )


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


def test_strings_naming_modules_are_imports(tmp_path: Path) -> None:
    f = tmp_path / "m.py"
    f.write_text('REG = {"a": "recpipe.train.loop:train", "b": "not a module", "c": "x.y"}\n')
    assert named_in_strings(f) == {"recpipe.train.loop", "x.y"}
    graph = project_graph()
    for name, entry in catalogue.MODELS.items():
        assert entry.config.partition(":")[0] in graph["recpipe.config.root"], name
        assert entry.code.partition(":")[0] in graph["recpipe.models.registry"], name
    assert "recpipe.export.builders" in graph["recpipe.export.backends"]
    for name, kind in catalogue.FEATURE_KINDS.items():
        assert kind.code.partition(":")[0] in graph["recpipe.features.kinds.registry"], name


def test_catalogue_strings_name_existing_modules_and_sections() -> None:
    mods = modules()
    for resolver, named in catalogue_edges().items():
        assert resolver in mods, resolver
        missing = sorted(m for m in named if m not in mods)
        assert not missing, f"catalogue names modules that do not exist: {missing}"
    bad = [e.config for e in catalogue.MODELS.values() if not SECTION.match(e.config.partition(":")[0])]
    assert not bad, f"model sections outside recpipe/models/<name>/config.py: {bad}"


def test_no_upward_imports() -> None:
    bad = upward_imports(project_graph())
    assert not bad, "imports of a higher floor:\n" + "\n".join(bad)


def test_floor_rule_sees_an_upward_arrow() -> None:
    assert upward_imports({"recpipe.config.root": {"recpipe.models.registry"}}) == [
        "recpipe.config.root (floor 0) -> recpipe.models.registry (floor 4)"
    ]
    assert floor("recpipe") == 0 and floor("recpipe.cli.main") == len(FLOORS) - 1
    assert floor("recpipe.models.dlrm.config") == 0 and floor("recpipe.models.dlrm.model") == 4


def test_no_lazy_module_getattr() -> None:
    faces = [
        name
        for name, path in modules().items()
        for node in ast.parse(path.read_text(), str(path)).body
        if isinstance(node, ast.FunctionDef) and node.name == "__getattr__"
    ]
    assert not faces, f"modules with a lazy __getattr__ face: {faces}"


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
