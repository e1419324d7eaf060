"""The component record is the one place that knows which component is which
(tck.reference.components, docs/architecture.md "The component record").

Library code asks the record (``record(name).has("causal_target")``, ``select("masks")``,
``record(name).level``, its inputs and fields) instead of keeping its own list of
component names. Every module of ours is parsed with ``ast`` (nothing is imported) and two
forms of a hand-kept component fact fail here, naming the file and the line:

- a literal collection (tuple, list, set, the keys of a dict, or the arguments of a call
  such as ``@components("attention", "mha")``) of two or more strings that are all
  component names;
- a comparison of a name containing ``component`` with a component-name string
  (``component == "mha"``, ``tck.component in ("layer_norm", "rms_norm")``).

Allowed: the record itself, and the adapters whose job is a table of the subjects they
offer (ALLOWED_MODULES); a few single nodes with their reason (EXCEPTIONS).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest
import tomllib

from tck.reference.components import COMPONENTS, RECORDS, TAGS, Component, select

ROOT = Path(__file__).resolve().parents[2]

NAMES = frozenset(COMPONENTS)

# Modules that may name components, with the reason.
ALLOWED_MODULES: dict[str, str] = {
    "reference/components.py": "the record itself",
    "adapters/pretrained.py": "the subjects a checkpoint folder offers, and their parts",
    "adapters/timm_pretrained.py": "the subjects a timm checkpoint offers, and their parts",
    "adapters/real_size.py": "the subjects the real-size plan runs at full size",
    "adapters/reference.py": "the reference adapter's forward for each subject it offers",
    "adapters/hf_decoder.py": (
        "hf.gpt2 and hf.llama's subjects, and the steps transformers' module behind each "
        "computes in float32 (SPEC.md §10.12)"
    ),
}
# Single nodes that may name components: (file, the node's source as ast.unparse writes
# it) -> the reason.
EXCEPTIONS: dict[tuple[str, str], str] = {
    ("reference/conventions.py", "('layer_norm', 'rms_norm')"): (
        "the values of the convention field norm_kind (SPEC.md §5) are named like the norms"
    ),
    ("adapters/instance.py", "('gated_ffn', 'causal_self_attention', 'decoder_block')"): (
        "the subjects of hf_decoder's table that a transformers decoder layer instance offers"
    ),
    ("adapters/instance.py", "entry.component == 'encoder_layer'"): (
        "the torch.nn-instance adapter's subject table: its layer takes the instance's "
        "conventions, its mha the canonical ones"
    ),
}


def _strings(node: ast.AST) -> list[str]:
    return [
        e.value for e in ast.walk(node) if isinstance(e, ast.Constant) and isinstance(e.value, str)
    ]


def _names_only(elements: list[ast.expr]) -> bool:
    """Two or more string literals among ``elements``, every one a component name."""
    strings = [
        e.value for e in elements if isinstance(e, ast.Constant) and isinstance(e.value, str)
    ]
    return len(strings) >= 2 and all(s in NAMES for s in strings)


def _mentions_component(node: ast.expr) -> bool:
    name = node.id if isinstance(node, ast.Name) else getattr(node, "attr", "")
    return "component" in name.lower()


def offences(source: str, filename: str = "<planted>") -> Iterator[tuple[int, str]]:
    """(line, the offending node's source) for each hand-kept component fact in ``source``."""
    tree = ast.parse(source, filename=filename)
    literal_types: set[int] = set()  # typing.Literal["a", "b"]: a type, not a collection
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and getattr(node.value, "id", "") == "Literal":
            literal_types.update(id(n) for n in ast.walk(node.slice))
    for node in ast.walk(tree):
        if isinstance(node, ast.Tuple | ast.List | ast.Set) and id(node) not in literal_types:
            if _names_only(node.elts):
                yield node.lineno, ast.unparse(node)
        elif isinstance(node, ast.Dict) and _names_only([k for k in node.keys if k]):
            yield node.lineno, ast.unparse(node)
        elif isinstance(node, ast.Call) and _names_only(node.args):
            yield node.lineno, ast.unparse(node)
        elif isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(_mentions_component(o) for o in operands) and any(
                s in NAMES for o in operands for s in _strings(o)
            ):
                yield node.lineno, ast.unparse(node)


def our_modules() -> Iterator[Path]:
    """Every module the package ships, from pyproject's package-dir (as test_layering)."""
    setup = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    for folder in setup["package-dir"].values():
        yield from sorted((ROOT / folder).rglob("*.py"))


def _library() -> Iterator[tuple[str, int, str]]:
    for path in our_modules():
        relative = path.relative_to(ROOT).as_posix()
        if relative in ALLOWED_MODULES:
            continue
        for line, text in offences(path.read_text(), relative):
            yield relative, line, text


def test_no_component_names_outside_the_record():
    found = [
        f"{file}:{line}: {text}"
        for file, line, text in _library()
        if (file, text) not in EXCEPTIONS
    ]
    assert not found, (
        "component facts kept outside the record (tck.reference.components): ask the record "
        "instead (record(name).has(tag), select(tag), its level, inputs or fields; add a tag "
        "to TAGS where none says it):\n" + "\n".join(found)
    )


def test_the_exceptions_are_still_needed():
    used = {(file, text) for file, _, text in _library()}
    assert set(EXCEPTIONS) <= used, f"stale exceptions: {sorted(set(EXCEPTIONS) - used)}"
    for module in ALLOWED_MODULES:
        assert (ROOT / module).is_file(), f"stale allowed module: {module}"


PLANTED = """
from typing import Literal

IMAGES = ("patch_embed", "vit")
BEARING = frozenset({"attention", "mha", "encoder"})
ORDER = ["layer_norm", "rms_norm"]
ONLY = {"layer_norm": "norm_statistics", "rope": "rope_angles"}

@components("encoder_layer", "decoder_layer")
def test_x(tck):
    if tck.component == "decoder_layer":
        pass
    if component in ("sinusoidal_pe", "rope"):
        pass
    if entry.component != "mha":
        pass

Kind = Literal["layer_norm", "rms_norm"]  # a type's values: not flagged
PARTS = ("attention", "attention_out", "ffn")  # not all component names: not flagged
@components("attention")  # one subject: a check about one component
def test_y(tck):
    if field == "attention":  # not a component variable
        pass
"""


def test_the_scan_catches_planted_component_facts():
    found = {text for _, text in offences(PLANTED)}
    assert found == {
        "('patch_embed', 'vit')",
        "{'attention', 'mha', 'encoder'}",
        "['layer_norm', 'rms_norm']",
        "{'layer_norm': 'norm_statistics', 'rope': 'rope_angles'}",
        "components('encoder_layer', 'decoder_layer')",
        "tck.component == 'decoder_layer'",
        "component in ('sinusoidal_pe', 'rope')",
        "('sinusoidal_pe', 'rope')",
        "entry.component != 'mha'",
    }, found


def test_the_scan_covers_the_library():
    scanned = {path.relative_to(ROOT).as_posix() for path in our_modules()}
    for folder in ("conformance", "reports", "adapters", "fixtures", "bench", "reference"):
        assert any(p.startswith(folder + "/") for p in scanned), folder
    assert "src/tck/cli.py" in scanned


def _fields(**changes: object) -> dict[str, object]:
    from dataclasses import fields

    mha = RECORDS["mha"]
    return {f.name: getattr(mha, f.name) for f in fields(mha)} | changes


def test_records_are_built_with_keywords_only():
    with pytest.raises(TypeError):
        Component(*_fields().values())  # type: ignore[misc]
    assert Component(**_fields(name="mha_copy")).name == "mha_copy"


def test_key_mask_goes_with_the_masks_tag_and_names_an_input():
    with pytest.raises(ValueError, match="go together"):
        Component(**_fields(key_mask=None))
    with pytest.raises(ValueError, match="not one of its inputs"):
        Component(**_fields(key_mask="memory_key_padding"))
    for name in select("masks"):
        assert RECORDS[name].key_mask in {i.name for i in RECORDS[name].inputs}, name


def test_has_and_select_refuse_an_unknown_tag():
    with pytest.raises(ValueError, match="unknown tag 'atention'"):
        RECORDS["mha"].has("atention")
    with pytest.raises(ValueError, match="unknown tag"):
        select("atention")


def test_select_intersects_tags_family_and_level_in_spec_order():
    order = list(COMPONENTS)
    for tags, family, level in (
        (("masks",), None, None),
        (("masks", "self_attention"), None, None),
        ((), "transformer", "layer"),
        (("kv_cache",), "decoder-only", None),
    ):
        chosen = select(*tags, family=family, level=level)
        expected = [
            n
            for n, r in RECORDS.items()
            if set(tags) <= r.tags and family in (None, r.family) and level in (None, r.level)
        ]
        assert list(chosen) == expected and chosen, (tags, family, level)
        assert sorted(chosen, key=order.index) == list(chosen)
    assert select(family="transformer", level="layer") == ("encoder_layer", "decoder_layer")


def test_every_tag_is_carried_by_some_record():
    # A tag no record carries selects nothing: a check parametrised by it would not run.
    carried = set().union(*(r.tags for r in RECORDS.values()))
    assert set(TAGS) == carried, sorted(set(TAGS) - carried)
