"""Golden values for the `resnet` model plugin (plugins/models/resnet).

The ResNets are written here in plain torch (torchvision is not needed), with
torchvision's module names, so their state_dict keys are the parameter names
rig must use:

  * architecture cases: the parameter and buffer names and shapes of
    ResNet-20 (cifar style, shortcuts A and B, 10 classes) and resnet18 /
    resnet50 (imagenet style, 1000 classes). The imagenet counts are checked
    here against torchvision's published ones (11,689,512 and 25,557,032), so
    the replica is torchvision's architecture.
  * forward cases: a tiny cifar-style ResNet (depth 8: one basic block per
    stage) on 2x3x12x12 images with 4 classes, in train and eval mode, with
    shortcut B and A. Every parameter and buffer is set to a deterministic
    value (golden_value below, which the C++ test computes the same way from
    the name and the (center, scale) stored in the case), the forward and
    backward run in float64, and the case stores the logits, the mean
    cross-entropy loss, the gradients of a few parameters and (train mode)
    the updated running statistics.

Run: /usr/bin/python3 tests/golden/gen_resnet.py  (writes tests/golden/resnet.json)
"""
import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from golden_util import case, write

D = torch.float64
torch.manual_seed(5)


# ---- the models, named as torchvision ----------------------------------------

def conv(cin, cout, k, stride):
    return nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, bias=False)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, cin, width, stride, shortcut):
        super().__init__()
        self.conv1 = conv(cin, width, 3, stride)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = conv(width, width, 3, 1)
        self.bn2 = nn.BatchNorm2d(width)
        self.downsample = None
        self.pad = None  # option A: (channels before, channels after)
        if stride != 1 or cin != width:
            if shortcut == "B":
                self.downsample = nn.Sequential(conv(cin, width, 1, stride), nn.BatchNorm2d(width))
            else:
                before = (width - cin) // 2
                self.pad = (before, width - cin - before)
        self.stride = stride

    def shortcut(self, x):
        if self.downsample is not None:
            return self.downsample(x)
        if self.pad is not None:
            x = x[:, :, ::self.stride, ::self.stride]
            return F.pad(x, (0, 0, 0, 0, self.pad[0], self.pad[1]))
        return x

    def forward(self, x):
        h = torch.relu(self.bn1(self.conv1(x)))
        h = self.bn2(self.conv2(h))
        return torch.relu(h + self.shortcut(x))


class Bottleneck(nn.Module):
    """torchvision's v1.5 bottleneck: the stride is on the 3x3 conv."""
    expansion = 4

    def __init__(self, cin, width, stride, shortcut):
        super().__init__()
        out = width * 4
        self.conv1 = conv(cin, width, 1, 1)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = conv(width, width, 3, stride)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = conv(width, out, 1, 1)
        self.bn3 = nn.BatchNorm2d(out)
        self.downsample = None
        if stride != 1 or cin != out:
            self.downsample = nn.Sequential(conv(cin, out, 1, stride), nn.BatchNorm2d(out))

    def forward(self, x):
        h = torch.relu(self.bn1(self.conv1(x)))
        h = torch.relu(self.bn2(self.conv2(h)))
        h = self.bn3(self.conv3(h))
        return torch.relu(h + (x if self.downsample is None else self.downsample(x)))


IMAGENET = {18: (BasicBlock, [2, 2, 2, 2]), 34: (BasicBlock, [3, 4, 6, 3]),
            50: (Bottleneck, [3, 4, 6, 3]), 101: (Bottleneck, [3, 4, 23, 3])}


class ResNet(nn.Module):
    def __init__(self, style, depth, shortcut, channels, classes):
        super().__init__()
        if style == "cifar":
            block, counts, widths, strides, stem = BasicBlock, [(depth - 2) // 6] * 3, \
                [16, 32, 64], [1, 2, 2], 16
            self.conv1 = conv(channels, stem, 3, 1)
            self.maxpool = None
        else:
            block, counts = IMAGENET[depth]
            widths, strides, stem = [64, 128, 256, 512], [1, 2, 2, 2], 64
            self.conv1 = nn.Conv2d(channels, stem, 7, 2, 3, bias=False)
            self.maxpool = nn.MaxPool2d(3, 2, 1)
        self.bn1 = nn.BatchNorm2d(stem)
        cin = stem
        for i, (n, width, stride) in enumerate(zip(counts, widths, strides)):
            blocks = []
            for b in range(n):
                blocks.append(block(cin, width, stride if b == 0 else 1, shortcut))
                cin = width * block.expansion
            setattr(self, f"layer{i + 1}", nn.Sequential(*blocks))
        self.num_stages = len(counts)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        h = torch.relu(self.bn1(self.conv1(x)))
        if self.maxpool is not None:
            h = self.maxpool(h)
        for i in range(self.num_stages):
            h = getattr(self, f"layer{i + 1}")(h)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(h, 1), 1))


