"""The checks, one module per SPEC.md chapter: plain pytest tests, each citing its clauses
and declaring its public id (``@pytest.mark.spec``)."""
