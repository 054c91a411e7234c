#include "engine/inferencer.hpp"

#include <algorithm>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "engine/activity.hpp"
#include "engine/gather_lines.hpp"
#include "rig/error.hpp"

namespace rig::engine {

std::int64_t infer(Model& model, DataLayer& data, Communicator& comm,
                   const std::filesystem::path& output) {
  const ActivityScope activity("inference");
  NoGradGuard no_grad;
  IndexedLines lines;
  data.start_epoch(0);
  while (auto batch = data.next_batch()) {
    std::vector<std::string> decoded = data.decode(*batch, model.infer(*batch));
    if (decoded.size() != batch->indices.size()) {
      throw RunError(fmt::format("data layer decoded {} lines for a batch of {} samples",
                                 decoded.size(), batch->indices.size()));
    }
    for (std::size_t i = 0; i < decoded.size(); ++i) {
      lines[batch->indices[i]] = std::move(decoded[i]);
    }
  }
  // Each rank decoded its share; rank 0 writes them all, in input order.
  lines = gather_lines(comm, std::move(lines));
  if (comm.rank() != 0) return 0;
  if (output.has_parent_path()) std::filesystem::create_directories(output.parent_path());
  std::ofstream out(output);
  if (!out) throw UserError(fmt::format("cannot write infer output file {}", output.string()));
  for (const auto& [index, line] : lines) out << line << '\n';
  out.close();
  if (!out) throw RunError(fmt::format("writing {} failed", output.string()));
  return static_cast<std::int64_t>(lines.size());
}

}  // namespace rig::engine
