"""The layer rule of DESIGN.md, checked on every import statement in the package.

5 -> 4 and 3; 4 -> 3; 3 -> 2; 2 -> 1; 1 -> 0; every layer -> lapis.trace and the shared
specifications (lapis.isa, lapis.abi), which import no layer themselves; lapis.cli may
import anything. Imports inside a layer are free.
"""

import ast
import types
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"
SHARED = {"lapis.trace", "lapis.isa", "lapis.abi"}
ALLOWED = {5: {5, 4, 3}, 4: {4, 3}, 3: {3, 2}, 2: {2, 1}, 1: {1, 0}, 0: {0}}
PACKAGES = {"lapis.hardware": 0, "lapis.driver": 1, "lapis.runtime": 2, "lapis.cuda": 3, "lapis.hip": 3,
            "lapis.numba": 3, "lapis.libs": 4}


def classify(module: str):
    """A module's layer number, 'shared', 'cli', or None when it is not part of lapis."""
    if module != "lapis" and not module.startswith("lapis."):
        return None
    for shared in SHARED:
        if module == shared or module.startswith(shared + "."):
            return "shared"
    if module == "lapis.cli":
        return "cli"
    for package, layer in PACKAGES.items():
        if module == package or module.startswith(package + "."):
            return layer
    return 5


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _type_checking_only(tree: ast.Module) -> set[int]:
    """ids of the import nodes under `if TYPE_CHECKING:`, which only a type checker runs."""
    return {id(node) for block in ast.walk(tree) if isinstance(block, ast.If) and
            isinstance(block.test, ast.Name) and block.test.id == "TYPE_CHECKING"
            for statement in block.body for node in ast.walk(statement)}


def imported_modules(path: Path, source: str | None = None, at_run_time: bool = False) -> list[tuple[int, str]]:
    """(line, absolute module) of every import (with at_run_time, not those only a type checker runs);
    `from lapis import x` names lapis.x."""
    tree = ast.parse(path.read_text() if source is None else source)
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    skipped = _type_checking_only(tree) if at_run_time else set()
    found = []
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module
            for alias in node.names:
                candidate = f"{module}.{alias.name}"
                is_module = (SRC / candidate.replace(".", "/")).with_suffix(".py").exists() or \
                    (SRC / candidate.replace(".", "/")).is_dir()
                found.append((node.lineno, candidate if is_module else module))
    return found


def violations(path: Path, source: str | None = None) -> list[str]:
    name = module_name(path)
    mine = classify(name)
    bad = []
    for line, target in imported_modules(path, source):
        theirs = classify(target)
        if theirs is None or mine == "cli" or theirs == "shared":
            continue
        if mine == "shared":
            bad.append(f"{path.relative_to(SRC)}:{line}: shared module {name} imports {target} (layer {theirs}); "
                       "shared specifications must import no layer")
        elif theirs == "cli" or theirs not in ALLOWED[mine]:
            bad.append(f"{path.relative_to(SRC)}:{line}: layer {mine} module {name} imports {target} "
                       f"(layer {theirs}); layer {mine} may import layers {sorted(ALLOWED[mine])}")
    return bad


FILES = sorted(SRC.rglob("*.py"))


def test_every_module_is_classified():
    assert FILES, "no source files found"
    assert {classify(module_name(p)) for p in FILES} >= {0, 1, 2, 3, 4, 5, "shared", "cli"}


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(SRC)))
def test_imports_follow_the_layer_rule(path):
    assert violations(path) == []


def test_the_check_catches_a_violation():
    probe = SRC / "lapis" / "libs" / "_layering_probe.py"
    found = violations(probe, "from lapis import runtime\nimport lapis.hardware.mmu\nfrom lapis import cuda, trace\n")
    assert len(found) == 2 and "layer 4" in found[0] and "layer 2" in found[0] and "layer 0" in found[1]
    shared = SRC / "lapis" / "isa" / "_probe.py"
    assert violations(shared, "from lapis.hardware import Gpu\n")


def import_graph() -> dict[str, set[str]]:
    """Each module of the package -> the package's modules it imports when it runs (anywhere in it, functions
    included; imports under `if TYPE_CHECKING:` are annotations' names, not imports that run)."""
    modules = {module_name(p): p for p in FILES}
    graph = {}
    for name, path in modules.items():
        targets = set()
        for _, target in imported_modules(path, at_run_time=True):
            while target and target not in modules:        # `from lapis.x import name` imports lapis.x
                target = target.rpartition(".")[0]
            if target and target != name:
                targets.add(target)
        graph[name] = targets
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm), each as a list."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_modules_import_each_other_in_a_circle():
    assert cycles(import_graph()) == []


def test_the_circle_check_catches_a_circle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


PUBLIC_MODULES = ["lapis.autograd", "lapis.nn", "lapis.nn.functional", "lapis.nn.init", "lapis.nn.modules",
                  "lapis.nn.parallel", "lapis.optim", "lapis.optim.lr_scheduler", "lapis.utils.data",
                  "lapis.utils.benchmark", "lapis.profiler", "lapis.distributions", "lapis.distributed", "lapis.amp",
                  "lapis.accelerator"]


@pytest.mark.parametrize("name", PUBLIC_MODULES)
def test_the_public_modules_re_export_the_framework_s(name):
    # lapis.nn is torch.nn's place, its code lapis.framework.nn: every public name reaches the same object
    import importlib
    public = importlib.import_module(name)
    implementation = importlib.import_module(name.replace("lapis.", "lapis.framework.").replace(
        "framework.utils.data", "framework.data").replace("framework.utils.benchmark", "framework.benchmark"))
    assert public.__all__ and public.__all__ == implementation.__all__
    for attribute in public.__all__:
        ours, theirs = getattr(public, attribute), getattr(implementation, attribute)
        if isinstance(ours, types.ModuleType):          # a submodule (lapis.nn.utils): its own place, same names
            assert ours.__all__ == theirs.__all__ and all(getattr(ours, n) is getattr(theirs, n) for n in ours.__all__)
        else:
            assert ours is theirs, f"{name}.{attribute}"
