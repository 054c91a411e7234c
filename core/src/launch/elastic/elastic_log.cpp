#include "launch/elastic/elastic_log.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <fstream>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>
#include <nlohmann/json.hpp>

#include "rig/error.hpp"

namespace rig::launch::elastic {
namespace fs = std::filesystem;

std::int64_t ElasticRecord::lost_steps() const {
  std::int64_t total = 0;
  for (const auto& a : attempts) total += a.lost_steps;
  return total;
}

double ElasticRecord::downtime_s() const {
  double total = 0.0;
  for (const auto& a : attempts) total += a.downtime_s.value_or(0.0);
  return total;
}

void write_elastic_yaml(const fs::path& logdir, const ElasticRecord& record) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  out << YAML::Key << "micro_batches_per_step" << YAML::Value << record.micro_batches;
  out << YAML::Key << "max_restarts" << YAML::Value << record.max_restarts;
  out << YAML::Key << "restarts" << YAML::Value << record.restarts();
  out << YAML::Key << "lost_steps" << YAML::Value << record.lost_steps();
  out << YAML::Key << "downtime_s" << YAML::Value << fmt::format("{:.3f}", record.downtime_s());
  out << YAML::Key << "outcome" << YAML::Value << record.outcome;
  out << YAML::Key << "attempts" << YAML::Value << YAML::BeginSeq;
  for (const auto& a : record.attempts) {
    out << YAML::BeginMap;
    out << YAML::Key << "hosts" << YAML::Value << a.hosts;
    out << YAML::Key << "processes" << YAML::Value << a.processes;
    out << YAML::Key << "iter_size" << YAML::Value << a.iter_size;
    out << YAML::Key << "resumed_from" << YAML::Value;
    if (a.resumed_from) {
      out << *a.resumed_from;
    } else {
      out << YAML::Null;
    }
    out << YAML::Key << "started_s" << YAML::Value << fmt::format("{:.3f}", a.started_s);
    if (a.ended_s)
      out << YAML::Key << "ended_s" << YAML::Value << fmt::format("{:.3f}", *a.ended_s);
    if (a.exit_code) out << YAML::Key << "exit_code" << YAML::Value << *a.exit_code;
    if (a.reached) out << YAML::Key << "reached_step" << YAML::Value << *a.reached;
    if (!a.failure.empty()) out << YAML::Key << "failure" << YAML::Value << a.failure;
    if (!a.left_out.empty()) out << YAML::Key << "left_out" << YAML::Value << a.left_out;
    out << YAML::Key << "lost_steps" << YAML::Value << a.lost_steps;
    if (a.downtime_s) {
      out << YAML::Key << "downtime_s" << YAML::Value << fmt::format("{:.3f}", *a.downtime_s);
    }
    out << YAML::EndMap;
  }
  out << YAML::EndSeq << YAML::EndMap;
  std::error_code ec;
  fs::create_directories(logdir, ec);
  const fs::path file = logdir / "elastic.yaml";
  const fs::path temp = logdir / ".elastic.yaml.tmp";
  {
    std::ofstream f(temp, std::ios::trunc);
    f << out.c_str() << "\n";
    if (!f) throw RunError(fmt::format("cannot write {}; is the logdir writable?", temp.string()));
  }
  fs::rename(temp, file, ec);
  if (ec) throw RunError(fmt::format("cannot write {}: {}", file.string(), ec.message()));
}

std::optional<ElasticRecord> read_elastic_yaml(const fs::path& file) {
  if (!fs::exists(file)) return std::nullopt;
  ElasticRecord record;
  try {
    const YAML::Node root = YAML::LoadFile(file.string());
    record.micro_batches = root["micro_batches_per_step"].as<int>(0);
    record.max_restarts = root["max_restarts"].as<int>(0);
    record.outcome = root["outcome"].as<std::string>("");
    for (const auto& n : root["attempts"]) {
      Attempt a;
      a.hosts = n["hosts"].as<std::string>("");
      a.processes = n["processes"].as<int>(0);
      a.iter_size = n["iter_size"].as<int>(0);
      if (n["resumed_from"] && !n["resumed_from"].IsNull()) {
        a.resumed_from = n["resumed_from"].as<std::int64_t>();
      }
      a.started_s = n["started_s"].as<double>(0.0);
      if (n["ended_s"]) a.ended_s = n["ended_s"].as<double>();
      if (n["exit_code"]) a.exit_code = n["exit_code"].as<int>();
      if (n["reached_step"]) a.reached = n["reached_step"].as<std::int64_t>();
      a.failure = n["failure"].as<std::string>("");
      a.left_out = n["left_out"].as<std::string>("");
      a.lost_steps = n["lost_steps"].as<std::int64_t>(0);
      if (n["downtime_s"]) a.downtime_s = n["downtime_s"].as<double>();
      record.attempts.push_back(a);
    }
  } catch (const YAML::Exception& e) {
    throw UserError(
        fmt::format("{} is not a readable elastic record: {}", file.string(), e.what()));
  }
  return record;
}

void append_elastic_metrics(const fs::path& logdir, std::int64_t step,
                            const ElasticRecord& record) {
  nlohmann::ordered_json line = nlohmann::ordered_json::object();
  line["step"] = step;
  line["wall_time"] =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  line["elastic/restarts"] = record.restarts();
  line["elastic/lost_steps"] = record.lost_steps();
  line["elastic/downtime_s"] = record.downtime_s();
  const std::string text = line.dump() + "\n";
  // One O_APPEND write: the job's rank 0 may be appending its own lines.
  const fs::path file = logdir / "metrics.jsonl";
  const int fd = ::open(file.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return;  // the record in elastic.yaml still holds it
  const ssize_t ignored = ::write(fd, text.data(), text.size());
  (void)ignored;
  ::close(fd);
}

}  // namespace rig::launch::elastic
