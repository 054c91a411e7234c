#include "engine/device_data.hpp"

#include <utility>

namespace rig::engine {

namespace {

class DeviceDataLayer final : public DataLayer {
 public:
  DeviceDataLayer(std::shared_ptr<DataLayer> data, Device device)
      : data_(std::move(data)), device_(device) {}

  YAML::Node info() const override { return data_->info(); }
  std::int64_t epoch_size() const override { return data_->epoch_size(); }
  void start_epoch(std::int64_t epoch) override { data_->start_epoch(epoch); }
  std::optional<Batch> next_batch() override {
    std::optional<Batch> batch = data_->next_batch();
    if (batch) batch = batch->to(device_);
    return batch;
  }
  YAML::Node position() const override { return data_->position(); }
  void seek(const YAML::Node& position) override { data_->seek(position); }
  // Data layers read host batches only: what they decode comes back first.
  std::vector<std::string> decode(const Batch& batch, const Tensor& predictions) const override {
    return data_->decode(batch.to(Device::cpu()), predictions.to_host());
  }
  std::vector<std::string> decode_targets(const Batch& batch) const override {
    return data_->decode_targets(batch.to(Device::cpu()));
  }
  Batch encode_lines(const std::vector<std::string>& lines) const override {
    return data_->encode_lines(lines).to(device_);
  }

 private:
  std::shared_ptr<DataLayer> data_;
  Device device_;
};

}  // namespace

std::shared_ptr<DataLayer> on_device(std::shared_ptr<DataLayer> data, Device device) {
  if (device.is_cpu()) return data;
  return std::make_shared<DeviceDataLayer>(std::move(data), device);
}

}  // namespace rig::engine
