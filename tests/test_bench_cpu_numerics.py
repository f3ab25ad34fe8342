"""scripts/bench_cpu_numerics.py: each mode's environment pins ATen's dispatch in a fresh process, and `native`
removes pinning variables inherited from the caller."""

import subprocess
import sys

import pytest

from scripts.bench_cpu_numerics import mode_env

CAPABILITY = "import torch; print(torch.backends.cpu.get_cpu_capability())"


def test_native_drops_inherited_pinning_and_keeps_the_rest():
    env = mode_env("native", {"MKL_CBWR": "AVX2", "ATEN_CPU_CAPABILITY": "avx2", "PATH": "/bin"})
    assert env == {"PATH": "/bin", "OMP_NUM_THREADS": "1"}


def test_avx2_sets_all_three_libraries():
    env = mode_env("avx2", {"MKL_CBWR": "COMPATIBLE"})
    assert (env["ATEN_CPU_CAPABILITY"], env["MKL_CBWR"], env["ONEDNN_MAX_CPU_ISA"]) == ("avx2", "AVX2", "AVX2")


def test_unknown_mode_names_the_choices():
    with pytest.raises(ValueError, match="avx2"):
        mode_env("avx512", {})


@pytest.mark.parametrize("mode, expected", [("avx2", "AVX2"), ("compatible", "DEFAULT")])
def test_the_mode_reaches_torch_in_a_new_process(mode, expected):
    import os

    out = subprocess.run([sys.executable, "-c", CAPABILITY], env=mode_env(mode, dict(os.environ)),
                         capture_output=True, text=True, check=True).stdout.strip()
    assert out == expected  # every CPU this project runs on has AVX2 (docs: CI and developer machines)
