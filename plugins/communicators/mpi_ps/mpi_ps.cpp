// mpi_ps: parameter-server training over MPI. The last `servers` processes of
// the job hold the parameters and run the optimizer; the others are workers,
// whose collectives span the workers only. The engine runs the protocol
// (core/src/engine/ps); this plugin carries its messages (ps_link.hpp).
#include <memory>

#include <fmt/format.h>

#include "mpi_communicator_base.hpp"
#include "ps_link.hpp"
#include "rig/error.hpp"
#include "rig/plugin.hpp"

namespace {

rig::PsSettings read_settings(const YAML::Node& params) {
  rig::PsSettings s;
  s.max_staleness = params["max_staleness"].as<std::int64_t>();
  s.straggler_timeout_s = params["straggler_timeout_s"].as<double>();
  s.timeout_s = params["timeout_s"].as<double>();
  s.startup_timeout_s = std::max(s.timeout_s, params["startup_timeout_s"].as<double>());
  if (params["gradient_compression"].as<std::string>() == "2bit") {
    s.two_bit_threshold = params["threshold"].as<float>();
  }
  return s;
}

class MpiPs final : public rig_mpi::MpiCommunicatorBase {
 public:
  MpiPs(const YAML::Node& params, const rig::CommunicatorContext& /*ctx*/)
      : MpiCommunicatorBase(params["timeout_s"].as<double>(),
                            params["startup_timeout_s"].as<double>(), params["servers"].as<int>()) {
    if (!thread().thread_multiple()) {
      throw rig::UserError(
          "mpi_ps: this MPI library does not provide MPI_THREAD_MULTIPLE, which the parameter "
          "server's messages need next to the collectives (Open MPI 4 and MPICH 4 do)");
    }
    link_ = std::make_unique<rig_mpi::PsLink>(thread().ps_comm(), params["servers"].as<int>(),
                                              read_settings(params));
  }

  rig::ParameterServerTransport* parameter_server() override { return link_.get(); }

 private:
  std::unique_ptr<rig_mpi::PsLink> link_;  // ends before the communication thread
};

}  // namespace

RIG_PLUGIN(communicator, "mpi_ps", "0.1.0",
           "Parameter servers over MPI: sync, stale-synchronous or async updates (MXNet's "
           "KVStore dist_sync / dist_async)",
           MpiPs)
