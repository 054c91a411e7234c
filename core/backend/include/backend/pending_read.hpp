// A copy from a device to the host that is queued now, behind the work queued
// so far, and collected later: collecting it waits for that copy alone, not
// for the work queued after it. The training loop reads its ranks' agreement
// (stop signals, the checkpoint clock) this way, one step late, so that no
// step waits for the device.
#pragma once

#include <cstddef>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

namespace rig::backend {

class PendingRead {
 public:
  virtual ~PendingRead() = default;
  // Waits for the copy and puts its bytes at `host`; once only.
  virtual void wait_into(void* host) = 0;
};

// A read that has already happened (the CPU's, the sim device's, an emulated GPU's).
class CompletedRead final : public PendingRead {
 public:
  explicit CompletedRead(std::vector<std::byte> bytes) : bytes_(std::move(bytes)) {}
  void wait_into(void* host) override {
    if (!bytes_.empty()) std::memcpy(host, bytes_.data(), bytes_.size());
  }

 private:
  std::vector<std::byte> bytes_;
};

// `read(host, bytes)` at once, kept for later.
template <class ReadNow>
std::unique_ptr<PendingRead> read_at_once(std::size_t bytes, ReadNow&& read) {
  std::vector<std::byte> copy(bytes);
  read(copy.data(), bytes);
  return std::make_unique<CompletedRead>(std::move(copy));
}

}  // namespace rig::backend
