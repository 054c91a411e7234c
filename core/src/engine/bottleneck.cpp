#include "engine/bottleneck.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace rig::engine {
namespace {

std::string milliseconds(double seconds) {
  if (seconds < 1e-3) return fmt::format("{:.1f} us", seconds * 1e6);
  return fmt::format("{:.1f} ms", seconds * 1e3);
}

std::string megabytes(double bytes) {
  if (bytes < 1e4) return fmt::format("{:.0f} bytes", bytes);
  return fmt::format("{:.2f} MB", bytes / 1e6);
}

double share(double part, double whole) {
  return whole > 0.0 ? part / whole : 0.0;
}

}  // namespace

std::string bottleneck_of(const StepCosts& c) {
  const double data = share(c.data, c.step);
  const double network = c.world_size > 1 ? share(c.communication, c.step) : 0.0;
  if (network >= kWaitShare && network >= data) return "network";
  if (data >= kWaitShare) return "data";
  return "compute";
}

double bus_bandwidth(const StepCosts& c) {
  if (c.world_size < 2 || c.comm_busy <= 0.0) return 0.0;
  const double n = c.world_size;
  return c.comm_bytes / c.comm_busy * 2.0 * (n - 1.0) / n;
}

double hidden_fraction(const StepCosts& c) {
  if (c.comm_busy <= 0.0) return 0.0;
  return std::clamp((c.comm_busy - c.communication) / c.comm_busy, 0.0, 1.0);
}

std::string describe_bottleneck(const StepCosts& c) {
  const double compute = std::max(0.0, c.step - c.data - c.communication);
  std::string text = fmt::format(
      "{}-bound. A step took {}: compute {} ({:.1f}%), waiting for data {} ({:.1f}%)",
      bottleneck_of(c), milliseconds(c.step), milliseconds(compute), 100.0 * share(compute, c.step),
      milliseconds(c.data), 100.0 * share(c.data, c.step));
  if (c.parameter_server) {
    return text + fmt::format(
                      ", waiting for the parameter servers {} ({:.1f}%): {} per step pushed and "
                      "pulled by each worker",
                      milliseconds(c.communication), 100.0 * share(c.communication, c.step),
                      megabytes(c.comm_bytes));
  }
  if (c.world_size < 2) return text + " (one process: no gradient reduction)";
  text += fmt::format(
      ", waiting for the gradient reduction {} ({:.1f}%). Reduction: {} per step over {} "
      "ranks, {} busy, bus bandwidth {:.1f} MB/s, {:.0f}% of it hidden behind backward",
      milliseconds(c.communication), 100.0 * share(c.communication, c.step),
      megabytes(c.comm_bytes), c.world_size, milliseconds(c.comm_busy), bus_bandwidth(c) / 1e6,
      100.0 * hidden_fraction(c));
  // A few kilobytes per step cannot fill any link: the wait is per-operation
  // latency (and rank skew), which more bandwidth would not fix.
  if (bottleneck_of(c) == "network" && c.comm_bytes < kLatencyBytes) {
    text += fmt::format(
        "; with under {} per step this is the latency of each collective, not the link's "
        "bandwidth",
        megabytes(kLatencyBytes));
  }
  return text;
}

}  // namespace rig::engine
