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

SingleThreaded::SingleThreaded() : previous_(omp_get_max_threads()) {
  omp_set_num_threads(1);
}

SingleThreaded::~SingleThreaded() {
  omp_set_num_threads(previous_);
}

dnnl::stream& stream() {
  thread_local dnnl::stream instance(engine());
  return instance;
}

dnnl_status_t execute(const dnnl::primitive& primitive,
                      std::initializer_list<dnnl_exec_arg_t> args) {
  dnnl::stream& s = stream();
  const dnnl_status_t status =
      dnnl_primitive_execute(primitive.get(), s.get(), static_cast<int>(args.size()), args.begin());
  if (status != dnnl_success) return status;
  return dnnl_stream_wait(s.get());
}

Memory wrap(const dnnl::memory::desc& desc, const void* data) {
  dnnl_memory_t memory = nullptr;
  // oneDNN takes a non-const handle; inputs are only read.
  check(dnnl_memory_create(&memory, &desc.data, engine().get(), const_cast<void*>(data)),
        "dnnl_memory_create");
  return Memory(memory);
}

void check(dnnl_status_t status, std::string_view what) {
  if (status != dnnl_success) {
    throw std::runtime_error(
        fmt::format("{}: oneDNN failed with status {}", what, static_cast<int>(status)));
  }
}

}  // namespace rig::cpu::dnnl_util
