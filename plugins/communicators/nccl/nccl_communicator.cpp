// nccl: the communicator for device buffers. MPI starts the job (mpirun, as
// for the `mpi` communicator): it gives rank, size and local rank (which picks
// the GPU), carries rank 0's ncclUniqueId to the others, and keeps the rank
// census that names a rank that did not take part. The collectives run on a
// communication stream of their own, ordered with events: each waits for the
// kernels that produced its buffer (an event on the buffer's stream), and
// CommRequest::wait() makes the buffer's stream wait for the collective's end
// event, so the engine's later kernels follow it without the host blocking,
// and buckets are reduced while backward still runs. A monitor thread watches
// the collectives in order (their end events) and NCCL's async error: one not
// done within timeout_s (startup_timeout_s for the first), or an error, aborts
// the NCCL communicator and ends the job naming the operation and the rank.
// The communicator is non-blocking (ncclConfig_t.blocking = 0), so
// ncclCommAbort can end a collective that hangs. NCCL's own settings
// (NCCL_SOCKET_IFNAME, NCCL_DEBUG, ...) are read by NCCL from the environment
// (pass them with mpirun -x).
//
// RIG_NCCL_FAKE=1 swaps NCCL and the CUDA driver for the fakes in
// fake_nccl.hpp (tests without a GPU, with RIG_CUDA_EMULATOR=1).
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>

#include <fmt/format.h>
#include <mpi.h>

#include "collective.hpp"
#include "fake_nccl.hpp"
#include "nccl_api.hpp"
#include "rank_census.hpp"
#include "rig/error.hpp"
#include "rig/plugin.hpp"

namespace {

using rig::Tensor;
using rig_mpi::Collective;
using rig_mpi::CollectiveKind;
using namespace rig_nccl;
using Clock = std::chrono::steady_clock;

// A collective past its deadline, or NCCL failing, ends the job with this code
// (as the `mpi` communicator's).
constexpr int kFailureExitCode = 3;
constexpr double kLongestTimeoutS = 1e9;
constexpr auto kPoll = std::chrono::milliseconds(1);
// ncclCommAbort gets this long before the job is ended without it.
constexpr auto kAbortGrace = std::chrono::seconds(5);

void print_line(const std::string& line) {
  std::fputs((line + "\n").c_str(), stderr);
  std::fflush(stderr);
}

Clock::duration as_duration(double seconds) {
  return std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(std::min(seconds, kLongestTimeoutS)));
}

bool env_is(const char* name, const char* value) {
  const char* text = std::getenv(name);
  return text != nullptr && std::strcmp(text, value) == 0;
}

ncclDataType_t nccl_type(rig::DType dtype) {
  switch (dtype) {
    case rig::DType::f32:
      return ncclFloat32;
    case rig::DType::f16:
      return ncclFloat16;
    case rig::DType::bf16:
      return ncclBfloat16;
    case rig::DType::i32:
      return ncclInt32;
    case rig::DType::i64:
      return ncclInt64;
    case rig::DType::u8:
      return ncclUint8;
  }
  return ncclFloat32;
}

// The device stream a tensor's bytes belong to: the one the back end ran
// the kernels that wrote them on (as an integer; 0 on the CPU).
CUstream stream_of(const Tensor& t) {
  const auto& storage = t.impl()->storage;
  return reinterpret_cast<CUstream>(storage ? storage->stream() : 0);
}

void check_buffer(const char* op, const Tensor& t, const char* what) {
  if (!t.defined()) throw std::invalid_argument(fmt::format("nccl {}: {} is undefined", op, what));
  if (!t.is_contiguous()) {
    throw std::invalid_argument(
        fmt::format("nccl {}: {} {} is not contiguous", op, what, rig::to_string(t.shape())));
  }
}

// The tables this process uses: the fakes under RIG_NCCL_FAKE=1 (only where
// device memory is host memory), else the real libraries.
struct Tables {
  const NcclApi* nccl;
  const DriverApi* cu;
  bool fake;
};

