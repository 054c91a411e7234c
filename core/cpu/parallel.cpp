#include "parallel.hpp"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace rig::cpu {
namespace {

thread_local bool t_inside_parallel = false;

int default_threads() {
  if (const char* env = std::getenv("RIG_NUM_THREADS")) {
    const int n = std::atoi(env);
    if (n > 0) return n;
  }
  // An MPI launcher that binds each rank to its core(s) gets one thread per
  // core it was given, not per machine core; unbound ranks share the machine.
  return default_compute_threads();
}

// Workers wait for a job; a job is one range split into `chunks` pieces that
// the caller and the workers claim through an atomic counter. Once every
// chunk is claimed the caller closes the job and waits only for the workers
// that joined it: a worker that wakes later skips it. (Waiting for every
// worker to check in made each op cost a scheduling delay whenever a worker
// was off its core: a beam search sharing 2 cores with another process ran
// 5 times slower than alone.) Waking a thread
// from a condition variable costs several microseconds, more than a small op
// takes, so both sides spin for up to a millisecond before they sleep:
// back-to-back ops, and ops separated by a short single-threaded stretch,
// then hand work over without a system call. (Measured on the transformer
// training step: 50 us of spinning left the workers asleep often enough to
// cost 3 % of the step against 1 ms.)
class Pool {
 public:
  explicit Pool(int threads) { resize(threads); }
  ~Pool() { stop_workers(); }

  int threads() const { return static_cast<int>(workers_.size()) + 1; }

  void resize(int threads) {
    stop_workers();
    stopping_ = false;
    stopping_flag_.store(false);
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { work(); });
  }

  void run(std::int64_t n, std::int64_t chunk, detail::RangeFn fn, void* context) {
    std::unique_lock<std::mutex> job_lock(job_mutex_);  // one job at a time
    {
      std::lock_guard<std::mutex> lock(mutex_);
      fn_ = fn;
      context_ = context;
      n_ = n;
      chunk_ = chunk;
      next_.store(0);
      closed_ = false;
      generation_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_all();
    claim_chunks();
    {
      // Every chunk is claimed: no worker joins from here on.
      std::lock_guard<std::mutex> lock(mutex_);
      closed_ = true;
    }
    if (spin_until([this] { return active_.load(std::memory_order_acquire) == 0; })) return;
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [this] { return active_.load() == 0; });
  }

 private:
  void claim_chunks() {
    t_inside_parallel = true;
    for (;;) {
      const std::int64_t begin = next_.fetch_add(chunk_);
      if (begin >= n_) break;
      fn_(context_, begin, std::min(n_, begin + chunk_));
    }
    t_inside_parallel = false;
  }

  // Spins until ready() or about a millisecond passes; returns ready().
  template <class Ready>
  static bool spin_until(Ready ready) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(1000);
    for (int i = 0;; ++i) {
      if (ready()) return true;
      if ((i & 63) == 63 && std::chrono::steady_clock::now() > deadline) return ready();
#if defined(__x86_64__)
      __builtin_ia32_pause();
#endif
    }
  }

  void work() {
    std::uint64_t seen = 0;
    for (;;) {
      const bool job = spin_until(
          [&] { return generation_.load(std::memory_order_acquire) != seen || stopping_flag_; });
      if (!job) {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return stopping_ || generation_.load() != seen; });
      }
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (stopping_) return;
        seen = generation_.load();
        if (closed_) continue;  // woke after its chunks were all claimed
        active_.fetch_add(1, std::memory_order_relaxed);
      }
      claim_chunks();
      if (active_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        std::lock_guard<std::mutex> lock(mutex_);  // pairs with the caller's wait
        done_.notify_one();
      }
    }
  }

  void stop_workers() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
      stopping_flag_.store(true);
    }
    wake_.notify_all();
    for (auto& w : workers_) w.join();
    workers_.clear();
  }

  std::mutex job_mutex_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  std::vector<std::thread> workers_;
  bool stopping_ = false;
  std::atomic<bool> stopping_flag_{false};  // stopping_, readable while spinning
  std::atomic<std::uint64_t> generation_{0};
  bool closed_ = true;          // the job's chunks are all claimed; guarded by mutex_
  std::atomic<int> active_{0};  // workers inside the current job
  detail::RangeFn fn_ = nullptr;
  void* context_ = nullptr;
  std::int64_t n_ = 0;
  std::int64_t chunk_ = 1;
  std::atomic<std::int64_t> next_{0};
};

Pool& pool() {
  static Pool instance(default_threads());
  return instance;
}

}  // namespace

int num_threads() {
  return pool().threads();
}

void set_num_threads(int threads) {
  pool().resize(std::max(1, threads));
}

namespace detail {

void parallel_for_impl(std::int64_t n, std::int64_t grain, RangeFn fn, void* context) {
  if (n <= 0) return;
  grain = std::max<std::int64_t>(1, grain);
  const int threads = t_inside_parallel ? 1 : num_threads();
  if (threads == 1 || n < 2 * grain) {
    fn(context, 0, n);
    return;
  }
  // A few chunks per thread balance uneven work without much overhead.
  const std::int64_t chunks = std::min<std::int64_t>(n / grain, 4LL * threads);
  pool().run(n, (n + chunks - 1) / chunks, fn, context);
}

}  // namespace detail

}  // namespace rig::cpu
