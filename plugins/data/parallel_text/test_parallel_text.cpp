// The parallel_text data layer on small vocab and text files the tests write:
// exact ids, padding and lengths, long and empty lines, sharding, resuming,
// token batching, decoding, the SentencePiece check and every bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "rig/error.hpp"
#include "test_plugins_util.hpp"
#include "user_error_of.hpp"

namespace {

namespace fs = std::filesystem;
using rig::Mode;

const std::string kSpecials = "<pad>\t0\n</s>\t0\n<s>\t0\n<unk>\t0\n";
// Source (German) ids 4..8, target (English) ids 4..9.
const std::string kSrcVocab = kSpecials + "▁hallo\t-1\n▁welt\t-2\n.\t-3\n▁guten\t-4\n▁tag\t-5\n";
const std::string kTgtVocab =
    kSpecials + "▁hello\t-1\n▁world\t-2\n.\t-3\n▁good\t-4\n▁day\t-5\n!\t-6\n";

std::vector<std::int64_t> ids(const rig::Tensor& t) {
  const auto* p = t.data<std::int64_t>();
  return {p, p + t.numel()};
}

std::vector<rig::Batch> epoch(rig::DataLayer& data) {
  std::vector<rig::Batch> batches;
  while (auto batch = data.next_batch()) batches.push_back(std::move(*batch));
  return batches;
}

class DataParallelText : public ::testing::Test {
 protected:
  rig_test::LoadedPlugin plugin{"data_layer", "parallel_text"};
  fs::path root;

  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "rig-parallel-text-XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    root = pattern;
    write("src.vocab", kSrcVocab);
    write("tgt.vocab", kTgtVocab);
    write("train.de", "▁hallo ▁welt .\n▁guten ▁tag\n▁hallo ▁xyz\n");
    write("train.en", "▁hello ▁world .\n▁good ▁day !\n▁hello\n");
  }
  void TearDown() override {
    if (!root.empty()) fs::remove_all(root);
  }

  std::string write(const std::string& name, const std::string& text) {
    std::ofstream(root / name, std::ios::binary) << text;
    return (root / name).string();
  }
  std::string path(const std::string& name) const { return (root / name).string(); }

  // The layer over train.{de,en} (or the files `params` names) in `mode`.
  std::unique_ptr<rig::DataLayer> make(const std::string& params, Mode mode,
                                       std::int64_t batch_size, int rank = 0, int world_size = 1) {
    YAML::Node all = plugin.params(params);
    const auto set = [&](const char* key, const std::string& file) {
      if (!all[key]) all[key] = path(file);
    };
    set("src_vocab_file", "src.vocab");
    set("tgt_vocab_file", "tgt.vocab");
    set("source_file", "train.de");
    if (all["target_file"].as<std::string>().empty() && mode != Mode::infer &&
        !YAML::Load(params)["target_file"]) {
      all["target_file"] = path("train.en");
    }
    return plugin.data_layer(all, mode, batch_size, rank, world_size, 7);
  }

  // `n` pairs of 1..6 pieces (line i: i % 6 + 1 source pieces, (i * 5) % 7 + 1 target pieces).
  void many_pairs(int n) {
    std::string de;
    std::string en;
    const std::vector<std::string> src = {"▁hallo", "▁welt", ".", "▁guten", "▁tag"};
    const std::vector<std::string> tgt = {"▁hello", "▁world", ".", "▁good", "▁day", "!"};
    for (int i = 0; i < n; ++i) {
      for (int k = 0; k <= i % 6; ++k) de += (k ? " " : "") + src[(i + k) % src.size()];
      for (int k = 0; k <= (i * 5) % 7; ++k) en += (k ? " " : "") + tgt[(i + k) % tgt.size()];
      de += "\n";
      en += "\n";
    }
    write("many.de", de);
    write("many.en", en);
  }
  std::string many(const std::string& extra = "") const {
    return fmt::format("{{source_file: '{}', target_file: '{}'{}}}", path("many.de"),
                       path("many.en"), extra.empty() ? "" : ", " + extra);
  }

  std::string error_of(const std::string& params, Mode mode = Mode::train) {
    return rig_test::user_error_of([&] { make(params, mode, 2); });
  }
};

