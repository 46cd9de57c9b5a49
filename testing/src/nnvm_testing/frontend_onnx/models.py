"""Reference models for tests and benchmarks, built with ``onnx.helper`` (no download, no PyTorch).

``resnet18``, ``resnet50``, ``mobilenet_v2``, ``squeezenet1_1`` and ``densenet121`` are the real
architectures (torchvision's layer for layer, as PyTorch exports them at opset 13 without folding
batch normalization) with seeded random weights: He-initialized convolutions, random biases and
random batch-norm statistics, so that folding batch normalization into convolutions changes real
numbers. ``cached_model_path`` writes a model to disk once; ``light_model_paths`` finds the nine
small-weight model zoo networks that ship inside ``onnx`` (``cached_model_path("light_resnet50")``).
"""

from __future__ import annotations

import os
import tempfile

import numpy as np

from nnvm import environment

# Bump when the generated models change, so cached files are rebuilt.
MODELS_VERSION = "2"
OPSET = 13
LIGHT_MODELS = ("bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet",
                "squeezenet", "vgg19", "zfnet512")


class _Net:
    """Collects nodes and initializers while a network is described layer by layer."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes: list = []
        self.inits: list = []

    def weight(self, name: str, array) -> str:
        from onnx import numpy_helper

        self.inits.append(numpy_helper.from_array(np.asarray(array, dtype=np.float32), name))
        return name

    def node(self, op: str, inputs, name: str, out: str | None = None, **attrs) -> str:
        from onnx import helper

        out = out or f"{name}_output"
        self.nodes.append(helper.make_node(op, list(inputs), [out], name=name, **attrs))
        return out

    def conv_bn(self, x: str, cin: int, cout: int, k: int, stride: int, name: str, groups: int = 1,
                act: str | None = "relu") -> str:
        """Conv (no bias) -> BatchNormalization -> optional ReLU or ReLU6, as PyTorch exports them."""
        fan_in = cin // groups * k * k
        w = self.rng.normal(0.0, np.sqrt(2.0 / fan_in), (cout, cin // groups, k, k))
        y = self.node("Conv", [x, self.weight(f"{name}.weight", w)], name,
                      kernel_shape=[k, k], strides=[stride, stride], pads=[k // 2] * 4, group=groups,
                      dilations=[1, 1])
        bn = f"{name}.bn"
        params = [
            self.weight(f"{bn}.weight", self.rng.uniform(0.5, 1.5, cout)),
            self.weight(f"{bn}.bias", self.rng.normal(0.0, 0.1, cout)),
            self.weight(f"{bn}.running_mean", self.rng.normal(0.0, 0.1, cout)),
            self.weight(f"{bn}.running_var", self.rng.uniform(0.5, 1.5, cout)),
        ]
        y = self.node("BatchNormalization", [y, *params], bn, epsilon=1e-5, momentum=0.9)
        if act == "relu":
            y = self.node("Relu", [y], f"{name}.relu")
        elif act == "relu6":
            lo = self.weight(f"{name}.relu6.min", np.array(0.0))
            hi = self.weight(f"{name}.relu6.max", np.array(6.0))
            y = self.node("Clip", [y, lo, hi], f"{name}.relu6")
        return y

    def conv(self, x: str, cin: int, cout: int, k: int, stride: int, pad: int, name: str,
             bias: bool = True) -> str:
        """A plain Conv, with a bias (SqueezeNet's layers) or without (DenseNet's, after batch norm)."""
        w = self.rng.normal(0.0, np.sqrt(2.0 / (cin * k * k)), (cout, cin, k, k))
        inputs = [x, self.weight(f"{name}.weight", w)]
        if bias:
            inputs.append(self.weight(f"{name}.bias", self.rng.normal(0.0, 0.1, cout)))
        return self.node("Conv", inputs, name, kernel_shape=[k, k], strides=[stride, stride], pads=[pad] * 4,
                         group=1, dilations=[1, 1])

    def bn_relu(self, x: str, c: int, name: str) -> str:
        """BatchNormalization -> ReLU on its own (DenseNet's pre-activation layers)."""
        params = [
            self.weight(f"{name}.weight", self.rng.uniform(0.5, 1.5, c)),
            self.weight(f"{name}.bias", self.rng.normal(0.0, 0.1, c)),
            self.weight(f"{name}.running_mean", self.rng.normal(0.0, 0.1, c)),
            self.weight(f"{name}.running_var", self.rng.uniform(0.5, 1.5, c)),
        ]
        y = self.node("BatchNormalization", [x, *params], name, epsilon=1e-5, momentum=0.9)
        return self.node("Relu", [y], f"{name}.relu")

    def classifier(self, x: str, cin: int, classes: int = 1000) -> str:
        x = self.node("GlobalAveragePool", [x], "avgpool")
        x = self.node("Flatten", [x], "flatten", axis=1)
        bound = 1.0 / np.sqrt(cin)
        w = self.weight("fc.weight", self.rng.uniform(-bound, bound, (classes, cin)))
        b = self.weight("fc.bias", self.rng.uniform(-bound, bound, classes))
        return self.node("Gemm", [x, w, b], "fc", out="output", alpha=1.0, beta=1.0, transB=1)

    def model(self, name: str, x: str, batch: int, classes: int = 1000):
        from onnx import TensorProto, helper

        graph = helper.make_graph(
            self.nodes, name,
            [helper.make_tensor_value_info(x, TensorProto.FLOAT, [batch, 3, 224, 224])],
            [helper.make_tensor_value_info("output", TensorProto.FLOAT, [batch, classes])],
            initializer=self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                                  producer_name="nnvm_testing.frontend_onnx")
        model.ir_version = 8  # readable by every onnxruntime from 1.12 on
        return model


def resnet18(seed: int = 0, batch: int = 1):
    """ResNet-18 (He et al. 2015; torchvision's layout) with seeded random weights, opset 13.

    Input ``data`` (batch, 3, 224, 224), output ``output`` (batch, 1000).
    """
    net = _Net(seed)
    x = net.conv_bn("data", 3, 64, 7, 2, "conv1")
    x = net.node("MaxPool", [x], "maxpool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 64
    for stage, (cout, stride) in enumerate([(64, 1), (128, 2), (256, 2), (512, 2)], start=1):
        for block in range(2):
            name = f"layer{stage}.{block}"
            s = stride if block == 0 else 1
            y = net.conv_bn(x, cin, cout, 3, s, f"{name}.conv1")
            y = net.conv_bn(y, cout, cout, 3, 1, f"{name}.conv2", act=None)
            if s != 1 or cin != cout:
                x = net.conv_bn(x, cin, cout, 1, s, f"{name}.downsample", act=None)
            y = net.node("Add", [y, x], f"{name}.add")
            x = net.node("Relu", [y], f"{name}.relu")
            cin = cout
    net.classifier(x, 512)
    return net.model("resnet18", "data", batch)


def mobilenet_v2(seed: int = 0, batch: int = 1):
    """MobileNetV2 (Sandler et al. 2018; torchvision's layout, width 1.0) with seeded random weights.

    ReLU6 is ``Clip(0, 6)``; inverted residual blocks add their input when stride and width allow.
    Input ``data`` (batch, 3, 224, 224), output ``output`` (batch, 1000).
    """
    net = _Net(seed)
    x = net.conv_bn("data", 3, 32, 3, 2, "features.0", act="relu6")
    cin, index = 32, 1
    for t, c, n, s in [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                       (6, 160, 3, 2), (6, 320, 1, 1)]:
        for i in range(n):
            stride = s if i == 0 else 1
            name = f"features.{index}"
            hidden = cin * t
            y = x
            if t != 1:
                y = net.conv_bn(y, cin, hidden, 1, 1, f"{name}.expand", act="relu6")
            y = net.conv_bn(y, hidden, hidden, 3, stride, f"{name}.depthwise", groups=hidden, act="relu6")
            y = net.conv_bn(y, hidden, c, 1, 1, f"{name}.project", act=None)
            if stride == 1 and cin == c:
                y = net.node("Add", [x, y], f"{name}.add")
            x, cin, index = y, c, index + 1
    x = net.conv_bn(x, cin, 1280, 1, 1, f"features.{index}", act="relu6")
    net.classifier(x, 1280)
    return net.model("mobilenet_v2", "data", batch)


def resnet50(seed: int = 0, batch: int = 1):
    """ResNet-50 (torchvision's v1.5: the stride sits on each bottleneck's 3x3 conv), seeded weights.

    Input ``data`` (batch, 3, 224, 224), output ``output`` (batch, 1000).
    """
    net = _Net(seed)
    x = net.conv_bn("data", 3, 64, 7, 2, "conv1")
    x = net.node("MaxPool", [x], "maxpool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 64
    for stage, (width, blocks, stride) in enumerate([(64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)],
                                                    start=1):
        for block in range(blocks):
            name = f"layer{stage}.{block}"
            s = stride if block == 0 else 1
            y = net.conv_bn(x, cin, width, 1, 1, f"{name}.conv1")
            y = net.conv_bn(y, width, width, 3, s, f"{name}.conv2")
            y = net.conv_bn(y, width, width * 4, 1, 1, f"{name}.conv3", act=None)
            if block == 0:
                x = net.conv_bn(x, cin, width * 4, 1, s, f"{name}.downsample", act=None)
            y = net.node("Add", [y, x], f"{name}.add")
            x = net.node("Relu", [y], f"{name}.relu")
            cin = width * 4
    net.classifier(x, 2048)
    return net.model("resnet50", "data", batch)


def squeezenet1_1(seed: int = 0, batch: int = 1):
    """SqueezeNet 1.1 (Iandola et al. 2016; torchvision's layout) with seeded random weights.

    Fire modules: a 1x1 squeeze conv, then 1x1 and 3x3 expand convs concatenated on channels; max
    pools round up (``ceil_mode``); the classifier is a 1x1 conv to 1000 channels, ReLU, global
    average pool and flatten (dropout is gone in inference). Convs carry biases and no batch norm.
    Input ``data`` (batch, 3, 224, 224), output ``output`` (batch, 1000).
    """
    net = _Net(seed)

    def relu_conv(x, cin, cout, k, stride, pad, name):
        return net.node("Relu", [net.conv(x, cin, cout, k, stride, pad, name)], f"{name}.relu")

    def maxpool(x, name):
        return net.node("MaxPool", [x], name, kernel_shape=[3, 3], strides=[2, 2], pads=[0, 0, 0, 0],
                        ceil_mode=1)

    def fire(x, cin, squeeze, expand, name):
        s = relu_conv(x, cin, squeeze, 1, 1, 0, f"{name}.squeeze")
        a = relu_conv(s, squeeze, expand, 1, 1, 0, f"{name}.expand1x1")
        b = relu_conv(s, squeeze, expand, 3, 1, 1, f"{name}.expand3x3")
        return net.node("Concat", [a, b], f"{name}.concat", axis=1)

    x = relu_conv("data", 3, 64, 3, 2, 0, "features.0")
    x = maxpool(x, "features.2")
    x = fire(x, 64, 16, 64, "features.3")
    x = fire(x, 128, 16, 64, "features.4")
    x = maxpool(x, "features.5")
    x = fire(x, 128, 32, 128, "features.6")
    x = fire(x, 256, 32, 128, "features.7")
    x = maxpool(x, "features.8")
    x = fire(x, 256, 48, 192, "features.9")
    x = fire(x, 384, 48, 192, "features.10")
    x = fire(x, 384, 64, 256, "features.11")
    x = fire(x, 512, 64, 256, "features.12")
    x = relu_conv(x, 512, 1000, 1, 1, 0, "classifier.1")
    x = net.node("GlobalAveragePool", [x], "classifier.3")
    net.node("Flatten", [x], "flatten", out="output", axis=1)
    return net.model("squeezenet1_1", "data", batch)


def densenet121(seed: int = 0, batch: int = 1):
    """DenseNet-121 (Huang et al. 2017; torchvision's layout: growth 32, blocks 6-12-24-16, bottleneck
    width 4 x growth, transitions halving channels) with seeded random weights.

    Each dense layer is BN -> ReLU -> 1x1 conv -> BN -> ReLU -> 3x3 conv on the concatenation of all
    earlier features of its block, one ``Concat`` per layer, as PyTorch exports ``torch.cat``.
    Input ``data`` (batch, 3, 224, 224), output ``output`` (batch, 1000).
    """
    net = _Net(seed)
    growth, width = 32, 4 * 32
    x = net.conv_bn("data", 3, 64, 7, 2, "features.conv0")
    x = net.node("MaxPool", [x], "features.pool0", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    channels = 64
    for block, layers in enumerate([6, 12, 24, 16], start=1):
        features = [x]
        for layer in range(1, layers + 1):
            name = f"features.denseblock{block}.denselayer{layer}"
            cin = channels + growth * (layer - 1)
            y = features[0] if len(features) == 1 else net.node("Concat", features, f"{name}.cat", axis=1)
            y = net.bn_relu(y, cin, f"{name}.norm1")
            y = net.conv(y, cin, width, 1, 1, 0, f"{name}.conv1", bias=False)
            y = net.bn_relu(y, width, f"{name}.norm2")
            y = net.conv(y, width, growth, 3, 1, 1, f"{name}.conv2", bias=False)
            features.append(y)
        x = net.node("Concat", features, f"features.denseblock{block}.cat", axis=1)
        channels += growth * layers
        if block < 4:
            name = f"features.transition{block}"
            x = net.bn_relu(x, channels, f"{name}.norm")
            x = net.conv(x, channels, channels // 2, 1, 1, 0, f"{name}.conv", bias=False)
            x = net.node("AveragePool", [x], f"{name}.pool", kernel_shape=[2, 2], strides=[2, 2])
            channels //= 2
    x = net.bn_relu(x, channels, "features.norm5")
    net.classifier(x, channels)
    return net.model("densenet121", "data", batch)


BUILDERS = {"resnet18": resnet18, "resnet50": resnet50, "mobilenet_v2": mobilenet_v2,
            "squeezenet1_1": squeezenet1_1, "densenet121": densenet121}


def cache_dir() -> str:
    """``$NNVM_CACHE_DIR/models`` or ``~/.cache/nnvm/models``: outside any checkout."""
    return str(environment.cache_dir() / "models")


def cached_model_path(name: str, seed: int = 0, batch: int = 1) -> str:
    """Path of model ``name`` (one of ``BUILDERS``, or a light model), written once.

    A name in ``BUILDERS`` is the generated model (``densenet121`` and ``resnet50`` too, which are also
    light models: ask for ``light_densenet121`` to get the shipped one). Generated models are keyed
    by name, seed, batch and ``MODELS_VERSION``; the file is written to a
    temporary name and renamed, so concurrent test workers never read a half-written model.
    """
    if name not in BUILDERS and name.removeprefix("light_") in LIGHT_MODELS:
        return light_model_paths()[name.removeprefix("light_")]
    if name not in BUILDERS:
        raise KeyError(f"unknown model {name!r}; known: {', '.join([*BUILDERS, *LIGHT_MODELS])}")
    directory = cache_dir()
    path = os.path.join(directory, f"{name}-s{seed}-b{batch}-v{MODELS_VERSION}.onnx")
    if not os.path.exists(path):
        os.makedirs(directory, exist_ok=True)
        data = BUILDERS[name](seed=seed, batch=batch).SerializeToString()
        fd, tmp = tempfile.mkstemp(dir=directory, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    return path


def dynamic_batch_copy(path: str, out: str) -> tuple[str, str, list]:
    """``path`` saved to ``out`` declaring dim_param ``batch`` on the first axis of its input and outputs
    (a CNN as a dynamic-batch export has it): ``(out, input name, the input's shape in path)``."""
    import onnx

    model = onnx.load(path)
    inits = {t.name for t in model.graph.initializer}
    (inp,) = [i for i in model.graph.input if i.name not in inits]
    shape = [d.dim_value for d in inp.type.tensor_type.shape.dim]
    for value in [inp, *model.graph.output]:
        value.type.tensor_type.shape.dim[0].dim_param = "batch"
    onnx.save(model, str(out))
    return str(out), inp.name, shape


def light_model_paths() -> dict:
    """name -> path of the nine ``light_*.onnx`` models shipped in ``onnx/backend/test/data/light``.

    Their weights are ``ConstantOfShape`` nodes (every weight 0.02), so the files are tiny; the
    architectures are the ONNX model zoo's (opset 9).
    """
    import onnx

    directory = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
    paths = {name: os.path.join(directory, f"light_{name}.onnx") for name in LIGHT_MODELS}
    return {name: p for name, p in paths.items() if os.path.exists(p)}


def light_model(name: str, seed: int | None = 0):
    """The light model ``name`` with its ``ConstantOfShape`` weights replaced by seeded random ones.

    Every weight being 0.02 makes outputs nearly constant, which would let wrong numbers pass a
    comparison; random weights (He-scaled convolution and dense weights, positive batch-norm
    variances and scales) make each one count. ``seed=None`` returns the model as shipped.
    """
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    model = onnx.load(light_model_paths()[name.removeprefix("light_")])
    if seed is None:
        return model
    rng = np.random.default_rng(seed)
    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    roles = {}  # value -> (consumer op, input index)
    for n in graph.node:
        for k, v in enumerate(n.input):
            roles.setdefault(v, (n.op_type, k))
    keep = []
    for n in graph.node:
        if n.op_type != "ConstantOfShape" or n.input[0] not in inits:
            keep.append(n)
            continue
        shape = tuple(int(d) for d in numpy_helper.to_array(inits[n.input[0]]))
        op, k = roles.get(n.output[0], ("", 0))
        if len(shape) >= 2:  # conv or dense weight
            fan_in = int(np.prod(shape[1:]))
            value = rng.normal(0.0, np.sqrt(2.0 / fan_in), shape)
        elif (op, k) in {("BatchNormalization", 1), ("BatchNormalization", 4), ("Unsqueeze", 0)}:
            value = rng.uniform(0.5, 1.5, shape)  # scales and variances stay positive
        else:
            value = rng.normal(0.0, 0.1, shape)
        graph.initializer.append(numpy_helper.from_array(value.astype(np.float32), n.output[0]))
        # IR version 3 wants every initializer listed among the graph inputs as well.
        graph.input.append(helper.make_tensor_value_info(n.output[0], TensorProto.FLOAT, shape))
    del graph.node[:]
    graph.node.extend(keep)
    return model
