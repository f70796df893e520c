#include "tools/translator.h"

#include <cmath>
#include <filesystem>

#include <fmt/core.h>

#include "models/text/bleu.h"
#include "models/text/tokenizer.h"
#include "tools/plot/plot.h"

namespace seqgrad::tools {

Evaluation evaluate(models::Seq2Seq& model, const text::EncodedCorpus& corpus, const text::Vocab& tgt_vocab,
                    const std::vector<text::TokenizedPair>& references, const models::DecodeOptions& options) {
  Evaluation out;
  out.hypotheses.resize(corpus.pairs.size());
  bool was_training = model.is_training();
  model.eval();
  NoGradGuard no_grad;
  double loss_sum = 0;
  int64_t tokens = 0;
  const Device device = model.parameters().front().device();  // batches go where the model is
  for (const text::Batch& batch : text::make_batches(corpus.pairs, {.batch_size = 128, .shuffle = false})) {
    models::TensorBatch b = models::to_tensors(batch, device);
    Tensor logits = model(b.src, b.src_lengths, b.tgt_in);
    Tensor loss = nn::cross_entropy(logits.reshape({-1, logits.size(-1)}), b.tgt_out.reshape({-1}),
                                    {.ignore_index = text::Vocab::kPad, .reduction = nn::Reduction::sum});
    loss_sum += loss.item();
    tokens += b.target_tokens;
    std::vector<models::Hypothesis> hyps = models::decode(model, b.src, b.src_lengths, options);
    for (size_t i = 0; i < hyps.size(); ++i) out.hypotheses[batch.index[i]] = std::move(hyps[i]);
  }
  model.train(was_training);
  out.loss = tokens ? loss_sum / tokens : 0;
  std::vector<std::vector<std::string>> hyp_tokens, ref_tokens;
  for (size_t i = 0; i < corpus.pairs.size(); ++i) {
    hyp_tokens.push_back(tgt_vocab.decode(out.hypotheses[i].tokens));
    ref_tokens.push_back(references[i].tgt);
  }
  out.bleu = text::corpus_bleu_tokens(hyp_tokens, ref_tokens).score;
  return out;
}

plot::Heatmap attention_heatmap(const std::vector<std::string>& src_tokens, const std::vector<std::string>& tgt_tokens,
                                const std::vector<std::vector<float>>& rows, const std::string& title, bool energies) {
  plot::Heatmap h;
  h.rows = static_cast<int>(rows.size());
  h.cols = static_cast<int>(rows.empty() ? 0 : rows[0].size());
  for (const auto& row : rows) h.values.insert(h.values.end(), row.begin(), row.end());
  h.col_labels = src_tokens;  // the source as encoded: tokens, then <eos>
  h.col_labels.push_back("<eos>");
  h.col_labels.resize(h.cols, "");
  h.row_labels = tgt_tokens;
  h.row_labels.push_back("<eos>");
  h.row_labels.resize(h.rows, "");
  h.title = energies ? title + " (energies)" : title;
  h.x_title = "source";
  h.y_title = "output";
  if (energies) {  // pre-softmax scores: a diverging map centred at 0
    h.diverging = true;
    h.colorbar_label = "energy";
  }
  return h;
}

std::vector<std::string> marked_unknown(const std::vector<std::string>& src_tokens, const text::Vocab& src_vocab) {
  std::vector<std::string> labels;
  for (const std::string& token : src_tokens) labels.push_back(src_vocab.contains(token) ? token : token + " (<unk>)");
  return labels;
}

void write_attention_heatmap(const std::string& stem, const std::vector<std::string>& src_tokens,
                             const std::vector<std::string>& tgt_tokens, const models::Hypothesis& hyp,
                             const std::string& title) {
  plot::Heatmap weights = attention_heatmap(src_tokens, tgt_tokens, hyp.attention, title, false);
  plot::write_heatmap_png(stem + ".png", weights);
  plot::write_heatmap_svg(stem + ".svg", weights);
  if (hyp.energies.empty()) return;
  plot::Heatmap energies = attention_heatmap(src_tokens, tgt_tokens, hyp.energies, title, true);
  plot::write_heatmap_png(stem + "_energies.png", energies);
  plot::write_heatmap_svg(stem + "_energies.svg", energies);
}

void report_test(models::Seq2Seq& model, const text::Vocab& src_vocab, const text::Vocab& tgt_vocab,
                 const models::Corpora& data, const models::TrainConfig& config, const std::string& out_dir,
                 const models::DecodeOptions& decoding) {
  text::EncodeOptions truncate{.max_src_tokens = config.max_tokens, .max_tgt_tokens = config.max_tokens};
  text::EncodedCorpus test = text::encode_pairs(data.test, src_vocab, tgt_vocab, truncate);
  Evaluation ev = evaluate(model, test, tgt_vocab, data.test, decoding);
  std::vector<std::string> detok;
  for (const auto& h : ev.hypotheses) detok.push_back(text::detokenize(tgt_vocab.decode(h.tokens)));
  text::BleuScore sacre = text::corpus_bleu(detok, data.test_references);
  fmt::print("test: loss {:.3f}, ppl {:.2f}, BLEU {:.2f} (tokenised, lower-cased), sacreBLEU {:.2f} ({})\n", ev.loss,
             std::exp(ev.loss), ev.bleu, sacre.score,
             decoding.beam_size > 1 ? fmt::format("beam {}", decoding.beam_size) : "greedy");
  for (size_t i = 0; i < std::min<size_t>(5, detok.size()); ++i) {
    fmt::print("  src: {}\n  ref: {}\n  out: {}\n", data.test_sources[i], data.test_references[i], detok[i]);
    std::string stem = (std::filesystem::path(out_dir) / fmt::format("attention_test{}", i)).string();
    write_attention_heatmap(stem, marked_unknown(data.test[i].src, src_vocab), tgt_vocab.decode(ev.hypotheses[i].tokens), ev.hypotheses[i],
                            data.test_sources[i]);  // titled with the sentence itself
  }
  fmt::print("heatmaps: {}\n", (std::filesystem::path(out_dir) /
                                 fmt::format("attention_test0..{}.png", std::min<size_t>(5, detok.size()) - 1)).string());
}

}  // namespace seqgrad::tools

namespace seqgrad::tools {

// Optimizer tensors go into the checkpoint as "optim.<name>"; its metadata and the scheduler's
// state as JSON in the tensor-free train_state (see cmd_train.cpp).
std::map<std::string, Tensor> training_state_tensors(const optim::Optimizer& optimizer, const optim::StepLR&) {
  std::map<std::string, Tensor> out;
  for (auto& [name, t] : optimizer.state_dict().tensors) out["optim." + name] = t;
  return out;
}

void restore_training_state(const models::LoadedCheckpoint& checkpoint, optim::Optimizer& optimizer,
                            optim::StepLR& scheduler) {
  const nlohmann::json& state = checkpoint.info.train_state;
  SG_CHECK_IO(state.contains("optimizer") && state.contains("scheduler"),
              "checkpoint: no optimizer/scheduler state to resume from");
  optim::OptimizerState os;
  os.metadata = state["optimizer"].get<std::string>();
  for (const auto& [name, t] : checkpoint.tensors)
    if (name.rfind("optim.", 0) == 0) os.tensors[name.substr(6)] = t;
  optimizer.load_state_dict(os);
  scheduler.load_state_dict(state["scheduler"].get<std::string>());
}

}  // namespace seqgrad::tools
