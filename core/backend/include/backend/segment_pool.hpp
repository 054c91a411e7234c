// Large blocks as pieces of segments: the bookkeeping both caching allocators
// share (backend::CachingAllocator on the host and the sim device,
// cuda::DeviceCachingAllocator on a GPU and the emulated one), as PyTorch's
// CUDA allocator does it. A segment is one allocation from the system; a
// request takes the smallest free piece of its owner (a stream) that fits,
// split when more than `split_above` bytes would be left over, and a freed
// piece merges with its free neighbours. So memory freed by one shape serves
// another (a 392 MiB activation's block serves two 196 MiB ones) and a
// training loop whose shapes vary from step to step (bucketed sentence
// lengths) stops asking the system for more once it has seen its largest
// step. The memory itself comes and goes in the allocators; this only
// remembers how it is cut up. Not thread-safe: the allocators lock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <vector>

namespace rig::backend {

class SegmentPool {
 public:
  using Owner = std::uintptr_t;  // pieces of different owners never mix
  struct Piece {
    std::byte* data = nullptr;
    std::size_t size = 0;
  };

  explicit SegmentPool(std::size_t split_above) : split_above_(split_above) {}
  SegmentPool(const SegmentPool&) = delete;
  SegmentPool& operator=(const SegmentPool&) = delete;
  ~SegmentPool();

  // The smallest free piece of `owner` of at least `bytes`, now in use (its
  // rest split off when large enough); nullopt when none fits.
  std::optional<Piece> take(std::size_t bytes, Owner owner);
  // A new segment of `owner`, [data, data + size), size >= bytes, whose first
  // `bytes` are handed out at once (the rest split off when large enough).
  Piece take_from_new_segment(std::byte* data, std::size_t size, std::size_t bytes, Owner owner);

  // The size of the piece in use that starts at `data`; nullopt when there
  // is none (not this pool's block).
  std::optional<std::size_t> size_in_use(const std::byte* data) const;
  // The piece in use (or held) at `data` is free again, merged with free
  // neighbours; false when there is none (not this pool's block).
  bool give_back(std::byte* data);
  // The piece in use at `data` is out of use but not free yet (a GPU stream
  // may still use it): it neither serves requests nor merges until
  // give_back(data).
  void hold(std::byte* data);

  // Hands wholly free segments to `release` (data, size), largest first,
  // until at least `enough` bytes went; returns the bytes released.
  std::size_t release_free_segments(const std::function<void(std::byte*, std::size_t)>& release,
                                    std::size_t enough = std::numeric_limits<std::size_t>::max());

  std::size_t free_bytes() const { return free_bytes_; }
  std::size_t segments() const { return segments_; }

 private:
  enum class State { in_use, held, free };
  struct Node {
    std::byte* data = nullptr;
    std::size_t size = 0;
    Owner owner = 0;
    Node* previous = nullptr;  // the neighbours in its segment, by address
    Node* next = nullptr;
    State state = State::free;
  };
  struct SmallestFirst {  // the free pieces' order: by owner, then size, then address
    bool operator()(const Node* a, const Node* b) const;
  };

  using NodeMap = std::map<const std::byte*, std::unique_ptr<Node>>;
  using FreeSet = std::set<Node*, SmallestFirst>;

  Node* node_in_use(const std::byte* data) const;
  Piece hand_out(Node* node, std::size_t bytes);
  void make_free(Node* node);
  // A piece's record and its place among the free pieces, made from the
  // spares that erased ones left where there are any: once a training loop
  // is warm, splitting and merging take no memory from the heap.
  Node* add_node(std::byte* data, std::size_t size, Owner owner, Node* previous, Node* next);
  void erase_node(const std::byte* data);
  void insert_free(Node* node);
  void erase_free(Node* node);

  const std::size_t split_above_;
  NodeMap nodes_;  // every piece, by address
  FreeSet free_;
  std::vector<NodeMap::node_type> spare_nodes_;
  std::vector<FreeSet::node_type> spare_free_;
  std::size_t free_bytes_ = 0;
  std::size_t segments_ = 0;
};

}  // namespace rig::backend
