// A data layer's batches on the run's device: the engine wraps the plugin so
// that every batch (training, evaluation, infer, interactive lines) reaches
// the model with its tensors on the device. Data layers always produce, and
// decode, host batches: decode() and decode_targets() bring the batch and the
// predictions back to the host first. Each batch is fetched and its copy
// started one batch ahead, so that on a GPU it overlaps the step before
// (Backend::begin_uploads); positions are reported from before that batch.
#pragma once

#include <memory>

#include "rig/data_layer.hpp"

namespace rig::engine {

// `data` itself on the CPU, else a data layer whose batches are moved to `device`.
std::shared_ptr<DataLayer> on_device(std::shared_ptr<DataLayer> data, Device device);

}  // namespace rig::engine
