// Tokenizer implementation: UTF-8 decoding, Python-compatible lower-casing, space normalisation,
// the punctuation rules documented in tokenizer.h, and detokenization.
#include "models/text/tokenizer.h"

#include <algorithm>
#include <array>
#include <cstdint>

#include "core/error.h"

namespace seqgrad::text {

// ---- UTF-8 --------------------------------------------------------------------------------------

namespace {

// Decodes without throwing; returns false on an invalid sequence (pos is then left unchanged).
bool try_next_code_point(std::string_view s, std::size_t& pos, char32_t& cp) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char b0 = byte(pos);
  if (b0 < 0x80) {
    cp = b0;
    pos += 1;
    return true;
  }
  int len = 0;
  char32_t min = 0;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2, cp = b0 & 0x1F, min = 0x80;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3, cp = b0 & 0x0F, min = 0x800;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4, cp = b0 & 0x07, min = 0x10000;
  } else {
    return false;
  }
  if (pos + len > s.size()) return false;
  for (int i = 1; i < len; ++i) {
    const unsigned char b = byte(pos + i);
    if ((b & 0xC0) != 0x80) return false;
    cp = (cp << 6) | (b & 0x3F);
  }
  // Overlong forms, UTF-16 surrogates and values past U+10FFFF are not UTF-8.
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
  pos += len;
  return true;
}

}  // namespace

char32_t next_code_point(std::string_view s, std::size_t& pos) {
  char32_t cp = 0;
  SG_CHECK_VALUE(try_next_code_point(s, pos, cp),
                 "utf8: invalid UTF-8 sequence at byte {} of \"{}\"", pos, s);
  return cp;
}

