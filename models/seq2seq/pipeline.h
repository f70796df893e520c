// The translator's data and training setup: presets, corpora, vocabularies, tensor batches and
// checkpoints (one safetensors file holding weights, optimizer state, config and vocabularies).
#pragma once
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/seq2seq/model.h"
#include "models/text/corpus.h"
#include "models/text/vocab.h"
#include "ops/quantized.h"

namespace seqgrad::models {

struct TrainConfig {
  std::string preset = "default";
  std::string corpus = "multi30k";   // multi30k | fra-eng
  std::string src_lang = "de", tgt_lang = "en";
  std::string data_dir = "data";
  int64_t train_subset = 0;          // first N training pairs; 0 = all
  int64_t max_tokens = 20;           // per sentence, before <eos>
  int64_t min_freq = 2;
  int64_t batch_size = 64;
  int64_t epochs = 10;
  double lr = 0.005;
  int64_t step_size = 10;            // StepLR
  double gamma = 0.1;
  double label_smoothing = 0.1;
  double clip = 1.0;
  uint64_t seed = 0;
  std::string amp = "off";           // mixed precision of the GEMMs: off | bf16 | fp16 (core/autocast.h)
  // word (lower-cased words, min_freq) | unigram:N | bpe:N (SentencePiece pieces, cased); a
  // subword vocabulary is trained on the training text at the start of a run.
  std::string vocab = "word";
  bool joint_vocab = false;          // subword: one model for both languages
  Seq2SeqConfig model;

  nlohmann::json to_json() const;
  static TrainConfig from_json(const nlohmann::json& j);
};

// Presets: "seed" (the seeds' hyper-parameters), "d2l" (d2l.ai's tiny fra-eng model) and
// "default" (a good result in about ten minutes on two cores). Throws ValueError for other names.
TrainConfig preset(const std::string& name);
std::vector<std::string> preset_names();

struct Corpora {
  std::vector<text::SentencePair> train_text, valid_text, test_text;  // as read (spaces normalised)
  std::vector<text::TokenizedPair> train, valid, test;  // the vocabularies' tokens: tokenize_corpora()
  std::vector<std::string> test_references;  // raw target sentences, for sacreBLEU
  std::vector<std::string> test_sources;
  std::string report;                        // what reading skipped and normalised
};
enum class Splits { all, test_only };  // test_only: eval reads neither train nor val (they may be absent)
// Reads the configured corpus (Multi30k splits, or a held-out tail of fra-eng) as text.
Corpora load_corpora(const TrainConfig& config, Splits splits = Splits::all);

struct Vocabularies {
  text::Vocab src, tgt;
};
// The vocabularies config.vocab asks for, from the training text: words counted (min_freq), or
// SentencePiece models trained (one for both sides with joint_vocab) on a sample of at most
// kSubwordSampleSentences sentences per model. ValueError when a size is more than the text supports.
inline constexpr int64_t kSubwordSampleSentences = 1'000'000;
Vocabularies build_vocabularies(const TrainConfig& config, std::span<const text::SentencePair> train_text);
// Each side in its vocabulary's tokens (Vocab::tokenize: words or pieces).
std::vector<text::TokenizedPair> tokenize_text(std::span<const text::SentencePair> pairs, const text::Vocab& src_vocab,
                                               const text::Vocab& tgt_vocab);
// Fills data.train/valid/test with tokenize_text of data.train_text/valid_text/test_text.
void tokenize_corpora(Corpora& data, const text::Vocab& src_vocab, const text::Vocab& tgt_vocab);

struct TensorBatch {
  Tensor src, src_lengths, tgt_in, tgt_out;  // (B, S), (B,), (B, T), (B, T)
  int64_t target_tokens = 0;
  std::vector<int64_t> index;
};
// The batch's tensors, created on `device` (the model's).
TensorBatch to_tensors(const text::Batch& batch, Device device = Device::cpu());

std::vector<int64_t> encode_sentence(const text::Vocab& vocab, const std::vector<std::string>& tokens,
                                     int64_t max_tokens);

// Everything a checkpoint holds besides the module's weights.
struct CheckpointInfo {
  TrainConfig config;
  text::Vocab src_vocab, tgt_vocab;
  nlohmann::json train_state;  // epoch, step, best BLEU, RNG, scheduler, ...
};
void save_checkpoint(const std::string& path, const Seq2Seq& model, const CheckpointInfo& info,
                     const std::map<std::string, Tensor>& extra_tensors = {});
// The metadata every translator checkpoint carries (format, config, vocabularies, train_state).
std::map<std::string, std::string> checkpoint_metadata(const CheckpointInfo& info);
struct LoadedCheckpoint {
  CheckpointInfo info;
  std::map<std::string, Tensor> tensors;  // all tensors, "model." prefixed weights included
  // A quantized checkpoint's int8 weights by full name (models/seq2seq/quantized_checkpoint.h);
  // empty for a float one. load_weights installs them.
  std::map<std::string, QuantizedWeight> quantized;
};
struct ReadCheckpointOptions {
  // Accept a file without a checksum (written before seqgrad stored one), with a warning on
  // stderr. Without it a missing checksum is an error: one flipped bit in the key's name must not
  // let altered weights load.
  bool allow_missing_checksum = false;
};
// Reads the file and checks everything that can be checked before a model is built, every error
// an IOError naming `path`: that it is a regular file and a seqgrad translator checkpoint, its
// checksum, its metadata (config, vocabularies, train state) and that every size in the config
// (vocabularies, embed, hidden, attention, layers, max_tokens) matches the tensors present, so
// that a hostile config cannot make the model allocate more than the file holds.
LoadedCheckpoint read_checkpoint(const std::string& path, const ReadCheckpointOptions& options = {});
// Loads the "model." weights into a model built from the checkpoint's config; a missing,
// unexpected or mis-shaped tensor, or a non-finite value, is an error naming it.
void load_weights(Seq2Seq& model, const LoadedCheckpoint& checkpoint, const std::string& path);

}  // namespace seqgrad::models
