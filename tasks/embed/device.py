"""Which device the model runs on: CUDA when torch sees a GPU, else the CPU.

Asking torch means importing it (1.2 s on a CPU, 5–8 s on a GPU machine, the GIL held), so
the cheap question comes first: without an NVIDIA driver there is no CUDA device.
"""

from __future__ import annotations

import os


def cuda_likely() -> bool:
    """Return whether an NVIDIA GPU seems present, without importing torch (cheap)."""
    return os.path.exists("/proc/driver/nvidia/version") or os.path.exists("/dev/nvidiactl")


def default_device() -> str:
    """Return "cuda" when a CUDA device is present, else "cpu".

    Without an NVIDIA driver there is no CUDA device: torch is not imported to say so
    (1.2 s of a cold query or CLI run on a CPU, where the ONNX backend needs no torch).
    """
    if not cuda_likely():
        return "cpu"
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"
