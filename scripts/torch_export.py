"""Export ResNet-18 and MobileNetV2 with PyTorch's own ONNX exporter.

Runs in a separate venv that has torch (tests/test_pytorch_export.py builds it); the main environment
never imports torch. The models are written here as plain ``torch.nn`` modules (there is no CPU
torchvision build to borrow them from), seeded, with random BatchNorm running statistics so that a
compiler's BatchNorm folding is really exercised, and put in eval mode.

    python scripts/torch_export.py resnet18 OUT.onnx                  # torch's default: dynamo exporter
    python scripts/torch_export.py mobilenet_v2 OUT.onnx --variant torchscript

Variants, each a graph that torch really writes for users:

- ``dynamo``: ``torch.onnx.export(..., dynamo=True)``, the default: ``torch.export`` plus onnxscript,
  then onnxscript's optimizer, which folds BatchNorm into Conv and the shape arithmetic into constants.
- ``dynamo_unoptimized``: the same with ``optimize=False``: keeps ``BatchNormalization`` and the
  Shape/Concat/Expand/CastLike/Reshape chains that flatten the pooled features.
- ``torchscript``: the legacy tracer, ``dynamo=False`` (still present in torch 2.13).

Every file is self-contained (no external data) and passes ``onnx.checker`` with ``full_check``.
"""

from __future__ import annotations

import argparse
import io
import sys
import warnings

import onnx
import torch
from torch import nn

INPUT_NAME = "data"
OUTPUT_NAME = "output"
INPUT_SHAPE = (1, 3, 224, 224)
VARIANTS = ("dynamo", "dynamo_unoptimized", "torchscript")


class BasicBlock(nn.Module):
    """Two 3x3 conv-BN layers with an identity (or 1x1 conv-BN) shortcut, as in ResNet-18/34."""

    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class ResNet18(nn.Module):
    """ResNet-18 (He et al. 2015): stem, four stages of two BasicBlocks, global pool, classifier."""

    def __init__(self, num_classes: int = 1000):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True),
            nn.MaxPool2d(3, 2, 1),
        )
        layers, cin = [], 64
        for cout, stride in [(64, 1), (128, 2), (256, 2), (512, 2)]:
            layers += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
            cin = cout
        self.layers = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(512, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(self.layers(self.stem(x)))
        return self.fc(torch.flatten(x, 1))


def conv_bn_relu6(cin: int, cout: int, kernel: int, stride: int = 1, groups: int = 1) -> nn.Sequential:
    """Conv (no bias, "same" padding) + BatchNorm + ReLU6: MobileNetV2's building unit."""
    return nn.Sequential(
        nn.Conv2d(cin, cout, kernel, stride, kernel // 2, groups=groups, bias=False),
        nn.BatchNorm2d(cout), nn.ReLU6(inplace=True),
    )


class InvertedResidual(nn.Module):
    """MobileNetV2 block: 1x1 expand, 3x3 depthwise, 1x1 linear projection; residual when shapes allow."""

    def __init__(self, cin: int, cout: int, stride: int, expand: int):
        super().__init__()
        hidden = cin * expand
        layers = [] if expand == 1 else [conv_bn_relu6(cin, hidden, 1)]
        layers += [conv_bn_relu6(hidden, hidden, 3, stride, groups=hidden),
                   nn.Conv2d(hidden, cout, 1, bias=False), nn.BatchNorm2d(cout)]
        self.conv = nn.Sequential(*layers)
        self.use_residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv(x) if self.use_residual else self.conv(x)


class MobileNetV2(nn.Module):
    """MobileNetV2 (Sandler et al. 2018), width 1.0: the standard (t, c, n, s) table."""

    SETTINGS = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                (6, 160, 3, 2), (6, 320, 1, 1)]

    def __init__(self, num_classes: int = 1000):
        super().__init__()
        layers, cin = [conv_bn_relu6(3, 32, 3, 2)], 32
        for t, c, n, s in self.SETTINGS:
            for i in range(n):
                layers.append(InvertedResidual(cin, c, s if i == 0 else 1, t))
                cin = c
        layers.append(conv_bn_relu6(cin, 1280, 1))
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(self.features(x))
        return self.classifier(torch.flatten(x, 1))


MODELS = {"resnet18": ResNet18, "mobilenet_v2": MobileNetV2}


def build(name: str) -> nn.Module:
    """The seeded model in eval mode, with BatchNorm statistics and affine terms made non-trivial."""
    torch.manual_seed(0)
    model = MODELS[name]()
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.5, 0.5)
    return model.eval()


def export(name: str, path: str, variant: str = "dynamo") -> onnx.ModelProto:
    """Export model ``name`` to ``path`` as ``variant`` (see the module docstring); returns the model."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; choose one of {VARIANTS}")
    model = build(name)
    x = torch.randn(INPUT_SHAPE)
    names = dict(input_names=[INPUT_NAME], output_names=[OUTPUT_NAME])
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # both exporters are chatty; failures still raise
        if variant == "torchscript":
            buf = io.BytesIO()
            torch.onnx.export(model, (x,), buf, dynamo=False, **names)
            proto = onnx.load_from_string(buf.getvalue())
        else:
            program = torch.onnx.export(model, (x,), dynamo=True, external_data=False,
                                        optimize=variant == "dynamo", **names)
            proto = program.model_proto
    onnx.checker.check_model(proto, full_check=True)
    onnx.save(proto, path, save_as_external_data=False)
    return proto


def describe(proto: onnx.ModelProto) -> str:
    """One line: opsets, node count, and the sorted set of op types (for reports on frontend coverage)."""
    opsets = ",".join(f"{o.domain or 'ai.onnx'}:{o.version}" for o in proto.opset_import)
    ops = sorted({n.op_type for n in proto.graph.node})
    return f"opset {opsets}; {len(proto.graph.node)} nodes; ops {ops}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model", choices=sorted(MODELS))
    parser.add_argument("out", help="path of the .onnx file to write")
    parser.add_argument("--variant", choices=VARIANTS, default="dynamo")
    args = parser.parse_args(argv)
    proto = export(args.model, args.out, args.variant)
    print(f"{args.model} ({args.variant}, torch {torch.__version__}) -> {args.out}: {describe(proto)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
