#include "comm_thread.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include <fmt/format.h>

#include "half_sum_op.hpp"
#include "rig/error.hpp"

namespace rig_mpi {
namespace {

// Waiting for the other ranks: poll flat out this long (a rank that is nearly
// there costs no sleep), then sleep between polls so a rank still computing
// keeps its cores.
constexpr auto kSpin = std::chrono::microseconds(50);
constexpr auto kPollSleep = std::chrono::microseconds(20);
// abort() without MPI_THREAD_MULTIPLE hands MPI_Abort to the communication
// thread; if that thread is stuck in MPI, the process exits by itself.
constexpr auto kAbortGrace = std::chrono::seconds(10);
// A collective past its deadline, or MPI failing, ends the job with this code.
constexpr int kFailureExitCode = 3;
// Longer timeouts mean "never" (and would overflow the clock's arithmetic).
constexpr double kLongestTimeoutS = 1e9;

void print_line(const std::string& line) {
  std::fputs((line + "\n").c_str(), stderr);
  std::fflush(stderr);
}

std::string thread_level_name(int level) {
  if (level == MPI_THREAD_SINGLE) return "MPI_THREAD_SINGLE";
  if (level == MPI_THREAD_FUNNELED) return "MPI_THREAD_FUNNELED";
  if (level == MPI_THREAD_SERIALIZED) return "MPI_THREAD_SERIALIZED";
  if (level == MPI_THREAD_MULTIPLE) return "MPI_THREAD_MULTIPLE";
  return fmt::format("thread level {}", level);
}

CommThread::Clock::duration as_duration(double seconds) {
  return std::chrono::duration_cast<CommThread::Clock::duration>(
      std::chrono::duration<double>(std::min(seconds, kLongestTimeoutS)));
}

void check(int rc, const char* call) {
  if (rc != MPI_SUCCESS) {
    throw rig::RunError(fmt::format("mpi communicator: {} failed: {}", call, mpi_error_text(rc)));
  }
}

}  // namespace

CommThread::CommThread(double timeout_s, double startup_timeout_s, int servers)
    : timeout_(as_duration(timeout_s)),
      timeout_s_(timeout_s),
      startup_timeout_(as_duration(std::max(timeout_s, startup_timeout_s))),
      startup_timeout_s_(std::max(timeout_s, startup_timeout_s)),
      servers_(servers),
      watchdog_([this](std::uint64_t /*seq*/) {
        Collective op;
        Clock::time_point start;
        {
          std::lock_guard lock(running_mutex_);
          op = running_;
          start = running_start_;
        }
        timed_out(op, start, /*from_watchdog=*/true);
      }) {
  std::promise<void> ready;
  auto set_up_done = ready.get_future();
  thread_ = std::thread([this, ready = std::move(ready)]() mutable { main(std::move(ready)); });
  try {
    set_up_done.get();
  } catch (...) {
    thread_.join();
    throw;
  }
}

CommThread::~CommThread() {
  {
    std::lock_guard lock(queue_mutex_);
    stopping_ = true;
  }
  queue_changed_.notify_all();
  thread_.join();
}

std::shared_ptr<RequestState> CommThread::submit(Collective op) {
  auto state = std::make_shared<RequestState>();
  op.state = state;
  {
    std::lock_guard lock(queue_mutex_);
    op.seq = ++issued_;
    queue_.push_back(std::move(op));
  }
  queue_changed_.notify_one();
  return state;
}

void CommThread::abort(const std::string& reason, int exit_code) {
  try {
    print_line(census_->ending_line("mpi", rank_, reason));
  } catch (...) {  // the job must end even if the line cannot be made
    std::fprintf(stderr, "rig: mpi: rank %d: %s; ending the job\n", world_rank_, reason.c_str());
  }
  if (thread_level_ == MPI_THREAD_MULTIPLE) MPI_Abort(mpi_.comm, exit_code);
  abort_exit_code_.store(exit_code);
  abort_requested_.store(true);
  queue_changed_.notify_all();
  std::this_thread::sleep_for(kAbortGrace);
  std::_Exit(exit_code);
}

void CommThread::main(std::promise<void> ready) {
  try {
    set_up();
  } catch (...) {
    ready.set_exception(std::current_exception());
    return;
  }
  ready.set_value();
  loop();
  tear_down();
}

void CommThread::set_up() {
  int initialized = 0;
  int finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (finalized != 0) {
    throw rig::RunError(
        "mpi communicator: MPI was already finalized in this process (by an earlier mpi "
        "communicator?) and cannot start again: make one mpi communicator per process");
  }
  if (initialized == 0) {
    // This thread makes every MPI call, so any level would do; MULTIPLE lets
    // the watchdog and abort() call MPI_Abort while a collective blocks.
    check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &thread_level_),
          "MPI_Init_thread");
    owns_mpi_ = true;
  } else {
    MPI_Query_thread(&thread_level_);
    if (thread_level_ < MPI_THREAD_SERIALIZED) {
      throw rig::RunError(fmt::format(
          "mpi communicator: the program initialised MPI with {}, but the communicator calls MPI "
          "from its own thread: initialise with MPI_THREAD_SERIALIZED or MPI_THREAD_MULTIPLE "
          "(or leave MPI to the communicator)",
          thread_level_name(thread_level_)));
    }
  }
  // A communicator of our own: the host's messages never match ours.
  check(MPI_Comm_dup(MPI_COMM_WORLD, &mpi_.comm), "MPI_Comm_dup");
  MPI_Comm_set_errhandler(mpi_.comm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(mpi_.comm, &world_rank_);
  MPI_Comm_size(mpi_.comm, &world_size_);
  if (servers_ > 0) {
    if (servers_ >= world_size_) {
      throw rig::UserError(fmt::format(
          "mpi_ps: communicator_params/servers is {}, but the job has {} process(es): start at "
          "least servers + 1 (mpirun -n W+S, or rig run --nproc W --servers S)",
          servers_, world_size_));
    }
    ps_comm_ = mpi_.comm;
    const int server = world_rank_ >= world_size_ - servers_ ? 1 : 0;
    check(MPI_Comm_split(ps_comm_, server, world_rank_, &mpi_.comm), "MPI_Comm_split");
    MPI_Comm_set_errhandler(mpi_.comm, MPI_ERRORS_RETURN);
  }
  MPI_Comm_rank(mpi_.comm, &rank_);
  MPI_Comm_size(mpi_.comm, &size_);
  mpi_.size = size_;
  check(MPI_Comm_split_type(mpi_.comm, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local_),
        "MPI_Comm_split_type");
  MPI_Comm_set_errhandler(local_, MPI_ERRORS_RETURN);
  MPI_Comm_rank(local_, &local_rank_);
  census_ = std::make_unique<RankCensus>(mpi_.comm, local_);
  mpi_.f16_sum = make_f16_sum_op();
  mpi_.bf16_sum = make_bf16_sum_op();
}

