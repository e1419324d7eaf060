"""Renderings of results.json (HTML per adapter, scoreboard, JUnit). Empty so far: issue 9.
Generated reports go to reports/out/, which git ignores."""
