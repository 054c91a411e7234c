// Deterministic gradient reduction (communicator_params/deterministic): the
// gradient of a step is summed in one canonical order over the global
// micro-batch slots g = micro x world + rank, so N ranks with iter_size k give
// the same bits for every N and k with the same N x k.
//
// The order is a fixed binary tree: T(slots) = T(even positions) + T(odd
// positions), down to single slots, then one multiply by 1 / (N x k). Each
// rank keeps its k micro-batch gradients, allgathers them chunk by chunk, and
// every rank sums the same tree itself. Cost: k flat gradient copies of
// memory, and an allgather (each rank receives (N - 1) x k gradients) in place
// of an allreduce, after backward with no overlap.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/gradient_reducer.hpp"
#include "rig/communicator.hpp"
#include "rig/parameter_store.hpp"

namespace rig::engine {

// T(slots) = T(slots at even positions) + T(slots at odd positions).
Tensor canonical_sum(const std::vector<Tensor>& slots);

class DeterministicReduction {
 public:
  DeterministicReduction(ParameterStore& params, Communicator& comm, std::int64_t iter_size,
                         std::int64_t chunk_elements);

  // After micro-batch `micro`'s backward: its gradient moves out of grads(),
  // which is zeroed for the next one.
  void micro_done(std::int64_t micro);
  // grads() becomes the canonical mean over every rank's micro-batches.
  ReductionStats finish();

 private:
  ParameterStore& params_;
  Communicator& comm_;
  std::int64_t iter_size_;
  std::int64_t chunk_;
  std::vector<Tensor> micro_grads_;  // this rank's, by micro-batch
};

}  // namespace rig::engine
