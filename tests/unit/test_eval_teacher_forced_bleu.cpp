// Teacher-forced BLEU (issue 6: OpenSeq2Seq's eval "BLEU" of the argmax of
// the teacher-forced logits, under its own name): the evaluator decodes a
// model's ModelOutput::teacher_forced_predictions with the data layer and
// scores them against the references exactly as the real decoded output;
// the result is the metric "teacher_forced_bleu", printed with a label that
// says it is not a translation score, and the real "BLEU" stays as it was.
// Checked against rig::bleu::corpus_bleu on strings known in advance (stub
// model and data), and end to end for the transformer plugin on
// synthetic_text against the argmax of its teacher-forced logits computed
// here from a copy of the network.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "config/defaults.hpp"
#include "engine/console.hpp"
#include "engine/evaluator.hpp"
#include "network.hpp"
#include "params.hpp"
#include "rig/bleu.hpp"
#include "rig/data_layer.hpp"
#include "rig/model.hpp"
#include "rig/ops.hpp"
#include "teacher_forcing.hpp"
#include "test_plugins_util.hpp"

namespace {

using rig::Tensor;
namespace engine = rig::engine;
using Rows = std::vector<std::vector<std::int64_t>>;

constexpr std::int64_t kEos = 1;

Tensor ids_tensor(const Rows& rows) {
  std::size_t width = 0;
  for (const auto& r : rows) width = std::max(width, r.size());
  std::vector<std::int64_t> flat(rows.size() * width, 0);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    std::copy(rows[i].begin(), rows[i].end(),
              flat.begin() + static_cast<std::ptrdiff_t>(i * width));
  }
  return Tensor::from_vector(
      flat, {static_cast<std::int64_t>(rows.size()), static_cast<std::int64_t>(width)});
}

// ---- a stub model and data layer with known outputs ----------------------------------

const std::vector<std::string> kWords{"<pad>", "</s>", "<s>", "<unk>", "the", "cat",
                                      "sat",   "on",   "a",   "mat",   "dog", "ran"};

// Two batches of two sentences; decode() turns ids into words as a text data
// layer does (up to the first EOS, special ids left out).
class WordData final : public rig::DataLayer {
 public:
  YAML::Node info() const override {
    YAML::Node info;
    info["task"] = "text2text";
    return info;
  }
  std::int64_t epoch_size() const override { return 4; }
  void start_epoch(std::int64_t) override { next_ = 0; }
  std::optional<rig::Batch> next_batch() override {
    if (next_ >= 4) return std::nullopt;
    rig::Batch batch;
    batch.indices = {next_, next_ + 1};
    batch.num_objects = 2;
    next_ += 2;
    return batch;
  }
  YAML::Node position() const override { return YAML::Node(next_); }
  void seek(const YAML::Node& position) override { next_ = position.as<std::int64_t>(); }
  std::vector<std::string> decode(const rig::Batch& batch,
                                  const Tensor& predictions) const override {
    std::vector<std::string> lines;
    const std::vector<std::int64_t> ids = predictions.to_int_vector();
    const std::int64_t width = predictions.size(1);
    for (std::size_t r = 0; r < batch.indices.size(); ++r) {
      std::vector<std::string> words;
      for (std::int64_t t = 0; t < width; ++t) {
        const std::int64_t id =
            ids[r * static_cast<std::size_t>(width) + static_cast<std::size_t>(t)];
        if (id == kEos) break;
        if (id >= 4) words.push_back(kWords[static_cast<std::size_t>(id)]);
      }
      lines.push_back(fmt::format("{}", fmt::join(words, " ")));
    }
    return lines;
  }
  std::vector<std::string> decode_targets(const rig::Batch& batch) const override {
    std::vector<std::string> lines;
    for (const auto i : batch.indices) lines.push_back(kReferences[static_cast<std::size_t>(i)]);
    return lines;
  }

  static inline const std::vector<std::string> kReferences{
      "the cat sat on the mat", "a dog ran", "the dog sat on a mat", "the cat ran on the mat"};

 private:
  std::int64_t next_ = 0;
};