Tables choose_tables() {
  const char* fake = std::getenv("RIG_NCCL_FAKE");
  if (fake != nullptr && *fake != '\0' && std::strcmp(fake, "0") != 0) {
    if (std::strcmp(fake, "1") != 0) {
      throw rig::UserError(
          fmt::format("nccl communicator: RIG_NCCL_FAKE='{}': set it to 1 (the fake NCCL, for "
                      "tests) or 0",
                      fake));
    }
    if (!env_is("RIG_CUDA_EMULATOR", "1")) {
      throw rig::UserError(
          "nccl communicator: RIG_NCCL_FAKE=1 (the test fake of NCCL) works only with "
          "RIG_CUDA_EMULATOR=1, where device memory is host memory; unset RIG_NCCL_FAKE to use "
          "the real NCCL");
    }
    return {&fake_nccl(), &fake_driver(), true};
  }
  if (env_is("RIG_CUDA_EMULATOR", "1")) {
    throw rig::UserError(
        "nccl communicator: RIG_CUDA_EMULATOR=1 runs device: cuda on the CPU, where the real "
        "NCCL cannot reach its buffers; set RIG_NCCL_FAKE=1 (the test fake) or use "
        "--communicator=mpi");
  }
  const NcclApi& nccl = real_nccl();
  return {&nccl, &real_driver(), false};
}

std::atomic<bool> g_instance_alive{false};

// One collective in flight: what it is, and its events on the communication
// stream. Shared by its request and the monitor; holds no tensor, so the
// monitor thread never releases one.
struct Op {
  Op(const DriverApi& driver, Collective what) : cu(driver), c(std::move(what)) {
    cu.event_create(&ready, 0);
    cu.event_create(&start, 0);
    cu.event_create(&end, 0);
  }
  Op(const Op&) = delete;
  Op& operator=(const Op&) = delete;
  ~Op() {
    cu.event_destroy(ready);
    cu.event_destroy(start);
    cu.event_destroy(end);
  }
  const DriverApi& cu;
  Collective c;             // kind, seq, dtype, count, root: for messages (no pointers used)
  CUevent ready = nullptr;  // on the buffer's stream: its producers are done
  CUevent start = nullptr;
  CUevent end = nullptr;
  Clock::time_point issued = Clock::now();
};

class Nccl;

class NcclRequest final : public rig::CommRequest {
 public:
  NcclRequest(Nccl& owner, std::shared_ptr<Op> op, Tensor buffer, Tensor input, Tensor host_result)
      : owner_(owner),
        op_(std::move(op)),
        buffer_(std::move(buffer)),
        input_(std::move(input)),
        host_result_(std::move(host_result)) {}
  NcclRequest(const NcclRequest&) = delete;
  NcclRequest& operator=(const NcclRequest&) = delete;
  // Orders the buffers' later use after the collective (their memory may be
  // reused on their stream once released), blocking only for host buffers.
  ~NcclRequest() override {
    try {
      wait();
    } catch (...) {  // the monitor ends the job on a failed collective
    }
  }

  void wait() override;
  bool done() override;
  rig::CommTiming timing() const override;

 private:
  Nccl& owner_;
  std::shared_ptr<Op> op_;
  Tensor buffer_;       // the device buffer NCCL reads and writes
  Tensor input_;        // allgather's separate input (device), kept alive
  Tensor host_result_;  // a host buffer staged through buffer_: the result goes back here
  bool waited_ = false;
};

class Nccl final : public rig::Communicator {
 public:
  Nccl(const YAML::Node& params, const rig::CommunicatorContext& /*ctx*/)
      : guard_(),
        tables_(choose_tables()),
        nccl_(*tables_.nccl),
        cu_(*tables_.cu),
        timeout_s_(params["timeout_s"].as<double>()),
        startup_timeout_s_(std::max(timeout_s_, params["startup_timeout_s"].as<double>())),
        timeout_(as_duration(timeout_s_)),
        startup_timeout_(as_duration(startup_timeout_s_)) {
    start_mpi();
    try {
      start_nccl();
    } catch (const std::exception& e) {
      // The other ranks would wait for this one: end the job.
      print_line(census_->ending_line("nccl", rank_, e.what()));
      end_job(kFailureExitCode);
    }
    monitor_ = std::thread([this] { monitor(); });
  }

