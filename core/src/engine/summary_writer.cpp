#include "engine/summary_writer.hpp"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "formats/tfevents.hpp"
#include "rig/error.hpp"

namespace rig::engine {
namespace {

namespace fs = std::filesystem;

double unix_seconds_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

// TensorFlow's naming: events.out.tfevents.<seconds>.<host>.<pid>.<n>, where n
// tells apart writers of one process; an existing name is never reused.
fs::path new_event_file_path(const fs::path& logdir, double wall_time) {
  static std::atomic<int> counter{0};
  const auto seconds = static_cast<long long>(wall_time);
  const std::string host = host_name();
  const long pid = static_cast<long>(getpid());
  for (;;) {
    fs::path path =
        logdir / fmt::format("events.out.tfevents.{:010d}.{}.{}.{}", seconds, host, pid, counter++);
    if (!fs::exists(path)) return path;
  }
}

void check_written(const std::ofstream& out, const fs::path& path) {
  if (!out) throw RunError(fmt::format("cannot write {} (disk full?)", path.string()));
}

}  // namespace

SummaryWriter::SummaryWriter(const fs::path& logdir) {
  std::error_code ec;
  fs::create_directories(logdir, ec);
  const double now = unix_seconds_now();
  event_path_ = new_event_file_path(logdir, now);
  events_.open(event_path_, std::ios::binary | std::ios::out | std::ios::trunc);
  if (!events_) {
    throw UserError(fmt::format("cannot create the TensorBoard event file {}; is logdir writable?",
                                event_path_.string()));
  }
  const fs::path jsonl_path = logdir / "metrics.jsonl";
  jsonl_.open(jsonl_path, std::ios::out | std::ios::app);
  if (!jsonl_) {
    throw UserError(
        fmt::format("cannot open {} for appending; is logdir writable?", jsonl_path.string()));
  }
  events_ << formats::tfevents::frame_record(formats::tfevents::file_version_event(now));
  events_.flush();
  check_written(events_, event_path_);
}

SummaryWriter::~SummaryWriter() {
  events_.flush();
  jsonl_.flush();
}

void SummaryWriter::write(std::int64_t step, const Scalars& scalars) {
  const double now = unix_seconds_now();
  events_ << formats::tfevents::frame_record(formats::tfevents::scalars_event(now, step, scalars));

  nlohmann::ordered_json line = nlohmann::ordered_json::object();
  line["step"] = step;
  line["wall_time"] = now;
  for (const auto& [tag, value] : scalars) {
    if (std::isfinite(value)) {
      line[tag] = value;
    } else {
      line[tag] = nullptr;  // JSON has no NaN or infinity
    }
  }
  jsonl_ << line.dump() << '\n';
  // Flushed per write (every save_summaries_steps, so cheap): TensorBoard and
  // `rig report` see the values live, and a crash loses none of them.
  flush();
}

void SummaryWriter::session_start(std::int64_t step) {
  events_ << formats::tfevents::frame_record(
      formats::tfevents::session_start_event(unix_seconds_now(), step));
  flush();
}

void SummaryWriter::flush() {
  events_.flush();
  jsonl_.flush();
  check_written(events_, event_path_);
  check_written(jsonl_, event_path_.parent_path() / "metrics.jsonl");
}

}  // namespace rig::engine
