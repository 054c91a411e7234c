// The report's summary table: steps, final and best losses and eval metrics,
// mean throughput and step time.
#pragma once

#include <string>

#include "report/metrics_file.hpp"

namespace rig::report {

// An HTML <table>.
std::string summary_table(const Metrics& metrics);

}  // namespace rig::report
