#include "ps_link.hpp"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cstring>
#include <new>

#include <fmt/format.h>

#include "collective.hpp"
#include "rig/byte_size.hpp"
#include "rig/error.hpp"

namespace rig_mpi {
namespace {

constexpr int kTag = 7011;
constexpr auto kLongestIdle = std::chrono::microseconds(1000);
constexpr auto kShortestIdle = std::chrono::microseconds(20);
constexpr std::size_t kWhereBytes = 256;

struct WireHeader {
  std::int32_t kind = 0;
  std::int32_t reserved = 0;
  std::int64_t clock = 0;
  std::int64_t offset = 0;
  std::int64_t count = 0;
};

}  // namespace

PsLink::PsLink(MPI_Comm comm, int servers, rig::PsSettings settings)
    : comm_(comm), servers_(servers), settings_(settings) {
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  std::array<char, kWhereBytes> mine{};
  std::array<char, HOST_NAME_MAX + 1> host{};
  gethostname(host.data(), host.size() - 1);
  fmt::format_to_n(mine.data(), mine.size() - 1, "pid {} on host {}", getpid(), host.data());
  std::vector<char> all(kWhereBytes * static_cast<std::size_t>(size_));
  const int rc = MPI_Allgather(mine.data(), static_cast<int>(kWhereBytes), MPI_CHAR, all.data(),
                               static_cast<int>(kWhereBytes), MPI_CHAR, comm_);
  if (rc != MPI_SUCCESS) {
    throw rig::RunError(fmt::format("mpi_ps: MPI_Allgather failed: {}", mpi_error_text(rc)));
  }
  for (int r = 0; r < size_; ++r)
    where_.emplace_back(all.data() + kWhereBytes * static_cast<std::size_t>(r));
  thread_ = std::thread([this] { main(); });
}

PsLink::~PsLink() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  sent_or_queued_.notify_all();
  thread_.join();
}

std::string PsLink::describe(int process) const {
  if (process < 0 || process >= size_) return fmt::format("process {}", process);
  const bool server = process >= workers();
  return fmt::format("{} {} (rank {}, {})", server ? "server" : "worker",
                     server ? process - workers() : process, process,
                     where_[static_cast<std::size_t>(process)]);
}

void PsLink::send(rig::PsMessage message) {
  if (message.peer < 0 || message.peer >= size_ || message.peer == rank_) {
    throw std::invalid_argument(fmt::format("mpi_ps: cannot send to process {}", message.peer));
  }
  if (message.payload.size() > static_cast<std::size_t>(INT_MAX) - sizeof(WireHeader)) {
    throw rig::RunError(fmt::format(
        "mpi_ps: a message of {} bytes is more than MPI's count limit: use more servers",
        message.payload.size()));
  }
  {
    std::lock_guard lock(mutex_);
    if (!error_.empty()) throw_failure();
    outbox_.push_back(std::move(message));
  }
  sent_or_queued_.notify_all();
}

std::optional<rig::PsMessage> PsLink::receive(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  arrived_.wait_for(lock, timeout, [this] { return !inbox_.empty() || !error_.empty(); });
  if (!error_.empty()) throw_failure();
  if (inbox_.empty()) return std::nullopt;
  rig::PsMessage m = std::move(inbox_.front());
  inbox_.pop_front();
  return m;
}

void PsLink::flush() {
  std::unique_lock lock(mutex_);
  sent_or_queued_.wait(lock,
                       [this] { return (outbox_.empty() && in_flight_ == 0) || !error_.empty(); });
  if (!error_.empty()) throw_failure();
}

void PsLink::throw_failure() const {
  // The user's to fix (a message that did not fit in memory) as it was thrown;
  // anything else as the run's failure.
  try {
    if (failure_) std::rethrow_exception(failure_);
  } catch (const rig::UserError&) {
    throw;
  } catch (...) {
  }
  throw rig::RunError(error_);
}

void PsLink::fail(const std::string& what, std::exception_ptr failure) {
  {
    std::lock_guard lock(mutex_);
    if (error_.empty()) {
      error_ = what;
      failure_ = std::move(failure);
    }
  }
  arrived_.notify_all();
  sent_or_queued_.notify_all();
}

