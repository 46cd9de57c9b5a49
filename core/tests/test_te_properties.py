"""Property tests: random computes x random schedule sequences, lowered and interpreted, equal numpy.

The interpreter checks every access against its buffer, so a lowering that reads or writes out of
bounds fails here even when the numbers would happen to agree. The strategies live in
``nnvm_testing.te_strategies`` so that each backend's tests compile the very same programs.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import nnvm
from nnvm import te
from nnvm.tir.interpreter import run_primfunc
from nnvm_testing.te_strategies import SETTINGS, definitions, empty_output, random_inputs, random_schedule


@SETTINGS
@given(st.data())
def test_random_schedules_lower_to_correct_programs(data):
    inputs, out, reference = definitions(data)
    s = te.create_schedule(out.op)
    random_schedule(data, s, out)
    func = nnvm.lower(s, inputs + [out])
    arrays = random_inputs(inputs)
    result = empty_output(out)
    run_primfunc(func, arrays + [result])
    np.testing.assert_allclose(result, reference(*arrays), rtol=1e-5, atol=1e-5, err_msg=str(func))
