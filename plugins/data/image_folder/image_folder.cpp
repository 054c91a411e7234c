// image_folder: ImageNet-style data, root/<class>/<image>.jpg. JPEGs are
// decoded with libjpeg-turbo on a pool of worker threads that fill the next
// prefetch_batches batches while the trainer works; training samples get
// torchvision's RandomResizedCrop + horizontal flip, eval samples Resize +
// CenterCrop, all normalised per channel. Every sample's pixels depend only
// on (seed, epoch, data-set index), never on the rank, the world size or
// which thread decoded it.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "../common/epoch_sampler.hpp"
#include "folder_index.hpp"
#include "jpeg_decoder.hpp"
#include "rig/error.hpp"
#include "rig/plugin.hpp"
#include "transforms.hpp"
#include "worker_pool.hpp"

namespace {

using image_folder::BatchJob;
using rig::Tensor;

// The whole file at `path` into `bytes`.
void read_file(const std::string& path, std::vector<std::uint8_t>& bytes) {
  const std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "rb"),
                                                             &std::fclose);
  if (!file || std::fseek(file.get(), 0, SEEK_END) != 0) {
    throw rig::UserError(
        fmt::format("image_folder: cannot read '{}': {}", path, std::strerror(errno)));
  }
  const long size = std::ftell(file.get());
  if (size < 0 || std::fseek(file.get(), 0, SEEK_SET) != 0) {
    throw rig::UserError(
        fmt::format("image_folder: cannot read '{}': {}", path, std::strerror(errno)));
  }
  bytes.resize(static_cast<std::size_t>(size));
  if (std::fread(bytes.data(), 1, bytes.size(), file.get()) != bytes.size()) {
    throw rig::UserError(fmt::format("image_folder: cannot read '{}': short read", path));
  }
}

template <std::size_t N>
std::array<double, N> numbers(const YAML::Node& params, const char* key) {
  const auto values = params[key].as<std::vector<double>>();
  if (values.size() != N) {
    throw rig::UserError(
        fmt::format("image_folder: {} needs {} numbers, found {}", key, N, values.size()));
  }
  std::array<double, N> out{};
  std::copy(values.begin(), values.end(), out.begin());
  return out;
}

// A decoder and scratch buffers for one worker thread.
struct WorkerState {
  image_folder::JpegDecoder decoder;
  image_folder::Pixels pixels;
  std::vector<std::uint8_t> file;
};

// A batch being prefetched, and the tensors its job writes into.
struct Slot {
  BatchJob job;
  Tensor images;
  Tensor labels;
};

class ImageFolder final : public rig::DataLayer {
 public:
  ImageFolder(const YAML::Node& params, const rig::DataLayerContext& ctx)
      : train_(ctx.run.mode == rig::Mode::train),
        dir_key_(train_ ? "train_dir" : "eval_dir"),
        image_size_(params["image_size"].as<int>()),
        resize_size_(params["resize_size"].as<int>()),
        flip_(params["random_flip"].as<bool>()),
        skip_corrupt_(params["skip_corrupt"].as<bool>()),
        prefetch_batches_(params["prefetch_batches"].as<int>()),
        seed_(rig_data::mix(params["seed"].as<std::uint64_t>()) ^ ctx.run.seed),
        rank_(ctx.run.rank),
        world_size_(ctx.run.world_size) {
    check_params(params);
    // The labels come from train_dir's class folders whenever it is set, so
    // that eval labels match training's even when eval_dir lacks a class.
    const auto train_dir = params["train_dir"].as<std::string>();
    const auto dir = params[dir_key_].as<std::string>();
    classes_ = image_folder::list_classes(train_dir.empty() ? dir : train_dir,
                                          train_dir.empty() ? dir_key_ : "train_dir");
    index_ = std::make_unique<image_folder::FolderIndex>(dir, dir_key_, classes_);
    sampler_ = std::make_unique<rig_data::EpochSampler>("image_folder", index_->size(), seed_,
                                                        train_, ctx.batch_size, rank_, world_size_);
    ahead_ = std::make_unique<rig_data::EpochSampler>(*sampler_);
    const int workers = params["num_workers"].as<int>();
    for (int w = 0; w < workers; ++w) workers_.push_back(std::make_unique<WorkerState>());
    pool_ = std::make_unique<image_folder::WorkerPool>(
        workers, [this](int worker, BatchJob& job, std::size_t sample) {
          fill(*workers_[static_cast<std::size_t>(worker)], job, sample);
        });
    refill();
  }

