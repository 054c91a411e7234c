// `rig report LOGDIR`: one self-contained HTML file (inline SVG charts, no
// external scripts, fonts or styles) of a run's metrics.jsonl and config.yaml.
#pragma once

#include <filesystem>

namespace rig::report {

// Writes the report to `output` (default LOGDIR/report.html when empty) and
// returns its path. Throws UserError when LOGDIR holds no metrics.jsonl or
// the file is unreadable (naming the file and line).
std::filesystem::path write_report(const std::filesystem::path& logdir,
                                   const std::filesystem::path& output);

}  // namespace rig::report
