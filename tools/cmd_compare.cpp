// `seqgrad compare`: the seeds' additive-vs-dot experiment done properly, and the road's two ends
// side by side. Every model (the GRU with each attention kind; the Transformer) is trained on the
// same data (the first N training pairs, for each requested N) with the same seed; the GRUs with the
// same batches and hyper-parameters, the Transformer with its preset's recipe. Per epoch we record
// the training loss, the validation loss and BLEU and how sharp the attention is (mean entropy of
// the teacher-forced attention weights on the validation set); per run the training time and
// tokens/s, the test BLEU greedy and with beam 5 and the decoding speed; apart, the time per step.
// Writes an HTML report with plots and a JSON file.
#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cmath>
#include <filesystem>
#include <memory>
#include <span>
#include <sstream>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "core/fileio.h"
#include "core/threads.h"
#include "models/seq2seq/trainer.h"
#include "tools/args.h"
#include "tools/commands.h"
#include "tools/plot/plot.h"
#include "tools/translator.h"
#include "tools/train_flags.h"

namespace seqgrad::tools {
namespace {

using models::TrainConfig;
using Clock = std::chrono::steady_clock;

Args compare_args() {
  Args a("compare", "Compare attention kinds (additive, scaled dot, hybrid) and architectures (the GRU, the\n"
                    "Transformer) on the same data and seed: loss and validation sacreBLEU, chrF and tokenised\n"
                    "BLEU per epoch, training time and tokens/s, test BLEU greedy and beam 5, decoding speed,\n"
                    "time per step, small training subsets and attention sharpness. Trains on a bundled corpus\n"
                    "or your own files (--train SRC TGT --valid SRC TGT [--test SRC TGT], or the -tsv forms); the\n"
                    "largest subset is held in memory, on word vocabularies. Writes <out>/report.html (plots and\n"
                    "a table) and <out>/compare.json.");
  // compare sets these itself: the architectures and kinds (--architecture and --attention take a
  // list here), the subsets, the epochs (its own default, no early stopping), word vocabularies held
  // in memory, no checkpoints
  add_config_flags(a, {"model.architecture", "model.attention", "train_subset", "epochs", "vocab", "joint_vocab",
                       "shuffle_buffer", "patience", "early_stopping_metric", "valid_every", "keep_checkpoints",
                       "init_from"});
  add_data_options(a);
  a.deprecated_alias("valid-files", "valid");
  a.option("architecture", "list", "comma-separated architectures: gru (one model per --attention kind), "
           "transformer (the transformer preset's model and recipe, embeddings untied)", "gru")
      .option("attention", "list", "comma-separated attention kinds of the GRU (with --architecture naming the "
              "transformer too: additive unless given)", "additive,scaled_dot,hybrid")
      .deprecated_alias("kinds", "attention")
      .option("subsets", "list", "comma-separated training-set sizes (first N pairs; 'all' = every pair)",
              "1000,5000")
      .option("epochs", "n", "training epochs per run", "2")
      .option("valid-pairs", "n", "first n validation pairs, used for loss, BLEU and entropy (0 = all)", "500")
      .option("test-pairs", "n", "first n test pairs, translated after training greedily and with beam 5 for BLEU "
              "and decoding speed (0 = all)", "500")
      .option("json", "", "print compare.json's content on stdout instead of the tables")
      .option("out", "dir", "folder for report.html and compare.json", "runs/compare")
      .option("timing-steps", "n", "steps per kind in the interleaved time-per-step measurement (0 = skip)", "12")
      .option("threads", "n", "threads (default: all cores)")
      .quiet_option();  // per-epoch progress, the header line
  return a;
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

// The preset (or --config) with compare's own defaults and the flags applied, validated as
// `seqgrad train`'s. compare's vocabulary is words, at most 20 tokens (as the word-level presets): a
// subset of 1000 pairs supports no 4000-piece subword model.
TrainConfig base_config(const Args& a) {
  return config_from_flags(a, [&](TrainConfig& c) {
    c.epochs = a.get_int("epochs");
    c.vocab = "word", c.joint_vocab = false, c.max_tokens = 20, c.train_subset = 0;
    c.patience = 0;  // every model trains the same epochs
  });
}

// The Transformer's config: the data, vocabularies, epochs and seed of the GRUs' (`base`), the
// transformer preset's model and training recipe (Adam's learning rate with the inverse_sqrt warmup,
// token batches, label smoothing, clipping), then the given flags. Its embeddings are untied:
// compare's word vocabularies are one per language.
TrainConfig transformer_config(const Args& a, const TrainConfig& base) {
  const TrainConfig recipe = models::preset("transformer");
  TrainConfig c = base;
  c.model = recipe.model;
  c.model.tie_embeddings = false;
  c.batch_size = recipe.batch_size, c.batch_tokens = recipe.batch_tokens, c.lr = recipe.lr;
  c.lr_schedule = recipe.lr_schedule, c.warmup_updates = recipe.warmup_updates;
  c.step_size = recipe.step_size, c.gamma = recipe.gamma;
  c.label_smoothing = recipe.label_smoothing, c.clip = recipe.clip;
  c = apply_config_flags(c, a);
  SG_CHECK_USAGE(!c.model.tie_embeddings, "--tie-embeddings: compare's word vocabularies are one per language, so "
                 "the Transformer's embeddings cannot be tied");
  // its model's fields against each other now, not after the GRUs have trained: the vocabularies'
  // sizes are known only then, and any size above the special tokens stands in for them here
  models::Seq2SeqConfig model = c.model;
  model.src_vocab = model.tgt_vocab = text::Vocab::kNumSpecial + 1;
  try {
    model.validate();
  } catch (const ValueError& e) {
    throw UsageError(fmt::format("the Transformer (--architecture transformer): {}", e.what()));
  }
  return c;
}

// One model compare trains: the GRU with an attention kind (named by the kind), or the Transformer.
struct Variant {
  std::string name;  // "additive", "scaled_dot", "hybrid" or "transformer"
  TrainConfig config;
};

// The models --architecture and --attention name, in that order.
std::vector<Variant> variants_from_flags(const Args& a, const TrainConfig& base) {
  std::vector<models::Architecture> architectures;
  for (const std::string& name : split_list(a.get("architecture")))
    architectures.push_back(checking_flags([&] { return models::parse_architecture(name); }));
  SG_CHECK_USAGE(!architectures.empty(), "--architecture is empty (choose from gru, transformer)");
  const bool with_transformer =
      std::find(architectures.begin(), architectures.end(), models::Architecture::transformer) != architectures.end();
  // the road's two ends by default: the GRU with additive attention beside the Transformer
  const std::string kinds = with_transformer && !a.has("attention") ? "additive" : a.get("attention");
  std::vector<Variant> variants;
  for (models::Architecture architecture : architectures) {
    if (architecture == models::Architecture::transformer) {
      variants.push_back({"transformer", transformer_config(a, base)});
      continue;
    }
    for (const std::string& k : split_list(kinds)) {
      Variant v{k, base};
      v.config.model.architecture = models::Architecture::gru;
      v.config.model.attention = checking_flags([&] { return models::parse_attention_kind(k); });
      variants.push_back(v);
    }
  }
  SG_CHECK_USAGE(!variants.empty(), "--attention is empty (choose from additive, scaled_dot, hybrid)");
  return variants;
}

// One colour per model in every chart of the report (the plot palette's index): the attention
// kinds', then the Transformer's.
int variant_color(const std::string& name) {
  if (name == "transformer") return 3;
  return static_cast<int>(models::parse_attention_kind(name));
}

// How sharp the attention is: the entropy H = -sum_s w_s log w_s of each target step's weights
// over the valid source positions (teacher forced, validation set, model in eval mode), averaged
// over all target tokens. `normalized` divides each row's entropy by log(source length) (0: all
// weight on one position, 1: uniform); `uniform` is the mean log(source length), the entropy a
// uniform attention would have.
struct Sharpness {
  double entropy = 0, normalized = 0, uniform = 0;
};

Sharpness attention_sharpness(models::TranslationModel& model, const text::EncodedCorpus& corpus) {
  bool was_training = model.is_training();
  model.eval();
  NoGradGuard no_grad;
  double entropy = 0, normalized = 0, uniform = 0;
  int64_t rows = 0, normalized_rows = 0;
  for (const text::Batch& batch : text::make_batches(corpus.pairs, {.batch_size = 128, .shuffle = false})) {
    models::TensorBatch b = models::to_tensors(batch);
    auto state = model.start(b.src, b.src_lengths);  // the source encoded once, then stepped along the reference
    for (int64_t t = 0; t < batch.tgt_len_max; ++t) {
      models::TranslationModel::StepOutput step = model.step(*state, b.tgt_in.select(1, t));
      std::vector<double> w = step.weights.to_vector<double>();  // (B, S) row-major
      for (int64_t r = 0; r < batch.batch; ++r) {
        if (t >= batch.tgt_lengths[r]) continue;  // padding: no target token here
        int64_t len = batch.src_lengths[r];
        double h = 0;
        for (int64_t s = 0; s < len; ++s) {
          double p = w[r * batch.src_len_max + s];
          if (p > 0) h -= p * std::log(p);
        }
        entropy += h, ++rows;
        uniform += std::log(double(len));
        if (len > 1) normalized += h / std::log(double(len)), ++normalized_rows;
      }
    }
  }
  model.train(was_training);
  return {rows ? entropy / rows : 0, normalized_rows ? normalized / normalized_rows : 0, rows ? uniform / rows : 0};
}

// One batch row's maps from the stacked (B, M, T, S) weights: row r's first `rows` steps over its
// first `cols` source positions, labelled with its tokens (its reference's, <eos> last, as rows).
std::vector<models::AttentionMatrix> row_maps(const std::vector<float>& w, const text::Batch& batch, int64_t r,
                                              int64_t maps, const text::Vocab& src_vocab, const text::Vocab& tgt_vocab) {
  const int64_t T = batch.tgt_len_max, S = batch.src_len_max, rows = batch.tgt_lengths[r], cols = batch.src_lengths[r];
  models::AttentionMatrix axes;
  for (int64_t s = 0; s < cols; ++s) axes.src.push_back(src_vocab.token(batch.src[r * S + s]));
  for (int64_t t = 0; t < rows; ++t) axes.tgt.push_back(tgt_vocab.token(batch.tgt_out[r * T + t]));
  std::vector<models::AttentionMatrix> out(static_cast<size_t>(maps), axes);
  for (int64_t m = 0; m < maps; ++m)
    for (int64_t t = 0; t < rows; ++t) {
      auto row = w.begin() + ((r * maps + m) * T + t) * S;
      out[m].weights.insert(out[m].weights.end(), row, row + cols);
    }
  return out;
}

// The attention of every pair, teacher-forced along its reference (eval mode): the GRU's weights,
// or each of the Transformer's layers' cross-attention heads, as (B, M, 1, S) per step.
std::vector<std::vector<models::AttentionMatrix>> teacher_forced_maps(models::TranslationModel& model,
                                                                      const text::EncodedCorpus& corpus,
                                                                      const text::Vocab& src_vocab,
                                                                      const text::Vocab& tgt_vocab) {
  bool was_training = model.is_training();
  model.eval();
  NoGradGuard no_grad;
  auto* transformer = dynamic_cast<models::TransformerTranslator*>(&model);
  std::vector<std::vector<models::AttentionMatrix>> out(corpus.pairs.size());
  for (const text::Batch& batch : text::make_batches(corpus.pairs, {.batch_size = 128, .shuffle = false})) {
    models::TensorBatch b = models::to_tensors(batch);
    auto state = model.start(b.src, b.src_lengths);
    std::vector<Tensor> steps;
    for (int64_t t = 0; t < batch.tgt_len_max; ++t) {
      models::TranslationModel::StepOutput step = model.step(*state, b.tgt_in.select(1, t));
      if (transformer == nullptr) {
        steps.push_back(step.weights.unsqueeze(1).unsqueeze(2));
        continue;
      }
      std::vector<Tensor> layers;
      for (int64_t l = 0; l < transformer->config().num_layers; ++l)
        layers.push_back(transformer->decoder.layer(l).multihead_attn.last_head_weights());  // (B, h, 1, S)
      steps.push_back(cat(layers, 1));
    }
    const Tensor all = cat(steps, 2).contiguous();  // (B, M, T, S)
    const std::vector<float> w = all.to_vector<float>();
    for (int64_t r = 0; r < batch.batch; ++r)
      out[static_cast<size_t>(batch.index[r])] = row_maps(w, batch, r, all.size(1), src_vocab, tgt_vocab);
  }
  model.train(was_training);
  return out;
}

// One validated epoch: fit()'s metrics and the attention's sharpness.
struct EpochResult {
  models::EpochMetrics metrics;
  Sharpness sharpness;
};

// The test split after training: BLEU greedy and with beam kTestBeam, and how fast each decodes.
struct TestResult {
  struct Search {
    double sacrebleu = 0, chrf = 0, bleu_tokenized = 0;
    double sentences_per_s = 0;  // decoding alone, in batches of kDecodeBatch
  };
  int64_t pairs = 0;
  Search greedy, beam;
};

constexpr int64_t kTestBeam = 5;
constexpr int64_t kDecodeBatch = 64;  // sentences decoded at once in the speed measurement

struct Run {
  std::string kind;          // the variant's name: the GRU's attention kind, or "transformer"
  std::string architecture;  // "gru" or "transformer"
  int64_t train_pairs = 0;
  int64_t parameters = 0, src_vocab = 0, tgt_vocab = 0;
  int64_t steps = 0;
  double ms_per_step = 0;   // mean step time during training, first step excluded (see Timing)
  double train_seconds = 0;  // every training step (validation excluded)
  int64_t train_tokens = 0;  // target tokens of those steps
  std::optional<TestResult> test;  // none when the corpus has no test split
  std::string stopped;      // why the run stopped early (non-finite loss), else empty
  std::vector<EpochResult> epochs;
  std::vector<std::string> sample_heatmaps;  // SVG attention of the first validation sentences, last epoch
  // Per validation pair, the attention teacher-forced along its reference after the last epoch: the
  // GRU's one map, the Transformer's cross-attention per layer and head (layer-major), for the
  // per-head report (head_reports)
  std::vector<std::vector<models::AttentionMatrix>> valid_maps;
  int64_t layers = 0, heads = 0;  // the Transformer's
  const EpochResult& last() const { return epochs.back(); }
};

// One Transformer head against one GRU on the validation pairs: its mean entropy per target token
// (nats) and its agreement with the GRU (models::attention_overlap, its rows weighted alike: the mean
// over every target token of Σ_s min(a_s, g_s)).
struct HeadReport {
  int64_t train_pairs = 0, layer = 0, head = 0;
  std::string gru;  // the GRU's attention kind
  double entropy = 0, agreement = 0;
};

HeadReport head_report(const Run& transformer, const Run& gru, int64_t map) {
  HeadReport h{transformer.train_pairs, map / transformer.heads, map % transformer.heads, gru.kind};
  double rows = 0;
  for (size_t i = 0; i < gru.valid_maps.size(); ++i) {
    const models::AttentionMatrix& a = transformer.valid_maps[i][static_cast<size_t>(map)];
    const auto n = static_cast<double>(a.tgt.size());
    for (double e : models::attention_diagnostics(a).entropy) h.entropy += e;
    h.agreement += n * models::attention_overlap(a, gru.valid_maps[i].front()).value_or(0);
    rows += n;
  }
  if (rows > 0) h.entropy /= rows, h.agreement /= rows;
  return h;
}

// Every Transformer head against every GRU trained on the same pairs (both teacher-forced on the
// same validation references, so their rows are the same target tokens).
std::vector<HeadReport> head_reports(const std::vector<Run>& runs) {
  std::vector<HeadReport> out;
  for (const Run& t : runs) {
    if (t.architecture != "transformer" || t.valid_maps.empty()) continue;
    for (const Run& g : runs) {
      if (g.architecture != "gru" || g.train_pairs != t.train_pairs || g.valid_maps.size() != t.valid_maps.size())
        continue;
      for (int64_t m = 0; m < t.layers * t.heads; ++m) out.push_back(head_report(t, g, m));
    }
  }
  return out;
}

constexpr size_t kSampleSentences = 2;  // the report shows their attention side by side for each kind

std::string pairs_label(int64_t n) { return n % 1000 == 0 ? fmt::format("{}k", n / 1000) : fmt::format("{}", n); }

// The first `train_pairs` training pairs and the validation pairs, encoded with vocabularies built
// from those training pairs (as `seqgrad train --subset` does).
struct Data {
  std::vector<text::TokenizedPair> train;  // the first pairs of the training split, as many as the largest subset
  std::vector<text::TokenizedPair> valid;
  std::vector<std::string> valid_references;  // raw, for sacreBLEU and chrF
  models::Corpora test;  // its test split and test_references only (the first --test-pairs)
};

struct Prepared {
  int64_t train_pairs = 0;  // the first pairs of Data::train
  text::Vocab src_vocab, tgt_vocab;
  text::EncodedCorpus train, valid;
};

Prepared prepare(const TrainConfig& c, const Data& data, int64_t train_pairs) {
  const std::vector<text::TokenizedPair>& valid_pairs = data.valid;
  std::span<const text::TokenizedPair> train_text(data.train.data(), static_cast<size_t>(train_pairs));
  Prepared p;
  p.train_pairs = train_pairs;
  p.src_vocab = text::Vocab::build(text::source_side(train_text), {.min_freq = c.min_freq});
  p.tgt_vocab = text::Vocab::build(text::target_side(train_text), {.min_freq = c.min_freq});
  SG_CHECK_VALUE(p.src_vocab.size() > text::Vocab::kNumSpecial && p.tgt_vocab.size() > text::Vocab::kNumSpecial,
                 "{} training pairs give no word seen at least {} times (vocabularies {} and {}); use a "
                 "larger subset", train_pairs, c.min_freq, p.src_vocab.size(), p.tgt_vocab.size());
  text::EncodeOptions truncate{.max_src_tokens = c.max_tokens, .max_tgt_tokens = c.max_tokens};
  p.train = text::encode_pairs(train_text, p.src_vocab, p.tgt_vocab, truncate);
  p.valid = text::encode_pairs(valid_pairs, p.src_vocab, p.tgt_vocab, truncate);
  return p;
}

// Config `c` trained on prepared data: its vocabularies' sizes and the training subset.
TrainConfig on_data(TrainConfig c, const Prepared& p) {
  c.model.src_vocab = p.src_vocab.size();
  c.model.tgt_vocab = p.tgt_vocab.size();
  c.train_subset = p.train_pairs;
  return c;
}

// Sentences per second of models::decode over the test sources, in batches of kDecodeBatch: the
// decoding alone (evaluate() also runs the teacher-forced loss).
double decode_sentences_per_s(models::TranslationModel& model, const text::EncodedCorpus& test,
                              const models::DecodeOptions& options) {
  auto start = Clock::now();
  for (const text::Batch& batch : text::make_batches(test.pairs, {.batch_size = kDecodeBatch, .shuffle = false})) {
    models::TensorBatch b = models::to_tensors(batch);
    models::decode(model, b.src, b.src_lengths, options);
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return seconds > 0 ? static_cast<double>(test.pairs.size()) / seconds : 0;
}

// The trained model on the test split: BLEU greedy and with beam kTestBeam (as `train`'s closing
// report decodes), and the decoding speed of each.
TestResult test_one(models::Trainer& trainer, const Prepared& d, const Data& data, const TrainConfig& c) {
  TestResult out;
  out.pairs = static_cast<int64_t>(data.test.test.size());
  text::EncodeOptions truncate{.max_src_tokens = inference_truncation(c), .max_tgt_tokens = inference_truncation(c)};
  const text::EncodedCorpus test = text::encode_pairs(data.test.test, d.src_vocab, d.tgt_vocab, truncate);
  for (auto [beam, result] : {std::pair{int64_t{1}, &out.greedy}, {kTestBeam, &out.beam}}) {
    const models::DecodeOptions options = models::decode_options(c, beam);
    const models::Evaluation e = trainer.evaluate(test, data.test.test, data.test.test_references, options);
    result->sacrebleu = e.sacrebleu, result->chrf = e.chrf, result->bleu_tokenized = e.bleu_tokenized;
    result->sentences_per_s = decode_sentences_per_s(trainer.model(), test, options);
  }
  return out;
}

// Trains one model on the first `train_pairs` pairs with models::fit, measures the attention's
// sharpness after every epoch's validation, then scores the test split.
// head_maps: keep the validation pairs' teacher-forced attention for the per-head report (only read
// when the comparison has a GRU and a Transformer).
Run run_one(const Variant& variant, const Data& data, int64_t train_pairs, bool quiet, bool head_maps) {
  const std::vector<text::TokenizedPair>& valid_pairs = data.valid;
  const Prepared d = prepare(variant.config, data, train_pairs);
  const TrainConfig c = on_data(variant.config, d);
  Run run;
  run.kind = variant.name;
  run.architecture = models::architecture_name(c.model.architecture);
  run.train_pairs = train_pairs;
  run.src_vocab = d.src_vocab.size(), run.tgt_vocab = d.tgt_vocab.size();

  models::Trainer trainer(c, d.src_vocab, d.tgt_vocab);  // seeded: the same initial weights and dropout masks
  run.parameters = trainer.model().num_parameters();

  double timed_seconds = 0;  // the first step (warm-up) excluded
  int64_t timed_steps = 0;
  std::vector<models::Hypothesis> samples;  // the last epoch's validation translations
  models::RunOptions options;  // no out_dir: compare keeps no checkpoints
  options.callbacks.after_step = [&](const models::StepResult& r) {
    if (run.steps > 0) timed_seconds += r.seconds, ++timed_steps;
    ++run.steps;
    run.train_seconds += r.seconds, run.train_tokens += r.tokens;
    return true;
  };
  options.callbacks.after_epoch = [&](const models::EpochMetrics& m, const models::Evaluation& val) {
    EpochResult e{m, attention_sharpness(trainer.model(), d.valid)};
    run.epochs.push_back(e);
    samples = val.hypotheses;
    if (!quiet)
      fmt::print(stderr, "[{} {} pairs] epoch {}/{}: train loss {:.3f}, valid loss {:.3f}, sacreBLEU {:.2f}, chrF "
                 "{:.2f}, BLEU {:.2f} (tokenised), entropy {:.3f} ({:.2f} of uniform), {:.0f} s\n", run.kind,
                 train_pairs, m.epoch, c.epochs, m.train_loss, m.valid_loss, m.valid_sacrebleu, m.valid_chrf,
                 m.valid_bleu_tokenized, e.sharpness.entropy, e.sharpness.normalized, m.seconds);
    return true;
  };
  text::MemoryBatches batches(d.train.pairs, {.batch_size = c.batch_size, .batch_tokens = c.batch_tokens});
  try {
    models::fit(trainer, batches, {d.valid, valid_pairs, data.valid_references}, options);
  } catch (const models::DivergenceError& e) {
    run.stopped = e.what();
  }
  if (run.stopped.empty() && !data.test.test.empty()) {
    run.test = test_one(trainer, d, data, c);
    if (!quiet)
      fmt::print(stderr, "[{} {} pairs] test ({} pairs): sacreBLEU {:.2f} greedy, {:.2f} beam {}; {:.1f} and {:.1f} "
                 "sentences/s\n", run.kind, train_pairs, run.test->pairs, run.test->greedy.sacrebleu,
                 run.test->beam.sacrebleu, kTestBeam, run.test->greedy.sentences_per_s, run.test->beam.sentences_per_s);
  }
  if (head_maps && run.stopped.empty()) {
    run.valid_maps = teacher_forced_maps(trainer.model(), d.valid, d.src_vocab, d.tgt_vocab);
    if (c.model.architecture == models::Architecture::transformer)
      run.layers = c.model.num_layers, run.heads = c.model.heads;
  }
  for (size_t i = 0; i < std::min(kSampleSentences, samples.size()); ++i)
    run.sample_heatmaps.push_back(plot::heatmap_svg(attention_heatmap(
        marked_unknown(valid_pairs[i].src, d.src_vocab), d.tgt_vocab.decode(samples[i].tokens), samples[i].attention,
        fmt::format("{} ({} pairs)", run.kind, pairs_label(train_pairs)), false)));
  if (timed_steps > 0) run.ms_per_step = 1000 * timed_seconds / timed_steps;
  if (!run.stopped.empty()) fmt::print(stderr, "[{} {} pairs] stopped: {}\n", run.kind, train_pairs, run.stopped);
  return run;
}

// Time per training step, measured fairly on a shared machine: one model per variant, and the
// variants take turns step by step on the same batches (the first variant's batching), so load that
// comes and goes slows them alike. The first round is a warm-up; the median of the other `steps`
// rounds is reported.
struct Timing {
  std::string kind;
  double median_ms = 0, mean_ms = 0;
  double tokens_per_s = 0;  // target tokens per second over the timed steps
};

std::vector<Timing> time_steps(const std::vector<Variant>& variants, const Data& data, int64_t train_pairs,
                               int64_t steps) {
  const TrainConfig& c = variants.front().config;  // its batching
  const Prepared d = prepare(c, data, train_pairs);
  std::vector<text::Batch> batches = text::make_batches(d.train.pairs, {.batch_size = c.batch_size, .batch_tokens = c.batch_tokens, .seed = c.seed});
  struct Timed {
    std::unique_ptr<models::Trainer> trainer;
    std::vector<double> seconds;
    int64_t tokens = 0;
  };
  std::vector<Timed> timed;
  for (const Variant& v : variants)  // the same data and vocabularies for all
    timed.push_back({std::make_unique<models::Trainer>(on_data(v.config, d), d.src_vocab, d.tgt_vocab), {}, 0});
  for (int64_t round = 0; round <= steps; ++round) {
    models::TensorBatch b = models::to_tensors(batches[static_cast<size_t>(round) % batches.size()]);
    for (Timed& t : timed) {
      auto start = Clock::now();
      try {
        t.trainer->train_step(b);
      } catch (const models::DivergenceError&) {  // the timing is still valid; training reported it
      }
      double seconds = std::chrono::duration<double>(Clock::now() - start).count();
      if (round > 0) t.seconds.push_back(seconds), t.tokens += b.target_tokens;
    }
  }
  std::vector<Timing> out;
  for (size_t k = 0; k < variants.size(); ++k) {
    std::vector<double> s = timed[k].seconds;
    Timing t{variants[k].name};
    if (!s.empty()) {
      double total = 0;
      for (double x : s) total += x;
      std::sort(s.begin(), s.end());
      size_t n = s.size();
      t.median_ms = 1000 * (n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2);
      t.mean_ms = 1000 * total / n;
      t.tokens_per_s = timed[k].tokens / static_cast<double>(n) / (t.median_ms / 1000);  // at the median step time
    }
    out.push_back(t);
  }
  return out;
}

nlohmann::json to_json(const Run& r) {
  nlohmann::json epochs = nlohmann::json::array();
  for (const EpochResult& e : r.epochs) {
    nlohmann::json j = e.metrics.to_json();
    j.erase("step"), j.erase("lr");
    j["attention_entropy"] = e.sharpness.entropy;
    j["attention_entropy_normalized"] = e.sharpness.normalized;
    j["attention_entropy_uniform"] = e.sharpness.uniform;
    epochs.push_back(j);
  }
  nlohmann::json test = nullptr;
  if (r.test) {
    auto search = [](const TestResult::Search& s) {
      return nlohmann::json{{"sacrebleu", s.sacrebleu}, {"chrf", s.chrf}, {"bleu_tokenized", s.bleu_tokenized},
                            {"sentences_per_s", s.sentences_per_s}};
    };
    test = {{"pairs", r.test->pairs}, {"greedy", search(r.test->greedy)}, {"beam", search(r.test->beam)},
            {"beam_size", kTestBeam}};
  }
  return {{"kind", r.kind},         {"architecture", r.architecture}, {"train_pairs", r.train_pairs},
          {"parameters", r.parameters}, {"src_vocab", r.src_vocab}, {"tgt_vocab", r.tgt_vocab},
          {"steps", r.steps},       {"train_ms_per_step", r.ms_per_step}, {"train_seconds", r.train_seconds},
          {"train_tokens_per_s", r.train_seconds > 0 ? r.train_tokens / r.train_seconds : 0.0},
          {"stopped", r.stopped.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.stopped)},
          {"epochs", epochs},       {"test", test}};
}

std::vector<std::string> table_header() {
  return {"model", "pairs", "params", "train loss", "valid loss", "sacreBLEU", "chrF", "BLEU tok", "entropy", "H/log S"};
}

// Per run: the training's time and speed, then the test split greedy and with beam kTestBeam.
std::vector<std::string> test_table_header() {
  return {"model", "pairs", "train s", "tok/s", "test greedy", fmt::format("test beam {}", kTestBeam),
          "greedy sent/s", fmt::format("beam {} sent/s", kTestBeam)};
}

std::vector<std::string> test_table_row(const Run& r) {
  std::vector<std::string> row{r.kind, fmt::format("{}", r.train_pairs), fmt::format("{:.3g}", r.train_seconds),
                               r.train_seconds > 0 ? fmt::format("{:.0f}", r.train_tokens / r.train_seconds) : "-"};
  if (!r.test) {
    row.insert(row.end(), {"-", "-", "-", "-"});
    return row;
  }
  row.insert(row.end(), {fmt::format("{:.2f}", r.test->greedy.sacrebleu), fmt::format("{:.2f}", r.test->beam.sacrebleu),
                         fmt::format("{:.1f}", r.test->greedy.sentences_per_s),
                         fmt::format("{:.1f}", r.test->beam.sentences_per_s)});
  return row;
}

std::vector<std::string> table_row(const Run& r) {
  std::vector<std::string> row{r.kind, fmt::format("{}", r.train_pairs), fmt::format("{}", r.parameters)};
  if (r.epochs.empty()) {
    row.insert(row.end(), {"-", "-", "-", "-", "-", "-", "-"});
  } else {
    const models::EpochMetrics& m = r.last().metrics;
    const Sharpness& e = r.last().sharpness;
    row.insert(row.end(), {fmt::format("{:.3f}", m.train_loss), fmt::format("{:.3f}", m.valid_loss),
                           fmt::format("{:.2f}", m.valid_sacrebleu), fmt::format("{:.2f}", m.valid_chrf),
                           fmt::format("{:.2f}", m.valid_bleu_tokenized), fmt::format("{:.3f}", e.entropy),
                           fmt::format("{:.3f}", e.normalized)});
  }
  if (!r.stopped.empty()) row[0] += " (stopped)";
  return row;
}

std::string format_table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width(rows[0].size(), 0);
  for (const auto& row : rows)
    for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  std::string out;
  for (size_t r = 0; r < rows.size(); ++r) {
    for (size_t i = 0; i < rows[r].size(); ++i)
      out += i == 0 ? fmt::format("{:<{}}", rows[r][i], width[i]) : fmt::format("  {:>{}}", rows[r][i], width[i]);
    out += "\n";
    if (r == 0) {
      size_t total = 0;
      for (size_t w : width) total += w + 2;
      out += std::string(total - 2, '-') + "\n";
    }
  }
  return out;
}

std::vector<std::vector<std::string>> head_table(const std::vector<HeadReport>& reports) {
  std::vector<std::vector<std::string>> table{{"Transformer head", "pairs", "GRU", "entropy", "agreement"}};
  for (const HeadReport& h : reports)
    table.push_back({fmt::format("layer {} head {}", h.layer + 1, h.head + 1), fmt::format("{}", h.train_pairs), h.gru,
                     fmt::format("{:.3f}", h.entropy), fmt::format("{:.3f}", h.agreement)});
  return table;
}

nlohmann::json heads_json(const std::vector<HeadReport>& reports) {
  nlohmann::json out = nlohmann::json::array();
  for (const HeadReport& h : reports)
    out.push_back({{"train_pairs", h.train_pairs}, {"layer", h.layer}, {"head", h.head}, {"gru", h.gru},
                   {"entropy", h.entropy}, {"agreement_with_gru", h.agreement}});
  return out;
}

// The report's setup sentence on the Transformer, when one is compared.
std::string transformer_setup(const Variant* transformer) {
  if (transformer == nullptr) return "";
  const TrainConfig& c = transformer->config;
  return fmt::format(" The Transformer trains on the same pairs and vocabularies with the transformer preset's model "
                     "and recipe: {} + {} {} layers of width {}, {} heads, feed-forward {}, embeddings untied (one "
                     "vocabulary per language), {} {}, Adam lr {} with {} warmup updates ({}), label smoothing {}; "
                     "its attention entropy is its last decoder layer's cross-attention averaged over the heads.",
                     c.model.num_layers, c.model.num_layers, c.model.norm_first ? "pre-norm" : "post-norm",
                     c.model.hidden_size, c.model.heads, c.model.ffn_size, c.batch_tokens > 0 ? c.batch_tokens : c.batch_size,
                     c.batch_tokens > 0 ? "padded tokens per batch" : "pairs per batch", c.lr, c.warmup_updates,
                     models::lr_schedule_name(c.lr_schedule), c.label_smoothing);
}

}  // namespace

int compare_main(int argc, char** argv) {
  Args args = compare_args();
  if (!args.parse(argc, argv)) return 0;
  SG_CHECK_USAGE(args.positionals().empty(), "unexpected argument '{}'", args.positionals()[0]);
  apply_threads_flag(args);
  TrainConfig config = base_config(args);
  if (args.flag("print-config")) {  // the config every GRU trains with (its attention kind aside)
    fmt::print("{}\n", config.to_json().dump(2));
    return 0;
  }
  const std::vector<Variant> variants = variants_from_flags(args, config);
  int64_t valid_limit = args.get_int("valid-pairs");
  SG_CHECK_USAGE(valid_limit >= 0, "--valid-pairs must be >= 0, got {}", valid_limit);
  int64_t test_limit = args.get_int("test-pairs");
  SG_CHECK_USAGE(test_limit >= 0, "--test-pairs must be >= 0, got {}", test_limit);
  int64_t timing_steps = args.get_int("timing-steps");
  SG_CHECK_USAGE(timing_steps >= 0, "--timing-steps must be >= 0, got {}", timing_steps);

  models::Corpora corpora = models::load_corpora(config);
  const int64_t available = corpora.train.pairs;
  std::vector<int64_t> subsets;
  for (const std::string& s : split_list(args.get("subsets"))) {
    int64_t n = 0;
    if (s == "all") {
      n = available;
    } else {
      auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
      SG_CHECK_USAGE(ec == std::errc() && end == s.data() + s.size() && n >= 1,
                     "--subsets expects positive pair counts or 'all', got '{}'", s);
      if (n > available) {
        fmt::print(stderr, "note: subset {} is larger than the {} training pairs; using all of them\n", n, available);
        n = available;
      }
    }
    if (std::find(subsets.begin(), subsets.end(), n) == subsets.end()) subsets.push_back(n);
  }
  SG_CHECK_USAGE(!subsets.empty(), "--subsets is empty");
  std::sort(subsets.begin(), subsets.end());
  Data data{models::read_train_pairs(corpora, subsets.back()), corpora.valid, corpora.valid_references, {}};
  if (valid_limit > 0 && valid_limit < static_cast<int64_t>(data.valid.size())) {
    data.valid.resize(valid_limit);
    data.valid_references.resize(valid_limit);
  }
  data.test.test = corpora.test, data.test.test_references = corpora.test_references;
  if (test_limit > 0 && test_limit < static_cast<int64_t>(data.test.test.size())) {
    data.test.test.resize(test_limit);
    data.test.test_references.resize(test_limit);
  }
  const std::vector<text::TokenizedPair>& valid_pairs = data.valid;

  std::string out_dir = args.get("out");
  std::filesystem::create_directories(out_dir);
  const bool text_output = !args.flag("json");
  if (text_output && !args.flag("quiet"))
    fmt::print("compare: {} {}->{}, preset {} (E={} H={} L={}), {} epoch(s), seed {}, {} validation pairs, "
             "{} test pairs, {} thread(s)\n",
             models::describe_corpus(config), config.src_lang, config.tgt_lang, config.preset, config.model.embed_size,
             config.model.hidden_size, config.model.num_layers, config.epochs, config.seed, valid_pairs.size(),
             data.test.test.size(), get_num_threads());
  std::fflush(stdout);  // before the per-epoch progress on stderr

  auto start = Clock::now();
  std::vector<Run> runs;
  const auto is_transformer = [](const Variant& v) { return v.name == "transformer"; };
  const bool head_maps = std::any_of(variants.begin(), variants.end(), is_transformer) &&
                         !std::all_of(variants.begin(), variants.end(), is_transformer);
  for (int64_t n : subsets)
    for (const Variant& v : variants) runs.push_back(run_one(v, data, n, args.flag("quiet"), head_maps));
  std::vector<Timing> timing;
  if (timing_steps > 0) {
    if (!args.flag("quiet"))
      fmt::print(stderr, "timing: {} interleaved steps per model on {} pairs\n", timing_steps, subsets.back());
    timing = time_steps(variants, data, subsets.back(), timing_steps);
  }
  double total_seconds = std::chrono::duration<double>(Clock::now() - start).count();

  // ---- the table (stdout and report), JSON, plots
  std::vector<std::vector<std::string>> table{table_header()};
  for (const Run& r : runs) table.push_back(table_row(r));
  if (text_output) fmt::print("\n{}", format_table(table));
  if (text_output)
    fmt::print("(last epoch, {} validation pairs, greedy; sacreBLEU is 13a cased on the detokenised output, chrF is\n"
             " chrF2, BLEU tok the tokenised lower-cased BLEU of tutorials; entropy in nats of the teacher-forced\n"
             " attention weights, H/log S = 1 for uniform attention)\n",
             valid_pairs.size());
  std::vector<std::vector<std::string>> test_table{test_table_header()};
  for (const Run& r : runs) test_table.push_back(test_table_row(r));
  if (text_output)
    fmt::print("\n{}(training: the time of its steps and target tokens/s; test: sacreBLEU of the model after its last\n"
               " epoch on the first {} test pairs, greedy and beam {}, and sentences/s decoding them in batches of {})\n",
               format_table(test_table), data.test.test.size(), kTestBeam, kDecodeBatch);
  const std::vector<HeadReport> head_rows = head_reports(runs);
  const std::vector<std::vector<std::string>> heads_table = head_table(head_rows);
  if (!head_rows.empty() && text_output)
    fmt::print("\n{}(the Transformer's cross-attention per layer and head beside each GRU, both teacher-forced on the {} "
               "validation\n references: mean entropy in nats per target token; agreement = the mean over target tokens "
               "of\n sum_j min(head_j, gru_j), 1 for the same rows)\n", format_table(heads_table), valid_pairs.size());
  std::vector<std::vector<std::string>> timing_table{{"model", "ms/step (median)", "ms/step (mean)", "target tok/s"}};
  for (const Timing& t : timing)
    timing_table.push_back({t.kind, fmt::format("{:.1f}", t.median_ms), fmt::format("{:.1f}", t.mean_ms),
                            fmt::format("{:.0f}", t.tokens_per_s)});
  if (!timing.empty() && text_output)
    fmt::print("\n{}(time per training step: the models take turns on the same {} batches of {} pairs, {} thread(s))\n",
               format_table(timing_table), timing_steps, subsets.back(), get_num_threads());
  if (text_output && !args.flag("quiet")) fmt::print("total {:.0f} s\n", total_seconds);

  std::vector<std::string> variant_names;
  for (const Variant& v : variants) variant_names.push_back(v.name);
  const Variant* transformer = nullptr;
  for (const Variant& v : variants)
    if (v.config.model.architecture == models::Architecture::transformer) transformer = &v;
  nlohmann::json json = {
      {"settings", {{"config", config.to_json()}, {"kinds", variant_names}, {"subsets", subsets},
                    {"valid_pairs", valid_pairs.size()}, {"test_pairs", data.test.test.size()},
                    {"threads", get_num_threads()},
                    {"timing_steps", timing_steps}, {"timing_pairs", subsets.back()},
                    {"total_seconds", total_seconds},
                    {"transformer_config", transformer ? transformer->config.to_json() : nlohmann::json(nullptr)}}},
      {"runs", nlohmann::json::array()},
      {"heads", heads_json(head_rows)},
      {"timing", nlohmann::json::array()}};
  for (const Run& r : runs) json["runs"].push_back(to_json(r));
  for (const Timing& t : timing)
    json["timing"].push_back({{"kind", t.kind}, {"median_ms_per_step", t.median_ms}, {"mean_ms_per_step", t.mean_ms},
                              {"target_tokens_per_s", t.tokens_per_s}});
  std::string json_path = out_dir + "/compare.json";
  write_file_atomic(json_path, json.dump(2) + "\n");

  std::vector<plot::ReportSection> sections;
  sections.push_back(
      {"Setup",
       fmt::format("Each model is trained from the same seed ({}) on the first N training pairs of {} {}->{}; "
                   "the GRUs with the same batches and hyper-parameters (preset {}: E={}, H={}, L={}, batch {}, Adam lr {}, "
                   "label smoothing {}), for {} epoch(s). Validation: {} pairs, greedy decoding; sacreBLEU (13a, "
                   "cased, on the detokenised output) is the headline, then chrF2, then the tokenised lower-cased BLEU "
                   "that tutorials report. Attention entropy is the mean entropy (nats) of the teacher-forced attention "
                   "weights per target token on the validation set; H/log S divides each row by the entropy of "
                   "uniform attention over its source (1 = uniform, 0 = one-hot). Time per step is forward, "
                   "backward, clipping and the Adam update, measured apart from training with the models taking turns "
                   "step by step on the same batches (so changing machine load affects them alike), {} thread(s). "
                   "Total time {:.0f} s.",
                   config.seed, models::describe_corpus(config), config.src_lang, config.tgt_lang, config.preset,
                   config.model.embed_size, config.model.hidden_size, config.model.num_layers, config.batch_size,
                   config.lr, config.label_smoothing, config.epochs, valid_pairs.size(), get_num_threads(),
                   total_seconds) + transformer_setup(transformer),
       ""});
  plot::ReportSection summary{"Summary (last epoch)", "", ""};
  summary.table = table;
  sections.push_back(summary);
  if (!head_rows.empty()) {
    plot::ReportSection heads{"The Transformer's heads beside the GRU",
                              fmt::format("Per layer and head, the cross-attention's mean entropy (nats per target "
                                          "token) and its agreement with each GRU trained on the same pairs: the mean "
                                          "over target tokens of Σ_j min(a_j, g_j), the weight the head (a) and the "
                                          "GRU (g) both put on source token j (1: the same rows, 0: disjoint). Both "
                                          "are teacher-forced on the {} validation references, so their rows are the "
                                          "same target tokens.", valid_pairs.size()), ""};
    heads.table = heads_table;
    sections.push_back(heads);
  }
  plot::ReportSection tested{"Training time and the test split",
                             fmt::format("Training: the time of its steps (validation excluded) and target tokens per "
                                         "second. Test: sacreBLEU of the model after its last epoch on the first {} "
                                         "test pairs, greedy and beam {}, and sentences per second decoding them in "
                                         "batches of {}.", data.test.test.size(), kTestBeam, kDecodeBatch), ""};
  tested.table = test_table;
  sections.push_back(tested);

  for (int64_t n : subsets) {
    plot::LinePlot loss{fmt::format("Training loss, {} pairs", n), "epoch", "loss (label-smoothed)", {}};
    plot::LinePlot bleu{fmt::format("Validation sacreBLEU, {} pairs", n), "epoch", "sacreBLEU", {}};
    loss.integer_x = bleu.integer_x = true;  // epochs: whole-number ticks (one epoch: a point at 1)
    for (const Run& r : runs) {
      if (r.train_pairs != n || r.epochs.empty()) continue;
      plot::Series l{r.kind, {}, {}, variant_color(r.kind)}, b{r.kind, {}, {}, variant_color(r.kind)};
      for (const EpochResult& e : r.epochs) {
        l.x.push_back(e.metrics.epoch), l.y.push_back(e.metrics.train_loss);
        b.x.push_back(e.metrics.epoch), b.y.push_back(e.metrics.valid_sacrebleu);
      }
      loss.series.push_back(l), bleu.series.push_back(b);
    }
    if (loss.series.empty()) continue;
    sections.push_back({loss.title, "", plot::line_plot_svg(loss)});
    sections.push_back({bleu.title, "", plot::line_plot_svg(bleu)});
  }
  if (subsets.size() > 1) {
    plot::LinePlot by_size{"Validation sacreBLEU after the last epoch vs training pairs", "training pairs",
                           "sacreBLEU", {}};
    for (const std::string& name : variant_names) {
      plot::Series s{name, {}, {}, variant_color(name)};
      for (const Run& r : runs)
        if (r.kind == s.name && !r.epochs.empty())
          s.x.push_back(double(r.train_pairs)), s.y.push_back(r.last().metrics.valid_sacrebleu);
      if (!s.x.empty()) by_size.series.push_back(s);
    }
    if (!by_size.series.empty()) sections.push_back({"Small training subsets", "", plot::line_plot_svg(by_size)});
  }
  plot::BarChart speed{fmt::format("Time per training step (median of {}, {} pairs)", timing_steps, subsets.back()),
                       "ms per step", {}, {}};
  for (const Timing& t : timing)
    speed.labels.push_back(t.kind), speed.values.push_back(t.median_ms), speed.colors.push_back(variant_color(t.kind));
  plot::BarChart sharp{"Attention entropy on the validation set (last epoch)", "entropy (nats)", {}, {}};
  for (const std::string& name : variant_names) {
    for (const Run& r : runs) {
      if (r.kind != name) continue;
      if (!r.epochs.empty()) {
        sharp.labels.push_back(fmt::format("{} {}", name, pairs_label(r.train_pairs)));
        sharp.values.push_back(r.last().sharpness.entropy);
        sharp.colors.push_back(variant_color(name));
      }
    }
  }
  if (!speed.values.empty()) {
    plot::ReportSection section{"Time per step", "", plot::bar_chart_svg(speed)};
    section.table = timing_table;
    sections.push_back(section);
  }
  if (!sharp.values.empty()) {
    double uniform = runs.front().epochs.empty() ? 0 : runs.front().last().sharpness.uniform;
    sections.push_back({"Sharpness of attention",
                        fmt::format("Lower is sharper. Uniform attention over each validation source would have a "
                                    "mean entropy of {:.3f} nats.", uniform),
                        plot::bar_chart_svg(sharp)});
  }
  for (size_t i = 0; i < kSampleSentences; ++i) {  // the same sentence under each model, side by side
    plot::ReportSection section{fmt::format("Attention on validation sentence {}, {} pairs", i + 1,
                                            pairs_label(subsets.back())), "", ""};
    for (const Run& r : runs)
      if (r.train_pairs == subsets.back() && i < r.sample_heatmaps.size()) section.svg += r.sample_heatmaps[i];
    if (i < valid_pairs.size()) section.html_text = text::detokenize(valid_pairs[i].src);
    if (!section.svg.empty()) sections.push_back(section);
  }
  std::string report_path = out_dir + "/report.html";
  plot::write_html_report(report_path, "seqgrad compare: attention kinds and architectures", sections);
  if (text_output) fmt::print("report: {}\nnumbers: {}\n", report_path, json_path);
  else fmt::print("{}\n", json.dump());
  for (const Run& r : runs)
    if (!r.stopped.empty()) return 1;
  return 0;
}

}  // namespace seqgrad::tools
