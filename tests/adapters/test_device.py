"""Devices without a GPU: ``tck run --device`` and ``--tck-device`` check the name once and
pass it through one path (Harness.build -> Adapter.build(device=...) ->
TorchModuleAdapter), the oracle stays on the CPU, and SDPA's backend subjects pin their
kernel, skip what the kernel refuses with torch's reason, and skip cleanly where CUDA is
absent. ``tck run --device cpu`` gives the verdicts of the default run (the test that
compares them runs a few components; ``-m device`` runs the whole suite)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from tck.adapters import INPUTS, Adapter, Subject, TorchModuleAdapter, Unsupported, load_adapter
from tck.adapters.devices import (
    DeviceError,
    adapter_devices,
    check_device,
    device_kind,
    require_some_subject_on,
)
from tck.adapters.sdpa import SDPA_BACKENDS, own_reasons, pinned, refused
from tck.adapters.torch_nn import BACKEND_DTYPES, _attention, _pinned, sdpa_backend_entries
from tck.cli import main
from tck.conformance.toolkit import careful
from tck.conformance.toolkit.harness import DEFAULT_CONFIG, Harness
from tck.conformance.toolkit.results import CheckFailure
from tck.reference import Config
from tck.reference.inputs import Shape, make_inputs

TESTS = Path(__file__).resolve().parents[1]  # tests/: support.* imports from here
CUDA = torch.cuda.is_available()
NO_CUDA = "needs a CUDA device (torch.cuda.is_available() is False here)"
BACKEND_SUBJECTS = [
    f"{component}[{backend}]"
    for backend in SDPA_BACKENDS
    for component in ("attention", "mha", "encoder_layer")
]


# ------------------------------------------------------------------ the device name


@pytest.mark.parametrize("bad", ["tpu", "cuda:x", "gpu", "cuda:", "cpu:0", ""])
def test_a_malformed_device_is_one_line(bad):
    with pytest.raises(DeviceError, match="use cpu, cuda or cuda:N") as err:
        check_device(bad)
    assert "\n" not in str(err.value)


def test_cpu_is_always_there_and_kinds_drop_the_index():
    assert check_device("cpu") == "cpu"
    assert device_kind("cuda:3") == "cuda" and device_kind("cpu") == "cpu"


def test_a_cuda_device_that_is_not_here_is_one_line():
    # cuda:7 on this machine: no CUDA at all, or fewer than eight devices
    with pytest.raises(DeviceError) as err:
        check_device("cuda:7" if torch.cuda.device_count() < 8 else "cuda:99")
    message = str(err.value)
    assert "\n" not in message
    assert ("sees no CUDA device" in message) != CUDA
    assert ("CUDA device(s) here" in message) == CUDA


@pytest.mark.parametrize(
    ("device", "message"),
    [
        ("tpu", "unknown --device 'tpu'; use cpu, cuda or cuda:N"),
        ("cuda:7" if not CUDA else "cuda:99", "--device cuda"),
    ]
    + ([] if CUDA else [("cuda", "sees no CUDA device")]),
)
@pytest.mark.parametrize("command", ["run", "bench"])
def test_tck_run_and_bench_refuse_a_device_alike(command, device, message, capsys, tmp_path):
    """One helper (tck.adapters.devices.check_device) for both commands: the same line."""
    args = [command, "--device", device, "--out", str(tmp_path)]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_the_pytest_plugin_refuses_an_unknown_device(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--pyargs",
            "tck.conformance",
            "--tck-adapter=reference",
            "--tck-only=layer_norm",
            "--tck-device=tpu",
            "-p",
            "no:cacheprovider",
            "-q",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert proc.returncode == 4  # pytest's usage error
    assert "unknown --tck-device 'tpu'; use cpu, cuda or cuda:N" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_export_and_a_gpu_device_do_not_mix():
    adapter = load_adapter("reference")
    from tck.conformance.runner.cli import UsageError, require_device

    assert require_device(adapter, "cpu", export="onnx") == "cpu"
    if CUDA:
        with pytest.raises(UsageError, match="runs ONNX Runtime on the CPU"):
            require_device(adapter, "cuda", export="onnx")


# --------------------------------------------------------------- the adapter contract


class _OldAdapter(Adapter):
    """An adapter written before devices (and dtypes): build takes seed only."""

    name = "old"

    def __init__(self) -> None:
        self.built: list[dict[str, Any]] = []

    def subjects(self) -> list[Subject]:
        return [Subject("layer_norm", "layer_norm")]

    def build(self, subject: Subject, config: Config, *, seed: int) -> Any:
        self.built.append({"seed": seed})
        return None

    def params(self, handle: Any) -> dict[str, np.ndarray]:
        return {"weight": np.ones(DEFAULT_CONFIG.d_model), "bias": np.zeros(DEFAULT_CONFIG.d_model)}

    def run(self, handle: Any, inputs: Any) -> np.ndarray:
        x = np.asarray(inputs["x"], dtype=np.float64)
        mean = x.mean(-1, keepdims=True)
        return (x - mean) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)


class _GpuAdapter(_OldAdapter):
    """Says it runs on CUDA, and records what build is given (nothing runs on a GPU)."""

    name = "gpu-recording"

    def devices(self, subject: Subject) -> tuple[str, ...]:
        return ("cpu", "cuda")

    def build(self, subject: Subject, config: Config, *, seed: int, **kwargs: Any) -> Any:
        self.built.append({"seed": seed, **kwargs})
        return None


def test_an_old_adapter_runs_on_the_cpu_and_is_refused_elsewhere():
    old = _OldAdapter()
    subject = old.subjects()[0]
    assert adapter_devices(old, subject) == ("cpu",)
    harness = Harness(old, subject, device="cpu")
    inst = harness.instance()
    assert old.built == [{"seed": 0}]  # no device (nor dtype) keyword: its signature holds
    harness.assert_matches_oracle(inst, harness.inputs(inst))
    with pytest.raises(Unsupported, match=r"runs on cpu, not cuda \(Adapter.devices\)"):
        Harness(old, subject, device="cuda").instance(params=False)
    with pytest.raises(DeviceError, match="runs no subject on cuda"):
        require_some_subject_on(old, "cuda")
    require_some_subject_on(old, "cpu")  # the CPU is always fine


def test_the_harness_passes_the_device_only_when_it_is_not_the_cpu():
    gpu = _GpuAdapter()
    subject = gpu.subjects()[0]
    Harness(gpu, subject, device="cpu").instance(params=False)
    Harness(gpu, subject, seed=3, device="cuda:1").instance(params=False)
    assert gpu.built == [{"seed": 0}, {"seed": 3, "device": "cuda:1"}]


def test_index_probes_build_and_run_on_the_cpu_under_a_gpu_device():
    """shapes.rejects_out_of_range_ids / rejects_beyond_max_len refuse on the CPU: on CUDA an
    index out of range is a device-side assert that breaks the process's context."""
    gpu = _GpuAdapter()
    subject = gpu.subjects()[0]
    harness = Harness(gpu, subject, device="cuda:1")
    with harness.on_the_cpu("an index probe"):
        harness.instance(params=False)
    harness.instance(params=False)
    assert gpu.built == [{"seed": 0}, {"seed": 0, "device": "cuda:1"}]
    assert "cpu, not cuda:1: an index probe" in str(harness.record.metrics)

    class _CudaOnly(_GpuAdapter):
        def devices(self, subject: Subject) -> tuple[str, ...]:
            return ("cuda",)

    only = _CudaOnly()
    with pytest.raises(Unsupported, match="does not run on the CPU"):
        with Harness(only, subject, device="cuda").on_the_cpu("an index probe"):
            pass


