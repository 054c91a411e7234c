// Data-parallel gradient reduction in buckets: slices of the flat gradient
// buffer, in reverse parameter order (the order backward produces them), the
// same on every rank. Each bucket is handed to the communicator as soon as
// backward has produced all of its gradients, so communication overlaps the
// rest of backward. Buckets are launched strictly in index order, so every
// rank issues the same collectives in the same order even when its backward
// visits parameters in another order.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <unordered_map>
#include <vector>

#include "rig/autograd.hpp"
#include "rig/communicator.hpp"
#include "rig/parameter_store.hpp"

namespace rig::engine {

struct BucketSettings {
  double cap_mb = 25.0;  // a bucket holds at most this many MB (one larger parameter alone)
  bool fp16_compression = false;  // reduce f16 copies of the averaged gradients
};

// What one step's reduction cost.
struct ReductionStats {
  double busy_seconds = 0.0;     // the communicator was running one of this step's operations
  double exposed_seconds = 0.0;  // the training thread waited for them after backward
  double bytes = 0.0;            // bytes reduced (per rank)
  int buckets = 0;
  bool timing_known = false;  // the communicator reported when its operations ran
};

struct Bucket {
  std::int64_t offset = 0;  // into the flat gradient buffer, in elements
  std::int64_t numel = 0;
  std::vector<std::size_t> parameters;  // indices into ParameterStore::parameters()
};

// The bucket layout: parameters from last to first, a new bucket whenever the
// next parameter would take the current one over cap_bytes.
std::vector<Bucket> plan_buckets(const ParameterStore& params, std::int64_t cap_bytes);

// Where a parameter-server worker sends a finished bucket instead of reducing it.
using BucketPush = std::function<void(std::int64_t offset, const Tensor& gradients)>;

class GradientReducer final : public autograd::LeafGradListener {
 public:
  GradientReducer(ParameterStore& params, Communicator& comm, BucketSettings settings,
                  BucketPush push = {});

  const std::vector<Bucket>& buckets() const { return buckets_; }
  std::int64_t bytes_per_step() const;

  // Call before the backward() that completes this step's gradients (the last
  // micro-batch): buckets are launched while it runs. `unscale` is 1 / the
  // loss scale. Under a 16-bit compute dtype, or a loss scale other than 1,
  // each bucket is unscaled into the f32 master gradients
  // (ParameterStore::unscale_grads over its slice) just before it leaves, so
  // every rank reduces (or pushes) its true f32 gradients while backward goes
  // on, and the trainer unscales nothing after.
  void arm(double unscale = 1.0);
  void leaf_grad_ready(const TensorImpl& leaf) override;
  // After that backward: launches every bucket not launched yet (parameters
  // that received no gradient), waits for all, returns the step's cost.
  ReductionStats finish();

 private:
  struct InFlight {
    std::unique_ptr<CommRequest> request;
    Tensor slice;
    Tensor scratch;  // the f16 copy under fp16 compression
  };
  void launch_ready();
  void launch(std::size_t bucket);
  ReductionStats wait_all(std::chrono::steady_clock::time_point backward_end);

  ParameterStore& params_;
  Communicator& comm_;
  BucketSettings settings_;
  BucketPush push_;
  double unscale_ = 1.0;  // arm()'s: 1 / the loss scale
  std::vector<Bucket> buckets_;
  std::vector<Tensor> scratch_;  // per bucket, f16, under fp16 compression
  std::unordered_map<const TensorImpl*, std::size_t> bucket_of_leaf_;
  std::vector<std::size_t> pending_;  // per bucket, gradients still to come this step
  std::size_t next_launch_ = 0;
  bool armed_ = false;
  std::vector<InFlight> in_flight_;
};

}  // namespace rig::engine
