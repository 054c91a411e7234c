#include "launch/launcher_env.hpp"

#include <charconv>
#include <cstdlib>
#include <initializer_list>
#include <optional>
#include <string_view>

namespace rig::launch {

namespace {

// The first of `names` set to a whole number >= `minimum`.
std::optional<int> first_number(std::initializer_list<const char*> names, int minimum) {
  for (const char* name : names) {
    const char* value = std::getenv(name);
    if (value == nullptr) continue;
    const std::string_view text(value);
    int number = 0;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), number);
    if (error == std::errc() && end == text.data() + text.size() && number >= minimum) {
      return number;
    }
  }
  return std::nullopt;
}

}  // namespace

int launcher_world_size() {
  return first_number({"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS"}, 2).value_or(1);
}

bool started_by_launcher() {
  return first_number({"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS"}, 1).has_value();
}

int launcher_local_rank() {
  return first_number({"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"}, 0)
      .value_or(0);
}

}  // namespace rig::launch
