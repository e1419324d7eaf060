"""torch.nn's SDPA backend subjects (attention[flash], mha[math], ...) offered on the CPU as
well, to run the pinning path without a GPU: on the CPU, torch has a flash kernel and the
math backend, and refuses the memory-efficient and cuDNN backends ("No viable backend"),
which must become skips that give torch's reason."""

from tck.adapters import TorchModuleAdapter
from tck.adapters.torch_nn import sdpa_backend_entries

adapter = TorchModuleAdapter("sdpa-on-cpu", sdpa_backend_entries(devices=("cpu", "cuda")))