  ~ImageFolder() override {
    pool_.reset();  // joins the workers before the slots they write go away
    report_skipped();
  }

  YAML::Node info() const override {
    YAML::Node info;
    info["task"] = "classification";
    info["num_classes"] = static_cast<std::int64_t>(classes_.size());
    info["channels"] = 3;
    info["height"] = image_size_;
    info["width"] = image_size_;
    info["num_samples"] = index_->size();
    return info;
  }

  std::int64_t epoch_size() const override { return index_->size(); }

  void start_epoch(std::int64_t epoch) override {
    rig_data::EpochSampler target = *sampler_;
    target.start_epoch(epoch);
    restart(std::move(target));
  }

  std::optional<rig::Batch> next_batch() override {
    for (;;) {
      auto indices = sampler_->next();
      if (!indices) {
        report_skipped();
        return std::nullopt;
      }
      refill();
      if (slots_.empty()) throw rig::RunError("image_folder: no batch was prefetched");
      std::unique_ptr<Slot> slot = std::move(slots_.front());
      slots_.pop_front();
      if (slot->job.indices != *indices) {
        throw rig::RunError("image_folder: the prefetched batch is not the expected one");
      }
      refill();
      pool_->wait(&slot->job);
      for (std::size_t i = 0; i < slot->job.indices.size(); ++i) {
        if (slot->job.errors[i]) std::rethrow_exception(slot->job.errors[i]);
        if (slot->job.skipped[i] && skipped_++ == 0) {
          first_skipped_ = index_->path(slot->job.indices[i]);
        }
      }
      // A batch whose every image was corrupt is skipped whole.
      if (auto batch = without_skipped(*slot)) return batch;
    }
  }

  YAML::Node position() const override { return sampler_->position(); }

  void seek(const YAML::Node& position) override {
    rig_data::EpochSampler target = *sampler_;
    target.seek(position);
    restart(std::move(target));
  }

  std::vector<std::string> decode(const rig::Batch& batch,
                                  const Tensor& predictions) const override {
    const auto rows = static_cast<std::int64_t>(batch.indices.size());
    if (predictions.dtype() != rig::DType::i64 || predictions.numel() != rows) {
      throw rig::RunError(
          fmt::format("image_folder: expected predicted class ids (i64 [{}]), got {} {}", rows,
                      rig::dtype_name(predictions.dtype()), rig::to_string(predictions.shape())));
    }
    std::vector<std::string> lines;
    const auto* p = predictions.data<std::int64_t>();
    for (std::int64_t i = 0; i < rows; ++i) lines.push_back(std::to_string(p[i]));
    return lines;
  }

  std::vector<std::string> decode_targets(const rig::Batch& batch) const override {
    std::vector<std::string> lines;
    for (const auto s : batch.indices) lines.push_back(std::to_string(index_->label(s)));
    return lines;
  }

