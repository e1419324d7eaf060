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


def test_every_test_that_needs_transformers_runs_in_the_hf_env():
    """The self-tests env (py311) has no transformers, so a test that skips without it runs
    only where tox.ini's hf env names it: a file left off that list would be skipped in
    every env of a green CI run."""
    tox = (ROOT / "tox.ini").read_text(encoding="utf-8")
    hf_env = tox.split("[testenv:hf]", 1)[1].split("\n[", 1)[0]
    needs = sorted(
        str(path.relative_to(ROOT))
        for path in (ROOT / "tests").glob("*/test_*.py")
        if re.search(r"importorskip\(\s*[\"']transformers[\"']", path.read_text("utf-8"))
    )
    missing = [path for path in needs if path not in hf_env]
    assert needs and not missing, f"not run by tox -e hf: {missing}"
