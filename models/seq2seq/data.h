// The translator's data: the corpora a config names (the training split streamed, validation and
// test held), the vocabularies built from the training text, and batches as tensors.
#pragma once
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/tensor.h"
#include "models/seq2seq/config.h"
#include "models/text/corpus.h"
#include "models/text/stream.h"
#include "models/text/vocab.h"

namespace seqgrad::models {

// The training split is indexed, not held: text::StreamingBatches reads it back one buffer at a
// time. Validation and test splits are small and held, tokenized, with their raw sentences.
struct Corpora {
  text::CorpusIndex train;
  std::vector<text::TokenizedPair> valid, test;
  std::vector<std::string> valid_references;  // raw target sentences, for sacreBLEU and chrF
  std::vector<std::string> valid_sources;
  std::vector<std::string> test_references, test_sources;
  std::string report;                         // what reading skipped and normalised
};
enum class Splits { all, test_only };  // test_only: eval reads neither train nor val (they may be absent)
// Reads the configured corpus: the training split in one streamed pass that checks every line and
// shows each kept pair to `visit_train` (a vocabulary's counting pass), the other splits whole.
// Every error is raised here, before training: unreadable or missing files, invalid UTF-8,
// different line counts, a TSV line without a tab, a split with no usable pair.
Corpora load_corpora(const TrainConfig& config, Splits splits = Splits::all,
                     const text::PairVisitor& visit_train = {});
// The first `max_pairs` training pairs (all when 0), tokenized, in memory: for tools that train on
// small subsets (compare) or a few batches (bench).
std::vector<text::TokenizedPair> read_train_pairs(const Corpora& corpora, int64_t max_pairs = 0);
// The splits' files of the configured corpus, as load_corpora reads them ("train", "valid",
// "test"); an empty CorpusFiles for a split a "files" corpus does not have.
text::CorpusFiles split_files(const TrainConfig& config, const std::string& split);

// Token counts of each side: a word vocabulary's counting pass over the training stream.
struct WordCounts {
  std::unordered_map<std::string, int64_t> src, tgt;
  void add(const text::SentencePair& pair);
};
// The encoder of the training stream: a cleaned pair into ids (Vocab::tokenize: words or pieces,
// look up, truncate to max_tokens, append <eos>), as tokenize_text + encode_pairs do in memory.
text::PairEncoder pair_encoder(const text::Vocab& src_vocab, const text::Vocab& tgt_vocab, int64_t max_tokens);

struct Vocabularies {
  text::Vocab src, tgt;
};
// The vocabularies config.vocab asks for, from training pairs: words counted (min_freq), or
// SentencePiece models trained (one for both sides with joint_vocab). ValueError when a size is
// more than the text supports.
inline constexpr int64_t kSubwordSampleSentences = 1'000'000;
Vocabularies build_vocabularies(const TrainConfig& config, std::span<const text::SentencePair> train_text);
// The same from the training stream, in load_corpora's one pass (add is its visit_train): word
// counts, or a uniform sample of at most kSubwordSampleSentences pairs for SentencePiece.
class VocabularyBuilder {
 public:
  explicit VocabularyBuilder(const TrainConfig& config);
  void add(const text::SentencePair& pair);
  Vocabularies build() const;

 private:
  TrainConfig config_;
  WordCounts counts_;
  text::PairSample sample_;
};
// Each side in its vocabulary's tokens (Vocab::tokenize: words or pieces).
std::vector<text::TokenizedPair> tokenize_text(std::span<const text::SentencePair> pairs, const text::Vocab& src_vocab,
                                               const text::Vocab& tgt_vocab);
// Re-tokenizes data.valid and data.test (read as words) from their sentences with the vocabularies.
void tokenize_held_splits(Corpora& data, const text::Vocab& src_vocab, const text::Vocab& tgt_vocab);

struct TensorBatch {
  Tensor src, src_lengths, tgt_in, tgt_out;  // (B, S), (B,), (B, T), (B, T)
  int64_t target_tokens = 0;
  std::vector<int64_t> index;
};
// The batch's tensors, created on `device` (the model's).
TensorBatch to_tensors(const text::Batch& batch, Device device = Device::cpu());

std::vector<int64_t> encode_sentence(const text::Vocab& vocab, const std::vector<std::string>& tokens,
                                     int64_t max_tokens);

}  // namespace seqgrad::models
