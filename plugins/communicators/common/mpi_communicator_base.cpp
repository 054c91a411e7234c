#include "mpi_communicator_base.hpp"

#include <atomic>
#include <climits>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

#include "rig/error.hpp"

namespace rig_mpi {
namespace {

using rig::Tensor;

// Keeps the tensors alive until the collective has run. Destroying a request
// waits for its collective: the communication thread may still be using the
// buffers, and it never releases a tensor itself. A collective on a device
// buffer runs on a host copy (MPI works on host memory); wait() copies the
// result back into the device buffer.
class MpiRequest final : public rig::CommRequest {
 public:
  MpiRequest(std::shared_ptr<RequestState> state, Tensor buffer, Tensor input, Tensor device_result)
      : state_(std::move(state)),
        buffer_(std::move(buffer)),
        input_(std::move(input)),
        device_result_(std::move(device_result)) {}
  MpiRequest(const MpiRequest&) = delete;
  MpiRequest& operator=(const MpiRequest&) = delete;
  ~MpiRequest() override { block(); }

  void wait() override {
    if (block() == RequestState::failed) throw rig::RunError(state_->error);
    if (device_result_.defined()) {
      device_result_.copy_from(buffer_);
      device_result_ = Tensor();
    }
  }
  bool done() override {
    return state_->status.load(std::memory_order_acquire) != RequestState::pending;
  }
  rig::CommTiming timing() const override { return state_->timing; }

 private:
  int block() {
    // A short spin first: a small collective is often done by now, and a
    // futex wake-up costs more than it takes.
    for (int i = 0; i < 2000; ++i) {
      const int status = state_->status.load(std::memory_order_acquire);
      if (status != RequestState::pending) return status;
    }
    int status = state_->status.load(std::memory_order_acquire);
    while (status == RequestState::pending) {
      state_->status.wait(RequestState::pending, std::memory_order_acquire);
      status = state_->status.load(std::memory_order_acquire);
    }
    return status;
  }

  std::shared_ptr<RequestState> state_;
  Tensor buffer_;
  Tensor input_;
  Tensor device_result_;  // where wait() copies buffer_ for a device buffer
};

// A buffer MPI can read and write: the tensor itself on the CPU, else a host copy.
Tensor on_host(const Tensor& t) {
  return t.defined() && !t.device().is_cpu() ? t.to_host() : t;
}

// The device buffer a collective's result goes back to, or none on the CPU.
Tensor device_result(const Tensor& buffer) {
  return buffer.device().is_cpu() ? Tensor() : buffer;
}

void check_buffer(const char* op, const Tensor& t, const char* what) {
  if (!t.defined()) throw std::invalid_argument(fmt::format("mpi {}: {} is undefined", op, what));
  if (!t.is_contiguous()) {
    throw std::invalid_argument(
        fmt::format("mpi {}: {} {} is not contiguous", op, what, rig::to_string(t.shape())));
  }
}

std::atomic<bool> g_instance_alive{false};

}  // namespace

MpiCommunicatorBase::InstanceGuard::InstanceGuard() {
  if (g_instance_alive.exchange(true)) {
    throw rig::RunError(
        "mpi communicator: one already exists in this process; make one per process");
  }
}

MpiCommunicatorBase::InstanceGuard::~InstanceGuard() {
  g_instance_alive.store(false);
}

MpiCommunicatorBase::MpiCommunicatorBase(double timeout_s, double startup_timeout_s, int servers)
    : guard_(), thread_(timeout_s, startup_timeout_s, servers) {}

std::unique_ptr<rig::CommRequest> MpiCommunicatorBase::allreduce(Tensor buffer, rig::ReduceOp op) {
  check_buffer("allreduce", buffer, "the buffer");
  Tensor host = on_host(buffer);
  Collective c;
  c.kind = CollectiveKind::allreduce;
  c.dtype = host.dtype();
  c.reduce = op;
  c.buffer = host.raw_data();
  c.count = host.numel();
  return issue(std::move(c), std::move(host), {}, device_result(buffer));
}

std::unique_ptr<rig::CommRequest> MpiCommunicatorBase::broadcast(Tensor buffer, int root) {
  check_buffer("broadcast", buffer, "the buffer");
  if (root < 0 || root >= size()) {
    throw std::invalid_argument(
        fmt::format("mpi broadcast: root {} is not a rank (ranks are 0 to {})", root, size() - 1));
  }
  Tensor host = on_host(buffer);
  Collective c;
  c.kind = CollectiveKind::broadcast;
  c.dtype = host.dtype();
  c.root = root;
  c.buffer = host.raw_data();
  c.count = host.numel();
  return issue(std::move(c), std::move(host), {}, device_result(buffer));
}

std::unique_ptr<rig::CommRequest> MpiCommunicatorBase::allgather(Tensor input, Tensor output) {
  check_buffer("allgather", input, "the input");
  check_buffer("allgather", output, "the output");
  if (output.dtype() != input.dtype() || output.numel() != size() * input.numel()) {
    throw std::invalid_argument(
        fmt::format("mpi allgather: output {} {} must hold size() x input = {} x {} {} elements",
                    rig::dtype_name(output.dtype()), rig::to_string(output.shape()), size(),
                    input.numel(), rig::dtype_name(input.dtype())));
  }
  if (input.numel() > INT_MAX) {
    throw std::invalid_argument(
        fmt::format("mpi allgather: {} elements per rank is more than MPI's count limit of {}",
                    input.numel(), INT_MAX));
  }
  const std::byte* my_slot = output.raw_data() + rank() * input.nbytes();
  if (input.raw_data() != my_slot && input.nbytes() > 0 && input.shares_storage(output)) {
    throw std::invalid_argument(
        "mpi allgather: the input shares storage with the output but is not this rank's "
        "slot of it (output[rank x n, (rank + 1) x n))");
  }
  const bool in_place = input.raw_data() == my_slot;
  Tensor host_output = on_host(output);
  Tensor host_input = in_place ? Tensor() : on_host(input);
  Collective c;
  c.kind = CollectiveKind::allgather;
  c.dtype = input.dtype();
  c.buffer = host_output.raw_data();
  c.count = input.numel();
  if (!in_place) c.input = host_input.raw_data();
  return issue(std::move(c), std::move(host_output), std::move(host_input), device_result(output));
}

void MpiCommunicatorBase::barrier() {
  Collective c;
  c.kind = CollectiveKind::barrier;
  issue(std::move(c), {}, {})->wait();
}

void MpiCommunicatorBase::abort(const std::string& reason, int exit_code) {
  thread_.abort(reason, exit_code);
}

std::unique_ptr<rig::CommRequest> MpiCommunicatorBase::issue(Collective c, Tensor buffer,
                                                             Tensor input, Tensor device_result) {
  auto state = thread_.submit(std::move(c));
  return std::make_unique<MpiRequest>(std::move(state), std::move(buffer), std::move(input),
                                      std::move(device_result));
}

}  // namespace rig_mpi
