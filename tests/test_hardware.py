"""The hardware label: the CPU's name and its widest vector/matrix unit."""

from __future__ import annotations

from v05.hardware import cpu_label


def test_cpu_label_names_the_widest_unit():
    """Cells trained on CPUs of one name but other units (AVX2, AVX-512, AMX: other kernels, other trajectories) are
    told apart in the results' hardware line."""
    amx = "processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Processor\nflags\t\t: fpu avx2 avx512f amx_bf16\n"
    assert cpu_label(amx, "x86_64") == "Intel(R) Xeon(R) Processor, AMX"
    assert cpu_label(amx.replace(" amx_bf16", ""), "x86_64") == "Intel(R) Xeon(R) Processor, AVX-512"
    assert cpu_label("model name : EPYC\nflags : sse avx2\n", "x86_64") == "EPYC, AVX2"
    assert cpu_label("", "arm64") == "arm64"
