// `seqgrad translate`, `seqgrad eval` and `seqgrad attention`: use a trained checkpoint.
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <string_view>
#include <tuple>

#include <fmt/core.h>

#include "core/fileio.h"
#include "core/threads.h"
#include "models/text/bleu.h"
#include "models/text/chrf.h"
#include "models/text/tokenizer.h"
#include "tools/args.h"
#include "tools/commands.h"
#include "tools/plot/plot.h"
#include "tools/train_flags.h"
#include "tools/translator.h"

namespace seqgrad::tools {
namespace {

constexpr size_t kMaxBatch = 64;  // sentences decoded together when more input is waiting
// translate reads up to this many waiting lines and decodes them in order of length, kMaxBatch at a time
constexpr size_t kSortWindow = 16 * kMaxBatch;

struct Loaded {
  models::LoadedCheckpoint checkpoint;  // the first checkpoint's: its vocabularies and config serve them all
  std::unique_ptr<models::TranslationModel> model;
  std::vector<std::unique_ptr<models::TranslationModel>> ensemble_rest;  // further --checkpoint files
  models::Ensemble ensemble() const {
    std::vector<models::TranslationModel*> members{model.get()};
    for (const auto& m : ensemble_rest) members.push_back(m.get());
    return models::Ensemble(members);
  }
};

// The --checkpoint files: one model, or an ensemble of models with the same vocabularies.
Loaded load_model(const Args& a) {
  const std::vector<std::string> paths = a.get_list("checkpoint");
  const ResidentMemory before = resident_memory();
  Loaded l;
  std::tie(l.checkpoint, l.model) = load_checkpoint_model(paths[0], a);
  for (size_t i = 1; i < paths.size(); ++i) {
    auto [checkpoint, model] = load_checkpoint_model(paths[i], a);
    for (const auto& [side, first, other] : {std::tuple{"source", &l.checkpoint.info.src_vocab, &checkpoint.info.src_vocab},
                                             {"target", &l.checkpoint.info.tgt_vocab, &checkpoint.info.tgt_vocab}}) {
      const std::string difference = text::vocab_difference(*first, *other);
      SG_CHECK_USAGE(difference.empty(), "--checkpoint: an ensemble needs the same vocabularies, but the {} "
                     "vocabularies of {} and {} differ: {}", side, paths[0], paths[i], difference);
    }
    l.ensemble_rest.push_back(std::move(model));
  }
  if (a.flag("memory-stats")) {
    const ResidentMemory after = resident_memory();
    fmt::print(stderr, "model memory: {:.1f} MB (peak RSS {:.1f} MB while loading - RSS {:.1f} MB before)\n",
               (after.peak - before.now) / 1e6, after.peak / 1e6, before.now / 1e6);
  }
  return l;
}

// Reads stdin line by line. next_batch() waits for one complete line, then also takes the lines
// already waiting (at most `max`): typed lines are translated at once, a pipe in batches.
class LineReader {
 public:
  std::vector<std::string> next_batch(size_t max) {
    std::vector<std::string> lines;
    for (;;) {
      for (size_t end; lines.size() < max && (end = buffer_.find('\n')) != std::string::npos;) {
        lines.push_back(buffer_.substr(0, end));
        buffer_.erase(0, end + 1);
      }
      if (lines.size() >= max) break;
      if (eof_) {
        if (!buffer_.empty()) lines.push_back(std::move(buffer_)), buffer_.clear();  // a last line without \n
        break;
      }
      if (!lines.empty() && !readable_now()) break;
      read_some();
    }
    return lines;
  }

