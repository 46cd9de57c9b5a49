"""Export the issue-19 benchmark models (eleven CNNs, three transformers) with PyTorch's ONNX exporter.

Runs in the torch venv (``nnvm_testing.frontend_onnx.torch_models`` builds it and calls this script);
the main environment never imports torch. There is no CPU torchvision build, so every network is
written here in plain ``torch.nn`` after the published architecture, seeded (``torch.manual_seed(0)``),
with random BatchNorm statistics (as ``scripts/torch_export.py``, whose ResNet-18 and MobileNetV2 are
reused), in eval mode, exported by torch's default (dynamo) exporter with a fixed batch dimension.

    python scripts/torch_zoo.py shufflenet OUT.onnx --batch 8

CNNs follow the ONNX model zoo's set: ``alexnet``, ``zfnet512`` (the zoo's: 7x7/2 first conv, 512-
channel 3x3 convs, 1024-wide second dense layer; no LRN), ``vgg19``, ``squeezenet`` (1.0, as the zoo),
``googlenet`` (inception v1 with BN convs, torchvision's layout, no auxiliary heads), ``inception_v2``
(BN-Inception, Ioffe and Szegedy 2015, as the zoo's inception_v2), ``shufflenet`` (ShuffleNet v1 with
grouped 1x1 convolutions, g=4, the zoo's 0.5x widths 136/272/544), ``resnet18``, ``resnet50``,
``densenet121``, ``mobilenet_v2``. Transformers (token ids in, ``int64``; ViT takes an image):
``bert`` (BERT-base-like encoder: 12 layers, 768 wide, 12 heads, sequence 128, post-norm, GELU),
``gpt2`` (GPT-2-small-like causal decoder: 12 layers, 768 wide, pre-norm, tanh GELU, tied LM head,
sequence 128), ``vit`` (ViT-tiny: 16x16 patches of 224x224, 192 wide, 3 heads, 12 layers).
"""

from __future__ import annotations

import argparse
import math
import sys
import warnings

import onnx
import torch
import torch_export
from torch import nn

OUTPUT_NAME = "output"


def conv_bn(cin: int, cout: int, k: int, stride: int = 1, pad: int | None = None, groups: int = 1,
            relu: bool = True) -> nn.Sequential:
    """Conv (no bias) + BatchNorm (+ ReLU), the unit of every BN network here."""
    layers = [nn.Conv2d(cin, cout, k, stride, k // 2 if pad is None else pad, groups=groups, bias=False),
              nn.BatchNorm2d(cout)]
    return nn.Sequential(*layers, nn.ReLU(inplace=True)) if relu else nn.Sequential(*layers)


def conv_relu(cin: int, cout: int, k: int, stride: int = 1, pad: int = 0) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, k, stride, pad), nn.ReLU(inplace=True))


def classifier(cin: int, hidden: list[int], classes: int = 1000) -> nn.Sequential:
    """Flatten, then Linear + ReLU (+ dropout, gone in eval) layers, then the class layer."""
    layers: list[nn.Module] = [nn.Flatten()]
    for width in hidden:
        layers += [nn.Dropout(0.5), nn.Linear(cin, width), nn.ReLU(inplace=True)]
        cin = width
    return nn.Sequential(*layers, nn.Linear(cin, classes))


def alexnet() -> nn.Module:
    """AlexNet, torchvision's single-tower layout (the 6x6 average pool is the identity at 224)."""
    return nn.Sequential(
        conv_relu(3, 64, 11, 4, 2), nn.MaxPool2d(3, 2), conv_relu(64, 192, 5, 1, 2), nn.MaxPool2d(3, 2),
        conv_relu(192, 384, 3, 1, 1), conv_relu(384, 256, 3, 1, 1), conv_relu(256, 256, 3, 1, 1),
        nn.MaxPool2d(3, 2), classifier(256 * 6 * 6, [4096, 4096]))