def buffers(model):
    # rig has no num_batches_tracked (torch counts steps only for momentum=None).
    return [(k, v) for k, v in model.named_buffers() if not k.endswith("num_batches_tracked")]


# ---- architecture cases ------------------------------------------------------

def architecture_case(name, style, depth, shortcut, channels, classes, expected_numel=None):
    model = ResNet(style, depth, shortcut, channels, classes)
    numel = sum(p.numel() for p in model.parameters())
    if expected_numel is not None:
        assert numel == expected_numel, (name, numel, expected_numel)
    return case(name, {}, {}, params={
        "style": style, "depth": depth, "shortcut": shortcut, "channels": channels,
        "num_classes": classes, "numel": numel,
        "parameters": [[k, list(p.shape)] for k, p in model.named_parameters()],
        "buffers": [[k, list(b.shape)] for k, b in buffers(model)],
    })


# ---- forward cases -----------------------------------------------------------

def fnv1a(name):
    h = 2166136261
    for byte in name.encode():
        h = ((h ^ byte) * 16777619) & 0xFFFFFFFF
    return h


def golden_value(name_hash, i, center, scale):
    """Element i of a named tensor: center + scale * (2u - 1), u in [0, 1) from a
    32-bit integer hash of (name, i); rounded to float32. The C++ test has the same."""
    h = (name_hash + i * 2654435761) & 0xFFFFFFFF
    h ^= h >> 15
    h = (h * 2246822519) & 0xFFFFFFFF
    h ^= h >> 13
    u = h / 4294967296.0
    return np.float32(center + scale * (2.0 * u - 1.0))


def center_scale(name, shape):
    if name.endswith("running_mean"):
        return 0.0, 0.3
    if name.endswith("running_var"):
        return 1.0, 0.5
    if len(shape) == 4:  # conv: uniform with the std of kaiming normal (fan_in)
        fan_in = shape[1] * shape[2] * shape[3]
        return 0.0, math.sqrt(6.0 / fan_in)
    if name.startswith("fc."):
        return 0.0, 1.0 / math.sqrt(64)
    if name.endswith("weight"):  # batch-norm gamma
        return 1.0, 0.3
    return 0.0, 0.2  # batch-norm beta


def set_weights(model):
    weights = {}
    tensors = dict(model.named_parameters())
    tensors.update(buffers(model))
    for name, t in tensors.items():
        center, scale = center_scale(name, list(t.shape))
        h = fnv1a(name)
        values = [golden_value(h, i, center, scale) for i in range(t.numel())]
        with torch.no_grad():
            t.copy_(torch.tensor(np.array(values, dtype=np.float32), dtype=D).reshape(t.shape))
        weights[name] = [center, scale]
    return weights


GRADS = ["conv1.weight", "bn1.weight", "layer1.0.bn2.bias", "layer2.0.bn1.bias",
         "layer3.0.bn1.weight", "fc.weight", "fc.bias"]
GRADS_B = ["layer2.0.downsample.0.weight", "layer2.0.downsample.1.weight",
           "layer3.0.downsample.1.bias"]


def forward_case(name, shortcut, training, label_smoothing=0.0):
    model = ResNet("cifar", 8, shortcut, 3, 4).to(D)
    weights = set_weights(model)
    model.train(training)
    images = torch.randn(2, 3, 12, 12, dtype=D)
    labels = torch.tensor([3, 1])
    logits = model(images)
    loss = F.cross_entropy(logits, labels, label_smoothing=label_smoothing)
    outputs = {"logits": logits.detach(), "loss": loss.detach()}
    grads = {}
    if training:
        loss.backward()
        params = dict(model.named_parameters())
        for k in GRADS + (GRADS_B if shortcut == "B" else []):
            grads[k] = params[k].grad
        for k, b in buffers(model):  # the running statistics after the update
            outputs[k] = b.detach().clone()
    return case(name, {"images": images, "labels": labels}, outputs, grads, params={
        "style": "cifar", "depth": 8, "shortcut": shortcut, "channels": 3, "num_classes": 4,
        "training": training, "label_smoothing": label_smoothing, "weights": weights,
    })


def main():
    cases = [
        architecture_case("resnet20_B", "cifar", 20, "B", 1, 10),
        architecture_case("resnet20_A", "cifar", 20, "A", 3, 10),
        architecture_case("resnet18", "imagenet", 18, "B", 3, 1000, 11_689_512),
        architecture_case("resnet50", "imagenet", 50, "B", 3, 1000, 25_557_032),
        forward_case("tiny_B_train", "B", True),
        forward_case("tiny_B_eval", "B", False),
        forward_case("tiny_A_train_smoothing", "A", True, label_smoothing=0.1),
    ]
    write("resnet", cases)


if __name__ == "__main__":
    main()
