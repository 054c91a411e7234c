// rig-prepare-text: text corpus tools (tools/prepare-de-en and tools/text-baselines
// run it). Bad input exits 2 with one line on stderr, other failures exit 1.
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>

#include "baselines.hpp"
#include "prepare_de_en.hpp"
#include "rig/error.hpp"

int main(int argc, char** argv) {
  CLI::App app{"rig-prepare-text: text corpora for rig's text2text experiments"};
  app.require_subcommand(1);

  rig::prepare::PrepareOptions prepare;
  std::string out_dir;
  auto* de_en = app.add_subcommand(
      "de-en", "German-English corpus and shared BPE model from the trans-de-en dictionary");
  de_en->add_option("outdir", out_dir, "output directory")->required();
  de_en->add_option("--direction", prepare.direction, "de-en or en-de: which side is the source")
      ->capture_default_str();
  de_en->add_option("--dictionary", prepare.dictionary, "the trans-de-en dictionary file")
      ->capture_default_str();
  de_en->add_option("--vocab-size", prepare.bpe.vocab_size, "BPE vocabulary size")
      ->capture_default_str()
      ->check(CLI::Range(8, 1000000));
  de_en->add_option("--dev-size", prepare.dev_pairs, "dev pairs (at least)")->capture_default_str();
  de_en->add_option("--test-size", prepare.test_pairs, "test pairs (at least)")
      ->capture_default_str();
  de_en->add_option("--max-chars", prepare.max_chars, "longest side kept, in characters")
      ->capture_default_str();
  de_en->add_option("--threads", prepare.bpe.num_threads, "threads for training and encoding")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  de_en->add_flag("--force", prepare.force, "write into a non-empty output directory");

  std::string direction = "de-en";
  auto* baselines = app.add_subcommand(
      "baselines", "copy-source and word-by-word dictionary hypotheses for the test split");
  baselines->add_option("outdir", out_dir, "a directory tools/prepare-de-en wrote")->required();
  baselines->add_option("--direction", direction, "de-en or en-de")->capture_default_str();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  try {
    if (de_en->parsed()) {
      prepare.out_dir = out_dir;
      rig::prepare::prepare_de_en(prepare);
    } else {
      rig::prepare::write_baselines(out_dir, direction);
    }
  } catch (const rig::UserError& e) {
    std::fflush(stdout);
    fmt::print(stderr, "rig-prepare-text: error: {}\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    fmt::print(stderr, "rig-prepare-text: failed: {}\n", e.what());
    return 1;
  }
  return 0;
}
