// Teacher-forced BLEU (issue 6: OpenSeq2Seq's eval "BLEU" of the argmax of
// the teacher-forced logits, under its own name): the evaluator decodes a
// model's ModelOutput::teacher_forced_predictions with the data layer and
// scores them against the references exactly as the real decoded output;
// the result is the metric "teacher_forced_bleu", printed with a label that
// says it is not a translation score, and the real "BLEU" stays as it was.
// Checked against rig::bleu::corpus_bleu on strings known in advance (stub
// model and data); the transformer plugin's own test
// (plugins/models/transformer/test_transformer.cpp) checks it end to end.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "engine/console.hpp"
#include "engine/evaluator.hpp"
#include "rig/bleu.hpp"
#include "rig/data_layer.hpp"
#include "rig/model.hpp"
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

}  // namespace
