"""The package's shape, enforced: layers, no import cycles, no private names across subpackages, small modules.

Every ``import`` in ``bigclust/`` counts, at module level and inside functions (parsed, not executed).
The layer order is ARCHITECTURE.md's; a module imports only from its own layer or below.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "bigclust"

#: lowest first; a family's pipeline-facing modules sit above the pipeline they plug into
LAYERS = ("util", "algorithms", "families", "pipeline", "estimators", "plugins", "top")
FAMILIES = ("normalize", "nmf", "subspace")
PLUGIN_MODULES = ("plugin", "estimator", "_chunked")


def layer_of(mod: str) -> str:
    parts = mod.split(".")
    if len(parts) == 1:
        return "top"
    top = parts[1]
    if top == "_util":
        return "util"
    if top in ("algo", "datasets"):
        return "algorithms"
    if top in FAMILIES:
        return "plugins" if len(parts) > 2 and parts[2] in PLUGIN_MODULES else "families"
    if top in ("pipeline", "report"):
        return "pipeline"
    if top == "estimators":
        return "estimators"
    return "top"   # families.py, cli.py, bench/, the public-path aliases


def _modules() -> dict[str, Path]:
    mods = {}
    for p in PKG.rglob("*.py"):
        rel = p.relative_to(PKG.parent).with_suffix("")
        name = ".".join(rel.parts)
        mods[name[: -len(".__init__")] if name.endswith(".__init__") else name] = p
    return mods


MODULES = _modules()


def _resolve(name: str) -> str | None:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(mod: str) -> list[tuple[str, str, int]]:
    """``(target module, imported name or '', line)`` for every bigclust import of ``mod``."""
    path = MODULES[mod]
    is_pkg = path.name == "__init__.py"
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [(a.name, "", node.lineno) for a in node.names if a.name.split(".")[0] == "bigclust"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = mod.split(".") if is_pkg else mod.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                src = ".".join(base + ([node.module] if node.module else []))
            else:
                src = node.module or ""
            if src.split(".")[0] != "bigclust":
                continue
            for a in node.names:
                full = f"{src}.{a.name}"
                out.append((full, "", node.lineno) if full in MODULES else (src, a.name, node.lineno))
    return out


def _edges() -> dict[str, set[str]]:
    edges = {m: set() for m in MODULES}
    for m in MODULES:
        for target, _, _ in imports_of(m):
            t = _resolve(target)
            if t and t != m:
                edges[m].add(t)
    return edges


def _cycles(edges) -> list[list[str]]:
    """Strongly connected components of more than one module, except a package with its own children."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
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
            heads = [m for m in comp if MODULES[m].name == "__init__.py"]
            package_only = len(heads) == 1 and all(m == heads[0] or m.startswith(heads[0] + ".") for m in comp)
            if len(comp) > 1 and not package_only:
                out.append(sorted(comp))

    for v in MODULES:
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle():
    assert _cycles(_edges()) == []


def test_layers_import_only_downwards():
    rank = {name: i for i, name in enumerate(LAYERS)}
    bad = [f"{m} ({layer_of(m)}) imports {t} ({layer_of(t)})"
           for m, targets in _edges().items() for t in targets
           if rank[layer_of(t)] > rank[layer_of(m)]
           and not (m == "bigclust" or t.startswith(m + "."))]   # a package's __init__ may name its children
    assert bad == []


def test_no_private_name_across_subpackages():
    def sub(m):
        parts = m.split(".")
        return parts[1] if len(parts) > 1 else ""

    bad = []
    for m in MODULES:
        for target, name, line in imports_of(m):
            t = _resolve(target) or target
            private = [p for p in t.split(".")[1:] if p.startswith("_") and p != "__init__"]
            if name.startswith("_") and not name.startswith("__"):
                private.append(name)
            # _util is the shared internal layer every subpackage is meant to use
            private = [p for p in private if p != "_util"]
            if private and sub(t) != sub(m):
                bad.append(f"{MODULES[m].relative_to(PKG.parent)}:{line} imports {target} {name}".strip())
    assert bad == []


def test_root_shows_the_architecture():
    root_modules = [p.name for p in PKG.glob("*.py") if p.name != "__init__.py"]
    assert len(root_modules) <= 12, root_modules


@pytest.mark.parametrize("mod", sorted(MODULES))
def test_module_is_small_and_says_what_it_is_for(mod):
    path = MODULES[mod]
    text = path.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 500, f"{path} has {len(text.splitlines())} lines"
    assert ast.get_docstring(ast.parse(text)), f"{path} has no module docstring"


def test_pipeline_report_estimators_cli_name_no_method():
    """The runner, the report, the estimators' base and the CLI learn methods from the registry."""
    from bigclust.pipeline import methods

    names = set(methods.names())
    assert {"kmeans", "bbs", "nmf", "aksc"} <= names
    places = [*(PKG / "pipeline").rglob("*.py"), *(PKG / "report").rglob("*.py"),
              *(PKG / "estimators").rglob("*.py"), PKG / "cli.py"]
    bad = []
    for p in places:
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names:
                bad.append(f"{p.relative_to(PKG.parent)}:{node.lineno} {node.value!r}")
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                if any(part in FAMILIES for m in mods for part in m.split(".")[1:2]):
                    bad.append(f"{p.relative_to(PKG.parent)}:{node.lineno} imports a family")
    assert bad == []


def test_long_functions_say_why():
    """A function body (docstring aside) over 80 lines carries a ``# long:`` comment saying why it is one piece."""
    bad = []
    for mod, path in MODULES.items():
        lines = path.read_text(encoding="utf-8").splitlines()
        for node in ast.walk(ast.parse("\n".join(lines))):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            body = node.body[1:] if ast.get_docstring(node) else node.body
            if not body:
                continue
            span = lines[body[0].lineno - 1: node.end_lineno]
            if len(span) > 80 and not any(s.strip().startswith("# long:") for s in lines[node.lineno - 1: node.end_lineno]):
                bad.append(f"{path.relative_to(PKG.parent)}:{node.lineno} {node.name} ({len(span)} lines)")
    assert bad == []