 private:
  void check_params(const YAML::Node& params) {
    const auto scale = numbers<2>(params, "crop_scale");
    const auto ratio = numbers<2>(params, "crop_ratio");
    if (!(0 < scale[0] && scale[0] <= scale[1] && scale[1] <= 1)) {
      throw rig::UserError(fmt::format(
          "image_folder: crop_scale must be [min, max] with 0 < min <= max <= 1, found [{}, {}]",
          scale[0], scale[1]));
    }
    if (!(0 < ratio[0] && ratio[0] <= ratio[1])) {
      throw rig::UserError(fmt::format(
          "image_folder: crop_ratio must be [min, max] with 0 < min <= max, found [{}, {}]",
          ratio[0], ratio[1]));
    }
    range_ = {scale[0], scale[1], ratio[0], ratio[1]};
    const auto mean = numbers<3>(params, "mean");
    const auto std = numbers<3>(params, "std");
    for (std::size_t c = 0; c < 3; ++c) {
      if (!(std[c] > 0)) {
        throw rig::UserError(fmt::format("image_folder: std must be > 0, found {}", std[c]));
      }
      normalise_.mean[c] = static_cast<float>(mean[c]);
      normalise_.std[c] = static_cast<float>(std[c]);
    }
    if (resize_size_ < image_size_) {
      throw rig::UserError(
          fmt::format("image_folder: resize_size ({}) must be at least image_size ({}): eval crops "
                      "image_size x image_size from the resized image",
                      resize_size_, image_size_));
    }
  }

  // Sample `sample` of `job`, decoded, augmented and normalised into its slice.
  void fill(WorkerState& state, BatchJob& job, std::size_t sample) const {
    const std::int64_t index = job.indices[sample];
    const auto plane =
        static_cast<std::size_t>(image_size_) * static_cast<std::size_t>(image_size_);
    float* out = job.images + sample * 3 * plane;
    const std::string path = index_->path(index);
    read_file(path, state.file);
    try {
      const auto header = state.decoder.header(state.file.data(), state.file.size());
      const rig_data::Stream stream(seed_, rig_data::kAugment,
                                    static_cast<std::uint64_t>(job.epoch));
      const auto base = static_cast<std::uint64_t>(index) * image_folder::kDrawsPerSample;
      const image_folder::Box box =
          train_
              ? image_folder::random_resized_crop(header.width, header.height, range_, stream, base)
              : image_folder::resize_center_crop(header.width, header.height, resize_size_,
                                                 image_size_);
      const bool flip = train_ && flip_ && stream.uniform(base + image_folder::kFlipDraw) < 0.5;
      const auto scale =
          image_folder::JpegDecoder::scale_for(header, box.w, box.h, image_size_, image_size_);
      auto& pixels = state.pixels;
      state.decoder.decode(state.file.data(), state.file.size(), header, scale, pixels);
      const double fx = static_cast<double>(pixels.width) / header.width;
      const double fy = static_cast<double>(pixels.height) / header.height;
      image_folder::resample(pixels.data.data(), pixels.width, pixels.height, pixels.channels,
                             {box.x * fx, box.y * fy, box.w * fx, box.h * fy}, image_size_, flip,
                             normalise_, out);
    } catch (const image_folder::CorruptJpeg& e) {
      if (!skip_corrupt_) {
        throw rig::UserError(fmt::format(
            "image_folder: corrupt JPEG '{}': {} (data_layer_params.skip_corrupt: true leaves "
            "corrupt images out of their batch)",
            path, e.what()));
      }
      std::fill(out, out + 3 * plane, 0.0F);
      job.skipped[sample] = 1;
    }
  }

