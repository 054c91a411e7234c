// A server process of a parameter-server job: what `rig run` does instead of
// training when the communicator makes this process a server.
#pragma once

#include "engine/training_run.hpp"

namespace rig::engine::ps {

// Serves until every worker is done; the process exit code.
int serve_parameters(const RunInputs& in, ParameterServerTransport& link);

}  // namespace rig::engine::ps
