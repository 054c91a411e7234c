// Reading and writing files of lines, with errors that name the file.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace rig::prepare {

// Every line of `file` (without its '\n'); rig::UserError when it cannot be read.
std::vector<std::string> read_lines(const std::filesystem::path& file);
// Writes one line per element; rig::RunError when it cannot be written.
void write_lines(const std::filesystem::path& file, const std::vector<std::string>& lines);

}  // namespace rig::prepare
