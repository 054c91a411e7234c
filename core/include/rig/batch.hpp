// One batch from a data layer: named tensors plus bookkeeping.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "rig/random.hpp"
#include "rig/tensor.hpp"

namespace rig {

struct Batch {
  std::map<std::string, Tensor> tensors;  // e.g. "features", "labels"
  std::int64_t num_objects = 0;           // what "objects per second" counts: samples, tokens
  std::vector<std::int64_t> indices;      // position of each sample in the data set
  // Set by the engine before forward: {random_seed, global step, rank,
  // micro-batch index as purpose}. Models derive their dropout streams from it
  // (rng.derive("encoder.layers.0.dropout")), so masks are reproducible.
  RandomKey rng;
  // The data layer's own tensors, on the host, when the engine moved the
  // batch to another device (empty on the CPU): a model checks its inputs
  // there without reading the device.
  std::map<std::string, Tensor> host_tensors;

  // The tensor called `name`; throws naming the tensors the batch has.
  const Tensor& at(const std::string& name) const;
  // The tensor called `name` on the host: the data layer's copy when the
  // batch was moved, else the tensor itself when it is on the CPU, else a
  // copy read from the device.
  Tensor host(const std::string& name) const;
  // The same batch with every tensor on `device`, the originals kept in
  // host_tensors (the engine moves each batch to the run's device before the
  // model sees it).
  Batch to(Device device) const;
};

}  // namespace rig