void CommThread::loop() {
  while (true) {
    Collective op;
    {
      std::unique_lock lock(queue_mutex_);
      queue_changed_.wait(
          lock, [this] { return !queue_.empty() || stopping_ || abort_requested_.load(); });
      check_abort_request();
      if (queue_.empty()) return;  // stopping, and everything issued has run
      op = std::move(queue_.front());
      queue_.pop_front();
    }
    execute(op);
  }
}

void CommThread::execute(Collective& op) {
  const auto start = Clock::now();
  census_->announce(op.seq);
  auto& state = *op.state;
  if (!failure_.empty()) {
    state.error =
        fmt::format("mpi {}: not run: an earlier collective failed ({})", op.describe(), failure_);
    state.complete(RequestState::failed);
    return;
  }
  if (op.empty() || size_ == 1) {
    // Nothing to send. Every rank sees the same sizes, so all skip it alike.
    if (op.kind == CollectiveKind::allgather && op.input != nullptr && op.count > 0) {
      run_blocking(op, mpi_);  // one rank: copies the input into the output
    }
    state.timing = {start, Clock::now(), true};
    state.complete(RequestState::succeeded);
    return;
  }
  {
    std::lock_guard lock(running_mutex_);
    running_ = op;
    running_.state.reset();
    running_start_ = start;
  }
  int rc = wait_for_every_rank(op, start);
  // The timing the engine sees is the transfer itself, from the moment every
  // rank had arrived: waiting for a late rank is not bandwidth.
  auto transfer_start = Clock::now();
  if (rc == MPI_SUCCESS) {
    // The first collective's transfer gets timeout_s from the moment all
    // ranks met; any other's deadline still counts from when this rank issued it.
    watchdog_.arm((op.seq == 1 ? transfer_start : start) + timeout_, op.seq);
    rc = run_blocking(op, mpi_);
    watchdog_.disarm();
  } else {
    transfer_start = start;
  }
  state.timing = {transfer_start, Clock::now(), true};
  if (rc != MPI_SUCCESS) {
    failure_ = fmt::format("{}: {}", op.describe(), mpi_error_text(rc));
    state.error =
        fmt::format("mpi {} failed on rank {}: {}", op.describe(), rank_, mpi_error_text(rc));
    state.complete(RequestState::failed);
    return;
  }
  state.complete(RequestState::succeeded);
}

