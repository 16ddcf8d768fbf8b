"""The machine a result came from: cores, CPU (with its widest vector/matrix unit), OS and Python.

Trained numbers are machine-specific (the kernels a CPU selects change float results, so the warm start stops at
another step on another CPU): every results file names its hardware (the grid's store and pages, ``v05 bench
trl-parity``). Standard library only.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

CPU_FEATURES = (("amx_bf16", "AMX"), ("avx512f", "AVX-512"), ("avx2", "AVX2"))
"""/proc/cpuinfo flag → label: the widest matrix unit names the machine (kernels, hence trajectories, differ)."""


def cpuinfo_fields(cpuinfo: str) -> dict[str, str]:
    """/proc/cpuinfo text's ``key: value`` lines of its first processor (the machine's CPUs share one model)."""
    first = cpuinfo.split("\n\n", 1)[0]
    return {k.strip(): v.strip() for k, v in (line.split(":", 1) for line in first.splitlines() if ":" in line)}


def cpu_label(cpuinfo: str, fallback: str) -> str:
    """``model name`` and the widest vector/matrix unit from /proc/cpuinfo text (``fallback`` where it says none).

    A run's float results depend on the kernels its CPU selects (AVX2, AVX-512, AMX), so cells trained on two
    machines with one name but different units are told apart in the results.
    """
    fields = cpuinfo_fields(cpuinfo)
    flags = set(fields.get("flags", "").split())
    unit = next((label for flag, label in CPU_FEATURES if flag in flags), None)
    name = fields.get("model name") or fallback
    return f"{name}, {unit}" if unit else name


def hardware_label() -> str:
    """The machine a result came from: cores, CPU (with its widest vector unit), OS and Python."""
    fallback = platform.processor() or platform.machine()
    try:
        cpu = cpu_label(Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace"), fallback)
    except OSError:  # not Linux
        cpu = fallback
    return (
        f"{os.cpu_count()} CPU cores ({cpu}), {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}"
    )


__all__ = ["CPU_FEATURES", "cpu_label", "cpuinfo_fields", "hardware_label"]
