// rig_bench: times rig's layers, forward + backward, for comparison with
// PyTorch (tools/bench/torch_layers.py; tools/bench/run-cpu-bench runs both).
//
//   rig_bench transformer  one pre-norm encoder layer + one decoder layer
//                          (causal self-attention, cross-attention, FFN),
//                          d_model 256, 4 heads, ffn 1024, relu, batch 32 x 32
//                          tokens, dropout 0.1 in training mode
//   rig_bench resnet       one ResNet basic block, 32 channels, 14x14, batch 128,
//                          training-mode batch norm
//   rig_bench resnet20_train  a whole training step of ResNet-20 (the resnet
//                          plugin, cifar style) on 28x28x1 images, batch 128,
//                          10 classes, with the sgd plugin (momentum 0.9):
//                          bench_resnet_train.cpp
//   rig_bench transformer_train  a whole training step of the transformer
//                          plugin (3 + 3 layers, d 256, vocabulary 8192) with
//                          the adam plugin, batch 32 x 32 tokens:
//                          bench_transformer.cpp
//   rig_bench transformer_beam  beam search (beam 4) of the same model on 32
//                          source sentences of 32 tokens: bench_transformer.cpp
//   rig_bench gemm         GFLOP/s of OpenBLAS sgemm and of rig's f32 GEMM on large
//                          square matrices, and of an FMA loop on registers only
//
// --matmul-precision bfloat16 runs every workload's GEMMs as an experiment's
// `matmul_precision: bfloat16` does (cpu/gemm.hpp); default float32.
//
// Each workload runs in its own process so that max RSS is its own. Output is
// one line of key=value pairs. A step is: zero the gradients, forward, loss =
// sum(y * upstream), backward. Inputs are leaves that require a gradient (as
// the output of an earlier layer would) and are allocated before timing.
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bench_util.hpp"
#include "cpu/gemm.hpp"
#include "rig/nn.hpp"
#include "rig/ops.hpp"
#include "rig/random.hpp"
#include "test_nn_blocks.hpp"

