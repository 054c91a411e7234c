#include "line_files.hpp"

#include <fstream>

#include <fmt/format.h>

#include "rig/error.hpp"

namespace rig::prepare {

std::vector<std::string> read_lines(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw rig::UserError(fmt::format("{}: cannot be read", file.string()));
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(std::move(line));
  if (in.bad()) throw rig::UserError(fmt::format("{}: read error", file.string()));
  return lines;
}

void write_lines(const std::filesystem::path& file, const std::vector<std::string>& lines) {
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  for (const std::string& line : lines) out << line << '\n';
  out.flush();
  if (!out) throw rig::RunError(fmt::format("{}: cannot be written", file.string()));
}

}  // namespace rig::prepare
