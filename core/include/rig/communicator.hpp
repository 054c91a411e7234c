// Communicator plugin interface: the collectives data-parallel training needs.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "rig/context.hpp"
#include "rig/export.hpp"
#include "rig/parameter_server.hpp"
#include "rig/tensor.hpp"

namespace rig {

enum class ReduceOp { sum, average };

// When an operation really ran (on the communicator's own thread, say): the
// engine uses it to tell communication hidden behind backward from
// communication it waited for. `known` is false where a communicator cannot say.
struct CommTiming {
  std::chrono::steady_clock::time_point start;
  std::chrono::steady_clock::time_point end;
  bool known = false;
};

// An operation in flight. wait() returns when it is complete (or throws).
class RIG_API CommRequest {
 public:
  virtual ~CommRequest() = default;
  virtual void wait() = 0;
  virtual bool done() = 0;
  // Valid once wait() has returned.
  virtual CommTiming timing() const { return {}; }
};

// A request that completed when it was issued (single-process communicators).
class RIG_API CompletedRequest final : public CommRequest {
 public:
  void wait() override {}
  bool done() override { return true; }
};

// Constructed as Communicator(const YAML::Node& params, const CommunicatorContext& ctx).
// Collectives are asynchronous: they return a request; buffers must stay alive
// and untouched until it is done.
class RIG_API Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual int local_rank() const = 0;
  // In place over `buffer`.
  virtual std::unique_ptr<CommRequest> allreduce(Tensor buffer, ReduceOp op) = 0;
  virtual std::unique_ptr<CommRequest> broadcast(Tensor buffer, int root) = 0;
  // output holds size() x input.numel() elements, rank r's input at r x input.numel().
  virtual std::unique_ptr<CommRequest> allgather(Tensor input, Tensor output) = 0;
  virtual void barrier() = 0;
  // Ends every rank's job with `exit_code` (the launcher's exit status where
  // it passes it on); `reason` is shown to the user. Does not return.
  [[noreturn]] virtual void abort(const std::string& reason, int exit_code) = 0;
  // A parameter-server communicator's message transport, else nullptr. On a
  // worker, the collectives above span the workers only; a server process
  // serves parameters instead of training (rig/parameter_server.hpp).
  virtual ParameterServerTransport* parameter_server() { return nullptr; }
};

}  // namespace rig
