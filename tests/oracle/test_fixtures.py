"""The golden fixtures: their format, their rebuild, their CLI, and the checks that use them.

The fixtures and the oracle check each other: every hand-worked value must agree with
tck.reference.oracle, and every stored expectation must still be what the oracle gives.
"""

from __future__ import annotations

import fnmatch
import importlib.util
import io
import json
import re
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pytest
import tomllib

from tck import fixtures
from tck.adapters import TorchModuleAdapter, Unsupported, load_adapter
from tck.adapters import reference as reference_adapter
from tck.cli import main
from tck.conformance.checks import test_fixtures as fixture_checks
from tck.conformance.checks.test_fixtures import run_fixture
from tck.conformance.toolkit.harness import Harness
from tck.conformance.toolkit.results import CheckFailure
from tck.fixtures import cli as fixtures_cli
from tck.fixtures import generate
from tck.reference import COMPONENTS, Config, Conventions, oracle
from tck.reference.expected import expected as oracle_output
from tck.reference.tolerance import FLOOR

ROOT = Path(__file__).resolve().parents[2]
DATA = fixtures.DATA_DIR
ENTRIES = fixtures.entries()
NAMES = [e["name"] for e in ENTRIES]
HAND = [c for c in generate.cases() if c.kind == "hand"]


@pytest.fixture(scope="module")
def rendered() -> dict[str, bytes]:
    return generate.render()


@pytest.fixture
def data_copy(tmp_path: Path) -> Path:
    return Path(shutil.copytree(DATA, tmp_path / "data"))


@pytest.fixture
def cached_rebuild(monkeypatch: pytest.MonkeyPatch, rendered: dict[str, bytes]) -> None:
    """verify's rebuild from one render per module: the generator is deterministic, and the
    rebuild itself is tested by test_rebuild_is_byte_identical and test_verify_passes."""
    monkeypatch.setattr(fixtures_cli, "_rebuild", lambda: dict(rendered))


# ----------------------------------------------------------------------------- format


def test_rebuild_agrees_with_the_shipped_files(rendered: dict[str, bytes]):
    """Byte for byte where the arithmetic is exact; within REBUILD_ULPS where a BLAS kernel
    of another CPU rounds a matmul differently (fixtures/README.md)."""
    on_disk = {p.name for p in DATA.iterdir() if p.is_file()}
    assert on_disk == set(rendered), "run 'tck fixtures build' and commit fixtures/data"
    assert fixtures_cli.verify(DATA) == []


def _perturbed(data: bytes, key: str, change) -> bytes:
    arrays = dict(np.load(io.BytesIO(data), allow_pickle=False))
    arrays[key] = change(arrays[key])
    return fixtures.store.npz_bytes(arrays)


def _rebuilt_with(monkeypatch, rendered, name: str, change) -> None:
    """verify's rebuild as another machine would make it: ``name``'s expected changed."""
    changed = dict(rendered)
    changed[name] = _perturbed(changed[name], "expected", change)
    monkeypatch.setattr(fixtures_cli, "_rebuild", lambda: changed)