int CommThread::wait_for_every_rank(const Collective& op, Clock::time_point start) {
  MPI_Request request = MPI_REQUEST_NULL;
  int rc = MPI_Ibarrier(mpi_.comm, &request);
  if (rc != MPI_SUCCESS) return rc;
  const auto deadline = start + arrival_limit(op);
  const auto spin_until = Clock::now() + kSpin;
  while (true) {
    int arrived = 0;
    rc = MPI_Test(&request, &arrived, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS || arrived != 0) return rc;
    check_abort_request();
    const auto now = Clock::now();
    if (now >= deadline) timed_out(op, start, /*from_watchdog=*/false);
    if (now >= spin_until) std::this_thread::sleep_for(kPollSleep);
  }
}

void CommThread::tear_down() {
  if (!failure_.empty()) {
    // MPI's state after a failed collective is undefined: finalizing could hang.
    print_line(
        fmt::format("rig: mpi: {}: shutting down after a failed collective ({}); ending "
                    "the job",
                    census_->describe(rank_), failure_));
    end_job(/*from_watchdog=*/false, kFailureExitCode);
  }
  if (size_ > 1) {
    // Every rank reaches the end before the collective frees and MPI_Finalize,
    // which cannot be given a deadline.
    Collective last;
    last.kind = CollectiveKind::barrier;
    last.seq = issued_ + 1;
    const auto start = Clock::now();
    census_->announce(last.seq);
    const int rc = wait_for_every_rank(last, start);
    if (rc != MPI_SUCCESS) {
      print_line(fmt::format("rig: mpi: {}: the barrier at shutdown failed: {}; ending the job",
                             census_->describe(rank_), mpi_error_text(rc)));
      end_job(/*from_watchdog=*/false, kFailureExitCode);
    }
  }
  census_->release();
  MPI_Op_free(&mpi_.f16_sum);
  MPI_Op_free(&mpi_.bf16_sum);
  MPI_Comm_free(&local_);
  MPI_Comm_free(&mpi_.comm);
  if (ps_comm_ != MPI_COMM_NULL) MPI_Comm_free(&ps_comm_);
  if (owns_mpi_) MPI_Finalize();
}

void CommThread::check_abort_request() {
  if (abort_requested_.load()) {
    const int exit_code = abort_exit_code_.load();
    MPI_Abort(mpi_.comm, exit_code);
    std::_Exit(exit_code);
  }
}

CommThread::Clock::duration CommThread::arrival_limit(const Collective& op) const {
  return op.seq == 1 ? startup_timeout_ : timeout_;
}

double CommThread::arrival_limit_s(const Collective& op) const {
  return op.seq == 1 ? startup_timeout_s_ : timeout_s_;
}

const char* CommThread::arrival_limit_key(const Collective& op) const {
  return op.seq == 1 ? "startup_timeout_s" : "timeout_s";
}

void CommThread::timed_out(const Collective& op, Clock::time_point start, bool from_watchdog) {
  const std::chrono::duration<double> waited = Clock::now() - start;
  // The watchdog covers the transfer (timeout_s); the wait for the ranks to
  // arrive has the first collective's own limit.
  const char* key = from_watchdog ? "timeout_s" : arrival_limit_key(op);
  const double limit = from_watchdog ? timeout_s_ : arrival_limit_s(op);
  print_line(fmt::format(
      "rig: mpi: {}: {} did not finish within {} = {} (waited {:.1f} s); {}; ending the job",
      census_->describe(rank_), op.describe(), key, limit, waited.count(),
      census_->absent_ranks(op.seq)));
  end_job(from_watchdog, kFailureExitCode);
}

void CommThread::end_job(bool from_watchdog, int exit_code) {
  // The watchdog may call MPI only when MPI allows calls from two threads at once.
  if (!from_watchdog || thread_level_ == MPI_THREAD_MULTIPLE) MPI_Abort(mpi_.comm, exit_code);
  std::_Exit(exit_code);
}

}  // namespace rig_mpi