std::vector<char32_t> decode_utf8(std::string_view s) {
  std::vector<char32_t> cps;
  cps.reserve(s.size());
  for (std::size_t pos = 0; pos < s.size();) cps.push_back(next_code_point(s, pos));
  return cps;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::string encode_utf8(std::span<const char32_t> cps) {
  std::string out;
  out.reserve(cps.size());
  for (char32_t cp : cps) append_utf8(out, cp);
  return out;
}

std::optional<std::size_t> find_invalid_utf8(std::string_view s) {
  char32_t cp = 0;
  for (std::size_t pos = 0; pos < s.size();)
    if (!try_next_code_point(s, pos, cp)) return pos;
  return std::nullopt;
}

bool is_unicode_space(char32_t cp) {
  if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x1F);
  if (cp < 0x85) return false;
  return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
         cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

// ---- lower-casing -------------------------------------------------------------------------------

namespace {

// Runs {first, last, delta, stride}: every stride-th code point in [first, last] lowers to
// cp+delta. Generated from Python 3.11 (Unicode 14) by collecting c with len(chr(c).lower()) == 1
// and ord(chr(c).lower()) != c, then merging neighbours that share delta and spacing (1 or 2).
struct LowerRun {
  char32_t first, last;
  int32_t delta, stride;
};
constexpr LowerRun kLowerRuns[] = {
    {0x0041, 0x005A, 32, 1},     {0x00C0, 0x00D6, 32, 1},     {0x00D8, 0x00DE, 32, 1},
    {0x0100, 0x012E, 1, 2},      {0x0132, 0x0136, 1, 2},      {0x0139, 0x0147, 1, 2},
    {0x014A, 0x0176, 1, 2},      {0x0178, 0x0178, -121, 1},   {0x0179, 0x017D, 1, 2},
    {0x0181, 0x0181, 210, 1},    {0x0182, 0x0184, 1, 2},      {0x0186, 0x0186, 206, 1},
    {0x0187, 0x0187, 1, 1},      {0x0189, 0x018A, 205, 1},    {0x018B, 0x018B, 1, 1},
    {0x018E, 0x018E, 79, 1},     {0x018F, 0x018F, 202, 1},    {0x0190, 0x0190, 203, 1},
    {0x0191, 0x0191, 1, 1},      {0x0193, 0x0193, 205, 1},    {0x0194, 0x0194, 207, 1},
    {0x0196, 0x0196, 211, 1},    {0x0197, 0x0197, 209, 1},    {0x0198, 0x0198, 1, 1},
    {0x019C, 0x019C, 211, 1},    {0x019D, 0x019D, 213, 1},    {0x019F, 0x019F, 214, 1},
    {0x01A0, 0x01A4, 1, 2},      {0x01A6, 0x01A6, 218, 1},    {0x01A7, 0x01A7, 1, 1},
    {0x01A9, 0x01A9, 218, 1},    {0x01AC, 0x01AC, 1, 1},      {0x01AE, 0x01AE, 218, 1},
    {0x01AF, 0x01AF, 1, 1},      {0x01B1, 0x01B2, 217, 1},    {0x01B3, 0x01B5, 1, 2},
    {0x01B7, 0x01B7, 219, 1},    {0x01B8, 0x01B8, 1, 1},      {0x01BC, 0x01BC, 1, 1},
    {0x01C4, 0x01C4, 2, 1},      {0x01C5, 0x01C5, 1, 1},      {0x01C7, 0x01C7, 2, 1},
    {0x01C8, 0x01C8, 1, 1},      {0x01CA, 0x01CA, 2, 1},      {0x01CB, 0x01DB, 1, 2},
    {0x01DE, 0x01EE, 1, 2},      {0x01F1, 0x01F1, 2, 1},      {0x01F2, 0x01F4, 1, 2},
    {0x01F6, 0x01F6, -97, 1},    {0x01F7, 0x01F7, -56, 1},    {0x01F8, 0x021E, 1, 2},
    {0x0220, 0x0220, -130, 1},   {0x0222, 0x0232, 1, 2},      {0x023A, 0x023A, 10795, 1},
    {0x023B, 0x023B, 1, 1},      {0x023D, 0x023D, -163, 1},   {0x023E, 0x023E, 10792, 1},
    {0x0241, 0x0241, 1, 1},      {0x0243, 0x0243, -195, 1},   {0x0244, 0x0244, 69, 1},
    {0x0245, 0x0245, 71, 1},     {0x0246, 0x024E, 1, 2},      {0x0370, 0x0372, 1, 2},
    {0x0376, 0x0376, 1, 1},      {0x037F, 0x037F, 116, 1},    {0x0386, 0x0386, 38, 1},
    {0x0388, 0x038A, 37, 1},     {0x038C, 0x038C, 64, 1},     {0x038E, 0x038F, 63, 1},
    {0x0391, 0x03A1, 32, 1},     {0x03A3, 0x03AB, 32, 1},     {0x03CF, 0x03CF, 8, 1},
    {0x03D8, 0x03EE, 1, 2},      {0x03F4, 0x03F4, -60, 1},    {0x03F7, 0x03F7, 1, 1},
    {0x03F9, 0x03F9, -7, 1},     {0x03FA, 0x03FA, 1, 1},      {0x03FD, 0x03FF, -130, 1},
    {0x0400, 0x040F, 80, 1},     {0x0410, 0x042F, 32, 1},     {0x0460, 0x0480, 1, 2},
    {0x048A, 0x04BE, 1, 2},      {0x04C0, 0x04C0, 15, 1},     {0x04C1, 0x04CD, 1, 2},
    {0x04D0, 0x052E, 1, 2},      {0x0531, 0x0556, 48, 1},     {0x10A0, 0x10C5, 7264, 1},
    {0x10C7, 0x10C7, 7264, 1},   {0x10CD, 0x10CD, 7264, 1},   {0x13A0, 0x13EF, 38864, 1},
    {0x13F0, 0x13F5, 8, 1},      {0x1C90, 0x1CBA, -3008, 1},  {0x1CBD, 0x1CBF, -3008, 1},
    {0x1E00, 0x1E94, 1, 2},      {0x1E9E, 0x1E9E, -7615, 1},  {0x1EA0, 0x1EFE, 1, 2},
    {0x1F08, 0x1F0F, -8, 1},     {0x1F18, 0x1F1D, -8, 1},     {0x1F28, 0x1F2F, -8, 1},
    {0x1F38, 0x1F3F, -8, 1},     {0x1F48, 0x1F4D, -8, 1},     {0x1F59, 0x1F5F, -8, 2},
    {0x1F68, 0x1F6F, -8, 1},     {0x1F88, 0x1F8F, -8, 1},     {0x1F98, 0x1F9F, -8, 1},
    {0x1FA8, 0x1FAF, -8, 1},     {0x1FB8, 0x1FB9, -8, 1},     {0x1FBA, 0x1FBB, -74, 1},
    {0x1FBC, 0x1FBC, -9, 1},     {0x1FC8, 0x1FCB, -86, 1},    {0x1FCC, 0x1FCC, -9, 1},
    {0x1FD8, 0x1FD9, -8, 1},     {0x1FDA, 0x1FDB, -100, 1},   {0x1FE8, 0x1FE9, -8, 1},
    {0x1FEA, 0x1FEB, -112, 1},   {0x1FEC, 0x1FEC, -7, 1},     {0x1FF8, 0x1FF9, -128, 1},
    {0x1FFA, 0x1FFB, -126, 1},   {0x1FFC, 0x1FFC, -9, 1},     {0x2126, 0x2126, -7517, 1},
    {0x212A, 0x212A, -8383, 1},  {0x212B, 0x212B, -8262, 1},  {0x2132, 0x2132, 28, 1},
    {0x2160, 0x216F, 16, 1},     {0x2183, 0x2183, 1, 1},      {0x24B6, 0x24CF, 26, 1},
    {0x2C00, 0x2C2F, 48, 1},     {0x2C60, 0x2C60, 1, 1},      {0x2C62, 0x2C62, -10743, 1},
    {0x2C63, 0x2C63, -3814, 1},  {0x2C64, 0x2C64, -10727, 1}, {0x2C67, 0x2C6B, 1, 2},
    {0x2C6D, 0x2C6D, -10780, 1}, {0x2C6E, 0x2C6E, -10749, 1}, {0x2C6F, 0x2C6F, -10783, 1},
    {0x2C70, 0x2C70, -10782, 1}, {0x2C72, 0x2C72, 1, 1},      {0x2C75, 0x2C75, 1, 1},
    {0x2C7E, 0x2C7F, -10815, 1}, {0x2C80, 0x2CE2, 1, 2},      {0x2CEB, 0x2CED, 1, 2},
    {0x2CF2, 0x2CF2, 1, 1},      {0xA640, 0xA66C, 1, 2},      {0xA680, 0xA69A, 1, 2},
    {0xA722, 0xA72E, 1, 2},      {0xA732, 0xA76E, 1, 2},      {0xA779, 0xA77B, 1, 2},
    {0xA77D, 0xA77D, -35332, 1}, {0xA77E, 0xA786, 1, 2},      {0xA78B, 0xA78B, 1, 1},
    {0xA78D, 0xA78D, -42280, 1}, {0xA790, 0xA792, 1, 2},      {0xA796, 0xA7A8, 1, 2},
    {0xA7AA, 0xA7AA, -42308, 1}, {0xA7AB, 0xA7AB, -42319, 1}, {0xA7AC, 0xA7AC, -42315, 1},
    {0xA7AD, 0xA7AD, -42305, 1}, {0xA7AE, 0xA7AE, -42308, 1}, {0xA7B0, 0xA7B0, -42258, 1},
    {0xA7B1, 0xA7B1, -42282, 1}, {0xA7B2, 0xA7B2, -42261, 1}, {0xA7B3, 0xA7B3, 928, 1},
    {0xA7B4, 0xA7C2, 1, 2},      {0xA7C4, 0xA7C4, -48, 1},    {0xA7C5, 0xA7C5, -42307, 1},
    {0xA7C6, 0xA7C6, -35384, 1}, {0xA7C7, 0xA7C9, 1, 2},      {0xA7D0, 0xA7D0, 1, 1},
    {0xA7D6, 0xA7D8, 1, 2},      {0xA7F5, 0xA7F5, 1, 1},      {0xFF21, 0xFF3A, 32, 1},
    {0x10400, 0x10427, 40, 1},   {0x104B0, 0x104D3, 40, 1},   {0x10570, 0x1057A, 39, 1},
    {0x1057C, 0x1058A, 39, 1},   {0x1058C, 0x10592, 39, 1},   {0x10594, 0x10595, 39, 1},
    {0x10C80, 0x10CB2, 64, 1},   {0x118A0, 0x118BF, 32, 1},   {0x16E40, 0x16E5F, 32, 1},
    {0x1E900, 0x1E921, 34, 1},
};

}  // namespace

char32_t to_lower(char32_t cp) {
  if (cp < 0x80) return (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
  const auto* run = std::upper_bound(std::begin(kLowerRuns), std::end(kLowerRuns), cp,
                                     [](char32_t c, const LowerRun& r) { return c < r.first; });
  if (run == std::begin(kLowerRuns)) return cp;
  --run;
  if (cp > run->last || (cp - run->first) % run->stride != 0) return cp;
  return static_cast<char32_t>(static_cast<int32_t>(cp) + run->delta);
}

std::string to_lower(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t pos = 0; pos < s.size();) {
    const char32_t cp = next_code_point(s, pos);
    if (cp == 0x130) {  // İ has no one-character lower case; Python gives i + combining dot above
      out += 'i';
      append_utf8(out, 0x307);
    } else {
      append_utf8(out, to_lower(cp));
    }
  }
  return out;
}

// ---- normalisation ------------------------------------------------------------------------------

namespace {

// Invisible format characters that carry no word boundary: soft hyphen, ZWNJ/ZWJ, LRM/RLM,
// bidi embeddings, word joiner and invisible operators.
bool is_dropped(char32_t cp) {
  return cp == 0xAD || (cp >= 0x200C && cp <= 0x200F) || (cp >= 0x202A && cp <= 0x202E) ||
         (cp >= 0x2060 && cp <= 0x2064);
}

}  // namespace

// Python's spaces plus the other controls, the zero-width space and the BOM / zero-width no-break
// space, which in corpora sit between words.
bool is_blank(char32_t cp) {
  return is_unicode_space(cp) || cp < 0x20 || cp == 0x7F || (cp >= 0x80 && cp < 0xA0) ||
         cp == 0x200B || cp == 0xFEFF;
}

namespace {

// Printable ASCII with single inner spaces is already normal (most corpus lines).
bool is_plain_ascii(std::string_view text) {
  if (text.empty() || text.front() == ' ' || text.back() == ' ') return text.empty();
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c > 0x7E || c < 0x20 || (c == ' ' && text[i - 1] == ' ')) return false;
  }
  return true;
}

}  // namespace

