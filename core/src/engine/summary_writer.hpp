// Scalars written by rank 0 every save_summaries_steps: TensorBoard event
// files (logdir/events.out.tfevents.*) and the same values as one JSON object
// per line in logdir/metrics.jsonl.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

namespace rig::engine {

using Scalars = std::vector<std::pair<std::string, double>>;

class SummaryWriter {
 public:
  // Creates logdir/events.out.tfevents.<unix seconds>.<hostname>.<pid>.<n> (a
  // new file per run, first record the file_version event) and opens
  // logdir/metrics.jsonl for appending (a resumed run continues the file).
  explicit SummaryWriter(const std::filesystem::path& logdir);
  SummaryWriter(const SummaryWriter&) = delete;
  SummaryWriter& operator=(const SummaryWriter&) = delete;
  ~SummaryWriter();

  // One Event with one simple_value per tag, and one line
  // {"step": N, "wall_time": T, "<tag>": value, ...}. Non-finite values are
  // written as TensorBoard does (NaN / inf floats) and as null in JSON.
  void write(std::int64_t step, const Scalars& scalars);
  void flush();
  // A resumed run's first new step is `step`: TensorBoard forgets the earlier
  // files' values from that step on (metrics.jsonl readers keep the last line per
  // step instead).
  void session_start(std::int64_t step);

  const std::filesystem::path& event_file() const { return event_path_; }

 private:
  std::filesystem::path event_path_;
  std::ofstream events_;
  std::ofstream jsonl_;
};

}  // namespace rig::engine
