// Reverse-mode autograd over the Nodes that ops record.
//
// No heap allocation per op once warm: nodes come from the object pool, and
// a backward pass keeps its bookkeeping (the graph walk, the pending
// gradients) in per-thread containers that are cleared, not freed, between
// passes.
#include "rig/autograd.hpp"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdint>
#include <stdexcept>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "backend/backend.hpp"
#include "tensor/object_pool.hpp"

namespace rig::autograd {

namespace {

std::atomic<std::size_t> g_heap_fallbacks{0};

// dst += src; either may be strided (a leaf's grad may be a view into a flat
// gradient buffer, and view backward functions return views).
void add_into(Tensor& dst, const Tensor& src) {
  if (dst.device() != src.device()) {
    throw std::invalid_argument(fmt::format("autograd: a gradient on {} for a tensor on {}",
                                            to_string(src.device()), to_string(dst.device())));
  }
  backend::backend_for(dst.device())
      .add_strided(dst.shape(), dst.raw_data(), dst.strides(), dst.dtype(), src.raw_data(),
                   src.strides(), src.dtype());
}

// A vertex of the backward graph: a node, or a leaf that accumulates into .grad.
struct Vertex {
  Node* node = nullptr;
  TensorImpl* leaf = nullptr;
  const void* key() const { return node != nullptr ? static_cast<const void*>(node) : leaf; }
};

Vertex vertex_of(const Edge& edge) {
  return {edge.node.get(), edge.leaf.get()};
}

// Vertex key -> position, by open addressing (linear probing) over a
// power-of-two table that keeps its size between passes.
class VertexIndex {
 public:
  void clear() {
    if (used_ > 0) std::fill(keys_.begin(), keys_.end(), nullptr);
    used_ = 0;
  }
  // The value slot of `key`, or nullptr.
  std::uint32_t* find(const void* key) {
    if (keys_.empty()) return nullptr;
    for (std::size_t i = slot_of(key);; i = (i + 1) & mask()) {
      if (keys_[i] == key) return &values_[i];
      if (keys_[i] == nullptr) return nullptr;
    }
  }
  // Adds `key` (with value 0); false when it was already there.
  bool insert(const void* key) {
    if (2 * (used_ + 1) > keys_.size()) grow();
    for (std::size_t i = slot_of(key);; i = (i + 1) & mask()) {
      if (keys_[i] == key) return false;
      if (keys_[i] == nullptr) {
        keys_[i] = key;
        values_[i] = 0;
        ++used_;
        return true;
      }
    }
  }

 private:
  std::size_t mask() const { return keys_.size() - 1; }
  std::size_t slot_of(const void* key) const {
    // Fibonacci hashing of the address; the low bits of heap addresses are all zero.
    const auto x = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(key));
    return static_cast<std::size_t>((x * 0x9E3779B97F4A7C15ULL) >> (64 - bits_));
  }
  void grow() {
    std::vector<const void*> old_keys(std::max<std::size_t>(64, 2 * keys_.size()), nullptr);
    std::vector<std::uint32_t> old_values(old_keys.size(), 0);
    old_keys.swap(keys_);
    old_values.swap(values_);
    bits_ = static_cast<unsigned>(std::countr_zero(keys_.size()));
    used_ = 0;
    for (std::size_t i = 0; i < old_keys.size(); ++i) {
      if (old_keys[i] == nullptr) continue;
      insert(old_keys[i]);
      *find(old_keys[i]) = old_values[i];
    }
  }