namespace {

using rig::Shape;
using rig::Tensor;
namespace ops = rig::ops;
using Clock = std::chrono::steady_clock;

using rig_bench::max_rss_bytes;
using rig_bench::random_tensor;
using rig_bench::report;
using rig_bench::Settings;
using rig_bench::time_steps;
using rig_bench::Timing;
using rig_bench::transformer_forward_gemm_flops;

// A leaf that requires a gradient, sharing x's data (no copy).
Tensor leaf(const Tensor& x) {
  Tensor t = x.detach();
  t.set_requires_grad(true);
  return t;
}

void bench_transformer(const Settings& s) {
  constexpr std::int64_t kBatch = 32, kSrc = 32, kTgt = 32, kModel = 256, kHeads = 4,
                         kHidden = 1024;
  constexpr float kDropout = 0.1F;
  rig::ParameterStore store;
  const rig_test::EncoderLayer encoder(store, "enc.layers.0", kModel, kHeads, kHidden, kDropout);
  const rig_test::DecoderLayer decoder(store, "dec.layers.0", kModel, kHeads, kHidden, kDropout);
  store.allocate(1);
  const Tensor src = random_tensor({kBatch, kSrc, kModel}, 1);
  const Tensor tgt = random_tensor({kBatch, kTgt, kModel}, 2);
  const Tensor upstream = random_tensor({kBatch, kTgt, kModel}, 3);

  const long rss_before = max_rss_bytes();
  const std::size_t baseline = rig::allocator_stats().current_bytes;
  rig::reset_peak_bytes();
  const Timing t = time_steps(s, [&](int i) {
    store.zero_grad();
    const rig::RandomKey key{1, static_cast<std::uint64_t>(i), 0, 0};
    const Tensor memory = encoder.forward(leaf(src), {}, true, key);
    const Tensor y = decoder.forward(leaf(tgt), memory, {}, true, key);
    ops::sum(ops::mul(y, upstream)).backward();
  });
  const double flops = 3.0 * transformer_forward_gemm_flops(kBatch, kSrc, kTgt, kModel, kHidden);
  char extra[128];
  std::snprintf(extra, sizeof extra, " gemm_flops=%.0f gemm_gflops_per_s=%.2f parameters=%lld",
                flops, flops / (t.median_ms * 1e6), static_cast<long long>(store.numel()));
  report("transformer", t, rig::allocator_stats(), baseline, rss_before, extra);
}

void bench_resnet(const Settings& s) {
  constexpr std::int64_t kBatch = 128, kChannels = 32, kSize = 14;
  rig::ParameterStore store;
  const rig_test::BasicBlock block(store, "layer1.0", kChannels);
  store.allocate(1);
  const Tensor x = random_tensor({kBatch, kChannels, kSize, kSize}, 4);
  const Tensor upstream = random_tensor({kBatch, kChannels, kSize, kSize}, 5);

  const long rss_before = max_rss_bytes();
  const std::size_t baseline = rig::allocator_stats().current_bytes;
  rig::reset_peak_bytes();
  const Timing t = time_steps(s, [&](int) {
    store.zero_grad();
    const Tensor y = block.forward(leaf(x), true);
    ops::sum(ops::mul(y, upstream)).backward();
  });
  report("resnet", t, rig::allocator_stats(), baseline, rss_before, "");
}

// The best GFLOP/s of product(n, a, b, c) = c [n x n] = a b over a few
// repetitions on each of several large squares.
double best_square_gflops(
    const std::function<void(int n, const float* a, const float* b, float* c)>& product) {
  double best = 0.0;
  for (const int n : {1024, 2048, 3072}) {
    std::vector<float> a(static_cast<std::size_t>(n) * n, 0.5F);
    std::vector<float> b(a.size(), 0.25F);
    std::vector<float> c(a.size(), 0.0F);
    const int reps = n <= 1024 ? 20 : n <= 2048 ? 5 : 3;
    for (int r = 0; r < reps + 1; ++r) {
      const auto start = Clock::now();
      product(n, a.data(), b.data(), c.data());
      const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
      if (r > 0) best = std::max(best, 2.0 * n * n * static_cast<double>(n) / seconds / 1e9);
    }
  }
  return best;
}

#if defined(__x86_64__) && defined(__GNUC__)
// Independent FMA chains on registers only (no memory traffic): the cores'
// arithmetic ceiling, which no GEMM can beat. 12 chains cover the FMA latency
// times the pipes on current x86 cores.
constexpr int kChains = 12;

using f32x16 = float __attribute__((vector_size(64)));
using f32x8 = float __attribute__((vector_size(32)));

// One body for both widths: compiled inside each target below, acc * scale +
// shift becomes one vfmadd (checked in the object code).
template <class V>
__attribute__((always_inline)) inline float fma_chains(long iterations) {
  V acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = V{} + (1.0F + 1e-3F * static_cast<float>(i));
  const V scale = V{} + 0.999999F;
  const V shift = V{} + 1e-7F;
  for (long it = 0; it < iterations; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < kChains; ++i) acc[i] = acc[i] * scale + shift;
  }
  float sum = 0.0F;
  for (const V& a : acc) {
    for (std::size_t lane = 0; lane < sizeof(V) / sizeof(float); ++lane) sum += a[lane];
  }
  return sum;
}

__attribute__((target("avx512f"))) float fma_chains_avx512(long iterations) {
  return fma_chains<f32x16>(iterations);
}
__attribute__((target("avx2,fma"))) float fma_chains_avx2(long iterations) {
  return fma_chains<f32x8>(iterations);
}

