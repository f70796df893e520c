#include "tools/translator.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/core.h>

#include "models/text/bleu.h"
#include "models/text/chrf.h"
#include "models/text/tokenizer.h"
#include "nn/init.h"
#include "tools/plot/plot.h"

namespace seqgrad::tools {

ResidentMemory resident_memory() {
  ResidentMemory m;
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    std::istringstream fields(line);
    std::string key;
    int64_t kib = 0;
    fields >> key >> kib;  // "VmRSS:  12345 kB"
    if (key == "VmRSS:") m.now = kib * 1024;
    if (key == "VmHWM:") m.peak = kib * 1024;
  }
  return m;
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

plot::Heatmap merged_into_words(const plot::Heatmap& pieces) {
  models::AttentionMatrix words = models::merged_into_words(
      {.src = pieces.col_labels, .tgt = pieces.row_labels, .weights = pieces.values});
  plot::Heatmap merged = pieces;
  merged.cols = static_cast<int>(words.src.size());
  merged.rows = static_cast<int>(words.tgt.size());
  merged.col_labels = std::move(words.src);
  merged.row_labels = std::move(words.tgt);
  merged.values = std::move(words.weights);
  merged.title = pieces.title + " (pieces merged into words)";
  return merged;
}

AlignmentOutput parse_alignment_output(const std::string& value) {
  if (value == "hard") return AlignmentOutput::hard;
  if (value == "soft") return AlignmentOutput::soft;
  throw UsageError(fmt::format("--alignment expects hard or soft, got '{}'", value));
}

namespace {

// Hypothesis n's attention with its axes, in tokens or in words.
models::AttentionMatrix attention_of(const Translation& t, size_t n, HeatmapLabels labels) {
  models::AttentionMatrix m = models::attention_matrix(t.src_tokens, t.out_tokens[n], t.hyps[n]);
  return labels == HeatmapLabels::words ? models::merged_into_words(m) : m;
}

// One hypothesis: its text, tokens and scores. A field that decoding adds per token (as
// token_log_probs: one entry per produced token, <eos> included when finished) belongs here.
nlohmann::json hypothesis_json(const Translation& t, size_t n, const text::Vocab& tgt_vocab) {
  const models::Hypothesis& h = t.hyps[n];
  return {{"translation", tgt_vocab.detokenize(t.out_tokens[n])}, {"tokens", t.out_tokens[n]},
          {"score", h.score}, {"log_prob", h.log_prob}, {"finished", h.finished},
          {"token_log_probs", h.token_log_probs}};
}

// The diagnostics' fields (docs/outputs.md#attention-diagnostics), into an attention's object.
void add_diagnostics(nlohmann::json& j, const models::AttentionDiagnostics& d) {
  j["entropy"] = d.entropy;
  j["mean_entropy"] = d.mean_entropy;
  j["coverage"] = d.coverage;
  j["diagonal_distance"] = d.diagonal_distance ? nlohmann::json(*d.diagonal_distance) : nullptr;
}

// A cross-attention map (T, S) over the translation's axes (tokens).
models::AttentionMatrix head_matrix(const models::AttentionMatrix& axes, const Tensor& map) {
  models::AttentionMatrix m = axes;
  m.weights = map.contiguous().to_vector<float>();
  SG_CHECK_VALUE(m.weights.size() == m.src.size() * m.tgt.size(), "a cross-attention map of {} weights does not fit "
                 "{} output and {} source units", m.weights.size(), m.tgt.size(), m.src.size());
  return m;
}

// A Transformer's every layer and head (models::TransformerInternals): the cross-attention maps
// with their diagnostics and their agreement with the layer's head average, and the encoder's and
// the decoder's self-attention maps. In tokens, whatever the attention object's level.
nlohmann::json heads_json(const Translation& t) {
  const models::TransformerInternals& in = *t.heads;
  const models::AttentionMatrix axes = models::attention_matrix(t.src_tokens, t.out_tokens[0], t.hyps[0]);
  nlohmann::json cross = nlohmann::json::array(), encoder = nlohmann::json::array(),
                 decoder = nlohmann::json::array();
  for (const models::TransformerInternals::Layer& layer : in.layers) {
    const models::AttentionMatrix average = head_matrix(axes, mean(layer.cross_weights, {0}));
    nlohmann::json heads = nlohmann::json::array();
    const nlohmann::json rows = head_rows_json(layer.cross_weights);
    for (int64_t h = 0; h < in.heads; ++h) {
      const models::AttentionMatrix m = head_matrix(axes, layer.cross_weights.select(0, h));
      const std::optional<double> agreement = models::alignment_agreement(m, average);
      nlohmann::json head{{"weights", rows[h]}, {"agreement", agreement ? nlohmann::json(*agreement) : nullptr}};
      add_diagnostics(head, models::attention_diagnostics(m));
      heads.push_back(std::move(head));
    }
    cross.push_back(std::move(heads));
    encoder.push_back(head_rows_json(layer.encoder_weights));
    decoder.push_back(head_rows_json(layer.decoder_weights, true));
  }
  return {{"layers", in.layers.size()}, {"heads", in.heads}, {"head_dim", in.head_dim}, {"src", axes.src},
          {"tgt", axes.tgt}, {"cross", std::move(cross)}, {"encoder_self", std::move(encoder)},
          {"decoder_self", std::move(decoder)}};
}

// The best hypothesis's attention: its axes and diagnostics, and what the options add.
nlohmann::json attention_json(const Translation& t, const TranslationJsonOptions& options) {
  const models::AttentionMatrix m = attention_of(t, 0, options.labels);
  nlohmann::json j{{"level", options.labels == HeatmapLabels::words ? "words" : "tokens"},
                   {"src", m.src}, {"tgt", m.tgt}};
  add_diagnostics(j, models::attention_diagnostics(m));
  if (options.hard_alignment) {
    nlohmann::json pairs = nlohmann::json::array();
    for (const models::AlignmentPoint& p : models::hard_alignment(m)) pairs.push_back({p.src, p.tgt});
    j["alignment"] = std::move(pairs);
  }
  if (options.weights) {
    nlohmann::json rows = nlohmann::json::array();
    for (size_t r = 0; r < m.tgt.size(); ++r)
      rows.push_back(std::vector<float>(m.weights.begin() + r * m.src.size(), m.weights.begin() + (r + 1) * m.src.size()));
    j["weights"] = std::move(rows);
  }
  if (options.heads && t.heads) j["heads"] = heads_json(t);
  return j;
}

}  // namespace

nlohmann::json agreement_json(const models::TransformerInternals& in, const models::AttentionMatrix& reference) {
  const auto number = [](std::optional<double> x) { return x ? nlohmann::json(*x) : nlohmann::json(nullptr); };
  nlohmann::json heads = nlohmann::json::array(), average = nlohmann::json::array();
  for (const models::TransformerInternals::Layer& layer : in.layers) {
    nlohmann::json layer_heads = nlohmann::json::array();
    for (int64_t h = 0; h < in.heads; ++h)
      layer_heads.push_back(number(models::attention_overlap(head_matrix(reference, layer.cross_weights.select(0, h)),
                                                             reference)));
    heads.push_back(std::move(layer_heads));
    average.push_back(number(models::attention_overlap(head_matrix(reference, mean(layer.cross_weights, {0})),
                                                       reference)));
  }
  return {{"heads", std::move(heads)}, {"average", std::move(average)}};
}

nlohmann::json head_rows_json(const Tensor& maps, bool causal) {
  const int64_t heads = maps.size(0), rows = maps.size(1), cols = maps.size(2);
  const std::vector<float> values = maps.contiguous().to_vector<float>();
  nlohmann::json out = nlohmann::json::array();
  for (int64_t h = 0; h < heads; ++h) {
    nlohmann::json head = nlohmann::json::array();
    for (int64_t r = 0; r < rows; ++r) {
      auto begin = values.begin() + (h * rows + r) * cols;
      head.push_back(std::vector<float>(begin, begin + (causal ? std::min(r + 1, cols) : cols)));
    }
    out.push_back(std::move(head));
  }
  return out;
}

std::string alignment_text(const Translation& t, size_t n, AlignmentOutput kind, HeatmapLabels labels) {
  const models::AttentionMatrix m = attention_of(t, n, labels);
  return kind == AlignmentOutput::soft ? models::soft_alignment_text(m) : models::pharaoh(models::hard_alignment(m));
}

nlohmann::json translation_json(const Translation& t, const std::string& source, const text::Vocab& tgt_vocab,
                                const TranslationJsonOptions& options) {
  nlohmann::json j{{"src", source}};
  if (!t.error.empty()) {
    j["error"] = t.error;
    return j;
  }
  nlohmann::json nbest = nlohmann::json::array();
  for (size_t n = 0; n < t.hyps.size(); ++n) nbest.push_back(hypothesis_json(t, n, tgt_vocab));
  for (const char* field : {"translation", "score", "log_prob", "finished", "token_log_probs"})
    j[field] = nbest[0][field];
  j["tgt_tokens"] = nbest[0]["tokens"];
  j["src_tokens"] = t.src_tokens;
  j["truncated"] = t.truncated;
  j["nbest"] = std::move(nbest);
  j["attention"] = attention_json(t, options);
  return j;
}

void write_attention_heatmap(const std::string& stem, const std::vector<std::string>& src_tokens,
                             const std::vector<std::string>& tgt_tokens, const models::Hypothesis& hyp,
                             const std::string& title, HeatmapLabels labels) {
  plot::Heatmap weights = attention_heatmap(src_tokens, tgt_tokens, hyp.attention, title, false);
  if (labels == HeatmapLabels::words) weights = merged_into_words(weights);
  plot::write_heatmap_png(stem + ".png", weights);
  plot::write_heatmap_svg(stem + ".svg", weights);
  if (hyp.energies.empty()) return;
  plot::Heatmap energies = attention_heatmap(src_tokens, tgt_tokens, hyp.energies, title, true);
  plot::write_heatmap_png(stem + "_energies.png", energies);
  plot::write_heatmap_svg(stem + "_energies.svg", energies);
}

Evaluation evaluate_test(const models::Ensemble& models, const text::Vocab& src_vocab, const text::Vocab& tgt_vocab,
                         const models::Corpora& data, const models::TrainConfig& config,
                         const models::DecodeOptions& decoding) {
  text::EncodeOptions truncate{.max_src_tokens = config.max_tokens, .max_tgt_tokens = config.max_tokens};
  text::EncodedCorpus test = text::encode_pairs(data.test, src_vocab, tgt_vocab, truncate);
  return evaluate(models, test, tgt_vocab, data.test, data.test_references, decoding);
}

namespace {

std::string search_name(const models::DecodeOptions& decoding) {
  if (const auto& s = decoding.sampling)
    return s->top_k > 0 ? fmt::format("sampling topk:{}", s->top_k) : fmt::format("sampling topp:{}", s->top_p);
  return decoding.beam_size > 1 ? fmt::format("beam {}", decoding.beam_size) : "greedy";
}

// The search's name and every option (models::decode_options_json), as reports write them.
nlohmann::json decoding_json(const models::DecodeOptions& decoding) {
  nlohmann::json j = models::decode_options_json(decoding);
  j["search"] = search_name(decoding);
  return j;
}

}  // namespace

constexpr size_t kTestSamples = 5;  // sample translations (and heatmaps) in a test report

void report_test(const Evaluation& ev, const models::Corpora& data, const models::DecodeOptions& decoding) {
  fmt::print("test: loss {:.3f}, ppl {:.2f}, sacreBLEU {:.2f}, chrF {:.2f}, BLEU {:.2f} (tokenised, lower-cased) "
             "({})\n      sacreBLEU {}, chrF {}\n", ev.loss, std::exp(ev.loss), ev.sacrebleu, ev.chrf,
             ev.bleu_tokenized, search_name(decoding), text::bleu_signature(), text::chrf_signature());
  for (size_t i = 0; i < std::min(kTestSamples, ev.outputs.size()); ++i)
    fmt::print("  src: {}\n  ref: {}\n  out: {}\n", data.test_sources[i], data.test_references[i], ev.outputs[i]);
}

std::string write_test_heatmaps(const Evaluation& ev, const text::Vocab& src_vocab, const text::Vocab& tgt_vocab,
                                const models::Corpora& data, const std::string& out_dir, HeatmapLabels labels) {
  const size_t samples = std::min(kTestSamples, ev.outputs.size());
  for (size_t i = 0; i < samples; ++i) {
    std::string stem = (std::filesystem::path(out_dir) / fmt::format("attention_test{}", i)).string();
    write_attention_heatmap(stem, marked_unknown(data.test[i].src, src_vocab), tgt_vocab.decode(ev.hypotheses[i].tokens),
                            ev.hypotheses[i], data.test_sources[i], labels);  // titled with the sentence itself
  }
  return (std::filesystem::path(out_dir) / fmt::format("attention_test0..{}.png", samples ? samples - 1 : 0)).string();
}

nlohmann::json test_report_json(const Evaluation& ev, const models::DecodeOptions& decoding) {
  return {{"loss", ev.loss},
          {"ppl", std::exp(ev.loss)},
          {"sacrebleu", ev.sacrebleu},
          {"chrf", ev.chrf},
          {"bleu_tokenized", ev.bleu_tokenized},
          {"signatures", {{"sacrebleu", text::bleu_signature()}, {"chrf", text::chrf_signature()}}},
          {"decoding", decoding_json(decoding)},
          {"outputs", ev.outputs}};
}

void check_decode_flags(const Args& a) { decode_options(a, models::TrainConfig{}); }

namespace {

// The options of one scope as flags, as the table declares them.
void add_decode_flags(Args& a, models::DecodeScope scope) {
  for (const models::DecodeField& f : models::decode_fields())
    if (f.scope == scope) a.option(f.flag, f.value_name, f.help, f.default_text);
}

// A given flag's value as the JSON its row reads, checked against the row's type and range: a
// UsageError naming the flag, the range and the value otherwise.
nlohmann::json flag_value(const Args& a, const models::DecodeField& f) {
  nlohmann::json v;
  switch (f.type) {
    case models::FieldType::integer:  // get_int's own message names the range
      return a.get_int(f.flag, f.range.whole().min, f.range.whole().max);
    case models::FieldType::number: v = a.get_double(f.flag); break;
    case models::FieldType::boolean: v = a.flag(f.flag); break;
    case models::FieldType::text: v = a.get(f.flag); break;
  }
  const std::string problem = f.check(v);
  SG_CHECK_USAGE(problem.empty(), "--{} {}, got {}", f.flag, problem,
                 f.type == models::FieldType::text ? fmt::format("'{}'", a.get(f.flag)) : a.get(f.flag));
  return v;
}

}  // namespace

void add_decode_options(Args& a) { add_decode_flags(a, models::DecodeScope::search); }
void add_nbest_option(Args& a) { add_decode_flags(a, models::DecodeScope::nbest); }
void add_sampling_options(Args& a) { add_decode_flags(a, models::DecodeScope::sampling); }

models::DecodeOptions decode_options(const Args& a, const models::TrainConfig& config) {
  models::DecodeOptions o = models::decode_options(config);
  for (const models::DecodeField& f : models::decode_fields())
    if (a.is_declared(f.flag) && a.has(f.flag) && f.scope != models::DecodeScope::sampling)
      f.set(o, flag_value(a, f));
  SG_CHECK_USAGE(o.min_len <= o.max_len, "--min-len {} must be <= the longest output, --max-len {}", o.min_len,
                 o.max_len);
  SG_CHECK_USAGE(o.nbest <= o.beam_size, "--nbest {} needs a beam at least as wide (--beam {}): give --beam {}",
                 o.nbest, o.beam_size, o.nbest);
  if (!a.is_declared("sample")) return o;
  for (const char* flag : {"temperature", "seed"})
    SG_CHECK_USAGE(!a.has(flag) || a.has("sample"), "--{} applies to sampling: give --sample topk:K or topp:P too", flag);
  if (!a.has("sample")) return o;
  SG_CHECK_USAGE(o.beam_size == 1, "--sample draws one output per sentence: it does not combine with --beam {}",
                 o.beam_size);
  for (const models::DecodeField& f : models::decode_fields())  // --sample first: it starts the sampling
    if (f.scope == models::DecodeScope::sampling && a.has(f.flag)) f.set(o, flag_value(a, f));
  return o;
}

std::pair<models::LoadedCheckpoint, std::unique_ptr<models::TranslationModel>> load_checkpoint_model(
    const std::string& path, const Args& a) {
  std::error_code ec;  // a symlink loop or a denied folder: reading it names the reason
  if (std::filesystem::exists(path, ec)) check_safetensors_file(path);
  models::LoadedModel loaded =
      models::load_model(path, {.allow_missing_checksum = a.flag("allow-missing-checksum")});
  // Refused before any decoding allocates beam x vocabulary scores: the first step has only as many
  // continuations as the target vocabulary has tokens, so a wider beam is a typo, not a search.
  const int64_t vocab = loaded.checkpoint.info.tgt_vocab.size();
  SG_CHECK_USAGE(a.get_int("beam", 1) <= vocab, "--beam {} is wider than the target vocabulary of {} ({} tokens): "
                 "give --beam {} or less", a.get_int("beam", 1), path, vocab, vocab);
  const models::Architecture architecture = loaded.checkpoint.info.config.model.architecture;
  for (const models::DecodeField& f : models::decode_fields())
    SG_CHECK_USAGE(f.supports(architecture) || !a.is_declared(f.flag) || !a.has(f.flag), "--{} is not an option of "
                   "{}'s architecture ({}, config field model.architecture)", f.flag, path,
                   models::architecture_name(architecture));
  return {std::move(loaded.checkpoint), std::move(loaded.model)};
}

}  // namespace seqgrad::tools