  std::vector<const void*> keys_;
  std::vector<std::uint32_t> values_;
  std::size_t used_ = 0;
  unsigned bits_ = 0;
};

// A gradient being summed; `owned` once it is a buffer of our own that may be
// added into (a backward function may return a tensor it also returns
// elsewhere); `in_leaf` when it is a leaf's .grad itself, which a backward
// function added into (accumulation_target), so the leaf has it already.
struct PendingGrad {
  Tensor value;
  bool owned = false;
  bool in_leaf = false;
};

// One backward pass's bookkeeping.
struct Scratch {
  VertexIndex position;  // every vertex reachable from the root -> its index in `order`
  // Post order: a vertex comes after all the vertices its input edges lead
  // to, so the root is last. Raw pointers: each node is owned by an edge of
  // a later node (or by the root tensor) until the graph is released.
  std::vector<Vertex> order;
  std::vector<std::pair<Vertex, std::uint32_t>> stack;  // (vertex, next edge to visit)
  std::vector<PendingGrad> grads;                       // by index in `order`
  // The running node's accumulation targets by input, each found when its
  // backward function first asks (asked, target); empty if it asked none.
  std::vector<std::pair<bool, Tensor>> targets;
  std::vector<const TensorImpl*> offered;  // theirs, once the node has run
  bool busy = false;

  void reset() {
    position.clear();
    order.clear();
    stack.clear();
    grads.clear();
    targets.clear();
    offered.clear();
  }
};

// The node whose backward function runs on this thread, and its pass.
struct RunningNode {
  Scratch* scratch = nullptr;
  const Node* node = nullptr;
};
thread_local const RunningNode* t_running = nullptr;

// Sets t_running while one backward function runs (restoring an outer
// pass's: a backward function may itself run backward()).
class RunningScope {
 public:
  explicit RunningScope(const RunningNode& running) : previous_(t_running) { t_running = &running; }
  ~RunningScope() { t_running = previous_; }
  RunningScope(const RunningScope&) = delete;
  RunningScope& operator=(const RunningScope&) = delete;

 private:
  const RunningNode* previous_;
};

// The calling thread's scratch, or `fallback` when it is in use (a backward
// function that itself runs backward()). Resets it when the pass ends.
class ScratchLease {
 public:
  explicit ScratchLease(Scratch& fallback) {
    thread_local Scratch mine;
    scratch_ = mine.busy ? &fallback : &mine;
    scratch_->busy = true;
  }
  ~ScratchLease() {
    scratch_->reset();
    scratch_->busy = false;
  }
  ScratchLease(const ScratchLease&) = delete;
  ScratchLease& operator=(const ScratchLease&) = delete;
  Scratch& operator*() const { return *scratch_; }

 private:
  Scratch* scratch_;
};

// Fills s.order and s.position with every vertex reachable from `root` along edges.
void collect_graph(Scratch& s, Vertex root) {
  s.position.insert(root.key());
  s.stack.emplace_back(root, 0);
  while (!s.stack.empty()) {
    auto& [vertex, next] = s.stack.back();
    const EdgeList* edges = vertex.node != nullptr ? &vertex.node->edges : nullptr;
    if (edges != nullptr && next < edges->size()) {
      const Edge& edge = (*edges)[next++];
      if (edge.defined() && s.position.insert(vertex_of(edge).key())) {
        s.stack.emplace_back(vertex_of(edge), 0);
      }
      continue;
    }
    *s.position.find(vertex.key()) = static_cast<std::uint32_t>(s.order.size());
    s.order.push_back(vertex);
    s.stack.pop_back();
  }
}

thread_local LeafGradListener* t_leaf_grad_listener = nullptr;

// A leaf's gradient arrives: the first becomes .grad (a contiguous copy we
// own, in the leaf's dtype), later ones are added into it.
void accumulate_into_leaf(TensorImpl& leaf, const Tensor& grad) {
  if (!leaf.grad) {
    Tensor first = Tensor::empty(leaf.shape, leaf.dtype, grad.device());
    first.copy_from(grad);
    leaf.grad = first.impl_ptr();
    return;
  }
  Tensor leaf_grad(leaf.grad);
  add_into(leaf_grad, grad);
}

// What a backward function may add edge's gradient into (see
// accumulation_target): the gradient pending for it when that is ours alone
// and dense, else a leaf's .grad when nothing is pending for the leaf yet.
Tensor accumulation_target_of(const Edge& edge, const PendingGrad& slot) {
  if (slot.value.defined()) {
    const bool ours = slot.owned || slot.value.sole_owner();
    return ours && slot.value.dtype() == edge.dtype && slot.value.is_contiguous() ? slot.value
                                                                                  : Tensor();
  }
  if (edge.node != nullptr) {
    const Tensor& home = edge.node->output_grad_home;
    const bool usable = home.defined() && home.dtype() == edge.dtype && home.shape() == edge.shape;
    return usable ? home : Tensor();
  }
  if (edge.leaf == nullptr || !edge.leaf->grad) return {};
  Tensor grad(edge.leaf->grad);
  const bool usable = grad.dtype() == edge.leaf->dtype && grad.shape() == edge.shape &&
                      grad.device() == Tensor(edge.leaf).device() && grad.is_contiguous();
  return usable ? grad : Tensor();
}

}  // namespace

