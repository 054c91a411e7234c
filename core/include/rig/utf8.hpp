// UTF-8 validation shared by the core (rig bleu) and plugins (text data layers).
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

#include "rig/export.hpp"

namespace rig {

// Byte offset of the first byte that does not belong to a valid UTF-8
// sequence, as Python's strict utf-8 decoder sees it (no overlong forms,
// surrogates or code points above U+10FFFF); nullopt when all of it is valid.
RIG_API std::optional<std::size_t> first_invalid_utf8(std::string_view text);

}  // namespace rig
