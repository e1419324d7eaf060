"""Canonical parameters (§0.2), the padding row (§1.3) and parameter counts (§10.3)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tck.adapters import Unsupported
from tck.conformance.toolkit.deltas import delta
from tck.conformance.toolkit.harness import Harness
from tck.conformance.toolkit.results import CheckFailure
from tck.reference import RECORDS, param_count, record
from tck.reference.params import no_params

# Components that hold parameters (their record's layout is not no_params).
WITH_PARAMS = tuple(name for name, rec in RECORDS.items() if rec.layout is not no_params)


def _own_params(tck: Harness, inst) -> dict[str, np.ndarray]:
    try:
        return tck.adapter.params(inst.handle)
    except Unsupported as why:
        pytest.skip(f"{tck.adapter.name} does not export canonical parameters: {why}")


@pytest.mark.spec("0.2", "0.5", id="params.round_trip")
@pytest.mark.components(*WITH_PARAMS)
def test_round_trip(tck: Harness) -> None:
    """Loading canonical parameters and reading them back gives the same arrays. An adapter
    that cannot load has nothing to round-trip: reading params() twice proves nothing."""
    inst = tck.own_instance()
    if inst.not_loaded is not None:
        pytest.skip(f"{inst.not_loaded}; nothing was loaded to read back")
    if inst.params is None:
        pytest.skip(f"{tck.adapter.name} cannot load canonical parameters")
    back = _own_params(tck, inst)
    missing = sorted(set(inst.params) - set(back))
    extra = sorted(set(back) - set(inst.params))
    if missing or extra:
        raise CheckFailure(
            "params.names_differ",
            f"params() lacks {missing} and adds {extra} (SPEC.md §0.2 layout)",
        )
    for name, value in inst.params.items():
        got = np.asarray(back[name])
        if got.shape != value.shape:
            raise CheckFailure(
                "params.shape_differs", f"{name}: loaded {value.shape}, read back {got.shape}"
            )
        err = float(np.abs(got - value).max(initial=0.0))
        if err > 1e-12 * max(1.0, float(np.abs(value).max(initial=0.0))):
            raise CheckFailure(
                "params.round_trip_changed",
                f"{name}: read back differs from what was loaded by {err:.3g}",
            )


@pytest.mark.spec("10.3", id="params.count")
@pytest.mark.components(*WITH_PARAMS)
def test_count(tck: Harness) -> None:
    """The implementation holds exactly the spec's number of parameters (a tied matrix once)."""
    inst = tck.own_instance(params=False)
    held = getattr(tck.adapter, "param_count", None)  # what the module holds, mapped or not
    if callable(held):  # counted before any mapping is read: a parameter the map names may
        counted = int(held(inst.handle))  # be missing from the module, which the count shows
    else:
        counted = sum(int(np.asarray(v).size) for v in _own_params(tck, inst).values())
    expected = param_count(tck.component, inst.config, inst.conventions)
    tck.note({"param_count": counted, "expected_param_count": expected})
    unmapped = getattr(tck.adapter, "unmapped_count", None)
    spare = unmapped(inst.handle) if counted != expected and callable(unmapped) else {}
    if spare and counted - sum(spare.values()) == expected:
        tck.note({"unmapped": spare})
        tck.convention(
            "params.unmapped_slices",
            f"{counted} parameters where SPEC.md §10.3 gives {expected}: the "
            f"{counted - expected} more are slices of tensors the parameter map reads in part "
            f"and no canonical parameter reads ({', '.join(f'{k}: {v}' for k, v in spare.items())}"
            "), such as a learned position table's offset rows (OPT's, BART's): held beyond "
            "the spec, never loaded by the suite",
        )
        return
    if counted != expected:
        _tying_differs(tck, inst, counted, expected)
        raise CheckFailure(
            "params.count_wrong",
            f"{counted} parameters, SPEC.md §10.3 gives {expected} for {inst.config}",
        )


def _tying_differs(tck: Harness, inst, counted: int, expected: int) -> None:
    """A count that is the spec's under the other ``tie_weights`` (a head matrix of its own
    where the config ties it to the token table, or none where it does not): that tying is
    the cause (SPEC.md §8.3, §10.3)."""
    other = dataclasses.replace(inst.config, tie_weights=not inst.config.tie_weights)
    if param_count(tck.component, other, inst.conventions) != counted:
        table = inst.config.vocab_size * inst.config.d_model
        streams = _streams(tck.component)
        if streams and inst.config.tie_weights and counted - expected == table:
            _use_not_tied(tck, streams, counted, expected)
        return
    extra = abs(counted - expected)
    if inst.config.tie_weights:
        raise CheckFailure(
            "model.head_not_tied",
            f"{counted} parameters where SPEC.md §10.3 gives {expected} for tie_weights=True: "
            f"the {extra} more are an output head of its own beside the token table, the "
            "count of the same model untied. The config ties the head to the embedding; this "
            "one computes its logits with a separate matrix (a tie_weights() never called, an "
            "assignment lost; SPEC.md §8.3)",
        )
    raise CheckFailure(
        "model.head_tied_to_embedding",
        f"{counted} parameters where SPEC.md §10.3 gives {expected} for tie_weights=False: "
        f"the {extra} fewer are the output head's, the count of the same model tied: the head "
        "is the token table (SPEC.md §8.3)",
    )


