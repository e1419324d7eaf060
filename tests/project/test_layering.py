"""The floors of the codebase: no module imports from a floor above its own, and no import
cycle runs between the top-level folders (docs/architecture.md, "Layout").

Every module of ours is parsed with ``ast`` (nothing is imported), each ``import`` and
``from ... import`` (relative ones resolved, lazy ones inside functions included, and
``__import__``/``importlib.import_module`` of a literal ``tck...`` name) is mapped to the
floor of the module it names, and a failure names the importing file, the line and the
imported module.
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Iterator
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[2]

# Bottom to top; a module may import from its own floor and the floors below it.
FLOORS: list[tuple[str, ...]] = [
    ("tck", "tck.usage"),  # 0: the package root and the shared usage helpers: nothing of ours
    ("tck.reference",),  # 1: the oracle, model, params, costs, conventions, expected,
    #                         inputs, tolerance
    ("tck.reports",),  # 2: renderings of results.json (reads reference for names)
    ("tck.adapters",),  # 3: the adapter contract, built-in adapters, mutants
    ("tck.fixtures",),  # 4: golden fixtures (built from reference, read through adapters)
    # 5: the checks' toolbox (the harness, what a check records, private copies, the careful
    #    run, inputs and strategies) and diagnosis (why a check failed): one floor, since the
    #    harness explains a failed comparison and a hypothesis runs the subject through it
    ("tck.conformance", "tck.conformance.toolkit", "tck.conformance.diagnosis"),
    ("tck.conformance.checks",),  # 6: the checks, one module per SPEC chapter
    ("tck.conformance.runner",),  # 7: the pytest plugin, tck run/report/list, reports
    ("tck.bench",),  # 8: tck bench
    ("tck.cli", "tck.__main__"),  # 9: the tck command, which imports every area
]

# Upward imports allowed, as (importing module, imported module): none. Code a lower floor
# needs moves down instead (the root-cause ranking moved to tck.reports.causes).
EXCEPTIONS: set[tuple[str, str]] = set()


def floor_of(module: str) -> int | None:
    """The floor of a module of ours (the longest prefix in FLOORS); None if not ours."""
    if module != "tck" and not module.startswith("tck."):
        return None
    best: tuple[int, int] | None = None  # (prefix length, floor)
    for floor, prefixes in enumerate(FLOORS):
        for prefix in prefixes:
            if module == prefix or module.startswith(prefix + "."):
                if best is None or len(prefix) > best[0]:
                    best = (len(prefix), floor)
    if best is None or (best[0] == len("tck") and module != "tck"):
        raise AssertionError(f"{module} is on no floor: add it to FLOORS in {__file__}")
    return best[1]


AREAS = ("reference", "reports", "adapters", "fixtures", "conformance", "bench")


def area(module: str) -> str:
    """The node of a module in the cycle check: its top-level folder (tck.reference, ...);
    the modules of src/tck (tck.usage at the bottom, tck.cli on top) are each their own."""
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 and parts[1] in AREAS else module


def our_modules() -> Iterator[tuple[str, Path]]:
    """(dotted name, file) of every module the package ships, from pyproject's package-dir."""
    setup = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    for package, folder in setup["package-dir"].items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            relative = path.relative_to(ROOT / folder).with_suffix("").parts
            if relative[-1] == "__init__":
                relative = relative[:-1]
            name = ".".join((package, *relative))
            if name.rpartition(".")[0] in setup["packages"] or name in setup["packages"]:
                yield name, path


def imports(name: str, path: Path) -> Iterator[tuple[int, str]]:
    """(line, imported module) for each import of ours in a module's source."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            yield node.lineno, module
            for alias in node.names:  # `from tck import fixtures`: the subpackage itself
                if module == "tck" and alias.name != "*":
                    yield node.lineno, f"tck.{alias.name}"
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            called = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
            first = node.args[0]
            if (
                called in {"__import__", "import_module"}
                and isinstance(first, ast.Constant)
                and isinstance(first.value, str)
            ):
                yield node.lineno, first.value


def _edges() -> Iterator[tuple[str, Path, int, str]]:
    for name, path in our_modules():
        for line, imported in imports(name, path):
            if floor_of(imported) is not None and imported != "tck":
                yield name, path, line, imported


def test_every_module_is_on_a_floor():
    names = [name for name, _ in our_modules()]
    assert "tck.reference.oracle" in names and "tck.cli" in names, names
    for name in names:
        assert floor_of(name) is not None, name


def test_no_module_imports_from_a_floor_above_its_own():
    upward = []
    for name, path, line, imported in _edges():
        if floor_of(imported) > floor_of(name) and (name, imported) not in EXCEPTIONS:
            upward.append(
                f"{path.relative_to(ROOT)}:{line}: {name} (floor {floor_of(name)}) imports "
                f"{imported} (floor {floor_of(imported)})"
            )
    assert not upward, "imports from a floor above:\n" + "\n".join(upward)


def test_the_exceptions_are_still_needed():
    # An exception that no longer matches any import is stale: delete it from EXCEPTIONS.
    used = {(name, imported) for name, _, _, imported in _edges()}
    assert EXCEPTIONS <= used, f"stale exceptions: {sorted(EXCEPTIONS - used)}"


def test_no_import_cycle_between_top_level_folders():
    graph: dict[str, set[str]] = {}
    where: dict[tuple[str, str], str] = {}
    for name, path, line, imported in _edges():
        if (name, imported) in EXCEPTIONS:
            continue
        source, target = area(name), area(imported)
        if source != target:
            graph.setdefault(source, set()).add(target)
            where.setdefault((source, target), f"{path.relative_to(ROOT)}:{line} ({imported})")

    def cycle_from(start: str) -> list[str] | None:
        stack = [(start, [start])]
        while stack:
            node, trail = stack.pop()
            for nxt in sorted(graph.get(node, ())):
                if nxt == start:
                    return [*trail, start]
                if nxt not in trail:
                    stack.append((nxt, [*trail, nxt]))
        return None

    for start in sorted(graph):
        cycle = cycle_from(start)
        assert cycle is None, (
            "import cycle: "
            + " -> ".join(cycle)
            + "; "
            + "; ".join(f"{a} -> {b} at {where[(a, b)]}" for a, b in itertools.pairwise(cycle))
        )


def test_the_layering_test_sees_an_upward_import(tmp_path):
    # The parser itself: a lazy upward import inside a function, a relative import and an
    # __import__ string are all found.
    module = tmp_path / "mod.py"
    module.write_text(
        "from . import tutorial\n"
        "def f():\n"
        "    from tck.conformance.runner.cli import run_checks\n"
        "    __import__('tck.bench.cli')\n"
    )
    found = list(imports("tck.adapters.mutants.mod", module))
    assert (1, "tck.adapters.mutants") in found
    assert (3, "tck.conformance.runner.cli") in found
    assert (4, "tck.bench.cli") in found
    assert floor_of("tck.conformance.runner.cli") > floor_of("tck.adapters.mutants.mod")
