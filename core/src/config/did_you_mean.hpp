// "Did you mean" suggestions for misspelt keys and names.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rig::config {

// Optimal-string-alignment distance (Levenshtein plus adjacent transpositions,
// so "trian" is one edit from "train"), compared case-insensitively.
std::size_t edit_distance(std::string_view a, std::string_view b);

// The candidate closest to `word`, if it is close enough to be a likely typo
// (at most max(1, |word| / 3) edits). Ties go to the earlier candidate.
std::optional<std::string> did_you_mean(const std::string& word,
                                        const std::vector<std::string>& candidates);

}  // namespace rig::config