  Nccl(const Nccl&) = delete;
  Nccl& operator=(const Nccl&) = delete;

  ~Nccl() override {
    cu_.stream_synchronize(stream_);
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    changed_.notify_all();
    monitor_.join();
    ncclResult_t rc = nccl_.comm_destroy(comm_);
    settle(rc, nullptr, Clock::now() + timeout_);
    cu_.event_destroy(anchor_);
    cu_.stream_destroy(stream_);
    cu_.primary_ctx_release(device_);
    shut_down_mpi();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_rank() const override { return local_rank_; }

  std::unique_ptr<rig::CommRequest> allreduce(Tensor buffer, rig::ReduceOp op) override {
    check_buffer("allreduce", buffer, "the buffer");
    Collective c;
    c.kind = CollectiveKind::allreduce;
    c.dtype = buffer.dtype();
    c.reduce = op;
    c.count = buffer.numel();
    Tensor host_result = buffer.device().is_cpu() ? buffer : Tensor();
    Tensor device = on_device(buffer);
    const ncclRedOp_t nccl_op = op == rig::ReduceOp::sum ? ncclSum : ncclAvg;
    return issue(std::move(c), device, {}, std::move(host_result), [&, this](CUstream stream) {
      void* data = device.raw_data();
      return nccl_.all_reduce(data, data, static_cast<std::size_t>(device.numel()),
                              nccl_type(device.dtype()), nccl_op, comm_, stream);
    });
  }

  std::unique_ptr<rig::CommRequest> broadcast(Tensor buffer, int root) override {
    check_buffer("broadcast", buffer, "the buffer");
    if (root < 0 || root >= size()) {
      throw std::invalid_argument(fmt::format(
          "nccl broadcast: root {} is not a rank (ranks are 0 to {})", root, size() - 1));
    }
    Collective c;
    c.kind = CollectiveKind::broadcast;
    c.dtype = buffer.dtype();
    c.root = root;
    c.count = buffer.numel();
    Tensor host_result = buffer.device().is_cpu() ? buffer : Tensor();
    Tensor device = on_device(buffer);
    return issue(std::move(c), device, {}, std::move(host_result), [&, this](CUstream stream) {
      void* data = device.raw_data();
      return nccl_.broadcast(data, data, static_cast<std::size_t>(device.numel()),
                             nccl_type(device.dtype()), root, comm_, stream);
    });
  }

  std::unique_ptr<rig::CommRequest> allgather(Tensor input, Tensor output) override {
    check_buffer("allgather", input, "the input");
    check_buffer("allgather", output, "the output");
    if (output.dtype() != input.dtype() || output.numel() != size() * input.numel()) {
      throw std::invalid_argument(
          fmt::format("nccl allgather: output {} {} must hold size() x input = {} x {} {} elements",
                      rig::dtype_name(output.dtype()), rig::to_string(output.shape()), size(),
                      input.numel(), rig::dtype_name(input.dtype())));
    }
    const bool same_device = input.device() == output.device();
    const std::byte* my_slot = output.raw_data() + rank() * input.nbytes();
    if (input.raw_data() != my_slot && input.nbytes() > 0 && input.shares_storage(output)) {
      throw std::invalid_argument(
          "nccl allgather: the input shares storage with the output but is not this rank's "
          "slot of it (output[rank x n, (rank + 1) x n))");
    }
    const bool in_place = same_device && input.raw_data() == my_slot;
    Collective c;
    c.kind = CollectiveKind::allgather;
    c.dtype = input.dtype();
    c.count = input.numel();
    Tensor host_result = output.device().is_cpu() ? output : Tensor();
    Tensor device_output = on_device(output);
    Tensor device_input;
    if (!in_place)
      device_input = input.device() == device_tensor_ ? input : input.to(device_tensor_);
    return issue(std::move(c), device_output, device_input, std::move(host_result),
                 [&, this](CUstream stream) {
                   const void* send = in_place ? device_output.raw_data() + rank() * input.nbytes()
                                               : static_cast<const void*>(device_input.raw_data());
                   return nccl_.all_gather(send, device_output.raw_data(),
                                           static_cast<std::size_t>(input.numel()),
                                           nccl_type(input.dtype()), comm_, stream);
                 });
  }

  void barrier() override {
    Tensor one = Tensor::zeros({1}, rig::DType::i32);
    allreduce(one, rig::ReduceOp::sum)->wait();
  }

  [[noreturn]] void abort(const std::string& reason, int exit_code) override {
    print_line(census_->ending_line("nccl", rank_, reason));
    end_job(exit_code);
  }

  // For the requests.
  const DriverApi& cu() const { return cu_; }
  void make_current() const { cu_.ctx_set_current(context_); }

  // Blocks until `op` has finished on the device (host buffers only).
  void block(const Op& op) const {
    make_current();
    while (cu_.event_query(op.end) == kCudaErrorNotReady) std::this_thread::sleep_for(kPoll / 4);
  }

  // When `op` ran, from its events (timing enabled): the start relative to
  // the anchor event taken at start-up, the length from the op's own pair.
  rig::CommTiming timing(const Op& op) const {
    make_current();
    if (cu_.event_synchronize(op.end) != kCudaSuccess) return {};
    float since_anchor_ms = 0;
    float length_ms = 0;
    if (cu_.event_elapsed_time(&since_anchor_ms, anchor_, op.start) != kCudaSuccess ||
        cu_.event_elapsed_time(&length_ms, op.start, op.end) != kCudaSuccess) {
      return {};
    }
    const auto start =
        anchor_host_ +
        std::chrono::duration_cast<Clock::duration>(
            std::chrono::duration<double, std::milli>(std::max(0.0f, since_anchor_ms)));
    const auto end =
        start + std::chrono::duration_cast<Clock::duration>(
                    std::chrono::duration<double, std::milli>(std::max(0.0f, length_ms)));
    return {start, end, true};
  }

  std::string failure() const {
    std::lock_guard lock(mutex_);
    return failure_;
  }

 private:
  struct InstanceGuard {
    InstanceGuard() {
      if (g_instance_alive.exchange(true)) {
        throw rig::RunError(
            "nccl communicator: one already exists in this process; make one per process");
      }
    }
    InstanceGuard(const InstanceGuard&) = delete;
    InstanceGuard& operator=(const InstanceGuard&) = delete;
    ~InstanceGuard() { g_instance_alive.store(false); }
  };

  void start_mpi() {
    int initialized = 0;
    int finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (finalized != 0) {
      throw rig::RunError(
          "nccl communicator: MPI was already finalized in this process and cannot start again: "
          "make one communicator per process");
    }
    if (initialized == 0) {
      // MULTIPLE: the fake's stream thread runs MPI collectives, and the
      // monitor may call MPI_Abort, while this thread uses MPI.
      if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &thread_level_) != MPI_SUCCESS) {
        throw rig::RunError("nccl communicator: MPI_Init_thread failed");
      }
      owns_mpi_ = true;
    } else {
      MPI_Query_thread(&thread_level_);
    }
    if (tables_.fake && thread_level_ != MPI_THREAD_MULTIPLE) {
      throw rig::RunError(
          "nccl communicator: the fake NCCL needs MPI_THREAD_MULTIPLE, which this MPI does not "
          "provide");
    }
    MPI_Comm_dup(MPI_COMM_WORLD, &boot_);
    MPI_Comm_set_errhandler(boot_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(boot_, &rank_);
    MPI_Comm_size(boot_, &size_);
    MPI_Comm_split_type(boot_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local_);
    MPI_Comm_rank(local_, &local_rank_);
    census_ = std::make_unique<rig_mpi::RankCensus>(boot_, local_);
  }

