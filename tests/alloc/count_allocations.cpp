// Counts heap allocations (calls of operator new, every variant) on the hot
// path once the allocators are warm: a training step (forward + backward)
// and an inference forward (NoGradGuard) of
//   - a pre-norm Transformer encoder layer (LayerNorm, self-attention with a
//     padding mask, dropout, residual adds, feed-forward) with a Linear +
//     cross_entropy head, and
//   - a ResNet basic block (conv2d, batch_norm, relu) + max_pool2d +
//     global_avg_pool2d with a Linear + cross_entropy head, and
//   - Linear + relu + Linear + cross_entropy on activations over 1 MiB, at
//     three batch sizes in turn (the caching allocator's pieces of segments,
//     split and merged every step).
// Each allocation is attributed to rig or to oneDNN (when a oneDNN frame is
// on the stack: its primitive execution allocates internally, which rig
// cannot avoid). rig's must be zero.
//
// This executable replaces the global operator new / delete, so it is its
// own test binary (ctest: alloc.hot_path). Exit code 77 = skipped
// (RIG_ALLOCATOR=system sends every storage to the system on purpose).
#include <dlfcn.h>
#include <unistd.h>
#include <unwind.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <new>
#include <set>
#include <string>
#include <vector>

#include "rig/autograd.hpp"
#include "rig/nn.hpp"
#include "rig/ops.hpp"
#include "rig/random.hpp"
#include "test_nn_blocks.hpp"

// ---- Counting operator new / delete ------------------------------------------

namespace {

enum Origin { kRig, kOneDnn, kOrigins };

std::atomic<bool> g_counting{false};
std::atomic<std::size_t> g_count[kOrigins];

// One walk of the stack: return addresses of the frames.
struct Frames {
  static constexpr int kMax = 96;
  void* ip[kMax];
  int n = 0;
};

_Unwind_Reason_Code collect_frame(_Unwind_Context* context, void* arg) {
  auto* frames = static_cast<Frames*>(arg);
  if (frames->n == Frames::kMax) return _URC_END_OF_STACK;
  frames->ip[frames->n++] = reinterpret_cast<void*>(_Unwind_GetIP(context));
  return _URC_NO_REASON;
}

// RIG_ALLOC_TRACE=1 prints the stack of every counted allocation from rig,
// RIG_ALLOC_TRACE=2 also of those inside oneDNN.
const char* const g_trace_env = std::getenv("RIG_ALLOC_TRACE");
const bool g_trace = g_trace_env != nullptr;
const bool g_trace_onednn = g_trace && std::strcmp(g_trace_env, "2") == 0;

// Without stdio's buffers (which may allocate).
void print_frames(const Frames& frames) {
  char line[512];
  for (int i = 0; i < frames.n; ++i) {
    Dl_info info{};
    const bool found = dladdr(static_cast<char*>(frames.ip[i]) - 1, &info) != 0;
    // File, offset in it (for addr2line -f -C -e FILE OFFSET) and exported symbol.
    const auto offset =
        found ? static_cast<char*>(frames.ip[i]) - 1 - static_cast<const char*>(info.dli_fbase) : 0;
    const int n = std::snprintf(line, sizeof line, "  #%d %s 0x%tx %s\n", i,
                                found && info.dli_fname != nullptr ? info.dli_fname : "?", offset,
                                found && info.dli_sname != nullptr ? info.dli_sname : "");
    if (n > 0) (void)!write(2, line, static_cast<std::size_t>(std::min<int>(n, sizeof line - 1)));
  }
  (void)!write(2, "\n", 1);
}

// oneDNN when any frame lies in libdnnl, else rig (the test and librig).
Origin origin_of_caller() {
  Frames frames;
  _Unwind_Backtrace(collect_frame, &frames);
  for (int i = 0; i < frames.n; ++i) {
    Dl_info info{};
    if (dladdr(static_cast<char*>(frames.ip[i]) - 1, &info) != 0 && info.dli_fname != nullptr &&
        std::strstr(info.dli_fname, "libdnnl") != nullptr) {
      if (g_trace_onednn) print_frames(frames);
      return kOneDnn;
    }
  }
  if (g_trace) print_frames(frames);
  return kRig;
}

inline __attribute__((always_inline)) void note_allocation() {
  if (g_counting.load(std::memory_order_relaxed)) {
    g_count[origin_of_caller()].fetch_add(1, std::memory_order_relaxed);
  }
}

void* allocate(std::size_t bytes) {
  void* p = std::malloc(bytes == 0 ? 1 : bytes);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}

void* allocate_aligned(std::size_t bytes, std::align_val_t alignment) {
  const auto a = std::max(static_cast<std::size_t>(alignment), sizeof(void*));
  void* p = nullptr;
  if (posix_memalign(&p, a, bytes == 0 ? 1 : bytes) != 0) throw std::bad_alloc();
  return p;
}

}  // namespace

