// What to change when a run ran out of memory: the keys that shrink what
// failed (training's batch and precision, evaluation's or inference's batch),
// with their values now and values that make the same updates.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "engine/settings.hpp"

namespace rig::engine {

// `mode`: the run's (train, eval, ...); `activity`: what failed
// (activity_that_failed(): "evaluation", "the backward pass of step 0", or
// empty); `eval_batch`: train_eval's evaluation batch_size_per_gpu;
// `can_recompute`: the model has model_params.recompute_activations, off.
std::string out_of_memory_advice(const std::string& mode, const std::string& activity,
                                 const EngineSettings& settings,
                                 std::optional<std::int64_t> eval_batch,
                                 bool can_recompute = false);

}  // namespace rig::engine