def zfnet512() -> nn.Module:
    """ZFNet-512 as in the ONNX model zoo: 7x7/2 and 5x5/2 convs, three 512-channel 3x3 convs."""
    return nn.Sequential(
        conv_relu(3, 96, 7, 2), nn.MaxPool2d(3, 2), conv_relu(96, 256, 5, 2), nn.MaxPool2d(3, 2),
        conv_relu(256, 512, 3, 1, 1), conv_relu(512, 512, 3, 1, 1), conv_relu(512, 512, 3, 1, 1),
        nn.MaxPool2d(2, 2), classifier(512 * 6 * 6, [4096, 1024]))


def vgg19() -> nn.Module:
    """VGG-19 (configuration E, no batch norm); the 7x7 average pool is the identity at 224."""
    layers: list[nn.Module] = []
    cin = 3
    for width, convs in [(64, 2), (128, 2), (256, 4), (512, 4), (512, 4)]:
        for _ in range(convs):
            layers.append(conv_relu(cin, width, 3, 1, 1))
            cin = width
        layers.append(nn.MaxPool2d(2, 2))
    return nn.Sequential(*layers, classifier(512 * 7 * 7, [4096, 4096]))


class Fire(nn.Module):
    def __init__(self, cin: int, squeeze: int, expand: int):
        super().__init__()
        self.squeeze = conv_relu(cin, squeeze, 1)
        self.expand1x1 = conv_relu(squeeze, expand, 1)
        self.expand3x3 = conv_relu(squeeze, expand, 3, 1, 1)

    def forward(self, x):
        x = self.squeeze(x)
        return torch.cat([self.expand1x1(x), self.expand3x3(x)], 1)


def squeezenet() -> nn.Module:
    """SqueezeNet 1.0 (the ONNX zoo's version): 7x7/2 stem, eight fire modules, 1x1 conv classifier."""
    pool = lambda: nn.MaxPool2d(3, 2, ceil_mode=True)  # noqa: E731
    return nn.Sequential(
        conv_relu(3, 96, 7, 2), pool(), Fire(96, 16, 64), Fire(128, 16, 64), Fire(128, 32, 128), pool(),
        Fire(256, 32, 128), Fire(256, 48, 192), Fire(384, 48, 192), Fire(384, 64, 256), pool(),
        Fire(512, 64, 256), conv_relu(512, 1000, 1), nn.AdaptiveAvgPool2d(1), nn.Flatten())


class Inception(nn.Module):
    """One inception module: 1x1 | 1x1 -> 3x3 | 1x1 -> 3x3 (-> 3x3) | pool -> 1x1, concatenated.

    ``b1 == 0`` drops the 1x1 branch and ``proj == 0`` passes the pool through unprojected (BN-Inception's
    stride-2 modules); ``double`` makes the third branch two 3x3 convs (BN-Inception) instead of one
    (GoogLeNet's 5x5 branch, which torchvision also runs as a 3x3: a known quirk kept here).
    """

    def __init__(self, cin, b1, r3, c3, r5, c5, proj, stride=1, pool="max", double=True):
        super().__init__()
        self.b1 = conv_bn(cin, b1, 1) if b1 else None
        self.b2 = nn.Sequential(conv_bn(cin, r3, 1), conv_bn(r3, c3, 3, stride))
        third = [conv_bn(cin, r5, 1), conv_bn(r5, c5, 3)]
        if double:
            third[-1] = conv_bn(r5, c5, 3)
            third.append(conv_bn(c5, c5, 3, stride))
        self.b3 = nn.Sequential(*third)
        pooling = (nn.MaxPool2d(3, stride, 1, ceil_mode=stride == 1) if pool == "max"
                   else nn.AvgPool2d(3, stride, 1, count_include_pad=False))
        self.b4 = nn.Sequential(pooling, conv_bn(cin, proj, 1)) if proj else pooling

    def forward(self, x):
        branches = [self.b2(x), self.b3(x), self.b4(x)]
        return torch.cat(([self.b1(x)] if self.b1 is not None else []) + branches, 1)


