#include "engine/console.hpp"

#include <cmath>
#include <cstdint>

namespace rig::engine {

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