@pytest.mark.parametrize(
    "name", ["reference", "torch.nn", "hf.bert", "hf.vit", "hf.gpt2", "hf.llama"]
)
def test_every_subject_offered_on_cuda_takes_the_device_keyword(name):
    """An adapter that offers a subject on CUDA (Adapter.devices) must take ``device=`` in
    ``build`` down to the module: seen on an H200, the decoder adapters' own ``build``
    dropped the keyword and every check of theirs was a TypeError under --device cuda. The
    same call with device="cpu" exercises that path here."""
    if name.startswith("hf."):
        pytest.importorskip("transformers")
    adapter = load_adapter(name)
    offered = [s for s in adapter.subjects() if "cuda" in adapter_devices(adapter, s)]
    assert offered, f"{name} offers no subject on cuda"
    for subject in offered:
        if "cpu" not in adapter_devices(adapter, subject):
            continue  # a CUDA-only backend subject: built on CUDA alone
        dtype = "float32" if "float32" in adapter.dtypes(subject) else adapter.dtypes(subject)[0]
        adapter.build(subject, DEFAULT_CONFIG, seed=0, dtype=dtype, device="cpu")


def test_the_naive_reference_runs_on_the_device_and_gold_gradients_on_the_cpu(monkeypatch):
    """The rule's ``ref`` on the subject's device; float64 gold autograd on the CPU."""
    seen: list[tuple[str, str]] = []
    build = TorchModuleAdapter.build

    def recording(self, subject, config, *, seed, dtype="float64", device="cpu"):
        seen.append((dtype, device))
        return build(self, subject, config, seed=seed, dtype=dtype)  # run it on the CPU

    monkeypatch.setattr(TorchModuleAdapter, "build", recording)
    gpu = _GpuAdapter()
    harness = Harness(gpu, gpu.subjects()[0], device="cuda")
    inst = harness.instance(params=False)
    inst.params = {"weight": np.ones(24), "bias": np.zeros(24)}
    inputs = harness.inputs(inst)
    careful.careful(harness, inst, inputs)
    careful.gold_gradients(harness, inst, inputs, np.ones((2, 5, 24)))
    assert seen == [("float64", "cuda"), ("float64", "cpu")]


