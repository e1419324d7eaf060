"""The runner: the pytest plugin (collection, the per-check fixture, result rows), the
``tck run``/``report``/``list``/``fingerprint``/``export-onnx`` commands, the terminal
summary, results files, baselines, profiles, repro snippets and the watchdog."""
