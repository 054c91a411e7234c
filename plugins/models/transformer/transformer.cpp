// transformer: OpenSeq2Seq's Text2Text model with TransformerEncoder and
// TransformerDecoder (network.hpp), trained with PaddedCrossEntropyLossWithSmoothing
// and decoded with beam search (beam_search.hpp). Batches follow the text2text
// contract: source_ids / source_lengths / target_ids / target_lengths.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "beam_search.hpp"
#include "network.hpp"
#include "params.hpp"
#include "rig/autograd.hpp"
#include "rig/error.hpp"
#include "rig/ops.hpp"
#include "rig/plugin.hpp"
#include "teacher_forcing.hpp"

namespace {

using rig::Tensor;
namespace ops = rig::ops;
using rig_transformer::Network;
using rig_transformer::Params;

// f32 [B, T]: 1 at positions t < lengths[b], computed on the lengths' device.
Tensor length_mask(const Tensor& lengths, std::int64_t width) {
  const Tensor positions =
      Tensor::arange(width, rig::DType::i64, lengths.device()).reshape({1, -1});
  return ops::less(positions, lengths.reshape({-1, 1})).to(rig::DType::f32);
}

class Transformer final : public rig::Model {
 public:
  Transformer(const YAML::Node& params, const rig::ModelContext& ctx)
      : params_(rig_transformer::parse_params(params, ctx.data_info)),
        dtype_(checked_dtype(ctx.run.dtype)),
        net_(ctx.params, params_, dtype_) {}

  rig::ModelOutput forward(const rig::Batch& batch, rig::Mode mode) override {
    std::optional<rig::NoGradGuard> no_grad;
    if (mode != rig::Mode::train) no_grad.emplace();
    const bool training = mode == rig::Mode::train;
    const Tensor& source = batch.at("source_ids");
    const Tensor& source_lengths = batch.at("source_lengths");
    const Tensor& target = batch.at("target_ids");
    const Tensor& target_lengths = batch.at("target_lengths");
    check_ids(batch, "source");
    check_ids(batch, "target");
    if (target.size(0) != source.size(0)) {
      throw std::invalid_argument(
          fmt::format("transformer: source_ids {} and target_ids {} have different batch sizes",
                      rig::to_string(source.shape()), rig::to_string(target.shape())));
    }
    const rig_transformer::Encoded encoded =
        net_.encode(source, source_lengths, training, batch.rng);
    // 16-bit logits go to the loss as they are: it computes in f32 and, where
    // the back end reads 16-bit storage, returns their gradient in their dtype
    // (no f32 copy of the [B, T, vocab] logits or of their gradient).
    const Tensor logits = net_.decode(target, encoded, training, batch.rng);
    const Tensor weights = length_mask(target_lengths, target.size(1));
    rig::ModelOutput out;
    out.loss = ops::padded_cross_entropy(logits, target, weights, params_.label_smoothing);
    if (mode != rig::Mode::eval) return out;  // training reads nothing back
    // Eval metrics: three numbers read back at once.
    const Tensor predicted = ops::argmax(logits.detach().to(rig::DType::f32), -1);
    const Tensor correct =
        ops::sum(ops::mul(ops::equal(predicted, target).to(rig::DType::f32), weights));
    const std::vector<float> numbers =
        ops::concat(
            {ops::sum(weights).reshape({1}), out.loss.detach().reshape({1}), correct.reshape({1})},
            0)
            .to_vector();
    const double tokens = numbers[0];
    out.metrics["loss"] = {static_cast<double>(numbers[1]) * tokens, tokens};
    out.metrics["teacher_forced_token_accuracy"] = {numbers[2], tokens};
    out.teacher_forced_predictions = rig_transformer::teacher_forced_predictions(
        predicted, target_lengths, params_.eos_id, params_.pad_id);
    return out;
  }

