// A pool of threads that fills batch jobs sample by sample, oldest job first,
// so batches complete in the order they were submitted. Which thread fills a
// sample never changes its result: work(worker, job, i) must depend only on
// the job and i (the worker id selects scratch state).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace image_folder {

// One batch being filled. Created and destroyed by the consumer thread; the
// workers only write the memory it points at (sample i's slice of the output,
// status[i], errors[i]).
struct BatchJob {
  std::int64_t epoch = 0;
  std::vector<std::int64_t> indices;  // data-set indices of the samples
  float* images = nullptr;            // [indices.size(), 3, size, size], owned by the caller
  std::vector<std::uint8_t> skipped;  // 1 where an image was corrupt (left out of the batch)
  std::vector<std::exception_ptr> errors;
  std::size_t claimed = 0;  // guarded by the pool's mutex
  std::size_t done = 0;     // guarded by the pool's mutex
};

class WorkerPool {
 public:
  using Work = std::function<void(int worker, BatchJob& job, std::size_t sample)>;
  WorkerPool(int workers, Work work);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Queues a job behind the others. The job must stay alive until wait() or
  // cancel_all() returned for it.
  void submit(BatchJob* job);
  // Blocks until every sample of `job` (a submitted job) is filled, and
  // removes it from the queue.
  void wait(BatchJob* job);
  // Forgets every queued job, waiting for samples already being filled.
  void cancel_all();

 private:
  void run(int worker);

  Work work_;
  std::mutex mutex_;
  std::condition_variable work_ready_;
  std::condition_variable sample_done_;
  std::deque<BatchJob*> jobs_;
  int in_flight_ = 0;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace image_folder