// Per sample: what infer() "translates" and what teacher forcing predicts.
const Rows kDecoded{{4, 5, 6, 1}, {8, 10, 1}, {4, 10, 6, 1}, {4, 5, 11, 7, 8, 9, 1}};
const Rows kTeacherForced{
    {4, 5, 6, 7, 4, 9, 1}, {8, 11, 11, 1}, {4, 10, 6, 7, 8, 9, 1}, {4, 5, 11, 7, 4, 9, 1}};
// The same through WordData::decode.
const std::vector<std::string> kDecodedText{"the cat sat", "a dog", "the dog sat",
                                            "the cat ran on a mat"};
const std::vector<std::string> kTeacherForcedText{"the cat sat on the mat", "a ran ran",
                                                  "the dog sat on a mat", "the cat ran on the mat"};

class KnownModel final : public rig::Model {
 public:
  explicit KnownModel(bool teacher_forced) : teacher_forced_(teacher_forced) {}
  rig::ModelOutput forward(const rig::Batch& batch, rig::Mode) override {
    rig::ModelOutput out;
    out.loss = Tensor::scalar(0.5F);
    out.metrics["loss"] = {1.0, 2.0};
    if (teacher_forced_) out.teacher_forced_predictions = ids_tensor(pick(kTeacherForced, batch));
    return out;
  }
  Tensor infer(const rig::Batch& batch) override { return ids_tensor(pick(kDecoded, batch)); }

 private:
  static Rows pick(const Rows& rows, const rig::Batch& batch) {
    Rows out;
    for (const auto i : batch.indices) out.push_back(rows[static_cast<std::size_t>(i)]);
    return out;
  }
  bool teacher_forced_;
};

struct Evaluated {
  engine::EvalResult result;
  std::string printed;
};

Evaluated run_eval(rig::Model& model, rig::DataLayer& data, bool bleu) {
  const rig_test::LoadedPlugin local("communicator", "local");
  const std::unique_ptr<rig::Communicator> comm =
      local.descriptor->make_communicator(local.params(), rig::CommunicatorContext{});
  engine::EvalOptions options;
  options.bleu = bleu;
  options.print_samples = 0;
  Evaluated out;
  out.result = engine::evaluate(model, data, *comm, options);
  std::FILE* file = std::tmpfile();
  const engine::Console console(true, false, file);
  engine::print_eval(console, out.result, 7);
  std::rewind(file);
  char buffer[512];
  while (std::fgets(buffer, sizeof buffer, file) != nullptr) out.printed += buffer;
  std::fclose(file);
  return out;
}

TEST(EvalTeacherForcedBleu, ScoredLikeTheDecodedOutputUnderItsOwnName) {
  // The stub data layer really decodes to the strings the expectations use.
  WordData data;
  data.start_epoch(0);
  std::vector<std::string> decoded, forced;
  while (auto batch = data.next_batch()) {
    KnownModel model(true);
    for (const auto& line : data.decode(*batch, model.infer(*batch))) decoded.push_back(line);
    const Tensor tf = model.forward(*batch, rig::Mode::eval).teacher_forced_predictions;
    for (const auto& line : data.decode(*batch, tf)) forced.push_back(line);
  }
  ASSERT_EQ(decoded, kDecodedText);
  ASSERT_EQ(forced, kTeacherForcedText);
  const rig::bleu::Options bleu_options;
  const rig::bleu::Score real =
      rig::bleu::corpus_bleu(kDecodedText, WordData::kReferences, bleu_options);
  const rig::bleu::Score teacher_forced =
      rig::bleu::corpus_bleu(kTeacherForcedText, WordData::kReferences, bleu_options);
  ASSERT_GT(teacher_forced.score, real.score + 20.0) << "the example should tell them apart";

  KnownModel with(true);
  const Evaluated a = run_eval(with, data, true);
  EXPECT_DOUBLE_EQ(a.result.metrics.at("BLEU").value(), real.score);
  EXPECT_DOUBLE_EQ(a.result.metrics.at("teacher_forced_bleu").value(), teacher_forced.score);
  ASSERT_TRUE(a.result.teacher_forced_bleu.has_value());
  EXPECT_EQ(a.result.teacher_forced_bleu->format(), teacher_forced.format());
  EXPECT_EQ(a.result.bleu->format(), real.format());
  const std::string label = fmt::format(
      "*** Eval teacher-forced BLEU (reference prefix fed in; not a translation score): {:.2f}\n",
      teacher_forced.score);
  EXPECT_NE(a.printed.find(label), std::string::npos) << a.printed;
  EXPECT_EQ(a.printed.find("Validation teacher_forced_bleu"), std::string::npos) << a.printed;

  // Without teacher-forced predictions: no such metric or line, and the real
  // BLEU lines are the same as with them.
  KnownModel without(false);
  const Evaluated b = run_eval(without, data, true);
  EXPECT_EQ(b.result.metrics.count("teacher_forced_bleu"), 0U);
  EXPECT_FALSE(b.result.teacher_forced_bleu.has_value());
  EXPECT_EQ(b.printed.find("teacher-forced"), std::string::npos) << b.printed;
  std::string a_without_label = a.printed;
  a_without_label.erase(a_without_label.find(label), label.size());
  const auto drop_timing = [](std::string text) {
    return text.substr(0, text.find("*** Evaluated"));
  };
  EXPECT_EQ(drop_timing(a_without_label), drop_timing(b.printed));
  const std::string bleu_line = fmt::format("*** Eval BLEU score: {:.2f} (", real.score);
  EXPECT_NE(b.printed.find(bleu_line), std::string::npos) << b.printed;

  // eval_bleu off: neither BLEU.
  const Evaluated c = run_eval(with, data, false);
  EXPECT_EQ(c.result.metrics.count("BLEU"), 0U);
  EXPECT_EQ(c.result.metrics.count("teacher_forced_bleu"), 0U);
}

