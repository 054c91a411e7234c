// One collective as the communication thread runs it: plain pointers and
// counts (the issuing thread's request keeps the tensors alive, so no tensor
// is ever released on the communication thread), plus its blocking MPI call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include <mpi.h>

#include "request_state.hpp"
#include "rig/communicator.hpp"
#include "rig/tensor.hpp"

namespace rig_mpi {

enum class CollectiveKind { allreduce, broadcast, allgather, barrier };

struct Collective {
  CollectiveKind kind = CollectiveKind::barrier;
  std::uint64_t seq = 0;  // 1, 2, ... in issue order: the same on every rank
  rig::DType dtype = rig::DType::f32;
  rig::ReduceOp reduce = rig::ReduceOp::sum;  // allreduce
  int root = 0;                               // broadcast
  std::byte* buffer = nullptr;       // allreduce / broadcast in place; allgather: the output
  const std::byte* input = nullptr;  // allgather; nullptr: already at this rank's slot of buffer
  std::int64_t count = 0;            // elements: of the buffer, or of each rank's allgather input
  std::shared_ptr<RequestState> state;

  bool empty() const { return kind != CollectiveKind::barrier && count == 0; }
  // "allreduce #57 (sum) of 6.2 MB f32", for messages.
  std::string describe() const;
};

// MPI objects the collectives use, set up once on the communication thread.
struct MpiResources {
  MPI_Comm comm = MPI_COMM_NULL;
  int size = 1;
  MPI_Op f16_sum = MPI_OP_NULL;
  MPI_Op bf16_sum = MPI_OP_NULL;
};

// Runs `op` with blocking MPI calls on `mpi.comm` (a barrier is nothing more:
// the caller has already passed the arrival barrier). Returns MPI's error
// code: MPI_SUCCESS, or the first failure (the comm returns errors).
int run_blocking(const Collective& op, const MpiResources& mpi);

// Bytes as "512 B", "4.0 KB", "6.2 MB", "1.1 GB" (powers of 1000).
std::string human_bytes(double bytes);

// MPI's text for an error code.
std::string mpi_error_text(int code);

}  // namespace rig_mpi
