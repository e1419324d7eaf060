"""Nominal dense peak TFLOP/s per GPU and dtype, from the vendors' data sheets.

Dense figures (the data sheets' headline numbers with 2:4 sparsity are twice these).
float32 is the CUDA-core figure: torch does not use TF32 for float32 matmuls unless
``torch.backends.cuda.matmul.allow_tf32`` (or ``set_float32_matmul_precision``) says so,
and then the TF32 column applies instead. The measured matmul of the same run is the
second, device-specific yardstick; the CPU has no nominal figure here.
"""

from __future__ import annotations

import re

# (pattern on torch.cuda.get_device_name(), name): {dtype: TFLOP/s}. First match wins, so
# the more specific names come first ("H100 NVL" before "H100", "L40S" before "L4").
NOMINAL_TFLOPS: list[tuple[str, str, dict[str, float]]] = [
    (
        r"GH200",
        "GH200",
        {"bfloat16": 989, "float16": 989, "tf32": 495, "float32": 67, "float64": 34},
    ),
    (
        r"H200 NVL",
        "H200 NVL",
        {"bfloat16": 835, "float16": 835, "tf32": 418, "float32": 60, "float64": 30},
    ),
    (
        r"H200",
        "H200 SXM",
        {"bfloat16": 989, "float16": 989, "tf32": 495, "float32": 67, "float64": 34},
    ),
    (
        r"H100 NVL",
        "H100 NVL",
        {"bfloat16": 835, "float16": 835, "tf32": 418, "float32": 60, "float64": 30},
    ),
    (
        r"H100 PCIe",
        "H100 PCIe",
        {"bfloat16": 756, "float16": 756, "tf32": 378, "float32": 51, "float64": 26},
    ),
    (
        r"H100",
        "H100 SXM",
        {"bfloat16": 989, "float16": 989, "tf32": 495, "float32": 67, "float64": 34},
    ),
    (r"B200", "B200", {"bfloat16": 2250, "float16": 2250, "tf32": 1100}),
    (
        r"A100",
        "A100",
        {"bfloat16": 312, "float16": 312, "tf32": 156, "float32": 19.5, "float64": 9.7},
    ),
    (r"\bA10\b", "A10", {"bfloat16": 125, "float16": 125, "tf32": 62.5, "float32": 31.2}),
    (r"L40S", "L40S", {"bfloat16": 362, "float16": 362, "tf32": 183, "float32": 91.6}),
    (r"\bL4\b", "L4", {"bfloat16": 121, "float16": 121, "tf32": 60, "float32": 30.3}),
    (r"RTX 4090", "RTX 4090", {"bfloat16": 165, "float16": 165, "tf32": 82.6, "float32": 82.6}),
    (r"V100", "V100 SXM2", {"float16": 125, "float32": 15.7, "float64": 7.8}),
    (r"\bT4\b", "T4", {"float16": 65, "float32": 8.1}),
]


def nominal_peak(device_name: str) -> tuple[str, dict[str, float]] | None:
    """(table name, {dtype: TFLOP/s}) for a device name, or None when it is not listed."""
    for pattern, name, table in NOMINAL_TFLOPS:
        if re.search(pattern, device_name):
            return name, dict(table)
    return None


def nominal_tflops(device_name: str, dtype: str, *, tf32: bool = False) -> float | None:
    """The nominal dense peak for ``dtype`` on ``device_name`` (float32 as TF32 when
    ``tf32``), or None."""
    found = nominal_peak(device_name)
    if found is None:
        return None
    table = found[1]
    key = "tf32" if dtype == "float32" and tf32 else dtype
    return table.get(key)
