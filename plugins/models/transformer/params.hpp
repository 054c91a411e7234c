// The transformer's settings: OpenSeq2Seq's encoder_params, decoder_params and
// loss_params (model_params: {encoder_params: {...}, decoder_params: {...},
// loss_params: {...}}), with the vocabulary and special ids the data layer's
// info() gives, checked against each other.
#pragma once

#include <cstdint>

#include <yaml-cpp/yaml.h>

namespace rig_transformer {

struct StackParams {
  std::int64_t layers = 0;
  std::int64_t hidden_size = 0;
  std::int64_t num_heads = 0;
  std::int64_t filter_size = 0;
  float attention_dropout = 0.0F;
  float relu_dropout = 0.0F;
  float layer_postprocess_dropout = 0.0F;
};

struct Params {
  StackParams encoder;
  StackParams decoder;
  bool remove_padding = true;  // zero the encoder FFN output at padding positions
  bool recompute_activations =
      false;                         // layers run again in backward instead of keeping activations
  std::int64_t vocab_size = 0;       // the shared embedding's rows (padded to 8 if asked)
  std::int64_t data_vocab_size = 0;  // the data layer's vocabulary
  std::int64_t beam_size = 1;
  float alpha = 0.0F;
  std::int64_t extra_decode_length = 0;
  std::int64_t go_id = 2;
  std::int64_t eos_id = 1;
  std::int64_t pad_id = 0;
  float label_smoothing = 0.0F;
};

// params: the validated model_params; info: the data layer's info(). Throws
// rig::UserError when they do not fit (different source and target
// vocabularies, special ids that differ from the data layer's, ...).
Params parse_params(const YAML::Node& params, const YAML::Node& info);

}  // namespace rig_transformer
