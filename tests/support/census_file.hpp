// Reads a kernel census file (RIG_CUDA_CENSUS, core/cuda/backend/kernel_census.hpp)
// in the tests: each line's fields by what it counts.
#pragma once

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

namespace rig_test {

// One census line: launches, elements, bytes, flops, and ms ("-" where not timed).
struct CensusFields {
  std::string launches, elements, bytes, flops, ms;
  // "launches elements bytes flops", as the counting tests compare them.
  std::string counts() const { return launches + " " + elements + " " + bytes + " " + flops; }
};

inline std::map<std::string, CensusFields> read_census_file(const std::filesystem::path& file) {
  std::map<std::string, CensusFields> lines;
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    CensusFields f;
    std::string* fields[] = {&f.launches, &f.elements, &f.bytes, &f.flops, &f.ms};
    std::size_t at = 0;
    for (std::string* field : fields) {
      const std::size_t tab = line.find('\t', at);
      if (tab == std::string::npos) break;
      *field = line.substr(at, tab - at);
      at = tab + 1;
    }
    lines[line.substr(at)] = f;
  }
  return lines;
}

}  // namespace rig_test
