"""Where subjects run: the device names the suite takes, and whether an adapter offers one.

``tck run --device``, ``--tck-device`` (pytest) and ``tck bench --device`` all take
``cpu``, ``cuda`` or ``cuda:N`` and check it here, once, before anything runs: a device
this machine does not have is a ``DeviceError`` with one line that says what to use instead.

An adapter says which device *kinds* ("cpu", "cuda") a subject runs on with
``Adapter.devices(subject)`` (default: the CPU only); ``build`` receives ``device=`` only when
it is not the CPU, as ``dtype=`` only when it is not float64, so adapters written before
devices existed keep a valid signature.
"""

from __future__ import annotations

from typing import Any

DEVICE_KINDS: tuple[str, ...] = ("cpu", "cuda")
DEFAULT_DEVICE = "cpu"


class DeviceError(ValueError):
    """A device name that is malformed or not on this machine; the message is one line."""


def device_kind(device: str) -> str:
    """The kind of a device name: cuda:1 is cuda, cpu is cpu."""
    return device.partition(":")[0]


def check_device(device: str, option: str = "--device") -> str:
    """``device`` if this machine has it (``cpu``, ``cuda`` or ``cuda:N``); else DeviceError,
    whose message starts with ``option`` and names what to use instead."""
    device = device.strip()
    if device == "cpu":
        return device
    if device != "cuda" and not (device.startswith("cuda:") and device[5:].isdigit()):
        raise DeviceError(f"unknown {option} {device!r}; use cpu, cuda or cuda:N")
    import torch  # only here: the oracle side of the suite needs no torch

    if not torch.cuda.is_available():
        raise DeviceError(
            f"{option} {device}: torch {torch.__version__} sees no CUDA device "
            "(torch.cuda.is_available() is False); use --device cpu, or a CUDA build of torch "
            "on a machine with a GPU"
        )
    index = int(device[5:]) if ":" in device else 0
    count = torch.cuda.device_count()
    if index >= count:
        raise DeviceError(
            f"{option} {device}: only {count} CUDA device(s) here; use cuda:0 .. cuda:{count - 1}"
        )
    return device


def adapter_devices(adapter: Any, subject: Any) -> tuple[str, ...]:
    """The device kinds ``adapter`` runs ``subject`` on (the CPU only unless it says more)."""
    offered = getattr(adapter, "devices", None)
    return tuple(offered(subject)) if callable(offered) else (DEFAULT_DEVICE,)


def offers_device(adapter: Any, subject: Any, device: str) -> bool:
    return device_kind(device) in adapter_devices(adapter, subject)


def require_some_subject_on(adapter: Any, device: str, subjects: list[Any] | None = None) -> None:
    """DeviceError unless at least one of ``subjects`` (default: all) runs on ``device``."""
    subjects = adapter.subjects() if subjects is None else subjects
    if device_kind(device) == DEFAULT_DEVICE or not subjects:
        return
    if not any(offers_device(adapter, s, device) for s in subjects):
        kinds = sorted({k for s in subjects for k in adapter_devices(adapter, s)})
        raise DeviceError(
            f"adapter {adapter.name!r} runs no subject on {device_kind(device)} (it offers "
            f"{', '.join(kinds)}; Adapter.devices); use --device cpu"
        )


def device_environment(device: str) -> dict[str, str]:
    """What a results document records of the device: its name, and the GPU on CUDA."""
    out = {"device": device}
    if device_kind(device) == "cuda":
        import torch

        index = int(device[5:]) if ":" in device else 0
        out["gpu"] = torch.cuda.get_device_name(index)
        out["cuda"] = str(torch.version.cuda)
    return out
