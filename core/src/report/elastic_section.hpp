// The report's "Elastic restarts" section, from LOGDIR/elastic.yaml (written
// by `rig run --elastic`); empty for runs without it.
#pragma once

#include <filesystem>
#include <string>

namespace rig::report {

std::string elastic_section(const std::filesystem::path& logdir);

}  // namespace rig::report
