"""Train ResNet-18 or MobileNetV2 on the synthetic task and export it to ONNX (in the torch venv).

    python scripts/train_synthetic.py resnet18 OUT.onnx [--steps N] [--batch 32]

The task is ``nnvm_testing/frontend_onnx/synthetic_task.py`` (imported by path: this venv has torch and
numpy, not nnvm). The networks are the standard architectures written here in torch (torchvision is
not in the venv), their classifier sized to the task's classes. Trained with Adam and a cosine schedule
from ``torch.manual_seed(0)``; the held-out accuracy is printed. Exported in eval mode with a fixed
``(1, 3, 32, 32)`` input named ``data`` (as the zoo models) and the output ``logits``, by the torchscript
exporter (opset 17).
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import math
import sys
import time
from pathlib import Path

import onnx
import torch
from torch import nn

TASK_FILE = (Path(__file__).resolve().parent.parent
             / "testing/src/nnvm_testing/frontend_onnx/synthetic_task.py")


def load_task():
    spec = importlib.util.spec_from_file_location("synthetic_task", TASK_FILE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def conv_bn(cin: int, cout: int, k: int, stride: int = 1, groups: int = 1) -> list:
    return [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.body = nn.Sequential(*conv_bn(cin, cout, 3, stride), nn.ReLU(inplace=True),
                                  *conv_bn(cout, cout, 3))
        same = stride == 1 and cin == cout
        self.skip = nn.Identity() if same else nn.Sequential(*conv_bn(cin, cout, 1, stride))

    def forward(self, x):
        return torch.relu(self.body(x) + self.skip(x))


def resnet18(classes: int) -> nn.Module:
    layers = [*conv_bn(3, 64, 7, 2), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        layers += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
        cin = cout
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, classes))


class InvertedResidual(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, expand: int):
        super().__init__()
        mid = cin * expand
        layers = [*conv_bn(cin, mid, 1), nn.ReLU6(inplace=True)] if expand != 1 else []
        layers += [*conv_bn(mid, mid, 3, stride, groups=mid), nn.ReLU6(inplace=True), *conv_bn(mid, cout, 1)]
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        return x + self.body(x) if self.residual else self.body(x)


def mobilenet_v2(classes: int) -> nn.Module:
    layers, cin = [*conv_bn(3, 32, 3, 2), nn.ReLU6(inplace=True)], 32
    for expand, cout, repeat, stride in ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                                         (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)):
        for k in range(repeat):
            layers.append(InvertedResidual(cin, cout, stride if k == 0 else 1, expand))
            cin = cout
    layers += [*conv_bn(cin, 1280, 1), nn.ReLU6(inplace=True), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
               nn.Linear(1280, classes)]
    return nn.Sequential(*layers)


NETWORKS = {"resnet18": resnet18, "mobilenet_v2": mobilenet_v2}
STEPS = {"resnet18": 300, "mobilenet_v2": 1200}  # MobileNetV2 reached 42% held-out accuracy in 300


def train(name: str, steps: int, batch: int) -> nn.Module:
    task = load_task()
    torch.manual_seed(0)
    torch.set_num_threads(2)
    model = NETWORKS[name](task.CLASSES)
    images, labels = task.labelled_images(steps * batch // 4, seed=100)  # each image seen about 4 times
    held_images, held_labels = task.labelled_images(1000, seed=101)
    opt = torch.optim.Adam(model.parameters(), lr=2e-3, weight_decay=1e-4)
    schedule = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.5 * (1 + math.cos(math.pi * s / steps)))
    x_all, y_all = torch.from_numpy(images), torch.from_numpy(labels)
    g = torch.Generator().manual_seed(0)
    start = time.time()
    model.train()
    for step in range(steps):
        idx = torch.randint(0, len(x_all), (batch,), generator=g)
        loss = nn.functional.cross_entropy(model(x_all[idx]), y_all[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        schedule.step()
        if step % 50 == 0 or step == steps - 1:
            print(f"{name} step {step}: loss {loss.item():.3f} ({time.time() - start:.0f} s)",
                  file=sys.stderr)
    model.eval()
    with torch.no_grad():
        pred = torch.cat([model(torch.from_numpy(held_images[k:k + 100])).argmax(1)
                          for k in range(0, 1000, 100)])
    accuracy = float((pred.numpy() == held_labels).mean())
    print(f"{name}: held-out accuracy {accuracy:.3f} after {steps} steps of {batch}", file=sys.stderr)
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("name", choices=sorted(NETWORKS))
    parser.add_argument("out")
    parser.add_argument("--steps", type=int, help="default: STEPS of the network")
    parser.add_argument("--batch", type=int, default=32)
    args = parser.parse_args()
    model = train(args.name, args.steps or STEPS[args.name], args.batch)
    task = load_task()
    buf = io.BytesIO()
    with torch.no_grad():
        example = (torch.zeros(1, 3, task.SIZE, task.SIZE),)
        torch.onnx.export(model, example, buf, dynamo=False, opset_version=17,
                          input_names=["data"], output_names=["logits"])
    proto = onnx.load_from_string(buf.getvalue())
    onnx.checker.check_model(proto, full_check=True)
    onnx.save(proto, args.out)


if __name__ == "__main__":
    main()
