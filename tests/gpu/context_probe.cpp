#include "context_probe.hpp"

#include "simt/emulator.hpp"

namespace rig_gpu_test {

ProbeOutputs emulate_context_probe(const rig::simt::LaunchShape& shape,
                                   const std::vector<float>& x) {
  const std::size_t threads = shape.grid.count() * shape.block.count();
  ProbeOutputs out{std::vector<std::uint32_t>(4 * threads), std::vector<float>(3 * threads),
                   std::vector<float>(4 * shape.grid.count())};
  rig::simt::emulate(
      shape, ContextProbe{x.data(), out.ids.data(), out.shuffled.data(), out.reduced.data()});
  return out;
}

}  // namespace rig_gpu_test