def test_torch_module_adapter_takes_the_device_through_build_run_grad_and_load():
    adapter = load_adapter("reference")
    subject = next(s for s in adapter.subjects() if s.name == "mha")
    assert adapter.devices(subject) == ("cpu", "cuda")
    handle = adapter.build(subject, DEFAULT_CONFIG, seed=0, device="cpu")
    assert handle.device == torch.device("cpu")
    assert all(p.device.type == "cpu" for p in handle.module.parameters())
    harness = Harness(adapter, subject)
    inst = harness.instance()
    inputs = harness.inputs(inst, Shape(causal=True))
    explicit = adapter.build(subject, DEFAULT_CONFIG, seed=0, device="cpu")
    adapter.load(explicit, inst.params)
    np.testing.assert_array_equal(adapter.run(explicit, inputs), adapter.run(inst.handle, inputs))
    cotangent = np.ones_like(adapter.run(explicit, inputs))
    grads = adapter.grad(explicit, inputs, cotangent)
    assert {"query", "params.q.weight"} <= set(grads)
    with pytest.raises(Unsupported, match="runs on cpu, cuda, not tpu"):
        adapter.build(subject, DEFAULT_CONFIG, seed=0, device="tpu")


def test_a_torch_entry_can_narrow_its_devices_and_unknown_kinds_are_refused():
    entries = sdpa_backend_entries()
    adapter = TorchModuleAdapter("backends", entries)
    subject = adapter.subjects()[0]
    assert adapter.devices(subject) == ("cuda",)
    with pytest.raises(Unsupported, match="runs on cuda, not cpu: it pins one of SDPA's CUDA"):
        adapter.build(subject, DEFAULT_CONFIG, seed=0, dtype="float16")
    with pytest.raises(ValueError, match="unknown device kind"):
        TorchModuleAdapter("bad", [dataclasses.replace(entries[0], devices=("tpu",))])


# --------------------------------------------------------------- SDPA backend subjects


def test_torch_nn_offers_every_backend_subject_on_cuda_in_its_dtypes():
    adapter = load_adapter("torch.nn")
    subjects = {s.name: s for s in adapter.subjects()}
    for name in BACKEND_SUBJECTS:
        assert name in subjects, name
        backend = name.split("[")[1].rstrip("]")
        assert adapter.devices(subjects[name]) == ("cuda",)
        assert adapter.dtypes(subjects[name]) == BACKEND_DTYPES[backend]
        assert {"float16", "bfloat16"} <= set(BACKEND_DTYPES[backend])
        assert any("sdpa_kernel" in note for note in subjects[name].notes)
    assert "float32" in BACKEND_DTYPES["efficient"] and "float32" in BACKEND_DTYPES["math"]


def test_tck_list_shows_the_backend_subjects_and_where_they_run(capsys):
    assert main(["list", "--subjects"]) == 0
    rows = [line.split("\t") for line in capsys.readouterr().out.strip().splitlines()]
    listed = {(r[0], r[1]): r[2:] for r in rows if len(r) == 4}
    assert listed[("torch.nn", "attention[flash]")] == ["cuda", "float16,bfloat16"]
    assert listed[("torch.nn", "attention")][0] == "cpu,cuda"
    assert all(("torch.nn", name) in listed for name in BACKEND_SUBJECTS)