  void start_nccl() {
    // One process per GPU: the local rank picks it (as the engine's device).
    const int ordinal = tables_.fake ? 0 : local_rank_;
    check_cu(cu_.init(0), "cuInit");
    int count = 0;
    check_cu(cu_.device_get_count(&count), "cuDeviceGetCount");
    if (ordinal >= count) {
      const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
      throw rig::UserError(fmt::format(
          "this process has local rank {} but only {} GPU(s) are visible{}: one process per GPU",
          ordinal, count, visible ? fmt::format(" (CUDA_VISIBLE_DEVICES='{}')", visible) : ""));
    }
    check_cu(cu_.device_get(&device_, ordinal), "cuDeviceGet");
    check_cu(cu_.primary_ctx_retain(&context_, device_), "cuDevicePrimaryCtxRetain");
    make_current();
    device_ = ordinal;
    device_tensor_ = rig::Device::cuda(ordinal);
    check_cu(cu_.stream_create(&stream_, kStreamNonBlocking), "cuStreamCreate");
    check_cu(cu_.event_create(&anchor_, 0), "cuEventCreate");

    ncclUniqueId id{};
    if (rank_ == 0) check_nccl(nccl_.get_unique_id(&id), "ncclGetUniqueId");
    if (MPI_Bcast(id.internal, static_cast<int>(kUniqueIdBytes), MPI_BYTE, 0, boot_) !=
        MPI_SUCCESS) {
      throw rig::RunError("broadcasting the NCCL unique id over MPI failed");
    }
    ncclConfig_t config;
    config.blocking = 0;  // non-blocking: ncclCommAbort can end a hung collective
    const ncclResult_t rc = nccl_.comm_init_rank_config(&comm_, size_, id, rank_, &config);
    settle(rc, "ncclCommInitRankConfig", Clock::now() + startup_timeout_);

    // The anchor that maps the stream's events onto the host's clock.
    check_cu(cu_.event_record(anchor_, stream_), "cuEventRecord");
    check_cu(cu_.event_synchronize(anchor_), "cuEventSynchronize");
    anchor_host_ = Clock::now();
  }

