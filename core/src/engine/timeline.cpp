#include "engine/timeline.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "rig/error.hpp"

namespace rig::engine {

Timeline::Timeline(const std::filesystem::path& file, int rank)
    : origin_(Clock::now()), rank_(rank) {
  if (file.empty()) return;
  out_.open(file, std::ios::out | std::ios::trunc);
  if (!out_) {
    throw UserError(fmt::format(
        "cannot write the --timeline file {}; does its folder exist and is it writable?",
        file.string()));
  }
  out_ << "{\"traceEvents\":[";
}

Timeline::~Timeline() {
  // Runs during unwinding too, so a failed run still leaves valid JSON.
  if (out_.is_open()) out_ << "\n]}\n";
}

void Timeline::phase(std::string_view name, std::int64_t step, Clock::time_point begin,
                     Clock::time_point end) {
  if (!out_.is_open()) return;
  using Micros = std::chrono::duration<double, std::micro>;
  nlohmann::ordered_json event = {{"name", std::string(name)},
                                  {"cat", "step"},
                                  {"ph", "X"},
                                  {"ts", Micros(begin - origin_).count()},
                                  {"dur", Micros(end - begin).count()},
                                  {"pid", rank_},
                                  {"tid", 0},
                                  {"args", {{"step", step}}}};
  out_ << (first_ ? "\n" : ",\n") << event.dump();
  first_ = false;
}

}  // namespace rig::engine
