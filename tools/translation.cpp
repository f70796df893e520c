// Translating sentences with a loaded checkpoint (tools/translation.h).
#include "tools/translation.h"

#include <algorithm>
#include <filesystem>

#include <fmt/core.h>

#include "nn/init.h"
#include "tools/args.h"
#include "tools/translator.h"

namespace seqgrad::tools {

LoadedModel load_model(const std::string& path, const LoadModelOptions& options) {
  std::error_code ec;  // a symlink loop or a denied folder: reading it below names the reason
  SG_CHECK_IO(std::filesystem::exists(path, ec) || ec, "no checkpoint at {} (train one with `seqgrad train`)", path);
  check_safetensors_file(path);
  const ResidentMemory before = resident_memory();
  LoadedModel l{models::read_checkpoint(path, {.allow_missing_checksum = options.allow_missing_checksum}), nullptr};
  // Refused before any decoding allocates beam x vocabulary scores: the first step has only as many
  // continuations as the target vocabulary has tokens, so a wider beam is a typo, not a search.
  const int64_t vocab = l.checkpoint.info.tgt_vocab.size();
  SG_CHECK_USAGE(options.beam <= vocab, "--beam {} is wider than the target vocabulary of {} ({} tokens): "
                 "give --beam {} or less", options.beam, path, vocab, vocab);
  {
    nn::init::SkipInitGuard loaded_next;  // the checkpoint sets every value: nothing to draw or write
    l.model = std::make_unique<models::Seq2Seq>(l.checkpoint.info.config.model);
  }
  models::load_weights(*l.model, l.checkpoint, path);
  l.checkpoint.tensors.clear();  // the model holds the weights now, not the file's copies
  l.checkpoint.quantized.clear();
  l.model->eval();
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

void decode_translations(LoadedModel& l, const std::vector<Translation*>& batch, const models::DecodeOptions& options) {
  const models::CheckpointInfo& info = l.checkpoint.info;
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
    ranked = models::beam_search(*l.model, src, len, options);
  } else {
    for (models::Hypothesis& h : models::greedy_decode(*l.model, src, len, options)) ranked.push_back({std::move(h)});
  }
  for (size_t r = 0; r < rows.size(); ++r) {
    Translation& t = *rows[r];
    t.hyps = std::move(ranked[r]);
    t.out_tokens.clear();
    for (const models::Hypothesis& h : t.hyps) t.out_tokens.push_back(info.tgt_vocab.decode(h.tokens));
  }
}

std::vector<Translation> translate_batch(LoadedModel& l, const std::vector<std::string>& sentences,
                                         const models::DecodeOptions& options, int64_t max_tokens) {
  std::vector<Translation> out;
  out.reserve(sentences.size());
  for (const std::string& s : sentences) out.push_back(tokenize_source(l.checkpoint.info, s, max_tokens));
  std::vector<Translation*> batch;
  for (Translation& t : out) batch.push_back(&t);
  decode_translations(l, batch, options);
  return out;
}

}  // namespace seqgrad::tools