  void check_cu(CUresult rc, const char* call) const {
    if (rc == kCudaSuccess) return;
    const char* text = nullptr;
    cu_.get_error_string(rc, &text);
    throw rig::RunError(
        fmt::format("{} failed: {} (CUDA error {})", call, text != nullptr ? text : "?", rc));
  }

  void check_nccl(ncclResult_t rc, const char* call) const {
    if (rc != ncclSuccess) {
      throw rig::RunError(fmt::format("{} failed: {}", call, nccl_.get_error_string(rc)));
    }
  }

  // A non-blocking call's result: ncclInProgress is polled until done, up to
  // `deadline`. `call` null: failures are ignored (shutting down).
  void settle(ncclResult_t rc, const char* call, Clock::time_point deadline) const {
    while (rc == ncclInProgress) {
      if (Clock::now() >= deadline) {
        if (call == nullptr) return;
        throw rig::RunError(fmt::format("{} did not finish in time", call));
      }
      std::this_thread::sleep_for(kPoll);
      nccl_.comm_get_async_error(comm_, &rc);
    }
    if (call != nullptr) check_nccl(rc, call);
  }

  // A device copy of a host buffer (staged through the device), or the buffer.
  Tensor on_device(const Tensor& t) const { return t.device().is_cpu() ? t.to(device_tensor_) : t; }