TEST_F(DataParallelText, ExactIdsLengthsAndInfo) {
  auto data = make("{}", Mode::eval, 3);
  const YAML::Node info = data->info();
  EXPECT_EQ(info["task"].as<std::string>(), "text2text");
  EXPECT_EQ(info["src_vocab_size"].as<int>(), 9);
  EXPECT_EQ(info["tgt_vocab_size"].as<int>(), 10);
  EXPECT_EQ(info["pad_id"].as<int>(), 0);
  EXPECT_EQ(info["eos_id"].as<int>(), 1);
  EXPECT_EQ(info["go_id"].as<int>(), 2);
  EXPECT_EQ(info["unk_id"].as<int>(), 3);
  EXPECT_EQ(data->epoch_size(), 3);
  auto batch = data->next_batch();
  ASSERT_TRUE(batch);
  EXPECT_EQ(batch->at("source_ids").shape(), (rig::Shape{3, 4}));
  // "▁xyz" is not in the vocab: <unk>.
  EXPECT_EQ(ids(batch->at("source_ids")),
            (std::vector<std::int64_t>{4, 5, 6, 1, 7, 8, 1, 0, 4, 3, 1, 0}));
  EXPECT_EQ(ids(batch->at("source_lengths")), (std::vector<std::int64_t>{4, 3, 3}));
  EXPECT_EQ(ids(batch->at("target_ids")),
            (std::vector<std::int64_t>{4, 5, 6, 1, 7, 8, 9, 1, 4, 1, 0, 0}));
  EXPECT_EQ(ids(batch->at("target_lengths")), (std::vector<std::int64_t>{4, 4, 2}));
  EXPECT_EQ(batch->num_objects, 10);  // target tokens
  EXPECT_EQ(batch->indices, (std::vector<std::int64_t>{0, 1, 2}));
  EXPECT_FALSE(data->next_batch());
}

TEST_F(DataParallelText, StartTokenAndPaddingToEight) {
  auto data = make("{use_start_token: true, pad_lengths_to_eight: true, pad_vocab_to_eight: true}",
                   Mode::eval, 2);
  EXPECT_EQ(data->info()["src_vocab_size"].as<int>(), 16);
  EXPECT_EQ(data->info()["tgt_vocab_size"].as<int>(), 16);
  auto batch = data->next_batch();
  ASSERT_TRUE(batch);
  EXPECT_EQ(batch->at("source_ids").shape(), (rig::Shape{2, 8}));
  EXPECT_EQ(ids(batch->at("source_ids")),
            (std::vector<std::int64_t>{2, 4, 5, 6, 1, 0, 0, 0, 2, 7, 8, 1, 0, 0, 0, 0}));
  EXPECT_EQ(ids(batch->at("source_lengths")), (std::vector<std::int64_t>{5, 4}));
  EXPECT_EQ(ids(batch->at("target_lengths")), (std::vector<std::int64_t>{5, 5}));
  batch = data->next_batch();  // the last partial batch is kept in eval mode
  ASSERT_TRUE(batch);
  EXPECT_EQ(ids(batch->at("target_ids")), (std::vector<std::int64_t>{2, 4, 1, 0, 0, 0, 0, 0}));
  EXPECT_EQ(batch->indices, (std::vector<std::int64_t>{2}));
}

TEST_F(DataParallelText, LongLinesAreTruncatedSkippedOrKept) {
  // max_length counts EOS (and <s>): 3 tokens keep 2 pieces, or 1 after <s>.
  auto data = make("{max_length: 3}", Mode::eval, 3);
  auto batch = data->next_batch();
  EXPECT_EQ(ids(batch->at("source_ids")), (std::vector<std::int64_t>{4, 5, 1, 7, 8, 1, 4, 3, 1}));
  EXPECT_EQ(ids(batch->at("target_ids")), (std::vector<std::int64_t>{4, 5, 1, 7, 8, 1, 4, 1, 0}));
  data = make("{max_length: 3, use_start_token: true}", Mode::eval, 3);
  batch = data->next_batch();
  EXPECT_EQ(ids(batch->at("source_lengths")), (std::vector<std::int64_t>{3, 3, 3}));
  EXPECT_EQ(ids(batch->at("source_ids")), (std::vector<std::int64_t>{2, 4, 1, 2, 7, 1, 2, 4, 1}));
  // Pairs 0 and 1 have a side over 3 tokens.
  data = make("{max_length: 3, long_lines: skip}", Mode::eval, 3);
  batch = data->next_batch();
  EXPECT_EQ(batch->indices, (std::vector<std::int64_t>{2}));
  data = make("{max_length: 3, long_lines: keep}", Mode::eval, 3);
  batch = data->next_batch();
  EXPECT_EQ(ids(batch->at("target_lengths")), (std::vector<std::int64_t>{4, 4, 2}));
}

