"""The PyTorch side of rig's layer benchmarks (tools/bench/run-cpu-bench).

Same workloads, shapes, thread count and step as rig_bench (see
bench_layers.cpp): eager mode, float32, torch.set_num_threads(N).

  transformer  torch.nn.TransformerEncoderLayer + TransformerDecoderLayer,
               norm_first=True (pre-norm), batch_first, d_model 256, 4 heads,
               ffn 1024, relu, dropout 0.1, training mode; the decoder's
               self-attention is causal; memory = the encoder's output
  resnet       a torchvision-style BasicBlock (conv3x3-BN-ReLU-conv3x3-BN,
               identity shortcut, ReLU), 32 channels, 14x14, batch 128,
               training-mode batch norm
  resnet20_train
               a whole training step of ResNet-20 (He et al. 2016, cifar
               style, 1x1 conv + BN projection shortcuts, torchvision naming)
               on 28x28x1 images, batch 128, 10 classes: zero_grad, forward,
               cross-entropy loss, loss.item() (rig's models compute Acc@1 /
               Acc@5 only in eval), backward, torch.optim.SGD step
               (momentum 0.9, weight decay 1e-4). Reports images per second.
  transformer_train
               a whole training step of rig's transformer plugin's model
               (torch_transformer.py: 3 + 3 pre-norm layers, d 256, 4 heads,
               ffn 1024, shared 8192-token embedding, dropout 0.1) on 32 x 32
               source and target tokens: zero_grad, forward, OpenSeq2Seq's
               label-smoothed loss (0.1), loss.item() (no token accuracy: rig
               computes it only in eval), backward, torch.optim.Adam (fused; betas 0.9 / 0.997, eps
               1e-9). Reports target tokens per second.
  transformer_beam
               beam search (beam 4, alpha 0.6) of the same model on 32 source
               sentences of 32 tokens, incremental decoding with key/value
               caches, at most 32 decoder steps (rig's extra_decode_length 0).
               Reports sentences per second, the decoder steps taken and the
               longest output.

A step: zero the gradients (set_to_none, torch's default), forward with
inputs that require a gradient, loss = sum(y * upstream), backward. Inputs
and the upstream gradient are allocated before timing.

Memory: PyTorch has no public allocator statistics for the CPU
(torch.cuda.memory_stats is CUDA only), so this reports the growth of the
process's peak resident set size (getrusage ru_maxrss) from just before the
first step to the end: "rss_delta_bytes". rig_bench reports the same measure
(and its allocator's peak besides). Each workload runs in its own process.

--autocast bf16 runs transformer_train's forward and loss, and
transformer_beam's whole search, under torch.autocast("cpu", bfloat16):
PyTorch's fastest CPU bf16 mode, the peer of rig's matmul_precision bfloat16
(rig_bench --matmul-precision bfloat16). Autocast rounds more than rig does
(linear outputs are stored in bf16 too), which favours PyTorch's speed.

Output: one line of key=value pairs, like rig_bench, with the OMP_WAIT_POLICY
it ran under (run-cpu-bench tries torch's default and PASSIVE).
"""
import argparse
import os
import resource
import statistics
import time

import torch
from torch import nn

import torch_transformer


def max_rss_bytes():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def omp_policy():
    return "omp_wait_policy=" + os.environ.get("OMP_WAIT_POLICY", "default")


def time_steps(step, warmup, iterations):
    for i in range(warmup):
        step(i)
    times = []
    for i in range(iterations):
        start = time.perf_counter()
        step(warmup + i)
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times), min(times)


class BasicBlock(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x):
        h = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(h)) + x)


def leaf(x):
    x.grad = None
    return x


