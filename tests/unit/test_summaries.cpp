// SummaryWriter and Timeline: the event file is decoded here by an
// independent reader (its own bitwise CRC-32C, its own protobuf decoder), every
// length and data CRC checked; metrics.jsonl and the Chrome trace are parsed
// as JSON.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/summary_writer.hpp"
#include "engine/timeline.hpp"
#include "user_error_of.hpp"

namespace {

namespace fs = std::filesystem;
using rig::engine::Scalars;
using rig::engine::SummaryWriter;
using rig::engine::Timeline;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// A fresh folder per test (ctest may run tests in parallel).
fs::path fresh_dir() {
  const auto* info = testing::UnitTest::GetInstance()->current_test_info();
  fs::path dir = fs::path(testing::TempDir()) / "rig_summaries" / info->name();
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string read_bytes(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// --- an independent TFRecord reader ---------------------------------------

// Bit by bit, no table: deliberately unlike util/crc32c.cpp.
std::uint32_t slow_crc32c(std::string_view bytes) {
  std::uint32_t crc = 0xffffffffU;
  for (unsigned char b : bytes) {
    crc ^= b;
    for (int i = 0; i < 8; ++i) crc = (crc >> 1) ^ (0x82f63b78U & (0U - (crc & 1U)));
  }
  return ~crc;
}

std::uint32_t slow_masked(std::string_view bytes) {
  const std::uint32_t crc = slow_crc32c(bytes);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8U;
}

std::uint64_t little_endian(std::string_view bytes) {
  std::uint64_t v = 0;
  for (std::size_t i = bytes.size(); i-- > 0;) v = (v << 8) | static_cast<unsigned char>(bytes[i]);
  return v;
}

// The records of a TFRecord file; throws std::runtime_error naming what is wrong.
std::vector<std::string> read_records(const std::string& file) {
  std::vector<std::string> records;
  std::size_t at = 0;
  while (at < file.size()) {
    const std::string n = std::to_string(records.size());
    if (file.size() - at < 12) throw std::runtime_error("record " + n + ": truncated header");
    const std::string_view header(file.data() + at, 8);
    if (little_endian(std::string_view(file.data() + at + 8, 4)) != slow_masked(header)) {
      throw std::runtime_error("record " + n + ": length CRC mismatch");
    }
    const std::uint64_t length = little_endian(header);
    if (file.size() - at - 12 < length + 4) throw std::runtime_error("record " + n + ": truncated");
    const std::string_view data(file.data() + at + 12, length);
    if (little_endian(std::string_view(file.data() + at + 12 + length, 4)) != slow_masked(data)) {
      throw std::runtime_error("record " + n + ": data CRC mismatch");
    }
    records.emplace_back(data);
    at += 12 + length + 4;
  }
  return records;
}

// --- an independent protobuf decoder (the wire format) ----------------------

struct Field {
  std::uint32_t number = 0;
  std::uint32_t wire_type = 0;
  std::uint64_t varint = 0;  // wire types 0, 1 (fixed64) and 5 (fixed32)
  std::string bytes;         // wire type 2
};

std::uint64_t read_varint(std::string_view msg, std::size_t& at) {
  std::uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (at >= msg.size()) throw std::runtime_error("truncated varint");
    const auto b = static_cast<unsigned char>(msg[at++]);
    v |= static_cast<std::uint64_t>(b & 0x7f) << shift;
    if ((b & 0x80) == 0) return v;
  }
  throw std::runtime_error("varint too long");
}

std::vector<Field> decode(std::string_view msg) {
  std::vector<Field> fields;
  std::size_t at = 0;
  while (at < msg.size()) {
    const std::uint64_t key = read_varint(msg, at);
    Field f;
    f.number = static_cast<std::uint32_t>(key >> 3);
    f.wire_type = static_cast<std::uint32_t>(key & 7);
    auto take = [&](std::size_t n) {
      if (msg.size() - at < n) throw std::runtime_error("truncated field");
      const std::string_view out = msg.substr(at, n);
      at += n;
      return out;
    };
    switch (f.wire_type) {
      case 0:
        f.varint = read_varint(msg, at);
        break;
      case 1:
        f.varint = little_endian(take(8));
        break;
      case 2:
        f.bytes = std::string(take(read_varint(msg, at)));
        break;
      case 5:
        f.varint = little_endian(take(4));
        break;
      default:
        throw std::runtime_error("unexpected wire type " + std::to_string(f.wire_type));
    }
    fields.push_back(std::move(f));
  }
  return fields;
}

struct Event {
  double wall_time = 0;
  std::int64_t step = 0;
  std::string file_version;
  std::vector<std::pair<std::string, float>> values;
};

// Event (event.proto): wall_time=1 double, step=2 int64, file_version=3,
// summary=5; Summary.value=1; Value.tag=1, simple_value=2 float.
Event decode_event(std::string_view msg) {
  Event e;
  for (const Field& f : decode(msg)) {
    if (f.number == 1 && f.wire_type == 1) {
      std::memcpy(&e.wall_time, &f.varint, 8);
    } else if (f.number == 2 && f.wire_type == 0) {
      e.step = static_cast<std::int64_t>(f.varint);
    } else if (f.number == 3 && f.wire_type == 2) {
      e.file_version = f.bytes;
    } else if (f.number == 5 && f.wire_type == 2) {
      for (const Field& value : decode(f.bytes)) {
        if (value.number != 1 || value.wire_type != 2) throw std::runtime_error("bad Summary");
        std::pair<std::string, float> tv{"", kNaN};
        bool has_value = false;
        for (const Field& vf : decode(value.bytes)) {
          if (vf.number == 1 && vf.wire_type == 2) {
            tv.first = vf.bytes;
          } else if (vf.number == 2 && vf.wire_type == 5) {
            const auto bits = static_cast<std::uint32_t>(vf.varint);
            std::memcpy(&tv.second, &bits, 4);
            has_value = true;
          } else {
            throw std::runtime_error("unexpected Summary.Value field");
          }
        }
        if (!has_value) throw std::runtime_error("Summary.Value without simple_value");
        e.values.push_back(tv);
      }
    } else {
      throw std::runtime_error("unexpected Event field " + std::to_string(f.number));
    }
  }
  return e;
}

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Same float bits, NaN included.
void expect_same_float(float actual, double expected, const std::string& what) {
  const auto want = static_cast<float>(expected);
  if (std::isnan(want)) {
    EXPECT_TRUE(std::isnan(actual)) << what;
  } else {
    EXPECT_EQ(actual, want) << what;
  }
}

// The scalars the writer tests (and tests/integration/check_tfevents.py) use.
const std::vector<std::pair<std::int64_t, Scalars>>& sample_writes() {
  static const std::vector<std::pair<std::int64_t, Scalars>> writes = {
      {0, {{"train_loss", 2.5}, {"learning_rate", 0.1}, {"time/forward", 0.0125}}},
      {10, {{"train_loss", 1.25}, {"learning_rate", 0.05}, {"loss_scale", 0.0}}},
      {300000, {{"train_loss", kNaN}, {"eval_loss", kInf}, {"eval_BLEU", -kInf}}},
      {5000000000LL, {{"train_loss", 0.375}, {"eval_accuracy", 0.96875}}},
  };
  return writes;
}

fs::path only_event_file(const fs::path& dir) {
  std::vector<fs::path> found;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().filename().string().starts_with("events.out.tfevents.")) {
      found.push_back(entry.path());
    }
  }
  if (found.size() != 1) throw std::runtime_error("expected one event file");
  return found.front();
}