  Tensor infer(const rig::Batch& batch) override {
    rig::NoGradGuard no_grad;
    const Tensor& source = batch.at("source_ids");
    const Tensor& source_lengths = batch.at("source_lengths");
    check_ids(batch, "source");
    const rig_transformer::Encoded encoded = net_.encode(source, source_lengths, false, batch.rng);
    rig_transformer::SearchParams search;
    search.batch_size = source.size(0);
    search.beam_size = params_.beam_size;
    search.alpha = params_.alpha;
    // As OpenSeq2Seq: the batch's source width plus extra_decode_length.
    search.max_decode_length = source.size(1) + params_.extra_decode_length;
    search.vocab_size = net_.vocab_size();
    search.eos_id = params_.eos_id;
    search.pad_id = params_.pad_id;
    search.device = source.device();
    // Hypothesis b x beam + j decodes source row b.
    std::vector<std::int64_t> rows;
    for (std::int64_t b = 0; b < search.batch_size; ++b)
      rows.insert(rows.end(), search.beam_size, b);
    rig_transformer::DecodeState state =
        net_.start_decoding(encoded,
                            Tensor::from_vector(rows, {static_cast<std::int64_t>(rows.size())},
                                                encoded.output.device()),
                            search.max_decode_length);
    const rig_transformer::SearchResult result = rig_transformer::search(
        search, [&](const Tensor& ids) { return net_.decode_step(ids, state); },
        [&](const Tensor& index) { Network::reorder(state, index); });
    return rig_transformer::to_tensor(result, params_.pad_id);
  }

 private:
  static rig::DType checked_dtype(rig::DType dtype) {
    if (!rig::is_floating(dtype)) {
      throw std::invalid_argument(
          fmt::format("transformer: compute dtype {} is not floating", rig::dtype_name(dtype)));
    }
    return dtype;
  }

  // <side>_ids i64 [B, T] within the vocabulary, <side>_lengths i64 [B] in [1, T].
  void check_ids(const rig::Batch& batch, const char* side) const {
    const std::string ids_name = fmt::format("{}_ids", side);
    const std::string lengths_name = fmt::format("{}_lengths", side);
    const Tensor& ids = batch.at(ids_name);
    const Tensor& lengths = batch.at(lengths_name);
    if (ids.dtype() != rig::DType::i64 || ids.dim() != 2 || ids.size(1) < 1 ||
        lengths.dtype() != rig::DType::i64 || lengths.dim() != 1 ||
        lengths.size(0) != ids.size(0)) {
      throw std::invalid_argument(fmt::format(
          "transformer: {0}_ids {1} {2} and {0}_lengths {3} {4}, expected i64 [batch,time] and "
          "i64 [batch]",
          side, rig::dtype_name(ids.dtype()), rig::to_string(ids.shape()),
          rig::dtype_name(lengths.dtype()), rig::to_string(lengths.shape())));
    }
    // On the host copy the engine keeps of a moved batch: no device read.
    const std::int64_t width = ids.size(1);
    const std::vector<std::int64_t> v = batch.host(ids_name).to_int_vector();
    const std::vector<std::int64_t> l = batch.host(lengths_name).to_int_vector();
    for (std::size_t i = 0; i < v.size(); ++i) {
      const auto row = static_cast<std::int64_t>(i) / width;
      if (v[i] >= 0 && v[i] < params_.data_vocab_size) continue;
      throw rig::UserError(fmt::format(
          "model 'transformer': {} token id {} at batch position {}{} is outside the vocabulary "
          "[0, {})",
          side, v[i], row, index_note(batch, row), params_.data_vocab_size));
    }
    for (std::size_t b = 0; b < l.size(); ++b) {
      if (l[b] >= 1 && l[b] <= width) continue;
      throw rig::UserError(fmt::format(
          "model 'transformer': {}_lengths {} at batch position {}{} is outside [1, {}]", side,
          l[b], b, index_note(batch, static_cast<std::int64_t>(b)), width));
    }
  }

  static std::string index_note(const rig::Batch& batch, std::int64_t row) {
    const auto r = static_cast<std::size_t>(row);
    return r < batch.indices.size() ? fmt::format(" (data-set index {})", batch.indices[r]) : "";
  }

  Params params_;
  rig::DType dtype_;
  Network net_;
};

}  // namespace

RIG_PLUGIN(model, "transformer", "0.1.0",
           "OpenSeq2Seq's Transformer (Text2Text, TransformerEncoder/Decoder) for translation",
           Transformer)