  // The slot's batch without the images that skip_corrupt dropped (a smaller
  // batch, as a collate function that drops failed samples gives in PyTorch);
  // nullopt when none is left.
  static std::optional<rig::Batch> without_skipped(Slot& slot) {
    const auto& skipped = slot.job.skipped;
    const auto n = static_cast<std::int64_t>(skipped.size());
    const auto kept = n - std::count(skipped.begin(), skipped.end(), 1);
    if (kept == 0) return std::nullopt;
    rig::Batch batch;
    batch.num_objects = kept;
    if (kept == n) {
      batch.indices = std::move(slot.job.indices);
      batch.tensors["images"] = std::move(slot.images);
      batch.tensors["labels"] = std::move(slot.labels);
      return batch;
    }
    const auto& shape = slot.images.shape();
    const std::int64_t image_floats = shape[1] * shape[2] * shape[3];
    Tensor images = Tensor::empty({kept, shape[1], shape[2], shape[3]});
    Tensor labels = Tensor::empty({kept}, rig::DType::i64);
    std::int64_t row = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      if (skipped[static_cast<std::size_t>(i)]) continue;
      std::copy_n(slot.images.data<float>() + i * image_floats, image_floats,
                  images.data<float>() + row * image_floats);
      labels.data<std::int64_t>()[row] = slot.labels.data<std::int64_t>()[i];
      batch.indices.push_back(slot.job.indices[static_cast<std::size_t>(i)]);
      ++row;
    }
    batch.tensors["images"] = std::move(images);
    batch.tensors["labels"] = std::move(labels);
    return batch;
  }

  // Queues batches until prefetch_batches are in flight or the epoch ends.
  void refill() {
    while (!ahead_done_ && static_cast<int>(slots_.size()) < prefetch_batches_) {
      auto indices = ahead_->next();
      if (!indices) {
        ahead_done_ = true;
        break;
      }
      auto slot = std::make_unique<Slot>();
      const auto n = static_cast<std::int64_t>(indices->size());
      slot->images = Tensor::empty({n, 3, image_size_, image_size_});
      slot->labels = Tensor::empty({n}, rig::DType::i64);
      auto* labels = slot->labels.data<std::int64_t>();
      for (std::int64_t i = 0; i < n; ++i) labels[i] = index_->label((*indices)[i]);
      slot->job.epoch = ahead_->epoch();
      slot->job.indices = std::move(*indices);
      slot->job.images = slot->images.data<float>();
      pool_->submit(&slot->job);
      slots_.push_back(std::move(slot));
    }
  }

  // Moves to `target`'s position. Prefetched batches stay valid when the
  // position does not change (e.g. start_epoch(0) right after construction).
  void restart(rig_data::EpochSampler target) {
    const auto now = sampler_->position();
    const auto then = target.position();
    if (now["epoch"].as<std::int64_t>() == then["epoch"].as<std::int64_t>() &&
        now["offset"].as<std::int64_t>() == then["offset"].as<std::int64_t>()) {
      return;
    }
    pool_->cancel_all();
    slots_.clear();
    report_skipped();
    *sampler_ = std::move(target);
    *ahead_ = *sampler_;
    ahead_done_ = false;
    refill();
  }

  // One stderr line per epoch (or part of one) in which corrupt images were replaced.
  void report_skipped() {
    if (skipped_ == 0) return;
    const std::string who = world_size_ > 1 ? fmt::format(" (rank {})", rank_) : "";
    fmt::print(stderr, "image_folder{}: skipped {} corrupt images in epoch {} of {}: first {}\n",
               who, skipped_, sampler_->epoch(), dir_key_, first_skipped_);
    std::fflush(stderr);
    skipped_ = 0;
    first_skipped_.clear();
  }

  bool train_;
  std::string dir_key_;  // the parameter naming this mode's folder
  int image_size_;
  int resize_size_;
  bool flip_;
  bool skip_corrupt_;
  int prefetch_batches_;
  std::uint64_t seed_;
  int rank_;
  int world_size_;
  image_folder::CropRange range_;
  image_folder::Normalise normalise_;

  std::vector<std::string> classes_;
  std::unique_ptr<image_folder::FolderIndex> index_;
  std::unique_ptr<rig_data::EpochSampler> sampler_;  // at the batches handed out
  std::unique_ptr<rig_data::EpochSampler> ahead_;    // at the batches queued
  bool ahead_done_ = false;
  std::deque<std::unique_ptr<Slot>> slots_;  // queued batches, oldest first

  std::int64_t skipped_ = 0;  // corrupt images handed out since the last report
  std::string first_skipped_;

  std::vector<std::unique_ptr<WorkerState>> workers_;
  std::unique_ptr<image_folder::WorkerPool> pool_;  // last: stops before the rest goes away
};

}  // namespace

RIG_PLUGIN(data_layer, "image_folder", "0.1.0",
           "ImageNet-style root/<class>/<image>.jpg, decoded by libjpeg-turbo on prefetching "
           "worker threads, with random-resized-crop / center-crop augmentation",
           ImageFolder)
