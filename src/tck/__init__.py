"""transformer-tck: a conformance kit for Transformer and Vision Transformer implementations.

The code lives in the repository's top-level folders and is exposed here:
``tck.reference`` (the spec made executable), ``tck.conformance`` (the checks),
``tck.adapters`` (the implementation contract), ``tck.fixtures`` and ``tck.reports``.
"""

__version__ = "0.1.0"
SPEC_VERSION = "0.1"
