// Rank 0 prints; the other ranks stay quiet (errors go through exceptions).
// When stdout is a terminal, a live progress bar sits below the printed lines.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <string_view>

#include <fmt/core.h>

namespace rig::engine {

// --progress: on, off, or auto: RIG_PROGRESS=0/1 if set, else a bar when
// stdout is a terminal and no launcher started the process (under mpirun a
// rank's stdout is a pseudo-terminal even when mpirun's own output goes to a
// file, so it says nothing about what the user sees).
enum class ProgressBar { automatic, on, off };
ProgressBar parse_progress_bar(const std::string& text);  // auto | on | off, else UserError

class Console {
 public:
  Console(bool enabled, ProgressBar mode);
  Console(bool enabled, bool progress_bar, std::FILE* stream = stdout)
      : enabled_(enabled), bar_(enabled && progress_bar), stream_(stream) {}

  template <class... Args>
  void print(fmt::format_string<Args...> format, Args&&... args) const {
    if (!enabled_) return;
    clear_bar();
    fmt::print(stream_, format, std::forward<Args>(args)...);
    std::fputc('\n', stream_);
    std::fflush(stream_);
  }
  bool enabled() const { return enabled_; }
  bool progress_bar() const { return bar_; }

  // Redraws the bar (at most 10 times a second, and always at the last step):
  // "  120/300 [=======>        ]  40%  8.3 steps/s  ETA 0:00:21  loss 0.5210".
  // The note is made only when the bar is drawn (it may read the device).
  void progress(std::int64_t done, std::int64_t total, double seconds_elapsed,
                const std::function<std::string()>& note) const;
  // Erases the bar (before the final lines, or on exit).
  void clear_bar() const;

 private:
  bool enabled_;
  bool bar_;
  std::FILE* stream_ = stdout;  // stderr in interactive_infer, whose stdout holds only answers
  mutable bool drawn_ = false;
  mutable std::chrono::steady_clock::time_point last_draw_{};
};

// 1.5 s -> "0:00:01.500000", OpenSeq2Seq's "time per step" format.
std::string format_duration(double seconds);

// The bar line without terminal control characters (for tests).
std::string format_progress(std::int64_t done, std::int64_t total, double seconds_elapsed,
                            std::string_view note, int width);

}  // namespace rig::engine
