"""Tiny ML Programs, one MIL op each, built with coremltools' MIL builder: ``python make_ops.py OUT_DIR``.

Each becomes ``OUT_DIR/<case>.mlpackage`` (float32); the test computes the op's documented semantics in
numpy on the same input (shape (1, 3, 7, 8) unless the case says otherwise).
"""

import sys
from pathlib import Path

import numpy as np


def cases(mb):
    w = np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32)
    q = np.arange(8, dtype=np.uint8).reshape(1, 8) * 30
    lut = np.array([-1.5, 0.25, 2.0, 3.5], np.float32)
    packed = np.packbits(
        np.unpackbits(np.array([0b11100100, 0b00011011], np.uint8), bitorder="little"), bitorder="little"
    )
    wt = np.random.default_rng(1).standard_normal((3, 2, 3, 2)).astype(np.float32)
    lin_w = np.random.default_rng(2).standard_normal((5, 8)).astype(np.float32)
    lin_b = np.arange(5, dtype=np.float32)
    return {
        "activations": lambda x: mb.concat(
            values=[
                mb.relu6(x=mb.mul(x=x, y=4.0)),
                mb.silu(x=x),
                mb.elu(x=x, alpha=0.7),
                mb.softplus(x=x),
                mb.leaky_relu(x=x, alpha=0.2),
                mb.thresholded_relu(x=x, alpha=0.5),
                mb.clip(x=x, alpha=-0.5, beta=0.3),
                mb.prelu(x=x, alpha=np.array([0.1, 0.2, 0.3], np.float32)),
                mb.gelu(x=x),
                mb.tanh(x=x),
            ],
            axis=1,
        ),
        "linear_matmul": lambda x: mb.matmul(
            x=mb.linear(x=x, weight=lin_w, bias=lin_b), y=mb.linear(x=x, weight=lin_w), transpose_y=True
        ),
        "batch_norm": lambda x: mb.batch_norm(
            x=x,
            mean=np.array([0.5, 0.0, -0.5], np.float32),
            variance=np.array([1.0, 4.0, 0.25], np.float32),
            gamma=np.array([1.0, 2.0, 0.5], np.float32),
            beta=np.array([0.1, -0.2, 0.3], np.float32),
            epsilon=1e-3,
        ),
        "reshape_squeeze": lambda x: mb.expand_dims(
            x=mb.squeeze(x=mb.reshape(x=x, shape=[1, 21, 1, 8]), axes=[2]), axes=[-1]
        ),
        "reduce_log_sum_exp": lambda x: mb.reduce_log_sum_exp(x=x, axes=[1], keep_dims=False),
        "upsample_bilinear_half": lambda x: mb.upsample_bilinear(
            x=x, scale_factor_height=2.0, scale_factor_width=1.5, align_corners=False, half_pixel_centers=True
        ),
        "upsample_bilinear_align": lambda x: mb.upsample_bilinear(
            x=x, scale_factor_height=2, scale_factor_width=2, align_corners=True, half_pixel_centers=False
        ),
        "conv_transpose": lambda x: mb.conv_transpose(
            x=x, weight=wt, strides=[2, 3], pad_type="custom", pad=[1, 0, 0, 1]
        ),
        "affine_dequantize": lambda x: mb.add(
            x=x,
            y=mb.constexpr_affine_dequantize(
                quantized_data=q, zero_point=np.uint8(100), scale=np.float32(0.05), axis=0
            ),
        ),
        "lut_to_dense": lambda x: mb.mul(
            x=x, y=mb.constexpr_lut_to_dense(indices=packed, lut=lut, shape=np.array([1, 8], np.uint32))
        ),
        "split_slice": lambda x: mb.split(x=x, split_sizes=[2, 5], axis=2)[1],
        "slice_by_index": lambda x: mb.slice_by_index(
            x=x, begin=[0, 2, 1, 7], end=[1, 0, 6, 0], stride=[1, -1, 2, -3]
        ),
        "gather": lambda x: mb.gather(x=x, indices=np.array([3, -1, 0], np.int32), axis=3),
        "instance_norm": lambda x: mb.instance_norm(x=x, epsilon=1e-5),
        "upsample_nearest": lambda x: mb.upsample_nearest_neighbor(
            x=x, scale_factor_height=2, scale_factor_width=3
        ),
        # MIL pad order [top, bottom, left, right], asymmetric.
        "conv_custom_pad": lambda x: mb.conv(
            x=x, weight=w, strides=[2, 1], pad_type="custom", pad=[0, 2, 1, 0]
        ),
        "conv_same": lambda x: mb.conv(x=x, weight=w, strides=[2, 2], pad_type="same"),
        "avg_pool_exclude_ceil": lambda x: mb.avg_pool(
            x=x,
            kernel_sizes=[3, 3],
            strides=[2, 2],
            pad_type="custom",
            pad=[1, 1, 1, 1],
            exclude_padding_from_average=True,
            ceil_mode=True,
        ),
        "max_pool_same": lambda x: mb.max_pool(x=x, kernel_sizes=[2, 3], strides=[2, 2], pad_type="same"),
        "pad_reflect": lambda x: mb.pad(x=x, pad=[1, 2, 2, 1], mode="reflect"),
        "softmax_axis1": lambda x: mb.softmax(x=x, axis=1),
        "gelu_tanh": lambda x: mb.gelu(x=x, mode="TANH_APPROXIMATION"),
        "layer_norm": lambda x: mb.layer_norm(x=x, axes=[2, 3], epsilon=1e-5),
        "reduce_max_keep": lambda x: mb.reduce_max(x=x, axes=[1, 3], keep_dims=True),
        "sigmoid_hard": lambda x: mb.sigmoid_hard(x=x, alpha=0.3, beta=0.4),
        "concat_relu": lambda x: mb.concat(values=[x, mb.relu(x=x)], axis=2),
    }


