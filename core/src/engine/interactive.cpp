#include "engine/interactive.hpp"

#include <string>
#include <vector>

#include <fmt/format.h>

#include "engine/activity.hpp"
#include "rig/error.hpp"

namespace rig::engine {

std::int64_t interactive_infer(Model& model, const DataLayer& data, std::istream& in,
                               std::ostream& out, const Console& console) {
  const ActivityScope activity("inference");
  NoGradGuard no_grad;
  // A data layer that does not support this mode refuses before any input is read.
  data.encode_lines({});
  std::int64_t answered = 0;
  std::string line;
  while (std::getline(in, line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    std::vector<std::string> answer;
    try {
      const Batch batch = data.encode_lines({line});
      answer = data.decode(batch, model.infer(batch));
    } catch (const UserError& e) {
      console.print("error: {}", e.what());
      continue;
    }
    if (answer.size() != 1) {
      throw RunError(fmt::format("data layer decoded {} lines for one input line", answer.size()));
    }
    out << answer.front() << '\n' << std::flush;
    ++answered;
  }
  return answered;
}

}  // namespace rig::engine
