// Vocab: token <-> id mapping with the special tokens <pad> <bos> <eos> <unk> at ids 0..3, built
// deterministically from tokenized sentences and saved as JSON next to a model checkpoint.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

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

  int64_t size() const { return static_cast<int64_t>(tokens_.size()); }
  int64_t id(std::string_view token) const;    // kUnk when unknown
  const std::string& token(int64_t id) const;  // throws IndexError when out of range
  bool contains(std::string_view token) const;
  const std::vector<std::string>& tokens() const { return tokens_; }

  std::vector<int64_t> encode(std::span<const std::string> tokens) const;  // no <bos>/<eos> added
  std::vector<std::string> decode(std::span<const int64_t> ids,
                                  const DecodeOptions& options = {}) const;

  // {"format": "seqgrad.vocab", "version": 1, "tokens": [...]}; from_json validates all of it and
  // throws ValueError naming the offending field.
  nlohmann::json to_json() const;
  static Vocab from_json(const nlohmann::json& j);

 private:
  explicit Vocab(std::vector<std::string> tokens);

  std::vector<std::string> tokens_;
  std::unordered_map<std::string, int64_t> ids_;
};

}  // namespace seqgrad::text
