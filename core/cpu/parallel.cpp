#include "parallel.hpp"

#include <algorithm>
#include <atomic>
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
  return std::max(1U, std::thread::hardware_concurrency());
}

// Workers wait for a job; a job is one range split into `chunks` pieces that
// the caller and the workers claim through an atomic counter.
class Pool {
 public:
  explicit Pool(int threads) { resize(threads); }
  ~Pool() { stop_workers(); }

  int threads() const { return static_cast<int>(workers_.size()) + 1; }

  void resize(int threads) {
    stop_workers();
    stopping_ = false;
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
      pending_ = static_cast<int>(workers_.size());
      ++generation_;
    }
    wake_.notify_all();
    claim_chunks();
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [this] { return pending_ == 0; });
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

  void work() {
    std::uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return stopping_ || generation_ != seen; });
        if (stopping_) return;
        seen = generation_;
      }
      claim_chunks();
      std::lock_guard<std::mutex> lock(mutex_);
      if (--pending_ == 0) done_.notify_one();
    }
  }

  void stop_workers() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
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
  std::uint64_t generation_ = 0;
  int pending_ = 0;
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

int num_threads() { return pool().threads(); }

void set_num_threads(int threads) { pool().resize(std::max(1, threads)); }

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
