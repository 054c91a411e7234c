#include "fake_nccl.hpp"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <mpi.h>

#include "collective.hpp"
#include "half_sum_op.hpp"

namespace rig_nccl {
namespace {

using Clock = std::chrono::steady_clock;

std::atomic<long> g_collectives_run{0};

int env_int(const char* name, int fallback) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return fallback;
  return std::atoi(text);
}

// --- events and streams ----------------------------------------------------

// An event's records: one issued per cuEventRecord, reached when its stream
// gets there. A wait captures the records issued so far (as CUDA's does), so
// re-recording the event later does not move it. Shared with queued tasks, so
// destroying the handle while they are queued is safe (as in CUDA).
struct EventState {
  std::mutex mutex;
  std::condition_variable changed;
  std::uint64_t issued = 0;
  std::uint64_t reached = 0;
  Clock::time_point when = Clock::now();

  bool complete() {
    std::lock_guard lock(mutex);
    return reached >= issued;
  }
  void wait_for(std::uint64_t target) {
    std::unique_lock lock(mutex);
    changed.wait(lock, [&] { return reached >= target; });
  }
  std::uint64_t target() {
    std::lock_guard lock(mutex);
    return issued;
  }
  void reach() {
    {
      std::lock_guard lock(mutex);
      ++reached;
      when = Clock::now();
    }
    changed.notify_all();
  }
};

struct FakeEvent {
  std::shared_ptr<EventState> state = std::make_shared<EventState>();
};

class FakeStream {
 public:
  FakeStream() : thread_([this] { loop(); }) {}
  FakeStream(const FakeStream&) = delete;
  FakeStream& operator=(const FakeStream&) = delete;
  ~FakeStream() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    changed_.notify_all();
    thread_.join();
  }

  void push(std::function<void()> task) {
    {
      std::lock_guard lock(mutex_);
      queue_.push_back(std::move(task));
    }
    changed_.notify_all();
  }

  void synchronize() {
    std::unique_lock lock(mutex_);
    idle_.wait(lock, [this] { return queue_.empty() && !busy_; });
  }

