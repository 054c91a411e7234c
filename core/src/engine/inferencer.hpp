// Infer mode: one output line per input sample, in input order.
#pragma once

#include <cstdint>
#include <filesystem>

#include "rig/data_layer.hpp"
#include "rig/model.hpp"

namespace rig::engine {

// Writes the model's decoded predictions for every sample of `data` to `output`; returns the count.
std::int64_t infer(Model& model, DataLayer& data, const std::filesystem::path& output);

}  // namespace rig::engine
