#include "worker_pool.hpp"

#include <algorithm>

namespace image_folder {

WorkerPool::WorkerPool(int workers, Work work) : work_(std::move(work)) {
  threads_.reserve(static_cast<std::size_t>(workers));
  for (int w = 0; w < workers; ++w) threads_.emplace_back([this, w] { run(w); });
}

WorkerPool::~WorkerPool() {
  cancel_all();
  {
    const std::lock_guard lock(mutex_);
    stop_ = true;
  }
  work_ready_.notify_all();
  for (auto& t : threads_) t.join();
}

void WorkerPool::submit(BatchJob* job) {
  job->skipped.assign(job->indices.size(), 0);
  job->errors.assign(job->indices.size(), nullptr);
  job->claimed = 0;
  job->done = 0;
  {
    const std::lock_guard lock(mutex_);
    jobs_.push_back(job);
  }
  work_ready_.notify_all();
}

void WorkerPool::wait(BatchJob* job) {
  std::unique_lock lock(mutex_);
  sample_done_.wait(lock, [&] { return job->done == job->indices.size(); });
  jobs_.erase(std::remove(jobs_.begin(), jobs_.end(), job), jobs_.end());
}

void WorkerPool::cancel_all() {
  std::unique_lock lock(mutex_);
  jobs_.clear();  // no sample is claimed from them any more
  sample_done_.wait(lock, [&] { return in_flight_ == 0; });
}

void WorkerPool::run(int worker) {
  std::unique_lock lock(mutex_);
  for (;;) {
    BatchJob* job = nullptr;
    work_ready_.wait(lock, [&] {
      if (stop_) return true;
      const auto open = std::find_if(jobs_.begin(), jobs_.end(), [](const BatchJob* j) {
        return j->claimed < j->indices.size();
      });
      job = open == jobs_.end() ? nullptr : *open;
      return job != nullptr;
    });
    if (stop_) return;
    const std::size_t sample = job->claimed++;
    ++in_flight_;
    lock.unlock();
    try {
      work_(worker, *job, sample);
    } catch (...) {
      job->errors[sample] = std::current_exception();
    }
    lock.lock();
    --in_flight_;
    ++job->done;
    sample_done_.notify_all();
  }
}

}  // namespace image_folder
