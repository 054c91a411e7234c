#include "cuda/runtime/copies.hpp"

#include <stdexcept>
#include <string>

#include <cuda_runtime_api.h>

#include "cuda/runtime/cuda_error.hpp"

namespace rig::cuda {
namespace {

void check_fits(std::size_t bytes, const PinnedBuffer& buffer, const char* what) {
  if (bytes > buffer.size()) {
    throw std::invalid_argument(std::string(what) + ": " + std::to_string(bytes) +
                                " bytes do not fit the pinned buffer of " +
                                std::to_string(buffer.size()) + " bytes");
  }
}

}  // namespace

void copy_to_device_async(std::byte* device_destination, const PinnedBuffer& source,
                          std::size_t bytes, const Stream& stream) {
  check_fits(bytes, source, "copy_to_device_async");
  if (bytes == 0) return;
  RIG_CUDA_CHECK(cudaMemcpyAsync(device_destination, source.data(), bytes, cudaMemcpyHostToDevice,
                                 stream.native()));
}

void copy_to_host_async(PinnedBuffer& destination, const std::byte* device_source,
                        std::size_t bytes, const Stream& stream) {
  check_fits(bytes, destination, "copy_to_host_async");
  if (bytes == 0) return;
  RIG_CUDA_CHECK(cudaMemcpyAsync(destination.data(), device_source, bytes, cudaMemcpyDeviceToHost,
                                 stream.native()));
}

}  // namespace rig::cuda
