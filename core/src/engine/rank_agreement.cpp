#include "engine/rank_agreement.hpp"

#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "config/resolved_config.hpp"

namespace rig::engine {
namespace {

// FNV-1a hashes travel as i64, bit for bit.
std::int64_t hash_of(const std::string& text) {
  return static_cast<std::int64_t>(config::fnv1a64(text));
}

}  // namespace

void check_ranks_agree(Communicator& comm, const RankIdentity& mine) {
  const int size = comm.size();
  if (size == 1) return;
  const Tensor own = Tensor::from_vector(
      std::vector<std::int64_t>{hash_of(mine.config_yaml), hash_of(mine.plugins), mine.parameters},
      {3});
  Tensor all = Tensor::zeros({3 * size}, DType::i64);
  comm.allgather(own, all)->wait();
  const std::vector<std::int64_t> v = all.to_int_vector();
  std::vector<std::string> differences;
  for (int r = 1; r < size; ++r) {
    const auto at = static_cast<std::size_t>(3 * r);
    if (v[at] != v[0]) {
      differences.push_back(fmt::format(
          "rank {} resolved a different config (check the experiment file and the command-line "
          "overrides on its host)",
          r));
    }
    if (v[at + 1] != v[1]) {
      differences.push_back(fmt::format(
          "rank {} loaded other plugin versions (install the same rig build on every host)", r));
    }
    if (v[at + 2] != v[2]) {
      differences.push_back(
          fmt::format("rank {} has {} parameters, rank 0 has {}", r, v[at + 2], v[2]));
    }
  }
  if (differences.empty()) return;
  throw RanksDisagree(fmt::format("the {} ranks do not run the same experiment: {}", size,
                                  fmt::join(differences, "; ")));
}

}  // namespace rig::engine
