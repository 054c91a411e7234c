// The elastic supervisor's decisions, without launching anything: host
// lists, the choice of N' x k', the back-off of failed hosts and slots, and
// reading which rank or host failed from mpirun's and rig's words.
#include <gtest/gtest.h>

#include "launch/elastic/failure_scan.hpp"
#include "launch/elastic/hosts.hpp"
#include "launch/elastic/placement.hpp"
#include "rig/error.hpp"

namespace el = rig::launch::elastic;
using namespace std::chrono_literals;

TEST(ElasticHosts, ParsesHorovodListsAndHostfiles) {
  EXPECT_EQ(el::parse_host_list("a:2,b:2", "--hosts"),
            (std::vector<el::HostSlots>{{"a", 2}, {"b", 2}}));
  EXPECT_EQ(el::parse_host_list("a, b:3", "--hosts"),
            (std::vector<el::HostSlots>{{"a", 1}, {"b", 3}}));
  EXPECT_EQ(el::parse_hostfile_text("# cluster\na slots=4\nb:2  # two GPUs\n\nc\n", "f"),
            (std::vector<el::HostSlots>{{"a", 4}, {"b", 2}, {"c", 1}}));
  EXPECT_EQ(el::total_slots({{"a", 4}, {"b", 2}}), 6);
  EXPECT_EQ(el::describe({{"a", 4}, {"b", 2}}), "a:4,b:2");
}

