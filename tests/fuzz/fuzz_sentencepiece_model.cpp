// parallel_text's SentencePiece model loading (libsentencepiece parses the
// protobuf), checking it against a vocab file, and encoding a line with it.
// Input: the .model file.
#include <cstddef>
#include <cstdint>
#include <string>

#include "../../plugins/data/parallel_text/piece_model.hpp"
#include "../../plugins/data/parallel_text/vocabulary.hpp"
#include "fuzz_util.hpp"
#include "rig/error.hpp"

namespace pt = parallel_text;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const pt::Vocabulary vocab(
      "parallel_text", "src_vocab_file",
      rig_fuzz::write_file("vocab.txt", "<pad>\n</s>\n<s>\n<unk>\n\xE2\x96\x81the\t-1\n"));
  const std::string path = rig_fuzz::write_file("spm.model", rig_fuzz::as_text(data, size));
  try {
    const pt::PieceModel model("parallel_text", "sentencepiece_model", path);
    model.encode(
        "Hello world, gr\xC3\xBC\xC3\x9F"
        "e aus Berlin.");
    model.check(vocab);
  } catch (const rig::UserError&) {
  }
  return 0;
}