def googlenet() -> nn.Module:
    """GoogLeNet (inception v1), torchvision's layout with BN convs, without the auxiliary heads."""
    pool = lambda: nn.MaxPool2d(3, 2, ceil_mode=True)  # noqa: E731
    cfg = lambda cin, *a: Inception(cin, *a, double=False)  # noqa: E731
    return nn.Sequential(
        conv_bn(3, 64, 7, 2), pool(), conv_bn(64, 64, 1), conv_bn(64, 192, 3), pool(),
        cfg(192, 64, 96, 128, 16, 32, 32), cfg(256, 128, 128, 192, 32, 96, 64), pool(),
        cfg(480, 192, 96, 208, 16, 48, 64), cfg(512, 160, 112, 224, 24, 64, 64),
        cfg(512, 128, 128, 256, 24, 64, 64), cfg(512, 112, 144, 288, 32, 64, 64),
        cfg(528, 256, 160, 320, 32, 128, 128), pool(),
        cfg(832, 256, 160, 320, 32, 128, 128), cfg(832, 384, 192, 384, 48, 128, 128),
        nn.AdaptiveAvgPool2d(1), classifier(1024, []))


def inception_v2() -> nn.Module:
    """BN-Inception (Ioffe and Szegedy 2015, the ONNX zoo's inception_v2): 5x5 branches as two 3x3s,
    average-pool projections, stride-2 modules 3c and 4e that concatenate an unprojected max pool."""
    return nn.Sequential(
        conv_bn(3, 64, 7, 2), nn.MaxPool2d(3, 2, ceil_mode=True), conv_bn(64, 64, 1), conv_bn(64, 192, 3),
        nn.MaxPool2d(3, 2, ceil_mode=True),
        Inception(192, 64, 64, 64, 64, 96, 32, pool="avg"),     # 3a -> 256
        Inception(256, 64, 64, 96, 64, 96, 64, pool="avg"),     # 3b -> 320
        Inception(320, 0, 128, 160, 64, 96, 0, stride=2),       # 3c -> 576
        Inception(576, 224, 64, 96, 96, 128, 128, pool="avg"),  # 4a
        Inception(576, 192, 96, 128, 96, 128, 128, pool="avg"),  # 4b
        Inception(576, 160, 128, 160, 128, 160, 96, pool="avg"),  # 4c
        Inception(576, 96, 128, 192, 160, 192, 96, pool="avg"),  # 4d
        Inception(576, 0, 128, 192, 192, 256, 0, stride=2),     # 4e -> 1024
        Inception(1024, 352, 192, 320, 160, 224, 128, pool="avg"),  # 5a
        Inception(1024, 352, 192, 320, 192, 224, 128),          # 5b (max pool)
        nn.AdaptiveAvgPool2d(1), classifier(1024, []))


class ShuffleUnit(nn.Module):
    """ShuffleNet v1 unit: grouped 1x1 conv, channel shuffle, 3x3 depthwise, grouped 1x1 conv; a residual
    add, or at stride 2 a concatenation with the 3x3/2 average-pooled input."""

    def __init__(self, cin: int, cout: int, stride: int, groups: int):
        super().__init__()
        self.stride, self.groups = stride, groups
        branch = cout - cin if stride == 2 else cout
        self.gconv1 = conv_bn(cin, branch, 1, groups=groups)
        self.dwconv = conv_bn(branch, branch, 3, stride, groups=branch, relu=False)
        self.gconv2 = conv_bn(branch, branch, 1, groups=groups, relu=False)
        self.pool = nn.AvgPool2d(3, 2, 1) if stride == 2 else None

    def forward(self, x):
        y = self.gconv1(x)
        b, c, h, w = y.shape
        y = y.reshape(b, self.groups, c // self.groups, h, w).transpose(1, 2).reshape(b, c, h, w)
        y = self.gconv2(self.dwconv(y))
        y = torch.cat([self.pool(x), y], 1) if self.pool is not None else x + y
        return torch.relu(y)


def shufflenet(groups: int = 4) -> nn.Module:
    """ShuffleNet v1 (Zhang et al. 2017) as the ONNX zoo has it: g=4 at 0.5x width (136/272/544)."""
    layers: list[nn.Module] = [conv_bn(3, 24, 3, 2), nn.MaxPool2d(3, 2, 1)]
    cin = 24
    for cout, repeat in [(136, 4), (272, 8), (544, 4)]:
        for i in range(repeat):
            layers.append(ShuffleUnit(cin, cout, 2 if i == 0 else 1, groups))
            cin = cout
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), classifier(544, []))


