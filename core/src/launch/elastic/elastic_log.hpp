// The record of an elastic job's attempts: LOGDIR/elastic.yaml (rewritten
// after every change, read by `rig report`), and one elastic/* line in
// LOGDIR/metrics.jsonl per restart.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace rig::launch::elastic {

struct Attempt {
  std::string hosts;  // "a:2,b:1"
  int processes = 0;
  int iter_size = 0;
  std::optional<std::int64_t> resumed_from;  // the checkpoint's step; none: from scratch
  double started_s = 0.0;                    // since the supervisor started
  std::optional<double> ended_s;
  std::optional<int> exit_code;
  std::string failure;                  // what failed; empty while it runs or once it finished
  std::string left_out;                 // what the supervisor left out after it
  std::int64_t lost_steps = 0;          // steps past the newest checkpoint when it failed
  std::optional<double> downtime_s;     // from its failure to the next attempt's first step
  std::optional<std::int64_t> reached;  // the last step it finished
};

struct ElasticRecord {
  int micro_batches = 0;  // processes x iter_size, kept by every attempt
  int max_restarts = 0;
  std::vector<Attempt> attempts;
  std::string outcome;  // finished / stopped / gave up: why

  int restarts() const { return attempts.empty() ? 0 : static_cast<int>(attempts.size()) - 1; }
  std::int64_t lost_steps() const;
  double downtime_s() const;
};

void write_elastic_yaml(const std::filesystem::path& logdir, const ElasticRecord& record);
std::optional<ElasticRecord> read_elastic_yaml(const std::filesystem::path& file);
// {"step": step, "wall_time": ..., "elastic/restarts": ..., "elastic/lost_steps": ...,
//  "elastic/downtime_s": ...} appended to LOGDIR/metrics.jsonl.
void append_elastic_metrics(const std::filesystem::path& logdir, std::int64_t step,
                            const ElasticRecord& record);

}  // namespace rig::launch::elastic
