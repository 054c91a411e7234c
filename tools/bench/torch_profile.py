"""Where PyTorch's GPU step spends its device time, by kind of kernel, for
tools/gpu-check to set beside rig's timed kernel census (tools/kernel-census)
of the same step: convolutions, products, attention, batch norm, optimizer,
element-wise and other, copies. gpu_resnet.py and gpu_transformer.py call
profile() with --profile after their timed steps.

Prints `profile=MEASURE kind=KIND ms=MS` per kind (device time a step) and
`profile=MEASURE kernel_ms=MS calls=N name=NAME` for the largest kernels.
`python3 torch_profile.py --self-test` checks the kinds of known kernel
names (no torch needed).
"""
import collections
import sys

# Kinds in the order they are tested: a cuDNN convolution's kernel names its
# implicit GEMM, so convolutions come before products.
KINDS = ("convolutions", "products", "attention", "batch norm", "optimizer",
         "element-wise and other", "copies")


def kind_of(name):
    """The kind of a CUDA kernel (or copy) by its name in the profiler."""
    n = name.lower()
    if n.startswith(("memcpy", "memset")) or "memcpy" in n:
        return "copies"
    if any(s in n for s in ("flash", "fmha", "attention", "sdpa", "_attn")):
        return "attention"
    if any(s in n for s in ("batch_norm", "batchnorm", "bn_fw", "bn_bw", "bn_", "welford")):
        return "batch norm"
    if any(s in n for s in ("conv", "fprop", "dgrad", "wgrad", "implicit", "nhwctonchw",
                            "nchwtonhwc", "cudnn")):
        return "convolutions"
    if any(s in n for s in ("gemm", "cutlass", "cublas", "matmul", "splitk", "sm90_xmma",
                            "sm80_xmma", "ampere_", "hopper_", "nvjet")):
        return "products"
    if any(s in n for s in ("multi_tensor_apply", "fused_adam", "adam", "sgd", "foreach")):
        return "optimizer"
    return "element-wise and other"


def profile(measure, step, steps=2, top=12):
    """Runs step() `steps` times under torch.profiler and prints its device
    time a step by kind and its largest kernels."""
    import torch
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    step()  # anything made on a first call is made outside the profile
    torch.cuda.synchronize()
    with torch_profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    kernels = collections.defaultdict(lambda: [0.0, 0])
    for event in prof.key_averages():
        us = (getattr(event, "self_device_time_total", None)
              or getattr(event, "self_cuda_time_total", 0) or 0)
        if us <= 0:
            continue
        kernels[event.key][0] += us / 1e3 / steps
        kernels[event.key][1] += event.count // steps
    by_kind = collections.defaultdict(float)
    for name, (ms, _) in kernels.items():
        by_kind[kind_of(name)] += ms
    for kind in KINDS:
        print(f"profile={measure} kind={kind.replace(' ', '_')} ms={by_kind[kind]:.3f}")
    print(f"profile={measure} kind=all ms={sum(by_kind.values()):.3f}")
    for name, (ms, calls) in sorted(kernels.items(), key=lambda kv: -kv[1][0])[:top]:
        print(f"profile={measure} kernel_ms={ms:.3f} calls={calls} name={name[:160]}")


def self_test():
    known = {
        "sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc": "convolutions",
        "sm80_xmma_wgrad_implicit_gemm_indexed_bf16bf16_bf16f32_f32_nhwckrsc_nhwc":
            "convolutions",
        "void cudnn::engines_precompiled::nhwcToNchwKernel<float, float>": "convolutions",
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64": "products",
        "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16>": "products",
        "nvjet_tst_192x192_64x4_2x1_v_bz_coopB_TNN": "products",  # cuBLAS 12.8+ on Hopper
        "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16": "attention",
        "void at::native::batch_norm_collect_statistics_channels_last_kernel": "batch norm",
        "void cudnn::bn_fw_tr_1C11_singleread_spec<__nv_bfloat16, 512, true, 1, 2, 0>":
            "batch norm",
        "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<FusedAdam>":
            "optimizer",
        "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add>":
            "element-wise and other",
        "Memcpy HtoD (Pageable -> Device)": "copies",
        "Memset (Device)": "copies",
    }
    wrong = [(n, kind_of(n), k) for n, k in known.items() if kind_of(n) != k]
    for name, got, want in wrong:
        print(f"torch_profile.py: {name}: {got}, expected {want}")
    print("torch_profile.py self-test: " + ("FAIL" if wrong else "PASS"))
    return 1 if wrong else 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        sys.exit(self_test())
    sys.exit("usage: python3 torch_profile.py --self-test (gpu_resnet.py and gpu_transformer.py "
             "import it)")