@pytest.mark.parametrize("ulps", [1, fixtures_cli.REBUILD_ULPS // 2])
def test_a_rebuild_that_rounds_differently_passes(data_copy, monkeypatch, rendered, ulps, capsys):
    """Another CPU's BLAS: every value of the deepest fixture moved by a few ulps."""

    def nudge(a):
        return a + ulps * np.finfo(a.dtype).eps * np.max(np.abs(a)) * np.sign(a)

    _rebuilt_with(monkeypatch, rendered, "seq2seq_seed000.npz", nudge)
    assert main(["fixtures", "verify", "--dir", str(data_copy)]) == 0, capsys.readouterr().err
    # one ulp of the last place really changes the bytes: the rule is not bytewise
    assert fixtures_cli._rebuild()["seq2seq_seed000.npz"] != rendered["seq2seq_seed000.npz"]


def test_a_rebuild_beyond_the_bound_fails_naming_file_array_and_amount(
    data_copy, monkeypatch, rendered, capsys
):
    def shift(a):
        return a + 4 * fixtures_cli.REBUILD_ULPS * np.finfo(a.dtype).eps * np.max(np.abs(a))

    _rebuilt_with(monkeypatch, rendered, "seq2seq_seed000.npz", shift)
    assert main(["fixtures", "verify", "--dir", str(data_copy)]) == 1
    err = capsys.readouterr().err
    assert f"{data_copy / 'seq2seq_seed000.npz'}: differs from the rebuild" in err
    assert "expected by up to" in err and "beyond the bound" in err


def test_manifest_records_versions_clauses_and_checksums():
    manifest = fixtures.manifest()
    spec = (ROOT / "SPEC.md").read_text(encoding="utf-8")
    clauses = set(re.findall(r"^### §(\d+\.\d+) ", spec, re.MULTILINE))
    assert f"SPEC version {manifest['spec_version']}\n" in spec
    assert manifest["generator_version"] == generate.GENERATOR_VERSION
    assert manifest["format"] == generate.FORMAT_VERSION
    assert len(set(NAMES)) == len(NAMES) >= 20
    for entry in ENTRIES:
        assert entry["component"] in COMPONENTS
        assert entry["clauses"] and set(entry["clauses"]) <= clauses, entry["name"]
        assert entry["kind"] in ("hand", "oracle") and entry["source"]
        assert fixtures.store.sha256((DATA / entry["file"]).read_bytes()) == entry["sha256"]
        tolerance = entry["tolerance"]
        assert tolerance["relative_floor"] == FLOOR[tolerance["dtype"]]
        Conventions(**entry["conventions"])  # valid field names and values
        Config(**entry["config"])


def test_npz_files_read_without_pickle_and_stay_small():
    total = 0
    for entry in ENTRIES:
        path = DATA / entry["file"]
        total += path.stat().st_size
        with np.load(path, allow_pickle=False) as archive:
            assert set(archive.files) == (
                {f"inputs/{k}" for k in entry["inputs"]}
                | {f"params/{k}" for k in entry["params"]}
                | {"expected"}
            )
            assert list(archive["expected"].shape) == entry["output_shape"]
        with zipfile.ZipFile(path) as archive:  # fixed dates: the same arrays, the same bytes
            assert {info.date_time for info in archive.infolist()} == {(1980, 1, 1, 0, 0, 0)}
    total += (DATA / "manifest.json").stat().st_size
    assert total < 5 * 2**20, f"fixtures take {total} bytes; keep them under 5 MB"


def test_npz_bytes_are_deterministic_and_numpy_readable():
    arrays = {"b": np.arange(6.0).reshape(2, 3), "a/x": np.array([True, False])}
    data = fixtures.store.npz_bytes(arrays)
    assert data == fixtures.store.npz_bytes(dict(reversed(arrays.items())))
    with np.load(io.BytesIO(data), allow_pickle=False) as archive:
        assert sorted(archive.files) == ["a/x", "b"]
        np.testing.assert_array_equal(archive["b"], arrays["b"])
    with pytest.raises(ValueError, match="pickle"):
        fixtures.store.npz_bytes({"o": np.array([object()], dtype=object)})


def test_package_data_ships_every_fixture_file():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = pyproject["tool"]["setuptools"]["package-data"]["tck.fixtures"]
    for path in DATA.iterdir():
        relative = path.relative_to(DATA.parent).as_posix()
        assert any(fnmatch.fnmatch(relative, p) for p in patterns), f"{relative} would not ship"


# ------------------------------------------------------------- fixtures <-> the oracle


@pytest.mark.spec("1.1", "2.1", "2.3", "3.1", "4.2", "4.3", "5.1", "5.2")
@pytest.mark.parametrize("case", HAND, ids=[c.name for c in HAND])
def test_hand_value_agrees_with_the_oracle(case):
    assert generate.check_hand_case(case) <= 1e-12 * max(1.0, float(np.abs(case.expected).max()))


@pytest.mark.spec("7.1", "7.2", "8.1", "9.5")
@pytest.mark.parametrize("name", NAMES)
def test_stored_expectation_is_still_the_oracle(name):
    fixture = fixtures.load(name)
    entry = fixture.entry
    conventions = Conventions(**entry["conventions"])  # the fields the output depends on
    gold = oracle_output(
        entry["component"], fixture.inputs, fixture.params, Config(**entry["config"]), conventions
    )
    scale = max(1.0, float(np.abs(fixture.expected).max()))
    np.testing.assert_allclose(fixture.expected, gold, rtol=0, atol=1e-12 * scale)


@pytest.mark.spec("1.1", "4.2", "4.3")
def test_seed_examples_are_recorded_as_the_seeds_give_them():
    seed000 = ROOT.parent / "shared" / "seeds" / "000_284e7708a1b857c4.txt"
    tokens = fixtures.load("seed000_tokens_embedding")
    assert tokens.inputs["ids"].tolist() == [[2, 10, 11, 12, 20, 21, 22, 23, 3]]
    assert "[2, 10, 11, 12, 20, 21, 22, 23, 3]" in (ROOT / "SPEC.md").read_text(encoding="utf-8")
    if seed000.exists():  # the seeds live beside the checkout, not in it
        text = seed000.read_text(encoding="utf-8")
        assert "[2, 10, 11, 12, 20, 21, 22, 23, 3]" in text and "[1,1,1,0,0]" in text
    padding = fixtures.load("seed000_padding_mask").entry["notes"]["seed_keep_mask"]
    keep = oracle.pad_keep_mask_from_ids(np.array([[5, 6, 7, 0, 0]]), padding_idx=0)
    assert keep.astype(int).tolist() == [padding] == oracle.padding_keep_mask([3], 5).tolist()
    subsequent = fixtures.load("seed003_subsequent_mask").entry["notes"]["seed_keep_mask"]
    assert subsequent == [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]]
    assert oracle.causal_keep_mask(4, 4).astype(int).tolist() == subsequent


# --------------------------------------------------------------------------- the CLI


@pytest.mark.spec("0.2")
def test_verify_passes_on_the_shipped_fixtures(capsys):
    assert main(["fixtures", "verify"]) == 0
    out = capsys.readouterr().out
    assert f"{len(ENTRIES)} fixtures" in out and "the rebuild agrees" in out


@pytest.mark.parametrize("name", [*sorted(e["file"] for e in ENTRIES), "manifest.json"])
def test_flipping_one_byte_fails_verify_naming_the_file(name, data_copy, cached_rebuild, capsys):
    path = data_copy / name
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    assert main(["fixtures", "verify", "--dir", str(data_copy)]) == 1
    err = capsys.readouterr().err
    assert str(path) in err, err
    assert all(line.startswith("tck fixtures: ") for line in err.splitlines())


def test_a_tampered_fixture_is_never_used(data_copy, monkeypatch):
    path = data_copy / "attention_2x2.npz"
    data = bytearray(path.read_bytes())
    data[-100] ^= 0x10
    path.write_bytes(bytes(data))
    with pytest.raises(fixtures.FixtureError, match=re.escape(str(path))):
        fixtures.load("attention_2x2", data_copy)
    monkeypatch.setattr(fixtures, "DATA_DIR", data_copy)
    adapter = load_adapter("reference")
    subject = next(s for s in adapter.subjects() if s.name == "attention")
    with pytest.raises(fixtures.FixtureError, match="sha256"):
        run_fixture(Harness(adapter, subject), "attention_2x2")


def test_missing_files_fail_verify_naming_them(data_copy, cached_rebuild, capsys):
    (data_copy / "vit_tiny.npz").unlink()
    assert main(["fixtures", "verify", "--dir", str(data_copy), "--sha-only"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(data_copy / "vit_tiny.npz") in err[0] and "missing" in err[0]
    (data_copy / "manifest.json").unlink()
    assert main(["fixtures", "verify", "--dir", str(data_copy)]) == 1
    assert str(data_copy / "manifest.json") in capsys.readouterr().err


def test_a_stale_or_foreign_file_fails_verify(data_copy, cached_rebuild, capsys):
    shutil.copy(data_copy / "attention_2x2.npz", data_copy / "extra.npz")
    assert main(["fixtures", "verify", "--dir", str(data_copy)]) == 1
    assert "extra.npz: not listed" in capsys.readouterr().err


def test_a_changed_generator_is_reported_with_the_arrays_that_moved(
    data_copy, monkeypatch, rendered, capsys
):
    changed = dict(rendered)
    arrays = dict(np.load(io.BytesIO(changed["attention_2x2.npz"]), allow_pickle=False))
    arrays["expected"] = arrays["expected"] + 1e-3
    changed["attention_2x2.npz"] = fixtures.store.npz_bytes(arrays)
    monkeypatch.setattr(fixtures_cli, "_rebuild", lambda: changed)
    assert main(["fixtures", "verify", "--dir", str(data_copy)]) == 1
    err = capsys.readouterr().err
    assert "attention_2x2.npz: differs from the rebuild" in err
    assert "expected by up to 0.001" in err


def test_build_is_deterministic_on_one_machine(tmp_path, rendered, capsys):
    out = tmp_path / "rebuilt"
    assert main(["fixtures", "build", "--out", str(out)]) == 0
    assert f"wrote {len(ENTRIES) + 1} files" in capsys.readouterr().out
    assert {p.name for p in out.iterdir()} == set(rendered)
    for name, data in rendered.items():
        assert (out / name).read_bytes() == data, name


@pytest.mark.parametrize("name", ["../../etc/passwd", "/etc/passwd", "sub/x.npz", "x.txt"])
def test_a_manifest_path_outside_the_folder_is_refused_unread(data_copy, name, capsys):
    manifest = json.loads((data_copy / "manifest.json").read_text(encoding="utf-8"))
    manifest["fixtures"][0]["file"] = name
    (data_copy / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    assert main(["fixtures", "verify", "--dir", str(data_copy), "--sha-only"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not a .npz file name in the fixture folder" in err[0], err


@pytest.mark.parametrize("target", ["/dev/zero", "/etc/hostname", "folder"])
def test_a_link_or_special_file_is_refused_with_one_line(data_copy, target, capsys):
    path = data_copy / "attention_2x2.npz"
    path.unlink()
    if target == "folder":
        path.mkdir()
    else:
        path.symlink_to(target)
    assert main(["fixtures", "verify", "--dir", str(data_copy), "--sha-only"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(path) in err[0], err
    assert "leads out of the fixture folder" in err[0] or "not a regular file" in err[0]


def test_a_huge_file_is_refused_unread(data_copy, monkeypatch, capsys):
    monkeypatch.setattr(fixtures.store, "MAX_FILE_BYTES", 1000)
    assert main(["fixtures", "verify", "--dir", str(data_copy), "--sha-only"]) == 1
    assert "over the 1000-byte limit" in capsys.readouterr().err


def test_build_into_a_file_is_a_usage_error(tmp_path, capsys):
    target = tmp_path / "a_file"
    target.write_text("")
    assert main(["fixtures", "build", "--out", str(target)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is a file" in err[0]


# -------------------------------------------------------------------------- the checks


def test_one_check_per_fixture_citing_its_clauses():
    for entry in ENTRIES:
        check = getattr(fixture_checks, f"test_{entry['name']}")
        marks = {m.name: m.args for m in check.pytestmark}
        assert marks["spec"] == tuple(entry["clauses"])
        assert marks["components"] == (entry["component"],)


def test_a_broken_manifest_becomes_one_erroring_check(tmp_path, monkeypatch):
    monkeypatch.setattr(fixtures, "DATA_DIR", tmp_path)  # no manifest.json there
    spec = importlib.util.find_spec(fixture_checks.__name__)
    module = importlib.util.module_from_spec(spec)  # a fresh copy, sys.modules untouched
    spec.loader.exec_module(module)
    checks = [n for n in vars(module) if n.startswith("test_")]
    assert checks == ["test_fixture_manifest"]
    with pytest.raises(fixtures.FixtureError, match=r"manifest\.json: missing"):
        module.test_fixture_manifest(None)


# The torch reference under declared conventions that no built-in adapter offers: a correct
# implementation for the fixtures that assume them.
VARIANTS = TorchModuleAdapter(
    "reference-variants",
    [
        reference_adapter.entry("ffn", Conventions(activation="gelu"), "ffn[gelu]"),
        reference_adapter.entry("encoder", Conventions(norm_placement="pre"), "encoder[pre]"),
    ],
)


def _outcomes(adapter_name: str) -> dict[str, list[str]]:
    """fixture -> ['subject: pass' | 'subject: skip (...)'], running the check directly."""
    adapter = VARIANTS if adapter_name == VARIANTS.name else load_adapter(adapter_name)
    outcomes: dict[str, list[str]] = {}
    for entry in ENTRIES:
        for subject in adapter.subjects():
            if subject.component != entry["component"]:
                continue
            try:
                run_fixture(Harness(adapter, subject), entry["name"])
                status = "pass"
            except (pytest.skip.Exception, Unsupported) as why:
                status = f"skip ({why})"
            outcomes.setdefault(entry["name"], []).append(f"{subject.name}: {status}")
    return outcomes


@pytest.fixture(scope="module")
def outcomes() -> dict[str, dict[str, list[str]]]:
    # a CheckFailure propagates from here: a false failure of a correct adapter
    return {name: _outcomes(name) for name in ("reference", "torch.nn", VARIANTS.name)}


@pytest.mark.spec("0.3")
def test_every_fixture_passes_on_a_correct_adapter(outcomes):
    passed = {
        name
        for by_fixture in outcomes.values()
        for name, results in by_fixture.items()
        if any(r.endswith(": pass") for r in results)
    }
    assert passed == set(NAMES), {n: [o.get(n) for o in outcomes.values()] for n in NAMES}
    # the reference adapter offers every component: only a convention keeps it out
    for results in outcomes["reference"].values():
        assert all(r.endswith(": pass") or "assumes" in r for r in results), results


@pytest.mark.spec("3.1", "4.1", "4.3", "4.4", "5.1", "2.1", "2.3", "6.1", "7.3")
@pytest.mark.parametrize(
    ("mutant", "fixture", "code"),
    [
        ("scale_missing", "attention_2x2", "attention.scale_missing"),  # the solved scale names it
        ("mask_polarity_inverted", "seed000_padding_mask", "mask.polarity_inverted"),
        ("causal_bottom_right", "causal_top_left_lq2_lk5", "mask.causal_alignment_bottom_right"),
        ("causal_diagonal_hidden", "seed003_subsequent_mask", "mask.causal_diagonal_hidden"),
        ("layer_norm_eps_ignored", "layer_norm_rows", "layer_norm.eps_wrong"),
        ("pe_precedence", "sinusoidal_pe_d8", "positional.fixture_mismatch"),
        ("rope_layout_mixup", "rope_known_vectors", "rope.layout_half_split"),
        ("gelu_tanh", "ffn_gelu", "ffn.activation_gelu_tanh"),
        ("fully_masked_nan", "attention_fully_masked_row", "mask.fully_masked_rows_nan"),
        ("final_norm_missing", "encoder_pre_ln_stack", "blocks.final_norm_missing"),
    ],
)
def test_hand_fixtures_catch_mutants(mutant, fixture, code):
    adapter = load_adapter(f"mutants.{mutant}")
    component = fixtures.load(fixture).entry["component"]
    subject = next(s for s in adapter.subjects() if s.component == component)
    with pytest.raises(CheckFailure) as caught:
        run_fixture(Harness(adapter, subject), fixture)
    assert caught.value.code == code, caught.value
    assert f"fixture {fixture}" in caught.value.message
