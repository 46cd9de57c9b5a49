"""Property tests through the LLVM backend: the random computes and schedules of the core's property
test (``nnvm_testing.te_strategies``), compiled for the host CPU and run, equal numpy.

The core's version runs the same programs in the reference interpreter; this one checks what the
code generator makes of them (parallel loops on the thread pool, vector code, unrolled copies,
guards and partitioned loops of non-divisible splits, intermediate buffers on the stack).
"""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import nnvm
from nnvm import te
from nnvm_testing.te_strategies import SETTINGS, definitions, empty_output, random_inputs, random_schedule


@SETTINGS
@given(st.data())
def test_random_schedules_compile_to_correct_kernels(data):
    inputs, out, reference = definitions(data)
    s = te.create_schedule(out.op)
    random_schedule(data, s, out)
    f = nnvm.build(s, inputs + [out], target="llvm")
    arrays = random_inputs(inputs)
    result = empty_output(out)
    f(*arrays, result)
    np.testing.assert_allclose(result, reference(*arrays), rtol=1e-5, atol=1e-5, err_msg=str(f.func))
