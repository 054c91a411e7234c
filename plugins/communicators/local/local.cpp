// local: the communicator of a single process. Every collective is complete
// when issued; sizes are still checked so a bug shows before it runs on MPI.
#include <stdexcept>

#include <fmt/format.h>

#include "rig/error.hpp"
#include "rig/plugin.hpp"

namespace {

using rig::Tensor;

void require_defined(const char* op, const Tensor& t, const char* what) {
  if (!t.defined()) throw std::invalid_argument(fmt::format("local {}: {} is undefined", op, what));
}

class Local final : public rig::Communicator {
 public:
  Local(const YAML::Node& /*params*/, const rig::CommunicatorContext& /*ctx*/) {}

  int rank() const override { return 0; }
  int size() const override { return 1; }
  int local_rank() const override { return 0; }

  // Sum or average over one rank leaves the buffer as it is.
  std::unique_ptr<rig::CommRequest> allreduce(Tensor buffer, rig::ReduceOp /*op*/) override {
    require_defined("allreduce", buffer, "the buffer");
    return done();
  }

  std::unique_ptr<rig::CommRequest> broadcast(Tensor buffer, int root) override {
    require_defined("broadcast", buffer, "the buffer");
    if (root != 0) {
      throw std::invalid_argument(
          fmt::format("local broadcast: root {} is not a rank (the only rank is 0)", root));
    }
    return done();
  }

  std::unique_ptr<rig::CommRequest> allgather(Tensor input, Tensor output) override {
    require_defined("allgather", input, "the input");
    require_defined("allgather", output, "the output");
    if (output.dtype() != input.dtype() || output.numel() != input.numel()) {
      throw std::invalid_argument(
          fmt::format("local allgather: output {} {} must hold size() x input = 1 x {} {} elements",
                      rig::dtype_name(output.dtype()), rig::to_string(output.shape()),
                      input.numel(), rig::dtype_name(input.dtype())));
    }
    if (input.nbytes() > 0 && output.raw_data() != input.raw_data()) {
      Tensor view = output.reshape(input.shape());  // on any device, through its backend
      view.copy_from(input);
    }
    return done();
  }

  void barrier() override {}

  [[noreturn]] void abort(const std::string& reason, int /*exit_code*/) override {
    throw rig::RunError(reason);
  }

 private:
  static std::unique_ptr<rig::CommRequest> done() {
    return std::make_unique<rig::CompletedRequest>();
  }
};

}  // namespace

RIG_PLUGIN(communicator, "local", "0.1.0", "One process: every collective completes at once", Local)