  template <class Call>
  std::unique_ptr<rig::CommRequest> issue(Collective c, Tensor device, Tensor input,
                                          Tensor host_result, Call&& call) {
    std::lock_guard issue_lock(issue_mutex_);
    make_current();
    {
      std::lock_guard lock(mutex_);
      if (!failure_.empty()) {
        throw rig::RunError(fmt::format("nccl {}: not run: an earlier collective failed ({})",
                                        c.describe(), failure_));
      }
    }
    c.seq = ++issued_;
    auto op = std::make_shared<Op>(cu_, c);
    // After the kernels that wrote the buffers (their stream), on ours.
    const auto producer = stream_of(device);
    check_cu(cu_.event_record(op->ready, producer), "cuEventRecord");
    check_cu(cu_.stream_wait_event(stream_, op->ready, 0), "cuStreamWaitEvent");
    if (input.defined() && stream_of(input) != stream_of(device)) {
      CUevent ready = nullptr;
      check_cu(cu_.event_create(&ready, 0), "cuEventCreate");
      cu_.event_record(ready, stream_of(input));
      cu_.stream_wait_event(stream_, ready, 0);
      cu_.event_destroy(ready);
    }
    check_cu(cu_.event_record(op->start, stream_), "cuEventRecord");
    ncclResult_t rc = call(stream_);
    settle(rc, "nccl", Clock::now() + (c.seq == 1 ? startup_timeout_ : timeout_));
    check_cu(cu_.event_record(op->end, stream_), "cuEventRecord");
    census_->announce(c.seq);
    op->issued = Clock::now();
    {
      std::lock_guard lock(mutex_);
      in_flight_.push_back(op);
    }
    changed_.notify_all();
    return std::make_unique<NcclRequest>(*this, std::move(op), std::move(device), std::move(input),
                                         std::move(host_result));
  }

  // Watches the collectives in issue order and NCCL's async error.
  void monitor() {
    make_current();
    Clock::time_point previous_done = Clock::now();
    std::unique_lock lock(mutex_);
    while (true) {
      if (in_flight_.empty()) {
        if (stopping_) return;
        changed_.wait_for(lock, std::chrono::milliseconds(50));
      } else {
        changed_.wait_for(lock, kPoll);
      }
      ncclResult_t error = ncclSuccess;
      nccl_.comm_get_async_error(comm_, &error);
      if (error != ncclSuccess && error != ncclInProgress) {
        // Name the oldest collective that has not finished: one that finished
        // since the last poll is not the one that failed.
        while (!in_flight_.empty() &&
               cu_.event_query(in_flight_.front()->end) != kCudaErrorNotReady) {
          in_flight_.pop_front();
        }
        const std::string what = in_flight_.empty() ? std::string("the NCCL communicator")
                                                    : in_flight_.front()->c.describe();
        failure_ = fmt::format("{}: {}", what, nccl_.get_error_string(error));
        lock.unlock();
        print_line(fmt::format("rig: nccl: {}: {} failed: NCCL error: {}; {}; ending the job",
                               census_->describe(rank_), what, nccl_.get_error_string(error),
                               census_->absent_ranks(issued_)));
        end_job(kFailureExitCode);
      }
      while (!in_flight_.empty()) {
        const auto& op = *in_flight_.front();
        if (cu_.event_query(op.end) != kCudaErrorNotReady) {
          in_flight_.pop_front();
          previous_done = Clock::now();
          continue;
        }
        // Its time starts when this rank issued it and the one before it was done.
        const auto begin = std::max(op.issued, previous_done);
        const bool first = op.c.seq == 1;
        const auto now = Clock::now();
        if (now - begin > (first ? startup_timeout_ : timeout_)) {
          const Collective c = op.c;
          lock.unlock();
          timed_out(c, now - begin, first);
        }
        break;
      }
    }
  }

  [[noreturn]] void timed_out(const Collective& c, Clock::duration waited, bool first) {
    print_line(fmt::format(
        "rig: nccl: {}: {} did not finish within {} = {} (waited {:.1f} s); {}; ending the job",
        census_->describe(rank_), c.describe(), first ? "startup_timeout_s" : "timeout_s",
        first ? startup_timeout_s_ : timeout_s_, std::chrono::duration<double>(waited).count(),
        census_->absent_ranks(c.seq)));
    end_job(kFailureExitCode);
  }