TEST_F(DataParallelText, EmptyLinesSkippedInTrainKeptInEval) {
  write("gap.de", "▁hallo\n\n▁tag\n▁welt\n");
  write("gap.en", "▁hello\n▁world\n\n▁day\n");
  const std::string files = fmt::format("{{source_file: '{}', target_file: '{}', shuffle: false",
                                        path("gap.de"), path("gap.en"));
  auto train = make(files + "}", Mode::train, 2);
  EXPECT_EQ(train->epoch_size(), 2);
  auto batch = train->next_batch();
  ASSERT_TRUE(batch);
  EXPECT_EQ(batch->indices, (std::vector<std::int64_t>{0, 3}));  // line numbers
  auto eval = make(files + "}", Mode::eval, 4);
  batch = eval->next_batch();
  EXPECT_EQ(batch->indices, (std::vector<std::int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(ids(batch->at("source_ids")), (std::vector<std::int64_t>{4, 1, 1, 0, 8, 1, 5, 1}));
  EXPECT_EQ(ids(batch->at("target_lengths")), (std::vector<std::int64_t>{2, 2, 1, 2}));
  // empty_lines: keep in train, skip in eval.
  EXPECT_EQ(make(files + ", empty_lines: keep}", Mode::train, 2)->epoch_size(), 4);
  batch = make(files + ", empty_lines: skip}", Mode::eval, 4)->next_batch();
  EXPECT_EQ(batch->indices, (std::vector<std::int64_t>{0, 3}));
}

TEST_F(DataParallelText, InferModeWithAndWithoutTargets) {
  auto data = make("{}", Mode::infer, 3);
  auto batch = data->next_batch();
  ASSERT_TRUE(batch);
  EXPECT_EQ(batch->tensors.count("target_ids"), 0U);
  EXPECT_EQ(batch->num_objects, 10);  // source tokens
  EXPECT_TRUE(data->decode_targets(*batch).empty());
  data = make(fmt::format("{{target_file: '{}'}}", path("train.en")), Mode::infer, 3);
  batch = data->next_batch();
  EXPECT_EQ(batch->tensors.count("target_ids"), 1U);
  EXPECT_EQ(batch->num_objects, 10);  // still source tokens in infer mode
  EXPECT_EQ(data->decode_targets(*batch).size(), 3U);
}

TEST_F(DataParallelText, TwoRanksShareEveryPairOnce) {
  many_pairs(37);
  // Eval: every pair exactly once, over both ranks, in file order within a global batch.
  std::vector<std::int64_t> seen;
  for (int rank = 0; rank < 2; ++rank) {
    auto data = make(many(), Mode::eval, 4, rank, 2);
    for (const auto& b : epoch(*data)) seen.insert(seen.end(), b.indices.begin(), b.indices.end());
  }
  std::sort(seen.begin(), seen.end());
  std::vector<std::int64_t> all(37);
  std::iota(all.begin(), all.end(), 0);
  EXPECT_EQ(seen, all);
  // Train: 4 global batches of 8, disjoint, none twice; the order changes with the epoch.
  std::vector<std::vector<std::int64_t>> per_rank(2);
  for (int rank = 0; rank < 2; ++rank) {
    auto data = make(many(), Mode::train, 4, rank, 2);
    per_rank[static_cast<std::size_t>(rank)] = rig_test::flatten(rig_test::epoch_indices(*data));
    data->start_epoch(1);
    EXPECT_NE(rig_test::flatten(rig_test::epoch_indices(*data)),
              per_rank[static_cast<std::size_t>(rank)]);
  }
  std::set<std::int64_t> train_seen(per_rank[0].begin(), per_rank[0].end());
  train_seen.insert(per_rank[1].begin(), per_rank[1].end());
  EXPECT_EQ(per_rank[0].size(), 16U);
  EXPECT_EQ(per_rank[1].size(), 16U);
  EXPECT_EQ(train_seen.size(), 32U);
  // shuffle: false keeps the file order in train mode.
  auto ordered = make(many("shuffle: false"), Mode::train, 4);
  EXPECT_EQ(ordered->next_batch()->indices, (std::vector<std::int64_t>{0, 1, 2, 3}));
}

TEST_F(DataParallelText, ResumesMidEpoch) {
  many_pairs(50);
  for (const std::string extra : {"", "batch_tokens: 24, bucket_chunk_size: 16"}) {
    auto data = make(many(extra), Mode::train, 3);
    data->start_epoch(2);
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(data->next_batch());
    const YAML::Node position = YAML::Clone(data->position());
    const auto rest = rig_test::epoch_indices(*data);
    ASSERT_FALSE(rest.empty());
    auto resumed = make(many(extra), Mode::train, 3);
    resumed->seek(position);
    EXPECT_EQ(rig_test::epoch_indices(*resumed), rest) << extra;
  }
}

TEST_F(DataParallelText, TokenBatchesRespectTheBudgetAndCoverTheEpoch) {
  many_pairs(200);
  const std::string params =
      many("batch_tokens: 32, bucket_chunk_size: 50, pad_lengths_to_eight: true");
  auto data = make(params, Mode::train, 1);
  EXPECT_EQ(data->epoch_size(), -1);
  for (std::int64_t e = 0; e < 2; ++e) {
    data->start_epoch(e);
    std::vector<std::int64_t> seen;
    std::size_t batches = 0;
    std::int64_t rows = 0;
    for (const auto& b : epoch(*data)) {
      const auto n = b.at("source_ids").size(0);
      EXPECT_LE(n * b.at("source_ids").size(1), 32);
      EXPECT_LE(n * b.at("target_ids").size(1), 32);
      EXPECT_EQ(b.at("target_ids").size(1) % 8, 0);
      seen.insert(seen.end(), b.indices.begin(), b.indices.end());
      ++batches;
      rows += n;
    }
    EXPECT_GT(static_cast<double>(rows) / static_cast<double>(batches), 2.0);  // batches, not pairs
    std::sort(seen.begin(), seen.end());
    std::vector<std::int64_t> all(200);
    std::iota(all.begin(), all.end(), 0);
    EXPECT_EQ(seen, all) << "epoch " << e;
  }
  // Two ranks take different batches of the same list.
  auto rank0 = make(params, Mode::train, 1, 0, 2);
  auto rank1 = make(params, Mode::train, 1, 1, 2);
  const auto a = rig_test::flatten(rig_test::epoch_indices(*rank0));
  const auto b = rig_test::flatten(rig_test::epoch_indices(*rank1));
  std::set<std::int64_t> both(a.begin(), a.end());
  both.insert(b.begin(), b.end());
  EXPECT_EQ(both.size(), a.size() + b.size());
  EXPECT_GT(both.size(), 180U);
  // The same seed gives the same batches; a pair longer than the budget is refused.
  EXPECT_EQ(rig_test::epoch_indices(*make(params, Mode::train, 1)),
            rig_test::epoch_indices(*make(params, Mode::train, 1)));
  EXPECT_NE(error_of(many("batch_tokens: 7")).find("batch_tokens 7 cannot hold line"),
            std::string::npos)
      << error_of(many("batch_tokens: 7"));
}

TEST_F(DataParallelText, DecodeCutsAtEosAndDetokenizes) {
  auto data = make("{}", Mode::eval, 3);
  auto batch = data->next_batch();
  const auto predictions = rig::Tensor::from_vector(
      std::vector<std::int64_t>{2, 4, 5, 6, 1, 7, 7, 8, 3, 9, 0, 0, 1, 4, 0, 0, 0, 0}, {3, 6});
  EXPECT_EQ(data->decode(*batch, predictions),
            (std::vector<std::string>{"hello world.", "good day!", ""}));
  EXPECT_EQ(data->decode_targets(*batch),
            (std::vector<std::string>{"hello world.", "good day!", "hello"}));
  EXPECT_THROW(data->decode(*batch, rig::Tensor::zeros({2, 3}, rig::DType::i64)),
               std::invalid_argument);
  // A vocab without U+2581 is of whole words: joined by the delimiter.
  write("words.vocab", kSpecials + "hello\nworld\n");
  write("words.en", "hello world\nworld\nhello\n");
  data = make(fmt::format("{{tgt_vocab_file: '{}', target_file: '{}'}}", path("words.vocab"),
                          path("words.en")),
              Mode::eval, 3);
  batch = data->next_batch();
  EXPECT_EQ(data->decode(*batch, predictions)[0], "hello world");
  EXPECT_EQ(data->decode_targets(*batch)[0], "hello world");
}

TEST_F(DataParallelText, RepeatFalseStopsAfterOneEpoch) {
  auto data = make("{repeat: false}", Mode::train, 1);
  EXPECT_EQ(epoch(*data).size(), 3U);
  EXPECT_NE(rig_test::user_error_of([&] { data->start_epoch(1); }).find("repeat is false"),
            std::string::npos);
}

TEST_F(DataParallelText, BadInputs) {
  write("two.en", "▁hello\n▁world\n");
  EXPECT_EQ(error_of(fmt::format("{{target_file: '{}'}}", path("two.en"))),
            fmt::format("parallel_text: source_file {} has 3 lines but target_file {} has 2; the "
                        "files must hold the same sentences, line by line",
                        path("train.de"), path("two.en")));
  write("swapped.vocab", "<pad>\n<s>\n</s>\n<unk>\nx\n");
  EXPECT_EQ(error_of(fmt::format("{{src_vocab_file: '{}'}}", path("swapped.vocab"))),
            fmt::format("parallel_text: src_vocab_file {}: line 2 must be '</s>' (lines 1-4 are "
                        "<pad>, </s>, <s>, <unk>: ids 0-3), found '<s>'",
                        path("swapped.vocab")));
  write("short.vocab", "<pad>\n</s>\n");
  EXPECT_NE(error_of(fmt::format("{{tgt_vocab_file: '{}'}}", path("short.vocab")))
                .find("2 line(s); a vocab starts with the 4 lines"),
            std::string::npos);
  write("dup.vocab", kTgtVocab + "▁world\t-9\n");
  EXPECT_EQ(error_of(fmt::format("{{tgt_vocab_file: '{}'}}", path("dup.vocab"))),
            fmt::format("parallel_text: tgt_vocab_file {}: piece '▁world' on line 11 repeats "
                        "line 6",
                        path("dup.vocab")));
  write("latin1.en", "▁hello\n▁good \xE4 day\n▁hello\n");
  EXPECT_EQ(error_of(fmt::format("{{target_file: '{}'}}", path("latin1.en"))),
            fmt::format("parallel_text: target_file {}: line 2: byte 0xE4 is not UTF-8",
                        path("latin1.en")));
  EXPECT_EQ(error_of(fmt::format("{{source_file: '{}'}}", path("none.de"))),
            fmt::format("parallel_text: source_file {}: file not found", path("none.de")));
  write("empty.de", "");
  EXPECT_EQ(error_of(fmt::format("{{source_file: '{}'}}", path("empty.de"))),
            fmt::format("parallel_text: source_file {}: the file is empty", path("empty.de")));
  EXPECT_EQ(
      error_of(fmt::format("{{target_file: '', source_file: '{}'}}", path("train.de")), Mode::eval),
      "parallel_text: eval mode needs target_file (the reference sentences)");
  write("blank.de", "\n\n\n");
  EXPECT_NE(error_of(fmt::format("{{source_file: '{}'}}", path("blank.de")))
                .find("no sentence pair is left"),
            std::string::npos);
}

TEST_F(DataParallelText, TypedLinesNeedTheSentencePieceModel) {
  auto data = make("{}", Mode::infer, 2);
  EXPECT_NE(rig_test::user_error_of([&] {
              data->encode_lines({"Hallo Welt"});
            }).find("needs data_layer_params.sentencepiece_model"),
            std::string::npos);
}

TEST_F(DataParallelText, ACorruptSentencePieceModelIsAUserError) {
  // Found by tests/fuzz (fuzz_sentencepiece_model): a model holding an empty
  // piece made libsentencepiece's Load throw its own exception (Darts'
  // "zero-length key"), which ended the run without naming the file.
  const std::string model = std::string(RIG_SOURCE_DIR) +
                            "/tests/fuzz/corpus/sentencepiece_model/regression-empty-piece.model";
  const std::string message =
      error_of(fmt::format("{{sentencepiece_model: '{}'}}", model), Mode::infer);
  EXPECT_EQ(message, fmt::format("parallel_text: sentencepiece_model {}: not a SentencePiece model "
                                 "(the .model file spm_train writes, not the .vocab)",
                                 model));
}

TEST_F(DataParallelText, SentencePieceModelMatchesTheVocab) {
  if (std::system("command -v spm_train > /dev/null 2>&1") != 0) {
    GTEST_SKIP() << "spm_train not installed (Debian: sentencepiece)";
  }
  std::string corpus;
  for (int i = 0; i < 50; ++i) {
    corpus += "hallo welt guten tag\nwelt hallo tag der welt\nein guter tag heute\n";
  }
  write("corpus.txt", corpus);
  const std::string command = fmt::format(
      "cd '{}' && spm_train --input=corpus.txt --model_prefix=m --vocab_size=40 "
      "--model_type=bpe --pad_id=0 --eos_id=1 --bos_id=2 --unk_id=3 --hard_vocab_limit=false "
      "--minloglevel=2 > spm.log 2>&1",
      root.string());
  ASSERT_EQ(std::system(command.c_str()), 0);
  const std::string model = path("m.model");
  const std::string vocab = path("m.vocab");
  // The file holds what spm_encode makes of the lines typed below.
  write("raw.txt", "hallo welt\ntag\n");
  ASSERT_EQ(std::system(fmt::format("cd '{}' && spm_encode --model=m.model < raw.txt > sp.de",
                                    root.string())
                            .c_str()),
            0);
  write("sp.en", "x\ny\n");
  const std::string files = fmt::format(
      "source_file: '{}', target_file: '{}', src_vocab_file: '{}', tgt_vocab_file: '{}'",
      path("sp.de"), path("sp.en"), vocab, vocab);
  auto data = make(fmt::format("{{{}, sentencepiece_model: '{}'}}", files, model), Mode::infer, 2);
  const rig::Batch typed = data->encode_lines({"hallo welt", "tag"});
  EXPECT_EQ(typed.indices, (std::vector<std::int64_t>{0, 1}));
  const auto lengths = ids(typed.at("source_lengths"));
  const auto row = ids(typed.at("source_ids"));
  ASSERT_EQ(lengths.size(), 2U);
  EXPECT_EQ(row[static_cast<std::size_t>(lengths[0] - 1)], 1);  // EOS
  EXPECT_EQ(typed.num_objects, lengths[0] + lengths[1]);
  EXPECT_EQ(std::find(row.begin(), row.begin() + lengths[0], 3), row.begin() + lengths[0]);
  // Typed text and the pre-tokenized file give the same ids.
  const rig::Batch from_file = *data->next_batch();
  EXPECT_EQ(ids(from_file.at("source_lengths")), lengths);
  EXPECT_EQ(ids(from_file.at("source_ids")), row);
  // Swap two pieces of the vocab: the check names both files and the first id.
  std::ifstream in(vocab);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  std::swap(lines[6], lines[7]);
  std::string swapped;
  for (const auto& line : lines) swapped += line + "\n";
  write("swapped.vocab", swapped);
  const std::string message =
      error_of(fmt::format("{{{}, src_vocab_file: '{}', sentencepiece_model: '{}'}}",
                           fmt::format("source_file: '{}', target_file: '{}', tgt_vocab_file: '{}'",
                                       path("sp.de"), path("sp.en"), vocab),
                           path("swapped.vocab"), model),
               Mode::infer);
  EXPECT_NE(message.find(fmt::format("src_vocab_file {} does not match sentencepiece_model {}: "
                                     "id 6 (line 7)",
                                     path("swapped.vocab"), model)),
            std::string::npos)
      << message;
  EXPECT_NE(error_of(fmt::format("{{{}, sentencepiece_model: '{}'}}", files, vocab), Mode::infer)
                .find("not a SentencePiece model"),
            std::string::npos);
}

}  // namespace