TEST(ElasticHosts, RefusesBadEntriesNamingThem) {
  for (const char* bad : {"a:0", "a:x", "a:-1", ":2", "a:2,a:1"}) {
    try {
      el::parse_host_list(bad, "--hosts");
      FAIL() << bad << " was accepted";
    } catch (const rig::UserError& e) {
      EXPECT_NE(std::string(e.what()).find("--hosts"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(el::parse_hostfile_text("a slots=two\n", "hosts.txt"), rig::UserError);
  EXPECT_THROW(el::parse_hostfile_text("a cores=2\n", "hosts.txt"), rig::UserError);
  EXPECT_THROW(el::parse_host_list(" , ", "--hosts"), rig::UserError);
}

TEST(ElasticHosts, DiscoveryRunsACommand) {
  EXPECT_EQ(el::discover_hosts("printf 'a:2\\nb:1\\n'", 10.0),
            (std::vector<el::HostSlots>{{"a", 2}, {"b", 1}}));
  EXPECT_THROW(el::discover_hosts("echo broken >&2; exit 3", 10.0), rig::RunError);
  EXPECT_THROW(el::discover_hosts("sleep 5", 0.3), rig::RunError);
}

TEST(ElasticPlacement, KeepsTheMicroBatchesOfAStep) {
  // 4 x 1 losing a slot: 3 slots, and 3 does not divide 4, so 2 x 2.
  EXPECT_EQ(el::choose_world(4, 3, 1, 4)->processes, 2);
  EXPECT_EQ(el::choose_world(4, 3, 1, 4)->iter_size, 2);
  EXPECT_EQ(el::choose_world(4, 1, 1, 4)->iter_size, 4);
  EXPECT_EQ(el::choose_world(12, 8, 1, 12)->processes, 6);
  EXPECT_EQ(el::choose_world(8, 16, 1, 8)->processes, 8);  // never above max_nproc
  EXPECT_FALSE(el::choose_world(4, 3, 4, 4));              // min_nproc above what is left
  EXPECT_FALSE(el::choose_world(4, 0, 1, 4));
  EXPECT_FALSE(el::choose_world(7, 6, 2, 7));  // 7 is prime: only 7 or 1
  for (int micro = 1; micro <= 24; ++micro) {
    for (int slots = 1; slots <= 24; ++slots) {
      const auto w = el::choose_world(micro, slots, 1, micro);
      ASSERT_TRUE(w);  // one process always works
      EXPECT_EQ(w->processes * w->iter_size, micro);
      EXPECT_LE(w->processes, slots);
    }
  }
}

TEST(ElasticPlacement, LeavesOutSlotsAndHostsWithADoublingBackOff) {
  const std::vector<el::HostSlots> hosts = {{"a", 2}, {"b", 2}};
  el::Exclusions out(100.0);
  const auto t0 = el::Clock::now();
  out.slot_failed("a", t0);
  EXPECT_EQ(out.available(hosts, t0), (std::vector<el::HostSlots>{{"a", 1}, {"b", 2}}));
  out.host_failed("b", t0);
  EXPECT_EQ(out.available(hosts, t0 + 1s), (std::vector<el::HostSlots>{{"a", 1}}));
  // Back after the back-off...
  EXPECT_EQ(out.available(hosts, t0 + 101s), hosts);
  // ... and twice as long after the second failure.
  out.host_failed("b", t0 + 101s);
  EXPECT_EQ(out.available(hosts, t0 + 250s), (std::vector<el::HostSlots>{{"a", 2}}));
  EXPECT_EQ(out.available(hosts, t0 + 302s), hosts);
  EXPECT_EQ(out.describe(t0 + 302s).size(), 0U);
}

TEST(ElasticPlacement, PlacesRanksBySlotInHostOrder) {
  const auto placed = el::take_slots({{"a", 2}, {"b", 2}, {"c", 4}}, 3);
  EXPECT_EQ(placed, (std::vector<el::HostSlots>{{"a", 2}, {"b", 1}}));
  EXPECT_EQ(el::rank_hosts(placed), (std::vector<std::string>{"a", "a", "b"}));
}

namespace {
el::Failure scan(const std::vector<std::string>& lines, const std::vector<std::string>& ranks) {
  el::FailureScan s;
  for (const auto& l : lines) s.feed(l);
  return s.verdict(ranks);
}
}  // namespace

TEST(ElasticFailureScan, ARankKilledByASignal) {
  el::FailureScan s;
  EXPECT_FALSE(s.feed("*** Global step 20: *** Train loss: 0.3"));
  EXPECT_TRUE(s.feed(
      "mpirun noticed that process rank 3 with PID 0 on node vm exited on signal 9 (Killed)."));
  EXPECT_FALSE(
      s.feed("mpirun noticed that process rank 1 with PID 0 on node vm exited on signal 15"));
  const auto f = s.verdict({"a", "a", "b", "b"});
  EXPECT_EQ(f.kind, el::Failure::Kind::rank);
  EXPECT_EQ(f.rank, 3);
}

TEST(ElasticFailureScan, ARankThatExitedWithAnError) {
  const auto f = scan({"mpirun detected that one or more processes exited with non-zero status, "
                       "thus causing",
                       "the job to be terminated. The first process to do so was:", "",
                       "  Process name: [[29287,1],1]", "  Exit code:    7"},
                      {"a", "b"});
  EXPECT_EQ(f.kind, el::Failure::Kind::rank);
  EXPECT_EQ(f.rank, 1);
}

TEST(ElasticFailureScan, RigsWatchdogNamesAGoneRankBeforeTheExitCode) {
  // The rank that noticed exits with an error; the one that is gone is the cause.
  const auto f = scan({"rig: mpi: rank 0 (pid 11 on host vm): allreduce #42 did not finish in "
                       "30 s: rank 2 (pid 13 on host vm) is gone; ending the job",
                       "  Process name: [[5,1],0]", "  Exit code:    1"},
                      {"a", "a", "a"});
  EXPECT_EQ(f.kind, el::Failure::Kind::rank);
  EXPECT_EQ(f.rank, 2);
}

TEST(ElasticFailureScan, ALostHostIsTheOneWhoseRanksDidNotComplain) {
  const auto f = scan({"rig: mpi: rank 0 (pid 11 on host rig-a): allreduce #9 did not finish: no "
                       "rank on this host is gone or behind; one of the 2 rank(s) on other "
                       "hosts, or the network, is stuck; ending the job",
                       "  Process name: [[5,1],0]", "  Exit code:    1"},
                      {"10.77.0.1", "10.77.0.1", "10.77.0.2", "10.77.0.2"});
  EXPECT_EQ(f.kind, el::Failure::Kind::hosts);
  EXPECT_EQ(f.hosts, (std::vector<std::string>{"10.77.0.2"}));
}

TEST(ElasticFailureScan, ARankThatEndedItselfAfterComplainingIsNotTheCause) {
  // Seen with host b's link down: rank 1 gave up first, then rank 0 found it gone.
  const auto f = scan({"rig: mpi: rank 1 (pid 12 on host h-a): allreduce #54 did not finish "
                       "within timeout_s = 5; no rank on this host is gone or behind; one of the "
                       "2 rank(s) on other hosts, or the network, is stuck; ending the job",
                       "rig: mpi: rank 0 (pid 11 on host h-a): allreduce #54 did not finish "
                       "within timeout_s = 5; rank 1 (pid 12 on host h-a) is gone; ending the job"},
                      {"a", "a", "b", "b"});
  EXPECT_EQ(f.kind, el::Failure::Kind::hosts);
  EXPECT_EQ(f.hosts, (std::vector<std::string>{"b"}));
}

TEST(ElasticFailureScan, ALostDaemon) {
  const auto f =
      scan({"ORTE has lost communication with a remote daemon.", "",
            "  HNP daemon   : [[5,0],0] on node a", "  Remote daemon: [[5,0],1] on node b"},
           {"a", "b"});
  EXPECT_EQ(f.kind, el::Failure::Kind::hosts);
  EXPECT_EQ(f.hosts, (std::vector<std::string>{"b"}));
}

TEST(ElasticFailureScan, NothingKnown) {
  EXPECT_EQ(scan({"Segmentation fault"}, {"a"}).kind, el::Failure::Kind::unknown);
}
