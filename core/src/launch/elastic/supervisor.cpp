#include "launch/elastic/supervisor.hpp"

#include <algorithm>
#include <csignal>
#include <cstdio>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "formats/checkpoint_files.hpp"
#include "launch/elastic/child_process.hpp"
#include "launch/elastic/elastic_log.hpp"
#include "launch/elastic/failure_scan.hpp"
#include "launch/elastic/hosts.hpp"
#include "launch/elastic/placement.hpp"
#include "launch/mpirun_command.hpp"
#include "launch/progress_beacon.hpp"
#include "rig/cores.hpp"
#include "rig/error.hpp"

extern char** environ;

namespace rig::launch::elastic {
namespace fs = std::filesystem;
namespace {

constexpr int kExitGaveUp = 1;
constexpr int kExitBadInput = 2;
constexpr double kDiscoveryTimeoutS = 30.0;
constexpr auto kPollInterval = std::chrono::milliseconds(200);
constexpr auto kKillGrace = std::chrono::seconds(10);

volatile std::sig_atomic_t g_stop_signal = 0;
volatile std::sig_atomic_t g_stop_count = 0;

extern "C" void on_supervisor_signal(int signal) {
  g_stop_signal = signal;
  g_stop_count = g_stop_count + 1;
}

// SIGTERM / SIGINT handlers for as long as the supervisor runs.
class SupervisorSignals {
 public:
  SupervisorSignals() {
    struct sigaction action {};
    action.sa_handler = on_supervisor_signal;
    sigemptyset(&action.sa_mask);
    sigaction(SIGTERM, &action, &previous_term_);
    sigaction(SIGINT, &action, &previous_int_);
  }
  SupervisorSignals(const SupervisorSignals&) = delete;
  SupervisorSignals& operator=(const SupervisorSignals&) = delete;
  ~SupervisorSignals() {
    sigaction(SIGTERM, &previous_term_, nullptr);
    sigaction(SIGINT, &previous_int_, nullptr);
  }

 private:
  struct sigaction previous_term_ {};
  struct sigaction previous_int_ {};
};

template <typename... Args>
void say(fmt::format_string<Args...> format, Args&&... args) {
  std::fputs(
      fmt::format("*** Elastic: {}\n", fmt::format(format, std::forward<Args>(args)...)).c_str(),
      stdout);
  std::fflush(stdout);
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::optional<std::int64_t> newest_checkpoint(const fs::path& logdir) {
  const auto all = formats::files::complete_checkpoints(logdir / "checkpoints");
  if (all.empty()) return std::nullopt;
  return all.back().first;
}

// RIG_*, NCCL_*, OMP_* and MKL/OpenBLAS thread settings reach remote ranks
// only when mpirun is told to pass them on.
std::vector<std::string> forwarded_environment() {
  std::vector<std::string> names;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry(*e);
    const std::string name = entry.substr(0, entry.find('='));
    for (const char* prefix : {"RIG_", "NCCL_", "OMP_", "OPENBLAS_", "CUDA_VISIBLE_DEVICES"}) {
      if (name.starts_with(prefix) && name != kProgressEnv) names.push_back(name);
    }
  }
  return names;
}

class Supervisor {
 public:
  explicit Supervisor(const ElasticOptions& o) : o_(o), exclusions_(o.backoff_s) {}
  int run();

 private:
  std::vector<HostSlots> hosts_now() const;
  std::vector<std::string> mpirun_command(const std::vector<HostSlots>& placed, WorldSize world,
                                          bool resume) const;
  // Runs one attempt to its end; returns mpirun's exit code.
  int run_attempt(const std::vector<std::string>& command, Attempt& attempt, FailureScan& scan);
  void note_progress(Attempt& attempt);
  void save_record() { write_elastic_yaml(o_.logdir, record_); }
  // The supervisor was asked to stop (`when` says at what point); 128 + signal.
  int stopped(const std::string& when);

