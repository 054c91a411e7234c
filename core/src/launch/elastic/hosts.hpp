// The machines an elastic job may run on: `host:slots` lists (Horovod's
// format, as --hosts a:2,b:2 or one per line from a discovery command) and
// Open MPI hostfiles (`a slots=2`).
#pragma once

#include <string>
#include <vector>

namespace rig::launch::elastic {

struct HostSlots {
  std::string host;
  int slots = 1;
  bool operator==(const HostSlots&) const = default;
};

// "a:2,b:2" (a host without ':N' has one slot). `where` names the source in errors.
std::vector<HostSlots> parse_host_list(const std::string& text, const std::string& where);
// One host per line, `host`, `host:N` or `host slots=N`; '#' starts a comment.
std::vector<HostSlots> parse_hostfile_text(const std::string& text, const std::string& where);
std::vector<HostSlots> read_hostfile(const std::string& path);
// Runs `command` through /bin/sh and parses what it prints (hostfile syntax);
// a command that fails or runs longer than timeout_s is an error.
std::vector<HostSlots> discover_hosts(const std::string& command, double timeout_s);

int total_slots(const std::vector<HostSlots>& hosts);
std::string describe(const std::vector<HostSlots>& hosts);  // "a:2,b:1"
// localhost, 127.0.0.1, ::1 or this machine's name.
bool is_this_machine(const std::string& host);

}  // namespace rig::launch::elastic
