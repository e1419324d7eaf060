"""Diagnosis: why a check failed. Hypotheses (alternative oracles, passed in) that
reproduce a failing output, exceptions that name a bug, precision findings, and the
decoding and structural hypotheses; ``explain`` ties them together."""
