// Parameter-server training moves messages between workers, which compute
// gradients, and servers, which hold the parameters and run the optimizer.
// The engine runs the protocol (sharding, staleness, the servers' optimizer,
// checkpoints); a communicator plugin such as `mpi_ps` only carries its
// messages, through the transport below.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "rig/export.hpp"

namespace rig {

// Room a payload keeps after its bytes (its vector's capacity) for a
// transport that appends its header there: then nothing is moved or copied.
inline constexpr std::size_t kPsPayloadRoom = 64;

// One message. `kind` and the numbers mean what the engine's protocol says.
struct PsMessage {
  std::int32_t kind = 0;
  int peer = 0;  // send: the destination process; receive: the sender
  std::int64_t clock = 0;
  std::int64_t offset = 0;
  std::int64_t count = 0;
  std::vector<std::byte> payload;
};

// What the experiment asks of the parameter server (communicator_params).
struct PsSettings {
  // A worker more than this many steps ahead of the slowest one waits; 0 is
  // synchronous; negative is unbounded (MXNet's dist_async).
  std::int64_t max_staleness = 0;
  // A worker silent this long stops holding the others back (0: never).
  double straggler_timeout_s = 0.0;
  // A reply that takes longer ends the job, naming the silent process.
  double timeout_s = 600.0;
  double startup_timeout_s = 600.0;
  // MXNet's 2-bit gradient compression, worker to server; 0 is off.
  float two_bit_threshold = 0.0F;
};

class RIG_API ParameterServerTransport {
 public:
  virtual ~ParameterServerTransport() = default;
  virtual int workers() const = 0;
  virtual int servers() const = 0;
  // This process: workers are 0 .. workers()-1, servers workers() .. workers()+servers()-1.
  virtual int self() const = 0;
  bool is_server() const { return self() >= workers(); }
  // "server 1 (rank 5 on host b, pid 4242)", for messages.
  virtual std::string describe(int process) const = 0;
  virtual const PsSettings& settings() const = 0;
  // Queues `message` for message.peer and returns at once. Messages from one
  // process to another arrive in the order they were sent.
  virtual void send(PsMessage message) = 0;
  // The next message for this process from any sender, or nothing when none
  // arrived within `timeout`. Waits without spinning.
  virtual std::optional<PsMessage> receive(std::chrono::milliseconds timeout) = 0;
  // Returns once every queued message has left this process.
  virtual void flush() = 0;
};

}  // namespace rig
