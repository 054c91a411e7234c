// TensorBoard event files, written without protobuf or TensorFlow: the
// Event / Summary messages of tensorflow/core/util/event.proto and
// tensorflow/core/framework/summary.proto encoded by hand (only the fields rig
// writes), each in a TFRecord frame.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>

namespace rig::formats::tfevents {

// The version string TensorBoard expects in a file's first event.
inline constexpr std::string_view kFileVersion = "brain.Event:2";

// Event{wall_time, file_version}.
std::string file_version_event(double wall_time);
// Event{wall_time, step, summary{value{tag, simple_value}...}}: one
// simple_value (a float, as TensorBoard stores scalars) per pair.
std::string scalars_event(double wall_time, std::int64_t step,
                          std::span<const std::pair<std::string, double>> scalars);
// Event{wall_time, step, session_log{status: START}}: TensorBoard then drops
// the events of earlier files at or after `step` (a resumed run's restart).
std::string session_start_event(double wall_time, std::int64_t step);
// A TFRecord: uint64 length (little-endian), masked CRC-32C of those 8 bytes,
// the data, masked CRC-32C of the data.
std::string frame_record(std::string_view data);

}  // namespace rig::formats::tfevents
