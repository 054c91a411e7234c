// mpi: the communicator of a job launched by mpirun / mpiexec / srun: MPI
// collectives on one communication thread (common/mpi_communicator_base.hpp).
#include "mpi_communicator_base.hpp"
#include "rig/plugin.hpp"

namespace {

class Mpi final : public rig_mpi::MpiCommunicatorBase {
 public:
  Mpi(const YAML::Node& params, const rig::CommunicatorContext& /*ctx*/)
      : MpiCommunicatorBase(params["timeout_s"].as<double>(),
                            params["startup_timeout_s"].as<double>()) {}
};

}  // namespace

RIG_PLUGIN(communicator, "mpi", "0.1.0",
           "MPI collectives (Open MPI, MPICH) on one communication thread, with a timeout", Mpi)
