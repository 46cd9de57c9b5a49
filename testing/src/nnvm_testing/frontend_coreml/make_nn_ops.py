"""Tiny NeuralNetwork ``.mlmodel``s, one layer each, built with coremltools' NeuralNetworkBuilder:
``python make_nn_ops.py OUT_DIR``. Input ``x`` of shape (1, 3, 7, 8) (exact rank mapping); the test
computes each layer's documented semantics in numpy (``ops_ref.nn_reference``)."""

import sys
from pathlib import Path

import numpy as np


def weight() -> np.ndarray:
    return np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32)


def cases():
    w_hwio = weight().transpose(2, 3, 1, 0)  # the builder takes (height, width, in, out)
    conv = dict(
        kernel_channels=3,
        output_channels=4,
        height=3,
        width=3,
        groups=1,
        W=w_hwio,
        b=None,
        has_bias=False,
        input_name="x",
        output_name="y",
    )
    levels = np.round((w_hwio + 3) * 40).clip(0, 255).astype(np.uint8)
    wt = np.random.default_rng(1).standard_normal((3, 2, 3, 2)).astype(np.float32)  # (in, out, kh, kw)
    return {
        "prelu": lambda b: b.add_activation(
            "act", "PRELU", "x", "y", params=np.array([0.1, 0.2, 0.3], np.float32)
        ),
        "upsample_nearest": lambda b: b.add_upsample("up", 2, 3, "x", "y", mode="NN"),
        "upsample_bilinear_align": lambda b: b.add_upsample(
            "up", 2, 2, "x", "y", mode="BILINEAR", linear_upsample_mode="ALIGN_CORNERS_TRUE"
        ),
        "upsample_bilinear_half": lambda b: b.add_upsample(
            "up", 2, 3, "x", "y", mode="BILINEAR", linear_upsample_mode="ALIGN_CORNERS_FALSE"
        ),
        "crop": lambda b: b.add_crop(
            "crop", left=1, right=2, top=2, bottom=0, offset=None, input_names=["x"], output_name="y"
        ),
        "reduce_mean_hw": lambda b: b.add_reduce("r", "x", "y", axis="HW", mode="avg"),
        "reduce_l2_chw": lambda b: b.add_reduce("r", "x", "y", axis="CHW", mode="L2"),
        "lrn": lambda b: b.add_lrn("lrn", "x", "y", alpha=0.3, beta=0.75, local_size=3, k=2.0),
        "mvn": lambda b: b.add_mvn(
            "mvn", "x", "y", across_channels=False, normalize_variance=True, epsilon=1e-5
        ),
        "split": lambda b: b.add_split("split", "x", ["z", "y", "w"]),
        "slice_width": lambda b: b.add_slice(
            "slice", "x", "y", axis="width", start_index=1, end_index=-1, stride=2
        ),
        "deconvolution": lambda b: b.add_convolution(
            "deconv",
            kernel_channels=3,
            output_channels=2,
            height=3,
            width=2,
            stride_height=2,
            stride_width=3,
            border_mode="valid",
            groups=1,
            W=wt.transpose(2, 3, 0, 1),
            b=None,
            has_bias=False,
            is_deconv=True,
            input_name="x",
            output_name="y",
        ),
        "conv_valid_border": lambda b: b.add_convolution(
            "conv",
            stride_height=2,
            stride_width=1,
            border_mode="valid",
            padding_top=0,
            padding_bottom=2,
            padding_left=1,
            padding_right=0,
            **conv,
        ),
        "conv_same": lambda b: b.add_convolution(
            "conv", stride_height=2, stride_width=2, border_mode="same", **conv
        ),
        "conv_quantized": lambda b: b.add_convolution(
            "conv",
            stride_height=1,
            stride_width=1,
            border_mode="valid",
            **{**conv, "W": levels.tobytes()},
            quantization_type="linear",
            nbits=8,
            quant_scale=np.array([0.025], np.float32),
            quant_bias=np.array([-3.0], np.float32),
        ),
        "avg_pool_last_pixel": lambda b: b.add_pooling(
            "pool",
            3,
            3,
            2,
            2,
            "AVERAGE",
            "INCLUDE_LAST_PIXEL",
            "x",
            "y",
            exclude_pad_area=True,
            padding_top=1,
            padding_bottom=1,
            padding_left=1,
            padding_right=1,
        ),
        "max_pool_same": lambda b: b.add_pooling("pool", 2, 3, 2, 2, "MAX", "SAME", "x", "y"),
        "global_avg": lambda b: b.add_pooling(
            "pool", 0, 0, 0, 0, "AVERAGE", "VALID", "x", "y", is_global=True
        ),
        "leaky_relu": lambda b: b.add_activation("act", "LEAKYRELU", "x", "y", params=[0.1]),
        "sigmoid_hard": lambda b: b.add_activation("act", "SIGMOID_HARD", "x", "y", params=[0.3, 0.4]),
        "batchnorm": lambda b: b.add_batchnorm(
            "bn",
            3,
            np.array([1.0, 2.0, 0.5], np.float32),
            np.array([0.1, -0.2, 0.3], np.float32),
            mean=np.array([0.5, 0.0, -0.5], np.float32),
            variance=np.array([1.0, 4.0, 0.25], np.float32),
            input_name="x",
            output_name="y",
            epsilon=1e-5,
        ),
        "scale_bias": lambda b: b.add_scale(
            "scale",
            np.array([1.0, -2.0, 3.0], np.float32),
            np.array([0.5, 0.0, -1.0], np.float32),
            True,
            "x",
            "y",
            shape_scale=[3],
            shape_bias=[3],
        ),
        "padding_reflect": lambda b: b.add_padding(
            "pad",
            left=2,
            right=1,
            top=1,
            bottom=2,
            padding_type="reflection",
            input_name="x",
            output_name="y",
        ),
        "l2_normalize": lambda b: b.add_l2_normalize("l2", "x", "y", epsilon=1e-6),
        "softmax_nd": lambda b: b.add_softmax_nd("sm", "x", "y", axis=-1),
    }


def main(out: Path):
    import coremltools as ct
    from coremltools.models import datatypes
    from coremltools.models.neural_network import NeuralNetworkBuilder

    out.mkdir(parents=True, exist_ok=True)
    for name, add in cases().items():
        builder = NeuralNetworkBuilder(
            [("x", datatypes.Array(1, 3, 7, 8))], [("y", None)], disable_rank5_shape_mapping=True
        )
        add(builder)
        if name == "conv_same":  # and the same layer with float16 weights
            fp16 = builder.spec.__class__()
            fp16.CopyFrom(builder.spec)
            weights = fp16.neuralNetwork.layers[0].convolution.weights
            weights.float16Value = np.asarray(weights.floatValue, np.float16).tobytes()
            del weights.floatValue[:]
            ct.utils.save_spec(fp16, str(out / "conv_same_fp16.mlmodel"))
        ct.utils.save_spec(builder.spec, str(out / f"{name}.mlmodel"))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