 private:
  static bool readable_now() {
    pollfd p{.fd = STDIN_FILENO, .events = POLLIN, .revents = 0};
    return ::poll(&p, 1, 0) > 0;
  }
  void read_some() {
    char chunk[1 << 16];
    ssize_t n;
    do n = ::read(STDIN_FILENO, chunk, sizeof chunk);
    while (n < 0 && errno == EINTR);
    SG_CHECK_IO(n >= 0, "cannot read stdin: {}", std::strerror(errno));
    if (n == 0) eof_ = true;
    buffer_.append(chunk, static_cast<size_t>(n));
  }
  std::string buffer_;
  bool eof_ = false;
};

// translate_batch of `sentences`, returned in their order, but decoded kMaxBatch at a time in order
// of length (bytes, standing for tokens), as CTranslate2 sorts: a batch steps until its longest
// output ends, so sentences of like lengths waste fewer steps on finished rows and on padding.
// Batch invariance (ops/batch_invariant.h) keeps each sentence's tokens and scores to the bit.
// Sampling draws from one stream in input order, so it decodes the sentences in that order.
std::vector<Translation> translate_by_length(const models::Ensemble& models, const models::CheckpointInfo& info,
                                             const std::vector<std::string>& sentences,
                                             const models::DecodeOptions& options, int64_t truncate,
                                             Generator* sampling, bool explain) {
  std::vector<size_t> order(sentences.size());
  std::iota(order.begin(), order.end(), size_t{0});
  if (!options.sampling)
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return sentences[a].size() < sentences[b].size(); });
  std::vector<Translation> done(sentences.size());
  for (size_t first = 0; first < order.size(); first += kMaxBatch) {
    const size_t end = std::min(order.size(), first + kMaxBatch);
    std::vector<std::string> batch;
    for (size_t i = first; i < end; ++i) batch.push_back(sentences[order[i]]);
    std::vector<Translation> out = translate_batch(models, info, batch, options, truncate, sampling, explain);
    for (size_t i = first; i < end; ++i) done[order[i]] = std::move(out[i - first]);
  }
  return done;
}

void common_options(Args& a) {
  a.list_option("checkpoint", "file", "checkpoint to load; several (each ending in .safetensors) decode as an "
                "ensemble that averages their probabilities (the same vocabularies; heatmaps show the first's attention)",
                "runs/default/best.safetensors", [](std::string_view arg) { return arg.ends_with(".safetensors"); });
  add_decode_options(a);
  add_sampling_options(a);
  a.option("threads", "n", fmt::format("threads, at most {} (default: all cores)", max_threads()))
      .option("merge-pieces", "", "heatmaps (and translate's --alignment and --json attention): words, a subword "
              "model's pieces merged (source columns summed, output rows averaged; energies stay per piece)")
      .option("allow-missing-checksum", "", "load a checkpoint that has no checksum (written before seqgrad stored "
              "one), unverified")
      .option("memory-stats", "", "print on stderr the memory the model's weights hold: the peak resident size while "
              "loading minus the resident size before")
      .option("truncate", "n", kInferenceTruncateHelp);
}

// --truncate n, else twice the checkpoint's truncation (inference_truncation).
int64_t truncation(const Args& a, const models::TrainConfig& config) {
  return a.has("truncate") ? a.get_int("truncate", 1) : inference_truncation(config);
}

void apply_threads(const Args& a) {
  if (a.has("threads")) set_num_threads(a.get_threads());
}

HeatmapLabels heatmap_labels(const Args& a) { return a.flag("merge-pieces") ? HeatmapLabels::words : HeatmapLabels::tokens; }

std::string language_name(const std::string& code) {
  if (code == "de") return "German";
  if (code == "en") return "English";
  if (code == "fr") return "French";
  if (code == "cs") return "Czech";
  return code;
}

// A token with a letter or digit: ASCII, or a 2-byte UTF-8 Latin letter (lead byte 0xC3-0xDF: ä, é,
// č, ...); « » (0xC2) and general punctuation (3 bytes, 0xE2) are not words.
bool is_word(const std::string& token) {
  return std::any_of(token.begin(), token.end(), [](char ch) {
    auto c = static_cast<unsigned char>(ch);
    return std::isalnum(c) || (c >= 0xC3 && c <= 0xDF);
  });
}

