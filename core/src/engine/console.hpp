// Rank 0 prints; the other ranks stay quiet (errors go through exceptions).
#pragma once

#include <cstdio>
#include <string>

#include <fmt/core.h>

namespace rig::engine {

class Console {
 public:
  explicit Console(bool enabled) : enabled_(enabled) {}
  template <class... Args>
  void print(fmt::format_string<Args...> format, Args&&... args) const {
    if (!enabled_) return;
    fmt::print(format, std::forward<Args>(args)...);
    std::fputc('\n', stdout);
    std::fflush(stdout);
  }
  bool enabled() const { return enabled_; }

 private:
  bool enabled_;
};

// 1.5 s -> "0:00:01.500000", OpenSeq2Seq's "time per step" format.
std::string format_duration(double seconds);

}  // namespace rig::engine
