// `rig-prepare-text de-en`: the German-English corpus from the trans-de-en dictionary.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>

#include "sentencepiece_model.hpp"

namespace rig::prepare {

struct PrepareOptions {
  std::filesystem::path dictionary = "/usr/share/trans/de-en";
  std::filesystem::path out_dir;
  std::string direction = "de-en";  // which side the summary calls the source
  bool force = false;               // write into a non-empty out_dir
  std::size_t dev_pairs = 2000;
  std::size_t test_pairs = 2000;
  std::size_t max_chars = 300;
  BpeOptions bpe;
};

// Writes out_dir/{train,dev,test}.{de,en}, the .tok.{de,en} pieces and
// m_common.{model,vocab}, printing counts and timings. rig::UserError on bad input.
void prepare_de_en(const PrepareOptions& options);

}  // namespace rig::prepare