// Notes the words the model never saw; warns (once) when most of a sentence is unknown, which
// usually means the input is not in the model's source language.
class UnknownWords {
 public:
  explicit UnknownWords(const models::CheckpointInfo& info) : info_(info) {}
  void check(const std::string& where, const std::vector<std::string>& tokens) {
    size_t unknown = 0, words = 0;
    for (const std::string& tok : tokens) {
      if (!is_word(tok)) continue;
      ++words;
      if (info_.src_vocab.contains(tok)) continue;
      ++unknown;
      fmt::print(stderr, "note: '{}' was not seen in training (<unk>)\n", tok);
    }
    if (warned_ || words < 2 || 2 * unknown <= words) return;
    warned_ = true;
    const models::TrainConfig& c = info_.config;
    fmt::print(stderr, "warning: {}: {} of its {} words are unknown to this model, which translates {} ({}) to {} "
               "({}): is the input {}?\n", where, unknown, words, language_name(c.src_lang), c.src_lang,
               language_name(c.tgt_lang), c.tgt_lang, language_name(c.src_lang));
  }

 private:
  const models::CheckpointInfo& info_;
  bool warned_ = false;
};

// What the energies heatmap of each attention kind shows, with its formula (d = 2H, the key size).
std::string energies_explanation(const models::Seq2SeqConfig& m) {
  switch (m.attention) {
    case models::AttentionKind::additive:
      return "Pre-softmax scores e_j = vᵀ tanh(W_q s + W_k h_j) of additive attention: the softmax over each row "
             "gives the weights above.";
    case models::AttentionKind::scaled_dot:
      return fmt::format("Pre-softmax scores e_j = (W_q s) · h_j / √{} of scaled dot-product attention (d = 2H = {}): "
                         "the softmax over each row gives the weights above.", 2 * m.hidden_size, 2 * m.hidden_size);
    case models::AttentionKind::hybrid:
      return fmt::format("The additive half's pre-softmax scores vᵀ tanh(W_q s + W_k h_j). Hybrid attention's weights "
                         "above are the mean ½ (softmax(additive scores) + softmax((W_q s) · h_j / √{})), and its "
                         "context the mean of the two contexts.", 2 * m.hidden_size);
  }
  return "";
}

// Prints one input's result: its translation (an empty line when it failed), or with --nbest its
// hypotheses as "<input number>\t<score>\t<translation>" lines; with --alignment each translation
// is followed by " ||| " and its alignment (docs/outputs.md).
void print_translation(const Translation& t, const text::Vocab& tgt_vocab, size_t number, int64_t nbest,
                       AlignmentOutput alignment, HeatmapLabels labels) {
  auto text = [&](size_t n) {
    std::string line = tgt_vocab.detokenize(t.out_tokens[n]);
    return alignment == AlignmentOutput::none ? line : line + " ||| " + alignment_text(t, n, alignment, labels);
  };
  if (nbest <= 1) {
    fmt::print("{}\n", t.error.empty() ? text(0) : "");
    return;
  }
  for (size_t n = 0; n < t.hyps.size(); ++n) fmt::print("{}\t{:.4f}\t{}\n", number, t.hyps[n].score, text(n));
}

}  // namespace

void check_safetensors_file(const std::string& path) {
  check_regular_file(path);  // a FIFO would block the fopen below
  std::FILE* f = std::fopen(path.c_str(), "rb");
  SG_CHECK_IO(f, "cannot open {}: {}", path, std::strerror(errno));
  unsigned char head[9] = {};
  size_t got = std::fread(head, 1, sizeof head, f);
  std::fclose(f);
  uint64_t header_length = 0;
  for (int i = 7; i >= 0; --i) header_length = header_length << 8 | head[i];  // little-endian u64
  uint64_t size = std::filesystem::file_size(path);
  SG_CHECK_IO(got == sizeof head && header_length <= size - 8 && head[8] == '{',
              "{} is not a safetensors checkpoint (it does not start with an 8-byte header length followed by a "
              "JSON header{})", path, got < sizeof head ? fmt::format("; it has only {} bytes", size) : "");
}

std::string create_output_folder(const std::string& path, const std::string& flag) {
  std::error_code error;
  std::filesystem::create_directories(path, error);
  SG_CHECK_IO(!error, "{}: cannot create the folder '{}': {}", flag, path, error.message());
  SG_CHECK_IO(::access(path.c_str(), W_OK) == 0, "{}: the folder '{}' is not writable: {}", flag, path,
              std::strerror(errno));
  return path;
}