// ---- the transformer plugin end to end ------------------------------------------------

TEST(EvalTeacherForcedBleu, TransformerKeepsTheReferenceLengthUpToTheFirstEos) {
  // Argmax rows: an EOS mid-row, none within the reference, EOS first.
  const Tensor argmax = ids_tensor({{5, 1, 7, 8}, {5, 6, 7, 8}, {1, 5, 6, 7}, {9, 9, 9, 1}});
  const Tensor lengths = Tensor::from_vector(std::vector<std::int64_t>{4, 2, 3, 4}, {4});
  const Tensor got = rig_transformer::teacher_forced_predictions(argmax, lengths, kEos, 0);
  EXPECT_EQ(got.shape(), argmax.shape());
  EXPECT_EQ(got.to_int_vector(),
            (std::vector<std::int64_t>{5, 1, 0, 0, 5, 6, 0, 0, 1, 0, 0, 0, 9, 9, 9, 1}));
  EXPECT_THROW(
      rig_transformer::teacher_forced_predictions(argmax.to(rig::DType::f32), lengths, kEos, 0),
      std::invalid_argument);
  EXPECT_THROW(rig_transformer::teacher_forced_predictions(argmax, lengths.slice(0, 0, 3), kEos, 0),
               std::invalid_argument);
}

YAML::Node transformer_params(const rig_test::LoadedPlugin& plugin) {
  const YAML::Node schema = plugin.schema();
  YAML::Node params = YAML::Load(
      "{encoder_params: {encoder_layers: 1, hidden_size: 16, num_heads: 2, filter_size: 32, "
      "attention_dropout: 0.0, relu_dropout: 0.0, layer_postprocess_dropout: 0.0}, "
      "decoder_params: {num_hidden_layers: 1, hidden_size: 16, num_heads: 2, filter_size: 32, "
      "attention_dropout: 0.0, relu_dropout: 0.0, layer_postprocess_dropout: 0.0, beam_size: 2, "
      "extra_decode_length: 2}}");
  rig::config::fill_defaults(rig::config::SchemaDoc(schema, "model 'transformer'"), schema, params,
                             "", nullptr);
  return params;
}