class Bottleneck(nn.Module):
    """ResNet-50 v1.5 bottleneck: 1x1, 3x3 (carrying the stride), 1x1 x4, with a projection shortcut."""

    def __init__(self, cin: int, width: int, stride: int):
        super().__init__()
        self.body = nn.Sequential(conv_bn(cin, width, 1), conv_bn(width, width, 3, stride),
                                  conv_bn(width, 4 * width, 1, relu=False))
        project = stride != 1 or cin != 4 * width
        self.down = conv_bn(cin, 4 * width, 1, stride, relu=False) if project else None

    def forward(self, x):
        return torch.relu(self.body(x) + (x if self.down is None else self.down(x)))


def resnet50() -> nn.Module:
    layers: list[nn.Module] = [conv_bn(3, 64, 7, 2), nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for width, blocks, stride in [(64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)]:
        for i in range(blocks):
            layers.append(Bottleneck(cin, width, stride if i == 0 else 1))
            cin = 4 * width
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), classifier(2048, []))


class DenseBlock(nn.Module):
    """Each layer: BN-ReLU-1x1 conv (4 x growth)-BN-ReLU-3x3 conv (growth) on all earlier features."""

    def __init__(self, cin: int, layers: int, growth: int = 32):
        super().__init__()
        self.layers = nn.ModuleList(
            nn.Sequential(nn.BatchNorm2d(cin + i * growth), nn.ReLU(inplace=True),
                          nn.Conv2d(cin + i * growth, 4 * growth, 1, bias=False), nn.BatchNorm2d(4 * growth),
                          nn.ReLU(inplace=True), nn.Conv2d(4 * growth, growth, 3, 1, 1, bias=False))
            for i in range(layers))

    def forward(self, x):
        features = [x]
        for layer in self.layers:
            features.append(layer(torch.cat(features, 1)))
        return torch.cat(features, 1)


