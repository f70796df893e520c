// Translating sentences with loaded checkpoints (tools/translation.h).
#include "tools/translation.h"

#include <algorithm>
#include <filesystem>
#include <tuple>

#include <fmt/core.h>

#include "models/text/vocab.h"
#include "nn/init.h"
#include "tools/translator.h"

namespace seqgrad::tools {
namespace {

// One checkpoint file and the model its weights build, in eval mode.
std::pair<models::LoadedCheckpoint, std::unique_ptr<models::Seq2Seq>> load_one(const std::string& path,
                                                                             const LoadModelOptions& options) {
  std::error_code ec;  // a symlink loop or a denied folder: reading it below names the reason
  SG_CHECK_IO(std::filesystem::exists(path, ec) || ec, "no checkpoint at {} (train one with `seqgrad train`)", path);
  check_safetensors_file(path);
  models::LoadedCheckpoint checkpoint =
      models::read_checkpoint(path, {.allow_missing_checksum = options.allow_missing_checksum});
  // Refused before any decoding allocates beam x vocabulary scores: the first step has only as many
  // continuations as the target vocabulary has tokens, so a wider beam is a typo, not a search.
  const int64_t vocab = checkpoint.info.tgt_vocab.size();
  SG_CHECK_USAGE(options.beam <= vocab, "--beam {} is wider than the target vocabulary of {} ({} tokens): "
                 "give --beam {} or less", options.beam, path, vocab, vocab);
  std::unique_ptr<models::Seq2Seq> model;
  {
    nn::init::SkipInitGuard loaded_next;  // the checkpoint sets every value: nothing to draw or write
    model = std::make_unique<models::Seq2Seq>(checkpoint.info.config.model);
  }
  models::load_weights(*model, checkpoint, path);
  checkpoint.tensors.clear();  // the model holds the weights now, not the file's copies
  checkpoint.quantized.clear();
  model->eval();
  return {std::move(checkpoint), std::move(model)};
}

}  // namespace

models::Ensemble LoadedModel::ensemble() const {
  std::vector<models::Seq2Seq*> members{model.get()};
  for (const auto& m : ensemble_rest) members.push_back(m.get());
  return models::Ensemble(members);
}

LoadedModel load_model(const std::vector<std::string>& paths, const LoadModelOptions& options) {
  SG_CHECK_USAGE(!paths.empty(), "--checkpoint needs a file");
  const ResidentMemory before = resident_memory();
  LoadedModel l;
  std::tie(l.checkpoint, l.model) = load_one(paths[0], options);
  for (size_t i = 1; i < paths.size(); ++i) {
    auto [checkpoint, model] = load_one(paths[i], options);
    for (const auto& [side, first, other] : {std::tuple{"source", &l.checkpoint.info.src_vocab, &checkpoint.info.src_vocab},
                                             {"target", &l.checkpoint.info.tgt_vocab, &checkpoint.info.tgt_vocab}}) {
      const std::string difference = text::vocab_difference(*first, *other);
      SG_CHECK_USAGE(difference.empty(), "--checkpoint: an ensemble needs the same vocabularies, but the {} "
                     "vocabularies of {} and {} differ: {}", side, paths[0], paths[i], difference);
    }
    l.ensemble_rest.push_back(std::move(model));
  }
  if (options.memory_stats) {
    const ResidentMemory after = resident_memory();
    fmt::print(stderr, "model memory: {:.1f} MB (peak RSS {:.1f} MB while loading - RSS {:.1f} MB before)\n",
               (after.peak - before.now) / 1e6, after.peak / 1e6, before.now / 1e6);
  }
  return l;
}

Translation tokenize_source(const models::CheckpointInfo& info, const std::string& sentence, int64_t max_tokens) {
  Translation t;
  try {
    t.src_tokens = info.src_vocab.tokenize(sentence);
  } catch (const Error& e) {
    t.error = e.what();
    return t;
  }
  if (t.src_tokens.empty()) {
    t.error = "empty (nothing to translate)";
    return t;
  }
  t.truncated = max_tokens > 0 && static_cast<int64_t>(t.src_tokens.size()) > max_tokens;
  if (t.truncated) t.src_tokens.resize(max_tokens);
  return t;
}

void decode_translations(const models::Ensemble& models, const models::CheckpointInfo& info,
                         const std::vector<Translation*>& batch, const models::DecodeOptions& options,
                         Generator* sampling) {
  std::vector<Translation*> rows;  // the translation of each encoded row
  std::vector<std::vector<int64_t>> ids;
  for (Translation* t : batch) {
    if (!t->error.empty() || t->src_tokens.empty()) continue;
    ids.push_back(models::encode_sentence(info.src_vocab, t->src_tokens, 0));
    rows.push_back(t);
  }
  if (ids.empty()) return;
  int64_t longest = 0;
  for (const auto& row : ids) longest = std::max<int64_t>(longest, static_cast<int64_t>(row.size()));
  std::vector<int64_t> flat, lengths;
  for (const auto& row : ids) {
    flat.insert(flat.end(), row.begin(), row.end());
    flat.insert(flat.end(), longest - static_cast<int64_t>(row.size()), text::Vocab::kPad);
    lengths.push_back(static_cast<int64_t>(row.size()));
  }
  auto count = static_cast<int64_t>(ids.size());
  Tensor src = from_vector(flat, {count, longest}, {.dtype = DType::i64});
  Tensor len = from_vector(lengths, {count}, {.dtype = DType::i64});
  std::vector<std::vector<models::Hypothesis>> ranked;
  if (options.beam_size > 1) {
    ranked = models::beam_search(models, src, len, options);
  } else {
    for (models::Hypothesis& h : models::decode(models, src, len, options, sampling)) ranked.push_back({std::move(h)});
  }
  for (size_t r = 0; r < rows.size(); ++r) {
    Translation& t = *rows[r];
    t.hyps = std::move(ranked[r]);
    t.out_tokens.clear();
    for (const models::Hypothesis& h : t.hyps) t.out_tokens.push_back(info.tgt_vocab.decode(h.tokens));
  }
}

std::vector<Translation> translate_batch(const models::Ensemble& models, const models::CheckpointInfo& info,
                                         const std::vector<std::string>& sentences,
                                         const models::DecodeOptions& options, int64_t max_tokens,
                                         Generator* sampling) {
  std::vector<Translation> out;
  out.reserve(sentences.size());
  for (const std::string& s : sentences) out.push_back(tokenize_source(info, s, max_tokens));
  std::vector<Translation*> batch;
  for (Translation& t : out) batch.push_back(&t);
  decode_translations(models, info, batch, options, sampling);
  return out;
}

}  // namespace seqgrad::tools