std::string normalize_spaces(std::string_view text) {
  if (is_plain_ascii(text)) return std::string(text);
  std::string out;
  out.reserve(text.size());
  bool pending_space = false;
  for (std::size_t pos = 0; pos < text.size();) {
    const char32_t cp = next_code_point(text, pos);
    if (is_dropped(cp)) continue;
    if (is_blank(cp)) {
      pending_space = !out.empty();
      continue;
    }
    if (pending_space) out += ' ';
    pending_space = false;
    append_utf8(out, cp);
  }
  return out;
}

// ---- tokenizer ----------------------------------------------------------------------------------

namespace {

bool is_apostrophe(char32_t cp) { return cp == '\'' || cp == 0x2019 || cp == 0x02BC; }

bool is_punctuation(char32_t cp) {
  if (cp < 0x80) {
    return (cp >= 0x21 && cp <= 0x2F) || (cp >= 0x3A && cp <= 0x40) || (cp >= 0x5B && cp <= 0x60) ||
           (cp >= 0x7B && cp <= 0x7E);
  }
  // Latin-1 punctuation and symbols, leaving out the letter-like ª µ º and ² ³ ¹ ¼ ½ ¾.
  if (cp >= 0xA1 && cp <= 0xBF)
    return cp != 0xAA && cp != 0xB2 && cp != 0xB3 && cp != 0xB5 && cp != 0xB9 && cp != 0xBA &&
           (cp < 0xBC || cp > 0xBE);
  return cp == 0xD7 || cp == 0xF7 || cp == 0x2BC || (cp >= 0x2010 && cp <= 0x205E) ||
         (cp >= 0x20A0 && cp <= 0x20CF);
}

bool is_digit(char32_t cp) { return cp >= '0' && cp <= '9'; }

// A mark that stays inside the word around it, per the rules in tokenizer.h.
bool joins_word(std::span<const char32_t> cps, std::size_t i) {
  if (i == 0 || i + 1 >= cps.size()) return false;
  const char32_t prev = cps[i - 1], c = cps[i], next = cps[i + 1];
  const bool word_both =
      prev != ' ' && next != ' ' && !is_punctuation(prev) && !is_punctuation(next);
  if (c == '-' || c == '.') return word_both;
  if (c == ',' || c == ':') return is_digit(prev) && is_digit(next);
  return false;
}

bool is_inner_apostrophe(std::span<const char32_t> cps, std::size_t i) {
  return is_apostrophe(cps[i]) && i > 0 && i + 1 < cps.size() && cps[i - 1] != ' ' &&
         cps[i + 1] != ' ' && !is_punctuation(cps[i - 1]) && !is_punctuation(cps[i + 1]);
}

class TokenSink {
 public:
  void add(char32_t cp) { append_utf8(word_, cp); }
  void flush() {
    if (!word_.empty()) tokens_.push_back(std::move(word_));
    word_.clear();
  }
  void emit(std::string token) {
    flush();
    tokens_.push_back(std::move(token));
  }
  std::vector<std::string> take() {
    flush();
    return std::move(tokens_);
  }

