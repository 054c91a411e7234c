// sacrebleu's Tokenizer13a + TokenizerRegexp (sacrebleu/tokenizers/
// tokenizer_13a.py, tokenizer_re.py), transcribed rule by rule. The regexes
// work byte by byte here: every class they use is ASCII except [^0-9], and a
// two-character match always has an ASCII character on the side that could be
// multibyte, so scanning UTF-8 bytes gives the same matches as Python's scan
// of code points and never splits a character.
#include <string>
#include <string_view>

#include "metrics/utf8_text.hpp"
#include "rig/bleu.hpp"

namespace rig::bleu {
namespace {

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
bool is_period_or_comma(char c) {
  return c == '.' || c == ',';
}

// Python's str.replace(from, to): every non-overlapping occurrence, left to right.
std::string replace_all(std::string_view s, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(s.size());
  std::size_t pos = 0;
  for (std::size_t hit; (hit = s.find(from, pos)) != std::string_view::npos;
       pos = hit + from.size()) {
    out.append(s.substr(pos, hit - pos));
    out.append(to);
  }
  out.append(s.substr(pos));
  return out;
}

// [\{-\~\[-\` -\&\(-\+\:-\@\/]: the ASCII symbols that become tokens of their
// own anywhere: space ! " # $ % & ( ) * + / : ; < = > ? @ [ \ ] ^ _ ` { | } ~
// (not ' , - . digits or letters).
bool is_symbol(char c) {
  return (c >= '{' && c <= '~') || (c >= '[' && c <= '`') || (c >= ' ' && c <= '&') ||
         (c >= '(' && c <= '+') || (c >= ':' && c <= '@') || c == '/';
}

// re.sub(r'([\{-\~\[-\` -\&\(-\+\:-\@\/])', r' \1 ', s)
std::string pad_symbols(std::string_view s) {
  std::string out;
  out.reserve(s.size() * 2);
  for (char c : s) {
    if (is_symbol(c)) {
      out += ' ';
      out += c;
      out += ' ';
    } else {
      out += c;
    }
  }
  return out;
}

// re.sub of a two-character pattern `first second` by `replace(first, second)`,
// with re.sub's left-to-right, non-overlapping scan.
template <class First, class Second, class Replace>
std::string substitute_pairs(std::string_view s, First first, Second second, Replace replace) {
  std::string out;
  out.reserve(s.size() * 2);
  std::size_t i = 0;
  while (i < s.size()) {
    if (i + 1 < s.size() && first(s[i]) && second(s[i + 1])) {
      replace(out, s[i], s[i + 1]);
      i += 2;
    } else {
      out += s[i++];
    }
  }
  return out;
}

std::string regexp_tokenize(std::string_view line) {
  std::string s = pad_symbols(line);
  const auto not_digit = [](char c) { return !is_digit(c); };
  // Period and comma unless preceded by a digit: ([^0-9])([\.,]) -> '\1 \2 '.
  s = substitute_pairs(s, not_digit, is_period_or_comma, [](std::string& out, char a, char b) {
    out += a;
    out += ' ';
    out += b;
    out += ' ';
  });
  // Period and comma unless followed by a digit: ([\.,])([^0-9]) -> ' \1 \2'.
  s = substitute_pairs(s, is_period_or_comma, not_digit, [](std::string& out, char a, char b) {
    out += ' ';
    out += a;
    out += ' ';
    out += b;
  });
  // Dash when preceded by a digit: ([0-9])(-) -> '\1 \2 '.
  s = substitute_pairs(
      s, is_digit, [](char c) { return c == '-'; },
      [](std::string& out, char a, char b) {
        out += a;
        out += ' ';
        out += b;
        out += ' ';
      });
  // ' '.join(line.split())
  std::string joined;
  joined.reserve(s.size());
  for (std::string_view word : text::split(s)) {
    if (!joined.empty()) joined += ' ';
    joined.append(word);
  }
  return joined;
}

}  // namespace

std::string tokenize_13a(std::string_view line) {
  std::string s = replace_all(line, "<skipped>", "");
  s = replace_all(s, "-\n", "");
  s = replace_all(s, "\n", " ");
  if (s.find('&') != std::string::npos) {
    s = replace_all(s, "&quot;", "\"");
    s = replace_all(s, "&amp;", "&");
    s = replace_all(s, "&lt;", "<");
    s = replace_all(s, "&gt;", ">");
  }
  return regexp_tokenize(" " + s + " ");
}

}  // namespace rig::bleu
