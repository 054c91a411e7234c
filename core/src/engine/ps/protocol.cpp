#include "engine/ps/protocol.hpp"

#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

namespace rig::engine::ps {

std::string_view kind_name(std::int32_t kind) {
  switch (static_cast<Kind>(kind)) {
    case Kind::init:
      return "init";
    case Kind::push:
      return "push";
    case Kind::pull:
      return "pull";
    case Kind::weights:
      return "weights";
    case Kind::snapshot:
      return "snapshot";
    case Kind::state:
      return "state";
    case Kind::done:
      return "done";
  }
  return "unknown";
}

PsMessage message(Kind kind, int peer, std::int64_t clock, std::int64_t offset,
                  std::int64_t count) {
  PsMessage m;
  m.kind = static_cast<std::int32_t>(kind);
  m.peer = peer;
  m.clock = clock;
  m.offset = offset;
  m.count = count;
  return m;
}

Tensor host_contiguous(const Tensor& t) {
  return t.device().is_cpu() && t.is_contiguous() ? t : t.contiguous().to_host();
}

std::vector<std::byte> bytes_of(const Tensor& t) {
  const Tensor host = host_contiguous(t);
  const std::byte* begin = host.raw_data();
  std::vector<std::byte> bytes;
  bytes.reserve(host.nbytes() + kPsPayloadRoom);
  bytes.assign(begin, begin + host.nbytes());
  return bytes;
}

void copy_floats(const PsMessage& m, Tensor dst) {
  const auto expected = static_cast<std::size_t>(dst.numel()) * sizeof(float);
  if (m.payload.size() != expected) {
    throw std::runtime_error(fmt::format(
        "parameter server: a {} message from process {} holds {} bytes, expected {} ({} floats)",
        kind_name(m.kind), m.peer, m.payload.size(), expected, dst.numel()));
  }
  if (expected > 0) std::memcpy(dst.data<float>(), m.payload.data(), expected);
}

const Tensor& Pack::at(const std::string& name) const {
  for (const auto& [n, t] : tensors) {
    if (n == name) return t;
  }
  throw std::runtime_error(fmt::format("parameter server: the message holds no tensor '{}'", name));
}

std::vector<std::byte> pack(const YAML::Node& meta, const NamedTensors& tensors) {
  YAML::Node header;
  header["meta"] = meta;
  std::vector<Tensor> hosts;
  for (const auto& [name, t] : tensors) {
    YAML::Node entry;
    entry["name"] = name;
    entry["dtype"] = static_cast<int>(t.dtype());
    entry["numel"] = t.numel();
    header["tensors"].push_back(entry);
    hosts.push_back(host_contiguous(t));
  }
  YAML::Emitter out;
  out << YAML::Flow << header;
  const std::string text = out.c_str();
  const std::uint64_t length = text.size();
  std::size_t total = sizeof length + text.size();
  for (const Tensor& h : hosts) total += h.nbytes();
  // Sized once (with the transport's room): growing by insertion could hold
  // twice the tensors' bytes.
  std::vector<std::byte> bytes;
  bytes.reserve(total + kPsPayloadRoom);
  bytes.resize(total);
  std::memcpy(bytes.data(), &length, sizeof length);
  std::memcpy(bytes.data() + sizeof length, text.data(), text.size());
  std::size_t at = sizeof length + text.size();
  for (const Tensor& h : hosts) {
    if (h.nbytes() > 0) std::memcpy(bytes.data() + at, h.raw_data(), h.nbytes());
    at += h.nbytes();
  }
  return bytes;
}

Pack unpack(const std::vector<std::byte>& payload) {
  std::uint64_t length = 0;
  if (payload.size() < sizeof length) throw std::runtime_error("parameter server: empty pack");
  std::memcpy(&length, payload.data(), sizeof length);
  if (payload.size() - sizeof length < length) {
    throw std::runtime_error("parameter server: a pack shorter than its header");
  }
  const std::string text(reinterpret_cast<const char*>(payload.data() + sizeof length), length);
  const YAML::Node header = YAML::Load(text);
  Pack p;
  p.meta = header["meta"];
  std::size_t at = sizeof length + length;
  for (const auto& entry : header["tensors"]) {
    const auto name = entry["name"].as<std::string>();
    const auto dtype = static_cast<DType>(entry["dtype"].as<int>());
    const auto numel = entry["numel"].as<std::int64_t>();
    Tensor t = Tensor::empty({numel}, dtype, Device::cpu());
    if (payload.size() - at < t.nbytes()) {
      throw std::runtime_error(fmt::format("parameter server: a pack cut short in '{}'", name));
    }
    if (t.nbytes() > 0) std::memcpy(t.raw_data(), payload.data() + at, t.nbytes());
    at += t.nbytes();
    p.tensors.emplace_back(name, std::move(t));
  }
  return p;
}

}  // namespace rig::engine::ps
