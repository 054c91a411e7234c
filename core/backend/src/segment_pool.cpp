#include "backend/segment_pool.hpp"

#include <algorithm>
#include <vector>

namespace rig::backend {

SegmentPool::~SegmentPool() = default;

bool SegmentPool::SmallestFirst::operator()(const Node* a, const Node* b) const {
  if (a->owner != b->owner) return a->owner < b->owner;
  if (a->size != b->size) return a->size < b->size;
  return a->data < b->data;
}

std::optional<SegmentPool::Piece> SegmentPool::take(std::size_t bytes, Owner owner) {
  Node key;
  key.size = bytes;
  key.owner = owner;
  const auto it = free_.lower_bound(&key);
  if (it == free_.end() || (*it)->owner != owner) return std::nullopt;
  return hand_out(*it, bytes);
}

SegmentPool::Piece SegmentPool::take_from_new_segment(std::byte* data, std::size_t size,
                                                      std::size_t bytes, Owner owner) {
  auto owned = std::make_unique<Node>();
  Node* node = owned.get();
  node->data = data;
  node->size = size;
  node->owner = owner;
  nodes_.emplace(data, std::move(owned));
  free_.insert(node);
  free_bytes_ += size;
  ++segments_;
  return hand_out(node, bytes);
}

SegmentPool::Piece SegmentPool::hand_out(Node* node, std::size_t bytes) {
  // The rest is made first: if that throws, nothing has changed.
  std::unique_ptr<Node> rest;
  if (node->size - bytes > split_above_) {
    rest = std::make_unique<Node>();
    rest->data = node->data + bytes;
    rest->size = node->size - bytes;
    rest->owner = node->owner;
  }
  free_.erase(node);
  if (rest != nullptr) {
    rest->previous = node;
    rest->next = node->next;
    if (node->next != nullptr) node->next->previous = rest.get();
    node->next = rest.get();
    node->size = bytes;
    free_.insert(rest.get());
    nodes_.emplace(rest->data, std::move(rest));
  }
  node->state = State::in_use;
  free_bytes_ -= node->size;
  return {node->data, node->size};
}

SegmentPool::Node* SegmentPool::node_in_use(const std::byte* data) const {
  const auto found = nodes_.find(data);
  if (found == nodes_.end() || found->second->state == State::free) return nullptr;
  return found->second.get();
}

std::optional<std::size_t> SegmentPool::size_in_use(const std::byte* data) const {
  const Node* node = node_in_use(data);
  if (node == nullptr || node->state != State::in_use) return std::nullopt;
  return node->size;
}

void SegmentPool::hold(std::byte* data) {
  if (Node* node = node_in_use(data)) node->state = State::held;
}

void SegmentPool::give_back(std::byte* data) {
  if (Node* node = node_in_use(data)) make_free(node);
}

void SegmentPool::make_free(Node* node) {
  const auto is_free = [](const Node* n) { return n != nullptr && n->state == State::free; };
  // Takes `second` (free, right after `first`) into `first`.
  const auto merge = [this](Node* first, Node* second) {
    free_.erase(second);
    first->size += second->size;
    first->next = second->next;
    if (second->next != nullptr) second->next->previous = first;
    nodes_.erase(second->data);
  };
  node->state = State::free;
  free_bytes_ += node->size;
  if (is_free(node->next)) merge(node, node->next);
  if (is_free(node->previous)) {
    Node* previous = node->previous;
    free_.erase(previous);
    merge(previous, node);
    node = previous;
  }
  free_.insert(node);
}

std::size_t SegmentPool::release_free_segments(
    const std::function<void(std::byte*, std::size_t)>& release, std::size_t enough) {
  std::vector<Node*> whole;
  for (Node* node : free_) {
    if (node->previous == nullptr && node->next == nullptr) whole.push_back(node);
  }
  std::sort(whole.begin(), whole.end(), [](const Node* a, const Node* b) {
    return a->size != b->size ? a->size > b->size : a->data < b->data;
  });
  std::size_t released = 0;
  for (Node* node : whole) {
    if (released >= enough) break;
    std::byte* data = node->data;
    const std::size_t size = node->size;
    free_.erase(node);
    nodes_.erase(data);
    free_bytes_ -= size;
    --segments_;
    released += size;
    release(data, size);
  }
  return released;
}

}  // namespace rig::backend