Tensor accumulation_target(std::size_t input) {
  // Found on demand: most backward functions never ask.
  if (t_running == nullptr || input >= t_running->node->edges.size()) return {};
  Scratch& s = *t_running->scratch;
  if (s.targets.empty()) s.targets.resize(t_running->node->edges.size());
  auto& [asked, target] = s.targets[input];
  if (!asked) {
    asked = true;
    const Edge& edge = t_running->node->edges[input];
    if (edge.defined()) {
      target = accumulation_target_of(edge, s.grads[*s.position.find(vertex_of(edge).key())]);
    }
  }
  return target;
}

Tensor record(Tensor output, OpName op, TensorList inputs, BackwardFn backward) {
  if (!grad_mode_enabled()) return output;
  bool needs_grad = false;
  for (const auto& input : inputs) needs_grad |= input.defined() && input.requires_grad();
  if (!needs_grad) return output;
  if (!backward.stored_inline()) g_heap_fallbacks.fetch_add(1, std::memory_order_relaxed);
  auto node = rig::detail::make_pooled<Node>();
  node->op = op;
  for (const Tensor& input : inputs) {
    Edge& edge = node->edges.emplace_back();
    if (!input.defined() || !input.requires_grad()) continue;
    if (input.impl()->grad_fn) {
      edge.node = input.impl()->grad_fn;
    } else {
      edge.leaf = input.impl_ptr();
    }
    edge.shape = input.shape();
    edge.dtype = input.dtype();
  }
  node->backward = std::move(backward);
  node->output_grad_home = Tensor();  // a pooled node may have held one
  output.impl()->grad_fn = std::move(node);
  output.impl()->requires_grad = true;
  return output;
}

void set_output_grad_home(const Tensor& output, Tensor home) {
  if (!output.defined() || !output.impl()->grad_fn) {
    throw std::logic_error("set_output_grad_home: the tensor has no recorded node");
  }
  output.impl()->grad_fn->output_grad_home = std::move(home);
}

ScopedLeafGradListener::ScopedLeafGradListener(LeafGradListener& listener)
    : previous_(t_leaf_grad_listener) {
  t_leaf_grad_listener = &listener;
}

ScopedLeafGradListener::~ScopedLeafGradListener() {
  t_leaf_grad_listener = previous_;
}

std::size_t backward_heap_fallbacks() {
  return g_heap_fallbacks.load(std::memory_order_relaxed);
}

void backward(const Tensor& root) {
  if (!root.defined()) throw std::logic_error("backward: the tensor is undefined");
  if (root.numel() != 1 || !is_floating(root.dtype())) {
    throw std::invalid_argument(fmt::format("backward: needs one floating element, got {} {}",
                                            dtype_name(root.dtype()), to_string(root.shape())));
  }
  backward(root, Tensor::full(root.shape(), 1.0F, root.dtype(), root.device()));
}

