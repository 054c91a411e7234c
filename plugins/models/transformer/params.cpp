#include "params.hpp"

#include <string>

#include <fmt/format.h>

#include "rig/error.hpp"

namespace rig_transformer {

namespace {

const YAML::Node section(const YAML::Node& params, const char* name) {
  const YAML::Node node = params[name];
  if (!node || !node.IsMap()) {
    throw rig::UserError(
        fmt::format("model 'transformer': model_params.{} is missing or not a map", name));
  }
  return node;
}

StackParams stack(const YAML::Node& p, const char* section_name, const char* layers_key) {
  StackParams s;
  s.layers = p[layers_key].as<std::int64_t>();
  s.hidden_size = p["hidden_size"].as<std::int64_t>();
  s.num_heads = p["num_heads"].as<std::int64_t>();
  s.filter_size = p["filter_size"].as<std::int64_t>();
  s.attention_dropout = p["attention_dropout"].as<float>();
  s.relu_dropout = p["relu_dropout"].as<float>();
  s.layer_postprocess_dropout = p["layer_postprocess_dropout"].as<float>();
  if (s.hidden_size % s.num_heads != 0) {
    throw rig::UserError(fmt::format(
        "model 'transformer': model_params.{}.hidden_size {} is not a multiple of num_heads {}",
        section_name, s.hidden_size, s.num_heads));
  }
  if (s.hidden_size % 2 != 0) {
    throw rig::UserError(fmt::format(
        "model 'transformer': model_params.{}.hidden_size {} must be even (the position "
        "encoding is half sines, half cosines)",
        section_name, s.hidden_size));
  }
  return s;
}

std::int64_t info_int(const YAML::Node& info, const char* key) {
  const YAML::Node value = info[key];
  if (!value) {
    throw rig::UserError(fmt::format(
        "model 'transformer': the data layer does not say '{}' in its info(); transformer "
        "needs a text2text data layer (src_vocab_size, tgt_vocab_size, pad_id, eos_id)",
        key));
  }
  return value.as<std::int64_t>();
}

// A special id of decoder_params must be the data layer's when it says one.
void check_id(const YAML::Node& info, const char* info_key, const char* param, std::int64_t value) {
  const YAML::Node given = info[info_key];
  if (given && given.as<std::int64_t>() != value) {
    throw rig::UserError(fmt::format(
        "model 'transformer': model_params.decoder_params.{} is {} but the data layer's {} is {}",
        param, value, info_key, given.as<std::int64_t>()));
  }
}

}  // namespace

Params parse_params(const YAML::Node& params, const YAML::Node& info) {
  const YAML::Node task = info["task"];
  if (task && task.as<std::string>() != "text2text") {
    throw rig::UserError(
        fmt::format("model 'transformer': the data layer's task is '{}'; transformer needs "
                    "text2text",
                    task.as<std::string>()));
  }
  const YAML::Node enc = section(params, "encoder_params");
  const YAML::Node dec = section(params, "decoder_params");
  const YAML::Node loss = section(params, "loss_params");
  Params p;
  p.encoder = stack(enc, "encoder_params", "encoder_layers");
  p.decoder = stack(dec, "decoder_params", "num_hidden_layers");
  if (p.encoder.hidden_size != p.decoder.hidden_size) {
    throw rig::UserError(fmt::format(
        "model 'transformer': encoder_params.hidden_size {} and decoder_params.hidden_size {} "
        "differ; the shared embedding needs one size",
        p.encoder.hidden_size, p.decoder.hidden_size));
  }
  p.remove_padding = enc["remove_padding"].as<bool>();
  p.recompute_activations = params["recompute_activations"].as<bool>();
  p.beam_size = dec["beam_size"].as<std::int64_t>();
  p.alpha = dec["alpha"].as<float>();
  p.extra_decode_length = dec["extra_decode_length"].as<std::int64_t>();
  p.go_id = dec["GO_SYMBOL"].as<std::int64_t>();
  p.eos_id = dec["END_SYMBOL"].as<std::int64_t>();
  p.pad_id = dec["PAD_SYMBOL"].as<std::int64_t>();
  p.label_smoothing = loss["label_smoothing"].as<float>();

  const std::int64_t src = info_int(info, "src_vocab_size");
  const std::int64_t tgt = info_int(info, "tgt_vocab_size");
  if (src != tgt) {
    throw rig::UserError(fmt::format(
        "model 'transformer': src_vocab_size {} and tgt_vocab_size {} of the data layer differ; "
        "the transformer shares one embedding between source, target and softmax, so both "
        "sides need the same vocabulary (a joint vocabulary file)",
        src, tgt));
  }
  p.data_vocab_size = tgt;
  p.vocab_size = enc["pad_embeddings_2_eight"].as<bool>() ? (tgt + 7) / 8 * 8 : tgt;
  check_id(info, "pad_id", "PAD_SYMBOL", p.pad_id);
  check_id(info, "eos_id", "END_SYMBOL", p.eos_id);
  check_id(info, "go_id", "GO_SYMBOL", p.go_id);
  for (const auto& [name, id] : {std::pair<const char*, std::int64_t>{"GO_SYMBOL", p.go_id},
                                 {"END_SYMBOL", p.eos_id},
                                 {"PAD_SYMBOL", p.pad_id}}) {
    if (id < 0 || id >= p.data_vocab_size) {
      throw rig::UserError(fmt::format(
          "model 'transformer': model_params.decoder_params.{} {} is outside the vocabulary "
          "[0, {})",
          name, id, p.data_vocab_size));
    }
  }
  return p;
}

}  // namespace rig_transformer
