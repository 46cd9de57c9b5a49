"""The CPU schedule library as one table: which template serves which fused group.

``nnvm_schedule_template`` (``plugin.py``) asks each builder of ``TEMPLATE_BUILDERS`` in order; a
builder returns an ``nnvm.autotune.ScheduleTemplate`` for the group or None ("not mine"), and the
first template wins. More specific templates (a blocked layout, Winograd) go before the general ones
they improve on; a new schedule is one function and one line here.

``cpu_switches={"templates": "0"}`` turns the whole library off (every group gets the core's generic
schedule), for A/B benchmarks.
"""

from __future__ import annotations

from collections.abc import Callable

from nnvm.autotune import ScheduleTemplate
from nnvm.cpu.depthwise_nchwc import depthwise_nchwc_template
from nnvm.cpu.expand_depthwise import expand_depthwise_template
from nnvm.cpu.schedule_conv2d import conv2d_template
from nnvm.cpu.schedule_dense import dense_packed_template, dense_template
from nnvm.cpu.schedule_depthwise import depthwise_template
from nnvm.cpu.schedule_nchwc import conv2d_nchwc_template
from nnvm.cpu.schedule_qconv import qconv2d_nchwc_template
from nnvm.cpu.schedule_qdense import qdense_packed_template
from nnvm.cpu.schedule_qdepthwise import qdepthwise_nchwc_template
from nnvm.cpu.schedule_reduce import whole_reduction_template
from nnvm.cpu.schedule_softmax import row_kernel_template, row_statistic_template, softmax_template
from nnvm.cpu.switches import enabled
from nnvm.cpu.winograd import winograd_template

TemplateBuilder = Callable[[object, object], "ScheduleTemplate | None"]

# (target, group) -> ScheduleTemplate | None, asked in this order.
TEMPLATE_BUILDERS: list[TemplateBuilder] = [
    qconv2d_nchwc_template,  # cpu.qconv2d_nchwc.direct: 8-bit conv2d on channel-blocked uint8, no im2col
    qdepthwise_nchwc_template,  # cpu.qdepthwise_nchwc.tiles: 8-bit depthwise, int32 vectors along channels
    qdense_packed_template,  # cpu.qdense.packed: 8-bit dense, dot_u8s8 tiles over a packed weight
    expand_depthwise_template,  # cpu.expand_depthwise_nchwc.bands: 1x1 expansion + depthwise, per band
    depthwise_nchwc_template,  # cpu.depthwise_conv2d_nchwc.tiles: depthwise NCHW[x]c, 2-D register tiles
    conv2d_nchwc_template,  # cpu.(depthwise_)conv2d_nchwc.direct: blocked layout from layout_choice.py
    winograd_template,      # cpu.conv2d_winograd_nchwc: F(2x2, 3x3), when layout_choice.py chose it
    conv2d_template,      # cpu.conv2d_nchw.direct: groups=1 NCHW conv2d, register tile oc x ow
    depthwise_template,   # cpu.depthwise_conv2d_nchw.direct: one channel per group
    dense_packed_template,  # cpu.dense.packed: dense over a packed constant weight, streamed
    dense_template,       # cpu.dense.rfactor: dense (+ epilogue), contiguous vector partial sums
    softmax_template,     # cpu.softmax.rows, cpu.layer_norm.rows: along the last axis, row statistics
    row_kernel_template,  # cpu.softmax.exp_rows, cpu.softmax.normalize_rows: softmax_rows.py's two kernels
    whole_reduction_template,  # cpu.reduce.whole: min/max/sum of a whole tensor, vector partial results
    row_statistic_template,  # cpu.rows.statistic: a row's sum or mean and the output reading it (RMSNorm)
]


def schedule_template(target, group) -> ScheduleTemplate | None:
    """The first template of ``TEMPLATE_BUILDERS`` that takes ``group`` on ``target``, or None."""
    if not enabled("templates"):
        return None
    for builder in TEMPLATE_BUILDERS:
        template = builder(target, group)
        if template is not None:
            return template
    return None
