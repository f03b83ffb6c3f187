"""The in-suite compare run (`test_translated.py`): the kernel, library and framework-op tests again in a
child pytest with LAPIS_SIM=compare, every dispatch run by the reference executor and by translated code.

The run takes two to three minutes, nearly all of it one CPU core in numpy, so `conftest.py` starts it as soon
as the suite has collected it and the rest of the suite runs beside it on the other core; the test only waits
for what is left. Run alone, the test starts it itself.
"""

import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TEST_ID = "tests/test_translated.py::test_the_kernel_tests_pass_with_every_dispatch_run_both_ways"
TIMEOUT_S = 1200

KERNEL_TESTS = ["tests/test_kernels.py", "tests/test_instructions.py", "tests/test_libdevice.py",
                "tests/test_block_reduction.py", "tests/test_dnn.py", "tests/test_blas_level1.py",
                "tests/test_tensor_ops.py", "tests/test_generated_kernels.py", "tests/test_autograd.py"]
# Cases that take 5-25 s each under the reference executor (four minutes together): one case of each of
# their kernels stays (micro1, heads[24], lengths [40-3-32], float32-70000, the float64 exp, log, tanh, atan
# and hypot[float32] cases), and `make test-compare` runs them all.
COMPARE_SKIPS = [
    "tests/test_libdevice.py::test_float64_and_half_arguments_are_computed_in_float32",
    "tests/test_libdevice.py::test_numpy_ufuncs_on_numbers_compile_as_math_s_functions",
    "tests/test_libdevice.py::test_float64_gamma_and_lgamma_are_computed_in_float64",
    "tests/test_libdevice.py::test_float64_functions_are_accurate_in_float64[sinh]",
    "tests/test_libdevice.py::test_float64_functions_are_accurate_in_float64[asinh]",
    "tests/test_libdevice.py::test_float64_functions_are_accurate_in_float64[cosh]",
    "tests/test_libdevice.py::test_float64_functions_are_accurate_in_float64[acosh]",
    "tests/test_libdevice.py::test_hypot_atan2_and_fmod_keep_their_type_s_accuracy_and_c_s_special_values[float64]",
    "tests/test_dnn.py::test_every_micro_tile_of_the_implicit_gemm_agrees_with_the_direct_kernels[micro0]",
    "tests/test_dnn.py::test_every_micro_tile_of_the_implicit_gemm_agrees_with_the_direct_kernels[micro2]",
    "tests/test_dnn.py::test_fused_attention_reads_and_writes_strided_heads[8]",
    "tests/test_dnn.py::test_lanes_attention_with_query_and_key_lengths_apart[33-33-4-False]",
    "tests/test_dnn.py::test_lanes_attention_with_query_and_key_lengths_apart[5-37-16-False]",
    "tests/test_libdevice.py::test_float64_pow_is_accurate_in_float64_with_c_signs",
    "tests/test_libdevice.py::test_asin_acos_fmod_gamma_and_lgamma_match_c_s",
    "tests/test_blas_level1.py::test_axpy_scal_copy_swap[float64-70000]",
    # float64 libdevice functions whose instructions (DFMA, DADD, F2F, ...) the float64 ones above still compare
    "tests/test_libdevice.py::test_float64_erf_and_erfc_are_accurate_in_float64",
    "tests/test_libdevice.py::test_float64_exp2_is_accurate_in_float64_and_float32_exp2_in_float32",
    "tests/test_libdevice.py::test_float64_functions_are_accurate_in_float64[acos]",
    "tests/test_libdevice.py::test_float64_functions_are_accurate_in_float64[expm1]",
    "tests/test_libdevice.py::test_float64_functions_are_accurate_in_float64[tanh]",
    "tests/test_libdevice.py::test_float64_functions_are_accurate_in_float64[atan]",
    "tests/test_libdevice.py::test_float64_functions_are_accurate_in_float64[atanh]",
    "tests/test_libdevice.py::test_float64_functions_are_accurate_in_float64[asin]",
    # the longest of the rest (about 50 s compared): their kernels' other shapes and sizes are still compared
    "tests/test_dnn.py::test_every_micro_tile_of_the_implicit_gemm_agrees_with_the_direct_kernels[micro1]",
    "tests/test_dnn.py::test_lanes_attention_with_query_and_key_lengths_apart[33-33-4-True]",
    "tests/test_dnn.py::test_lanes_attention_with_query_and_key_lengths_apart[5-37-16-True]",
    "tests/test_kernels.py::test_softmax_rows",
    "tests/test_blas_level1.py::test_axpy_scal_copy_swap[float32-70000]",
]


class CompareRun:
    """The child pytest, its output going to a temporary file (a pipe could fill and stall it)."""

    def __init__(self):
        skips = [arg for case in COMPARE_SKIPS for arg in ("--deselect", case)]
        self.output = tempfile.TemporaryFile(mode="w+")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "pytest", "-o", "addopts=", "-q", "-x", "-m", "not slow", "-p", "no:cacheprovider",
             *skips, *KERNEL_TESTS],
            cwd=ROOT, env=dict(os.environ, LAPIS_SIM="compare"), stdout=self.output, stderr=subprocess.STDOUT,
            text=True)

    def result(self) -> tuple[int, str]:
        """Wait for the child (at most TIMEOUT_S from now); its exit status and the end of its output."""
        try:
            code = self.process.wait(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
        self.output.seek(0)
        return code, self.output.read()[-5000:]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.output.close()


started: CompareRun | None = None        # the run conftest started, if the suite selected the test