def densenet121() -> nn.Module:
    layers: list[nn.Module] = [conv_bn(3, 64, 7, 2), nn.MaxPool2d(3, 2, 1)]
    c = 64
    for i, n in enumerate([6, 12, 24, 16]):
        layers.append(DenseBlock(c, n))
        c += 32 * n
        if i < 3:
            layers += [nn.BatchNorm2d(c), nn.ReLU(inplace=True), nn.Conv2d(c, c // 2, 1, bias=False),
                       nn.AvgPool2d(2, 2)]
            c //= 2
    return nn.Sequential(*layers, nn.BatchNorm2d(c), nn.ReLU(inplace=True), nn.AdaptiveAvgPool2d(1),
                         classifier(c, []))


class Attention(nn.Module):
    """Multi-head self-attention written out (matmuls, softmax), optionally causal."""

    def __init__(self, dim: int, heads: int, seq: int, causal: bool):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        mask = torch.triu(torch.full((seq, seq), -1e9), 1) if causal else torch.zeros(seq, seq)
        self.register_buffer("mask", mask if causal else None, persistent=False)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(x).reshape(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-2, -1) * (1.0 / math.sqrt(d // self.heads))
        if self.mask is not None:
            scores = scores + self.mask
        out = torch.softmax(scores, -1) @ v
        return self.proj(out.transpose(1, 2).reshape(b, s, d))


class Block(nn.Module):
    """A transformer layer: attention and a GELU MLP (4x wide), post-norm (BERT) or pre-norm (GPT-2, ViT)."""

    def __init__(self, dim, heads, seq, causal=False, pre_norm=True, gelu="none"):
        super().__init__()
        self.pre_norm = pre_norm
        self.attn = Attention(dim, heads, seq, causal)
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(approximate=gelu), nn.Linear(4 * dim, dim))

    def forward(self, x):
        if self.pre_norm:
            x = x + self.attn(self.norm1(x))
            return x + self.mlp(self.norm2(x))
        x = self.norm1(x + self.attn(x))
        return self.norm2(x + self.mlp(x))


class Bert(nn.Module):
    """BERT-base-like encoder: token + position embeddings, LayerNorm, 12 post-norm layers; returns the
    last hidden states (batch, 128, 768)."""

    def __init__(self, vocab=30522, dim=768, heads=12, layers=12, seq=128):
        super().__init__()
        self.tokens, self.positions = nn.Embedding(vocab, dim), nn.Parameter(0.02 * torch.randn(1, seq, dim))
        self.norm = nn.LayerNorm(dim)
        self.layers = nn.Sequential(*[Block(dim, heads, seq, pre_norm=False) for _ in range(layers)])

    def forward(self, ids):
        return self.layers(self.norm(self.tokens(ids) + self.positions))


class Gpt2(nn.Module):
    """GPT-2-small-like causal decoder: 12 pre-norm layers, final LayerNorm, LM head tied to the token
    embedding; returns logits (batch, 128, 50257)."""

    def __init__(self, vocab=50257, dim=768, heads=12, layers=12, seq=128):
        super().__init__()
        self.tokens, self.positions = nn.Embedding(vocab, dim), nn.Parameter(0.02 * torch.randn(1, seq, dim))
        self.layers = nn.Sequential(*[Block(dim, heads, seq, causal=True, gelu="tanh")
                                      for _ in range(layers)])
        self.norm = nn.LayerNorm(dim)

    def forward(self, ids):
        x = self.norm(self.layers(self.tokens(ids) + self.positions))
        return x @ self.tokens.weight.t()


class Vit(nn.Module):
    """ViT-tiny (Touvron et al.'s DeiT-Ti shape): 16x16 patches, class token, 12 pre-norm layers."""

    def __init__(self, dim=192, heads=3, layers=12, classes=1000):
        super().__init__()
        seq = (224 // 16) ** 2 + 1
        self.patch = nn.Conv2d(3, dim, 16, 16)
        self.cls = nn.Parameter(0.02 * torch.randn(1, 1, dim))
        self.positions = nn.Parameter(0.02 * torch.randn(1, seq, dim))
        self.layers = nn.Sequential(*[Block(dim, heads, seq) for _ in range(layers)])
        self.norm, self.head = nn.LayerNorm(dim), nn.Linear(dim, classes)

    def forward(self, x):
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], 1) + self.positions
        return self.head(self.norm(self.layers(x))[:, 0])


CNNS = {"alexnet": alexnet, "densenet121": densenet121, "googlenet": googlenet,
        "inception_v2": inception_v2, "resnet50": resnet50, "shufflenet": shufflenet,
        "squeezenet": squeezenet, "vgg19": vgg19, "zfnet512": zfnet512,
        "resnet18": torch_export.ResNet18, "mobilenet_v2": torch_export.MobileNetV2}
TRANSFORMERS = {"bert": Bert, "gpt2": Gpt2, "vit": Vit}
MODELS = {**CNNS, **TRANSFORMERS}


def example_input(name: str, batch: int) -> torch.Tensor:
    """Images (batch, 3, 224, 224) float32, or token ids (batch, 128) int64 for the text models."""
    if name in ("bert", "gpt2"):
        return torch.randint(0, 1000, (batch, 128), dtype=torch.int64)
    return torch.randn(batch, 3, 224, 224)


def export(name: str, path: str, batch: int) -> onnx.ModelProto:
    """Seed, build (BatchNorm statistics randomized, eval mode) and export model ``name`` to ``path``."""
    torch_export.MODELS.setdefault(name, MODELS[name])
    model = torch_export.build(name)
    x = example_input(name, batch)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the exporter is chatty; failures still raise
        program = torch.onnx.export(model, (x,), dynamo=True, external_data=False,
                                    input_names=["data"], output_names=[OUTPUT_NAME])
    proto = program.model_proto
    onnx.checker.check_model(proto, full_check=True)
    onnx.save(proto, path, save_as_external_data=False)
    return proto


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model", choices=sorted(MODELS))
    parser.add_argument("out", help="path of the .onnx file to write")
    parser.add_argument("--batch", type=int, default=1)
    args = parser.parse_args(argv)
    proto = export(args.model, args.out, args.batch)
    print(f"{args.model} (batch {args.batch}, torch {torch.__version__}) -> {args.out}: "
          f"{torch_export.describe(proto)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