def _streams(component: str) -> tuple[str, str] | None:
    """The names of the source and target token inputs of an encoder-decoder (one table
    embeds both, SPEC.md §8.3), or None for a component without the two."""
    tokens = {i.lengths: i.name for i in record(component).inputs if i.kind == "tokens"}
    if "key" in tokens and "target" in tokens:
        return tokens["key"], tokens["target"]
    return None


def _use_not_tied(tck: Harness, streams: tuple[str, str], counted: int, expected: int) -> None:
    """An encoder-decoder that ties its three uses of the token table (SPEC.md §8.3) and
    holds one table more than the spec (``streams``: its source and target token inputs):
    which use reads a matrix of its own, measured. Row
    ``r`` of the loaded table is moved for a token the source reads only, one the target
    reads only, and one neither reads; a use that reads the loaded table moves every logit
    with the first two (through the encoder or the decoder) and logit ``r`` with the third
    (through the output projection). A use that does not moves logit ``r`` alone, or
    nothing. Returns without a finding when the measurement names no single use."""
    try:
        probe = tck.instance()
    except Unsupported:
        return
    if probe.params is None or probe.not_loaded is not None:
        return
    config = probe.config
    tokens = [t for t in range(config.vocab_size) if t != config.padding_idx]
    if len(tokens) < 7 or "embedding.weight" not in probe.params:
        return
    source, target, neither = tokens[0:3], tokens[3:6], tokens[6]
    source_input, target_input = streams
    inputs = {
        source_input: np.array([source + source[:2], source[::-1] + source[:2]], dtype=np.int64),
        target_input: np.array([target + target[:1], target[::-1] + target[:1]], dtype=np.int64),
    }
    base = tck.run(probe, inputs)

    def moved(row: int) -> np.ndarray:
        """(V,): the logits that move when row ``row`` of the loaded table moves."""
        table = np.array(probe.params["embedding.weight"], copy=True)
        table[row] += np.linspace(-1.0, 1.0, table.shape[1])  # not a constant: a norm keeps it
        tck.adapter.load(probe.handle, {**probe.params, "embedding.weight": table})
        try:
            out = tck.run(probe, inputs)
        finally:
            tck.adapter.load(probe.handle, probe.params)
        return np.array([delta(base[..., v], out[..., v]).changed for v in range(base.shape[-1])])

    # an embedding that reads the loaded table moves every logit; one that does not, at most
    # the moved token's own (through the output projection)
    unread = [
        use
        for use, row in (("source embedding", source[0]), ("target embedding", target[0]))
        if moved(row).sum() <= 1
    ]
    if not moved(neither)[neither]:
        unread.append("output projection")
    if not unread or len(unread) == 3:  # every use reads it, or none: no single matrix
        return
    uses = " and the ".join(unread)
    words = (
        f"{counted} parameters where SPEC.md §10.3 gives {expected} for tie_weights=True: the "
        f"{counted - expected} more are one token table, and the {uses} "
        f"{'does' if len(unread) == 1 else 'do'} not read the loaded one (measured: a row of "
        "the loaded table moved for a token only the source reads, one only the target "
        "reads, and one neither reads, and the logits followed or not)"
    )
    if unread == ["output projection"]:
        raise CheckFailure(
            "model.head_not_tied",
            f"{words}: the model computes its logits with a matrix of its own (SPEC.md §8.3)",
        )
    raise CheckFailure(
        "model.embedding_not_tied",
        f"{words}: the {uses} {'is' if len(unread) == 1 else 'share'} a matrix of "
        f"{'its' if len(unread) == 1 else 'their'} own, a copy made at construction or an "
        "assignment lost, where the model ties source, target and output to one table "
        "(SPEC.md §8.3)",
    )


@pytest.mark.spec("1.3", id="params.padding_row_starts_at_zero")
@pytest.mark.components("embedding")
def test_padding_row_starts_at_zero(tck: Harness) -> None:
    """A freshly built embedding maps padding_idx to the zero vector."""
    inst = tck.instance(params=False)
    pad = inst.config.padding_idx
    out = tck.run(inst, {"ids": np.full((1, 3), pad)})
    norm = float(np.abs(out).max())
    tck.note({"padding_row_max_abs": norm})
    if norm != 0.0:
        raise CheckFailure(
            "embedding.padding_row_not_zero",
            f"the row of padding_idx={pad} is not zero at initialisation "
            f"(max |value| = {norm:.3g})",
        )
