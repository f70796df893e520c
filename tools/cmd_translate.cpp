// `seqgrad translate`, `seqgrad eval` and `seqgrad attention`: use a trained checkpoint.
#include <cmath>
#include <filesystem>
#include <iostream>

#include <fmt/core.h>

#include "core/threads.h"
#include "models/text/bleu.h"
#include "models/text/tokenizer.h"
#include "tools/args.h"
#include "tools/commands.h"
#include "tools/plot/plot.h"
#include "tools/translator.h"

namespace seqgrad::tools {
namespace {

struct Loaded {
  models::LoadedCheckpoint checkpoint;
  std::unique_ptr<models::Seq2Seq> model;
};

Loaded load_model(const Args& a) {
  const std::string path = a.get("checkpoint");
  std::error_code ec;  // a symlink loop or a denied folder: reading it below names the reason
  SG_CHECK_IO(std::filesystem::exists(path, ec) || ec, "no checkpoint at {} (train one with `seqgrad train`)", path);
  Loaded l{models::read_checkpoint(path, {.allow_missing_checksum = a.flag("allow-missing-checksum")}), nullptr};
  l.model = std::make_unique<models::Seq2Seq>(l.checkpoint.info.config.model);
  models::load_weights(*l.model, l.checkpoint, path);
  l.model->eval();
  return l;
}

// Sentences from the positional arguments, else one per line of stdin.
std::vector<std::string> input_sentences(const Args& args) {
  std::vector<std::string> out = args.positionals();
  if (out.empty())
    for (std::string line; std::getline(std::cin, line);) out.push_back(line);
  return out;
}

struct Translation {
  std::vector<std::string> src_tokens, out_tokens;
  models::Hypothesis hyp;
  bool truncated = false;
};

Translation translate_one(Loaded& l, const std::string& sentence, const models::DecodeOptions& options) {
  const models::TrainConfig& c = l.checkpoint.info.config;
  Translation t;
  t.src_tokens = text::tokenize(sentence);
  SG_CHECK_VALUE(!t.src_tokens.empty(), "the input sentence '{}' is empty (nothing to translate)", sentence);
  t.truncated = c.max_tokens > 0 && static_cast<int64_t>(t.src_tokens.size()) > 2 * c.max_tokens;
  std::vector<int64_t> ids = models::encode_sentence(l.checkpoint.info.src_vocab, t.src_tokens,
                                                     t.truncated ? 2 * c.max_tokens : 0);
  if (t.truncated) t.src_tokens.resize(2 * c.max_tokens);
  auto n = static_cast<int64_t>(ids.size());
  Tensor src = from_vector(ids, {1, n}, {.dtype = DType::i64});
  Tensor len = from_vector(std::vector<int64_t>{n}, {1}, {.dtype = DType::i64});
  t.hyp = models::decode(*l.model, src, len, options)[0];
  t.out_tokens = l.checkpoint.info.tgt_vocab.decode(t.hyp.tokens);
  return t;
}

models::DecodeOptions decode_options(const Args& a) {
  SG_CHECK_VALUE(a.get_int("beam") >= 1, "--beam must be >= 1, got {}", a.get_int("beam"));
  SG_CHECK_VALUE(a.get_int("max-len") >= 1, "--max-len must be >= 1, got {}", a.get_int("max-len"));
  return {.max_len = a.get_int("max-len"), .beam_size = a.get_int("beam"),
          .length_penalty = a.get_double("length-penalty")};
}

void common_options(Args& a) {
  a.option("checkpoint", "file", "checkpoint to load", "runs/default/best.safetensors")
      .option("beam", "n", "beam size (1 = greedy)", "1")
      .option("length-penalty", "alpha", "beam score = log p / length^alpha", "1.0")
      .option("max-len", "n", "longest output in tokens", "50")
      .option("threads", "n", "threads (default: all cores)")
      .option("allow-missing-checksum", "", "load a checkpoint that has no checksum (written before seqgrad stored "
              "one), unverified");
}

void apply_threads(const Args& a) {
  if (!a.has("threads")) return;
  SG_CHECK_VALUE(a.get_int("threads") >= 1, "--threads must be >= 1, got {}", a.get_int("threads"));
  set_num_threads(static_cast<int>(a.get_int("threads")));
}

}  // namespace

int translate_main(int argc, char** argv) {
  Args a("translate", "Translate sentences (arguments, or one per line on stdin) with a trained checkpoint.\n"
                      "Prints one line per input sentence. Words not seen in training become <unk> (noted on\n"
                      "stderr); sentences longer than twice the training length are truncated with a warning; an\n"
                      "empty sentence gives an empty output line, an error on stderr and exit status 1.");
  common_options(a);
  a.option("heatmaps", "dir", "also write each sentence's attention heatmap (PNG and SVG) into dir")
      .positional("sentence", "text to translate (else one per line on stdin)");
  if (!a.parse(argc, argv)) return 0;
  apply_threads(a);
  Loaded l = load_model(a);
  models::DecodeOptions options = decode_options(a);
  std::vector<std::string> sentences = input_sentences(a);
  SG_CHECK_VALUE(!sentences.empty(), "translate: no input sentences (pass them as arguments or on stdin)");
  if (a.has("heatmaps")) std::filesystem::create_directories(a.get("heatmaps"));
  int status = 0;
  for (size_t i = 0; i < sentences.size(); ++i) {
    if (text::tokenize(sentences[i]).empty()) {  // keep one output line per input line, and go on
      fmt::print(stderr, "seqgrad translate: error: sentence {} is empty\n", i + 1);
      fmt::print("\n");
      status = 1;
      continue;
    }
    Translation t = translate_one(l, sentences[i], options);
    if (t.truncated) fmt::print(stderr, "warning: sentence {} truncated to {} tokens\n", i + 1, t.src_tokens.size());
    for (const std::string& tok : t.src_tokens)
      if (!l.checkpoint.info.src_vocab.contains(tok)) fmt::print(stderr, "note: '{}' was not seen in training (<unk>)\n", tok);
    fmt::print("{}\n", text::detokenize(t.out_tokens));
    if (a.has("heatmaps"))
      write_attention_heatmap(fmt::format("{}/sentence{}", a.get("heatmaps"), i + 1), t.src_tokens, t.out_tokens, t.hyp,
                              sentences[i]);
  }
  return status;
}

int eval_main(int argc, char** argv) {
  Args a("eval", "BLEU (sacreBLEU 13a and tokenised lower-cased) and perplexity of a checkpoint on the test split of\n"
                 "its corpus, with five sample translations and their heatmaps written next to the checkpoint;\n"
                 "or, with --hyp and --ref, sacreBLEU's score line for two files (no checkpoint is read).");
  common_options(a);
  a.option("data-dir", "dir", "folder holding multi30k/ and fra-eng/ (default: the checkpoint's)")
      .option("hyp", "file", "hypotheses, one per line (scores files instead of a checkpoint)")
      .option("ref", "file", "references, one per line");
  if (!a.parse(argc, argv)) return 0;
  apply_threads(a);
  if (a.has("hyp") || a.has("ref")) {
    SG_CHECK_VALUE(a.has("hyp") && a.has("ref"), "eval: --hyp and --ref go together");
    std::vector<std::string> hyp = text::read_lines(a.get("hyp")), ref = text::read_lines(a.get("ref"));
    SG_CHECK_VALUE(hyp.size() == ref.size(), "eval: {} has {} lines but {} has {}", a.get("hyp"), hyp.size(),
                   a.get("ref"), ref.size());
    fmt::print("{}\n", text::corpus_bleu(hyp, ref).format());
    return 0;
  }
  models::DecodeOptions options = decode_options(a);
  Loaded l = load_model(a);
  models::TrainConfig c = l.checkpoint.info.config;
  if (a.has("data-dir")) c.data_dir = a.get("data-dir");
  models::Corpora data = models::load_corpora(c);
  std::string dir = std::filesystem::path(a.get("checkpoint")).parent_path().string();
  report_test(*l.model, l.checkpoint.info.src_vocab, l.checkpoint.info.tgt_vocab, data, c, dir.empty() ? "." : dir,
              options);
  return 0;
}

int attention_main(int argc, char** argv) {
  if (argc >= 2 && std::string(argv[1]) == "demo") return attention_demo_main(argc - 1, argv + 1);
  Args a("attention", "Attention heatmaps (PNG, SVG) of translations, their pre-softmax energies (additive and\n"
                      "hybrid kinds: <out>/sentenceN_energies.png) and an HTML report of all the sentences.\n"
                      "`seqgrad attention demo` prints energies, weights and contexts of every kind on a toy input.");
  common_options(a);
  a.option("out", "dir", "output folder", "attention").positional("sentence", "text to translate (else stdin)");
  if (!a.parse(argc, argv)) return 0;
  apply_threads(a);
  Loaded l = load_model(a);
  std::string out = a.get("out");
  std::filesystem::create_directories(out);
  std::vector<plot::ReportSection> sections;
  std::vector<std::string> sentences = input_sentences(a);
  SG_CHECK_VALUE(!sentences.empty(), "attention: no input sentences");
  for (size_t i = 0; i < sentences.size(); ++i) {
    Translation t = translate_one(l, sentences[i], decode_options(a));
    SG_CHECK_VALUE(!t.hyp.attention.empty(), "attention: sentence {} produced no attention weights", i + 1);
    std::string stem = fmt::format("{}/sentence{}", out, i + 1);
    write_attention_heatmap(stem, t.src_tokens, t.out_tokens, t.hyp, sentences[i]);
    std::string translation = text::detokenize(t.out_tokens);
    sections.push_back({.heading = sentences[i], .html_text = "→ " + translation,
                        .svg = plot::heatmap_svg(attention_heatmap(t.src_tokens, t.out_tokens, t.hyp.attention,
                                                                   sentences[i], false))});
    if (!t.hyp.energies.empty())
      sections.push_back({.heading = sentences[i] + " (energies)",
                          .html_text = "Pre-softmax scores vᵀ tanh(W_q s + W_k h): the softmax over each row gives "
                                       "the weights above.",
                          .svg = plot::heatmap_svg(attention_heatmap(t.src_tokens, t.out_tokens, t.hyp.energies,
                                                                     sentences[i], true))});
    fmt::print("{} -> {}\n  {}.png{}\n", sentences[i], translation, stem,
               t.hyp.energies.empty() ? "" : fmt::format(", {}_energies.png", stem));
  }
  plot::write_html_report(out + "/report.html", "seqgrad attention report", sections);
  fmt::print("report: {}/report.html\n", out);
  return 0;
}

}  // namespace seqgrad::tools
