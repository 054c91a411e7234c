// Timing GPU work for the kernel benchmarks (bench_gpu_*.cpp): a stream and
// two events, and the median of several runs of a step, each timed alone.
#pragma once

#include <algorithm>
#include <vector>

#include <cuda_runtime.h>

#include "cuda/runtime/cuda_error.hpp"

namespace rig_gpu_test {

class EventTimer {
 public:
  EventTimer() {
    RIG_CUDA_CHECK(cudaStreamCreate(&stream_));
    RIG_CUDA_CHECK(cudaEventCreate(&start_));
    RIG_CUDA_CHECK(cudaEventCreate(&stop_));
  }
  ~EventTimer() {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
    cudaStreamDestroy(stream_);
  }
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;

  cudaStream_t stream() const { return stream_; }

  // Median milliseconds of step(i) over `runs` calls on stream(), after
  // `warmup` untimed ones (i counts every call from 0).
  template <class Step>
  float median_ms(int warmup, int runs, Step&& step) {
    for (int i = 0; i < warmup; ++i) step(i);
    RIG_CUDA_CHECK(cudaStreamSynchronize(stream_));
    std::vector<float> times;
    for (int i = 0; i < runs; ++i) {
      RIG_CUDA_CHECK(cudaEventRecord(start_, stream_));
      step(warmup + i);
      RIG_CUDA_CHECK(cudaEventRecord(stop_, stream_));
      RIG_CUDA_CHECK(cudaEventSynchronize(stop_));
      float ms = 0.0F;
      RIG_CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
      times.push_back(ms);
    }
    std::sort(times.begin(), times.end());
    return times[times.size() / 2];
  }

 private:
  cudaStream_t stream_ = nullptr;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
};

}  // namespace rig_gpu_test
