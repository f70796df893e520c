#include "tools/translator.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/core.h>

#include "models/text/bleu.h"
#include "models/text/subword.h"
#include "models/text/chrf.h"
#include "models/text/tokenizer.h"
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
  const text::MergedPieces cols = text::merge_pieces(pieces.col_labels);
  const text::MergedPieces rows = text::merge_pieces(pieces.row_labels);
  plot::Heatmap words = pieces;
  words.cols = static_cast<int>(cols.words.size());
  words.rows = static_cast<int>(rows.words.size());
  words.col_labels = cols.words;
  words.row_labels = rows.words;
  words.title = pieces.title + " (pieces merged into words)";
  std::vector<int> pieces_per_row(rows.words.size(), 0);
  for (int64_t word : rows.word_of_piece) ++pieces_per_row[word];
  words.values.assign(static_cast<size_t>(words.rows) * words.cols, 0.0f);
  for (int r = 0; r < pieces.rows; ++r) {
    const int64_t row = rows.word_of_piece[r];
    for (int c = 0; c < pieces.cols; ++c)  // sum over the word's columns, mean over its rows
      words.values[row * words.cols + cols.word_of_piece[c]] +=
          pieces.values[static_cast<size_t>(r) * pieces.cols + c] / static_cast<float>(pieces_per_row[row]);
  }
  return words;
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

}  // namespace seqgrad::tools