@pytest.mark.parametrize("backend", list(SDPA_BACKENDS))
def test_pinned_enables_exactly_one_backend(backend):
    flags = {
        "flash": torch.backends.cuda.flash_sdp_enabled,
        "efficient": torch.backends.cuda.mem_efficient_sdp_enabled,
        "cudnn": torch.backends.cuda.cudnn_sdp_enabled,
        "math": torch.backends.cuda.math_sdp_enabled,
    }
    before = {name: flag() for name, flag in flags.items()}
    with pinned(backend):
        assert {name: flag() for name, flag in flags.items()} == {
            name: name == backend for name in flags
        }
    assert {name: flag() for name, flag in flags.items()} == before  # restored


def test_a_refusal_is_unsupported_with_torchs_reason_and_other_errors_pass():
    q = torch.randn(1, 2, 3, 4)
    with pytest.raises(Unsupported, match=r"x: SDPA's efficient backend .* refuses this input: "):
        with pinned("efficient", "x"):  # the CPU has no memory-efficient kernel
            torch.nn.functional.scaled_dot_product_attention(q, q, q)
    with pytest.raises(RuntimeError, match="boom"), pinned("math"):
        raise RuntimeError("boom")
    assert refused(RuntimeError("No available kernel.  Aborting execution."))
    assert not refused(ValueError("No available kernel"))


def _cpu_backends() -> TorchModuleAdapter:
    return TorchModuleAdapter("sdpa-on-cpu", sdpa_backend_entries(devices=("cpu", "cuda")))