// GFLOP/s of `threads` threads each running the widest FMA loop this CPU has;
// 0 when it has no FMA.
double fma_peak_gflops(int threads) {
  const bool avx512 = __builtin_cpu_supports("avx512f") != 0;
  if (!avx512 && (__builtin_cpu_supports("avx2") == 0 || __builtin_cpu_supports("fma") == 0)) {
    return 0.0;
  }
  const double flops_per_iteration = kChains * (avx512 ? 16 : 8) * 2.0;
  constexpr long kIterations = 100'000'000;
  double best = 0.0;
  for (int rep = 0; rep < 3; ++rep) {
    std::vector<std::thread> workers;
    const auto start = Clock::now();
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([avx512] {
        // volatile: the result is stored, so the loop is not optimised away.
        [[maybe_unused]] volatile float result =
            avx512 ? fma_chains_avx512(kIterations) : fma_chains_avx2(kIterations);
      });
    }
    for (auto& w : workers) w.join();
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    best = std::max(best, threads * kIterations * flops_per_iteration / seconds / 1e9);
  }
  return best;
}
#else
double fma_peak_gflops(int) {
  return 0.0;
}
#endif

// The machine's GEMM ceilings: the best of several large square products by
// OpenBLAS sgemm and by rig's own f32 GEMM (cpu::gemm), and the FMA peak.
void bench_gemm(const Settings& s) {
  const double openblas = best_square_gflops([](int n, const float* a, const float* b, float* c) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0F, a, n, b, n, 0.0F, c, n);
  });
  const double own = best_square_gflops([](int n, const float* a, const float* b, float* c) {
    rig::cpu::gemm(n, n, n, 1.0F, {a, n, false}, {b, n, false}, 0.0F, c, n,
                   rig::cpu::GemmPrecision::f32);
  });
  std::printf(
      "workload=gemm sgemm_peak_gflops_per_s=%.2f rig_gemm_peak_gflops_per_s=%.2f "
      "fma_peak_gflops_per_s=%.2f\n",
      openblas, own, fma_peak_gflops(s.threads));
}

int usage() {
  std::fprintf(
      stderr,
      "usage: rig_bench transformer|resnet|resnet20_train|transformer_train|transformer_beam|gemm "
      "[--iterations N] [--warmup N] [--threads N] [--matmul-precision float32|bfloat16]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage();
  const std::string workload = argv[1];
  Settings s;
  rig::MatmulPrecision precision = rig::MatmulPrecision::f32;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const int value = std::atoi(argv[i + 1]);
    if (flag == "--matmul-precision") {
      const std::string text = argv[i + 1];
      if (text != "float32" && text != "bfloat16") return usage();
      precision = text == "bfloat16" ? rig::MatmulPrecision::bf16 : rig::MatmulPrecision::f32;
    } else if (flag == "--iterations") {
      s.iterations = value;
    } else if (flag == "--warmup") {
      s.warmup = value;
    } else if (flag == "--threads") {
      s.threads = value;
    } else {
      return usage();
    }
  }
  if (s.iterations < 1 || s.warmup < 0 || s.threads < 1) return usage();
  // Before rig's thread pool starts: both rig's loops and OpenBLAS use s.threads.
  const std::string threads = std::to_string(s.threads);
  setenv("RIG_NUM_THREADS", threads.c_str(), 1);
  openblas_set_num_threads(s.threads);
  // The products of every workload at --matmul-precision, as the engine runs them.
  const rig::ops::MatmulPrecisionScope precision_scope(precision);
  try {
    if (workload == "transformer") {
      bench_transformer(s);
    } else if (workload == "resnet") {
      bench_resnet(s);
    } else if (workload == "resnet20_train") {
      rig_bench::bench_resnet20_train(s);
    } else if (workload == "transformer_train") {
      rig_bench::bench_transformer_train(s);
    } else if (workload == "transformer_beam") {
      rig_bench::bench_transformer_beam(s);
    } else if (workload == "gemm") {
      bench_gemm(s);
    } else {
      return usage();
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rig_bench %s: %s\n", workload.c_str(), e.what());
    return 1;
  }
  return 0;
}
