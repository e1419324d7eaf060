"""Whether an implementation conforms, and why not, in four subpackages by job:

- ``checks``: the checks, one module per SPEC.md chapter (plain pytest tests);
- ``toolkit``: what every check uses (the harness, the recorder, private copies of inputs and
  outputs, the careful run, input edits, hypothesis strategies, result rows);
- ``diagnosis``: why a check failed (hypotheses as alternative oracles, precision findings,
  float32 islands, exceptions that name a bug);
- ``runner``: the pytest plugin and the ``tck run``/``report``/``list``/``fingerprint``/
  ``export-onnx`` commands, the terminal summary, baselines and the watchdog.
"""
