"""The conformance checks (test_*.py, one module per spec area), the pytest plugin that runs
them against an adapter (plugin.py), the harness and tolerance rule they share, hypothesis
profiles, and the ``tck`` command (cli.py)."""
