#include "engine/evaluator.hpp"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "engine/activity.hpp"
#include "engine/gather_lines.hpp"
#include "rig/error.hpp"

namespace rig::engine {

namespace {

// Sums `values` over the ranks (a no-op in one process). Every rank passes
// the same number of values in the same order. f32 is exact for counts up
// to 2^24, far above the tokens of an evaluation set.
void sum_over_ranks(Communicator& comm, std::vector<double>& values) {
  if (comm.size() == 1 || values.empty()) return;
  std::vector<float> narrow(values.begin(), values.end());
  Tensor buffer = Tensor::from_vector(narrow, {static_cast<std::int64_t>(narrow.size())});
  comm.allreduce(buffer, ReduceOp::sum)->wait();
  const float* reduced = buffer.data<float>();
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = reduced[i];
}

std::vector<double> flatten(const bleu::Stats& s) {
  std::vector<double> v;
  for (int n = 0; n < bleu::kMaxOrder; ++n) {
    v.push_back(static_cast<double>(s.matches[n]));
    v.push_back(static_cast<double>(s.totals[n]));
  }
  v.push_back(static_cast<double>(s.hyp_len));
  v.push_back(static_cast<double>(s.ref_len));
  return v;
}

bleu::Stats unflatten(const std::vector<double>& v) {
  bleu::Stats s;
  std::size_t i = 0;
  for (int n = 0; n < bleu::kMaxOrder; ++n) {
    s.matches[n] = static_cast<std::int64_t>(v[i++]);
    s.totals[n] = static_cast<std::int64_t>(v[i++]);
  }
  s.hyp_len = static_cast<std::int64_t>(v[i++]);
  s.ref_len = static_cast<std::int64_t>(v[i]);
  return s;
}

void write_lines(const std::filesystem::path& path,
                 const std::map<std::int64_t, std::string>& lines) {
  std::ofstream out(path);
  for (const auto& [index, line] : lines) out << line << '\n';
  if (!out) throw UserError(fmt::format("cannot write {}", path.string()));
}

}  // namespace

bool decodes_text(const DataLayer& data) {
  const YAML::Node info = data.info();
  return info["task"] && info["task"].as<std::string>() == "text2text";
}

EvalOptions eval_options(const DataLayer& data, bool eval_bleu, int print_samples,
                         const std::filesystem::path& logdir) {
  EvalOptions options;
  options.bleu = eval_bleu && decodes_text(data);
  options.print_samples = print_samples;
  if (options.bleu) {
    options.outputs_file = logdir / "eval_outputs.txt";
    options.references_file = logdir / "eval_references.txt";
  }
  return options;
}

EvalResult evaluate(Model& model, DataLayer& data, Communicator& comm, const EvalOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  const ActivityScope activity("evaluation");
  NoGradGuard no_grad;
  EvalResult result;
  bleu::Stats bleu_stats;
  bleu::Stats teacher_forced_stats;
  double teacher_forced_sentences = 0.0;
  std::map<std::int64_t, std::string> outputs;  // by sample index, for the files
  std::map<std::int64_t, std::string> references;
  const bool keep_lines = !options.outputs_file.empty();
  data.start_epoch(0);
  while (auto batch = data.next_batch()) {
    ModelOutput out = model.forward(*batch, Mode::eval);
    const auto n = static_cast<double>(batch->indices.empty() ? 1 : batch->indices.size());
    if (out.metrics.find("loss") == out.metrics.end()) {
      // A model that reports no loss metric: weight its batch loss by batch size.
      out.metrics["loss"] = Metric{static_cast<double>(out.loss.item()) * n, n};
    }
    // Samples are counted by index; a data layer without indices counts by
    // the model's loss weight (the batch size for classifiers).
    result.samples += batch->indices.empty() ? static_cast<std::int64_t>(out.metrics["loss"].count)
                                             : static_cast<std::int64_t>(batch->indices.size());
    for (const auto& [name, metric] : out.metrics) {
      result.metrics[name].sum += metric.sum;
      result.metrics[name].count += metric.count;
    }
    if (options.bleu) {
      const std::vector<std::string> expected = data.decode_targets(*batch);
      // Token ids to text, one line per reference (else the data layer is broken).
      const auto decode = [&](const Tensor& tokens, std::string_view what) {
        std::vector<std::string> lines = data.decode(*batch, tokens);
        if (lines.size() != expected.size()) {
          throw RunError(
              fmt::format("BLEU: the data layer decoded {} {} but {} references for "
                          "one batch",
                          lines.size(), what, expected.size()));
        }
        return lines;
      };
      const std::vector<std::string> predicted = decode(model.infer(*batch), "predictions");
      if (out.teacher_forced_predictions.defined()) {
        // Scored exactly as the decoded output: the data layer's decoding, the same references.
        const std::vector<std::string> forced =
            decode(out.teacher_forced_predictions, "teacher-forced predictions");
        for (std::size_t i = 0; i < forced.size(); ++i) {
          teacher_forced_stats +=
              bleu::sentence_stats(forced[i], expected[i], options.bleu_options);
        }
        teacher_forced_sentences += static_cast<double>(forced.size());
      }
      for (std::size_t i = 0; i < predicted.size(); ++i) {
        bleu_stats += bleu::sentence_stats(predicted[i], expected[i], options.bleu_options);
        if (static_cast<int>(result.shown.size()) < options.print_samples) {
          result.shown.emplace_back(predicted[i], expected[i]);
        }
        if (keep_lines) {
          const std::int64_t index = i < batch->indices.size()
                                         ? batch->indices[i]
                                         : static_cast<std::int64_t>(outputs.size());
          outputs[index] = predicted[i];
          references[index] = expected[i];
        }
      }
    }
    ++result.batches;
  }
  // Every rank must agree on the metric names for the reduction to line up.
  std::vector<double> values;
  for (const auto& [name, metric] : result.metrics) {
    values.push_back(metric.sum);
    values.push_back(metric.count);
  }
  values.push_back(static_cast<double>(result.samples));
  std::size_t bleu_values = 0;
  if (options.bleu) {
    // Every rank sends the teacher-forced statistics (zeros when its model
    // gives none), so the reduction lines up.
    const auto stats = flatten(bleu_stats);
    const auto forced = flatten(teacher_forced_stats);
    bleu_values = stats.size();
    values.insert(values.end(), stats.begin(), stats.end());
    values.insert(values.end(), forced.begin(), forced.end());
    values.push_back(teacher_forced_sentences);
  }
  sum_over_ranks(comm, values);
  std::size_t i = 0;
  for (auto& [name, metric] : result.metrics) {
    metric.sum = values[i++];
    metric.count = values[i++];
  }
  result.samples = static_cast<std::int64_t>(values[i++]);
  if (result.metrics["loss"].count == 0.0) {
    throw UserError("the evaluation data layer produced no samples");
  }
  if (options.bleu) {
    const auto part = [&](std::size_t begin) {
      const auto first = values.begin() + static_cast<std::ptrdiff_t>(begin);
      return unflatten({first, first + static_cast<std::ptrdiff_t>(bleu_values)});
    };
    const bleu::Score score = bleu::score(part(i), options.bleu_options);
    result.metrics["BLEU"] = Metric{score.score, 1.0};
    result.bleu = score;
    result.bleu_signature = bleu::signature(options.bleu_options);
    if (values.back() > 0.0) {
      result.teacher_forced_bleu = bleu::score(part(i + bleu_values), options.bleu_options);
      result.metrics["teacher_forced_bleu"] = Metric{result.teacher_forced_bleu->score, 1.0};
    }
    if (keep_lines) {
      outputs = gather_lines(comm, std::move(outputs));
      references = gather_lines(comm, std::move(references));
      if (comm.rank() == 0) {
        write_lines(options.outputs_file, outputs);
        write_lines(options.references_file, references);
      }
    }
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

void print_eval(const Console& console, const EvalResult& result, std::int64_t step) {
  console.print("*** Running evaluation on a validation set (step {}):", step);
  console.print("*** Validation loss: {:.4f}", result.metrics.at("loss").value());
  for (const auto& [name, metric] : result.metrics) {
    if (name == "loss" || name == "BLEU" || name == "teacher_forced_bleu") continue;
    console.print("*** Validation {}: {:.4f}", name, metric.value());
  }
  if (result.bleu) {
    console.print("*** Eval BLEU score: {:.2f} ({})", result.bleu->score, result.bleu_signature);
    console.print("*** {}", result.bleu->format());
    if (result.teacher_forced_bleu) {
      console.print(
          "*** Eval teacher-forced BLEU (reference prefix fed in; not a translation score): {:.2f}",
          result.teacher_forced_bleu->score);
    }
    for (std::size_t k = 0; k < result.shown.size(); ++k) {
      console.print("*** Eval sample {}: prediction: {}", k, result.shown[k].first);
      console.print("*** Eval sample {}: reference:  {}", k, result.shown[k].second);
    }
  }
  console.print("*** Evaluated {} samples in {:.2f}s", result.samples, result.seconds);
}

}  // namespace rig::engine
