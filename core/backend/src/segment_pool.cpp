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

SegmentPool::Node* SegmentPool::add_node(std::byte* data, std::size_t size, Owner owner,
                                         Node* previous, Node* next) {
  const Node fields{data, size, owner, previous, next, State::free};
  if (spare_nodes_.empty()) {
    auto owned = std::make_unique<Node>(fields);
    Node* node = owned.get();
    nodes_.emplace(data, std::move(owned));
    return node;
  }
  NodeMap::node_type spare = std::move(spare_nodes_.back());
  spare_nodes_.pop_back();
  spare.key() = data;
  *spare.mapped() = fields;
  Node* node = spare.mapped().get();
  nodes_.insert(std::move(spare));
  return node;
}

void SegmentPool::erase_node(const std::byte* data) {
  NodeMap::node_type spare = nodes_.extract(data);
  if (spare.empty()) return;
  try {
    spare_nodes_.push_back(std::move(spare));
  } catch (...) {
    // No room to keep it: it is freed instead.
  }
}

void SegmentPool::insert_free(Node* node) {
  if (spare_free_.empty()) {
    free_.insert(node);
    return;
  }
  FreeSet::node_type spare = std::move(spare_free_.back());
  spare_free_.pop_back();
  spare.value() = node;
  free_.insert(std::move(spare));
}

void SegmentPool::erase_free(Node* node) {
  FreeSet::node_type spare = free_.extract(node);  // empty when `node` is not free
  if (spare.empty()) return;
  try {
    spare_free_.push_back(std::move(spare));
  } catch (...) {
    // No room to keep it: it is freed instead.
  }
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
  Node* node = add_node(data, size, owner, nullptr, nullptr);
  try {
    insert_free(node);
  } catch (...) {
    erase_node(data);
    throw;
  }
  free_bytes_ += size;
  ++segments_;
  return hand_out(node, bytes);
}

SegmentPool::Piece SegmentPool::hand_out(Node* node, std::size_t bytes) {
  erase_free(node);
  if (node->size - bytes > split_above_) {
    Node* rest = add_node(node->data + bytes, node->size - bytes, node->owner, node, node->next);
    if (node->next != nullptr) node->next->previous = rest;
    node->next = rest;
    node->size = bytes;
    insert_free(rest);
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

bool SegmentPool::give_back(std::byte* data) {
  Node* node = node_in_use(data);
  if (node == nullptr) return false;
  make_free(node);
  return true;
}

void SegmentPool::make_free(Node* node) {
  const auto is_free = [](const Node* n) { return n != nullptr && n->state == State::free; };
  // Takes `second` (free, right after `first`) into `first`.
  const auto merge = [this](Node* first, Node* second) {
    erase_free(second);
    first->size += second->size;
    first->next = second->next;
    if (second->next != nullptr) second->next->previous = first;
    erase_node(second->data);
  };
  node->state = State::free;
  free_bytes_ += node->size;
  if (is_free(node->next)) merge(node, node->next);
  if (is_free(node->previous)) {
    Node* previous = node->previous;
    erase_free(previous);
    merge(previous, node);
    node = previous;
  }
  insert_free(node);
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
