"""A real-size checkpoint's whole stack runs a stated set of checks (tck.adapters.real_size),
and still fails when any one of its layers is wrong; the oracle comparison makes one call at
the checkpoint's own length. Exercised on a small checkpoint with TCK_STACK_PLAN=on (the
rule real sizes get by default)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from support.hf_checkpoints import save_bert

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

pytestmark = pytest.mark.spec("0.2", "10.11")

LAYERS, POSITIONS = 4, 40


def _save_bert(folder: Path) -> None:
    save_bert(
        folder,
        vocab_size=50,
        hidden_size=32,
        num_hidden_layers=LAYERS,
        intermediate_size=64,
        max_position_embeddings=POSITIONS,
    )


# hf.bert on the checkpoint, with a bug in its last layer only: the query projection's output
# features reversed (a layout bug: another head's query). Swapping the saved q and k weights
# would not do: the oracle reads the checkpoint's own weights, so that is a different, valid
# checkpoint; a layer that computes something other than its weights say is the bug.
BROKEN = """
from tck.adapters import pretrained

adapter = pretrained.bert({folder!r})
for model in {{id(m): m for m, _ in adapter.views.values()}}.values():
    query = model.encoder.layer[{layer}].attention.self.query
    query.register_forward_hook(lambda module, args, out: out.flip(-1))
