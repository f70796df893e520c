// Vocab: token <-> id mapping with the special tokens <pad> <bos> <eos> <unk> at ids 0..3, and the
// way text becomes tokens and back: lower-cased words (built deterministically from tokenized
// sentences) or SentencePiece subword pieces (cased, detokenised output). Saved as JSON inside
// checkpoints; a subword vocabulary carries its serialized SentencePiece model.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "models/text/subword.h"

namespace seqgrad::text {

struct VocabOptions {
  int64_t min_freq = 1;  // tokens seen fewer times become <unk>
  int64_t max_size = 0;  // 0: no limit; otherwise the total size, the 4 special tokens included
};

struct DecodeOptions {
  bool stop_at_eos = true;   // drop <eos> and everything after it
  bool skip_special = true;  // drop <pad>, <bos> and a kept <eos>; <unk> stays "<unk>"
};

class Vocab {
 public:
  static constexpr int64_t kPad = 0, kBos = 1, kEos = 2, kUnk = 3;
  static constexpr int64_t kNumSpecial = 4;

  Vocab();  // only the special tokens

  // Ids follow descending frequency, ties broken by byte-wise lexicographic order, so the same
  // corpus always gives the same ids. A token spelled like a special token is not added again.
  static Vocab build(std::span<const std::vector<std::string>> sentences,
                     const VocabOptions& options = {});
  // The same from token counts gathered elsewhere (a streamed counting pass over a large corpus).
  static Vocab from_counts(const std::unordered_map<std::string, int64_t>& counts, const VocabOptions& options = {});
  // Throws ValueError if the list does not start with the four special tokens or has duplicates.
  static Vocab from_tokens(std::vector<std::string> tokens);
  // The pieces of a SentencePiece model as tokens (ids equal the model's); the model's pieces 0..3
  // must be the special tokens (SubwordModel::train makes them so), else ValueError.
  static Vocab from_subword(SubwordModel model);

  bool is_subword() const { return subword_.has_value(); }
  const SubwordModel* subword() const { return subword_ ? &*subword_ : nullptr; }
  // "word" or "subword": how text is split and joined.
  std::string kind() const { return is_subword() ? "subword" : "word"; }

  // Text -> tokens: lower-cased words and punctuation (text::tokenize), or the model's pieces
  // (cased). Text -> ids without <eos>: encode(tokenize(text)).
  std::vector<std::string> tokenize(std::string_view text) const;
  // Tokens -> readable text: text::detokenize for words, the model's decoding for pieces.
  std::string detokenize(std::span<const std::string> tokens) const;
  // Tokens -> the lower-cased words tokenised BLEU compares: words as they are; pieces detokenised
  // and split by text::tokenize, so that the figure compares with a word-level model's.
  std::vector<std::string> words(std::span<const std::string> tokens) const;

  int64_t size() const { return static_cast<int64_t>(tokens_.size()); }
  int64_t id(std::string_view token) const;    // kUnk when unknown
  const std::string& token(int64_t id) const;  // throws IndexError when out of range
  bool contains(std::string_view token) const;
  const std::vector<std::string>& tokens() const { return tokens_; }

  std::vector<int64_t> encode(std::span<const std::string> tokens) const;  // no <bos>/<eos> added
  std::vector<std::string> decode(std::span<const int64_t> ids,
                                  const DecodeOptions& options = {}) const;

  // Words: {"format": "seqgrad.vocab", "version": 1, "tokens": [...]}; subword: {"format":
  // "seqgrad.vocab", "version": 2, "kind": "sentencepiece", "model": base64 of the model proto}.
  // from_json validates all of it and throws ValueError naming the offending field.
  nlohmann::json to_json() const;
  static Vocab from_json(const nlohmann::json& j);

 private:
  explicit Vocab(std::vector<std::string> tokens);

  std::vector<std::string> tokens_;
  std::unordered_map<std::string, int64_t> ids_;
  std::optional<SubwordModel> subword_;  // set: tokens are this model's pieces
};

// What differs between two vocabularies, for an error message: the kind, the size, the first token
// that differs, or the SentencePiece models; "" when they are the same.
std::string vocab_difference(const Vocab& a, const Vocab& b);

}  // namespace seqgrad::text