 private:
  void loop() {
    std::unique_lock lock(mutex_);
    while (true) {
      changed_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping
      auto task = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
      lock.unlock();
      task();
      lock.lock();
      busy_ = false;
      if (queue_.empty()) idle_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable changed_;
  std::condition_variable idle_;
  std::deque<std::function<void()>> queue_;
  bool busy_ = false;
  bool stop_ = false;
  std::thread thread_;  // last
};

std::mutex g_streams_mutex;
std::set<void*> g_streams;  // the fake streams alive

FakeStream* fake_stream(CUstream stream) {
  std::lock_guard lock(g_streams_mutex);
  return g_streams.count(stream) != 0 ? static_cast<FakeStream*>(stream) : nullptr;
}

CUresult cu_init(unsigned) {
  return kCudaSuccess;
}
CUresult cu_device_get_count(int* count) {
  *count = 1;
  return kCudaSuccess;
}
CUresult cu_device_get(CUdevice* device, int ordinal) {
  *device = ordinal;
  return kCudaSuccess;
}
CUresult cu_primary_ctx_retain(CUcontext* ctx, CUdevice) {
  static int context = 0;
  *ctx = &context;
  return kCudaSuccess;
}
CUresult cu_primary_ctx_release(CUdevice) {
  return kCudaSuccess;
}
CUresult cu_ctx_set_current(CUcontext) {
  return kCudaSuccess;
}
CUresult cu_stream_create(CUstream* stream, unsigned) {
  auto* s = new FakeStream();
  std::lock_guard lock(g_streams_mutex);
  g_streams.insert(s);
  *stream = s;
  return kCudaSuccess;
}
CUresult cu_stream_destroy(CUstream stream) {
  FakeStream* s = fake_stream(stream);
  if (s == nullptr) return 400;  // CUDA_ERROR_INVALID_HANDLE
  s->synchronize();
  {
    std::lock_guard lock(g_streams_mutex);
    g_streams.erase(stream);
  }
  delete s;
  return kCudaSuccess;
}
CUresult cu_stream_synchronize(CUstream stream) {
  if (FakeStream* s = fake_stream(stream)) s->synchronize();
  return kCudaSuccess;
}
CUresult cu_stream_wait_event(CUstream stream, CUevent event, unsigned) {
  auto state = static_cast<FakeEvent*>(event)->state;
  const std::uint64_t target = state->target();
  if (FakeStream* s = fake_stream(stream)) {
    s->push([state, target] { state->wait_for(target); });
  } else {
    state->wait_for(target);  // a synchronous stream: the caller is the stream
  }
  return kCudaSuccess;
}
CUresult cu_event_create(CUevent* event, unsigned) {
  *event = new FakeEvent();
  return kCudaSuccess;
}
CUresult cu_event_destroy(CUevent event) {
  delete static_cast<FakeEvent*>(event);  // queued tasks keep its state
  return kCudaSuccess;
}
CUresult cu_event_record(CUevent event, CUstream stream) {
  auto state = static_cast<FakeEvent*>(event)->state;
  {
    std::lock_guard lock(state->mutex);
    ++state->issued;
  }
  if (FakeStream* s = fake_stream(stream)) {
    s->push([state] { state->reach(); });
  } else {
    state->reach();
  }
  return kCudaSuccess;
}
CUresult cu_event_query(CUevent event) {
  return static_cast<FakeEvent*>(event)->state->complete() ? kCudaSuccess : kCudaErrorNotReady;
}
CUresult cu_event_synchronize(CUevent event) {
  auto& state = *static_cast<FakeEvent*>(event)->state;
  state.wait_for(state.target());
  return kCudaSuccess;
}
CUresult cu_event_elapsed_time(float* ms, CUevent start, CUevent end) {
  auto* a = static_cast<FakeEvent*>(start)->state.get();
  auto* b = static_cast<FakeEvent*>(end)->state.get();
  if (!a->complete() || !b->complete()) return kCudaErrorNotReady;
  std::lock_guard la(a->mutex);
  std::lock_guard lb(b->mutex);
  *ms = std::chrono::duration<float, std::milli>(b->when - a->when).count();
  return kCudaSuccess;
}
CUresult cu_get_error_string(CUresult error, const char** text) {
  *text = error == kCudaSuccess         ? "no error"
          : error == kCudaErrorNotReady ? "device not ready"
                                        : "fake CUDA error";
  return kCudaSuccess;
}

// --- NCCL --------------------------------------------------------------------

constexpr char kIdMagic[] = "rig-fake-nccl-id";

struct FakeComm {
  MPI_Comm comm = MPI_COMM_NULL;
  rig_mpi::MpiResources mpi;
  int rank = 0;
  int size = 1;
  bool blocking = true;
  std::atomic<int> async_error{ncclSuccess};
  std::atomic<bool> aborted{false};
  int issued = 0;   // collectives issued (on the issuing thread)
  int hang_at = 0;  // 0: never
  int fail_at = 0;
};

FakeComm* as_fake(ncclComm_t comm) {
  return reinterpret_cast<FakeComm*>(comm);
}

ncclResult_t nccl_get_version(int* version) {
  *version = 22000;  // reports itself as NCCL 2.20.0
  return ncclSuccess;
}

ncclResult_t nccl_get_unique_id(ncclUniqueId* id) {
  std::memset(id->internal, 0, kUniqueIdBytes);
  std::memcpy(id->internal, kIdMagic, sizeof(kIdMagic));
  std::random_device device;
  std::uint64_t nonce[3] = {(std::uint64_t{device()} << 32) ^ device(),
                            static_cast<std::uint64_t>(::getpid()),
                            static_cast<std::uint64_t>(Clock::now().time_since_epoch().count())};
  std::memcpy(id->internal + 32, nonce, sizeof(nonce));
  return ncclSuccess;
}

ncclResult_t nccl_comm_init_rank_config(ncclComm_t* out, int nranks, ncclUniqueId id, int rank,
                                        ncclConfig_t* config) {
  if (std::memcmp(id.internal, kIdMagic, sizeof(kIdMagic)) != 0) return ncclInvalidArgument;
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized == 0) return ncclInvalidUsage;  // the fake's transport is MPI
  auto comm = std::make_unique<FakeComm>();
  if (MPI_Comm_dup(MPI_COMM_WORLD, &comm->comm) != MPI_SUCCESS) return ncclSystemError;
  MPI_Comm_set_errhandler(comm->comm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(comm->comm, &comm->rank);
  MPI_Comm_size(comm->comm, &comm->size);
  comm->mpi.comm = comm->comm;
  comm->mpi.size = comm->size;
  // Every rank must have been given rank 0's id.
  std::vector<char> ids(static_cast<std::size_t>(comm->size) * kUniqueIdBytes);
  MPI_Allgather(id.internal, kUniqueIdBytes, MPI_BYTE, ids.data(), kUniqueIdBytes, MPI_BYTE,
                comm->comm);
  bool same = true;
  for (int r = 0; r < comm->size; ++r) {
    same = same && std::memcmp(ids.data() + static_cast<std::size_t>(r) * kUniqueIdBytes,
                               id.internal, kUniqueIdBytes) == 0;
  }
  if (!same || nranks != comm->size || rank != comm->rank) {
    MPI_Comm_free(&comm->comm);
    return ncclInvalidUsage;
  }
  comm->mpi.f16_sum = rig_mpi::make_f16_sum_op();
  comm->mpi.bf16_sum = rig_mpi::make_bf16_sum_op();
  comm->blocking = config == nullptr || config->blocking != 0;
  if (env_int("RIG_NCCL_FAKE_HANG_RANK", -1) == comm->rank) {
    comm->hang_at = env_int("RIG_NCCL_FAKE_HANG_AT", 1);
  }
  if (env_int("RIG_NCCL_FAKE_FAIL_RANK", -1) == comm->rank) {
    comm->fail_at = env_int("RIG_NCCL_FAKE_FAIL_AT", 1);
  }
  *out = reinterpret_cast<ncclComm_t>(comm.release());
  if (!as_fake(*out)->blocking) {
    as_fake(*out)->async_error.store(ncclInProgress);
    return ncclInProgress;
  }
  return ncclSuccess;
}

bool to_dtype(ncclDataType_t type, rig::DType& dtype) {
  switch (type) {
    case ncclFloat32:
      dtype = rig::DType::f32;
      return true;
    case ncclFloat16:
      dtype = rig::DType::f16;
      return true;
    case ncclBfloat16:
      dtype = rig::DType::bf16;
      return true;
    case ncclInt32:
      dtype = rig::DType::i32;
      return true;
    case ncclInt64:
      dtype = rig::DType::i64;
      return true;
    case ncclUint8:
      dtype = rig::DType::u8;
      return true;
    default:
      return false;
  }
}

// Queues `op` on `stream` (a fake stream, as NCCL would launch on a real one).
ncclResult_t enqueue(FakeComm* comm, rig_mpi::Collective op, cudaStream_t stream) {
  if (comm->aborted.load()) return ncclInvalidUsage;
  const int error = comm->async_error.load();
  if (error != ncclSuccess && error != ncclInProgress) return static_cast<ncclResult_t>(error);
  FakeStream* s = fake_stream(stream);
  if (s == nullptr) return ncclInvalidArgument;  // the plugin always uses its own stream
  const int n = ++comm->issued;
  if (n == comm->hang_at) {
    while (true) std::this_thread::sleep_for(std::chrono::seconds(1));  // never joins
  }
  const bool fail = n == comm->fail_at;
  s->push([comm, op, fail] {
    if (comm->aborted.load()) return;
    const int error = comm->async_error.load();
    if (error != ncclSuccess && error != ncclInProgress) return;
    if (fail) {
      comm->async_error.store(ncclRemoteError);
      while (!comm->aborted.load()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      return;
    }
    if (rig_mpi::run_blocking(op, comm->mpi) != MPI_SUCCESS) {
      comm->async_error.store(ncclSystemError);
      return;
    }
    g_collectives_run.fetch_add(1);
  });
  return ncclSuccess;
}

ncclResult_t nccl_all_reduce(const void* send, void* recv, std::size_t count, ncclDataType_t type,
                             ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  rig_mpi::Collective c;
  c.kind = rig_mpi::CollectiveKind::allreduce;
  if (!to_dtype(type, c.dtype) || send != recv) return ncclInvalidArgument;  // rig: in place
  if (op != ncclSum && op != ncclAvg) return ncclInvalidArgument;
  c.reduce = op == ncclAvg ? rig::ReduceOp::average : rig::ReduceOp::sum;
  c.buffer = static_cast<std::byte*>(recv);
  c.count = static_cast<std::int64_t>(count);
  return enqueue(as_fake(comm), c, stream);
}

ncclResult_t nccl_broadcast(const void* send, void* recv, std::size_t count, ncclDataType_t type,
                            int root, ncclComm_t comm, cudaStream_t stream) {
  rig_mpi::Collective c;
  c.kind = rig_mpi::CollectiveKind::broadcast;
  if (!to_dtype(type, c.dtype) || send != recv) return ncclInvalidArgument;
  if (root < 0 || root >= as_fake(comm)->size) return ncclInvalidArgument;
  c.root = root;
  c.buffer = static_cast<std::byte*>(recv);
  c.count = static_cast<std::int64_t>(count);
  return enqueue(as_fake(comm), c, stream);
}

ncclResult_t nccl_all_gather(const void* send, void* recv, std::size_t send_count,
                             ncclDataType_t type, ncclComm_t comm, cudaStream_t stream) {
  rig_mpi::Collective c;
  c.kind = rig_mpi::CollectiveKind::allgather;
  if (!to_dtype(type, c.dtype)) return ncclInvalidArgument;
  c.buffer = static_cast<std::byte*>(recv);
  c.count = static_cast<std::int64_t>(send_count);
  const auto* slot = c.buffer + static_cast<std::size_t>(as_fake(comm)->rank) * send_count *
                                    rig::dtype_size(c.dtype);
  c.input = send == slot ? nullptr : static_cast<const std::byte*>(send);
  return enqueue(as_fake(comm), c, stream);
}

ncclResult_t nccl_comm_get_async_error(ncclComm_t comm, ncclResult_t* error) {
  FakeComm* c = as_fake(comm);
  int expected = ncclInProgress;
  // A non-blocking initialisation is done once asked about.
  c->async_error.compare_exchange_strong(expected, ncclSuccess);
  *error = static_cast<ncclResult_t>(expected == ncclInProgress ? ncclInProgress
                                                                : c->async_error.load());
  return ncclSuccess;
}

ncclResult_t nccl_comm_abort(ncclComm_t comm) {
  as_fake(comm)->aborted.store(true);
  return ncclSuccess;  // a collective stuck in MPI stays stuck: the job ends by MPI_Abort
}

ncclResult_t nccl_comm_destroy(ncclComm_t comm) {
  FakeComm* c = as_fake(comm);
  MPI_Op_free(&c->mpi.f16_sum);
  MPI_Op_free(&c->mpi.bf16_sum);
  MPI_Comm_free(&c->comm);
  delete c;
  return ncclSuccess;
}

const char* nccl_get_error_string(ncclResult_t result) {
  switch (result) {
    case ncclSuccess:
      return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError:
      return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError:
      return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument:
      return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage:
      return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError:
      return "remote process exited or there was a network error";
    case ncclInProgress:
      return "NCCL operation in progress";
  }
  return "unknown result code";
}

}  // namespace

const NcclApi& fake_nccl() {
  static const NcclApi api = [] {
    NcclApi a;
    a.get_version = nccl_get_version;
    a.get_unique_id = nccl_get_unique_id;
    a.comm_init_rank_config = nccl_comm_init_rank_config;
    a.all_reduce = nccl_all_reduce;
    a.broadcast = nccl_broadcast;
    a.all_gather = nccl_all_gather;
    a.comm_get_async_error = nccl_comm_get_async_error;
    a.comm_abort = nccl_comm_abort;
    a.comm_destroy = nccl_comm_destroy;
    a.get_error_string = nccl_get_error_string;
    return a;
  }();
  return api;
}

const DriverApi& fake_driver() {
  static const DriverApi api = [] {
    DriverApi a;
    a.init = cu_init;
    a.device_get_count = cu_device_get_count;
    a.device_get = cu_device_get;
    a.primary_ctx_retain = cu_primary_ctx_retain;
    a.primary_ctx_release = cu_primary_ctx_release;
    a.ctx_set_current = cu_ctx_set_current;
    a.stream_create = cu_stream_create;
    a.stream_destroy = cu_stream_destroy;
    a.stream_synchronize = cu_stream_synchronize;
    a.stream_wait_event = cu_stream_wait_event;
    a.event_create = cu_event_create;
    a.event_destroy = cu_event_destroy;
    a.event_record = cu_event_record;
    a.event_query = cu_event_query;
    a.event_synchronize = cu_event_synchronize;
    a.event_elapsed_time = cu_event_elapsed_time;
    a.get_error_string = cu_get_error_string;
    return a;
  }();
  return api;
}

long fake_collectives_run() {
  return g_collectives_run.load();
}

}  // namespace rig_nccl
