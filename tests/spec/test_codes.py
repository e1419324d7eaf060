"""The registry of diagnosis codes (tck.reference.codes) and the convention catalogue
(tck.reference.catalogue): every code the suite emits is registered, SPEC.md's Appendix C is
the registry's table, and every probed convention value has a code, words and a clause."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from test_check_ids import declared_ids

from tck.adapters import mutants
from tck.conformance.toolkit.harness import FIELDS
from tck.reference import catalogue, codes
from tck.reference.conventions import CHOICES
from tck.reports.causes import is_generic, specificity

ROOT = Path(__file__).resolve().parents[2]
# Where codes are emitted or expected: the checks, the adapters and mutants, the reports.
EMITTERS = ("conformance", "adapters", "reports", "fixtures", "bench", "reference")
CODE_SHAPED = re.compile(r"[a-z][a-z0-9_]*\.[a-z][a-z0-9_]*")
# Dotted strings with a code's area that are not codes: parameter names (SPEC.md §0.5) and
# checkpoint file names (model.safetensors).
NOT_CODE_SUFFIXES = (".weight", ".bias", ".safetensors", ".pth", ".bin", ".json", ".onnx")
# Attribute paths into third-party modules whose first name happens to be a code area.
MODULE_PATHS = frozenset(
    {
        "vit.layers",
        "vit.layernorm",
        "model.rotary_emb",
        "model.layers",
    }  # transformers' ViTModel, LlamaModel
)


def code_literals() -> dict[str, set[str]]:
    """Every code-shaped string constant of the emitting packages whose area is a code
    area: literal -> the files it is in."""
    found: dict[str, set[str]] = {}
    for folder in EMITTERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            ids = {  # a check's declared id (@spec(..., id=...)): checked by test_check_ids
                id(k.value) for k in ast.walk(tree) if isinstance(k, ast.keyword) and k.arg == "id"
            }
            for node in ast.walk(tree):
                if id(node) in ids:
                    continue
                if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
                    continue
                text = node.value
                if not CODE_SHAPED.fullmatch(text) or text.endswith(NOT_CODE_SUFFIXES):
                    continue
                if text.split(".", 1)[0] in codes.AREAS and text not in MODULE_PATHS:
                    found.setdefault(text, set()).add(str(path.relative_to(ROOT)))
    return found


@pytest.mark.spec("0.3")
def test_every_code_literal_is_registered_or_a_check_id():
    ids = declared_ids()
    unknown = {
        text: sorted(where)
        for text, where in code_literals().items()
        if codes.lookup(text) is None and text not in ids
    }
    assert not unknown, f"code-shaped strings that are no registered code (typo?): {unknown}"


def test_the_scan_sees_codes_and_would_catch_a_typo():
    literals = code_literals()
    assert "mask.polarity_inverted" in literals and "state.leaks_between_calls" in literals
    assert len(literals) > 80
    assert codes.lookup("mask.polarity_inverted") is not None
    assert codes.lookup("mask.polarity_invertd") is None
    with pytest.raises(codes.UnknownCode):
        codes.code("mask.polarity_invertd")
    assert codes.code("attention.oracle_mismatch") == "attention.oracle_mismatch"
    assert codes.code("masks.polarity.assertion")  # a family: <check id>.assertion


def test_every_mutants_expected_code_is_registered():
    for name in mutants.NAMES:
        for code in mutants.expected_codes(name) | mutants.diagnosis_codes(name):
            assert codes.lookup(code) is not None, f"mutants.{name} expects unknown {code!r}"


def test_every_registered_code_has_area_rank_clauses_and_words():
    clauses = set(re.findall(r"^### §(\d+\.\d+) ", (ROOT / "SPEC.md").read_text("utf-8"), re.M))
    for entry in codes.CODES.values():
        assert entry.rank in codes.RANKS and entry.meaning, entry
        assert entry.area in codes.AREAS or entry.area == "*", entry
        assert set(entry.clauses) <= clauses, f"{entry.name} cites clauses SPEC.md lacks"


@pytest.mark.spec("0.3")
def test_spec_appendix_c_is_the_registry():
    spec = (ROOT / "SPEC.md").read_text(encoding="utf-8")
    match = re.search(r"<!-- codes:begin -->\n(.*?)\n<!-- codes:end -->", spec, re.S)
    assert match, "SPEC.md has no generated Appendix C (<!-- codes:begin --> ... end)"
    assert match.group(1) == codes.markdown_table(), (
        "SPEC.md's Appendix C differs from tck.reference.codes: regenerate it with "
        "python -m tck.reference.codes"
    )
    in_spec = set(re.findall(r"^\| `([^`]+)` \|", match.group(1), re.M))
    assert in_spec == set(codes.CODES)


def test_rank_classes_keep_the_root_cause_order():
    assert specificity("state.leaks_between_calls") == 3
    assert specificity("dropout.active_in_eval") == 3
    assert specificity("layer_norm.eps_outside_sqrt") == 2
    assert specificity("mask.ignored") == 1
    assert specificity("attention.oracle_mismatch") == 0
    assert specificity("masks.polarity.assertion") == 0
    assert specificity("layer_norm.fixture_mismatch") == 0
    assert is_generic("adapter.exception") and is_generic("skip") and is_generic("")
    # codes the registry does not know (an older results.json, joined side effects)
    assert specificity("adapter.input_modified,adapter.output_reused") == 2
    assert specificity("someone.elses_oracle_mismatch.oracle_mismatch") == 0


@pytest.mark.spec("0.3")
def test_the_catalogue_covers_every_probed_field_and_value():
    probed = {f for names in FIELDS.values() for f in names}
    assert probed <= set(catalogue.FIELD_CLAUSES)
    for field in probed:
        values = CHOICES.get(field, ())
        for value in values or (1e-3,):
            entry = catalogue.choice(field, value)
            assert entry.words and entry.clauses and codes.lookup(entry.code), entry
        assert codes.lookup(catalogue.declared_code(field))
    assert catalogue.convention_code("eps_placement", "outside_sqrt") == (
        "layer_norm.eps_outside_sqrt"
    )
    assert catalogue.plain_words("eps", 1e-6) == "uses LayerNorm eps = 1e-06"
    assert catalogue.choice("variance", "biased").canonical
    with pytest.raises(KeyError):
        catalogue.choice("variance", "sometimes")
