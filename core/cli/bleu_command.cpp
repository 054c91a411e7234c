// `rig bleu REF [HYP]`: corpus BLEU as `sacrebleu REF < HYP` computes it.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include <fmt/format.h>

#include "commands.hpp"
#include "rig/error.hpp"
#include "rig/utf8.hpp"

namespace rig::cli {
namespace {

// The lines of a text file as Python reads them with newline="\n" (a last
// line without '\n' still counts); each must be valid UTF-8.
std::vector<std::string> read_utf8_lines(std::istream& in, const std::string& name) {
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  std::vector<std::string> lines;
  for (std::size_t start = 0; start < text.size();) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    lines.push_back(text.substr(start, end - start));
    if (auto bad = first_invalid_utf8(lines.back())) {
      throw UserError(fmt::format("{}:{}: not valid UTF-8 (byte {} of the line is 0x{:02X})", name,
                                  lines.size(), *bad + 1,
                                  static_cast<unsigned char>(lines.back()[*bad])));
    }
    start = end + 1;
  }
  return lines;
}

std::vector<std::string> read_utf8_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UserError(fmt::format("cannot read {}: no such file or not readable", path));
  return read_utf8_lines(in, path);
}

}  // namespace

int bleu(const std::string& reference_file, const std::string& hypothesis_file,
         const bleu::Options& options) {
  const auto refs = read_utf8_file(reference_file);
  const std::string hyp_name = hypothesis_file.empty() ? "<stdin>" : hypothesis_file;
  const auto hyps =
      hypothesis_file.empty() ? read_utf8_lines(std::cin, hyp_name) : read_utf8_file(hyp_name);
  if (hyps.size() != refs.size()) {
    throw UserError(fmt::format(
        "BLEU needs one hypothesis per reference line: {} has {} lines but {} has {} lines",
        reference_file, refs.size(), hyp_name, hyps.size()));
  }
  const auto score = bleu::corpus_bleu(hyps, refs, options);
  fmt::print("{}\n{}\n", score.format(), bleu::signature(options));
  return 0;
}

}  // namespace rig::cli