  // ncclCommAbort (given a few seconds), then MPI_Abort: every rank ends.
  [[noreturn]] void end_job(int exit_code) {
    if (comm_ != nullptr) {
      auto aborted = std::make_shared<std::atomic<bool>>(false);
      std::thread([nccl = &nccl_, comm = comm_, aborted] {
        nccl->comm_abort(comm);
        aborted->store(true);
      }).detach();
      const auto until = Clock::now() + kAbortGrace;
      while (!aborted->load() && Clock::now() < until) std::this_thread::sleep_for(kPoll);
    }
    if (thread_level_ == MPI_THREAD_MULTIPLE) MPI_Abort(boot_, exit_code);
    std::_Exit(exit_code);
  }

  void shut_down_mpi() {
    if (size_ > 1) {
      // Every rank reaches the end before MPI_Finalize (which has no deadline).
      MPI_Request request = MPI_REQUEST_NULL;
      MPI_Ibarrier(boot_, &request);
      const auto deadline = Clock::now() + timeout_;
      int arrived = 0;
      while (MPI_Test(&request, &arrived, MPI_STATUS_IGNORE) == MPI_SUCCESS && arrived == 0) {
        if (Clock::now() >= deadline) {
          print_line(fmt::format(
              "rig: nccl: {}: the ranks did not meet at shutdown within timeout_s = {}; {}; "
              "ending the job",
              census_->describe(rank_), timeout_s_, census_->absent_ranks(issued_ + 1)));
          comm_ = nullptr;
          end_job(kFailureExitCode);
        }
        std::this_thread::sleep_for(kPoll);
      }
    }
    census_->release();
    MPI_Comm_free(&local_);
    MPI_Comm_free(&boot_);
    if (owns_mpi_) MPI_Finalize();
  }

  InstanceGuard guard_;
  Tables tables_;
  const NcclApi& nccl_;
  const DriverApi& cu_;
  const double timeout_s_;
  const double startup_timeout_s_;
  const Clock::duration timeout_;
  const Clock::duration startup_timeout_;

  int thread_level_ = MPI_THREAD_SINGLE;
  bool owns_mpi_ = false;
  MPI_Comm boot_ = MPI_COMM_NULL;
  MPI_Comm local_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  int local_rank_ = 0;
  std::unique_ptr<rig_mpi::RankCensus> census_;

  CUdevice device_ = 0;
  rig::Device device_tensor_ = rig::Device::cuda(0);
  CUcontext context_ = nullptr;
  CUstream stream_ = nullptr;
  CUevent anchor_ = nullptr;
  Clock::time_point anchor_host_;
  ncclComm_t comm_ = nullptr;

  std::mutex issue_mutex_;  // one issuer at a time: the same order on every rank
  std::atomic<std::uint64_t> issued_{0};
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::shared_ptr<Op>> in_flight_;
  std::string failure_;
  bool stopping_ = false;
  std::thread monitor_;
};

void NcclRequest::wait() {
  if (waited_) return;
  waited_ = true;
  owner_.make_current();
  const DriverApi& cu = owner_.cu();
  if (host_result_.defined()) {
    owner_.block(*op_);
    // The staging buffer's stream (its copy back) after the collective.
    cu.stream_wait_event(stream_of(buffer_), op_->end, 0);
    host_result_.copy_from(buffer_);
  } else {
    // The engine's later kernels on these buffers' stream follow the collective.
    cu.stream_wait_event(stream_of(buffer_), op_->end, 0);
    if (input_.defined() && stream_of(input_) != stream_of(buffer_)) {
      cu.stream_wait_event(stream_of(input_), op_->end, 0);
    }
  }
  const std::string failure = owner_.failure();
  if (!failure.empty()) throw rig::RunError(fmt::format("nccl: {}", failure));
}

bool NcclRequest::done() {
  owner_.make_current();
  return owner_.cu().event_query(op_->end) != kCudaErrorNotReady;
}

rig::CommTiming NcclRequest::timing() const {
  return owner_.timing(*op_);
}

}  // namespace

RIG_PLUGIN(communicator, "nccl", "0.1.0",
           "NCCL collectives on device buffers (id bootstrapped over MPI), on a stream of their "
           "own, with a timeout",
           Nccl)
