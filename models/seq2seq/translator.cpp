// Translating with trained checkpoints (models/seq2seq/translator.h).
#include "models/seq2seq/translator.h"

#include <algorithm>
#include <filesystem>
#include <tuple>

#include <fmt/core.h>

#include "models/seq2seq/data.h"
#include "models/seq2seq/run.h"
#include "models/seq2seq/transformer.h"
#include "nn/init.h"

namespace seqgrad::models {

LoadedModel load_model(const std::string& path, const ReadCheckpointOptions& options) {
  std::error_code ec;  // a symlink loop or a denied folder: reading it below names the reason
  SG_CHECK_IO(std::filesystem::exists(path, ec) || ec, "no checkpoint at {} (train one with `seqgrad train`)", path);
  LoadedModel loaded{read_checkpoint(path, options), nullptr};
  {
    nn::init::SkipInitGuard loaded_next;  // the checkpoint sets every value: nothing to draw or write
    loaded.model = build_translation_model(loaded.checkpoint.info.config.model);
  }
  load_weights(*loaded.model, loaded.checkpoint, path);
  loaded.checkpoint.tensors.clear();  // the model holds the weights now, not the file's copies
  loaded.checkpoint.quantized.clear();
  loaded.model->eval();
  return loaded;
}

namespace {

// The sentences tokenized, cut to max_tokens and encoded as one padded batch (src (N, S), lengths
// (N,)) of the good ones; `out` has one Translation per sentence, its error set when it has none.
struct EncodedSources {
  std::vector<Translation> out;
  std::vector<std::vector<int64_t>> ids;  // per encoded row, its <eos> included
  std::vector<size_t> which;              // the sentence of each encoded row
  Tensor src, lengths;
};

EncodedSources encode_sources(const CheckpointInfo& info, const std::vector<std::string>& sentences,
                              int64_t max_tokens) {
  EncodedSources e;
  e.out.resize(sentences.size());
  for (size_t i = 0; i < sentences.size(); ++i) {
    Translation& t = e.out[i];
    try {
      t.src_tokens = info.src_vocab.tokenize(sentences[i]);
    } catch (const Error& error) {
      t.error = error.what();
      continue;
    }
    if (t.src_tokens.empty()) {
      t.error = "empty (nothing to translate)";
      continue;
    }
    t.truncated = max_tokens > 0 && static_cast<int64_t>(t.src_tokens.size()) > max_tokens;
    if (t.truncated) t.src_tokens.resize(max_tokens);
    e.ids.push_back(encode_sentence(info.src_vocab, t.src_tokens, 0));
    e.which.push_back(i);
  }
  if (e.ids.empty()) return e;
  int64_t longest = 0;
  for (const auto& row : e.ids) longest = std::max<int64_t>(longest, static_cast<int64_t>(row.size()));
  std::vector<int64_t> flat, lengths;
  for (const auto& row : e.ids) {
    flat.insert(flat.end(), row.begin(), row.end());
    flat.insert(flat.end(), longest - static_cast<int64_t>(row.size()), text::Vocab::kPad);
    lengths.push_back(static_cast<int64_t>(row.size()));
  }
  auto rows = static_cast<int64_t>(e.ids.size());
  e.src = from_vector(flat, {rows, longest}, {.dtype = DType::i64});
  e.lengths = from_vector(lengths, {rows}, {.dtype = DType::i64});
  return e;
}

// The attention along t's best hypothesis for `sentence`, its source ids (S,), from the first
// model: the GRU's energies' terms, or a Transformer's every layer and head.
void add_internals(Translation& t, const Ensemble& models, const Tensor& sentence, const DecodeOptions& options) {
  const Hypothesis& best = t.hyps.front();
  if (auto* gru = dynamic_cast<Seq2Seq*>(&models.first()))
    t.internals = attention_internals(*gru, sentence.unsqueeze(0), best.tokens, best.finished, options.bos_id,
                                      options.eos_id);
  if (auto* transformer = dynamic_cast<TransformerTranslator*>(&models.first()))
    t.heads = transformer_internals(*transformer, sentence.unsqueeze(0), best.tokens, best.finished, options.bos_id,
                                    options.eos_id);
}

// Encoded row r's source ids (S,), without its padding.
Tensor encoded_row(const EncodedSources& e, size_t r) {
  return e.src.select(0, static_cast<int64_t>(r)).narrow(0, 0, static_cast<int64_t>(e.ids[r].size()));
}

// A forced hypothesis of an output cut at max_len: score_targets always scores <eos> after the
// last token, so its <eos> step is dropped.
void drop_eos_step(Hypothesis& h) {
  h.log_prob -= h.token_log_probs.back();
  h.token_log_probs.pop_back();
  h.attention.pop_back();
  if (!h.energies.empty()) h.energies.pop_back();
  if (!h.alternatives.empty()) h.alternatives.pop_back();
  h.finished = false;
}

}  // namespace

std::vector<Translation> translate_batch(const Ensemble& models, const CheckpointInfo& info,
                                         const std::vector<std::string>& sentences,
                                         const DecodeOptions& options, int64_t max_tokens,
                                         Generator* sampling, bool explain) {
  EncodedSources e = encode_sources(info, sentences, max_tokens);
  if (e.ids.empty()) return std::move(e.out);
  std::vector<std::vector<Hypothesis>> ranked;
  std::vector<BeamTree> trees;
  if (options.beam_size > 1) {
    ranked = beam_search(models, e.src, e.lengths, options, explain ? &trees : nullptr);
  } else {
    for (Hypothesis& h : decode(models, e.src, e.lengths, options, sampling)) ranked.push_back({std::move(h)});
  }
  for (size_t r = 0; r < e.which.size(); ++r) {
    Translation& t = e.out[e.which[r]];
    t.hyps = std::move(ranked[r]);
    for (const Hypothesis& h : t.hyps) t.out_tokens.push_back(info.tgt_vocab.decode(h.tokens));
    if (!explain) continue;
    if (!trees.empty()) t.beam_tree = std::move(trees[r]);
    add_internals(t, models, encoded_row(e, r), options);
  }
  return std::move(e.out);
}

std::vector<Translation> replay_batch(const Ensemble& models, const CheckpointInfo& info,
                                      const std::vector<std::string>& sentences, const std::vector<ForcedOutput>& outputs,
                                      const DecodeOptions& options, int64_t max_tokens) {
  SG_CHECK_VALUE(outputs.size() == sentences.size(), "replay_batch: {} outputs for {} sentences", outputs.size(),
                 sentences.size());
  EncodedSources e = encode_sources(info, sentences, max_tokens);
  if (e.ids.empty()) return std::move(e.out);
  std::vector<std::vector<int64_t>> targets;
  for (size_t i : e.which) targets.push_back(outputs[i].tokens);
  std::vector<Hypothesis> scored = score_targets(models, e.src, e.lengths, targets, options);
  for (size_t r = 0; r < e.which.size(); ++r) {
    Translation& t = e.out[e.which[r]];
    if (!outputs[e.which[r]].finished) drop_eos_step(scored[r]);
    t.hyps = {std::move(scored[r])};
    t.out_tokens = {info.tgt_vocab.decode(t.hyps.front().tokens)};
    add_internals(t, models, encoded_row(e, r), options);
  }
  return std::move(e.out);
}

InternalsPass::InternalsPass(const Ensemble& models, const CheckpointInfo& info, Translation& t,
                             const DecodeOptions& options)
    : t_(t) {
  SG_CHECK_VALUE(!t.hyps.empty() && !t.src_tokens.empty(), "InternalsPass: the translation has no {}",
                 t.hyps.empty() ? "hypothesis" : "source tokens");
  const std::vector<int64_t> ids = encode_sentence(info.src_vocab, t.src_tokens, 0);
  const Tensor src = from_vector(ids, {1, static_cast<int64_t>(ids.size())}, {.dtype = DType::i64});
  const Hypothesis& best = t.hyps.front();
  if (auto* gru = dynamic_cast<Seq2Seq*>(&models.first()))
    gru_ = std::make_unique<AttentionInternalsPass>(*gru, src, best.tokens, best.finished, options.bos_id,
                                                    options.eos_id);
  if (auto* transformer = dynamic_cast<TransformerTranslator*>(&models.first()))
    transformer_ = std::make_unique<TransformerInternalsPass>(*transformer, src, best.tokens, best.finished,
                                                              options.bos_id, options.eos_id);
}

bool InternalsPass::step() {
  if (gru_) {
    if (gru_->step()) return true;
    if (!t_.internals) t_.internals = gru_->take();
  }
  if (transformer_) {
    if (transformer_->step()) return true;
    if (!t_.heads) t_.heads = transformer_->take();
  }
  return false;
}

Translator::Translator(const std::vector<std::string>& checkpoints, const ReadCheckpointOptions& options) {
  SG_CHECK_VALUE(!checkpoints.empty(), "Translator: no checkpoint given");
  for (const std::string& path : checkpoints) {
    LoadedModel loaded = load_model(path, options);
    if (!members_.empty()) {
      const CheckpointInfo& first = info();
      for (const auto& [side, a, b] : {std::tuple{"source", &first.src_vocab, &loaded.checkpoint.info.src_vocab},
                                       {"target", &first.tgt_vocab, &loaded.checkpoint.info.tgt_vocab}}) {
        const std::string difference = text::vocab_difference(*a, *b);
        SG_CHECK_IO(difference.empty(), "an ensemble needs the same vocabularies, but the {} vocabularies of {} and "
                    "{} differ: {}", side, checkpoints.front(), path, difference);
      }
    }
    members_.push_back(std::move(loaded));
  }
}

DecodeOptions Translator::default_options() const { return decode_options(info().config); }

Ensemble Translator::ensemble() const {
  std::vector<TranslationModel*> models;
  for (const LoadedModel& m : members_) models.push_back(m.model.get());
  return Ensemble(models);
}

std::vector<Translation> Translator::translate(const std::vector<std::string>& sentences,
                                               const DecodeOptions& options, int64_t max_tokens, Generator* sampling,
                                               bool explain) const {
  return translate_batch(ensemble(), info(), sentences, options, max_tokens > 0 ? max_tokens : 2 * info().config.max_tokens,
                         sampling, explain);
}

std::string Translator::detokenize(const Translation& translation, size_t hypothesis) const {
  SG_CHECK_VALUE(translation.error.empty(), "Translator::detokenize: the sentence was not translated: {}",
                 translation.error);
  SG_CHECK_VALUE(hypothesis < translation.out_tokens.size(), "Translator::detokenize: hypothesis {} of {}", hypothesis,
                 translation.out_tokens.size());
  return info().tgt_vocab.detokenize(translation.out_tokens[hypothesis]);
}

}  // namespace seqgrad::models
