#include "cpu/dnnl_util.hpp"

#include <omp.h>

#include <stdexcept>

#include <fmt/format.h>

namespace rig::cpu::dnnl_util {

const dnnl::engine& engine() {
  // Never destroyed: pool threads' streams may outlive other statics at exit.
  static const auto* instance = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *instance;
}

dnnl::stream& prepare_thread() {
  // oneDNN sizes its work split by omp_get_max_threads() when a primitive is
  // created and when it runs: one thread per call, the pool runs the calls.
  thread_local const bool single = [] {
    omp_set_num_threads(1);
    return true;
  }();
  (void)single;
  thread_local dnnl::stream stream(engine());
  return stream;
}

dnnl_status_t execute(const dnnl::primitive& primitive,
                      std::initializer_list<dnnl_exec_arg_t> args) {
  dnnl::stream& stream = prepare_thread();
  const dnnl_status_t status = dnnl_primitive_execute(primitive.get(), stream.get(),
                                                      static_cast<int>(args.size()), args.begin());
  if (status != dnnl_success) return status;
  return dnnl_stream_wait(stream.get());
}

dnnl::memory wrap(const dnnl::memory::desc& desc, const void* data) {
  // oneDNN takes a non-const handle; inputs are only read.
  return dnnl::memory(desc, engine(), const_cast<void*>(data));
}

Tensor buffer(std::size_t bytes) {
  return Tensor::empty({static_cast<std::int64_t>((bytes + sizeof(float) - 1) / sizeof(float))});
}

void check(dnnl_status_t status, const std::string& what) {
  if (status != dnnl_success) {
    throw std::runtime_error(
        fmt::format("{}: oneDNN failed with status {}", what, static_cast<int>(status)));
  }
}

}  // namespace rig::cpu::dnnl_util