def bench_transformer(args):
    batch, src_len, tgt_len, model, heads, hidden = 32, 32, 32, 256, 4, 1024
    kw = dict(dim_feedforward=hidden, dropout=0.1, activation="relu", batch_first=True,
              norm_first=True)
    encoder = nn.TransformerEncoderLayer(model, heads, **kw)
    decoder = nn.TransformerDecoderLayer(model, heads, **kw)
    encoder.train()
    decoder.train()
    params = list(encoder.parameters()) + list(decoder.parameters())
    src = torch.randn(batch, src_len, model, requires_grad=True)
    tgt = torch.randn(batch, tgt_len, model, requires_grad=True)
    upstream = torch.randn(batch, tgt_len, model)
    causal = nn.Transformer.generate_square_subsequent_mask(tgt_len)

    def step(_):
        for p in params:
            p.grad = None
        memory = encoder(leaf(src))
        y = decoder(leaf(tgt), memory, tgt_mask=causal)
        (y * upstream).sum().backward()

    rss_before = max_rss_bytes()
    median, best = time_steps(step, args.warmup, args.iterations)
    print(f"workload=transformer ms_median={median:.3f} ms_min={best:.3f} "
          f"rss_delta_bytes={max_rss_bytes() - rss_before} "
          f"parameters={sum(p.numel() for p in params)} {omp_policy()}")


def bench_resnet(args):
    block = BasicBlock(32)
    block.train()
    x = torch.randn(128, 32, 14, 14, requires_grad=True)
    upstream = torch.randn(128, 32, 14, 14)

    def step(_):
        block.zero_grad(set_to_none=True)
        y = block(leaf(x))
        (y * upstream).sum().backward()

    rss_before = max_rss_bytes()
    median, best = time_steps(step, args.warmup, args.iterations)
    print(f"workload=resnet ms_median={median:.3f} ms_min={best:.3f} "
          f"rss_delta_bytes={max_rss_bytes() - rss_before} {omp_policy()}")


class CifarBasicBlock(nn.Module):
    def __init__(self, cin, width, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, width, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.downsample = None
        if stride != 1 or cin != width:
            self.downsample = nn.Sequential(nn.Conv2d(cin, width, 1, stride, bias=False),
                                            nn.BatchNorm2d(width))

    def forward(self, x):
        h = torch.relu(self.bn1(self.conv1(x)))
        h = self.bn2(self.conv2(h))
        return torch.relu(h + (x if self.downsample is None else self.downsample(x)))


class CifarResNet(nn.Module):
    """ResNet-(6n+2) for small images, as rig's resnet plugin with style cifar."""

    def __init__(self, depth, channels, classes):
        super().__init__()
        n = (depth - 2) // 6
        self.conv1 = nn.Conv2d(channels, 16, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        cin = 16
        for i, (width, stride) in enumerate([(16, 1), (32, 2), (64, 2)]):
            blocks = []
            for b in range(n):
                blocks.append(CifarBasicBlock(cin, width, stride if b == 0 else 1))
                cin = width
            setattr(self, f"layer{i + 1}", nn.Sequential(*blocks))
        self.fc = nn.Linear(64, classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x):
        h = torch.relu(self.bn1(self.conv1(x)))
        h = self.layer3(self.layer2(self.layer1(h)))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(h, 1), 1))


def bench_resnet20_train(args):
    batch, classes = 128, 10
    model = CifarResNet(20, 1, classes)
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
    images = torch.randn(batch, 1, 28, 28)
    labels = torch.randint(0, classes, (batch,))
    last = {}

    def step(_):
        optimizer.zero_grad(set_to_none=True)
        logits = model(images)
        loss = nn.functional.cross_entropy(logits, labels)
        loss.backward()
        optimizer.step()
        last["loss"] = loss.item()

    rss_before = max_rss_bytes()
    median, best = time_steps(step, args.warmup, args.iterations)
    print(f"workload=resnet20_train ms_median={median:.3f} ms_min={best:.3f} "
          f"rss_delta_bytes={max_rss_bytes() - rss_before} "
          f"images_per_s={1e3 * batch / median:.1f} rss_peak_bytes={max_rss_bytes()} "
          f"parameters={sum(p.numel() for p in model.parameters())} "
          f"last_loss={last['loss']:.4f} {omp_policy()}")


