#include "nccl_api.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <string>

#include <fmt/format.h>

#include "rig/error.hpp"

namespace rig_nccl {
namespace {

constexpr const char* kNcclSoname = "libnccl.so.2";
constexpr const char* kDriverSoname = "libcuda.so.1";

template <class Fn>
void resolve(void* library, const char* what, const char* symbol, Fn& out) {
  void* address = dlsym(library, symbol);
  if (address == nullptr) {
    throw rig::UserError(fmt::format(
        "nccl communicator: {} has no {} (too old? NCCL 2.14 or later is needed)", what, symbol));
  }
  out = reinterpret_cast<Fn>(address);
}

NcclApi load_nccl() {
  const char* path = std::getenv("RIG_NCCL_LIBRARY");
  const bool given = path != nullptr && *path != '\0';
  const std::string name = given ? path : kNcclSoname;
  void* library = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    const char* reason = dlerror();
    const std::string why = reason != nullptr ? reason : "unknown reason";
    if (given) {
      throw rig::UserError(fmt::format(
          "nccl communicator: cannot load RIG_NCCL_LIBRARY={}: {}; point it at NCCL 2's "
          "libnccl.so.2",
          name, why));
    }
    throw rig::UserError(fmt::format(
        "nccl communicator: NCCL (libnccl.so.2) not found: set RIG_NCCL_LIBRARY=/path/to/"
        "libnccl.so.2 (PyTorch's wheel has it in site-packages/nvidia/nccl/lib) or add its folder "
        "to LD_LIBRARY_PATH, or use --communicator=mpi ({})",
        why));
  }
  const std::string what = given ? name : kNcclSoname;
  NcclApi api;
  resolve(library, what.c_str(), "ncclGetVersion", api.get_version);
  resolve(library, what.c_str(), "ncclGetUniqueId", api.get_unique_id);
  resolve(library, what.c_str(), "ncclCommInitRankConfig", api.comm_init_rank_config);
  resolve(library, what.c_str(), "ncclAllReduce", api.all_reduce);
  resolve(library, what.c_str(), "ncclBroadcast", api.broadcast);
  resolve(library, what.c_str(), "ncclAllGather", api.all_gather);
  resolve(library, what.c_str(), "ncclCommGetAsyncError", api.comm_get_async_error);
  resolve(library, what.c_str(), "ncclCommAbort", api.comm_abort);
  resolve(library, what.c_str(), "ncclCommDestroy", api.comm_destroy);
  resolve(library, what.c_str(), "ncclGetErrorString", api.get_error_string);
  int version = 0;
  api.get_version(&version);
  if (version < kVersion2_14) {
    throw rig::UserError(
        fmt::format("nccl communicator: {} is {}; rig needs NCCL 2.14 or later (non-blocking "
                    "communicators)",
                    what, nccl_version_text(version)));
  }
  return api;
}

DriverApi load_driver() {
  void* library = dlopen(kDriverSoname, RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    const char* reason = dlerror();
    throw rig::UserError(fmt::format(
        "nccl communicator: the CUDA driver ({}) is not installed: {}; the nccl communicator "
        "needs a GPU (use --communicator=mpi without one)",
        kDriverSoname, reason != nullptr ? reason : "unknown reason"));
  }
  const char* what = kDriverSoname;
  DriverApi api;
  resolve(library, what, "cuInit", api.init);
  resolve(library, what, "cuDeviceGetCount", api.device_get_count);
  resolve(library, what, "cuDeviceGet", api.device_get);
  resolve(library, what, "cuDevicePrimaryCtxRetain", api.primary_ctx_retain);
  resolve(library, what, "cuDevicePrimaryCtxRelease_v2", api.primary_ctx_release);
  resolve(library, what, "cuCtxSetCurrent", api.ctx_set_current);
  resolve(library, what, "cuStreamCreate", api.stream_create);
  resolve(library, what, "cuStreamDestroy_v2", api.stream_destroy);
  resolve(library, what, "cuStreamSynchronize", api.stream_synchronize);
  resolve(library, what, "cuStreamWaitEvent", api.stream_wait_event);
  resolve(library, what, "cuEventCreate", api.event_create);
  resolve(library, what, "cuEventDestroy_v2", api.event_destroy);
  resolve(library, what, "cuEventRecord", api.event_record);
  resolve(library, what, "cuEventQuery", api.event_query);
  resolve(library, what, "cuEventSynchronize", api.event_synchronize);
  resolve(library, what, "cuEventElapsedTime", api.event_elapsed_time);
  resolve(library, what, "cuGetErrorString", api.get_error_string);
  return api;
}

}  // namespace

const NcclApi& real_nccl() {
  static const NcclApi api = load_nccl();
  return api;
}

const DriverApi& real_driver() {
  static const DriverApi api = load_driver();
  return api;
}

std::string nccl_version_text(int code) {
  if (code >= 20900) {
    return fmt::format("NCCL {}.{}.{}", code / 10000, code / 100 % 100, code % 100);
  }
  return fmt::format("NCCL {}.{}.{}", code / 1000, code / 100 % 10, code % 100);
}

}  // namespace rig_nccl
