"""Self-tests of transformer-tck. Each test names the SPEC.md clauses it covers with
``@pytest.mark.spec("2.1", ...)``; test_spec_traceability.py keeps that honest both ways."""

import pytest

from tck.conformance.runner.profiles import load_profile

load_profile()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "spec(*clauses): the SPEC.md clauses a test covers")
