#include "engine/ps/serve.hpp"

#include <fmt/format.h>

#include "config/resolved_config.hpp"
#include "engine/memory_at_peak.hpp"
#include "engine/ps/server.hpp"
#include "engine/resume.hpp"

namespace rig::engine::ps {

int serve_parameters(const RunInputs& in, ParameterServerTransport& link) {
  const std::string identity = identity_yaml(in.primary.config);
  const int index = link.self() - link.workers();
  EngineSettings settings = in.settings;
  settings.device = Device::cpu();  // a server's shard and optimizer live in host memory
  settings.compute_dtype = DType::f32;
  auto make_update = [&](ParameterStore& store, const YAML::Node& init) {
    ShardUpdate update;
    update.optimizer = make_optimizer(in.primary, settings, {index, link.servers()}, store);
    StepPlan plan;
    plan.max_steps = init["max_steps"].as<std::int64_t>();
    plan.steps_per_epoch = init["steps_per_epoch"].as<std::int64_t>();
    plan.policy_steps_per_epoch = init["policy_steps_per_epoch"].as<std::int64_t>();
    update.lr_policy = make_lr_policy(in.primary, plan, plan.max_steps);
    if (settings.larc_params && !settings.larc_params.IsNull()) {
      update.larc = read_larc_settings(settings.larc_params);
    }
    return update;
  };
  ShardServer server(link, make_update, config::fnv1a64_hex(identity));
  const ServerReport report = server.run();
  fmt::print(stderr, "rig: parameter server {} finished: {} update(s) from {} push(es){}\n", index,
             report.updates, report.pushes,
             report.refused_pushes > 0 ? fmt::format(", {} refused", report.refused_pushes) : "");
  // What the server's memory held at its peak: the shard, its gradient, the
  // optimizer's state and each worker's incoming gradient, as tensors.
  for (const std::string& line : memory_at_peak_lines(memory_at_peak(Device::cpu()))) {
    fmt::print(stderr, "rig: parameter server {}: {}\n", index, line);
  }
  return 0;
}

}  // namespace rig::engine::ps