// Writes sample_writes() into `dir` and checks the event file record by record.
void write_and_check_event_file(const fs::path& dir) {
  const double before = unix_now();
  fs::path event_path;
  {
    SummaryWriter writer(dir);
    event_path = writer.event_file();
    for (const auto& [step, scalars] : sample_writes()) writer.write(step, scalars);
  }
  const double after = unix_now();
  EXPECT_EQ(only_event_file(dir), event_path);

  const std::vector<std::string> records = read_records(read_bytes(event_path));
  ASSERT_EQ(records.size(), 1 + sample_writes().size());
  const Event first = decode_event(records[0]);
  EXPECT_EQ(first.file_version, "brain.Event:2");
  EXPECT_TRUE(first.values.empty());
  EXPECT_GE(first.wall_time, before - 1);
  EXPECT_LE(first.wall_time, after + 1);
  double previous_time = first.wall_time;
  for (std::size_t i = 0; i < sample_writes().size(); ++i) {
    const auto& [step, scalars] = sample_writes()[i];
    const Event e = decode_event(records[i + 1]);
    EXPECT_EQ(e.step, step);
    EXPECT_TRUE(e.file_version.empty());
    EXPECT_GE(e.wall_time, previous_time);
    EXPECT_LE(e.wall_time, after + 1);
    previous_time = e.wall_time;
    ASSERT_EQ(e.values.size(), scalars.size());
    for (std::size_t j = 0; j < scalars.size(); ++j) {
      EXPECT_EQ(e.values[j].first, scalars[j].first);
      expect_same_float(e.values[j].second, scalars[j].second,
                        scalars[j].first + " at step " + std::to_string(step));
    }
  }
}

TEST(SummaryWriter, EventFileDecodesWithEveryCrcChecked) {
  write_and_check_event_file(fresh_dir());
}

