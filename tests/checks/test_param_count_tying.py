"""params.count names the tying when the count is the spec's under the other ``tie_weights``
(SPEC.md §8.3, §10.3): a Llama whose head is the token table where its config unties them
holds one matrix fewer, and says so with ``model.head_tied_to_embedding``; a count off by
exactly the rows of a tensor the map reads in slices (OPT's position table with its 2
offset rows) is shown as a convention row; a count off by anything else stays
``params.count_wrong``."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.check_rows import check_rows
from torch import nn

from tck.adapters import Param, TorchModuleAdapter
from tck.adapters.mutants import gpt_tutorial

pytestmark = pytest.mark.spec("8.3", "10.3")


class TiedLlama(gpt_tutorial.Llama):
    def __init__(self, *args, **kw):  # type: ignore[no-untyped-def]
        super().__init__(*args, **kw)
        self.output.weight = self.tok_embeddings.weight  # one matrix: the config unties them


class ExtraLlama(gpt_tutorial.Llama):
    def __init__(self, *args, **kw):  # type: ignore[no-untyped-def]
        super().__init__(*args, **kw)
        self.spare = nn.Linear(3, 5)  # held, never used: 20 parameters no tying explains


class OffsetEmbedding(nn.Embedding):
    """OPT's learned positions: two rows before position 0 (``positions + 2``)."""

    def forward(self, positions):  # type: ignore[no-untyped-def]
        return super().forward(positions + 2)


class OffsetGPT(gpt_tutorial.GPT):
    def __init__(self, c):  # type: ignore[no-untyped-def]
        super().__init__(c)
        self.wpe = OffsetEmbedding(c.max_len + 2, c.d_model)


def _offset_map(c):  # type: ignore[no-untyped-def]
    return gpt_tutorial.gpt_map(c) | {
        "pos_embedding.weight": Param("wpe.weight", slice=(0, 2, 2 + c.max_len))
    }


tied = TorchModuleAdapter("tied-llama", [gpt_tutorial.llama_entry(TiedLlama)])
offset = TorchModuleAdapter(
    "offset-gpt", [gpt_tutorial.gpt_entry(OffsetGPT, param_map=_offset_map)]
)
extra = TorchModuleAdapter("extra-llama", [gpt_tutorial.llama_entry(ExtraLlama)])


def _count_row(tmp_path: Path, monkeypatch, spec: str) -> dict:
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    [row] = [
        r
        for r in check_rows(tmp_path, "test_params", "test_count", spec)
        if r["check"] == "params.count"
    ]
    return row


def test_a_head_tied_where_the_config_unties_is_named(tmp_path, monkeypatch) -> None:
    row = _count_row(tmp_path, monkeypatch, "test_param_count_tying:tied")
    assert row["status"] == "fail"
    assert row["diagnosis"]["code"] == "model.head_tied_to_embedding", row["diagnosis"]
    assert "tie_weights=False" in row["diagnosis"]["message"]


def test_another_difference_stays_a_count(tmp_path, monkeypatch) -> None:
    row = _count_row(tmp_path, monkeypatch, "test_param_count_tying:extra")
    assert row["diagnosis"]["code"] == "params.count_wrong"


def test_offset_rows_of_a_sliced_table_are_shown_not_failed(tmp_path, monkeypatch) -> None:
    row = _count_row(tmp_path, monkeypatch, "test_param_count_tying:offset")
    assert row["status"] == "convention", row
    assert row["diagnosis"]["code"] == "params.unmapped_slices", row["diagnosis"]
    assert "wpe.weight: " in row["diagnosis"]["message"]