def ios18_compression(mb, ct, types, out: Path):
    """iOS18 decompression: blockwise shift/scale (int8 data, blocks of 4) and per-row LUTs (uint2
    indices); ``x * a + b`` on a (2, 8) input. See ``ops_ref.ios18_reference``."""
    data = np.arange(-8, 8, dtype=np.int8).reshape(2, 8)
    scale = np.array([[0.5, 0.25], [1.0, 2.0]], np.float32)
    offset = np.array([[1, 0], [0, -1]], np.int8)
    indices = (np.arange(16) % 4).reshape(2, 8).astype(types.np_uint2_dtype)
    lut = np.array([[-1.0, 0.5, 2.0, 4.0], [3.0, 1.0, -2.0, 0.0]], np.float32).reshape(2, 1, 4, 1)

    @mb.program(input_specs=[mb.TensorSpec(shape=(2, 8))], opset_version=ct.target.iOS18)
    def prog(x):
        a = mb.constexpr_blockwise_shift_scale(data=data, scale=scale, offset=offset)
        b = mb.constexpr_lut_to_dense(indices=indices, lut=lut)
        return mb.add(x=mb.mul(x=x, y=a), y=b)

    model = ct.convert(
        prog,
        convert_to="mlprogram",
        compute_precision=ct.precision.FLOAT32,
        minimum_deployment_target=ct.target.iOS18,
    )
    model.save(str(out / "ios18_compression.mlpackage"))


def _one_input(body):
    def prog(x):
        return body(x)

    return prog


def main(out: Path):
    import coremltools as ct
    from coremltools.converters.mil import Builder as mb
    from coremltools.converters.mil.mil import types

    out.mkdir(parents=True, exist_ok=True)
    for name, body in cases(mb).items():
        prog = mb.program(input_specs=[mb.TensorSpec(shape=(1, 3, 7, 8))], opset_version=ct.target.iOS16)(
            _one_input(body)
        )

        model = ct.convert(
            prog,
            convert_to="mlprogram",
            compute_precision=ct.precision.FLOAT32,
            minimum_deployment_target=ct.target.iOS16,
        )
        model.save(str(out / f"{name}.mlpackage"))
    ios18_compression(mb, ct, types, out)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