// With RIG_TFEVENTS_OUT=DIR the same file is left in DIR for
// tests/integration/check_tfevents.py to read with TensorBoard's own reader.
TEST(SummaryWriter, EventFileForExternalReaders) {
  const char* out = std::getenv("RIG_TFEVENTS_OUT");
  fs::path dir = fresh_dir();
  if (out != nullptr && *out != '\0') {
    // Replaces what an earlier run of this test left there, and nothing else.
    dir = out;
    fs::create_directories(dir);
    for (const auto& entry : fs::directory_iterator(dir)) {
      const std::string name = entry.path().filename().string();
      if (name.starts_with("events.out.tfevents.") || name == "metrics.jsonl") {
        fs::remove(entry.path());
      }
    }
  }
  write_and_check_event_file(dir);
}

TEST(SummaryWriter, FileNameFollowsTensorFlow) {
  const fs::path dir = fresh_dir();
  const double before = unix_now();
  SummaryWriter first(dir);
  SummaryWriter second(dir);  // a second writer never reuses a name
  EXPECT_NE(first.event_file(), second.event_file());
  const std::regex pattern(R"(events\.out\.tfevents\.(\d{10})\.(.+)\.(\d+)\.(\d+))");
  std::smatch m;
  const std::string name = first.event_file().filename().string();
  ASSERT_TRUE(std::regex_match(name, m, pattern)) << name;
  EXPECT_NEAR(std::stod(m[1].str()), before, 2.0);
  EXPECT_EQ(std::stol(m[3].str()), static_cast<long>(getpid()));
  EXPECT_EQ(first.event_file().parent_path(), dir);
}

TEST(SummaryWriter, TestReaderDetectsCorruption) {
  const fs::path dir = fresh_dir();
  {
    SummaryWriter writer(dir);
    writer.write(7, {{"train_loss", 0.5}});
  }
  const std::string good = read_bytes(only_event_file(dir));
  ASSERT_EQ(read_records(good).size(), 2U);
  const std::size_t second = read_records(good)[0].size() + 16;  // start of record 1

  auto error_of = [](const std::string& bytes) {
    try {
      read_records(bytes);
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string("<no error>");
  };
  std::string bad = good;
  bad[second + 12 + 3] ^= 0x01;  // one bit of record 1's data
  EXPECT_EQ(error_of(bad), "record 1: data CRC mismatch");
  bad = good;
  bad[second] ^= 0x01;  // its length
  EXPECT_EQ(error_of(bad), "record 1: length CRC mismatch");
  bad = good;
  bad[second + 8] ^= 0x80;  // the length's CRC itself
  EXPECT_EQ(error_of(bad), "record 1: length CRC mismatch");
  bad = good;
  bad[bad.size() - 1] ^= 0x01;  // the data CRC itself
  EXPECT_EQ(error_of(bad), "record 1: data CRC mismatch");
  EXPECT_EQ(error_of(good.substr(0, good.size() - 2)), "record 1: truncated");
  EXPECT_EQ(error_of(good.substr(0, second + 5)), "record 1: truncated header");
}

std::vector<nlohmann::ordered_json> read_jsonl(const fs::path& file) {
  std::vector<nlohmann::ordered_json> lines;
  std::ifstream in(file);
  std::string text;
  while (std::getline(in, text)) lines.push_back(nlohmann::ordered_json::parse(text));
  return lines;
}

TEST(SummaryWriter, MetricsJsonlHoldsTheSameValues) {
  const fs::path dir = fresh_dir();
  const double before = unix_now();
  {
    SummaryWriter writer(dir);
    for (const auto& [step, scalars] : sample_writes()) writer.write(step, scalars);
  }
  const auto lines = read_jsonl(dir / "metrics.jsonl");
  ASSERT_EQ(lines.size(), sample_writes().size());
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const auto& [step, scalars] = sample_writes()[i];
    const auto& line = lines[i];
    std::vector<std::string> keys;
    for (const auto& [key, value] : line.items()) keys.push_back(key);
    std::vector<std::string> expected_keys = {"step", "wall_time"};
    for (const auto& [tag, value] : scalars) expected_keys.push_back(tag);
    EXPECT_EQ(keys, expected_keys);
    EXPECT_EQ(line["step"].get<std::int64_t>(), step);
    EXPECT_NEAR(line["wall_time"].get<double>(), before, 5.0);
    for (const auto& [tag, value] : scalars) {
      if (std::isfinite(value)) {
        EXPECT_EQ(line[tag].get<double>(), value) << tag;  // full double precision
      } else {
        EXPECT_TRUE(line[tag].is_null()) << tag;
      }
    }
  }
}

