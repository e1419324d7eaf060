"""The package as installed: every folder ships, and check modules import it absolutely."""

import re
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[2]
TOP_LEVEL = {
    "src/tck": "tck",
    "reference": "tck.reference",
    "conformance": "tck.conformance",
    "adapters": "tck.adapters",
    "fixtures": "tck.fixtures",
    "reports": "tck.reports",
    "bench": "tck.bench",
}


def test_every_package_folder_is_listed_in_pyproject():
    listed = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    found = set()
    for folder, package in TOP_LEVEL.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            relative = init.parent.relative_to(ROOT / folder).parts
            found.add(".".join((package, *relative)))
    assert found == listed, f"unlisted: {sorted(found - listed)}; stale: {sorted(listed - found)}"


def test_check_modules_import_tck_absolutely():
    # pytest --pyargs on an editable install imports conformance/checks/test_x.py as
    # `checks.test_x`: a relative import there loads a second copy of the package, whose
    # CheckFailure the plugin does not recognise (the failure loses its code).
    paths = sorted((ROOT / "conformance" / "checks").glob("test_*.py"))
    assert len(paths) >= 17, paths
    for path in paths:
        relative = re.findall(r"^\s*from \.+\w* import", path.read_text(), re.MULTILINE)
        assert not relative, f"{path.name} uses relative imports: {relative}"
