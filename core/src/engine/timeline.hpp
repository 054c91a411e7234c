// --timeline FILE: a Chrome-trace JSON ("traceEvents", complete "X" events in
// microseconds since the run started) of every step's phases, for
// chrome://tracing or https://ui.perfetto.dev.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string_view>

namespace rig::engine {

class Timeline {
 public:
  using Clock = std::chrono::steady_clock;
  // An empty path disables the timeline (every call is then a no-op).
  Timeline(const std::filesystem::path& file, int rank);
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;
  ~Timeline();  // closes the JSON so the file is valid even after an exception

  bool enabled() const { return out_.is_open(); }
  // One phase ("data", "forward", "backward", "communication", "optimizer",
  // "eval", "checkpoint", ...) of `step`, recorded with args {"step": step}.
  void phase(std::string_view name, std::int64_t step, Clock::time_point begin,
             Clock::time_point end);

 private:
  std::ofstream out_;
  Clock::time_point origin_;
  int rank_ = 0;
  bool first_ = true;
};

}  // namespace rig::engine
