// One pass over an evaluation data layer: every sample once, metrics summed
// over batches and ranks. For translation-like data (a data layer whose
// info() says task: text2text) it can also decode every sample with the
// model's inference and score the detokenized output with corpus BLEU.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/console.hpp"
#include "rig/bleu.hpp"
#include "rig/communicator.hpp"
#include "rig/data_layer.hpp"
#include "rig/model.hpp"

namespace rig::engine {

struct EvalOptions {
  // Decode every sample (model.infer + data.decode), compare with
  // data.decode_targets and report corpus BLEU as the metric "BLEU". A model
  // that returns teacher_forced_predictions also gets their BLEU, scored the
  // same way, as the metric "teacher_forced_bleu".
  bool bleu = false;
  bleu::Options bleu_options;
  // How many (prediction, reference) pairs of the first batch to print.
  int print_samples = 3;
  // Where rank 0 writes the decoded outputs and their references, one line
  // per sample in data order (empty: not written). One process only.
  std::filesystem::path outputs_file;
  std::filesystem::path references_file;
};

struct EvalResult {
  Metrics metrics;           // always has "loss"; "BLEU" (and "teacher_forced_bleu") when decoded
  std::int64_t samples = 0;  // over all ranks
  std::int64_t batches = 0;  // on this rank
  double seconds = 0.0;
  std::optional<bleu::Score> bleu;
  std::optional<bleu::Score> teacher_forced_bleu;  // of ModelOutput::teacher_forced_predictions
  std::string bleu_signature;
  std::vector<std::pair<std::string, std::string>> shown;  // (prediction, reference)
};

// True when `data` produces text2text batches (so BLEU applies).
bool decodes_text(const DataLayer& data);

// The options an experiment asks for: BLEU when `eval_bleu` and the data is
// text2text, decoded outputs to logdir/eval_outputs.txt (references to
// logdir/eval_references.txt).
EvalOptions eval_options(const DataLayer& data, bool eval_bleu, int print_samples,
                         const std::filesystem::path& logdir);

EvalResult evaluate(Model& model, DataLayer& data, Communicator& comm,
                    const EvalOptions& options = {});

// "*** Validation loss: 0.1234", one line per other metric, the BLEU line
// with its signature, the teacher-forced BLEU line (labelled as not a
// translation score) and the printed samples.
void print_eval(const Console& console, const EvalResult& result, std::int64_t step);

}  // namespace rig::engine
