#include "engine/device_data.hpp"

#include <cstdint>
#include <optional>
#include <utility>

#include "rig/ops.hpp"

namespace rig::engine {

namespace {

// Each batch is fetched and its copy started one batch ahead: when the
// trainer takes batch s, batch s+1's copy is queued (on a GPU, on the copy
// stream, alongside step s's kernels), and step s+1's kernels wait for it
// only when it is taken. The data layer's position is reported from before
// the batch fetched ahead, so checkpoints and resumes do not see it.
class DeviceDataLayer final : public DataLayer {
 public:
  DeviceDataLayer(std::shared_ptr<DataLayer> data, Device device)
      : data_(std::move(data)), device_(device) {}
  ~DeviceDataLayer() override { drop_ahead(); }
  DeviceDataLayer(const DeviceDataLayer&) = delete;
  DeviceDataLayer& operator=(const DeviceDataLayer&) = delete;

  YAML::Node info() const override { return data_->info(); }
  std::int64_t epoch_size() const override { return data_->epoch_size(); }
  void start_epoch(std::int64_t epoch) override {
    drop_ahead();
    data_->start_epoch(epoch);
  }
  std::optional<Batch> next_batch() override {
    std::optional<Batch> batch;
    if (ahead_) {
      ops::use_uploads(device_, ahead_->ticket);
      batch = std::move(ahead_->batch);
      ahead_.reset();
    } else {
      Ahead now = upload(data_->next_batch());
      ops::use_uploads(device_, now.ticket);
      batch = std::move(now.batch);
    }
    // The epoch's end stays ahead until start_epoch or seek.
    if (batch && !explicit_fetch_) fetch_ahead();
    return batch;
  }
  void fetch_explicitly() { explicit_fetch_ = true; }
  // The next batch fetched and its upload started, unless it already is.
  bool fetch_ahead_now() {
    if (ahead_) return false;
    fetch_ahead();
    return true;
  }
  YAML::Node position() const override {
    return ahead_ ? YAML::Clone(ahead_->position_before) : data_->position();
  }
  void seek(const YAML::Node& position) override {
    drop_ahead();
    data_->seek(position);
  }
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
  struct Ahead {
    std::optional<Batch> batch;  // nothing: the epoch ended
    std::uint64_t ticket = 0;
    YAML::Node position_before;
  };

  // The host batch's copy to the device, started (nothing stays nothing).
  Ahead upload(std::optional<Batch> host) {
    Ahead ahead;
    if (host) {
      ops::begin_uploads(device_);
      try {
        ahead.batch = host->to(device_);
      } catch (...) {
        // Out of memory, say: the device leaves the upload scope all the same.
        ops::use_uploads(device_, ops::end_uploads(device_));
        throw;
      }
      ahead.ticket = ops::end_uploads(device_);
    }
    return ahead;
  }
  void fetch_ahead() {
    YAML::Node before = data_->position();
    ahead_ = upload(data_->next_batch());
    ahead_->position_before = std::move(before);
  }
  // Its copies finish before its memory can be another tensor's.
  void drop_ahead() {
    if (ahead_) ops::use_uploads(device_, ahead_->ticket);
    ahead_.reset();
  }

  std::shared_ptr<DataLayer> data_;
  Device device_;
  std::optional<Ahead> ahead_;
  bool explicit_fetch_ = false;  // fetch_ahead_explicitly
};

}  // namespace

std::shared_ptr<DataLayer> on_device(std::shared_ptr<DataLayer> data, Device device) {
  if (device.is_cpu()) return data;
  return std::make_shared<DeviceDataLayer>(std::move(data), device);
}

void fetch_ahead_explicitly(DataLayer& data) {
  if (auto* on_device = dynamic_cast<DeviceDataLayer*>(&data)) on_device->fetch_explicitly();
}

bool fetch_ahead(DataLayer& data) {
  auto* on_device = dynamic_cast<DeviceDataLayer*>(&data);
  return on_device != nullptr && on_device->fetch_ahead_now();
}

}  // namespace rig::engine
