// Infer mode: one output line per input sample, in input order.
#pragma once

#include <cstdint>
#include <filesystem>

#include "rig/communicator.hpp"
#include "rig/data_layer.hpp"
#include "rig/model.hpp"

namespace rig::engine {

// Writes the model's decoded predictions for every sample of `data` to
// `output` (rank 0, after gathering every rank's share); returns the count
// (0 on the other ranks).
std::int64_t infer(Model& model, DataLayer& data, Communicator& comm,
                   const std::filesystem::path& output);

}  // namespace rig::engine
