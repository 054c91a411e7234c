// UTF-8 text with Python str semantics: what SacreBLEU does to a line
// (str.lower(), str.split(), str.rstrip()) done on UTF-8 bytes. Bytes that are
// not valid UTF-8 are kept as they are, each as one non-space, uncased unit.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rig::bleu::text {

// Python's str.isspace() for one code point.
bool is_space(char32_t c);
// str.lower(), full mapping, with Greek capital sigma's final-sigma rule.
std::string lower(std::string_view s);
// str.rstrip(): drops trailing str.isspace() code points.
std::string_view rstrip(std::string_view s);
// str.split(): the runs of non-space code points.
std::vector<std::string_view> split(std::string_view s);

}  // namespace rig::bleu::text