void PsLink::main() {
  auto idle = std::chrono::microseconds(0);
  std::optional<std::chrono::steady_clock::time_point> stop_deadline;
  while (true) {
    bool busy = false;
    try {
      busy = start_sends();
      busy = finish_sends() || busy;
      busy = receive_one() || busy;
    } catch (const std::exception& e) {
      fail(e.what(), std::current_exception());
      return;
    }
    std::unique_lock lock(mutex_);
    if (!error_.empty()) return;
    if (stopping_ && outbox_.empty() && sending_.empty()) return;
    if (stopping_) {
      // Messages nobody receives any more (their process ended) are left behind.
      const auto now = std::chrono::steady_clock::now();
      if (!stop_deadline) {
        stop_deadline = now + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                  std::chrono::duration<double>(settings_.timeout_s));
      }
      if (now > *stop_deadline) return;
    }
    if (busy) {
      idle = std::chrono::microseconds(0);
      continue;
    }
    idle = std::clamp(idle * 2, kShortestIdle, kLongestIdle);
    sent_or_queued_.wait_for(lock, idle, [this] { return !outbox_.empty() || stopping_; });
  }
}

bool PsLink::start_sends() {
  std::deque<rig::PsMessage> batch;
  {
    std::lock_guard lock(mutex_);
    batch.swap(outbox_);
    in_flight_ += batch.size();
  }
  for (rig::PsMessage& m : batch) {
    Outgoing& out = sending_.emplace_back();
    WireHeader h;
    h.kind = m.kind;
    h.clock = m.clock;
    h.offset = m.offset;
    h.count = m.count;
    // The header goes after the payload, so the payload's own bytes are sent
    // (and received) without a copy of the whole message.
    out.bytes = std::move(m.payload);
    const std::size_t at = out.bytes.size();
    out.bytes.resize(at + sizeof h);
    std::memcpy(out.bytes.data() + at, &h, sizeof h);
    const int rc = MPI_Isend(out.bytes.data(), static_cast<int>(out.bytes.size()), MPI_BYTE, m.peer,
                             kTag, comm_, &out.request);
    if (rc != MPI_SUCCESS) {
      throw rig::RunError(
          fmt::format("mpi_ps: sending to {} failed: {}", describe(m.peer), mpi_error_text(rc)));
    }
  }
  return !batch.empty();
}

bool PsLink::finish_sends() {
  std::size_t finished = 0;
  for (auto it = sending_.begin(); it != sending_.end();) {
    int done = 0;
    const int rc = MPI_Test(&it->request, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) {
      throw rig::RunError(fmt::format("mpi_ps: a send failed: {}", mpi_error_text(rc)));
    }
    if (done == 0) {
      ++it;
      continue;
    }
    it = sending_.erase(it);
    ++finished;
  }
  if (finished > 0) {
    {
      std::lock_guard lock(mutex_);
      in_flight_ -= finished;
    }
    sent_or_queued_.notify_all();
  }
  return finished > 0;
}

bool PsLink::receive_one() {
  int flag = 0;
  MPI_Message handle = MPI_MESSAGE_NULL;
  MPI_Status status;
  int rc = MPI_Improbe(MPI_ANY_SOURCE, kTag, comm_, &flag, &handle, &status);
  if (rc != MPI_SUCCESS) {
    throw rig::RunError(fmt::format("mpi_ps: MPI_Improbe failed: {}", mpi_error_text(rc)));
  }
  if (flag == 0) return false;
  int bytes = 0;
  MPI_Get_count(&status, MPI_BYTE, &bytes);
  std::vector<std::byte> buffer;
  try {
    buffer.resize(static_cast<std::size_t>(bytes));
  } catch (const std::bad_alloc&) {
    throw rig::OutOfMemoryError("the host",
                                fmt::format("a message of {} from {} did not fit.",
                                            rig::readable_bytes(static_cast<std::size_t>(bytes)),
                                            describe(status.MPI_SOURCE)));
  }
  rc = MPI_Mrecv(buffer.data(), bytes, MPI_BYTE, &handle, MPI_STATUS_IGNORE);
  if (rc != MPI_SUCCESS) {
    throw rig::RunError(fmt::format("mpi_ps: receiving from {} failed: {}",
                                    describe(status.MPI_SOURCE), mpi_error_text(rc)));
  }
  if (buffer.size() < sizeof(WireHeader)) {
    throw rig::RunError(fmt::format("mpi_ps: a {}-byte message from {} is not ours", bytes,
                                    describe(status.MPI_SOURCE)));
  }
  WireHeader h;  // after the payload (start_sends)
  std::memcpy(&h, buffer.data() + buffer.size() - sizeof h, sizeof h);
  buffer.resize(buffer.size() - sizeof h);
  rig::PsMessage m;
  m.kind = h.kind;
  m.peer = status.MPI_SOURCE;
  m.clock = h.clock;
  m.offset = h.offset;
  m.count = h.count;
  m.payload = std::move(buffer);
  {
    std::lock_guard lock(mutex_);
    inbox_.push_back(std::move(m));
  }
  arrived_.notify_all();
  return true;
}

}  // namespace rig_mpi
