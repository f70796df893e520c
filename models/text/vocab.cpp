// Vocab construction (frequency count, deterministic order, or a SentencePiece model's pieces),
// text <-> tokens, encoding/decoding and JSON round trip (base64 for the model proto).
#include "models/text/vocab.h"

#include <algorithm>
#include <array>
#include <utility>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json.h"
#include "models/text/tokenizer.h"

namespace seqgrad::text {

namespace {

constexpr std::array<std::string_view, Vocab::kNumSpecial> kSpecials = {"<pad>", "<bos>", "<eos>",
                                                                        "<unk>"};
constexpr std::string_view kFormat = "seqgrad.vocab";
constexpr int kVersion = 1;         // word-level tokens
constexpr int kSubwordVersion = 2;  // a SentencePiece model
constexpr std::string_view kBase64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

// RFC 4648 base64 with '=' padding: the model proto is binary, JSON strings are UTF-8.
std::string base64_encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (std::size_t i = 0; i < bytes.size(); i += 3) {
    const std::size_t n = std::min<std::size_t>(3, bytes.size() - i);
    uint32_t group = 0;
    for (std::size_t k = 0; k < 3; ++k)
      group = group << 8 | (k < n ? static_cast<unsigned char>(bytes[i + k]) : 0u);
    for (std::size_t k = 0; k < 4; ++k) out += k <= n ? kBase64[group >> (18 - 6 * k) & 63] : '=';
  }
  return out;
}

std::string base64_decode(std::string_view text) {
  SG_CHECK_VALUE(text.size() % 4 == 0, "vocab: \"model\" is not base64 (length {} is not a multiple of 4)",
                 text.size());
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (std::size_t i = 0; i < text.size(); i += 4) {
    uint32_t group = 0;
    std::size_t padding = 0;
    for (std::size_t k = 0; k < 4; ++k) {
      const char c = text[i + k];
      const std::size_t value = kBase64.find(c);
      // '=' only as the last one or two characters of the text
      const bool pad = c == '=' && i + 4 == text.size() && k >= 2 && (k == 3 || text[i + 3] == '=');
      SG_CHECK_VALUE(value != std::string_view::npos || pad, "vocab: \"model\" is not base64 (character {} at {})",
                     c > ' ' && c <= '~' ? fmt::format("'{}'", c) : fmt::format("{:#04x}", static_cast<unsigned char>(c)),
                     i + k);
      padding += pad;
      group = group << 6 | (pad ? 0u : static_cast<uint32_t>(value));
    }
    for (std::size_t k = 0; k < 3 - padding; ++k) out += static_cast<char>(group >> (16 - 8 * k) & 0xFF);
  }
  return out;
}

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

Vocab Vocab::from_subword(SubwordModel model) {
  Vocab vocab(model.pieces());  // checks that ids 0..3 are the special tokens
  vocab.subword_ = std::move(model);
  return vocab;
}

std::vector<std::string> Vocab::tokenize(std::string_view text) const {
  return subword_ ? subword_->encode(text) : text::tokenize(text);
}

std::string Vocab::detokenize(std::span<const std::string> tokens) const {
  return subword_ ? subword_->decode(tokens) : text::detokenize(tokens);
}

std::vector<std::string> Vocab::words(std::span<const std::string> tokens) const {
  if (!subword_) return {tokens.begin(), tokens.end()};
  return text::tokenize(subword_->decode(tokens));
}

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
  if (subword_)
    return {{"format", kFormat}, {"version", kSubwordVersion}, {"kind", "sentencepiece"},
            {"model", base64_encode(subword_->serialized())}};
  return {{"format", kFormat}, {"version", kVersion}, {"tokens", tokens_}};
}

Vocab Vocab::from_json(const nlohmann::json& j) {
  SG_CHECK_VALUE(j.is_object() && j.contains("format") && j["format"] == kFormat,
                 "vocab: JSON is not a seqgrad vocab (expected \"format\": \"{}\")", kFormat);
  SG_CHECK_VALUE(j.contains("version") && (j["version"] == kVersion || j["version"] == kSubwordVersion),
                 "vocab: unsupported \"version\" {} (expected {} for words or {} for a subword model)",
                 j.contains("version") ? json_preview(j["version"]) : "missing", kVersion, kSubwordVersion);
  if (j["version"] == kSubwordVersion) {
    SG_CHECK_VALUE(j.contains("kind") && j["kind"] == "sentencepiece", "vocab: version {} needs \"kind\": "
                   "\"sentencepiece\", got {}", kSubwordVersion, j.contains("kind") ? json_preview(j["kind"]) : "none");
    SG_CHECK_VALUE(j.contains("model") && j["model"].is_string(), "vocab: \"model\" must be a base64 string");
    return from_subword(SubwordModel::from_serialized(base64_decode(j["model"].get<std::string>())));
  }
  SG_CHECK_VALUE(j.contains("tokens") && j["tokens"].is_array(),
                 "vocab: \"tokens\" must be an array of strings");
  std::vector<std::string> tokens;
  tokens.reserve(j["tokens"].size());
  for (const auto& t : j["tokens"]) {
    SG_CHECK_VALUE(t.is_string(), "vocab: \"tokens\"[{}] must be a string, got {}", tokens.size(),
                   json_preview(t));
    tokens.push_back(t.get<std::string>());
  }
  return Vocab(std::move(tokens));
}

std::string vocab_difference(const Vocab& a, const Vocab& b) {
  if (a.kind() != b.kind()) return fmt::format("a {} vocabulary and a {} one", a.kind(), b.kind());
  if (a.size() != b.size()) return fmt::format("{} tokens and {} tokens", a.size(), b.size());
  for (int64_t id = 0; id < a.size(); ++id)
    if (a.token(id) != b.token(id)) return fmt::format("token {} is '{}' and '{}'", id, a.token(id), b.token(id));
  if (a.to_json() != b.to_json()) return "the same pieces from different SentencePiece models";
  return "";
}

}  // namespace seqgrad::text
