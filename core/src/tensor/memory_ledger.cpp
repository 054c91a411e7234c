// Per device, the live storages by (label, dtype, shape). The picture at the
// peak is taken lazily: a new highest total only marks it due, and the first
// release after it (or a question) takes it, so a run of allocations that
// each raise the peak costs one picture, not one each. Entries are never
// erased (a run has few distinct shapes), so a storage and a picture may
// point at theirs for good.
#include "tensor/memory_ledger.hpp"

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "rig/memory_labels.hpp"

namespace rig::detail {

namespace {

thread_local const char* current_label = nullptr;

struct EntryKey {
  const char* label = nullptr;  // literals: compared by address, merged by text when read
  DType dtype = DType::u8;
  Shape shape;
  bool operator==(const EntryKey&) const = default;
};

struct EntryKeyHash {
  std::size_t operator()(const EntryKey& k) const {
    std::size_t h = std::hash<const void*>()(k.label) ^ (static_cast<std::size_t>(k.dtype) << 1);
    for (const std::int64_t d : k.shape) h = h * 1000003U ^ std::hash<std::int64_t>()(d);
    return h;
  }
};

class MemoryLedger;

}  // namespace

struct LedgerEntry {
  MemoryLedger* ledger = nullptr;
  const EntryKey* key = nullptr;
  std::int64_t count = 0;
  std::size_t bytes = 0;
  std::size_t live_at = 0;  // its place among the live entries while count > 0
};

namespace {

struct PictureLine {
  const LedgerEntry* entry = nullptr;
  std::int64_t count = 0;
  std::size_t bytes = 0;
};

class MemoryLedger {
 public:
  LedgerEntry* count_in(DType dtype, const Shape& shape, std::size_t bytes) {
    const std::lock_guard<std::mutex> lock(mutex_);
    auto [it, added] = entries_.try_emplace(EntryKey{current_label, dtype, shape});
    LedgerEntry& e = it->second;
    if (added) {
      e.ledger = this;
      e.key = &it->first;
    }
    ++e.count;
    e.bytes += bytes;
    if (e.count == 1) {
      e.live_at = live_.size();
      live_.push_back(&e);
    }
    total_ += bytes;
    if (total_ > peak_) {
      peak_ = total_;
      picture_due_ = true;
    }
    return &e;
  }

  void count_out(LedgerEntry& e, std::size_t bytes) {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (picture_due_) take_picture();
    --e.count;
    e.bytes -= bytes;
    total_ -= bytes;
    if (e.count == 0) {  // its place goes to the last live entry
      live_[e.live_at] = live_.back();
      live_[e.live_at]->live_at = e.live_at;
      live_.pop_back();
    }
  }

  void reset_peak() {
    const std::lock_guard<std::mutex> lock(mutex_);
    peak_ = total_;
    picture_due_ = true;
  }

  MemoryPicture at_peak() {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (picture_due_) take_picture();
    return readable(picture_, picture_bytes_);
  }

  MemoryPicture now() {
    const std::lock_guard<std::mutex> lock(mutex_);
    std::vector<PictureLine> lines;
    lines.reserve(live_.size());
    for (const LedgerEntry* e : live_) lines.push_back({e, e->count, e->bytes});
    return readable(lines, total_);
  }

 private:
  void take_picture() {
    picture_.clear();
    for (const LedgerEntry* e : live_) picture_.push_back({e, e->count, e->bytes});
    picture_bytes_ = total_;
    picture_due_ = false;
  }

  // Entries with the same label text (literals from different files) as one.
  static MemoryPicture readable(const std::vector<PictureLine>& lines, std::size_t bytes) {
    MemoryPicture p;
    p.bytes = bytes;
    std::map<std::tuple<std::string_view, DType, Shape>, std::size_t> at;
    for (const PictureLine& line : lines) {
      const EntryKey& k = *line.entry->key;
      const std::string_view label = k.label == nullptr ? "" : k.label;
      const auto [it, added] = at.try_emplace({label, k.dtype, k.shape}, p.storages.size());
      if (added) p.storages.push_back({std::string(label), k.dtype, k.shape, 0, 0});
      LiveStorages& s = p.storages[it->second];
      s.count += line.count;
      s.bytes += line.bytes;
    }
    std::stable_sort(
        p.storages.begin(), p.storages.end(),
        [](const LiveStorages& a, const LiveStorages& b) { return a.bytes > b.bytes; });
    return p;
  }

  std::mutex mutex_;
  std::unordered_map<EntryKey, LedgerEntry, EntryKeyHash> entries_;
  std::vector<LedgerEntry*> live_;  // entries with count > 0
  std::size_t total_ = 0;
  std::size_t peak_ = 0;
  bool picture_due_ = false;
  std::vector<PictureLine> picture_;
  std::size_t picture_bytes_ = 0;
};

class Ledgers {
 public:
  MemoryLedger& of(Device device) {
    const std::lock_guard<std::mutex> lock(mutex_);
    std::unique_ptr<MemoryLedger>& l = ledgers_[{static_cast<int>(device.type), device.index}];
    if (!l) l = std::make_unique<MemoryLedger>();
    return *l;
  }

 private:
  std::mutex mutex_;
  std::map<std::pair<int, int>, std::unique_ptr<MemoryLedger>> ledgers_;
};

// Constructed in place and never destroyed: storages may be released by
// other static destructors at exit.
Ledgers& ledgers() {
  alignas(Ledgers) static std::byte storage[sizeof(Ledgers)];
  static Ledgers* const all = ::new (storage) Ledgers();
  return *all;
}

// Most threads allocate on one device: its ledger without the registry's lock.
MemoryLedger& ledger_of(Device device) {
  thread_local Device last{};
  thread_local MemoryLedger* last_ledger = nullptr;
  if (last_ledger == nullptr || !(last == device)) {
    last_ledger = &ledgers().of(device);
    last = device;
  }
  return *last_ledger;
}

}  // namespace

LedgerEntry* count_in(Device device, DType dtype, const Shape& shape, std::size_t bytes) {
  return ledger_of(device).count_in(dtype, shape, bytes);
}

void count_out(LedgerEntry* entry, std::size_t bytes) {
  if (entry != nullptr) entry->ledger->count_out(*entry, bytes);
}

void reset_ledger_peak(Device device) {
  ledger_of(device).reset_peak();
}

}  // namespace rig::detail

namespace rig {

MemoryLabel::MemoryLabel(const char* label) : previous_(detail::current_label) {
  detail::current_label = label;
}

MemoryLabel::~MemoryLabel() {
  detail::current_label = previous_;
}

MemoryPicture memory_at_peak(Device device) {
  return detail::ledger_of(device).at_peak();
}

MemoryPicture memory_now(Device device) {
  return detail::ledger_of(device).now();
}

std::string_view shown_label(std::string_view label) {
  return label.empty() ? "code outside the engine's phases" : label;
}

std::vector<LabelledStorages> by_label(const MemoryPicture& picture) {
  std::vector<LabelledStorages> labels;
  std::map<std::string, std::size_t> at;
  for (const LiveStorages& s : picture.storages) {  // largest first, so each label's are too
    const auto [it, added] = at.try_emplace(s.label, labels.size());
    if (added) labels.push_back({s.label, 0, {}});
    labels[it->second].bytes += s.bytes;
    labels[it->second].storages.push_back(s);
  }
  std::stable_sort(
      labels.begin(), labels.end(),
      [](const LabelledStorages& a, const LabelledStorages& b) { return a.bytes > b.bytes; });
  return labels;
}

}  // namespace rig