  const ElasticOptions& o_;
  Exclusions exclusions_;
  ElasticRecord record_;
  Clock::time_point start_ = Clock::now();
  fs::path progress_file_;
  bool stop_forwarded_ = false;
  // Downtime: from a failure until the next attempt finishes a step.
  std::optional<Clock::time_point> failed_at_;
  std::optional<std::int64_t> resumed_from_;
};

std::vector<HostSlots> Supervisor::hosts_now() const {
  std::vector<HostSlots> hosts;
  if (!o_.discovery.empty()) {
    hosts = discover_hosts(o_.discovery, kDiscoveryTimeoutS);
  } else if (!o_.hostfile.empty()) {
    hosts = read_hostfile(o_.hostfile);
  } else if (!o_.hosts.empty()) {
    hosts = parse_host_list(o_.hosts, "--hosts");
  } else {
    hosts = {{"localhost", rig::affinity_cores()}};
  }
  // The supervisor's own machine first: rank 0 writes the checkpoints and
  // the progress the supervisor reads.
  std::stable_partition(hosts.begin(), hosts.end(),
                        [](const HostSlots& h) { return is_this_machine(h.host); });
  return hosts;
}

std::vector<std::string> Supervisor::mpirun_command(const std::vector<HostSlots>& placed,
                                                    WorldSize world, bool resume) const {
  std::vector<std::string> args = mpirun_start(world.processes);
  args.insert(args.end(), {"-H", describe(placed), "--map-by", "slot"});
  bool all_local = true;
  for (const auto& h : placed) all_local = all_local && is_this_machine(h.host);
  if (all_local) {
    const std::vector<std::string> binding = local_binding(world.processes);
    args.insert(args.end(), binding.begin(), binding.end());
  }
  for (const auto& name : forwarded_environment()) args.insert(args.end(), {"-x", name});
  args.insert(args.end(), {"-x", fmt::format("{}={}", kProgressEnv, progress_file_.string())});
  args.insert(args.end(), o_.job.begin(), o_.job.end());
  // As --set, which is applied after every --key=value override and after
  // any --set the user gave, so that this one holds.
  args.insert(args.end(), {"--set", fmt::format("iter_size={}", world.iter_size)});
  if (resume) args.emplace_back("--continue_learning");
  return args;
}

void Supervisor::note_progress(Attempt& attempt) {
  const auto step = read_progress(progress_file_);
  if (!step) return;
  const std::int64_t base = attempt.resumed_from.value_or(0);
  if (*step <= base) return;  // the file still holds the failed attempt's step
  attempt.reached = step;
  if (failed_at_ && record_.attempts.size() >= 2) {
    Attempt& failed = record_.attempts[record_.attempts.size() - 2];
    failed.downtime_s = std::chrono::duration<double>(Clock::now() - *failed_at_).count();
    failed_at_.reset();
    say("training again at step {}, {:.1f} s after the failure", *step, *failed.downtime_s);
    save_record();
    append_elastic_metrics(o_.logdir, *step, record_);
  }
}

int Supervisor::run_attempt(const std::vector<std::string>& command, Attempt& attempt,
                            FailureScan& scan) {
  std::optional<Clock::time_point> failing_since;
  SupervisedJob job(command, {}, [&](std::string_view line) {
    if (scan.feed(line) && !failing_since) failing_since = Clock::now();
  });
  std::optional<Clock::time_point> term_sent;
  for (;;) {
    const std::optional<int> code = job.poll(kPollInterval);
    note_progress(attempt);
    if (code) {
      job.kill_session();  // ranks mpirun left behind on this machine
      if (!failing_since && *code != 0) failing_since = Clock::now();
      if (failing_since && !failed_at_) failed_at_ = failing_since;
      return *code;
    }
    // The ranks stop cleanly on SIGUSR1 once they train (before, it would end
    // them): a signal that comes earlier waits for the first step.
    if (g_stop_count > 0 && !stop_forwarded_ && attempt.reached) {
      stop_forwarded_ = true;
      say("signal {}: asking every rank to finish its step, checkpoint and stop (signal again "
          "to end it at once)",
          static_cast<int>(g_stop_signal));
      job.signal(SIGUSR1);
    }
    if (g_stop_count > 1) {
      job.kill_session();
      continue;
    }
    // mpirun can hang tearing down a daemon on a host it cannot reach.
    if (failing_since && !term_sent &&
        Clock::now() - *failing_since > std::chrono::duration<double>(o_.teardown_timeout_s)) {
      say("mpirun is still running {:.0f} s after the failure; ending it", o_.teardown_timeout_s);
      job.signal(SIGTERM);
      term_sent = Clock::now();
    }
    if (term_sent && Clock::now() - *term_sent > kKillGrace) {
      job.kill_session();
      term_sent = Clock::now();
    }
  }
}

int Supervisor::stopped(const std::string& when) {
  const auto saved = newest_checkpoint(o_.logdir);
  const int signal = g_stop_signal;
  record_.outcome = fmt::format("stopped by signal {}{}", signal, when);
  save_record();
  say("stopped by signal {}{}; the newest checkpoint is {}; run the same command with "
      "--continue_learning to go on",
      signal, when, saved ? fmt::format("ckpt-{}", *saved) : std::string("none"));
  return 128 + signal;
}

int Supervisor::run() {
  const SupervisorSignals signals;
  std::error_code ec;
  fs::create_directories(o_.logdir, ec);
  progress_file_ = fs::absolute(o_.logdir / ".elastic-progress");
  fs::remove(progress_file_, ec);

  std::vector<HostSlots> hosts = hosts_now();
  const int slots = total_slots(hosts);
  const int first =
      o_.nproc > 0 ? o_.nproc : (o_.max_nproc > 0 ? std::min(o_.max_nproc, slots) : slots);
  const int max_nproc = o_.max_nproc > 0 ? o_.max_nproc : first;
  if (first > slots) {
    throw UserError(fmt::format("--elastic: --nproc {} needs {} slots, but the hosts ({}) have {}",
                                first, first, describe(hosts), slots));
  }
  if (o_.min_nproc > first || first > max_nproc) {
    throw UserError(fmt::format(
        "--elastic: the first attempt's {} processes must lie within --min-nproc {} and "
        "--max-nproc {}",
        first, o_.min_nproc, max_nproc));
  }
  record_.micro_batches = first * o_.iter_size;
  record_.max_restarts = o_.max_restarts;
  say("{} process(es) x iter_size {} = {} micro-batches a step, kept on every restart; hosts {}; "
      "between {} and {} processes, at most {} restart(s)",
      first, o_.iter_size, record_.micro_batches, describe(hosts), o_.min_nproc, max_nproc,
      o_.max_restarts);
  if (!o_.saves_checkpoints) {
    say("warning: the experiment writes no checkpoints (save_checkpoint_steps and "
        "checkpoint_every_s are off), so every restart begins at step 0");
  }
  if (!o_.deterministic) {
    say("note: communicator_params/deterministic is off: a restart on other processes keeps the "
        "global batch but not the bits of the sums (turn it on for results identical to an "
        "uninterrupted run)");
  }

  bool resume = o_.continue_learning;
  for (;;) {
    if (g_stop_count > 0) return stopped(" before a restart");
    const auto now = Clock::now();
    std::vector<HostSlots> usable = exclusions_.available(hosts, now);
    const int restart = static_cast<int>(record_.attempts.size());
    const int want = restart == 0 ? first : max_nproc;
    const auto world = choose_world(record_.micro_batches, std::min(total_slots(usable), want),
                                    o_.min_nproc, max_nproc);
    if (!world) {
      const std::vector<std::string> out = exclusions_.describe(now);
      record_.outcome = fmt::format(
          "stopped: no number of processes between {} and {} that divides {} micro-batches fits "
          "the {} slot(s) left ({}; left out: {})",
          o_.min_nproc, max_nproc, record_.micro_batches, total_slots(usable), describe(usable),
          out.empty() ? "nothing" : fmt::format("{}", fmt::join(out, "; ")));
      save_record();
      std::fprintf(stderr, "rig: error: --elastic %s\n", record_.outcome.c_str());
      return kExitGaveUp;
    }
    const std::vector<HostSlots> placed = take_slots(usable, world->processes);
    Attempt attempt;
    attempt.hosts = describe(placed);
    attempt.processes = world->processes;
    attempt.iter_size = world->iter_size;
    attempt.resumed_from = resume ? newest_checkpoint(o_.logdir) : std::nullopt;
    attempt.started_s = seconds_since(start_);
    say("{}: {} process(es) x iter_size {} on {}, {}",
        restart == 0 ? std::string("start")
                     : fmt::format("restart {} of {}", restart, o_.max_restarts),
        world->processes, world->iter_size, attempt.hosts,
        attempt.resumed_from ? fmt::format("from ckpt-{}", *attempt.resumed_from)
                             : std::string("from step 0"));
    record_.attempts.push_back(attempt);
    save_record();

    FailureScan scan;
    const std::vector<std::string> ranks = rank_hosts(placed);
    fs::remove(progress_file_, ec);  // so that only this attempt's steps count
    const int code =
        run_attempt(mpirun_command(placed, *world, resume && attempt.resumed_from.has_value()),
                    record_.attempts.back(), scan);
    Attempt& done = record_.attempts.back();
    done.ended_s = seconds_since(start_);
    done.exit_code = code;
    if (code == 0) {
      record_.outcome = fmt::format("finished after {} restart(s)", record_.restarts());
      save_record();
      say("finished: {} restart(s), {} step(s) repeated, {:.1f} s of downtime", record_.restarts(),
          record_.lost_steps(), record_.downtime_s());
      return 0;
    }
    if (stop_forwarded_) return stopped("");
    // Bad input fails the same way every time: no restart can help.
    if (code == kExitBadInput && restart == 0 && !done.reached) {
      record_.outcome = "bad input: the job exited with 2 before its first step";
      save_record();
      return kExitBadInput;
    }
    const Failure failure = scan.verdict(ranks);
    const auto checkpoint = newest_checkpoint(o_.logdir);
    done.lost_steps =
        done.reached ? std::max<std::int64_t>(0, *done.reached - checkpoint.value_or(0)) : 0;
    const auto failed_now = Clock::now();
    switch (failure.kind) {
      case Failure::Kind::rank: {
        const std::string host = failure.rank >= 0 && failure.rank < static_cast<int>(ranks.size())
                                     ? ranks[static_cast<std::size_t>(failure.rank)]
                                     : std::string("?");
        done.failure = fmt::format("rank {} on {} ({})", failure.rank, host, failure.evidence);
        if (host != "?") {
          exclusions_.slot_failed(host, failed_now);
          done.left_out = fmt::format("1 slot of {}", host);
        }
        break;
      }
      case Failure::Kind::hosts:
        done.failure =
            fmt::format("host(s) {} ({})", fmt::join(failure.hosts, ", "), failure.evidence);
        for (const auto& h : failure.hosts) exclusions_.host_failed(h, failed_now);
        done.left_out = fmt::format("{}", fmt::join(failure.hosts, ", "));
        break;
      case Failure::Kind::unknown:
        done.failure = fmt::format("exit code {}; mpirun named no rank or host", code);
        break;
    }
    say("the job failed with exit code {}: {}; {} step(s) past {} are lost", code, done.failure,
        done.lost_steps,
        checkpoint ? fmt::format("ckpt-{}", *checkpoint) : std::string("the start"));
    if (!done.left_out.empty()) {
      say("left out now: {} (each failure of the same host doubles its back-off)",
          fmt::join(exclusions_.describe(failed_now), "; "));
    }
    if (restart >= o_.max_restarts) {
      record_.outcome = fmt::format("gave up after {} restart(s) (--max-restarts {})",
                                    record_.restarts(), o_.max_restarts);
      save_record();
      std::fprintf(stderr, "rig: error: --elastic %s; the last failure: %s\n",
                   record_.outcome.c_str(), done.failure.c_str());
      return kExitGaveUp;
    }
    save_record();
    resume = true;
    if (!o_.discovery.empty()) hosts = hosts_now();
  }
}

}  // namespace

int supervise(const ElasticOptions& options) {
  Supervisor supervisor(options);
  return supervisor.run();
}

}  // namespace rig::launch::elastic
