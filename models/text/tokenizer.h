// Word tokenizer for Latin-script text (UTF-8): space normalisation, lower-casing, punctuation
// split, detokenization, and the small UTF-8 helpers they (and bleu.cpp) are built from.
#pragma once
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace seqgrad::text {

// ---- UTF-8 --------------------------------------------------------------------------------------

// Decodes the code point starting at byte `pos` of `s` and advances `pos` past it. Rejects what
// Python's strict UTF-8 decoder rejects (overlong forms, surrogates, > U+10FFFF, truncation):
// throws ValueError naming the byte offset.
char32_t next_code_point(std::string_view s, std::size_t& pos);
std::vector<char32_t> decode_utf8(std::string_view s);
void append_utf8(std::string& out, char32_t cp);
std::string encode_utf8(std::span<const char32_t> cps);
// Byte offset of the first invalid UTF-8 sequence, or nullopt when `s` is valid.
std::optional<std::size_t> find_invalid_utf8(std::string_view s);

// Python's str.isspace(): ASCII TAB/LF/VT/FF/CR, U+001C..U+001F, space, U+0085, U+00A0, U+1680,
// U+2000..U+200A, U+2028, U+2029, U+202F, U+205F, U+3000. Not U+200B (zero-width space).
bool is_unicode_space(char32_t cp);

// Simple lower-case mapping of Python 3.11's str.lower() (Unicode 14) for every code point, so
// lower-cased BLEU matches sacreBLEU: Ä->ä, Č->č, ẞ->ß (ß stays ß), Σ->σ, Д->д. İ (U+0130)
// becomes "i̇" as in Python. The one difference: Python writes a word-final Σ as ς; we write σ.
char32_t to_lower(char32_t cp);
std::string to_lower(std::string_view s);

// ---- tokenizer ----------------------------------------------------------------------------------

// What normalize_spaces() turns into a space: is_unicode_space(), the other control characters,
// U+200B (zero-width space) and U+FEFF (BOM, zero-width no-break space).
bool is_blank(char32_t cp);

// Every Unicode space, TAB, other control character and U+200B/U+FEFF becomes one ASCII space;
// soft hyphens and bidi/joiner format characters are dropped; runs of spaces collapse; the result
// is trimmed. Throws ValueError on invalid UTF-8.
std::string normalize_spaces(std::string_view text);

// Where an apostrophe between two word characters goes ("l'homme", "man's", "aujourd'hui"):
//   attach_left:  "l'" "homme", "man'" "s"  (French elision; the default, harmless for English)
//   attach_right: "l" "'homme", "man" "'s"  (Moses-style English clitics)
//   keep:         "l'homme", "man's"        (one token)
// Typographic apostrophes (U+2019, U+02BC) inside a word become ASCII "'", so "l’homme" and
// "l'homme" share tokens. Any other apostrophe or quote is a token of its own.
enum class Apostrophe { attach_left, attach_right, keep };

struct TokenizeOptions {
  bool lowercase = true;
  Apostrophe apostrophe = Apostrophe::attach_left;
};

// Splits normalised text into words and punctuation tokens. Every punctuation mark is its own
// token (ASCII punctuation, « » “ ” „ ‘ ’ ‹ › ¡ ¿ – — … · and the rest of General Punctuation,
// Latin-1 symbols such as ° § €), except where it is part of a word:
//   "-" between word characters ("t-shirt", "5-4"), "." between word characters ("u.s", "3.5"),
//   "," and ":" between digits ("1,000", "10:30"); runs of "." stay one token ("...").
// Throws ValueError on invalid UTF-8.
std::vector<std::string> tokenize(std::string_view text, const TokenizeOptions& options = {});

// Joins tokens into readable text: no space before closing marks (. , ! ? ; : ) ] } » ” % …),
// none after opening marks (( [ { « “ „ ¿ ¡), straight quotes alternate between opening and
// closing, and split apostrophes ("l'" "homme", "man" "'s") rejoin their word. Case is kept.
std::string detokenize(std::span<const std::string> tokens);

}  // namespace seqgrad::text
