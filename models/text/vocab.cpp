// Vocab construction (frequency count, deterministic order), encoding/decoding and JSON round trip.
#include "models/text/vocab.h"

#include <algorithm>
#include <array>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace seqgrad::text {

namespace {

constexpr std::array<std::string_view, Vocab::kNumSpecial> kSpecials = {"<pad>", "<bos>", "<eos>",
                                                                        "<unk>"};
constexpr std::string_view kFormat = "seqgrad.vocab";
constexpr int kVersion = 1;

bool is_special(std::string_view token) {
  return std::find(kSpecials.begin(), kSpecials.end(), token) != kSpecials.end();
}

}  // namespace

Vocab::Vocab(std::vector<std::string> tokens) : tokens_(std::move(tokens)) {
  SG_CHECK_VALUE(tokens_.size() >= kSpecials.size(),
                 "vocab: needs at least the {} special tokens, got {} tokens", kSpecials.size(),
                 tokens_.size());
  for (std::size_t i = 0; i < kSpecials.size(); ++i)
    SG_CHECK_VALUE(tokens_[i] == kSpecials[i], "vocab: token {} must be \"{}\", got \"{}\"", i,
                   kSpecials[i], tokens_[i]);
  ids_.reserve(tokens_.size());
  for (std::size_t i = 0; i < tokens_.size(); ++i) {
    const bool inserted = ids_.emplace(tokens_[i], static_cast<int64_t>(i)).second;
    SG_CHECK_VALUE(inserted, "vocab: token \"{}\" appears twice (ids {} and {})", tokens_[i],
                   ids_.at(tokens_[i]), i);
  }
}

Vocab::Vocab() : Vocab(std::vector<std::string>(kSpecials.begin(), kSpecials.end())) {}

Vocab Vocab::build(std::span<const std::vector<std::string>> sentences,
                   const VocabOptions& options) {
  std::unordered_map<std::string, int64_t> counts;
  for (const auto& sentence : sentences)
    for (const auto& token : sentence) ++counts[token];
  return from_counts(counts, options);
}

Vocab Vocab::from_counts(const std::unordered_map<std::string, int64_t>& counts, const VocabOptions& options) {
  SG_CHECK_VALUE(options.min_freq >= 1, "vocab: min_freq = {} must be >= 1", options.min_freq);
  SG_CHECK_VALUE(options.max_size == 0 || options.max_size >= kNumSpecial,
                 "vocab: max_size = {} must be 0 (no limit) or >= {} (the special tokens)",
                 options.max_size, kNumSpecial);

  std::vector<std::pair<std::string, int64_t>> ranked;
  for (const auto& [token, count] : counts)
    if (count >= options.min_freq && !is_special(token)) ranked.emplace_back(token, count);
  std::sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second > b.second : a.first < b.first;
  });

  std::vector<std::string> tokens(kSpecials.begin(), kSpecials.end());
  const std::size_t limit = options.max_size == 0 ? ranked.size() + tokens.size()
                                                  : static_cast<std::size_t>(options.max_size);
  for (auto& [token, count] : ranked) {
    if (tokens.size() >= limit) break;
    tokens.push_back(std::move(token));
  }
  return Vocab(std::move(tokens));
}

Vocab Vocab::from_tokens(std::vector<std::string> tokens) { return Vocab(std::move(tokens)); }

int64_t Vocab::id(std::string_view token) const {
  const auto it = ids_.find(std::string(token));
  return it == ids_.end() ? kUnk : it->second;
}

const std::string& Vocab::token(int64_t id) const {
  SG_CHECK_INDEX(id >= 0 && id < size(), "vocab: id {} out of range [0, {})", id, size());
  return tokens_[static_cast<std::size_t>(id)];
}

bool Vocab::contains(std::string_view token) const { return ids_.contains(std::string(token)); }

std::vector<int64_t> Vocab::encode(std::span<const std::string> tokens) const {
  std::vector<int64_t> ids;
  ids.reserve(tokens.size());
  for (const auto& t : tokens) ids.push_back(id(t));
  return ids;
}

std::vector<std::string> Vocab::decode(std::span<const int64_t> ids,
                                       const DecodeOptions& options) const {
  std::vector<std::string> out;
  for (int64_t i : ids) {
    if (i == kEos && options.stop_at_eos) break;
    if (options.skip_special && (i == kPad || i == kBos || i == kEos)) continue;
    out.push_back(token(i));
  }
  return out;
}

nlohmann::json Vocab::to_json() const {
  return {{"format", kFormat}, {"version", kVersion}, {"tokens", tokens_}};
}

Vocab Vocab::from_json(const nlohmann::json& j) {
  SG_CHECK_VALUE(j.is_object() && j.contains("format") && j["format"] == kFormat,
                 "vocab: JSON is not a seqgrad vocab (expected \"format\": \"{}\")", kFormat);
  SG_CHECK_VALUE(j.contains("version") && j["version"] == kVersion,
                 "vocab: unsupported \"version\" {} (expected {})",
                 j.contains("version") ? j["version"].dump() : "missing", kVersion);
  SG_CHECK_VALUE(j.contains("tokens") && j["tokens"].is_array(),
                 "vocab: \"tokens\" must be an array of strings");
  std::vector<std::string> tokens;
  tokens.reserve(j["tokens"].size());
  for (const auto& t : j["tokens"]) {
    SG_CHECK_VALUE(t.is_string(), "vocab: \"tokens\"[{}] must be a string, got {}", tokens.size(),
                   t.dump());
    tokens.push_back(t.get<std::string>());
  }
  return Vocab(std::move(tokens));
}

}  // namespace seqgrad::text
