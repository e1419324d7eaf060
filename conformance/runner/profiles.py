"""Hypothesis settings profiles: ``ci`` (derandomised, small, fast), ``dev``, ``thorough``.

Choose one with the ``HYPOTHESIS_PROFILE`` environment variable (default ``dev``).
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, Phase, settings

PROFILES = ("ci", "dev", "thorough")
_COMMON = {
    "deadline": None,
    "print_blob": True,
    # Checks take the per-test `tck` harness fixture; it accumulates metrics across examples.
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
}


def register_profiles() -> None:
    # No example database: examples replayed from a .hypothesis folder would make two runs
    # of the same seed differ (tck run promises identical verdicts for the same seed).
    # ci leaves out hypothesis' explain phase: after shrinking a failure it reruns the check
    # hundreds of times to mark which parts of the example did not matter ("# or any other
    # generated value"). That was ~80% of a failing property check's time (the
    # mask_polarity_inverted mutant's run: 12.6 -> 2.8 CPU s); the shrunk example, the
    # verdict and the diagnosis are the same. dev and thorough keep it.
    settings.register_profile(
        "ci",
        max_examples=15,
        derandomize=True,
        database=None,
        phases=[p for p in Phase if p is not Phase.explain],
        **_COMMON,
    )
    settings.register_profile("dev", max_examples=40, **_COMMON)
    settings.register_profile("thorough", max_examples=400, **_COMMON)


def load_profile(name: str | None = None) -> str:
    """Register the profiles and load ``name`` (or $HYPOTHESIS_PROFILE, or 'dev')."""
    register_profiles()
    name = name or os.environ.get("HYPOTHESIS_PROFILE") or "dev"
    if name not in PROFILES:
        raise ValueError(
            f"unknown hypothesis profile {name!r}: choose one of {', '.join(PROFILES)}"
        )
    settings.load_profile(name)
    return name