void* operator new(std::size_t bytes) {
  note_allocation();
  return allocate(bytes);
}
void* operator new[](std::size_t bytes) {
  note_allocation();
  return allocate(bytes);
}
void* operator new(std::size_t bytes, const std::nothrow_t&) noexcept {
  note_allocation();
  return std::malloc(bytes == 0 ? 1 : bytes);
}
void* operator new[](std::size_t bytes, const std::nothrow_t&) noexcept {
  note_allocation();
  return std::malloc(bytes == 0 ? 1 : bytes);
}
void* operator new(std::size_t bytes, std::align_val_t alignment) {
  note_allocation();
  return allocate_aligned(bytes, alignment);
}
void* operator new[](std::size_t bytes, std::align_val_t alignment) {
  note_allocation();
  return allocate_aligned(bytes, alignment);
}
void* operator new(std::size_t bytes, std::align_val_t alignment, const std::nothrow_t&) noexcept {
  note_allocation();
  try {
    return allocate_aligned(bytes, alignment);
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}
void* operator new[](std::size_t bytes, std::align_val_t alignment,
                     const std::nothrow_t&) noexcept {
  note_allocation();
  try {
    return allocate_aligned(bytes, alignment);
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete[](void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::size_t) noexcept {
  std::free(p);
}
void operator delete(void* p, const std::nothrow_t&) noexcept {
  std::free(p);
}
void operator delete[](void* p, const std::nothrow_t&) noexcept {
  std::free(p);
}
void operator delete(void* p, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept {
  std::free(p);
}

// ---- The workloads ---------------------------------------------------------------

namespace {

using rig::Tensor;
namespace ops = rig::ops;

struct Counts {
  std::size_t rig = 0;
  std::size_t onednn = 0;
};

// Counts the allocations of one call of `step`.
Counts count(const std::function<void()>& step) {
  for (auto& c : g_count) c.store(0);
  g_counting.store(true);
  step();
  g_counting.store(false);
  return {g_count[kRig].load(), g_count[kOneDnn].load()};
}

// Nodes of the recorded graph reachable from `root` (counting paused).
std::size_t recorded_ops(const Tensor& root) {
  std::set<const rig::autograd::Node*> seen;
  std::vector<const rig::autograd::Node*> stack{root.impl()->grad_fn.get()};
  while (!stack.empty()) {
    const rig::autograd::Node* node = stack.back();
    stack.pop_back();
    if (node == nullptr || !seen.insert(node).second) continue;
    for (const auto& edge : node->edges) stack.push_back(edge.node.get());
  }
  return seen.size();
}

Tensor random_tensor(rig::Shape shape, std::uint32_t purpose) {
  Tensor t = Tensor::empty(std::move(shape));
  rig::fill_normal({7, 0, 0, purpose}, t.data<float>(), t.numel());
  return t;
}

// A leaf that requires a gradient (as the output of an earlier layer would).
Tensor leaf(const Tensor& x) {
  Tensor t = x.detach();
  t.set_requires_grad(true);
  return t;
}

struct Workload {
  const char* name;
  // Builds the loss of step `i` (training: with history; eval: forward only).
  std::function<Tensor(int i, bool training)> loss;
  std::function<void()> zero_grad;
};

bool measure(const Workload& w) {
  constexpr int kWarmup = 5;
  int step = 0;
  // Training step: zero the gradients, forward, backward.
  const auto train = [&] {
    w.zero_grad();
    w.loss(step++, true).backward();
  };
  for (int i = 0; i < kWarmup; ++i) train();
  // The op count comes from the same forward pass as the one measured below.
  std::size_t ops_recorded = 0;
  const Counts train_counts = count([&] {
    w.zero_grad();
    const Tensor loss = w.loss(step++, true);
    g_counting.store(false);
    ops_recorded = recorded_ops(loss);
    g_counting.store(true);
    loss.backward();
  });
  const Counts train_again = count(train);

  const auto infer = [&] {
    const rig::NoGradGuard no_grad;
    (void)w.loss(step++, false);
  };
  for (int i = 0; i < kWarmup; ++i) infer();
  const Counts infer_counts = count(infer);

  std::printf(
      "%s: %zu ops recorded; warm forward+backward: %zu operator new calls from rig, %zu inside "
      "oneDNN (next step: %zu, %zu); warm forward under NoGradGuard: %zu from rig, %zu inside "
      "oneDNN\n",
      w.name, ops_recorded, train_counts.rig, train_counts.onednn, train_again.rig,
      train_again.onednn, infer_counts.rig, infer_counts.onednn);
  bool ok = true;
  if (train_counts.rig != 0 || train_again.rig != 0 || infer_counts.rig != 0) {
    std::printf("FAIL %s: rig allocates on the warm hot path\n", w.name);
    ok = false;
  }
  // oneDNN's own allocations per step must be steady (a constant per
  // primitive execution), not grow.
  if (train_again.onednn != train_counts.onednn) {
    std::printf("FAIL %s: oneDNN allocations differ between warm steps\n", w.name);
    ok = false;
  }
  return ok;
}

}  // namespace

int main() {
  if (const char* env = std::getenv("RIG_ALLOCATOR");
      env != nullptr && std::strcmp(env, "system") == 0) {
    std::printf("skipped: RIG_ALLOCATOR=system allocates every tensor from the system\n");
    return 77;
  }
  bool ok = true;

  {  // Transformer encoder layer + Linear + cross_entropy.
    constexpr std::int64_t kBatch = 4, kTime = 12, kModel = 64, kHeads = 4, kHidden = 256,
                           kVocab = 32;
    rig::ParameterStore store;
    const rig_test::EncoderLayer encoder(store, "encoder", kModel, kHeads, kHidden, 0.1F);
    const rig::nn::Linear head(store, "head", kModel, kVocab);
    store.allocate(1);
    const Tensor x = random_tensor({kBatch, kTime, kModel}, 1);
    // Key padding: sequence b has kTime - 2 b real tokens.
    std::vector<std::uint8_t> keep(kBatch * kTime);
    for (std::int64_t b = 0; b < kBatch; ++b) {
      for (std::int64_t t = 0; t < kTime; ++t) keep[b * kTime + t] = t < kTime - 2 * b ? 1 : 0;
    }
    const Tensor mask = Tensor::from_vector(keep, {kBatch, 1, 1, kTime});
    std::vector<std::int64_t> label_values(kBatch * kTime);
    for (std::size_t i = 0; i < label_values.size(); ++i) label_values[i] = (7 * i) % kVocab;
    const Tensor labels = Tensor::from_vector(label_values, {kBatch * kTime});
    ok &= measure({"transformer encoder layer + linear + cross_entropy",
                   [&](int i, bool training) {
                     const rig::RandomKey key{1, static_cast<std::uint64_t>(i), 0, 0};
                     const Tensor input = training ? leaf(x) : x;
                     const Tensor h = encoder.forward(input, mask, training, key);
                     const Tensor logits = head.forward(h.reshape({kBatch * kTime, kModel}));
                     return ops::cross_entropy(logits, labels, 0.1F);
                   },
                   [&] { store.zero_grad(); }});
  }

  {  // ResNet basic block + pooling + Linear + cross_entropy.
    constexpr std::int64_t kBatch = 4, kChannels = 8, kSize = 12, kClasses = 10;
    rig::ParameterStore store;
    const rig_test::BasicBlock block(store, "block", kChannels);
    const rig::nn::Linear head(store, "head", kChannels, kClasses);
    store.allocate(2);
    const Tensor x = random_tensor({kBatch, kChannels, kSize, kSize}, 2);
    const Tensor labels = Tensor::from_vector(std::vector<std::int64_t>{1, 3, 5, 7}, {kBatch});
    ops::Pool2dOptions pool;  // 2x2, stride 2
    ok &= measure({"conv2d + batch_norm + relu block + pooling + linear + cross_entropy",
                   [&](int, bool training) {
                     const Tensor input = training ? leaf(x) : x;
                     const Tensor h = ops::max_pool2d(block.forward(input, training), pool);
                     const Tensor logits = head.forward(ops::global_avg_pool2d(h));
                     return ops::cross_entropy(logits, labels);
                   },
                   [&] { store.zero_grad(); }});
  }

  {  // Linear + relu + Linear + cross_entropy on activations over 1 MiB (the
     // caching allocator's pieces of segments), three batch sizes in turn.
    constexpr std::int64_t kIn = 64, kHidden = 1024, kClasses = 16;
    rig::ParameterStore store;
    const rig::nn::Linear up(store, "up", kIn, kHidden);
    const rig::nn::Linear down(store, "down", kHidden, kClasses);
    store.allocate(3);
    std::vector<Tensor> inputs, targets;
    for (std::int64_t rows : {512, 640, 768}) {
      inputs.push_back(random_tensor({rows, kIn}, 3));
      std::vector<std::int64_t> label_values(static_cast<std::size_t>(rows));
      for (std::size_t r = 0; r < label_values.size(); ++r) {
        label_values[r] = static_cast<std::int64_t>(r % kClasses);
      }
      targets.push_back(Tensor::from_vector(label_values, {rows}));
    }
    ok &= measure({"linear + relu + linear + cross_entropy on activations over 1 MiB",
                   [&](int i, bool training) {
                     const auto which = static_cast<std::size_t>(i % 3);
                     const Tensor input = training ? leaf(inputs[which]) : inputs[which];
                     const Tensor h = ops::relu(up.forward(input));
                     return ops::cross_entropy(down.forward(h), targets[which]);
                   },
                   [&] { store.zero_grad(); }});
  }

  std::printf("backward closures stored on the heap so far: %zu\n",
              rig::autograd::backward_heap_fallbacks());
  return ok ? 0 : 1;
}