 private:
  std::string word_;
  std::vector<std::string> tokens_;
};

}  // namespace

std::vector<std::string> tokenize(std::string_view text, const TokenizeOptions& options) {
  const std::string clean = normalize_spaces(text);
  std::vector<char32_t> cps = decode_utf8(options.lowercase ? to_lower(clean) : clean);
  TokenSink sink;
  for (std::size_t i = 0; i < cps.size(); ++i) {
    const char32_t c = cps[i];
    if (c == ' ') {
      sink.flush();
    } else if (is_inner_apostrophe(cps, i)) {
      if (options.apostrophe == Apostrophe::attach_right) sink.flush();
      sink.add('\'');
      if (options.apostrophe == Apostrophe::attach_left) sink.flush();
    } else if (!is_punctuation(c) || joins_word(cps, i)) {
      sink.add(c);
    } else if (c == '.') {
      std::size_t end = i;
      while (end < cps.size() && cps[end] == '.') ++end;
      sink.emit(std::string(end - i, '.'));
      i = end - 1;
    } else {
      std::string mark;
      append_utf8(mark, c);
      sink.emit(std::move(mark));
    }
  }
  return sink.take();
}

// ---- detokenizer --------------------------------------------------------------------------------

namespace {

bool is_one_of(std::string_view token, std::initializer_list<std::string_view> set) {
  return std::find(set.begin(), set.end(), token) != set.end();
}

bool closes(std::string_view t) {
  return is_one_of(t, {",", "!", "?", ";", ":", ")", "]", "}", "%", "»", "”", "’", "›", "…"}) ||
         t.starts_with(".") || (t.size() > 1 && t.front() == '\'');
}

bool opens(std::string_view t) {
  return is_one_of(t, {"(", "[", "{", "«", "“", "„", "‘", "‚", "‹", "¿", "¡"}) ||
         (t.size() > 1 && t.back() == '\'');
}

}  // namespace

std::string detokenize(std::span<const std::string> tokens) {
  std::string out;
  bool glue_next = true;  // no space before the first token
  bool in_double = false, in_single = false;
  for (const std::string& t : tokens) {
    bool glue_before = closes(t) || t == "/";
    bool glue_after = opens(t) || t == "/";
    // Straight quotes carry no direction: alternate opening, closing.
    if (t == "\"" || t == "'") {
      bool& inside = t == "\"" ? in_double : in_single;
      glue_before = inside;
      glue_after = !inside;
      inside = !inside;
    }
    if (!out.empty() && !glue_next && !glue_before) out += ' ';
    out += t;
    glue_next = glue_after;
  }
  return out;
}

}  // namespace seqgrad::text
