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

// The best hypothesis's attention: its axes and diagnostics, and what the options add.
nlohmann::json attention_json(const Translation& t, const TranslationJsonOptions& options) {
  const models::AttentionMatrix m = attention_of(t, 0, options.labels);
  const models::AttentionDiagnostics d = models::attention_diagnostics(m);
  nlohmann::json j{{"level", options.labels == HeatmapLabels::words ? "words" : "tokens"},
                   {"src", m.src}, {"tgt", m.tgt},
                   {"entropy", d.entropy}, {"mean_entropy", d.mean_entropy}, {"coverage", d.coverage},
                   {"diagonal_distance", d.diagonal_distance ? nlohmann::json(*d.diagonal_distance) : nullptr}};
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
  return j;
}

}  // namespace

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

// --sample topk:K or topp:P.
models::SamplingOptions parse_sample_flag(const std::string& value) {
  const std::string usage = fmt::format("--sample expects topk:K (K >= 1) or topp:P (0 < P <= 1), got '{}'", value);
  const size_t colon = value.find(':');
  SG_CHECK_USAGE(colon != std::string::npos, "{}", usage);
  const std::string kind = value.substr(0, colon), number = value.substr(colon + 1);
  char* end = nullptr;
  const double x = std::strtod(number.c_str(), &end);
  SG_CHECK_USAGE(!number.empty() && end == number.c_str() + number.size() && std::isfinite(x), "{}", usage);
  models::SamplingOptions s;
  if (kind == "topk") {
    SG_CHECK_USAGE(x >= 1 && x == std::floor(x) && x <= 1e9, "{}", usage);
    s.top_k = static_cast<int64_t>(x);
  } else {
    SG_CHECK_USAGE(kind == "topp" && x > 0 && x <= 1, "{}", usage);
    s.top_p = x;
  }
  return s;
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
          {"decoding", {{"search", search_name(decoding)}, {"beam", decoding.beam_size},
                        {"max_len", decoding.max_len}, {"min_len", decoding.min_len},
                        {"length_penalty", decoding.length_penalty},
                        {"length_penalty_type", models::length_penalty_name(decoding.length_penalty_kind)},
                        {"coverage_penalty", decoding.coverage_penalty}}},
          {"outputs", ev.outputs}};
}

void check_decode_flags(const Args& a) { decode_options(a, models::TrainConfig{}); }

void add_decode_options(Args& a) {
  a.option("beam", "n", "beam size (1 = greedy)", "1")
      .option("length-penalty", "alpha", "beam score = log p / length^alpha (the power penalty; see --length-penalty-type)",
              "1.0")
      .option("length-penalty-type", "kind", "power: log p / length^alpha | gnmt: log p / ((5 + length) / 6)^alpha "
              "(Wu et al. 2016)", "power")
      .option("coverage-penalty", "beta", "beam score + beta x sum over source words of log(min(attention received, 1)) "
              "(GNMT's; 0 = off)", "0")
      .option("min-len", "n", "no <eos> before n output tokens", "0")
      .option("max-len", "n", "longest output in tokens (default: 2 x the checkpoint's truncation + 10, as validation)");
}

void add_sampling_options(Args& a) {
  a.option("sample", "topk:K|topp:P", "random sampling instead of the search: from the K most probable tokens, or from "
           "the nucleus of probability P (one output per sentence; --seed makes it reproducible)")
      .option("temperature", "t", "with --sample: sample from the distribution at temperature t (> 0)", "1.0")
      .option("seed", "n", "with --sample: the seed of the draws", "0");
}

models::DecodeOptions decode_options(const Args& a, const models::TrainConfig& config) {
  models::DecodeOptions o = models::decode_options(config, a.get_int("beam", 1));
  if (a.has("max-len")) o.max_len = a.get_int("max-len", 1);
  o.length_penalty = a.get_double("length-penalty");
  try {
    o.length_penalty_kind = models::parse_length_penalty(a.get("length-penalty-type"));
  } catch (const ValueError& e) {
    throw UsageError(fmt::format("--length-penalty-type: {}", e.what()));
  }
  o.coverage_penalty = a.get_double("coverage-penalty");
  SG_CHECK_USAGE(o.coverage_penalty >= 0, "--coverage-penalty must be >= 0 (0 = off), got {}", a.get("coverage-penalty"));
  o.min_len = a.get_int("min-len", 0);
  SG_CHECK_USAGE(o.min_len <= o.max_len, "--min-len {} must be <= the longest output, --max-len {}", o.min_len,
                 o.max_len);
  if (a.is_declared("nbest") && a.has("nbest")) {
    o.nbest = a.get_int("nbest", 1);
    SG_CHECK_USAGE(o.nbest <= o.beam_size, "--nbest {} needs a beam at least as wide (--beam {}): give --beam {}",
                   o.nbest, o.beam_size, o.nbest);
  }
  if (!a.is_declared("sample")) return o;
  for (const char* flag : {"temperature", "seed"})
    SG_CHECK_USAGE(!a.has(flag) || a.has("sample"), "--{} applies to sampling: give --sample topk:K or topp:P too", flag);
  if (!a.has("sample")) return o;
  SG_CHECK_USAGE(o.beam_size == 1, "--sample draws one output per sentence: it does not combine with --beam {}",
                 o.beam_size);
  o.sampling = parse_sample_flag(a.get("sample"));
  o.sampling->temperature = a.get_double("temperature");
  SG_CHECK_USAGE(o.sampling->temperature > 0, "--temperature must be > 0, got {}", a.get("temperature"));
  o.sampling->seed = static_cast<uint64_t>(a.get_int("seed", 0));
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
  return {std::move(loaded.checkpoint), std::move(loaded.model)};
}

}  // namespace seqgrad::tools
