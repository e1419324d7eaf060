"""Reproduction snippets: a failing result's ``repro`` is Python that, pasted into ``python``,
shows the failure.

A failed oracle comparison replays exactly: the adapter, the config, the parameters (same
seed), the inputs (the call that made them, or every value written out), the call, the
oracle and the tolerance rule, ending in an ``AssertionError`` that prints the same
numbers as the report. Any other failure
(a property, a probe) reruns that one check through pytest, which prints its diagnosis.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

import numpy as np

from tck.reference import Config
from tck.reference.inputs import Shape, make_inputs

# Arrays up to this many elements are written as nested lists (exact: Python's float repr
# round-trips); larger ones as base64 of their bytes, which is exact and stays compact.
LITERAL_MAX = 256


def array_literal(array: np.ndarray) -> str:
    """A Python expression that rebuilds ``array`` exactly (dtype, shape and every bit)."""
    array = np.asarray(array)
    dtype = array.dtype.name
    if array.size <= LITERAL_MAX:
        return f"np.array({array.tolist()!r}, dtype=np.{dtype})"
    data = base64.b64encode(np.ascontiguousarray(array).tobytes()).decode("ascii")
    lines = [data[i : i + 88] for i in range(0, len(data), 88)]
    body = "\n".join(f'        "{line}"' for line in lines)
    return (
        f"np.frombuffer(base64.b64decode(\n{body}\n    ), dtype=np.{dtype})"
        f".reshape({tuple(array.shape)!r})"
    )


def oracle_snippet(
    *,
    adapter_spec: str,
    target: Mapping[str, str | None] | None = None,
    subject: str,
    component: str,
    config: Config,
    seed: int,
    inputs: Mapping[str, np.ndarray],
    recipe: tuple[Shape, int] | None,
    title: str,
    export: str | None = None,
    opset: int | None = None,
    device: str = "cpu",
) -> str:
    """Replay one oracle comparison: build, load canonical parameters, run, compare.

    Inputs that ``make_inputs`` made (``recipe``) are made again the same way when that
    gives them back bit for bit; otherwise they are written out in full. ``export``
    ("onnx"): the subject is one of ``with_onnx(adapter, opset=opset)``. ``target``: the
    model, component and map load_adapter takes (tck run --model, --component, --map).
    ``device``: where the subject was built (tck run --device); the oracle runs on the CPU.
    """
    stdlib, ours = ["import numpy as np"], []
    if recipe is not None and _remade(component, config, inputs, *recipe):
        shape, inputs_seed = recipe
        ours.append("from tck.reference.inputs import Shape, make_inputs")
        inputs_code = (
            f"inputs = make_inputs({component!r}, config, "
            f"np.random.default_rng({int(inputs_seed)!r}), {shape!r})"
        )
    else:
        if any(np.asarray(v).size > LITERAL_MAX for v in inputs.values()):
            stdlib.insert(0, "import base64")
        arrays = "\n".join(f"    {name!r}: {array_literal(v)}," for name, v in inputs.items())
        inputs_code = f"inputs = {{\n{arrays}\n}}"
    ours += [
        "from tck.adapters import Unsupported, load_adapter",
        "from tck.reference.expected import expected",
        "from tck.reference.tolerance import compare",
        "from tck.reference import Config, init_params",
    ]
    given = "".join(f", {k}={v!r}" for k, v in (target or {}).items() if v is not None)
    load = f"adapter = load_adapter({adapter_spec!r}{given})"
    if export == "onnx":
        ours.append("from tck.adapters.onnx_runtime import with_onnx")
        load += f"\nadapter = with_onnx(adapter, opset={opset!r})"
    imports = "\n".join(stdlib) + "\n\n" + "\n".join(sorted(ours))
    device_kw = "" if device == "cpu" else f", device={device!r}"
    return f"""# {_comment(title)}
{imports}

{load}
subject = next(s for s in adapter.subjects() if s.name == {subject!r})
config = {config!r}
handle = adapter.build(subject, config, seed={int(seed)!r}{device_kw})
params = init_params({component!r}, config, subject.conventions, seed={int(seed)!r})
try:
    adapter.load(handle, params)
except Unsupported:  # the adapter only exports its own parameters
    params = adapter.params(handle)

{inputs_code}
test = adapter.run(handle, inputs)
gold = expected({component!r}, inputs, params, config, subject.conventions)
undefined = np.isnan(gold) if subject.conventions.fully_masked_rows == "undefined" else None
result = compare(test, gold, ignore=undefined)
assert result.passed, (
    f"max |test - oracle| = {{result.max_abs_err:.3g}} > bound {{result.bound:.3g}} "
    f"(ratio {{result.ratio:.3g}}) at index {{result.worst_index}}"
)
print("passes now: max |test - oracle| =", result.max_abs_err)
"""


def _remade(
    component: str, config: Config, inputs: Mapping[str, np.ndarray], shape: Shape, seed: int
) -> bool:
    again = make_inputs(component, config, np.random.default_rng(seed), shape)
    return again.keys() == inputs.keys() and all(
        np.array_equal(again[k], inputs[k]) and again[k].dtype == np.asarray(inputs[k]).dtype
        for k in again
    )


def pytest_snippet(
    *,
    adapter_spec: str,
    seed: int,
    module: str,
    target: Mapping[str, str | None] | None = None,
    test_id: str,
    title: str,
    export: str | None = None,
    opset: int | None = None,
    device: str = "cpu",
) -> str:
    """Rerun one check (by its pytest id) with the same adapter and seed (and export, and
    device, and the model, component and map of ``target``). Every value is written as a
    Python literal (``repr``), never pasted as text."""
    args = [f"--tck-adapter={adapter_spec}", f"--tck-seed={int(seed)}"]
    options = {"model": "--tck-model", "component": "--tck-component", "map_path": "--tck-map"}
    args += [f"{options[k]}={v}" for k, v in (target or {}).items() if v is not None]
    if device != "cpu":
        args.append(f"--tck-device={device}")
    if export:
        args.append(f"--tck-export={export}")
    if opset is not None:
        args.append(f"--tck-opset={int(opset)}")
    lines = "".join(f"    {arg!r},\n" for arg in args)
    return f"""# {_comment(title)}
import pathlib
import sys

import pytest

import tck.conformance.checks

checks = pathlib.Path(tck.conformance.checks.__file__).parent
code = pytest.main([
    str(checks / {f"{module}.py::{test_id}"!r}),
{lines}    "-p", "no:cacheprovider", "-q", "--tb=line",
])
sys.exit(code)
"""


def _comment(text: str) -> str:
    """``text`` as the rest of one comment line: nothing in it can start a line of code."""
    return repr(str(text))[1:-1]


def counterexample(notes: list[Any]) -> str:
    """Hypothesis' falsifying example ("Falsifying example: ...", "Draw 1: ..."), from the
    notes it attaches to the exception."""
    return "\n".join(str(note) for note in notes).strip()
