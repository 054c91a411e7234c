#include "engine/console.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "launch/launcher_env.hpp"
#include "rig/error.hpp"

namespace rig::engine {
namespace {

bool wants_bar(ProgressBar mode) {
  if (mode != ProgressBar::automatic) return mode == ProgressBar::on;
  if (const char* env = std::getenv("RIG_PROGRESS")) return std::strcmp(env, "0") != 0;
  return isatty(fileno(stdout)) == 1 && !launch::started_by_launcher();
}

// H:MM:SS, rounded to seconds.
std::string format_eta(double seconds) {
  const auto s = static_cast<std::int64_t>(std::llround(std::max(0.0, seconds)));
  return fmt::format("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60);
}

}  // namespace

ProgressBar parse_progress_bar(const std::string& text) {
  if (text == "auto") return ProgressBar::automatic;
  if (text == "on") return ProgressBar::on;
  if (text == "off") return ProgressBar::off;
  throw UserError(fmt::format("--progress {}: expected auto, on or off", text));
}

Console::Console(bool enabled, ProgressBar mode) : Console(enabled, wants_bar(mode)) {}

std::string format_progress(std::int64_t done, std::int64_t total, double seconds_elapsed,
                            std::string_view note, int width) {
  const double fraction =
      total > 0 ? std::clamp(static_cast<double>(done) / static_cast<double>(total), 0.0, 1.0)
                : 0.0;
  const int filled = static_cast<int>(fraction * width);
  std::string bar(static_cast<std::size_t>(width), ' ');
  std::fill_n(bar.begin(), filled, '=');
  if (filled < width && filled > 0) bar[static_cast<std::size_t>(filled) - 1] = '>';
  const double rate = seconds_elapsed > 0.0 ? static_cast<double>(done) / seconds_elapsed : 0.0;
  const std::string eta =
      rate > 0.0 ? format_eta(static_cast<double>(total - done) / rate) : std::string("?");
  std::string line =
      fmt::format("{:>{}}/{} [{}] {:3.0f}%  {:.1f} steps/s  ETA {}", done,
                  std::to_string(total).size(), total, bar, fraction * 100.0, rate, eta);
  if (!note.empty()) line += fmt::format("  {}", note);
  return line;
}

void Console::progress(std::int64_t done, std::int64_t total, double seconds_elapsed,
                       const std::function<std::string()>& note) const {
  if (!bar_) return;
  const auto now = std::chrono::steady_clock::now();
  if (done < total && drawn_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  // \r and "erase to end of line" so a shorter line leaves no debris.
  fmt::print("\r{}\x1b[K", format_progress(done, total, seconds_elapsed, note(), 30));
  std::fflush(stdout);
  drawn_ = true;
}

void Console::clear_bar() const {
  if (!drawn_) return;
  std::fputs("\r\x1b[K", stdout);
  std::fflush(stdout);
  drawn_ = false;
}

std::string format_duration(double seconds) {
  // Python's str(timedelta), which OpenSeq2Seq printed: H:MM:SS.ffffff.
  auto micros = static_cast<std::int64_t>(std::llround(seconds * 1e6));
  const std::int64_t hours = micros / 3'600'000'000;
  micros %= 3'600'000'000;
  const std::int64_t minutes = micros / 60'000'000;
  micros %= 60'000'000;
  return fmt::format("{}:{:02}:{:02}.{:06}", hours, minutes, micros / 1'000'000,
                     micros % 1'000'000);
}

}  // namespace rig::engine
