"""Build the CoreML test nets in the reference venv (coremltools + torch): ``python make_nets.py OUT_DIR``.

ResNet-18 and MobileNetV2 in torchvision's module layout (written here: PyPI's torchvision does not
import beside this torch), random weights and random BatchNorm statistics (fixed seeds), traced and
converted with coremltools to a NeuralNetwork ``.mlmodel`` and to ML Program ``.mlpackage``s in float32
and in the default float16. PyTorch's input and output are saved beside them as the reference.
"""

import sys
from pathlib import Path

import numpy as np
import torch
from torch import nn

SIZE = 64  # the nets' layers are all there at 64x64; compile and run time stay small


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class ResNet18(nn.Module):
    def __init__(self, num_classes=1000):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        layers, cin = [], 64
        for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            layers.append(nn.Sequential(BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)))
            cin = cout
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512, num_classes)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def conv_bn(cin, cout, k, stride, groups=1):
    return nn.Sequential(
        nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, groups=groups, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU6(inplace=True),
    )


class InvertedResidual(nn.Module):
    def __init__(self, cin, cout, stride, expand):
        super().__init__()
        hidden = cin * expand
        self.use_res_connect = stride == 1 and cin == cout
        layers = [conv_bn(cin, hidden, 1, 1)] if expand != 1 else []
        layers += [
            conv_bn(hidden, hidden, 3, stride, groups=hidden),
            nn.Conv2d(hidden, cout, 1, 1, 0, bias=False),
            nn.BatchNorm2d(cout),
        ]
        self.conv = nn.Sequential(*layers)

    def forward(self, x):
        return x + self.conv(x) if self.use_res_connect else self.conv(x)


class MobileNetV2(nn.Module):
    def __init__(self, num_classes=1000):
        super().__init__()
        settings = [
            (1, 16, 1, 1),
            (6, 24, 2, 2),
            (6, 32, 3, 2),
            (6, 64, 4, 2),
            (6, 96, 3, 1),
            (6, 160, 3, 2),
            (6, 320, 1, 1),
        ]
        features, cin = [conv_bn(3, 32, 3, 2)], 32
        for t, c, n, s in settings:
            for i in range(n):
                features.append(InvertedResidual(cin, c, s if i == 0 else 1, t))
                cin = c
        features.append(conv_bn(cin, 1280, 1, 1))
        self.features = nn.Sequential(*features)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, num_classes))

    def forward(self, x):
        x = nn.functional.adaptive_avg_pool2d(self.features(x), (1, 1))
        return self.classifier(torch.flatten(x, 1))


def randomize(net, seed):
    """Random weights and BatchNorm statistics, so a folded or dropped BatchNorm shows in the output."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, nn.Conv2d | nn.Linear):
                fan_in = m.weight[0].numel()
                m.weight.copy_(torch.randn(m.weight.shape, generator=g) * (2.0 / fan_in) ** 0.5)
                if m.bias is not None:
                    m.bias.copy_(torch.randn(m.bias.shape, generator=g) * 0.1)
            elif isinstance(m, nn.BatchNorm2d):
                c = m.num_features
                m.weight.copy_(torch.rand(c, generator=g) * 0.5 + 0.75)
                m.bias.copy_(torch.randn(c, generator=g) * 0.1)
                m.running_mean.copy_(torch.randn(c, generator=g) * 0.1)
                m.running_var.copy_(torch.rand(c, generator=g) * 0.5 + 0.75)
    return net.eval()


NETS = {"resnet18": (ResNet18, 0), "mobilenet_v2": (MobileNetV2, 1)}
FORMS = ("nn.mlmodel", "fp32.mlpackage", "fp16.mlpackage")


def main(out: Path):
    import coremltools as ct

    out.mkdir(parents=True, exist_ok=True)
    for name, (cls, seed) in NETS.items():
        net = randomize(cls(), seed)
        x = np.random.default_rng(seed).standard_normal((1, 3, SIZE, SIZE)).astype(np.float32)
        with torch.no_grad():
            y = net(torch.from_numpy(x)).numpy()
            traced = torch.jit.trace(net, torch.from_numpy(x))
        np.save(out / f"{name}.input.npy", x)
        np.save(out / f"{name}.output.npy", y)
        inputs = [ct.TensorType(name="input", shape=x.shape)]
        ct.convert(traced, inputs=inputs, convert_to="neuralnetwork").save(str(out / f"{name}.nn.mlmodel"))
        ct.convert(
            traced, inputs=inputs, convert_to="mlprogram", compute_precision=ct.precision.FLOAT32
        ).save(str(out / f"{name}.fp32.mlpackage"))
        ct.convert(traced, inputs=inputs, convert_to="mlprogram").save(str(out / f"{name}.fp16.mlpackage"))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