void backward(const Tensor& root, Tensor grad) {
  if (!root.defined() || !grad.defined()) {
    throw std::logic_error("backward: the tensor or its gradient is undefined");
  }
  if (grad.shape() != root.shape() || grad.dtype() != root.dtype()) {
    throw std::invalid_argument(fmt::format("backward: a gradient of {} {} for a tensor of {} {}",
                                            dtype_name(grad.dtype()), to_string(grad.shape()),
                                            dtype_name(root.dtype()), to_string(root.shape())));
  }
  if (!root.requires_grad()) {
    throw std::invalid_argument(
        "backward: the tensor does not require a gradient (no input of the ops that computed it "
        "requires one, or it was computed under NoGradGuard)");
  }
  NoGradGuard no_grad;  // backward functions compute with ops but record nothing
  Scratch fallback;
  const ScratchLease lease(fallback);
  Scratch& s = *lease;
  collect_graph(s, {root.impl()->grad_fn.get(), root.impl()->grad_fn ? nullptr : root.impl()});
  s.grads.resize(s.order.size());
  // Not marked ours: added into in place only once nothing else holds it.
  s.grads.back() = {std::move(grad), false};

  for (std::size_t pos = s.order.size(); pos-- > 0;) {
    const Vertex vertex = s.order[pos];
    if (!s.grads[pos].value.defined()) continue;  // nothing flowed here
    const Tensor grad = std::move(s.grads[pos].value);
    if (vertex.leaf != nullptr) {
      if (!s.grads[pos].in_leaf) accumulate_into_leaf(*vertex.leaf, grad);
      // Each vertex comes once in `order`, after everything that feeds it.
      if (t_leaf_grad_listener != nullptr) t_leaf_grad_listener->leaf_grad_ready(*vertex.leaf);
      continue;
    }
    Node& node = *vertex.node;
    if (!node.backward) {
      throw std::logic_error(fmt::format(
          "backward: the graph through '{}' was already released by an earlier backward()",
          node.op.view()));
    }
    TensorList input_grads;
    {
      // The function and the tensors it saved go as soon as it has run, as
      // PyTorch frees a node's saved variables: the activations of the layers
      // behind are gone before the next ones' gradients are made.
      const BackwardFn backward_fn = std::move(node.backward);
      node.backward = nullptr;
      const RunningNode running{&s, &node};
      const RunningScope scope(running);
      input_grads = backward_fn(grad);
    }
    // Let go of the targets before any sole_owner() test below.
    s.offered.clear();
    for (const auto& entry : s.targets) s.offered.push_back(entry.second.impl());
    s.targets.clear();
    if (input_grads.size() != node.edges.size()) {
      throw std::logic_error(fmt::format("backward of {}: {} gradients for {} inputs",
                                         node.op.view(), input_grads.size(), node.edges.size()));
    }
    for (std::size_t i = 0; i < input_grads.size(); ++i) {
      const Edge& edge = node.edges[i];
      Tensor& g = input_grads[i];
      if (!edge.defined() || !g.defined()) continue;
      if (g.dtype() != edge.dtype) g = g.to(edge.dtype);  // e.g. f32 math for an f16 input
      if (g.shape() != edge.shape) {
        throw std::logic_error(fmt::format("backward of {}: gradient {} for input {} of shape {}",
                                           node.op.view(), to_string(g.shape()), i,
                                           to_string(edge.shape)));
      }
      PendingGrad& slot = s.grads[*s.position.find(vertex_of(edge).key())];
      if (i < s.offered.size() && s.offered[i] != nullptr && g.impl() == s.offered[i]) {
        // Added into its target by the backward function: nothing left to add.
        if (!slot.value.defined()) slot = {std::move(g), true, true};
        slot.owned = true;
        continue;
      }
      if (!slot.value.defined()) {
        slot = {std::move(g), false};
        continue;
      }
      // A backward function may return a tensor it also keeps, or the same
      // tensor for two inputs (add gives both its upstream gradient); by the
      // time a second gradient arrives, the other holders have usually been
      // consumed. Saves a copy per residual connection.
      if (!slot.owned && !slot.value.sole_owner()) slot.value = slot.value.clone();
      slot.owned = true;
      add_into(slot.value, g);
    }
  }
  // Release the graph (saved tensors and edges) as PyTorch does without
  // retain_graph. Going inputs-first, a node whose last owner goes away
  // already has no edges, so a long chain is freed iteratively instead of by
  // deep recursive destruction.
  for (const Vertex& vertex : s.order) {
    if (vertex.node != nullptr) {
      vertex.node->edges.clear();
      vertex.node->backward = nullptr;
      vertex.node->output_grad_home = Tensor();
    }
  }
}

}  // namespace rig::autograd
