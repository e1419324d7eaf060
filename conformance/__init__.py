"""The conformance checks, their hypothesis profiles and (soon) the pytest plugin and CLI."""
