// Translator checkpoints: one safetensors file holding the weights, the optimizer state, the
// config, the vocabularies and the run's state, with a checksum; read with every size and value
// checked before a model is built from it.
#pragma once
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/state_dict.h"
#include "models/seq2seq/config.h"
#include "models/seq2seq/model.h"
#include "models/text/vocab.h"
#include "ops/quantized.h"

namespace seqgrad::models {

// Everything a checkpoint holds besides the module's weights.
struct CheckpointInfo {
  TrainConfig config;
  text::Vocab src_vocab, tgt_vocab;
  // The run's state (Trainer::state_dict): its values (epoch, step, RNG position, and the
  // optimizer's, scheduler's, GradScaler's and early stopping's states nested by name) and its
  // tensors (the optimizer's, "optimizer.state.0.exp_avg", ...). Empty for a checkpoint that
  // only carries weights.
  StateDict train_state;
};
// Writes the model's weights as "model.<name>", the train_state's tensors under their names and
// its values as the JSON of metadata "train_state", with the config, the vocabularies and a
// checksum (format version 3). ValueError for a train_state tensor named "model.*".
void save_checkpoint(const std::string& path, const TranslationModel& model, const CheckpointInfo& info);
// The metadata every translator checkpoint carries (format, config, vocabularies, train_state's values).
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
// A checkpoint of format version 2 or older (written before StateDict) is upgraded as it is read:
// its train_state's JSON strings (the optimizer's and scheduler's states) become JSON values, its
// optimizer tensors "optim.*" become "optimizer.*", and its early-stopping fields (best_metric,
// best_score, validations_since_best, best_bleu) become the nested "early_stopping" state.
LoadedCheckpoint read_checkpoint(const std::string& path, const ReadCheckpointOptions& options = {});
// Loads the "model." weights into a model built from the checkpoint's config; a missing,
// unexpected or mis-shaped tensor, or a non-finite value, is an error naming it.
void load_weights(TranslationModel& model, const LoadedCheckpoint& checkpoint, const std::string& path);

// Parameter averaging (fairseq's average_checkpoints.py; Junczys-Dowmunt et al. 2016): the
// element-wise mean of the "model." weights of float checkpoints of one architecture and
// vocabulary (a run's best validations' ckpt-STEP.safetensors). The result holds only those
// weights, the first checkpoint's config and vocabularies, and its train_state's values without
// the optimizer's, scheduler's and GradScaler's states and with no tensors (so --resume refuses
// it), plus "averaged_from": the paths. IOError naming the two
// files and what differs (a config field model.*, a vocabulary), or a quantized checkpoint.
LoadedCheckpoint average_checkpoints(const std::vector<std::string>& paths);

}  // namespace seqgrad::models
