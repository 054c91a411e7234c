#include "launch/elastic/hosts.hpp"

#include <unistd.h>

#include <charconv>
#include <fstream>
#include <map>
#include <sstream>

#include <fmt/format.h>

#include "launch/elastic/child_process.hpp"
#include "rig/error.hpp"

namespace rig::launch::elastic {
namespace {

std::string trim(const std::string& s) {
  const auto begin = s.find_first_not_of(" \t\r");
  if (begin == std::string::npos) return "";
  const auto end = s.find_last_not_of(" \t\r");
  return s.substr(begin, end - begin + 1);
}

int parse_slots(const std::string& text, const std::string& entry, const std::string& where) {
  int slots = 0;
  const auto* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, slots);
  if (ec != std::errc() || ptr != end || slots < 1) {
    throw UserError(
        fmt::format("{}: '{}' should be host or host:N with N a slot count >= 1", where, entry));
  }
  return slots;
}

void add(std::vector<HostSlots>& hosts, HostSlots entry, const std::string& where) {
  for (const auto& h : hosts) {
    if (h.host == entry.host) {
      throw UserError(fmt::format("{}: host {} is listed twice; list it once with all its slots",
                                  where, entry.host));
    }
  }
  hosts.push_back(std::move(entry));
}

// "host", "host:N" or "host slots=N".
HostSlots parse_entry(const std::string& raw, const std::string& where) {
  const std::string entry = trim(raw);
  if (const auto space = entry.find_first_of(" \t"); space != std::string::npos) {
    const std::string rest = trim(entry.substr(space));
    if (!rest.starts_with("slots=")) {
      throw UserError(fmt::format("{}: '{}' should be 'host slots=N' (or host:N)", where, entry));
    }
    return {entry.substr(0, space), parse_slots(rest.substr(6), entry, where)};
  }
  if (const auto colon = entry.rfind(':'); colon != std::string::npos) {
    if (colon == 0) throw UserError(fmt::format("{}: '{}' has no host name", where, entry));
    return {entry.substr(0, colon), parse_slots(entry.substr(colon + 1), entry, where)};
  }
  return {entry, 1};
}

}  // namespace

std::vector<HostSlots> parse_host_list(const std::string& text, const std::string& where) {
  std::vector<HostSlots> hosts;
  std::stringstream items(text);
  std::string item;
  while (std::getline(items, item, ',')) {
    if (trim(item).empty()) continue;
    add(hosts, parse_entry(item, where), where);
  }
  if (hosts.empty()) throw UserError(fmt::format("{}: no hosts in '{}'", where, text));
  return hosts;
}

std::vector<HostSlots> parse_hostfile_text(const std::string& text, const std::string& where) {
  std::vector<HostSlots> hosts;
  std::stringstream lines(text);
  std::string line;
  int number = 0;
  while (std::getline(lines, line)) {
    ++number;
    if (const auto hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    if (trim(line).empty()) continue;
    add(hosts, parse_entry(line, fmt::format("{}:{}", where, number)), where);
  }
  return hosts;
}

std::vector<HostSlots> read_hostfile(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw UserError(fmt::format("--hostfile {}: cannot read it", path));
  std::stringstream text;
  text << in.rdbuf();
  auto hosts = parse_hostfile_text(text.str(), path);
  if (hosts.empty()) throw UserError(fmt::format("--hostfile {} lists no hosts", path));
  return hosts;
}

std::vector<HostSlots> discover_hosts(const std::string& command, double timeout_s) {
  const CommandOutput out = run_command({"/bin/sh", "-c", command}, timeout_s);
  const std::string where = fmt::format("--host-discovery '{}'", command);
  if (out.timed_out) {
    throw RunError(fmt::format("{} did not finish within {} s", where, timeout_s));
  }
  if (out.exit_code != 0) {
    throw RunError(fmt::format("{} exited with {}: {}", where, out.exit_code, trim(out.text)));
  }
  return parse_hostfile_text(out.text, where);
}

int total_slots(const std::vector<HostSlots>& hosts) {
  int total = 0;
  for (const auto& h : hosts) total += h.slots;
  return total;
}

std::string describe(const std::vector<HostSlots>& hosts) {
  std::string out;
  for (const auto& h : hosts) {
    if (!out.empty()) out += ',';
    out += fmt::format("{}:{}", h.host, h.slots);
  }
  return out.empty() ? "none" : out;
}

bool is_this_machine(const std::string& host) {
  if (host == "localhost" || host == "127.0.0.1" || host == "::1") return true;
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return false;
  const std::string mine(name);
  return host == mine || mine.starts_with(host + ".") || host.starts_with(mine + ".");
}

}  // namespace rig::launch::elastic