int translate_main(int argc, char** argv) {
  Args a("translate", "Translate sentences (arguments, or one per line on stdin) with a trained checkpoint.\n"
                      "Prints one line per input sentence as soon as it is translated (lines waiting on stdin are\n"
                      "decoded together). With a word-level vocabulary, words not seen in training become <unk>\n"
                      "(noted on stderr, with a warning when most words are unknown: the wrong language?); a subword\n"
                      "vocabulary (SentencePiece) gives cased, detokenised text. Sentences longer than --truncate (twice\n"
                      "the training length) are cut with a warning. A line that cannot be translated (empty, not UTF-8)\n"
                      "gives an error naming it on stderr and an empty output line; the others go on, and the exit\n"
                      "status is 1. With --nbest N each sentence gives N lines: number<TAB>score<TAB>translation.\n"
                      "With --alignment each translation is followed by \" ||| \" and its alignment to the source.\n"
                      "With --json each input gives one JSON line. docs/outputs.md describes both.");
  common_options(a);
  add_nbest_option(a);
  a.option("out", "dir", "also write each sentence's attention heatmap (PNG and SVG) into dir")
      .deprecated_alias("heatmaps", "out")
      .option("json", "", "one JSON line per input: translation, score, log-probabilities, tokens, n-best, attention "
              "diagnostics (docs/outputs.md)")
      .option("alignment", "kind", "hard: append \" ||| \" and src-tgt index pairs (Pharaoh, 0-based), each output "
              "token to the source token it attends to most; soft: the attention rows (Marian's formats); with --json, "
              "attention.alignment or attention.weights")
      .option("per-head", "", "with --json and a Transformer checkpoint: attention.heads, the attention of every layer "
              "and head with each head's diagnostics (docs/outputs.md)")
      .positional("sentence", "text to translate (else one per line on stdin)");
  if (!a.parse(argc, argv)) return 0;
  apply_threads(a);
  check_decode_flags(a);
  const AlignmentOutput alignment = a.has("alignment") ? parse_alignment_output(a.get("alignment")) : AlignmentOutput::none;
  const TranslationJsonOptions json_options{.labels = heatmap_labels(a),
                                            .hard_alignment = alignment == AlignmentOutput::hard,
                                            .weights = alignment == AlignmentOutput::soft,
                                            .heads = a.flag("per-head")};
  SG_CHECK_USAGE(!a.flag("per-head") || a.flag("json"), "--per-head adds to the JSON lines: give --json too");
  Loaded l = load_model(a);
  SG_CHECK_USAGE(!a.flag("per-head") || l.model->architecture() == "transformer", "--per-head shows a Transformer's "
                 "attention heads, but {} is a {} checkpoint", a.get_list("checkpoint").front(),
                 l.model->architecture());
  models::DecodeOptions options = decode_options(a, l.checkpoint.info.config);
  const int64_t truncate = truncation(a, l.checkpoint.info.config);
  if (a.has("out")) create_output_folder(a.get("out"), "--out");  // once the inputs have loaded
  UnknownWords unknown(l.checkpoint.info);
  Generator sampling(options.sampling ? options.sampling->seed : 0);  // one stream for every batch
  const bool from_stdin = a.positionals().empty();
  const char* unit = from_stdin ? "line" : "sentence";
  LineReader reader;
  int status = 0;
  size_t number = 0;
  for (;;) {
    std::vector<std::string> sentences = from_stdin ? reader.next_batch(kSortWindow) : a.positionals();
    if (sentences.empty()) break;
    std::vector<Translation> done = translate_by_length(l.ensemble(), l.checkpoint.info, sentences, options, truncate,
                                                        &sampling, a.flag("per-head"));
    for (size_t i = 0; i < done.size(); ++i) {
      const Translation& t = done[i];
      std::string where = fmt::format("{} {}", unit, ++number);
      if (!t.error.empty()) {  // keep one output line per input line, and go on
        fmt::print(stderr, "seqgrad translate: error: {}: {}\n", where, t.error);
        status = 1;
      } else {
        if (t.truncated) fmt::print(stderr, "warning: {} truncated to {} tokens\n", where, t.src_tokens.size());
        unknown.check(where, t.src_tokens);
        if (a.has("out"))
          write_attention_heatmap((std::filesystem::path(a.get("out")) / fmt::format("sentence{}", number)).string(),
                                  marked_unknown(t.src_tokens, l.checkpoint.info.src_vocab), t.out_tokens[0], t.hyps[0],
                                  sentences[i], heatmap_labels(a));
      }
      if (a.flag("json")) {
        nlohmann::json j = translation_json(t, sentences[i], l.checkpoint.info.tgt_vocab, json_options);
        j["line"] = number;
        // a line that is not UTF-8 is reported in its record ("error"), its bytes shown as U+FFFD,
        // and the lines after it are translated, as without --json
        fmt::print("{}\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
      } else {
        print_translation(t, l.checkpoint.info.tgt_vocab, number, options.nbest, alignment, heatmap_labels(a));
      }
    }
    std::fflush(stdout);
    if (!from_stdin) break;
  }
  SG_CHECK_VALUE(number > 0, "translate: no input sentences (pass them as arguments or on stdin)");
  return status;
}

// eval --score: each test pair's target scored by forced decoding. Sources are cut as evaluation
// cuts them; targets are scored whole. Text: "number<TAB>log-probability<TAB>score<TAB>target" lines
// and a total; --json: one JSON line per pair.
void print_test_scores(const Loaded& l, const models::Corpora& data, const models::TrainConfig& config,
                       const models::DecodeOptions& options, bool json) {
  const text::Vocab &src_vocab = l.checkpoint.info.src_vocab, &tgt_vocab = l.checkpoint.info.tgt_vocab;
  text::EncodedCorpus test = text::encode_pairs(data.test, src_vocab, tgt_vocab, {.max_src_tokens = config.max_tokens});
  std::vector<models::Hypothesis> scored = models::score_corpus(l.ensemble(), test, options);
  double total = 0;
  size_t tokens = 0;
  for (size_t i = 0; i < scored.size(); ++i) {
    const models::Hypothesis& h = scored[i];
    total += h.log_prob;
    tokens += h.token_log_probs.size();
    if (json)
      fmt::print("{}\n", nlohmann::json{{"line", i + 1}, {"src", data.test_sources[i]}, {"tgt", data.test_references[i]},
                                        {"tokens", tgt_vocab.decode(h.tokens)}, {"log_prob", h.log_prob},
                                        {"score", h.score}, {"token_log_probs", h.token_log_probs}}.dump());
    else
      fmt::print("{}\t{:.4f}\t{:.4f}\t{}\n", i + 1, h.log_prob, h.score, data.test_references[i]);
  }
  if (!json && tokens > 0)
    fmt::print("scored {} pairs: log-probability {:.2f} over {} tokens (<eos> included), ppl {:.2f}\n", scored.size(),
               total, tokens, std::exp(-total / static_cast<double>(tokens)));
}

// --test SRC TGT or --test-tsv FILE: the test corpus eval scores instead of the checkpoint's own.
bool apply_test_flags(models::TrainConfig& c, const Args& a) {
  std::optional<text::CorpusFiles> test = split_flag(a, "test", "test-tsv");
  if (!test) return false;
  c.corpus = "files";
  c.test_files = *test;
  return true;
}

int eval_main(int argc, char** argv) {
  Args a("eval", "sacreBLEU (13a, cased, detokenised), chrF and the tokenised lower-cased BLEU, and perplexity, of a\n"
                 "checkpoint on a test corpus: --test SRC_FILE TGT_FILE (or --test-tsv FILE), else the test split\n"
                 "it was trained with; five sample translations are printed (with --out DIR, their heatmaps\n"
                 "too). With --hyp and --ref: sacreBLEU's BLEU and chrF score lines for two files (no\n"
                 "checkpoint is read).");
  common_options(a);
  a.option("data-dir", "dir", "folder holding multi30k/ and fra-eng/ (default: the one the checkpoint was trained on)")
      .pair_option("test", "src_file", "tgt_file", "test corpus: two files aligned by line")
      .option("test-tsv", "file", "test corpus: one file of source<TAB>target lines")
      .option("out", "dir", "write the sample translations' attention heatmaps into dir")
      .option("json", "", "the scores, signatures, decoding and every output as one JSON object")
      .quiet_option()  // the lines about the checkpoint and the data
      .option("hyp", "file", "hypotheses, one per line (scores files instead of a checkpoint)")
      .option("ref", "file", "references, one per line")
      .option("score", "", "forced decoding: each test pair's target (a reference, or any translation given with "
              "--test) scored under the model, one line each: number, log-probability, score, target");
  if (!a.parse(argc, argv)) return 0;
  apply_threads(a);
  if (a.has("hyp") || a.has("ref")) {
    SG_CHECK_USAGE(a.has("hyp") && a.has("ref"), "eval: --hyp and --ref go together");
    std::vector<std::string> hyp = text::read_lines(a.get("hyp")), ref = text::read_lines(a.get("ref"));
    SG_CHECK_VALUE(hyp.size() == ref.size(), "eval: {} has {} lines but {} has {}", a.get("hyp"), hyp.size(),
                   a.get("ref"), ref.size());
    text::BleuScore bleu = text::corpus_bleu(hyp, ref);
    text::ChrfScore chrf = text::corpus_chrf(hyp, ref);
    if (a.flag("json"))
      fmt::print("{}\n", nlohmann::json{{"sacrebleu", bleu.score}, {"chrf", chrf.score},
                                        {"signatures", {{"sacrebleu", text::bleu_signature()},
                                                        {"chrf", text::chrf_signature()}}}}.dump());
    else
      fmt::print("{}\n{}\n", bleu.format(), chrf.format());
    return 0;
  }
  check_decode_flags(a);
  SG_CHECK_USAGE(!a.flag("score") || !a.has("sample"), "--score scores the given targets: --sample does not apply");
  Loaded l = load_model(a);
  models::TrainConfig c = l.checkpoint.info.config;
  models::DecodeOptions options = decode_options(a, c);
  c.max_tokens = truncation(a, c);  // the test sentences' sources (and the loss's references)
  const bool chatty = !a.flag("quiet") && !a.flag("json");
  if (chatty)
    fmt::print("checkpoint {}: trained on {} ({} -> {})\n", a.get("checkpoint"), models::describe_corpus(c), c.src_lang,
               c.tgt_lang);
  const bool own_test = apply_test_flags(c, a);
  if (a.has("data-dir")) c.data_dir = a.get("data-dir");
  SG_CHECK_IO(c.corpus == "files" || a.has("data-dir") || std::filesystem::is_directory(c.data_dir),
              "the data folder '{}' that {} was trained on does not exist here (a relative path is read from the "
              "current folder); give the folder holding multi30k/ and fra-eng/ with --data-dir, or a test corpus "
              "with --test SRC_FILE TGT_FILE", c.data_dir, a.get("checkpoint"));
  models::Corpora data = models::load_corpora(c, models::Splits::test_only);
  const std::string source = own_test || c.corpus == "files" ? c.test_files.describe() : c.corpus;
  if (chatty) fmt::print("test: {} pairs from {}\n", data.test.size(), source);
  const text::Vocab &src_vocab = l.checkpoint.info.src_vocab, &tgt_vocab = l.checkpoint.info.tgt_vocab;
  models::tokenize_held_splits(data, src_vocab, tgt_vocab);
  if (a.flag("score")) {
    print_test_scores(l, data, c, options, a.flag("json"));
    return 0;
  }
  Evaluation test = evaluate_test(l.ensemble(), src_vocab, tgt_vocab, data, c, options);
  if (a.has("out")) create_output_folder(a.get("out"), "--out");  // once the inputs have loaded
  if (a.flag("json")) {
    nlohmann::json j = test_report_json(test, options);
    j["checkpoint"] = a.get("checkpoint");
    if (!l.ensemble_rest.empty()) j["ensemble"] = a.get_list("checkpoint");
    j["test"] = {{"pairs", data.test.size()}, {"source", source}};
    fmt::print("{}\n", j.dump());
  }
  if (!a.flag("json")) report_test(test, data, options);
  if (a.has("out")) {
    std::string maps = write_test_heatmaps(test, src_vocab, tgt_vocab, data, a.get("out"), heatmap_labels(a));
    if (!a.flag("json")) fmt::print("heatmaps: {}\n", maps);
  }
  return 0;
}

int attention_main(int argc, char** argv) {
  // `demo` anywhere before "--" is the subcommand (`attention --threads 1 demo`); `attention -- demo`
  // translates the word
  for (int i = 1; i < argc && std::string_view(argv[i]) != "--"; ++i) {
    if (std::string_view(argv[i]) != "demo") continue;
    std::vector<char*> rest(argv, argv + argc);
    rest.erase(rest.begin() + i);
    return attention_demo_main(static_cast<int>(rest.size()), rest.data());
  }
  Args a("attention", "Attention heatmaps (PNG, SVG) of translations, their pre-softmax energies\n"
                      "(<out>/sentenceN_energies.png: additive or scaled-dot scores; for hybrid, the additive half's)\n"
                      "and an HTML report of all the sentences with each kind's formula.\n"
                      "`seqgrad attention demo` prints energies, weights and contexts of every kind on a toy input.");
  common_options(a);
  a.option("out", "dir", "output folder", "attention").positional("sentence", "text to translate (else stdin)");
  if (!a.parse(argc, argv)) return 0;
  apply_threads(a);
  check_decode_flags(a);
  Loaded l = load_model(a);
  models::DecodeOptions options = decode_options(a, l.checkpoint.info.config);
  std::string out = create_output_folder(a.get("out"), "--out");  // once the inputs have loaded
  std::vector<std::string> sentences = a.positionals();
  for (LineReader reader; sentences.empty();) {
    std::vector<std::string> lines = reader.next_batch(kMaxBatch);
    if (lines.empty()) break;
    sentences.insert(sentences.end(), lines.begin(), lines.end());
  }
  SG_CHECK_VALUE(!sentences.empty(), "attention: no input sentences");
  Generator sampling(options.sampling ? options.sampling->seed : 0);
  std::vector<Translation> done = translate_batch(l.ensemble(), l.checkpoint.info, sentences, options,
                                                  truncation(a, l.checkpoint.info.config), &sampling);
  std::vector<plot::ReportSection> sections;
  for (size_t i = 0; i < sentences.size(); ++i) {
    const Translation& t = done[i];
    SG_CHECK_VALUE(t.error.empty(), "attention: sentence {}: {}", i + 1, t.error);
    SG_CHECK_VALUE(!t.hyps[0].attention.empty(), "attention: sentence {} produced no attention weights", i + 1);
    std::string stem = (std::filesystem::path(out) / fmt::format("sentence{}", i + 1)).string();
    std::vector<std::string> labels = marked_unknown(t.src_tokens, l.checkpoint.info.src_vocab);
    write_attention_heatmap(stem, labels, t.out_tokens[0], t.hyps[0], sentences[i], heatmap_labels(a));
    std::string translation = l.checkpoint.info.tgt_vocab.detokenize(t.out_tokens[0]);
    plot::Heatmap weights = attention_heatmap(labels, t.out_tokens[0], t.hyps[0].attention, sentences[i], false);
    if (heatmap_labels(a) == HeatmapLabels::words) weights = merged_into_words(weights);
    sections.push_back({.heading = sentences[i], .html_text = "→ " + translation, .svg = plot::heatmap_svg(weights)});
    if (!t.hyps[0].energies.empty())
      sections.push_back({.heading = sentences[i] + " (energies)",
                          .html_text = energies_explanation(l.checkpoint.info.config.model),
                          .svg = plot::heatmap_svg(attention_heatmap(labels, t.out_tokens[0],
                                                                     t.hyps[0].energies, sentences[i], true))});
    fmt::print("{} -> {}\n  {}.png{}\n", sentences[i], translation, stem,
               t.hyps[0].energies.empty() ? "" : fmt::format(", {}_energies.png", stem));
  }
  std::string report = (std::filesystem::path(out) / "report.html").string();
  plot::write_html_report(report, "seqgrad attention report", sections);
  fmt::print("report: {}\n", report);
  return 0;
}

}  // namespace seqgrad::tools