# transformer_train / transformer_beam: the shapes of bench_transformer.cpp.
TRANSFORMER = dict(vocab=8192, d=256, heads=4, filter_size=1024, layers=3, dropout=0.1)
SENTENCES, LENGTH, BEAM = 32, 32, 4


def autocast(args):
    return torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.autocast == "bf16")


def random_sentences():
    """SENTENCES rows of LENGTH - 1 tokens uniform in [4, V), then EOS (no PAD)."""
    ids = torch.randint(4, TRANSFORMER["vocab"], (SENTENCES, LENGTH))
    ids[:, -1] = torch_transformer.EOS
    return ids, torch.full((SENTENCES,), LENGTH)


def bench_transformer_train(args):
    model = torch_transformer.Transformer(**TRANSFORMER)
    model.train()
    # fused: torch's fastest Adam on the CPU (several times the for-each one's speed here).
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.997), eps=1e-9,
                                 fused=True)
    source, source_lengths = random_sentences()
    target, target_lengths = random_sentences()
    weights = (torch.arange(LENGTH)[None, :] < target_lengths[:, None]).float()
    last = {}

    def step(_):
        optimizer.zero_grad(set_to_none=True)
        with autocast(args):
            memory, mask = model.encode(source, source_lengths)
            logits = model.decode(target, memory, mask)
            loss = torch_transformer.smoothed_cross_entropy(logits, target, weights, 0.1)
        loss.backward()
        optimizer.step()
        last["loss"] = loss.item()

    rss_before = max_rss_bytes()
    median, best = time_steps(step, args.warmup, args.iterations)
    print(f"workload=transformer_train ms_median={median:.3f} ms_min={best:.3f} "
          f"rss_delta_bytes={max_rss_bytes() - rss_before} "
          f"tokens_per_s={1e3 * SENTENCES * LENGTH / median:.1f} "
          f"rss_peak_bytes={max_rss_bytes()} "
          f"parameters={sum(p.numel() for p in model.parameters())} "
          f"last_loss={last['loss']:.4f} autocast={args.autocast} {omp_policy()}")


def bench_transformer_beam(args):
    model = torch_transformer.Transformer(**TRANSFORMER)
    model.eval()
    source, source_lengths = random_sentences()
    last = {}

    def step(_):
        with torch.inference_mode(), autocast(args):
            memory, mask = model.encode(source, source_lengths)
            decoding = torch_transformer.Decoding(model, memory, mask, BEAM)
            # As rig: at most the source width plus extra_decode_length (0) steps.
            out, last["steps"] = torch_transformer.beam_search(
                decoding, SENTENCES, BEAM, 0.6, LENGTH, TRANSFORMER["vocab"])
            last["width"] = out.size(1)

    rss_before = max_rss_bytes()
    median, best = time_steps(step, args.warmup, args.iterations)
    print(f"workload=transformer_beam ms_median={median:.3f} ms_min={best:.3f} "
          f"rss_delta_bytes={max_rss_bytes() - rss_before} "
          f"sentences_per_s={1e3 * SENTENCES / median:.2f} rss_peak_bytes={max_rss_bytes()} "
          f"parameters={sum(p.numel() for p in model.parameters())} "
          f"decode_steps={last['steps']} output_length={last['width']} "
          f"autocast={args.autocast} {omp_policy()}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload", choices=["transformer", "resnet", "resnet20_train",
                                             "transformer_train", "transformer_beam", "info"])
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--autocast", choices=["none", "bf16"], default="none",
                        help="transformer_train / transformer_beam under CPU autocast (bfloat16)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    if args.workload == "info":
        print(f"torch={torch.__version__} threads={torch.get_num_threads()}")
        print(torch.__config__.parallel_info().strip().splitlines()[0])
        return
    {"transformer": bench_transformer, "resnet": bench_resnet,
     "resnet20_train": bench_resnet20_train, "transformer_train": bench_transformer_train,
     "transformer_beam": bench_transformer_beam}[args.workload](args)


if __name__ == "__main__":
    main()
