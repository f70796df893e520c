// Subword units with SentencePiece (unigram or BPE): training on a bounded sample of sentences,
// encoding text to pieces, decoding pieces to detokenised text, the model's serialized form (kept
// inside checkpoints), and merging pieces back into words for display. Without SentencePiece in
// the build (meson option sentencepiece) every entry point throws "this build has no
// SentencePiece support".
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace seqgrad::text {

enum class SubwordKind { unigram, bpe };

struct SubwordOptions {
  SubwordKind kind = SubwordKind::unigram;
  int64_t vocab_size = 8000;  // pieces, the 4 special tokens (<pad> <bos> <eos> <unk>) included
  // SentencePiece's input_sentence_size: at most this many sentences (a uniform sample of a larger
  // corpus) are held in memory for training.
  int64_t max_sentences = 1'000'000;
  uint64_t seed = 0;  // the sample and the unigram EM are deterministic for a seed
};

// "unigram:8000" | "bpe:8000" -> options; throws ValueError naming `flag` and what is expected.
SubwordOptions parse_subword_spec(std::string_view spec, std::string_view flag);
std::string subword_spec(const SubwordOptions& options);  // the inverse: "unigram:8000"

// vocab "spm:MODEL": an existing SentencePiece model file instead of a model trained by the run.
inline constexpr std::string_view kSubwordModelPrefix = "spm:";

// True when this build links SentencePiece.
bool subword_supported();
// The SentencePiece plugin's file, or why none loaded (`seqgrad info` prints it).
std::string subword_plugin_description();

// Gives the next training sentence in `sentence` and returns true, or returns false at the end.
using SentenceSource = std::function<bool(std::string& sentence)>;

class SubwordModel {
 public:
  // Trains on the sentences `next` gives (one pass; SentencePiece samples max_sentences of them).
  // Piece ids 0..3 are <pad> <bos> <eos> <unk>, as in Vocab. Cased, NFKC-normalised; every
  // character of the sample is covered. Throws ValueError when the text supports fewer pieces
  // than options.vocab_size (naming the most it supports) or holds no sentence.
  static SubwordModel train(const SentenceSource& next, const SubwordOptions& options);
  // A model from its serialized proto (as serialized() gives it); ValueError when it does not parse.
  static SubwordModel from_serialized(std::string proto);
  // A SentencePiece .model file (the serialized proto, as spm_train writes it); IOError naming
  // `path` when it cannot be read, ValueError naming it when it is not a SentencePiece model.
  static SubwordModel read(const std::string& path);

  const std::string& serialized() const;
  std::vector<std::string> pieces() const;  // all pieces, in id order
  // "Ein Hund." -> "▁Ein" "▁Hund" "." ; throws ValueError on invalid UTF-8.
  std::vector<std::string> encode(std::string_view text) const;
  // Pieces -> text: "▁" becomes a space, the leading one dropped; <unk> reads " ⁇ ".
  std::string decode(std::span<const std::string> pieces) const;

 private:
  struct Impl;
  explicit SubwordModel(std::shared_ptr<const Impl> impl);
  std::shared_ptr<const Impl> impl_;  // immutable after loading, so copies share it
};

// SentencePiece marks a piece that starts a word with U+2581 "▁".
inline constexpr std::string_view kWordStart = "\u2581";

// Pieces grouped into words for display: a word starts at a piece beginning with "▁" (or at the
// first piece, or at a special token such as <eos>, which stays a word of its own); its label is
// its pieces joined without the "▁". word_of_piece[i] is the word piece i belongs to. Tokens of
// which none starts with "▁" (a word-level vocabulary) are each a word already.
struct MergedPieces {
  std::vector<std::string> words;
  std::vector<int64_t> word_of_piece;
};
MergedPieces merge_pieces(std::span<const std::string> pieces);

}  // namespace seqgrad::text
