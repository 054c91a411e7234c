// parallel_text's text path: the vocab file (special tokens, repeats, the id
// table), the source and target files (UTF-8, lines) and encoding them into a
// corpus. Input: the vocab file, then lines "#%file" each followed by the
// source and the target file; a missing part reuses the vocab's bytes.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>

#include "../../plugins/data/parallel_text/corpus.hpp"
#include "../../plugins/data/parallel_text/text_file.hpp"
#include "../../plugins/data/parallel_text/vocabulary.hpp"
#include "fuzz_util.hpp"
#include "rig/error.hpp"

namespace pt = parallel_text;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto parts = rig_fuzz::split(rig_fuzz::as_text(data, size), "\n#%file\n");
  const std::string vocab_path = rig_fuzz::write_file("vocab.txt", parts[0]);
  const std::string source_path = rig_fuzz::write_file("source.txt", parts[parts.size() > 1]);
  const std::string target_path =
      rig_fuzz::write_file("target.txt", parts[parts.size() > 2 ? 2 : 0]);
  std::optional<pt::Vocabulary> vocab;
  try {
    vocab.emplace("parallel_text", "src_vocab_file", vocab_path);
  } catch (const rig::UserError&) {
  }
  for (const char* path : {source_path.c_str(), target_path.c_str()}) {
    try {
      const pt::TextFile file("parallel_text", "source_file", path);
      for (std::int64_t i = 0; i < file.size(); ++i) {
        if (file.line(i).find('\n') != std::string_view::npos) std::abort();
      }
    } catch (const rig::UserError&) {
    }
  }
  if (!vocab) return 0;
  try {
    const pt::TextFile source("parallel_text", "source_file", source_path);
    const pt::TextFile target("parallel_text", "target_file", target_path);
    // Options as the schema allows them (delimiter non-empty, max_length >= 2).
    pt::CorpusOptions options;
    options.delimiter = size % 2 == 0 ? " " : "@@";
    options.framing.max_length = 2 + static_cast<std::int64_t>(size % 7);
    options.framing.use_start_token = size % 3 == 0;
    options.framing.long_lines = static_cast<pt::LongLines>(size % 3);
    options.skip_empty = size % 5 == 0;
    const pt::Corpus corpus =
        pt::read_corpus("parallel_text", source, &target, *vocab, *vocab, options);
    for (std::int64_t i = 0; i < corpus.size(); ++i) {
      for (const std::int32_t id : corpus.source.row(i)) {
        if (id < 0 || id >= vocab->size()) std::abort();
      }
    }
    pt::read_corpus("parallel_text", source, nullptr, *vocab, *vocab, options);
  } catch (const rig::UserError&) {
  }
  return 0;
}
