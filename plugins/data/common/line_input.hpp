// interactive_infer input shared by the data layers: each typed line holds a
// fixed count of numbers separated by spaces or commas.
#pragma once

#include <algorithm>
#include <cstdint>
#include <sstream>
#include <string>
#include <utility>

#include "rig/batch.hpp"
#include "rig/error.hpp"

namespace rig_data {

// Calls parse(i, word) for the first n words of `line` (commas count as
// spaces); throws UserError(count_error(found)) unless it holds exactly n.
template <class Parse, class CountError>
void read_line_numbers(const std::string& line, std::int64_t n, Parse&& parse,
                       CountError&& count_error) {
  std::string text = line;
  std::replace(text.begin(), text.end(), ',', ' ');
  std::istringstream in(text);
  std::int64_t count = 0;
  std::string word;
  while (count < n && in >> word) parse(count++, word);
  if (count != n || (in >> word)) throw rig::UserError(count_error(count));
}

// The batch of `rows` typed samples, numbered 0..rows-1, holding `tensor` as `name`.
inline rig::Batch typed_batch(const std::string& name, rig::Tensor tensor, std::int64_t rows) {
  rig::Batch batch;
  batch.num_objects = rows;
  for (std::int64_t r = 0; r < rows; ++r) batch.indices.push_back(r);
  batch.tensors[name] = std::move(tensor);
  return batch;
}

}  // namespace rig_data
