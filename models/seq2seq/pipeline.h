// The translator's data and training setup: presets, corpora, vocabularies, tensor batches and
// checkpoints (one safetensors file holding weights, optimizer state, config and vocabularies).
#pragma once
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/seq2seq/model.h"
#include "models/text/corpus.h"
#include "models/text/stream.h"
#include "models/text/vocab.h"
#include "ops/quantized.h"

namespace seqgrad::models {

struct TrainConfig {
  std::string preset = "default";
  std::string corpus = "multi30k";   // multi30k | fra-eng (bundled, under data_dir) | files (the user's)
  std::string src_lang = "de", tgt_lang = "en";
  std::string data_dir = "data";
  // corpus "files": the splits' files (absolute paths; test may be empty: no test split).
  text::CorpusFiles train_files, valid_files, test_files;
  int64_t train_subset = 0;          // first N training pairs; 0 = all
  int64_t shuffle_buffer = 200000;   // training pairs held at once (text::StreamingBatches)
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
  Seq2SeqConfig model;

  nlohmann::json to_json() const;
  static TrainConfig from_json(const nlohmann::json& j);
};

// Presets: "seed" (the seeds' hyper-parameters), "d2l" (d2l.ai's tiny fra-eng model) and
// "default" (a good result in about ten minutes on two cores). Throws ValueError for other names.
TrainConfig preset(const std::string& name);
std::vector<std::string> preset_names();

// What a config trains on, for logs and reports: "multi30k", "fra-eng", or the user's files
// ("train 'a.de' and 'a.en', valid ..., test ...").
std::string describe_corpus(const TrainConfig& config);
// The corpus names load_corpora() knows: the bundled ones, then "files" (TrainConfig::*_files).
std::vector<std::string> corpus_names();

// The training split is indexed, not held: text::StreamingBatches reads it back one buffer at a
// time. Validation and test splits are small and held, tokenized, with their raw sentences.
struct Corpora {
  text::CorpusIndex train;
  std::vector<text::TokenizedPair> valid, test;
  std::vector<std::string> valid_references;  // raw target sentences, for sacreBLEU and chrF
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

// Word-level encoding of the training stream: token counts of each side (the vocabularies'
// counting pass), and the encoder that turns a cleaned pair into ids (tokenize, look up, truncate
// to max_tokens, append <eos>), as tokenize_pairs + encode_pairs do for a corpus in memory.
struct WordCounts {
  std::unordered_map<std::string, int64_t> src, tgt;
  void add(const text::SentencePair& pair);
};
text::PairEncoder word_pair_encoder(const text::Vocab& src_vocab, const text::Vocab& tgt_vocab, int64_t max_tokens);

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