@pytest.mark.parametrize("name", ["attention[math]", "attention[flash]", "mha[math]"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_pinned_subjects_match_the_oracle_on_the_cpu(name, dtype):
    """The pinning path end to end without a GPU: torch has a math and a flash kernel on the
    CPU; the comparison is the tolerance rule's, with the careful run in ``dtype``."""
    adapter = _cpu_backends()
    subject = next(s for s in adapter.subjects() if s.name == name)
    harness = Harness(adapter, subject, device="cpu")
    inst = harness.instance(dtype=dtype)
    harness.assert_matches_oracle(inst, harness.inputs(inst, Shape(causal=True)))


def test_a_refused_backend_is_a_skip_that_says_why_on_the_cpu():
    adapter = _cpu_backends()
    subject = next(s for s in adapter.subjects() if s.name == "attention[efficient]")
    harness = Harness(adapter, subject)
    inst = harness.instance(dtype="float16")
    with pytest.raises(Unsupported, match=r"attention\[efficient\]: SDPA's efficient backend"):
        harness.run(inst, harness.inputs(inst))


def test_a_pinned_backend_that_computes_something_else_fails_with_its_code():
    """A kernel with inverted masks: the pinned wrapper passes the failure on, named."""

    def inverted(m, q, k, v, keep_mask=None, causal=False):
        return _attention(m, q, k, v, None if keep_mask is None else ~keep_mask, causal)

    entries = sdpa_backend_entries(devices=("cpu",))
    entry = next(e for e in entries if e.name == "attention[math]")
    entry.forward = _pinned("math", "attention[math]", inverted)
    adapter = TorchModuleAdapter("inverted", [entry])
    subject = adapter.subjects()[0]
    harness = Harness(adapter, subject)
    inst = harness.instance(dtype="float32")
    inputs = harness.inputs(inst, Shape(batch=2, lq=4, lk=6, lengths=(6, 3)))
    with pytest.raises(CheckFailure) as failure:
        harness.assert_matches_oracle(inst, inputs)
    assert failure.value.code == "mask.polarity_inverted"


# ------------------------------------------------------------------- whole runs


def _run(adapter: str, out: Path, *extra: str, cwd: Path | None = None) -> dict[str, Any]:
    command = ["run", "--adapter", adapter, "-n", "0", "--out", str(out), *extra]
    proc = subprocess.run(
        [sys.executable, "-m", "tck", *command],
        capture_output=True,
        text=True,
        timeout=1800,
        cwd=cwd,
    )
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    return json.loads((out / "results.json").read_text())


def _verdicts(document: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    return sorted(
        (r["check"], r["subject"], r["status"], r["diagnosis"]["code"]) for r in document["results"]
    )


def _same_verdicts(adapter: str, only: str | None, tmp_path: Path) -> dict[str, Any]:
    extra = ["--only", only] if only else []
    default = _run(adapter, tmp_path / "default", *extra)
    on_cpu = _run(adapter, tmp_path / "cpu", "--device", "cpu", *extra)
    assert _verdicts(on_cpu) == _verdicts(default)
    assert on_cpu["environment"]["device"] == default["environment"]["device"] == "cpu"
    return on_cpu


@pytest.mark.parametrize(
    ("adapter", "only"), [("reference", "layer_norm,attention"), ("torch.nn", "attention,mha")]
)
def test_device_cpu_gives_the_default_verdicts(adapter, only, tmp_path):
    document = _same_verdicts(adapter, only, tmp_path)
    if adapter == "torch.nn":  # the backend subjects are there, and skip saying why
        rows = [r for r in document["results"] if r["subject"] in BACKEND_SUBJECTS]
        assert {r["subject"] for r in rows} == {
            n for n in BACKEND_SUBJECTS if n.startswith(("attention[", "mha["))
        }
        assert {r["status"] for r in rows} == {"skip"}
        assert all("tck run --device cuda" in r["diagnosis"]["message"] for r in rows)


@pytest.mark.device
@pytest.mark.parametrize("adapter", ["reference", "torch.nn"])
def test_device_cpu_gives_the_default_verdicts_everywhere(adapter, tmp_path):
    _same_verdicts(adapter, None, tmp_path)


def test_backend_subjects_run_through_tck_run_on_the_cpu(tmp_path):
    """The pinning path through tck run: flash and math pass, efficient and cuDNN (no CPU
    kernel) skip with torch's refusal; nothing fails or errors."""
    document = _run(
        "support.sdpa_cpu:adapter", tmp_path, "--only", "attention", "--device", "cpu", cwd=TESTS
    )
    statuses: dict[str, set[str]] = {}
    for r in document["results"]:
        statuses.setdefault(r["subject"], set()).add(r["status"])
    assert document["summary"]["failed"] == document["summary"]["errors"] == 0
    for backend in ("flash", "math"):
        assert "pass" in statuses[f"attention[{backend}]"]
    for backend in ("efficient", "cudnn"):
        rows = [r for r in document["results"] if r["subject"] == f"attention[{backend}]"]
        assert {r["status"] for r in rows} == {"skip"}
        assert any("refuses this input" in r["diagnosis"]["message"] for r in rows)


@pytest.mark.skipif(not CUDA, reason=NO_CUDA)
def test_backend_subjects_run_on_cuda(tmp_path):
    document = _run("torch.nn", tmp_path, "--only", "attention", "--device", "cuda")
    assert document["environment"]["device"] == "cuda" and "gpu" in document["environment"]
    ran = {r["subject"] for r in document["results"] if r["status"] != "skip"}
    assert "attention[math]" in ran and "attention" in ran


# Errors of an op that has no meta kernel, or needs the data: the probe says nothing there.
_META_SILENT = ("meta tensors", "Meta kernel", "Meta tensors", "is not supported on meta")


@pytest.mark.parametrize("name", ["reference", "torch.nn"])
def test_forwards_make_their_tensors_on_the_inputs_device(name):
    """Without a GPU, the meta device stands in for CUDA: a forward that makes a tensor of its
    own on the CPU (a causal mask, a positional table) and combines it with the inputs fails
    there as it would on CUDA ("Tensor on device cpu is not on the expected device meta").
    Ops without a meta kernel, or that read the data, say nothing either way: skipped."""
    adapter = load_adapter(name)
    config = DEFAULT_CONFIG
    probed, mixed = [], []
    for subject in adapter.subjects():
        if "float32" not in adapter.dtypes(subject) or "cuda" not in adapter.devices(subject):
            continue
        try:
            handle = adapter.build(subject, config, seed=0, dtype="float32")
            arrays = make_inputs(subject.component, config, np.random.default_rng(0), Shape())
            arrays["causal"] = np.array("causal" in INPUTS[subject.component][1])
            kwargs = adapter._kwargs(
                handle, {k: v for k, v in arrays.items() if k in _takes(handle)}
            )
        except Unsupported:
            continue
        meta = {k: v.to("meta") if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
        try:
            with torch.no_grad():
                handle.entry.forward(handle.module.to("meta"), **meta)
        except Unsupported:
            continue
        except (RuntimeError, NotImplementedError) as err:
            if any(text in str(err) for text in _META_SILENT):
                continue
            mixed.append(f"{subject.name}: {str(err).splitlines()[0]}")
            continue
        probed.append(subject.name)
    assert not mixed
    assert len(probed) >= 10, probed  # the probe ran on most subjects, not on none


def _takes(handle: Any) -> set[str]:
    import inspect

    params = list(inspect.signature(handle.entry.forward).parameters)[1:]
    return set(params)


def test_bench_builds_on_the_device_an_adapter_offers():
    """tck bench --device cuda builds a subject there when its adapter runs it there (a
    CUDA-only subject such as attention[flash] could not be built on the CPU first)."""
    from tck.bench.workloads import FORWARD, adapter_call

    ffn = [Subject("ffn", "ffn")]
    for adapter, device, built in (
        (_GpuAdapter(), "cuda", {"seed": 0, "device": "cuda"}),
        (_OldAdapter(), "cuda", {"seed": 0}),  # CPU only: built without a device
        (_GpuAdapter(), "cpu", {"seed": 0}),
    ):
        adapter.subjects = lambda: ffn  # type: ignore[method-assign]
        try:
            adapter_call(
                adapter, ffn[0], DEFAULT_CONFIG, batch=1, seq=4, dtype="float64", pass_=FORWARD,
                causal=False, device=device,
            )  # fmt: skip
        except Unsupported as why:  # a numpy adapter on CUDA: said after building
            assert device == "cuda" and "not a torch adapter" in str(why)
        assert adapter.built == [built]


# What torch 2.11 (CUDA 13) warned on an H200 before "No available kernel", pinned to cuDNN
# with 6-wide heads: every kernel's heading, the disabled ones' reasons, then cuDNN's own.
_H200_WARNINGS = [
    "Memory efficient kernel not used because: (Triggered internally at "
    "/pytorch/aten/src/ATen/native/transformers/cuda/sdp_utils.cpp:986.)",
    "Memory Efficient attention has been runtime disabled. (Triggered internally at "
    "/pytorch/aten/src/ATen/native/transformers/sdp_utils_cpp.h:552.)",
    "Flash attention kernel not used because: (Triggered internally at "
    "/pytorch/aten/src/ATen/native/transformers/cuda/sdp_utils.cpp:988.)",
    "Flash attention has been runtime disabled. (Triggered internally at "
    "/pytorch/aten/src/ATen/native/transformers/sdp_utils_cpp.h:540.)",
    "cuDNN attention kernel not used because: (Triggered internally at "
    "/pytorch/aten/src/ATen/native/transformers/cuda/sdp_utils.cpp:990.)",
    "head_dim should be a multiple of 8 (Triggered internally at "
    "/pytorch/aten/src/ATen/native/transformers/cuda/sdp_utils.cpp:528.)",
]


def test_a_refusal_gives_the_pinned_kernels_own_reasons():
    assert own_reasons("cudnn", _H200_WARNINGS) == ["head_dim should be a multiple of 8"]
    assert own_reasons("flash", _H200_WARNINGS) == ["Flash attention has been runtime disabled."]
    # no heading of its own (the CPU's warnings, the math backend): every reason, as warned
    cpu = ["Flash attention requires q,k,v to have the same last dimension"]
    assert own_reasons("flash", cpu) == cpu
    assert len(own_reasons("math", _H200_WARNINGS)) == len(_H200_WARNINGS)


def test_backend_subjects_are_checked_with_heads_the_fused_kernels_take():
    """cuDNN needs heads a multiple of 8 wide, the efficient kernel of 4: at the suite's
    default width (6) every check of theirs was a refusal on an H200."""
    from tck.conformance.toolkit.harness import DEFAULT_CONFIG as DEFAULT

    adapter = load_adapter("torch.nn")
    for subject in adapter.subjects():
        if subject.name.split("[")[-1].rstrip("]") not in SDPA_BACKENDS:
            continue
        config = Harness(adapter, subject).config()
        assert config.head_dim_k == config.head_dim_v == 8, subject.name
        assert config.n_heads == DEFAULT.n_heads