"""


def _run(args: list[str], out: Path) -> dict:
    env = {**os.environ, "TCK_STACK_PLAN": "on", "HYPOTHESIS_PROFILE": "ci"}
    done = subprocess.run(
        [sys.executable, "-m", "tck", "run", *args, "-n", "0", "--out", str(out)],
        cwd=out.parent,
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
    )
    assert done.returncode in (0, 1), done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads((out / "results.json").read_text())


def _rows(document: dict, subject: str) -> dict[str, list[dict]]:
    rows: dict[str, list[dict]] = {}
    for r in document["results"]:
        if r["subject"] == subject:
            rows.setdefault(r["check"], []).append(r)
    return rows


def test_stack_runs_the_stated_set_at_full_length(tmp_path) -> None:
    _save_bert(tmp_path / "model")
    args = ["--adapter", "hf.bert", "--model", str(tmp_path / "model"), "--only", "encoder"]
    document = _run(args, tmp_path / "out")
    summary = document["summary"]
    assert summary["failed"] == 0 and summary["errors"] == 0, summary
    stack = _rows(document, "encoder[eager]")
    assert stack["equality.oracle"][0]["status"] == "pass"
    assert stack["masks.padding_invariance"][0]["status"] == "pass"
    # one oracle call at the checkpoint's own length (its position table), made by the sdpa
    # stack (the cheaper attention kernel); its eager twin (the same weights) makes the
    # usual calls
    twin = _rows(document, "encoder[sdpa]")["equality.oracle"][0]
    assert twin["status"] == "pass"
    calls = twin["metrics"]["calls"]
    assert max(c["seq_len"] or 0 for c in calls) == POSITIONS
    assert any(c["what"].startswith("full length") for c in calls)
    eager_calls = stack["equality.oracle"][0]["metrics"]["calls"]
    assert not any(c["what"].startswith("full length") for c in eager_calls)
    # the float64 gradients the eager stack makes for both, saying so (real_size.TWIN_LEAVES)
    gradients = _rows(document, "encoder[sdpa]")["gradients.gradients"]
    assert any("encoder[eager]" in r["diagnosis"]["message"] for r in gradients), gradients
    # the output shapes are the oracle calls' first test (real_size.COVERED)
    for subject in ("encoder[eager]", "encoder[sdpa]"):
        shapes = _rows(document, subject)["shapes.output_shapes"][0]
        assert shapes["status"] == "skip" and "output shape" in shapes["diagnosis"]["message"]
    # what the stack does not run is a skip that says why, never a silent absence
    skipped = stack["masks.causal_no_leak"][0]
    assert skipped["status"] == "skip"
    assert "real-size stack" in skipped["diagnosis"]["message"]
    dtypes = {
        r["metrics"].get("dtype"): r["status"]
        for r in stack["gradients.gradients"]
        if r["status"] == "pass"
    }
    assert dtypes == {"float64": "pass"}, stack["gradients.gradients"]
    # a real-size stack's float64 matmuls use the idle cores the run may use (--threads)
    assert 1 <= int(document["environment"]["torch_threads"]) <= len(os.sched_getaffinity(0))


def test_one_wrong_layer_fails_the_stack(tmp_path) -> None:
    _save_bert(tmp_path / "model")
    broken = BROKEN.format(folder=str(tmp_path / "model"), layer=LAYERS - 1)
    (tmp_path / "broken_bert.py").write_text(broken)
    document = _run(["--adapter", "broken_bert:adapter"], tmp_path / "out")
    for subject in ("encoder[eager]", "encoder[sdpa]"):  # the stack: its oracle comparison
        oracle = _rows(document, subject)["equality.oracle"][0]
        assert oracle["status"] == "fail", oracle
        assert oracle["diagnosis"]["code"].endswith("oracle_mismatch"), oracle["diagnosis"]
    # the layer subjects are layer 0, which is right: the stack is what covers the others
    layer = _rows(document, "encoder_layer[eager]")["equality.oracle"][0]
    assert layer["status"] == "pass", layer


def test_stack_plan_rule(monkeypatch) -> None:
    """Which checks a real-size stack runs: the rule, at BERT-base / ViT-B sizes."""
    from tck.adapters.base import Subject
    from tck.adapters.config_space import ConfigSpace
    from tck.adapters.real_size import ENV, stack_skip

    monkeypatch.delenv(ENV, raising=False)
    space = ConfigSpace(fixed={"d_model": 768, "d_ff": 3072, "n_layers": 12})
    stack = Subject("encoder[sdpa]", "encoder", supports=space)
    every = ("float64", "float32", "float16", "bfloat16")
    assert stack_skip(stack, "equality.oracle", {}, every) is None
    assert stack_skip(stack, "masks.padding_invariance", {}, every) is None
    assert stack_skip(stack, "gradients.gradients", {"dtype": "float64"}, every) is None
    assert "real-size stack" in stack_skip(
        stack, "gradients.gradients", {"dtype": "float16"}, every
    )
    assert "real-size stack" in stack_skip(stack, "masks.causal_no_leak", {}, every)
    assert "held to the spec's output shape" in stack_skip(stack, "shapes.output_shapes", {})
    # the layer subjects run everything; a small checkpoint's stack too (auto)
    layer = Subject("encoder_layer[sdpa]", "encoder_layer", supports=space)
    assert stack_skip(layer, "masks.causal_no_leak", {}, every) is None
    small = Subject("encoder", "encoder", supports=ConfigSpace(fixed={"d_model": 32, "d_ff": 64}))
    assert stack_skip(small, "masks.causal_no_leak", {}, every) is None
    # a stack without float64 (hf.vit eager): its most precise dtype takes float64's place
    vit = Subject("vit[eager]", "vit", supports=space)
    lower = ("float32", "float16", "bfloat16")
    assert stack_skip(vit, "numerics.dtype_sweep", {"dtype": "float32"}, lower) is None
    assert stack_skip(vit, "gradients.gradients", {"dtype": "float32"}, lower) is None
    assert stack_skip(vit, "vit.pooling", {}, lower) is None
    assert "real-size stack" in stack_skip(vit, "numerics.dtype_sweep", {"dtype": "float16"}, lower)
    monkeypatch.setenv(ENV, "off")
    assert stack_skip(stack, "masks.causal_no_leak", {}, every) is None


def test_a_real_size_layer_leaves_the_attention_checks_to_its_attention(monkeypatch) -> None:
    """numerics.softmax_long_rows judges the attention's code: at GPT-2 small's size the
    block leaves it to the attention subject of the same implementation, where one exists."""
    from tck.adapters.base import Subject
    from tck.adapters.config_space import ConfigSpace
    from tck.adapters.real_size import ENV, attention_skip

    monkeypatch.delenv(ENV, raising=False)
    space = ConfigSpace(fixed={"d_model": 768, "d_ff": 3072, "n_layers": 12})
    block = Subject("decoder_block[sdpa]", "decoder_block", supports=space)
    attention = Subject("causal_self_attention[sdpa]", "causal_self_attention", supports=space)
    eager = Subject("causal_self_attention[eager]", "causal_self_attention", supports=space)
    long_rows = "numerics.softmax_long_rows"
    assert attention.name in attention_skip(block, long_rows, [eager, attention, block])
    assert attention_skip(block, long_rows, [eager, block]) is None  # no sdpa attention
    assert attention_skip(block, "numerics.dtype_sweep", [attention, block]) is None
    assert attention_skip(attention, long_rows, [attention, block]) is None
    small = ConfigSpace(fixed={"d_model": 32, "d_ff": 64})
    tiny = Subject("decoder_block[sdpa]", "decoder_block", supports=small)
    assert attention_skip(tiny, long_rows, [attention, tiny]) is None
    monkeypatch.setenv(ENV, "off")
    assert attention_skip(block, long_rows, [attention, block]) is None


def test_a_vit_encoder_leaves_its_stack_checks_to_the_vit(monkeypatch) -> None:
    """At real size a ViT's encoder stack leaves its oracle comparison and gradients to the
    vit subject of the same implementation, which holds it whole; it keeps the rest."""
    from tck.adapters.base import Subject
    from tck.adapters.config_space import ConfigSpace
    from tck.adapters.real_size import ENV, container_skip

    monkeypatch.delenv(ENV, raising=False)
    space = ConfigSpace(fixed={"d_model": 768, "d_ff": 3072, "n_layers": 12})
    encoder = Subject("encoder[sdpa]", "encoder", supports=space)
    vit = Subject("vit[sdpa]", "vit", supports=space)
    eager = Subject("vit[eager]", "vit", supports=space)
    for check in ("equality.oracle", "gradients.gradients"):
        assert "vit[sdpa] holds encoder[sdpa] whole" in container_skip(
            encoder, check, [encoder, vit]
        )
    assert container_skip(encoder, "masks.padding_invariance", [encoder, vit]) is None
    assert container_skip(encoder, "equality.oracle", [encoder, eager]) is None  # no sdpa vit
    assert container_skip(encoder, "equality.oracle", [encoder]) is None  # BERT's encoder
    small = Subject(
        "encoder[sdpa]", "encoder", supports=ConfigSpace(fixed={"d_model": 32, "d_ff": 64})
    )
    assert container_skip(small, "equality.oracle", [small, vit]) is None


def test_a_real_size_attention_judges_long_rows_in_bfloat16_on_the_cpu(monkeypatch) -> None:
    """On the CPU a real-size layer's 16-bit long-row softmax runs in bfloat16 alone
    (real_size.LONG_ROW_DTYPES_ON_CPU); float16 is a skip that says why. Elsewhere, and on
    a layer below real size, both run."""
    from types import SimpleNamespace

    from tck.adapters.base import Subject
    from tck.adapters.config_space import ConfigSpace
    from tck.adapters.real_size import ENV
    from tck.conformance.checks import test_softmax_precision as check

    monkeypatch.delenv(ENV, raising=False)
    monkeypatch.setattr(check.spaces, "reach", lambda subject, keys: 8)  # "too short": ran on

    def reason(d_model: int, device: str, dtype: str) -> str:
        space = ConfigSpace(fixed={"d_model": d_model, "d_ff": 4 * d_model})
        subject = Subject("causal_self_attention[sdpa]", "causal_self_attention", supports=space)
        with pytest.raises(pytest.skip.Exception) as skipped:
            harness = SimpleNamespace(device=device, subject=subject, real_size=d_model > 100)
            check.test_softmax_long_rows(harness, dtype)
        return str(skipped.value)

    # a real-size part of a checkpoint (its adapter states a stack plan), not a model of
    # the user's at the same size
    from tck.conformance.toolkit.harness import Harness

    space = ConfigSpace(fixed={"d_model": 768, "d_ff": 3072})
    large = Subject("causal_self_attention[sdpa]", "causal_self_attention", supports=space)
    checkpoint = SimpleNamespace(stack_plan=lambda *args: None)
    assert Harness.real_size.fget(SimpleNamespace(adapter=checkpoint, subject=large))
    assert not Harness.real_size.fget(SimpleNamespace(adapter=object(), subject=large))
    assert "real-size layer on the CPU: bfloat16" in reason(768, "cpu", "float16")
    assert "too short" in reason(768, "cpu", "bfloat16")
    assert "too short" in reason(768, "cuda", "float16")
    assert "too short" in reason(32, "cpu", "float16")


def test_threads_follow_the_stack_plan(monkeypatch) -> None:
    """torch's threads: --tck-threads when given; else 1, except for an adapter with a
    real-size stack, which gets the cores this process may use, shared among xdist workers."""
    from types import SimpleNamespace

    from tck.adapters.base import Subject
    from tck.adapters.config_space import ConfigSpace
    from tck.adapters.real_size import ENV
    from tck.conformance.runner.plugin import _threads

    def config(given: int | None) -> SimpleNamespace:
        return SimpleNamespace(getoption=lambda name: given)

    space = ConfigSpace(fixed={"d_model": 768, "d_ff": 3072, "n_layers": 12})
    large = SimpleNamespace(subjects=lambda: [Subject("encoder", "encoder", supports=space)])
    small = SimpleNamespace(subjects=lambda: [Subject("encoder", "encoder")])
    cores = len(os.sched_getaffinity(0))
    monkeypatch.setattr(os, "getloadavg", lambda: (0.2, 0.2, 0.2))  # an idle machine
    monkeypatch.delenv(ENV, raising=False)
    monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT", raising=False)
    assert _threads(config(None), large) == cores
    assert _threads(config(None), small) == 1
    assert _threads(config(None), None) == 1
    assert _threads(config(3), small) == 3
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", str(2 * cores))
    assert _threads(config(None), large) == 1
    monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT")
    monkeypatch.setattr(os, "getloadavg", lambda: (3.0 * cores, 0.0, 0.0))  # a busy one
    assert _threads(config(None), large) == 1
    monkeypatch.setattr(os, "getloadavg", lambda: (0.2, 0.2, 0.2))
    monkeypatch.setenv(ENV, "off")  # every check everywhere: no real-size stack
    assert _threads(config(None), large) == 1


def test_grad_copies_leave_the_adapters_dict() -> None:
    """The guarded grad hands the check private copies; a plain dict nobody else holds is
    emptied as its arrays are copied (never both held whole), a dict the adapter keeps and
    refills is left whole, and its reused arrays are recorded."""
    import numpy as np

    from tck.conformance.toolkit.calling import GuardedAdapter
    from tck.conformance.toolkit.recorder import Recorder

    class Fresh:
        name = "fresh"

        def grad(self, handle, inputs, cotangent):
            return {"params.a": np.ones(3), "x": np.full(2, 2.0)}

    grads = GuardedAdapter(Fresh(), Recorder()).grad(None, {"x": np.zeros(2)}, np.ones(2))
    assert sorted(grads) == ["params.a", "x"] and grads["x"].tolist() == [2.0, 2.0]

    class Kept:  # keeps its dict and refills it in place: left whole, the reuse recorded
        name = "kept"

        def __init__(self) -> None:
            self.held = {"x": np.zeros(2)}

        def grad(self, handle, inputs, cotangent):
            self.held["x"][...] = inputs["x"]
            return self.held

    record = Recorder()
    kept = Kept()
    guarded = GuardedAdapter(kept, record)
    first = guarded.grad(None, {"x": np.ones(2)}, np.ones(2))
    second = guarded.grad(None, {"x": np.full(2, 3.0)}, np.ones(2))
    assert list(kept.held) == ["x"] and first["x"].tolist() == [1.0, 1.0]
    assert second["x"].tolist() == [3.0, 3.0]
    assert "adapter.output_reused" in record.side_effects


def test_compare_fast_path_is_the_rule() -> None:
    """Where nothing is ignored and both sides are finite, compare takes a shorter path:
    the same comparison as the general one (which an all-False ignore mask forces)."""
    import numpy as np

    from tck.reference.tolerance import careful_error, compare

    rng = np.random.default_rng(7)
    for trial in range(40):
        gold = rng.standard_normal((3, 5, 7)) * 10.0 ** rng.integers(-3, 4)
        test = gold + rng.standard_normal(gold.shape) * 10.0 ** rng.integers(-17, -3)
        test[1, 2, trial % 7] = gold[1, 2, trial % 7]
        nothing = np.zeros(gold.shape, bool)
        for dtype in ("float64", "float32", "bfloat16"):
            fast = compare(test, gold, dtype=dtype, careful_err=1e-6, k=3.0)
            general = compare(test, gold, dtype=dtype, careful_err=1e-6, k=3.0, ignore=nothing)
            facts = ("passed", "max_abs_err", "bound", "ratio", "worst_index", "nan_mismatch")
            assert [getattr(fast, f) for f in facts] == [getattr(general, f) for f in facts]
            assert np.isclose(fast.mean_abs_err, general.mean_abs_err, rtol=1e-12, atol=0)
        assert careful_error(test, gold) == careful_error(test, gold, nothing)
    # not finite: the general path, NaN against a number is a mismatch
    test = gold.copy()
    test[0, 0, 0] = np.nan
    assert compare(test, gold).nan_mismatch == 1


def test_oracle_memo_keys_read_only_parameters_only() -> None:
    """Twin subjects (eager, sdpa) of one checkpoint share read-only parameters: the oracle's
    answers to one check on the first serve the same check on the second, whatever runs in
    between on other parameters. Writable parameters (a loaded instance's) and other inputs
    are never served from the memo."""
    import numpy as np

    from tck.conformance.toolkit.harness import OracleMemo
    from tck.reference import Config, Conventions

    def read_only(array: np.ndarray) -> np.ndarray:
        array.setflags(write=False)
        return array

    params, layer = {"w": read_only(np.ones((2, 2)))}, {"w": read_only(np.ones((2, 2)))}
    inputs = {"x": np.arange(4.0).reshape(1, 2, 2)}
    other = {"x": inputs["x"] + 1}
    config, conventions = Config(), Conventions()
    memo = OracleMemo()
    key = memo.key("linear", inputs, params, config, conventions)
    assert key is not None
    gold = memo.put(key, np.full(3, 2.0), params, owner=1)  # the model, eager
    memo.put(memo.key("linear", other, params, config, conventions), np.zeros(3), params, owner=1)
    memo.put(memo.key("linear", inputs, layer, config, conventions), np.ones(3), layer, owner=2)
    again = memo.get(memo.key("linear", dict(inputs), dict(params), config, conventions), 3)
    assert again is not None and np.array_equal(again, gold)  # the model, sdpa
    assert not again.flags.writeable  # a check writing into it fails loudly
    assert (
        memo.get(memo.key("linear", {"x": inputs["x"] * 3}, params, config, conventions), 3) is None
    )
    assert memo.get(memo.key("ffn", inputs, params, config, conventions), 3) is None
    assert memo.key("linear", inputs, {"w": np.ones((2, 2))}, config, conventions) is None
    memo.release(3)  # the twin's check is over: the model's answers go, layer 0's stay
    assert memo.get(key, 4) is None
    assert memo.get(memo.key("linear", inputs, layer, config, conventions), 4) is not None
    memo.put(memo.key("linear", other, layer, config, conventions), np.zeros(3), layer, owner=5)
    assert memo.get(memo.key("linear", inputs, layer, config, conventions), 6) is None


def test_oracle_memo_drops_answers_no_twin_will_ask() -> None:
    """A finished check's answers wait for its twin while other components' checks run, and
    go when a later check on the same component puts answers for other parameters (another
    dtype's export, a stack without a twin): they are never asked for again."""
    import numpy as np

    from tck.conformance.toolkit.harness import OracleMemo
    from tck.reference import Config, Conventions

    def params() -> dict[str, np.ndarray]:
        array = np.ones((2, 2))
        array.setflags(write=False)
        return {"w": array}

    inputs = {"x": np.arange(4.0).reshape(1, 2, 2)}
    config, conventions = Config(), Conventions()
    stack, layer, other = params(), params(), params()
    memo = OracleMemo()

    def key(component: str, values: dict[str, np.ndarray]) -> object:
        return memo.key(component, inputs, values, config, conventions)

    memo.put(key("encoder", stack), np.zeros(3), stack, owner=1)  # encoder[eager]
    memo.release(1)
    memo.put(key("encoder_layer", layer), np.ones(3), layer, owner=2)  # layer 0 between
    memo.release(2)
    assert memo.get(key("encoder", stack), 3) is not None  # encoder[sdpa]: the twin
    memo.release(3)
    assert memo.get(key("encoder", stack), 4) is None  # used: gone
    memo.put(key("encoder", stack), np.zeros(3), stack, owner=5)  # no twin asks this time
    memo.release(5)
    memo.put(key("encoder", other), np.ones(3), other, owner=6)  # the same component again
    assert memo.get(key("encoder", stack), 7) is None
    assert memo.get(key("encoder", other), 7) is not None
    assert memo.get(key("encoder_layer", layer), 7) is not None  # another component: kept


COUNT_LOADS = """
import sys
from tck.adapters import pretrained
from tck.cli import main

loads, OUT = [], sys.argv[2]
bert = pretrained.BUILDERS["bert"]
pretrained.BUILDERS["bert"] = lambda folder: loads.append(folder) or bert(folder)
try:
    code = main(["run", "--model", sys.argv[1], "-n", "0", "--only", "embedding", "--out", OUT])
except SystemExit as done:
    code = done.code
print("exit", code)
print("loads", len(loads))
"""


def test_checkpoint_read_once_per_process(tmp_path) -> None:
    """tck run -n 0 hands the adapter it loaded to the checks: the checkpoint is read (and
    held) once in the process, not once by the command and again by the checks' plugin."""
    _save_bert(tmp_path / "model")
    done = subprocess.run(
        [sys.executable, "-c", COUNT_LOADS, str(tmp_path / "model"), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "HYPOTHESIS_PROFILE": "ci"},
    )
    assert "exit 0" in done.stdout and "loads 1" in done.stdout, (
        done.stdout[-2000:] + done.stderr[-2000:]
    )


def test_reference_gradients_kept_only_for_a_twin_that_asks(tmp_path, monkeypatch) -> None:
    """hf.vit's eager stacks run in float32 only and their sdpa twins in float64: the float64
    reference gradients of the eager stack's check are kept for nobody (they were held until
    a later check on the same component: 0.65 GB each at ViT-B/16's size). Twins in the same
    dtype (a decoder's float64 stacks) still share them."""
    from support.hf_checkpoints import save_vit

    from tck.adapters import pretrained
    from tck.conformance.toolkit import careful
    from tck.conformance.toolkit.harness import GRADIENT_MEMO, Harness, give_back_freed_memory

    monkeypatch.setenv("TCK_STACK_PLAN", "on")
    save_vit(
        tmp_path / "vit",
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=48,
        image_size=32,
        patch_size=16,
    )
    adapter = pretrained.vit(tmp_path / "vit")
    by_name = {s.name: s for s in adapter.subjects()}
    eager = Harness(adapter, by_name["encoder[eager]"], seed=0)
    eager.check = "gradients.gradients"
    assert "float64" not in adapter.dtypes(by_name["encoder[eager]"])
    assert not eager.twin_may_ask("float32")  # the sdpa stack runs float64 gradients only
    sdpa = Harness(adapter, by_name["encoder[sdpa]"], seed=0)
    sdpa.check = "gradients.gradients"
    assert not sdpa.twin_may_ask("float64")  # its eager twin has no float64
    GRADIENT_MEMO.clear()
    inst = eager.instance(dtype="float32")
    inputs = eager.inputs(inst)
    out = eager.run(inst, inputs)
    gold = careful.gold_gradients(eager, inst, inputs, np.ones_like(out))
    assert gold and not GRADIENT_MEMO._entries  # computed, not kept
    eager.release()
    give_back_freed_memory()  # where there is no glibc, nothing


def test_twins_in_one_dtype_may_ask(tmp_path, monkeypatch) -> None:
    from support.hf_checkpoints import save_bert as save

    from tck.adapters import pretrained
    from tck.conformance.toolkit.harness import Harness

    monkeypatch.setenv("TCK_STACK_PLAN", "on")
    save(
        tmp_path / "bert",
        vocab_size=50,
        hidden_size=32,
        num_hidden_layers=2,
        intermediate_size=64,
        max_position_embeddings=POSITIONS,
    )
    adapter = pretrained.bert(tmp_path / "bert")
    subject = next(s for s in adapter.subjects() if s.name == "encoder[eager]")
    h = Harness(adapter, subject, seed=0)
    h.check = "equality.oracle"
    assert h.twin_may_ask("float64")
    h.check = "gradients.gradients"
    assert not h.twin_may_ask("float16")  # the stack's float16 gradients are layer 0's
    # and its float64 ones the eager stack's alone (real_size.TWIN_LEAVES): nothing is kept
    assert not h.twin_may_ask("float64")
