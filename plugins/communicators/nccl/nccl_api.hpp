// The NCCL and CUDA driver entry points the `nccl` communicator uses, as
// tables of function pointers, declared by rig from the libraries' stable C
// ABIs (no nccl.h or cuda.h is needed to build it). Two implementations of
// each: the real libraries, loaded with dlopen at run time, and a fake over
// MPI on host memory for tests (fake_nccl.hpp).
//
// ABI facts relied on (NCCL 2.14 or later; unchanged through NCCL 2.2x):
// - ncclUniqueId is 128 opaque bytes passed by value; ncclComm_t and
//   cudaStream_t / CUstream / CUevent are pointers.
// - ncclResult_t: ncclSuccess 0, ncclUnhandledCudaError 1, ncclSystemError 2,
//   ncclInternalError 3, ncclInvalidArgument 4, ncclInvalidUsage 5,
//   ncclRemoteError 6, ncclInProgress 7.
// - ncclDataType_t: ncclInt8 0, ncclUint8 1, ncclInt32 2, ncclUint32 3,
//   ncclInt64 4, ncclUint64 5, ncclFloat16 6, ncclFloat32 7, ncclFloat64 8,
//   ncclBfloat16 9. ncclRedOp_t: ncclSum 0, ncclProd 1, ncclMax 2, ncclMin 3,
//   ncclAvg 4.
// - ncclConfig_t begins {size_t size; unsigned magic (0xcafebeef); unsigned
//   version; int blocking; int cgaClusterSize; int minCTAs; int maxCTAs;
//   const char* netName} (NCCL 2.14's layout; later versions append fields and
//   read only the `size` bytes given, by `version`); an unset int is INT_MIN.
// - ncclGetVersion's code is major x 10000 + minor x 100 + patch (>= 2.9).
// - CUDA driver: CUresult 0 is success, 600 CUDA_ERROR_NOT_READY; the
//   symbols cuStreamDestroy_v2, cuEventDestroy_v2 and
//   cuDevicePrimaryCtxRelease_v2 are the current ones of those calls;
//   CU_EVENT_DEFAULT 0 (timing enabled), CU_STREAM_NON_BLOCKING 1.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace rig_nccl {

// --- NCCL ---------------------------------------------------------------
struct ncclComm;
using ncclComm_t = ncclComm*;
using cudaStream_t = void*;  // a CUstream

constexpr std::size_t kUniqueIdBytes = 128;
struct ncclUniqueId {
  char internal[kUniqueIdBytes];
};
static_assert(sizeof(ncclUniqueId) == 128);

enum ncclResult_t : int {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
};

enum ncclDataType_t : int {
  ncclInt8 = 0,
  ncclUint8 = 1,
  ncclInt32 = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6,
  ncclFloat32 = 7,
  ncclFloat64 = 8,
  ncclBfloat16 = 9,
};

enum ncclRedOp_t : int { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4 };

constexpr int kConfigUndefInt = -2147483647 - 1;  // NCCL_CONFIG_UNDEF_INT (INT_MIN)
constexpr unsigned kConfigMagic = 0xcafebeef;
constexpr int kVersion2_14 = 21400;

// NCCL 2.14's ncclConfig_t (see above).
struct ncclConfig_t {
  std::size_t size = sizeof(ncclConfig_t);
  unsigned int magic = kConfigMagic;
  unsigned int version = kVersion2_14;
  int blocking = kConfigUndefInt;
  int cgaClusterSize = kConfigUndefInt;
  int minCTAs = kConfigUndefInt;
  int maxCTAs = kConfigUndefInt;
  const char* netName = nullptr;
};

struct NcclApi {
  ncclResult_t (*get_version)(int* version) = nullptr;
  ncclResult_t (*get_unique_id)(ncclUniqueId* id) = nullptr;
  ncclResult_t (*comm_init_rank_config)(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank,
                                        ncclConfig_t* config) = nullptr;
  ncclResult_t (*all_reduce)(const void* send, void* recv, std::size_t count, ncclDataType_t type,
                             ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) = nullptr;
  ncclResult_t (*broadcast)(const void* send, void* recv, std::size_t count, ncclDataType_t type,
                            int root, ncclComm_t comm, cudaStream_t stream) = nullptr;
  ncclResult_t (*all_gather)(const void* send, void* recv, std::size_t send_count,
                             ncclDataType_t type, ncclComm_t comm, cudaStream_t stream) = nullptr;
  ncclResult_t (*comm_get_async_error)(ncclComm_t comm, ncclResult_t* error) = nullptr;
  ncclResult_t (*comm_abort)(ncclComm_t comm) = nullptr;
  ncclResult_t (*comm_destroy)(ncclComm_t comm) = nullptr;
  const char* (*get_error_string)(ncclResult_t result) = nullptr;
};

// --- CUDA driver ----------------------------------------------------------
using CUresult = int;
using CUdevice = int;
using CUcontext = void*;
using CUstream = void*;
using CUevent = void*;
constexpr CUresult kCudaSuccess = 0;
constexpr CUresult kCudaErrorNotReady = 600;
constexpr unsigned kStreamNonBlocking = 1;

struct DriverApi {
  CUresult (*init)(unsigned flags) = nullptr;
  CUresult (*device_get_count)(int* count) = nullptr;
  CUresult (*device_get)(CUdevice* device, int ordinal) = nullptr;
  CUresult (*primary_ctx_retain)(CUcontext* ctx, CUdevice device) = nullptr;
  CUresult (*primary_ctx_release)(CUdevice device) = nullptr;
  CUresult (*ctx_set_current)(CUcontext ctx) = nullptr;
  CUresult (*stream_create)(CUstream* stream, unsigned flags) = nullptr;
  CUresult (*stream_destroy)(CUstream stream) = nullptr;
  CUresult (*stream_synchronize)(CUstream stream) = nullptr;
  CUresult (*stream_wait_event)(CUstream stream, CUevent event, unsigned flags) = nullptr;
  CUresult (*event_create)(CUevent* event, unsigned flags) = nullptr;
  CUresult (*event_destroy)(CUevent event) = nullptr;
  CUresult (*event_record)(CUevent event, CUstream stream) = nullptr;
  CUresult (*event_query)(CUevent event) = nullptr;
  CUresult (*event_synchronize)(CUevent event) = nullptr;
  CUresult (*event_elapsed_time)(float* ms, CUevent start, CUevent end) = nullptr;
  CUresult (*get_error_string)(CUresult error, const char** text) = nullptr;
};

// The real libraries, loaded once (kept loaded for the process's life). NCCL:
// RIG_NCCL_LIBRARY=/path/libnccl.so.2 when set, else the soname libnccl.so.2
// (LD_LIBRARY_PATH, ld.so.conf). The driver: libcuda.so.1. Throw
// rig::UserError with how to provide the library when it cannot be loaded.
const NcclApi& real_nccl();
const DriverApi& real_driver();

// "NCCL 2.21.5" from a version code.
std::string nccl_version_text(int code);

}  // namespace rig_nccl
