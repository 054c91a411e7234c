"""PyTorch's side of the GPU ResNet-50 benchmark (tools/gpu-check bench):
ResNet-50 v1.5 (torchvision's layout, written here with torch.nn so that no
torchvision is needed), 224 x 224 images, batch 256, one training step
(forward, cross-entropy, backward, SGD with momentum) in eager PyTorch with
autocast (bfloat16 by default, float16 with a GradScaler) and channels_last
memory format: NVIDIA's and PyTorch's recipe for ResNet training speed.
rig's side is experiments/resnet50-synthetic.yaml with --benchmark.

Prints one `key=value ...` line; tools/gpu-check compares it with rig's.
Two diagnostics of where rig's gap lies, each its own measure: --layout nchw
(contiguous NCHW tensors, rig's layout, instead of channels_last) and
--deterministic (cuDNN restricted to deterministic algorithms and no
autotuning, as rig runs it). With --profile, then the step's device time by
kind of kernel (torch_profile.py), which tools/gpu-check sets beside rig's
timed kernel census.
Usage: python3 gpu_resnet.py [--steps N] [--batch B] [--dtype bf16|fp16]
                             [--layout channels_last|nchw] [--deterministic] [--profile]
"""
import argparse
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_profile  # noqa: E402


class Bottleneck(nn.Module):
    def __init__(self, cin, width, stride):
        super().__init__()
        cout = 4 * width
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)  # v1.5: stride here
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                      nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = F.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return F.relu(y + (x if self.down is None else self.down(x)))


class ResNet50(nn.Module):
    def __init__(self, classes=1000):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64),
                                  nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1))
        layers, cin = [], 64
        for width, blocks, stride in [(64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)]:
            for b in range(blocks):
                layers.append(Bottleneck(cin, width, stride if b == 0 else 1))
                cin = 4 * width
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        x = self.layers(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--dtype", choices=["bf16", "fp16"], default="bf16")
    parser.add_argument("--layout", choices=["channels_last", "nchw"], default="channels_last")
    parser.add_argument("--deterministic", action="store_true")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("gpu_resnet.py: no CUDA device visible to torch")
    torch.manual_seed(0)
    torch.backends.cudnn.benchmark = not args.deterministic
    torch.backends.cudnn.deterministic = args.deterministic
    layout = torch.channels_last if args.layout == "channels_last" else torch.contiguous_format
    model = ResNet50().cuda().to(memory_format=layout)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    scaler = torch.amp.GradScaler("cuda", enabled=dtype == torch.float16)
    images = torch.randn(args.batch, 3, 224, 224, device="cuda").to(memory_format=layout)
    labels = torch.randint(0, 1000, (args.batch,), device="cuda")

    def step():
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=dtype):
            loss = F.cross_entropy(model(images), labels)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(args.steps):
        start = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    seconds = statistics.median(times)
    measure = "torch_resnet50" + ("_nchw" if args.layout == "nchw" else "") + (
        "_deterministic" if args.deterministic else "")
    print(f"measure={measure} dtype={args.dtype} batch={args.batch} "
          f"ms_median={1e3 * seconds:.2f} images_per_s={args.batch / seconds:.0f} "
          f"peak_allocated_MiB={torch.cuda.max_memory_allocated() / 2 ** 20:.0f} "
          f"peak_reserved_MiB={torch.cuda.max_memory_reserved() / 2 ** 20:.0f}")
    if args.profile:
        torch_profile.profile(measure, step)


if __name__ == "__main__":
    main()
