"""§10.6 Shape contracts: output shapes for awkward sizes, and inputs that must be refused.

No parameters needed. An input the spec calls an error must raise (any exception type);
producing an output instead (wrapping, clamping, broadcasting, truncating) is a failure.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import pytest

from tck.adapters import Unsupported
from tck.conformance.toolkit.harness import Harness, Instance
from tck.conformance.toolkit.results import CheckFailure
from tck.reference import COMPONENTS, Config, record, select
from tck.reference.inputs import Inputs, Shape

spec = pytest.mark.spec
components = pytest.mark.components

# (batch, Lq, Lk): lengths 1, 3 and 113 (not a multiple of 8, 16 or 64), batch 1 and 3.
SIZES = ((1, 1, 1), (3, 3, 3), (1, 113, 113), (3, 1, 3), (1, 3, 113), (3, 113, 1))


def output_shape(component: str, inputs: Mapping[str, np.ndarray], c: Config) -> tuple:
    """The §10.6 output shape for these inputs (the component record's ``shape_of``)."""
    return record(component).shape_of(inputs, c)


@spec("10.6", id="shapes.output_shapes")
@components(*COMPONENTS)
def test_output_shapes(tck: Harness) -> None:
    """§10.6: valid inputs of lengths 1, 3 and 113 and batch 1 and 3 give the listed shapes."""
    inst = tck.own_instance()
    seen = set()
    for index, (batch, lq, lk) in enumerate(SIZES):
        inputs = tck.inputs(inst, Shape(batch=batch, lq=lq, lk=lk), seed=tck.seed + index)
        key = tuple((k, np.shape(v)) for k, v in sorted(inputs.items()))
        if key in seen:  # images and other length-free inputs repeat
            continue
        seen.add(key)
        out = tck.run(inst, inputs)
        want = output_shape(tck.component, inputs, inst.config)
        if tuple(out.shape) != want:
            raise CheckFailure(
                "shape.wrong_output_shape",
                f"for batch {batch}, Lq {lq}, Lk {lk} the output has shape "
                f"{tuple(out.shape)}; SPEC.md §10.6 gives {want}",
                {"shape": list(out.shape), "expected_shape": list(want)},
            )


# An id or a position past a table is an index out of range: on CUDA torch's kernels check it
# with a device-side assert, which leaves the process's CUDA context broken for every later
# call (seen on an H200: every check after it in that worker was an error). The refusal is
# the module's logic, the same on every device, so these probes run on the CPU.
INDEX_PROBE = "an index out of range is a device-side assert on a GPU, which breaks the process"


def must_refuse(
    tck: Harness, inst: Instance, bad: Inputs, code: str, what: str, valid: Inputs
) -> None:
    """Run ``valid`` (which must work), then ``bad``, which must raise."""
    tck.run(inst, valid)
    try:
        out = tck.adapter.run(inst.handle, bad)
    except Unsupported:
        raise
    except Exception as err:  # any exception type is a refusal (§10.6)
        tck.note({"raised": f"{type(err).__name__}: {str(err)[:200]}"})
        return
    raise CheckFailure(
        code,
        f"{what} is accepted and gives an output of shape {np.shape(out)}; SPEC.md §10.6 "
        "requires an error before any output is produced",
    )


def altered(inputs: Inputs, name: str, change: Callable[[np.ndarray], np.ndarray]) -> Inputs:
    return {**inputs, name: change(np.asarray(inputs[name]))}


@spec("1.1", "10.6", id="shapes.rejects_out_of_range_ids")
@components(*select("token_ids"))
def test_rejects_out_of_range_ids(tck: Harness) -> None:
    """§1.1: every id lies in [0, V); V itself and -1 must be refused, never wrapped or
    clamped (seed 000 declares vocab_size = 11 for ids up to 23). Probed on the CPU."""
    with tck.on_the_cpu(INDEX_PROBE):
        inst = tck.own_instance()
        valid = tck.inputs(inst, Shape(batch=2, lq=4, lk=5))
        vocab = inst.config.vocab_size
        names = [i.name for i in record(tck.component).inputs if i.kind in ("ids", "tokens")]
        for name in names:
            for bad_id in (vocab, vocab + 7, -1):

                def put(ids: np.ndarray, bad_id: int = bad_id) -> np.ndarray:
                    ids = ids.copy()
                    ids[0, 1] = bad_id
                    return ids

                must_refuse(
                    tck,
                    inst,
                    altered(valid, name, put),
                    "shape.accepts_out_of_range_ids",
                    f"{name} containing id {bad_id} (vocabulary [0, {vocab}))",
                    valid,
                )


@spec("9.1", "10.6", id="shapes.rejects_bad_image_size")
@components(*select("images"))
def test_rejects_bad_image_size(tck: Harness) -> None:
    """§9.1: an image whose sides are not multiples of the patch size is refused."""
    inst = tck.own_instance()
    c = inst.config
    valid = tck.inputs(inst, Shape(batch=2))
    side = c.image_size + c.patch_size // 2 if c.patch_size > 1 else c.image_size
    if side % c.patch_size == 0:
        pytest.skip("patch_size 1 divides every image size")
    bad = {"images": np.random.default_rng(tck.seed).standard_normal((2, c.channels, side, side))}
    must_refuse(
        tck,
        inst,
        bad,
        "shape.accepts_bad_image_size",
        f"a {side}x{side} image with patch size {c.patch_size}",
        valid,
    )


@spec("4.1", "10.6", id="shapes.rejects_bad_mask")
@components(*select("masks"))
def test_rejects_bad_mask(tck: Harness) -> None:
    """§4.1: a mask whose key axis does not match the keys (Lk + 2 columns) does not
    broadcast to the scores and is refused, never broadcast or truncated."""
    inst = tck.own_instance()
    rec = record(tck.component)
    valid = tck.inputs(inst, Shape(batch=2, lq=5, lk=5 if rec.has("self_attention") else 7))
    name = rec.key_mask or ""  # set on every record tagged "masks"

    def widen(mask: np.ndarray) -> np.ndarray:
        return np.concatenate([mask, np.ones((*mask.shape[:-1], 2), bool)], axis=-1)

    must_refuse(
        tck,
        inst,
        altered(valid, name, widen),
        "shape.accepts_bad_mask",
        f"a {name} with {valid[name].shape[-1] + 2} key columns for {valid[name].shape[-1]} keys",
        valid,
    )


@spec("2.2", "10.6", "0.6", id="shapes.rejects_beyond_max_len")
@components(*select("max_len"))
def test_rejects_beyond_max_len(tck: Harness) -> None:
    """§2.2: the encoding is defined up to Config.max_len; a longer sequence is refused,
    not truncated or extrapolated. A subject that declares its own maximum length
    (ConfigSpace.max_len, §0.6) is probed at that length. Probed on the CPU."""
    with tck.on_the_cpu(INDEX_PROBE):
        inst = tck.own_instance()
        limit = inst.config.max_len
        if record(tck.component).has("positional"):
            valid = {"positions": np.arange(limit)}
            bad = {"positions": np.arange(limit + 1)}
        else:
            valid = tck.inputs(inst, Shape(batch=1, lq=3, lk=limit, masked=False))
            bad = tck.inputs(
                inst, Shape(batch=1, lq=3, lk=limit + 1, masked=False), beyond_max_len=True
            )
        must_refuse(
            tck,
            inst,
            bad,
            "shape.accepts_too_long",
            f"a sequence of {limit + 1} positions with max_len={limit}",
            valid,
        )
