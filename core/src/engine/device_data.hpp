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

// The trainer fetches ahead itself: next_batch() of on_device's layer then
// fetches nothing (it uploads the batch there and then when none was
// fetched), and fetch_ahead() fetches and starts uploading the next batch.
// The trainer calls it once a step's forward is queued: the host's part of
// the next batch (the data layer's, the copy into pinned staging) then runs
// while the device computes, even after a step that waited for the device
// (automatic loss scaling reads its statistics), and the copy on the copy
// stream runs alongside the step's backward. No-ops for the CPU's layers.
// fetch_ahead says whether it fetched (and started uploading) a batch.
void fetch_ahead_explicitly(DataLayer& data);
bool fetch_ahead(DataLayer& data);

}  // namespace rig::engine
