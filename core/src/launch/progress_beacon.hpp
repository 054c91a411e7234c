// The step a training job has reached, for the `rig run --elastic`
// supervisor that started it: it sets RIG_ELASTIC_PROGRESS to a file and rank
// 0 overwrites that file with the step after every step (one pwrite of a few
// bytes, no fsync), so that after a failure the supervisor knows how many
// steps the restart repeats and when the restarted job made its first step.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>

namespace rig::launch {

inline constexpr const char* kProgressEnv = "RIG_ELASTIC_PROGRESS";

class ProgressBeacon {
 public:
  // Writes only when `writer` is true and RIG_ELASTIC_PROGRESS names a file.
  explicit ProgressBeacon(bool writer);
  ProgressBeacon(const ProgressBeacon&) = delete;
  ProgressBeacon& operator=(const ProgressBeacon&) = delete;
  ~ProgressBeacon();

  void reached(std::int64_t step);

 private:
  int fd_ = -1;
};

// The step in a beacon file, if it holds one.
std::optional<std::int64_t> read_progress(const std::filesystem::path& file);

}  // namespace rig::launch
