"""Subjects declare what they can be (SPEC.md §0.6): ``ConfigSpace``.

Unit tests of ``resolve`` / ``admits`` and of the suite's side (``tck.conformance.toolkit.spaces``),
then whole runs of user-style modules (tests/support/user_models.py): an MLP hard-coded at
4 x d_model, a positional table of 5000 rows, heads 64 wide, attention without bias with an
FFN with one, and subjects that take at most 16 positions. Each runs with no failure and is
not skipped whole; the same modules without a declaration are not checked.
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from tck.adapters import ConfigSpace, Subject, Times, Unsupported
from tck.conformance.toolkit import spaces
from tck.conformance.toolkit.harness import DEFAULT_CONFIG
from tck.reference import Config
from tck.reference.inputs import Shape, make_inputs

pytestmark = pytest.mark.spec("0.5", "0.6", "2.2", "10.6")

TESTS = Path(__file__).resolve().parents[1]  # tests/: support.* imports from here


# ------------------------------------------------------------------------------ resolve


def test_relations_head_width_biases_and_tying_are_applied() -> None:
    space = ConfigSpace(
        relations={"d_ff": Times("d_model", 4)},
        head_dim=64,
        biases={"attention": False, "ffn": True},
        tied=False,
        max_len=5000,
    )
    config = space.resolve({}, DEFAULT_CONFIG)
    assert isinstance(config, Config)
    assert config.d_model == DEFAULT_CONFIG.n_heads * 64 == config.n_heads * 64
    assert config.head_dim_k == config.head_dim_v == 64
    assert config.d_ff == 4 * config.d_model
    assert (config.attention_bias, config.ffn_bias, config.tie_weights) == (False, True, False)
    assert config.max_len == 5000
    assert space.admits(config) is None
    # what the check needs and the space allows is kept; d_model follows the heads
    two = space.resolve({"n_heads": 2}, DEFAULT_CONFIG)
    assert isinstance(two, Config) and (two.d_model, two.d_ff) == (128, 512)
    assert space.resolve({"d_k": 64}, DEFAULT_CONFIG).head_dim_k == 64  # type: ignore[union-attr]
    # the rest of the default config is untouched
    assert (config.vocab_size, config.n_layers, config.image_size) == (23, 2, 8)


@pytest.mark.parametrize(
    "space,overrides,words",
    [
        (ConfigSpace(head_dim=64), {"d_k": 32}, "64 wide"),
        (ConfigSpace(head_dim=64), {"d_model": 100}, "d_model = n_heads * 64"),
        (ConfigSpace(relations={"d_ff": Times("d_model", 4)}), {"d_ff": 40}, "d_ff = 4 * d_model"),
        (ConfigSpace(max_len=5000), {"max_len": 60000}, "at most 5000"),
        (ConfigSpace(fixed={"n_layers": 6}), {"n_layers": 1}, "n_layers=6"),
        (ConfigSpace(biases={"attention": False}), {"attention_bias": True}, "attention_bias"),
        (ConfigSpace(tied=True), {"tie_weights": False}, "tie_weights=True"),
        (ConfigSpace(choices={"n_heads": (1, 2)}), {"n_heads": 4}, "n_heads in (1, 2)"),
    ],
)
def test_a_need_outside_the_space_is_a_reason_naming_the_constraint(space, overrides, words):
    reason = space.resolve(overrides, DEFAULT_CONFIG)
    assert isinstance(reason, str) and words in reason, reason
    subject = Subject("s", "encoder_layer", supports=space)
    with pytest.raises(Unsupported, match="s \\("):  # the check's skip names the subject
        spaces.subject_config(subject, DEFAULT_CONFIG, overrides)


def test_max_len_asked_by_a_check_is_a_minimum() -> None:
    space = ConfigSpace(max_len=5000)
    assert space.resolve({"max_len": 300}, DEFAULT_CONFIG).max_len == 5000  # type: ignore[union-attr]
    assert space.resolve({"max_len": 5000}, DEFAULT_CONFIG).max_len == 5000  # type: ignore[union-attr]


def test_choices_take_the_value_nearest_the_default() -> None:
    space = ConfigSpace(choices={"n_heads": (1, 3, 8), "d_model": (48, 96)})
    config = space.resolve({}, DEFAULT_CONFIG)
    assert isinstance(config, Config) and (config.n_heads, config.d_model) == (3, 48)


def test_a_declaration_that_names_nothing_real_is_refused() -> None:
    with pytest.raises(ValueError, match="d_hidden"):
        ConfigSpace(fixed={"d_hidden": 3})
    with pytest.raises(ValueError, match="mlp"):
        ConfigSpace(biases={"mlp": True})
    with pytest.raises(ValueError, match="max_len"):
        ConfigSpace(max_len=0)


def test_admits_names_the_broken_constraint() -> None:
    space = ConfigSpace(relations={"d_ff": Times("d_model", 4)}, biases={"attention": False})
    wrong_ff = Config(d_model=8, n_heads=2, d_ff=3, attention_bias=False)
    assert "d_ff = 4 * d_model" in str(space.admits(wrong_ff))
    good = Config(d_model=8, n_heads=2, d_ff=32, attention_bias=False)
    assert space.admits(good) is None
    assert "attention_bias=True" in str(
        space.admits(dataclasses.replace(good, attention_bias=None))
    )


def test_subjects_that_declare_nothing_get_what_they_always_got() -> None:
    plain = Subject("mha", "mha")
    assert spaces.subject_config(plain, DEFAULT_CONFIG, {}) == DEFAULT_CONFIG
    assert spaces.subject_config(plain, DEFAULT_CONFIG, {"d_k": 64}) == dataclasses.replace(
        DEFAULT_CONFIG, d_k=64
    )
    fixed = Subject("mha", "mha", config={"attention_bias": False})  # fixed wins, as before
    got = spaces.subject_config(fixed, DEFAULT_CONFIG, {"attention_bias": True})
    assert got == dataclasses.replace(DEFAULT_CONFIG, attention_bias=False)
    assert spaces.max_length(plain) is None and spaces.reach(plain, 60000) == 60000
    spaces.require_config(plain, Config(d_model=8, n_heads=2))  # no space: nothing refused
    shape = Shape(batch=1, lq=113, lk=113)
    assert spaces.fit_shape(shape, spaces.max_length(plain)) is shape


def test_fields_the_subject_fixes_join_its_space() -> None:
    subject = Subject(
        "s",
        "encoder",
        config={"n_layers": 1},
        supports=ConfigSpace(max_len=16, relations={"d_ff": Times("d_model", 2)}),
    )
    config = spaces.subject_config(subject, DEFAULT_CONFIG, {})
    assert (config.n_layers, config.d_ff, config.max_len) == (1, 48, 16)
    with pytest.raises(Unsupported, match="n_layers=1"):
        spaces.subject_config(subject, DEFAULT_CONFIG, {"n_layers": 2})
    assert spaces.declared([subject, Subject("t", "mha")]) == {
        "supports": {"s": "n_layers=1; d_ff = 2 * d_model; at most 16 positions"}
    }
    assert spaces.declared([Subject("t", "mha")]) == {}


# ------------------------------------------------------------------------------ lengths


def test_fit_shape_keeps_padded_rows_padded() -> None:
    fitted = spaces.fit_shape(Shape(batch=3, lq=29, lk=29, lengths=(29, 20, 3)), 16)
    assert (fitted.lq, fitted.lk, fitted.lengths) == (16, 16, (16, 15, 3))
    assert spaces.fit_shape(Shape(batch=2, lq=5, lk=7), 16) == Shape(batch=2, lq=5, lk=7)


@pytest.mark.parametrize(
    "component,shape,length",
    [
        ("encoder_layer", Shape(batch=2, lq=13, lk=13), 13),
        ("mha", Shape(batch=2, lq=5, lk=17), 17),
        ("attention", Shape(batch=2, lq=3, lk=9), 9),
        ("sinusoidal_pe", Shape(batch=1, lq=11, lk=11), 11),
        ("seq2seq", Shape(batch=2, lq=4, lk=19), 19),
    ],
)
def test_call_length_is_the_longest_axis(component: str, shape: Shape, length: int) -> None:
    config = dataclasses.replace(DEFAULT_CONFIG)
    inputs = make_inputs(component, config, np.random.default_rng(0), shape)
    assert spaces.call_length(component, inputs) == length
    subject = Subject("s", component, supports=ConfigSpace(max_len=length - 1))
    with pytest.raises(Unsupported, match=f"at most {length - 1}"):
        spaces.require_length(subject, inputs)
    spaces.require_length(Subject("s", component, supports=ConfigSpace(max_len=length)), inputs)


def test_strategies_draw_inside_the_current_subject() -> None:
    spaces.use(Subject("s", "mha", supports=ConfigSpace(max_len=6)))
    try:
        assert spaces.length_cap(9) == 6 and spaces.length_cap(4) == 4
    finally:
        spaces.use(None)
    assert spaces.length_cap(9) == 9
    with pytest.raises(Unsupported, match="needs sequences of 3 positions"):
        spaces.too_short(3, 2)
    spaces.too_short(3, 3)


# ------------------------------------------------------------------------------ whole runs


def _run(adapter: str, tmp_path: Path, *args: str) -> dict:
    from support.forked_run import tck_run

    out, log = tmp_path / "out", tmp_path / "log.txt"
    code = tck_run(
        ["--adapter", adapter, "--out", str(out), *args], cwd=TESTS, log=log, timeout_s=900
    )
    document = json.loads((out / "results.json").read_text())
    document["exit_code"] = code
    document["log"] = log.read_text(errors="replace")[-3000:]
    return document


def _by_status(document: dict) -> dict[str, Counter]:
    out: dict[str, Counter] = {}
    for row in document["results"]:
        out.setdefault(row["subject"], Counter())[row["status"]] += 1
    return out


def _status(document: dict, check: str, subject: str) -> set[str]:
    return {
        r["status"] for r in document["results"] if (r["check"], r["subject"]) == (check, subject)
    }


def test_user_modules_run_at_their_own_sizes(tmp_path: Path) -> None:
    """An MLP at 4 x d_model, a 5000-row table, heads 64 wide, the paper's bias layout: 0
    failures, and every subject has its oracle or property checks passing."""
    document = _run("support.user_models:adapter", tmp_path)
    summary = document["summary"]
    assert summary["failed"] == 0 and summary["errors"] == 0, (summary, document["log"])
    assert document["exit_code"] == 0, document["log"]
    counts = _by_status(document)
    assert set(counts) == {"ffn", "sinusoidal_pe", "mha", "encoder_layer"}
    for subject, count in counts.items():
        assert count["pass"] >= 15, (subject, count)  # not skipped whole
    for subject in ("ffn", "mha", "encoder_layer"):
        assert _status(document, "equality.oracle", subject) == {"pass"}, subject
    # the refusal is probed at the table's own length, and the long-position checks run
    # up to it
    assert _status(document, "shapes.rejects_beyond_max_len", "sinusoidal_pe") == {"pass"}
    for check in ("positional.frequencies", "positional.relative", "positional.bounded"):
        assert _status(document, check, "sinusoidal_pe") == {"pass"}, check
    rows = [r for r in document["results"] if r["subject"] == "encoder_layer"]
    sizes = {r["metrics"].get("d_model") for r in rows if r.get("metrics")} - {None}
    assert sizes <= {256}, sizes
    supports = document["adapter"]["supports"]  # the declarations, in words
    assert "d_ff = 4 * d_model" in supports["ffn"] and "5000" in supports["sinusoidal_pe"]
    # a check a subject cannot be configured for skips, and its reason names the constraint
    skipped = [r for r in document["results"] if r["status"] == "skip"]
    fixture = next(r for r in skipped if r["check"] == "fixtures.ffn_relu")
    assert "d_ff = 4 * d_model" in json.dumps(fixture)


def test_the_same_modules_undeclared_are_not_checked(tmp_path: Path) -> None:
    """Without ``supports`` the MLP cannot be loaded at d_ff=40 and the 5000-row table
    accepts position 128: what the declaration changes."""
    document = _run("support.user_models:undeclared", tmp_path, "--only", "ffn,sinusoidal_pe")
    assert _status(document, "equality.oracle", "ffn") != {"pass"}
    too_long = [
        r
        for r in document["results"]
        if (r["check"], r["subject"]) == ("shapes.rejects_beyond_max_len", "sinusoidal_pe")
    ]
    assert too_long and too_long[0]["status"] == "fail"
    assert "shape.accepts_too_long" in json.dumps(too_long[0])


def test_a_subject_of_16_positions_is_never_fed_17_except_by_the_probe(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "lengths.txt"
    monkeypatch.setenv("TCK_TEST_LENGTHS", str(log))  # the forked run inherits it
    document = _run("support.user_models:short", tmp_path)
    summary = document["summary"]
    assert summary["failed"] == 0 and summary["errors"] == 0, (summary, document["log"])
    counts = _by_status(document)
    assert counts["encoder_layer"]["pass"] >= 20 and counts["sinusoidal_pe"]["pass"] >= 5, counts
    calls = Counter(tuple(line.split()) for line in log.read_text().splitlines())
    lengths = {(component, int(n)) for component, n in calls}
    assert max(n for c, n in lengths if c == "encoder_layer") == 16  # the fixed shapes, cut
    over = {(c, n): calls[(c, str(n))] for c, n in lengths if n > 16}
    # only the too-long probe, once, at the subject's own limit + 1; it expects the refusal
    assert over == {("sinusoidal_pe", 17): 1}, over
    assert _status(document, "shapes.rejects_beyond_max_len", "sinusoidal_pe") == {"pass"}


def test_attention_output_bias_is_its_own_part() -> None:
    """SPEC.md §0.5: "attention" alone covers q, k, v and the output projection (as it did
    before the output projection had its own switch); "attention_out" sets o apart (ViT's
    qkv_bias=False keeps o's bias; Qwen2 drops it and keeps q, k, v's)."""
    vit_like = ConfigSpace(biases={"attention": False, "attention_out": True})
    config = vit_like.resolve({}, DEFAULT_CONFIG)
    assert isinstance(config, Config)
    assert (config.has_attention_bias, config.has_attention_out_bias) == (False, True)
    assert "attention output projection with bias" in vit_like.describe()
    whole = ConfigSpace(biases={"attention": False})
    resolved = whole.resolve({}, DEFAULT_CONFIG)
    assert isinstance(resolved, Config) and not resolved.has_attention_out_bias
    assert "attention_out_bias=True" in str(whole.admits(config))
    qwen2 = Config(attention_bias=True, attention_out_bias=False)
    assert "attention_out_bias=False" in str(ConfigSpace(biases={"attention": True}).admits(qwen2))


# --------------------------------------------------------- the built-in adapters' limits


def test_split_heads_keeps_one_head_width_of_d_model_over_n_heads() -> None:
    """SPEC.md §3.3: a module that cuts d_model into n_heads equal heads takes no other head
    width; a need of one is a reason naming the constraint, a config with one is refused."""
    space = ConfigSpace(split_heads=True)
    config = space.resolve({"n_heads": 3}, DEFAULT_CONFIG)
    assert isinstance(config, Config) and config.head_dim_k == config.head_dim_v == 8
    assert space.resolve({"d_k": 6}, DEFAULT_CONFIG).d_k is None  # type: ignore[union-attr]
    for overrides in ({"d_k": 5}, {"d_v": 12}, {"d_model": 25}):
        reason = space.resolve(overrides, DEFAULT_CONFIG)
        assert isinstance(reason, str) and "split_heads" in reason, (overrides, reason)
    assert space.admits(Config(d_model=24, n_heads=4, d_k=6, d_v=6)) is None
    assert "d_model / n_heads" in str(space.admits(Config(d_model=24, n_heads=4, d_k=8)))
    assert space.describe() == "d_k = d_v = d_model / n_heads"


def _declared(name: str) -> dict[str, str]:
    from tck.adapters import load_adapter

    return spaces.declared(load_adapter(name).subjects())["supports"]


def test_torch_nn_declares_the_limits_of_nn_multiheadattention() -> None:
    """torch.nn's subjects built on nn.MultiheadAttention declare one head width (the checks
    that need another skip naming it); the fast path its bias; seq2seq its tied tables. The
    limits reach the results (``adapter.supports``) and so the report and fingerprint."""
    from tck.adapters import load_adapter

    said = _declared("torch.nn")
    assert "d_k = d_v = d_model / n_heads" in said["encoder_layer"]
    assert "attention with bias" in said["mha[self_fast_path]"]
    assert "tied embedding and head" in said["seq2seq"]
    assert "layer_norm" not in said and "attention" not in said  # no limit, none declared
    mha = next(s for s in load_adapter("torch.nn").subjects() if s.name == "mha")
    with pytest.raises(Unsupported, match="split_heads"):
        spaces.subject_config(mha, DEFAULT_CONFIG, {"d_k": 5, "d_v": 7})
    # and the adapter builds every config the space gives
    adapter = load_adapter("torch.nn")
    for subject in adapter.subjects():
        if subject.supports is not None and "cpu" in adapter.devices(subject):
            config = spaces.subject_config(subject, DEFAULT_CONFIG, {"n_heads": 2})
            adapter.build(subject, config, seed=0)


def test_transformers_adapters_declare_their_fixed_biases_and_tying() -> None:
    pytest.importorskip("transformers")
    bert, vit, gpt2 = _declared("hf.bert"), _declared("hf.vit"), _declared("hf.gpt2")
    assert "ffn with bias" in bert["encoder_layer[eager]"]
    assert "attention with bias" in bert["mha[sdpa]"]
    # ViTConfig.qkv_bias switches q, k and v alone (SPEC.md §0.5): free, the rest fixed
    assert "attention with bias" not in vit["mha[eager]"]
    assert "attention output projection with bias" in vit["mha[eager]"]
    assert "tied embedding and head" in gpt2["causal_lm[eager]"]
    assert "n_kv_heads=None" in gpt2["causal_self_attention[sdpa]"]


def test_timm_declares_every_bias_but_qkv() -> None:
    try:
        from tck.adapters import timm_vit
    except ImportError:
        pytest.skip("timm is not installed (tox -e timm)")
    said = timm_vit.SPACE.describe()
    assert "head with bias" in said and "attention with bias" not in said