TEST(SummaryWriter, ResumedRunAppendsToMetricsJsonl) {
  const fs::path dir = fresh_dir();
  {
    SummaryWriter writer(dir);
    writer.write(10, {{"train_loss", 1.0}});
  }
  {
    SummaryWriter writer(dir);
    writer.write(20, {{"train_loss", 0.5}});
    writer.flush();
    // Flushed: readable while the writer is still open.
    const auto lines = read_jsonl(dir / "metrics.jsonl");
    ASSERT_EQ(lines.size(), 2U);
    EXPECT_EQ(lines[0]["step"], 10);
    EXPECT_EQ(lines[1]["step"], 20);
    EXPECT_EQ(lines[1]["train_loss"], 0.5);
  }
  int event_files = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().filename().string().starts_with("events.out.tfevents.")) ++event_files;
  }
  EXPECT_EQ(event_files, 2);  // TensorBoard reads both, in name order
}

TEST(SummaryWriter, UnwritableLogdirIsAUserError) {
  const fs::path dir = fresh_dir();
  std::ofstream(dir / "file") << "not a folder";
  const std::string message = rig_test::user_error_of([&] { SummaryWriter w(dir / "file"); });
  EXPECT_NE(message.find((dir / "file").string()), std::string::npos) << message;
}

// --- Timeline ---------------------------------------------------------------

nlohmann::json read_json(const fs::path& file) {
  std::ifstream in(file);
  return nlohmann::json::parse(in);  // throws on invalid JSON
}

TEST(Timeline, WritesChromeTraceEvents) {
  const fs::path file = fresh_dir() / "timeline.json";
  Timeline::Clock::time_point start;
  {
    Timeline timeline(file, 3);
    EXPECT_TRUE(timeline.enabled());
    start = Timeline::Clock::now();
    using std::chrono::microseconds;
    timeline.phase("data", 1, start + microseconds(100), start + microseconds(350));
    timeline.phase("forward", 1, start + microseconds(350), start + microseconds(1350));
    timeline.phase("optimizer \"fused\"", 2, start + microseconds(2000),
                   start + microseconds(2500));
  }
  const nlohmann::json trace = read_json(file);
  const auto& events = trace.at("traceEvents");
  ASSERT_EQ(events.size(), 3U);
  const std::vector<std::string> names = {"data", "forward", "optimizer \"fused\""};
  const std::vector<double> durations = {250, 1000, 500};
  const std::vector<std::int64_t> steps = {1, 1, 2};
  for (std::size_t i = 0; i < events.size(); ++i) {
    const auto& e = events[i];
    EXPECT_EQ(e.at("name"), names[i]);
    EXPECT_EQ(e.at("cat"), "step");
    EXPECT_EQ(e.at("ph"), "X");
    EXPECT_EQ(e.at("pid"), 3);
    EXPECT_EQ(e.at("tid"), 0);
    EXPECT_EQ(e.at("args").at("step"), steps[i]);
    EXPECT_NEAR(e.at("dur").get<double>(), durations[i], 1e-3);
  }
  // ts is microseconds since the timeline was made, just before `start`.
  const double ts0 = events[0].at("ts").get<double>();
  EXPECT_GE(ts0, 100.0);
  EXPECT_LT(ts0, 100.0 + 1e6);
  EXPECT_NEAR(events[1].at("ts").get<double>() - ts0, 250.0, 1e-3);
  EXPECT_NEAR(events[2].at("ts").get<double>() - ts0, 1900.0, 1e-3);
}

TEST(Timeline, ValidJsonWhenTheRunThrows) {
  const fs::path file = fresh_dir() / "timeline.json";
  try {
    Timeline timeline(file, 0);
    const auto now = Timeline::Clock::now();
    timeline.phase("data", 5, now, now);
    throw std::runtime_error("the step failed");
  } catch (const std::runtime_error&) {
  }
  const nlohmann::json trace = read_json(file);
  ASSERT_EQ(trace.at("traceEvents").size(), 1U);
  EXPECT_EQ(trace["traceEvents"][0].at("args").at("step"), 5);
}

TEST(Timeline, EmptyAndDisabled) {
  const fs::path file = fresh_dir() / "timeline.json";
  { Timeline timeline(file, 0); }
  EXPECT_TRUE(read_json(file).at("traceEvents").empty());

  Timeline disabled({}, 0);
  EXPECT_FALSE(disabled.enabled());
  disabled.phase("data", 1, Timeline::Clock::now(), Timeline::Clock::now());  // no-op
}

TEST(Timeline, UnwritableFileIsAUserError) {
  const fs::path file = fresh_dir() / "missing" / "timeline.json";
  const std::string message = rig_test::user_error_of([&] { Timeline timeline(file, 0); });
  EXPECT_NE(message.find(file.string()), std::string::npos) << message;
}

}  // namespace
