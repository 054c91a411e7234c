#include "cpu/gemm_dnnl.hpp"

#include <compare>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string_view>

#include "cpu/dnnl_util.hpp"

namespace rig::cpu {

namespace {

using dnnl::memory;
namespace du = dnnl_util;

// Distinct shapes kept; a model with variable batch shapes sees a bounded set
// (batch buckets), and past this the cache starts over.
constexpr std::size_t kMaxPlans = 1024;

struct Key {
  std::int64_t m, n, k, lda, ldb, ldc;
  bool ta, tb;
  float alpha, beta;
  bool bf16;  // A and B are bfloat16 (C stays f32)
  auto operator<=>(const Key&) const = default;
};

struct Plan {
  memory::desc a, b, c, scratch;
  dnnl::matmul primitive;
};

// Row-major [rows, cols] with leading dimension ld, or its transpose as stored.
memory::desc operand(std::int64_t rows, std::int64_t cols, std::int64_t ld, bool trans,
                     memory::data_type type) {
  const memory::dims strides = trans ? memory::dims{1, ld} : memory::dims{ld, 1};
  return {{rows, cols}, type, strides};
}

std::shared_ptr<const Plan> build(const Key& key) {
  const du::SingleThreaded one_thread;  // oneDNN sizes its work split at creation
  auto plan = std::make_shared<Plan>();
  const auto in = key.bf16 ? memory::data_type::bf16 : memory::data_type::f32;
  plan->a = operand(key.m, key.k, key.lda, key.ta, in);
  plan->b = operand(key.k, key.n, key.ldb, key.tb, in);
  plan->c = operand(key.m, key.n, key.ldc, false, memory::data_type::f32);
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (key.alpha != 1.0F) attr.set_output_scales(0, {key.alpha});
  if (key.beta != 0.0F) {
    dnnl::post_ops post;
    post.append_sum(key.beta);
    attr.set_post_ops(post);
  }
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(plan->a, plan->b, plan->c), attr,
                                        du::engine());
  plan->scratch = pd.scratchpad_desc();
  plan->primitive = dnnl::matmul(pd);
  return plan;
}

std::shared_ptr<const Plan> plan_for(const Key& key) {
  static std::mutex mutex;
  static std::map<Key, std::shared_ptr<const Plan>> cache;
  {
    const std::lock_guard<std::mutex> lock(mutex);
    const auto it = cache.find(key);
    if (it != cache.end()) return it->second;
  }
  // Built outside the lock: JIT compilation takes a while and another thread
  // may want a different shape meanwhile. Two threads building the same shape
  // both succeed; one result is kept.
  std::shared_ptr<const Plan> plan = build(key);
  const std::lock_guard<std::mutex> lock(mutex);
  if (cache.size() >= kMaxPlans) cache.clear();  // callers hold their plan alive
  return cache.emplace(key, std::move(plan)).first->second;
}

// RIG_CPU_GEMM=openblas keeps every product on OpenBLAS (for comparisons).
bool enabled() {
  static const bool on = [] {
    const char* choice = std::getenv("RIG_CPU_GEMM");
    return choice == nullptr || std::string_view(choice) != "openblas";
  }();
  return on;
}

void run(const Key& key, const void* a, const void* b, float* c) {
  const std::shared_ptr<const Plan> plan = plan_for(key);
  const du::SingleThreaded one_thread;
  const Scratch scratch = du::buffer(plan->scratch.get_size());
  const du::Memory ma = du::wrap(plan->a, a);
  const du::Memory mb = du::wrap(plan->b, b);
  const du::Memory mc = du::wrap(plan->c, c);
  const du::Memory ms = du::wrap(plan->scratch, scratch.data());
  du::check(du::execute(plan->primitive, {{DNNL_ARG_SRC, ma.get()},
                                          {DNNL_ARG_WEIGHTS, mb.get()},
                                          {DNNL_ARG_DST, mc.get()},
                                          {DNNL_ARG_SCRATCHPAD, ms.get()}}),
            "oneDNN matmul");
}

}  // namespace

bool gemm_dnnl(std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a,
               std::int64_t lda, bool ta, const float* b, std::int64_t ldb, bool tb, float beta,
               float* c, std::int64_t ldc) {
  if (m * n * k < kGemmDnnlMinWork || !enabled()) return false;
  run({m, n, k, lda, ldb, ldc, ta, tb, alpha, beta, false}, a, b, c);
  return true;
}

bool gemm_dnnl_bf16_available() {
  static const bool available = [] {
    const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
    return enabled() &&
           (isa == dnnl::cpu_isa::avx512_core_bf16 || isa == dnnl::cpu_isa::avx512_core_amx);
  }();
  return available;
}

void gemm_dnnl_bf16(std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
                    const std::uint16_t* a, std::int64_t lda, bool ta, const std::uint16_t* b,
                    std::int64_t ldb, bool tb, float beta, float* c, std::int64_t ldc) {
  run({m, n, k, lda, ldb, ldc, ta, tb, alpha, beta, true}, a, b, c);
}

}  // namespace rig::cpu
