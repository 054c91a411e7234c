"""PyTorch's side of the GPU Transformer benchmark (tools/gpu-check bench):
transformer-base (d_model 512, 8 heads, ffn 2048, 6 + 6 layers, a shared
32768-token vocabulary, dropout 0.1) as torch_transformer.py writes it, one
training step (forward to the label-smoothed loss, backward, fused Adam) on
SENTENCES x LENGTH source and target tokens, eager PyTorch with autocast
(bfloat16 by default), on the current GPU.

Also measures the ceilings a step is judged against: the largest bf16 GEMM
rate torch reaches on this GPU (8192^3) and device-to-device copy bandwidth.

Prints one `key=value ...` line per measurement; tools/gpu-check compares
them with rig's `--benchmark` run of the same shapes. With --profile, then
the step's device time by kind of kernel (torch_profile.py), which
tools/gpu-check sets beside rig's timed kernel census.
Usage: python3 gpu_transformer.py [--steps N] [--sentences S] [--length L] [--dtype bf16|fp16]
                                  [--profile]
"""
import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_profile  # noqa: E402
import torch_transformer  # noqa: E402

VOCAB, D, HEADS, FILTER, LAYERS = 32768, 512, 8, 2048, 6


def model_flops_per_step(sentences, length):
    """6 x parameters x tokens for the matrix products (forward 2, backward 4),
    plus attention's two products per layer and direction; embeddings counted
    once as the softmax projection (the lookups are free)."""
    tokens = sentences * length  # per side
    per_layer_enc = 4 * D * D + 2 * D * FILTER
    per_layer_dec = 8 * D * D + 2 * D * FILTER
    dense = 2 * tokens * (LAYERS * (per_layer_enc + per_layer_dec)) + 2 * tokens * D * VOCAB
    attention = 2 * 2 * sentences * length * length * D * (3 * LAYERS)  # QK^T and PV
    return 3 * (dense + attention)


def timed(fn, steps, warmup=3):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def gemm_ceiling():
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    seconds = timed(lambda: torch.matmul(a, b), 10)
    print(f"measure=bf16_gemm_ceiling n={n} tflops={2 * n ** 3 / seconds / 1e12:.1f}")


def copy_ceiling():
    n = 1 << 28  # 1 GiB of bytes as f32
    src = torch.empty(n // 4, device="cuda", dtype=torch.float32)
    dst = torch.empty_like(src)
    seconds = timed(lambda: dst.copy_(src), 10)
    print(f"measure=d2d_copy_ceiling bytes={n} GBps={2 * n / seconds / 1e9:.0f}")


def transformer(args):
    torch.manual_seed(0)
    model = torch_transformer.Transformer(VOCAB, D, HEADS, FILTER, LAYERS, 0.1).cuda()
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.997), eps=1e-9,
                                 fused=True)
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    scaler = torch.amp.GradScaler("cuda", enabled=dtype == torch.float16)

    def sentences():
        ids = torch.randint(4, VOCAB, (args.sentences, args.length), device="cuda")
        ids[:, -1] = torch_transformer.EOS
        return ids, torch.full((args.sentences,), args.length, device="cuda")

    source, source_lengths = sentences()
    target, target_lengths = sentences()
    weights = torch.ones(args.sentences, args.length, device="cuda")

    def step():
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=dtype):
            memory, mask = model.encode(source, source_lengths)
            logits = model.decode(target, memory, mask)
            loss = torch_transformer.smoothed_cross_entropy(logits.float(), target, weights, 0.1)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()

    torch.cuda.reset_peak_memory_stats()
    seconds = timed(step, args.steps)
    tokens = args.sentences * args.length
    flops = model_flops_per_step(args.sentences, args.length)
    print(f"measure=torch_transformer_base dtype={args.dtype} sentences={args.sentences} "
          f"length={args.length} ms_median={1e3 * seconds:.2f} "
          f"target_tokens_per_s={tokens / seconds:.0f} model_tflops={flops / seconds / 1e12:.1f} "
          f"peak_allocated_MiB={torch.cuda.max_memory_allocated() / 2 ** 20:.0f} "
          f"peak_reserved_MiB={torch.cuda.max_memory_reserved() / 2 ** 20:.0f}")
    if args.profile:
        torch_profile.profile("torch_transformer_base", step)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--sentences", type=int, default=125)
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--dtype", choices=["bf16", "fp16"], default="bf16")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("gpu_transformer.py: no CUDA device visible to torch")
    print(f"device={torch.cuda.get_device_name()} torch={torch.__version__}")
    gemm_ceiling()
    copy_ceiling()
    transformer(args)


if __name__ == "__main__":
    main()