TEST(EvalTeacherForcedBleu, TransformerScoresItsTeacherForcedArgmax) {
  const rig_test::LoadedPlugin transformer("model", "transformer");
  const rig_test::LoadedPlugin synthetic("data_layer", "synthetic_text");
  const rig_test::LoadedPlugin adam("optimizer", "adam");
  const std::unique_ptr<rig::DataLayer> data = synthetic.data_layer(
      synthetic.params("{vocab_size: 12, source_length: 5, target_length: 6, num_samples: 10}"),
      rig::Mode::eval, 4, 0, 1, 3);
  const YAML::Node params = transformer_params(transformer);
  rig::ParameterStore store;
  const rig::RunContext run;
  const std::unique_ptr<rig::Model> model =
      transformer.descriptor->make_model(params, rig::ModelContext{run, data->info(), store});
  store.allocate(11);
  // Half-trained on the eval pairs themselves: some teacher-forced tokens
  // right, some wrong, some EOS too early.
  const auto opt =
      adam.descriptor->make_optimizer(adam.params(), rig::OptimizerContext{run, store});
  for (int step = 0; step < 12; ++step) {
    data->start_epoch(0);
    while (auto batch = data->next_batch()) {
      store.zero_grad();
      model->forward(*batch, rig::Mode::train).loss.backward();
      opt->step(0.01);
    }
  }

  // The expectation: the argmax of the teacher-forced logits of a copy of
  // the network, cut here at the reference length and the first EOS, decoded
  // by the data layer; real BLEU: the data layer's decoding of infer().
  rig::ParameterStore copy_store;
  rig_transformer::Network copy(copy_store, rig_transformer::parse_params(params, data->info()),
                                rig::DType::f32);
  copy_store.allocate(11);
  copy_store.values().copy_from(store.values());
  copy_store.publish_values();
  std::vector<std::string> forced, decoded, references;
  double correct = 0.0, tokens = 0.0;
  data->start_epoch(0);
  {
    rig::NoGradGuard no_grad;
    while (auto batch = data->next_batch()) {
      const Tensor& target = batch->at("target_ids");
      const rig_transformer::Encoded encoded =
          copy.encode(batch->at("source_ids"), batch->at("source_lengths"), false, {});
      const Tensor argmax = rig::ops::argmax(copy.decode(target, encoded, false, {}), -1);
      const std::vector<std::int64_t> best = argmax.to_int_vector();
      const std::vector<std::int64_t> lengths = batch->at("target_lengths").to_int_vector();
      const std::vector<std::int64_t> reference = target.to_int_vector();
      const std::int64_t width = target.size(1);
      Rows rows;
      for (std::size_t r = 0; r < lengths.size(); ++r) {
        std::vector<std::int64_t> row;
        for (std::int64_t t = 0; t < lengths[r]; ++t) {
          const auto at = r * static_cast<std::size_t>(width) + static_cast<std::size_t>(t);
          correct += best[at] == reference[at] ? 1.0 : 0.0;
          tokens += 1.0;
          if (!row.empty() && row.back() == kEos) continue;  // cut after the first EOS
          row.push_back(best[at]);
        }
        rows.push_back(row);
      }
      for (const auto& line : data->decode(*batch, ids_tensor(rows))) forced.push_back(line);
      for (const auto& line : data->decode(*batch, model->infer(*batch))) decoded.push_back(line);
      for (const auto& line : data->decode_targets(*batch)) references.push_back(line);
    }
  }
  ASSERT_EQ(forced.size(), 10U);
  const double accuracy = correct / tokens;
  ASSERT_GT(accuracy, 0.2) << "too little training for a meaningful test";
  ASSERT_LT(accuracy, 0.95) << "too much training for a meaningful test";
  const rig::bleu::Options bleu_options;
  const double expected_forced = rig::bleu::corpus_bleu(forced, references, bleu_options).score;
  const double expected_real = rig::bleu::corpus_bleu(decoded, references, bleu_options).score;

  // In the XML report (--gtest_output=xml): the numbers this run compared.
  RecordProperty("teacher_forced_token_accuracy", fmt::format("{:.4f}", accuracy));
  RecordProperty("teacher_forced_bleu", fmt::format("{:.4f}", expected_forced));
  RecordProperty("BLEU", fmt::format("{:.4f}", expected_real));
  const Evaluated got = run_eval(*model, *data, true);
  EXPECT_DOUBLE_EQ(got.result.metrics.at("teacher_forced_bleu").value(), expected_forced);
  EXPECT_DOUBLE_EQ(got.result.metrics.at("BLEU").value(), expected_real);
  EXPECT_NEAR(got.result.metrics.at("teacher_forced_token_accuracy").value(), accuracy, 1e-12);
  EXPECT_GT(expected_forced, 0.0);
  EXPECT_LT(expected_forced, 100.0);
}

}  // namespace
