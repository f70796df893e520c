// `seqgrad bench`: timed workloads, each reported as the median and spread of repeated runs after
// warm-up. bench/torch_bench.py runs the same workloads in PyTorch on the same data and weights
// (exported here with --export) and bench/run.sh runs both alternately and prints the side-by-side
// table (bench/README.md describes every workload).
#include <algorithm>
#include <chrono>
#include <ctime>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/core.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "core/allocator.h"
#include "core/autocast.h"
#include "core/blas.h"
#include "core/fileio.h"
#include "core/rng.h"
#include "core/serialize.h"
#include "core/threads.h"
#include "ops/cpu/kernels.h"
#include "dist/communicator.h"
#include "models/seq2seq/data_parallel.h"
#include "models/seq2seq/decode.h"
#include "models/seq2seq/run.h"
#include "models/seq2seq/trainer.h"
#include "models/seq2seq/transformer.h"
#include "tools/args.h"
#include "tools/commands.h"
#include "tools/train_flags.h"

namespace seqgrad::tools {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// CPU time of the whole process (all threads): with wall time it shows how much of a core the
// run actually got on a shared machine.
double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// ---- statistics and reporting

struct Stats {
  double median = 0, p10 = 0, p90 = 0, min = 0, max = 0;
  int n = 0;
};

Stats stats_of(std::vector<double> v) {
  Stats s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  auto at = [&](double q) {  // linear interpolation between order statistics
    double pos = q * static_cast<double>(v.size() - 1);
    size_t lo = static_cast<size_t>(pos);
    size_t hi = std::min(lo + 1, v.size() - 1);
    return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
  };
  s.median = at(0.5), s.p10 = at(0.1), s.p90 = at(0.9), s.min = v.front(), s.max = v.back();
  s.n = static_cast<int>(v.size());
  return s;
}

double load_average() {
  double one = -1;
  if (FILE* f = std::fopen("/proc/loadavg", "r")) {
    if (std::fscanf(f, "%lf", &one) != 1) one = -1;
    std::fclose(f);
  }
  return one;
}

struct Reporter {
  std::string json_path;  // --out-file: JSON lines appended there
  bool json = false;      // --json: JSON lines on stdout instead of text
  int threads = 1;

  // value: the headline number in `unit`; extra: derived numbers (tokens/s, GFLOP/s, ...).
  void report(const std::string& workload, const std::string& unit, const Stats& s,
              const std::map<std::string, double>& extra = {}, const std::string& note = "") const {
    std::string line = fmt::format("{:<22} {:>10.4g} {:<8} [p10 {:.4g}, p90 {:.4g}, n {}]", workload, s.median, unit,
                                   s.p10, s.p90, s.n);
    for (const auto& [k, v] : extra) line += fmt::format("  {} {:.4g}", k, v);
    if (!note.empty()) line += "  (" + note + ")";
    nlohmann::json j = {{"impl", "seqgrad"}, {"workload", workload}, {"unit", unit},   {"median", s.median},
                        {"p10", s.p10},      {"p90", s.p90},         {"min", s.min},   {"max", s.max},
                        {"n", s.n},          {"threads", threads},   {"load", load_average()}};
    for (const auto& [k, v] : extra) j[k] = v;
    if (!note.empty()) j["note"] = note;
    fmt::print("{}\n", json ? j.dump() : line);
    std::fflush(stdout);
    if (!json_path.empty()) append_line(json_path, j.dump());  // an IOError naming the file if it cannot be written
  }
};

struct Plan {
  int warmup = 2, repeats = 7;  // repeats: timed samples (each a block of iterations or a batch cycle)
  bool quick = false;
  std::string data_dir = "data";
  int64_t max_seq = 8192;  // attention_chunked: the longest S
  int64_t batch_tokens = 0;  // batching_*: the token budget (0: the sentence batches' mean padded size)
};

// Times `body` in blocks sized to last about `block_seconds`; returns the time per call (seconds)
// of each block, and in `cpu` (when given) the process CPU time per call of each block.
std::vector<double> time_blocks(const std::function<void()>& body, const Plan& plan, double block_seconds = 0.2,
                                std::vector<double>* cpu = nullptr) {
  for (int i = 0; i < plan.warmup; ++i) body();
  auto t0 = Clock::now();
  body();
  double once = std::max(seconds_since(t0), 1e-7);
  int64_t block = plan.quick ? 1 : std::clamp<int64_t>(static_cast<int64_t>(block_seconds / once), 1, 1000000);
  std::vector<double> per_call;
  for (int r = 0; r < plan.repeats; ++r) {
    auto start = Clock::now();
    double c0 = process_cpu_seconds();
    for (int64_t i = 0; i < block; ++i) body();
    per_call.push_back(seconds_since(start) / static_cast<double>(block));
    if (cpu) cpu->push_back((process_cpu_seconds() - c0) / static_cast<double>(block));
  }
  return per_call;
}

Stats scaled(const std::vector<double>& seconds, double factor) {
  std::vector<double> v;
  for (double s : seconds) v.push_back(s * factor);
  return stats_of(v);
}

// ---- the seq2seq presets on real batches

// GEMM FLOPs (2·M·N·K per product) of one training step, forward and backward, counted from the
// architecture (models/seq2seq/model.h): backward is taken as twice the forward (one product for
// the input gradient and one for the weight gradient per forward product).
double seq2seq_gemm_flops(const models::Seq2SeqConfig& c, int64_t B, int64_t S, int64_t T) {
  SG_CHECK_VALUE(c.attention == models::AttentionKind::additive, "bench: the FLOP count assumes additive attention");
  const double E = c.embed_size, H = c.hidden_size, L = c.num_layers, V = c.tgt_vocab;
  const double A = c.attention_size ? c.attention_size : c.hidden_size;
  double fwd = 0;
  for (int64_t l = 0; l < L; ++l) {  // encoder: both directions, input and recurrent products
    double in = l == 0 ? E : 2 * H;
    fwd += 2 * (2.0 * B * S * in * 3 * H + 2.0 * B * S * H * 3 * H);
  }
  fwd += 2.0 * L * B * 2 * H * H;  // bridge
  fwd += 2.0 * B * S * 2 * H * A;  // attention keys, once per batch
  double step = 2.0 * B * H * A + 2.0 * B * S * A + 2.0 * B * S * 2 * H;  // W_q q, w_v·features, context
  for (int64_t l = 0; l < L; ++l) {
    double in = l == 0 ? E + 2 * H : H;
    step += 2.0 * B * in * 3 * H + 2.0 * B * H * 3 * H;
  }
  step += 2.0 * B * (c.deep_output ? 3 * H + E : H) * V;
  fwd += T * step;
  return 3 * fwd;
}

struct PresetData {
  models::TrainConfig config;
  text::Vocab src_vocab, tgt_vocab;
  std::vector<models::TensorBatch> batches;
  std::vector<text::Batch> text_batches;  // the same batches before to_tensors (a rank's shard is cut from them)
  std::vector<double> flops;         // per batch
  // What the decoding workloads translate: one test sentence's ids with <eos> (seed, d2l), or the
  // transformer preset's batch of kDecodeSentences synthetic sources.
  Tensor decode_src, decode_lengths;  // (N, S), (N,)
};

constexpr int64_t kDecodeMaxLen = 30;  // tokens a decoding workload produces at most per sentence

constexpr int kBatches = 2;  // a timed cycle runs these batches once each

// ---- the transformer preset on a synthetic batch

// GEMM FLOPs of one Transformer training step (models/seq2seq/transformer.h), counted as
// seq2seq_gemm_flops counts them (backward = 2x forward): per layer the attentions' input and
// output projections, their two batched products per head (scores Q·Kᵀ and weights·V, over all
// B·S·S or B·T·S pairs: the padded ones are computed too) and the feed-forward block; then the
// (tied) output projection.
double transformer_gemm_flops(const models::Seq2SeqConfig& c, int64_t B, int64_t S, int64_t T) {
  const double E = c.hidden_size, F = c.ffn_size > 0 ? c.ffn_size : 4.0 * c.hidden_size, L = c.num_layers;
  const double V = c.tgt_vocab, src_rows = static_cast<double>(B * S), tgt_rows = static_cast<double>(B * T);
  const double encoder = 2 * src_rows * E * 4 * E             // q, k, v, out
                         + 2 * 2.0 * B * S * S * E             // scores, context
                         + 2 * 2 * src_rows * E * F;           // linear1, linear2
  const double decoder = 2 * tgt_rows * E * 4 * E + 2 * 2.0 * B * T * T * E  // causal self-attention
                         + 2 * tgt_rows * E * 2 * E + 2 * src_rows * E * 2 * E  // cross: q, out; memory's k, v
                         + 2 * 2.0 * B * T * S * E                            // cross: scores, context
                         + 2 * 2 * tgt_rows * E * F;
  return 3 * (L * (encoder + decoder) + 2 * tgt_rows * E * V);
}

// The preset's shapes without its corpus: a ~2,500-token batch (--batch-tokens 2500 counts rows x
// the longer side) of B = 100 rows and S = T = 25 positions, the rows' lengths spread as in a token
// batch (which groups sentences of similar length): sources of 18-25 tokens, targets of 17-25
// (<eos> included; tgt_in starts with <bos>), the rest <pad>; token ids spread over the joint
// vocabulary of 8000 pieces. `seed` varies the lengths' order and the ids.
constexpr int64_t kTransformerRows = 100, kTransformerLen = 25, kTransformerVocab = 8000;
// greedy_transformer and beam5_transformer translate the first rows of batch 0's sources: a batch,
// as a translator decodes a test set (the GRU rows time one sentence's latency)
constexpr int64_t kDecodeSentences = 16;

models::TensorBatch synthetic_transformer_batch(uint64_t seed) {
  const int64_t B = kTransformerRows, L = kTransformerLen;
  std::vector<int64_t> src(B * L, text::Vocab::kPad), tgt_in(B * L, text::Vocab::kPad),
      tgt_out(B * L, text::Vocab::kPad), src_lengths(B);
  uint64_t state = 0x9e3779b97f4a7c15ULL * (seed + 1);
  auto next_id = [&] {  // splitmix64, mapped to the non-special ids
    uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return text::Vocab::kNumSpecial + static_cast<int64_t>(z % (kTransformerVocab - text::Vocab::kNumSpecial));
  };
  int64_t target_tokens = 0;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t s_len = L - static_cast<int64_t>((b * 7 + seed) % 8);       // 18-25
    const int64_t t_len = L - static_cast<int64_t>((b * 5 + seed * 3) % 9);   // 17-25, <eos> included
    src_lengths[b] = s_len;
    for (int64_t t = 0; t < s_len; ++t) src[b * L + t] = t + 1 == s_len ? text::Vocab::kEos : next_id();
    tgt_in[b * L] = text::Vocab::kBos;
    for (int64_t t = 0; t + 1 < t_len; ++t) tgt_out[b * L + t] = tgt_in[b * L + t + 1] = next_id();
    tgt_out[b * L + t_len - 1] = text::Vocab::kEos;
    target_tokens += t_len;
  }
  const TensorOptions ids{.dtype = DType::i64};
  return {.src = from_vector(src, {B, L}, ids), .src_lengths = from_vector(src_lengths, {B}, ids),
          .tgt_in = from_vector(tgt_in, {B, L}, ids), .tgt_out = from_vector(tgt_out, {B, L}, ids),
          .target_tokens = target_tokens, .index = {}};
}

PresetData synthetic_transformer() {
  PresetData d;
  d.config = models::preset("transformer");
  std::vector<std::string> tokens = text::Vocab().tokens();
  for (int64_t i = text::Vocab::kNumSpecial; i < kTransformerVocab; ++i) tokens.push_back(fmt::format("p{}", i));
  d.src_vocab = d.tgt_vocab = text::Vocab::from_tokens(tokens);  // one joint vocabulary, as the preset's
  d.config.model.src_vocab = d.config.model.tgt_vocab = kTransformerVocab;
  for (int i = 0; i < kBatches; ++i) {
    d.batches.push_back(synthetic_transformer_batch(static_cast<uint64_t>(i)));
    d.flops.push_back(transformer_gemm_flops(d.config.model, kTransformerRows, kTransformerLen, kTransformerLen));
  }
  d.decode_src = d.batches[0].src.narrow(0, 0, kDecodeSentences).contiguous();
  d.decode_lengths = d.batches[0].src_lengths.narrow(0, 0, kDecodeSentences).contiguous();
  return d;
}

PresetData load_preset(const std::string& name, const std::string& data_dir) {
  if (name == "transformer") return synthetic_transformer();  // no corpus: step_transformer's batches
  PresetData d;
  d.config = models::preset(name);
  d.config.data_dir = data_dir;
  models::Corpora corpora = models::load_corpora(d.config);
  d.config.vocab = "word";  // the benchmark's workloads keep the word-level vocabularies they were measured with
  const std::vector<text::TokenizedPair> train_pairs = models::read_train_pairs(corpora);
  d.src_vocab = text::Vocab::build(text::source_side(train_pairs), {.min_freq = d.config.min_freq});
  d.tgt_vocab = text::Vocab::build(text::target_side(train_pairs), {.min_freq = d.config.min_freq});
  d.config.model.src_vocab = d.src_vocab.size();
  d.config.model.tgt_vocab = d.tgt_vocab.size();
  text::EncodeOptions truncate{.max_src_tokens = d.config.max_tokens, .max_tgt_tokens = d.config.max_tokens};
  text::EncodedCorpus train = text::encode_pairs(train_pairs, d.src_vocab, d.tgt_vocab, truncate);
  std::vector<text::Batch> batches =
      text::make_batches(train.pairs, {.batch_size = d.config.batch_size, .seed = d.config.seed, .drop_last = true});
  SG_CHECK(static_cast<int>(batches.size()) >= kBatches, "bench: preset {} gives only {} batches", name, batches.size());
  for (int i = 0; i < kBatches; ++i) {
    d.batches.push_back(models::to_tensors(batches[i]));
    d.text_batches.push_back(batches[i]);
    d.flops.push_back(seq2seq_gemm_flops(d.config.model, batches[i].batch, batches[i].src_len_max,
                                         batches[i].tgt_len_max));
  }
  const std::vector<int64_t> sentence = models::encode_sentence(d.src_vocab, corpora.test.at(0).src, d.config.max_tokens);
  const int64_t S = static_cast<int64_t>(sentence.size());
  d.decode_src = from_vector(sentence, {1, S}, {.dtype = DType::i64});
  d.decode_lengths = from_vector(std::vector<int64_t>{S}, {1}, {.dtype = DType::i64});
  return d;
}

// The initial weights of the preset's Trainer (the GRU's Xavier init, the Transformer's embeddings),
// which --export writes for the other side.
std::unique_ptr<models::TranslationModel> make_model(const PresetData& d) {
  manual_seed(d.config.seed);
  return models::make_translation_model(d.config.model);
}

// amp "bf16": the step under Autocast(bf16), as `train --amp bf16` (native bf16 GEMMs where the CPU
// has them, ops/cpu/onednn_gemm.h)
void bench_step(const std::string& preset, const Plan& plan, const Reporter& out, const std::string& amp = "off") {
  PresetData d = load_preset(preset, plan.data_dir);
  d.config.amp = models::parse_amp(amp);
  models::Trainer trainer(d.config, d.src_vocab, d.tgt_vocab);
  int64_t tokens = 0;
  double flops = 0;
  for (int i = 0; i < kBatches; ++i) tokens += d.batches[i].target_tokens, flops += d.flops[i];
  for (int w = 0; w < plan.warmup; ++w)
    for (const auto& b : d.batches) trainer.train_step(b);
  std::vector<double> per_step, cpu_per_step;
  double loss = 0;
  for (int r = 0; r < plan.repeats; ++r) {
    auto t0 = Clock::now();
    double c0 = process_cpu_seconds();
    for (const auto& b : d.batches) loss = trainer.train_step(b).loss;
    per_step.push_back(seconds_since(t0) / kBatches);
    cpu_per_step.push_back((process_cpu_seconds() - c0) / kBatches);
  }
  Stats ms = scaled(per_step, 1e3);
  double step_s = ms.median / 1e3;
  out.report("step_" + preset + (amp == "bf16" ? "_bf16" : ""), "ms/step", ms,
             {{"tok_s", static_cast<double>(tokens) / kBatches / step_s},
              {"gemm_gflops", flops / kBatches / step_s / 1e9},
              {"gemm_gflop_per_step", flops / kBatches / 1e9},
              {"cpu_ms", scaled(cpu_per_step, 1e3).median},
              {"loss", loss}});
}

// Peak resident memory of one training step: the high-water mark is reset (clear_refs 5) after
// the warm-up steps, so it covers the step alone on top of what the process already holds.
int64_t status_kb(const char* key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind(key, 0) == 0) return std::stoll(line.substr(std::string(key).size()));
  return -1;
}

void bench_memory(const std::string& preset, const Plan& plan, const Reporter& out) {
  PresetData d = load_preset(preset, plan.data_dir);
  models::Trainer trainer(d.config, d.src_vocab, d.tgt_vocab);
  for (int w = 0; w < std::max(plan.warmup, 1); ++w) trainer.train_step(d.batches[0]);
  std::ofstream("/proc/self/clear_refs") << "5";
  int64_t before = status_kb("VmRSS:");
  trainer.train_step(d.batches[0]);
  int64_t peak = status_kb("VmHWM:");
  Stats s = stats_of({static_cast<double>(peak) / 1024.0});
  out.report("memory_" + preset, "MB peak", s,
             {{"before_mb", static_cast<double>(before) / 1024.0},
              {"step_delta_mb", static_cast<double>(peak - before) / 1024.0}});
}

// The decoding workloads' name: greedy_seed, beam5_transformer, greedy_seed_int8, ...
std::string decode_workload(const std::string& preset, int64_t beam, bool int8) {
  return fmt::format("{}_{}{}", beam == 1 ? "greedy" : fmt::format("beam{}", beam), preset, int8 ? "_int8" : "");
}

// Translates the preset's decoding input (models::decode: greedy, or beam search keeping the best).
std::vector<models::Hypothesis> decode_input(models::TranslationModel& model, const PresetData& d, int64_t beam) {
  return models::decode(model, d.decode_src, d.decode_lengths, {.max_len = kDecodeMaxLen, .beam_size = beam});
}

// int8: the model after nn::quantize_dynamic (Linear and GRU, per channel), as `seqgrad quantize`
// and PyTorch's quantize_dynamic on the other side: the GRU model's Linear layers and GRUs; the
// Transformer's attention out_proj, linear1 and linear2 (its q/k/v projections are parameters and
// its tied embedding/output a matrix, not Linear modules: float32). One sentence is timed in
// ms/sent, a batch (the transformer's) in ms/batch with its sentences per second.
void bench_decode(const std::string& preset, int64_t beam, const Plan& plan, const Reporter& out, bool int8 = false) {
  PresetData d = load_preset(preset, plan.data_dir);
  auto model = make_model(d);
  if (int8) nn::quantize_dynamic(*model);
  size_t produced = 0;
  auto run = [&] {
    produced = 0;
    for (const models::Hypothesis& h : decode_input(*model, d, beam)) produced += h.tokens.size();
  };
  std::vector<double> cpu;
  Stats ms = scaled(time_blocks(run, plan, 0.5, &cpu), 1e3);
  const int64_t sentences = d.decode_src.size(0);
  std::map<std::string, double> extra{{"tokens", static_cast<double>(produced)}, {"cpu_ms", scaled(cpu, 1e3).median}};
  if (sentences > 1) extra["sentences"] = static_cast<double>(sentences), extra["sent_s"] = 1e3 * sentences / ms.median;
  out.report(decode_workload(preset, beam, int8), sentences > 1 ? "ms/batch" : "ms/sent", ms, extra);
}

// ---- kernels at the seed model's shapes

Tensor lengths_pattern(int64_t batch, int64_t max_len, int64_t min_len) {  // deterministic, varied
  std::vector<int64_t> v;
  for (int64_t b = 0; b < batch; ++b) v.push_back(max_len - (b * 7) % (max_len - min_len + 1));
  return from_vector(v, {batch}, {.dtype = DType::i64});
}

void bench_attention(bool projected, const Plan& plan, const Reporter& out) {
  const int64_t B = 64, Dq = 512, K = 20, Dk = 1024, A = 512;
  manual_seed(1);
  nn::AdditiveAttention attention({.query_size = Dq, .key_size = Dk, .hidden_size = A});
  Tensor queries = randn({B, 1, Dq}, {.requires_grad = true});
  Tensor values = randn({B, K, Dk}, {.requires_grad = true});
  Tensor keys = projected ? randn({B, K, A}, {.requires_grad = true}) : values;
  Tensor lengths = lengths_pattern(B, K, 10);
  Tensor dy = randn({B, 1, Dk});
  auto run = [&] {
    Tensor context = projected ? attention.attend_projected(queries, keys, values, lengths)
                               : attention(queries, keys, values, lengths);
    context.backward(dy);
    for (Tensor* t : {&queries, &keys, &values}) t->zero_grad();
    for (Tensor& p : attention.parameters()) p.zero_grad();
  };
  std::vector<double> cpu;
  std::vector<double> wall = time_blocks(run, plan, 0.2, &cpu);
  out.report(projected ? "attention_projected" : "attention", "us", scaled(wall, 1e6), {{"cpu_us", scaled(cpu, 1e6).median}});
}

// ChunkedAdditiveAttention (chunk 64) against plain AdditiveAttention, forward + backward, at
// B = 4, Q = K = S, Dq = Dk = Dv = A = 256 for S = 128, 256, ... up to max_seq: the median time
// and the peak resident memory of one call (the allocator's cache emptied and the high-water mark
// reset before it), so the chunked path's memory can be seen to grow linearly in S while the
// plain path's (B, Q, K) scores and weights grow quadratically.
void bench_attention_chunked(const Plan& plan, int64_t max_seq, const Reporter& out) {
  const int64_t B = 4, D = 256, A = 256, chunk = 64;
  manual_seed(1);
  nn::AdditiveAttention plain({.query_size = D, .key_size = D, .hidden_size = A});
  nn::ChunkedAdditiveAttention chunked(
      {.query_size = D, .key_size = D, .hidden_size = A, .chunk_size = chunk, .keep_weights = false});
  SG_CHECK(chunked.load_state_dict(plain.state_dict()).ok(), "bench: attention_chunked: the weights did not load");
  for (int64_t S = 128; S <= max_seq; S *= 2) {
    Tensor queries = randn({B, S, D}, {.requires_grad = true});
    Tensor keys = randn({B, S, D}, {.requires_grad = true});
    Tensor lengths = lengths_pattern(B, S, S / 2);
    Tensor dy = randn({B, S, D});
    for (const nn::AdditiveAttention* a : {static_cast<const nn::AdditiveAttention*>(&plain),
                                           static_cast<const nn::AdditiveAttention*>(&chunked)}) {
      auto run = [&] {
        (*a)(queries, keys, keys, lengths).backward(dy);
        for (Tensor* t : {&queries, &keys}) t->zero_grad();
        for (Tensor& p : a->parameters()) p.zero_grad();
      };
      cpu_memory::empty_cache();
      std::ofstream("/proc/self/clear_refs") << "5";
      int64_t before = status_kb("VmRSS:");
      auto t0 = Clock::now();
      run();
      std::vector<double> seconds{seconds_since(t0)};
      double peak_mb = static_cast<double>(status_kb("VmHWM:") - before) / 1024.0;
      int samples = plan.quick ? 0 : seconds[0] > 20 ? 0 : std::min(plan.repeats, 3) - 1;
      for (int r = 0; r < samples; ++r) {
        t0 = Clock::now();
        run();
        seconds.push_back(seconds_since(t0));
      }
      bool is_chunked = a == &chunked;
      out.report(fmt::format("attention_{}_S{}", is_chunked ? "chunked" : "plain", S), "ms", scaled(seconds, 1e3),
                 {{"S", static_cast<double>(S)}, {"peak_mb", peak_mb}});
    }
  }
}

void bench_gru(const Plan& plan, const Reporter& out) {
  const int64_t B = 64, T = 20, E = 256, H = 512;
  manual_seed(1);
  nn::GRU gru({.input_size = E, .hidden_size = H, .num_layers = 2, .bidirectional = true});
  Tensor x = randn({B, T, E}, {.requires_grad = true});
  Tensor dy = randn({B, T, 2 * H});
  auto run = [&] {
    Tensor y = gru(x).output;
    y.backward(dy);
    x.zero_grad();
    for (Tensor& p : gru.parameters()) p.zero_grad();
  };
  std::vector<double> cpu;
  std::vector<double> s = time_blocks(run, plan, 0.5, &cpu);
  double flops = 0;
  for (int l = 0; l < 2; ++l) flops += 2 * 3 * (2.0 * B * T * (l == 0 ? E : 2 * H) * 3 * H + 2.0 * B * T * H * 3 * H);
  Stats ms = scaled(s, 1e3);
  out.report("gru", "ms", ms, {{"gemm_gflops", flops / (ms.median / 1e3) / 1e9}, {"cpu_ms", scaled(cpu, 1e3).median}});
}

void bench_linear_ce(int64_t vocab, const Plan& plan, const Reporter& out) {
  const int64_t N = 1280, D = 512;
  manual_seed(1);
  nn::Linear linear({.in_features = D, .out_features = vocab});
  Tensor x = randn({N, D}, {.requires_grad = true});
  std::vector<int64_t> targets;
  for (int64_t i = 0; i < N; ++i) targets.push_back(i % 10 == 9 ? 0 : (i * 7919) % vocab);  // every 10th is <pad>
  Tensor y = from_vector(targets, {N}, {.dtype = DType::i64});
  nn::CrossEntropyOptions options{.label_smoothing = 0.1, .ignore_index = 0};
  auto run = [&] {
    Tensor loss = nn::cross_entropy(linear(x), y, options);
    loss.backward();
    x.zero_grad();
    for (Tensor& p : linear.parameters()) p.zero_grad();
  };
  std::vector<double> cpu;
  std::vector<double> s = time_blocks(run, plan, 0.5, &cpu);
  Stats ms = scaled(s, 1e3);
  out.report("linear_ce", "ms", ms, {{"vocab", static_cast<double>(vocab)},
                                     {"gemm_gflops", 3 * 2.0 * N * D * vocab / (ms.median / 1e3) / 1e9},
                                     {"cpu_ms", scaled(cpu, 1e3).median}});
}

// Per-op overhead on a 1-element tensor: a chain of kChain `y = y * 1.0`, recorded (forward with
// grad) and recorded then backpropagated; per op.
void bench_overhead(const Plan& plan, const Reporter& out) {
  constexpr int kChain = 100;
  Tensor x = ones({1}, {.requires_grad = true});
  auto record_only = [&] {
    Tensor y = x;
    for (int i = 0; i < kChain; ++i) y = y * 1.0;
  };
  auto record_backprop = [&] {
    Tensor y = x;
    for (int i = 0; i < kChain; ++i) y = y * 1.0;
    y.backward();
    x.zero_grad();
  };
  out.report("op_record", "us/op", scaled(time_blocks(record_only, plan), 1e6 / kChain));
  out.report("op_record_backward", "us/op", scaled(time_blocks(record_backprop, plan), 1e6 / kChain));
}

// The roof: sgemm GFLOP/s of a square product through the same path (and BLAS) the ops use.
void bench_sgemm(const Plan& plan, const Reporter& out) {
  const int64_t n = 1024;
  Tensor a = randn({n, n}), b = randn({n, n});
  auto run = [&] { Tensor c = matmul(a, b); };  // split across the threads like every product
  std::vector<double> cpu;
  std::vector<double> s = time_blocks(run, plan, 0.3, &cpu);
  std::vector<double> gflops;
  for (double t : s) gflops.push_back(2.0 * n * n * n / t / 1e9);
  out.report("sgemm", "GFLOP/s", stats_of(gflops), {{"gflop_per_cpu_s", 2.0 * n * n * n / stats_of(cpu).median / 1e9}},
             fmt::format("{0}x{0}x{0}, {1}", n, blas::describe()));
}

// ---- batching (on demand): a preset's training epoch in sentence batches and in token batches

// One epoch's batches, as `seqgrad train` cuts them (the preset's vocabulary and truncation).
std::vector<text::Batch> epoch_batches(text::BatchSource& source) {
  std::vector<text::Batch> batches;
  source.start_epoch(0, 0);
  while (std::optional<text::Batch> b = source.next()) batches.push_back(std::move(*b));
  return batches;
}

// rows x the longest side, as batch_tokens counts a batch
int64_t padded_tokens(const text::Batch& b) { return b.batch * std::max(b.src_len_max, b.tgt_len_max); }

// Padding: the share of source and target positions that hold <pad>.
double padding_fraction(const std::vector<text::Batch>& batches) {
  double real = 0, positions = 0;
  for (const text::Batch& b : batches) {
    for (size_t r = 0; r < b.src_lengths.size(); ++r) real += static_cast<double>(b.src_lengths[r] + b.tgt_lengths[r]);
    positions += static_cast<double>(b.batch * (b.src_len_max + b.tgt_len_max));
  }
  return 1.0 - real / positions;
}

// The preset's epoch cut both ways: batch count, padding and mean padded tokens of each, and the
// training step's time on batches at the 10th to 90th percentile of batch length (a fresh model's
// steps; each a median of the repeats after a warm-up step).
void bench_batching(const std::string& preset, const Plan& plan, const Reporter& out) {
  models::TrainConfig config = models::preset(preset);
  config.data_dir = plan.data_dir;
  models::RunData sentences = models::load_run_data(config);
  std::vector<text::Batch> by_sentences = epoch_batches(*sentences.train);
  double mean_padded = 0;
  for (const text::Batch& b : by_sentences) mean_padded += static_cast<double>(padded_tokens(b));
  mean_padded /= static_cast<double>(by_sentences.size());
  const int64_t budget = plan.batch_tokens > 0 ? plan.batch_tokens : static_cast<int64_t>(std::lround(mean_padded));
  config.batch_tokens = budget;
  std::vector<text::Batch> by_tokens = epoch_batches(*models::load_run_data(config, sentences.vocabs).train);
  config.batch_tokens = 0;
  models::Trainer trainer(config, sentences.vocabs.src, sentences.vocabs.tgt);
  for (auto& [mode, batches] : {std::pair{fmt::format("sentences_{}", config.batch_size), &by_sentences},
                                {fmt::format("tokens_{}", budget), &by_tokens}}) {
    std::vector<text::Batch> sorted = *batches;
    std::sort(sorted.begin(), sorted.end(), [](const text::Batch& a, const text::Batch& b) {
      return std::max(a.src_len_max, a.tgt_len_max) < std::max(b.src_len_max, b.tgt_len_max);
    });
    double rows = 0, tokens = 0;
    for (const text::Batch& b : sorted) {
      rows += static_cast<double>(b.batch);
      tokens += static_cast<double>(padded_tokens(b));
    }
    std::string steps;
    std::vector<double> ms_per_step;
    for (double q : {0.1, 0.3, 0.5, 0.7, 0.9}) {
      const text::Batch& b = sorted[static_cast<size_t>(q * static_cast<double>(sorted.size() - 1))];
      const models::TensorBatch t = models::to_tensors(b);
      std::vector<double> seconds;
      for (int r = 0; r <= std::max(plan.repeats, 1); ++r) {
        auto t0 = Clock::now();
        trainer.train_step(t);
        if (r > 0) seconds.push_back(seconds_since(t0));  // the first is the warm-up
      }
      const double ms = 1e3 * stats_of(seconds).median;
      ms_per_step.push_back(ms);
      steps += fmt::format(" [{}x{}: {:.1f} ms, {:.1f} us/token]", b.batch, std::max(b.src_len_max, b.tgt_len_max), ms,
                           1e3 * ms / static_cast<double>(padded_tokens(b)));
    }
    const double n = static_cast<double>(sorted.size());
    out.report(fmt::format("batching_{}_{}", preset, mode), "ms/step", stats_of(ms_per_step),
               {{"batches", n}, {"padding_pct", 100 * padding_fraction(sorted)}, {"rows_per_batch", rows / n},
                {"padded_tokens_per_batch", tokens / n}},
               "median over five batch lengths");
    if (!out.json) fmt::print("  steps by batch length (rows x longest side, 10th to 90th percentile):{}\n", steps);
  }
}

// ---- data-parallel communication (on demand, under mpirun -np N)

// One synchronised step's ends on every rank (the ranks of one machine share the steady clock):
// the exposed communication is the time from the slower rank's end of backward to the moment the
// last rank has every bucket reduced; waiting for a slower rank's backward is load imbalance, not
// communication, and is left out.
double exposed_seconds(dist::Communicator& job, const nn::DistributedStats& s) {
  const double start = std::chrono::duration<double>(s.last_step_start.time_since_epoch()).count();
  std::vector<double> ends(2 * static_cast<size_t>(job.world_size()), 0.0);  // (backward end, step end) per rank
  ends[2 * job.rank()] = start + s.last_backward_end;
  ends[2 * job.rank() + 1] = start + s.last_step_end;
  Tensor t = from_vector<double>(ends, {static_cast<int64_t>(ends.size())});
  job.allreduce(t);  // each rank filled its own slots
  const std::vector<double> all = t.to_vector<double>();
  double backward_end = 0, step_end = 0;
  for (size_t r = 0; r < all.size(); r += 2) {
    backward_end = std::max(backward_end, all[r]);
    step_end = std::max(step_end, all[r + 1]);
  }
  return step_end - backward_end;
}

// The same buckets reduced with nothing else running: what the allreduces cost unhidden.
std::vector<double> allreduce_alone_seconds(dist::Communicator& job, const std::vector<int64_t>& bucket_bytes,
                                            const Plan& plan) {
  std::vector<Tensor> buckets;
  for (int64_t bytes : bucket_bytes) buckets.push_back(zeros({bytes / 4}));  // float32 gradients
  std::vector<double> seconds;
  for (int r = 0; r < plan.warmup + plan.repeats; ++r) {
    job.barrier();
    auto t0 = Clock::now();
    for (const Tensor& b : buckets) job.allreduce(b, dist::ReduceOp::mean);
    if (r >= plan.warmup) seconds.push_back(seconds_since(t0));
  }
  return seconds;
}

// Training steps of `preset` on N ranks (each its shard of the batches), without and with the
// engine's progress calls (DistributedDataParallelOptions::progress_interval), alternately; rank 0
// reports the exposed communication per step beside the allreduce time alone, and the last step's
// timeline per bucket relative to the end of backward.
void bench_data_parallel(const std::string& preset, const Plan& plan, const Reporter& out) {
  std::shared_ptr<dist::Communicator> job = dist::world();
  SG_CHECK_USAGE(job->world_size() > 1, "bench ddp_{}: run it on several ranks, e.g. mpirun -np 2 seqgrad bench "
                 "ddp_{} --threads 1", preset, preset);
  PresetData d = load_preset(preset, plan.data_dir);
  std::vector<models::TensorBatch> shards;
  for (const text::Batch& b : d.text_batches)
    shards.push_back(models::to_tensors(models::batch_shard(b, job->rank(), job->world_size())));
  const std::vector<std::pair<std::string, std::chrono::microseconds>> modes = {
      {"hooks_only", std::chrono::microseconds(0)},
      {"progress", nn::DistributedDataParallelOptions().progress_interval}};
  std::vector<std::unique_ptr<models::Trainer>> trainers;
  for (const auto& [name, interval] : modes) {
    models::TrainerOptions options{.communicator = job};
    options.data_parallel.progress_interval = interval;
    trainers.push_back(std::make_unique<models::Trainer>(d.config, d.src_vocab, d.tgt_vocab, options));
  }
  std::vector<std::vector<double>> exposed(modes.size()), backward(modes.size());
  for (int r = 0; r < plan.warmup + plan.repeats; ++r)
    for (size_t m = 0; m < modes.size(); ++m)
      for (const models::TensorBatch& shard : shards) {
        trainers[m]->train_step(shard);
        const nn::DistributedStats& s = trainers[m]->data_parallel()->stats();
        const double e = exposed_seconds(*job, s);
        if (r < plan.warmup) continue;
        exposed[m].push_back(e);
        backward[m].push_back(s.last_backward_end);
      }
  const nn::DistributedDataParallel& ddp = *trainers.front()->data_parallel();
  const Stats alone = scaled(allreduce_alone_seconds(*job, ddp.bucket_bytes(), plan), 1e3);
  if (job->rank() != 0) return;
  for (size_t m = 0; m < modes.size(); ++m) {
    const Stats e = scaled(exposed[m], 1e3);
    out.report(fmt::format("ddp_{}_{}", preset, modes[m].first), "ms exposed", e,
               {{"allreduce_alone_ms", alone.median}, {"exposed_fraction", e.median / alone.median},
                {"backward_ms", scaled(backward[m], 1e3).median}, {"ranks", job->world_size()},
                {"mb_per_step", ddp.bytes_per_step() / 1e6}});
    if (out.json) continue;
    const nn::DistributedStats& s = trainers[m]->data_parallel()->stats();
    std::string line = "  rank 0's last step, ms from the end of backward (launched -> seen complete):";
    for (const nn::BucketTimeline& b : s.last_step_buckets)
      line += fmt::format(" [{:.1f} -> {:.1f}]", 1e3 * (b.launched - s.last_backward_end),
                          1e3 * (b.completed - s.last_backward_end));
    fmt::print("{}\n", line);
  }
}

// ---- export: the batches, decode sentence and initial weights for bench/torch_bench.py

// The decoding input as --export writes it: the GRU presets' one sentence as "decode_src" (ids);
// the transformer's batch as "decode_batch", with seqgrad's greedy and beam-5 tokens and scores for
// it, float32 and int8, which torch_bench.py and ort_bench.py check their own against (same float32
// weights: the same tokens, the scores to float32 rounding; int8: each side quantizes its own way,
// so they differ a little). The untrained model tends to repeat one token, so the scores, which
// every layer and cached position feeds, are the sharper check.
void export_decode_input(nlohmann::json& j, const PresetData& d) {
  j["decode_max_len"] = kDecodeMaxLen;
  if (d.decode_src.size(0) == 1) {
    j["decode_src"] = d.decode_src.to_vector<int64_t>();
    return;
  }
  j["decode_batch"] = {{"src", d.decode_src.to_vector<int64_t>()},
                       {"src_shape", {d.decode_src.size(0), d.decode_src.size(1)}},
                       {"src_lengths", d.decode_lengths.to_vector<int64_t>()}};
  for (bool int8 : {false, true}) {  // the int8 rows are checked against seqgrad's int8 model
    auto model = make_model(d);
    if (int8) nn::quantize_dynamic(*model);
    for (int64_t beam : {1, 5}) {
      const std::string workload = decode_workload(d.config.preset, beam, int8);
      nlohmann::json &tokens = j["decode_tokens"][workload], &scores = j["decode_scores"][workload];
      tokens = scores = nlohmann::json::array();
      for (const models::Hypothesis& h : decode_input(*model, d, beam)) tokens.push_back(h.tokens), scores.push_back(h.score);
    }
  }
}

void export_preset(const std::string& preset, const std::string& data_dir, const std::string& dir) {
  PresetData d = load_preset(preset, data_dir);
  nlohmann::json j;
  j["preset"] = preset;
  j["config"] = d.config.to_json();
  export_decode_input(j, d);
  for (size_t i = 0; i < d.batches.size(); ++i) {
    const models::TensorBatch& b = d.batches[i];
    j["batches"].push_back({{"src", b.src.to_vector<int64_t>()},
                            {"src_shape", {b.src.size(0), b.src.size(1)}},
                            {"src_lengths", b.src_lengths.to_vector<int64_t>()},
                            {"tgt_in", b.tgt_in.to_vector<int64_t>()},
                            {"tgt_out", b.tgt_out.to_vector<int64_t>()},
                            {"tgt_shape", {b.tgt_in.size(0), b.tgt_in.size(1)}},
                            {"target_tokens", b.target_tokens},
                            {"gemm_flops", d.flops[i]}});
  }
  std::ofstream(dir + "/" + preset + ".json") << j.dump();
  save_tensors(dir + "/" + preset + ".safetensors", make_model(d)->state_dict());
  fmt::print("exported {0}/{1}.json and {0}/{1}.safetensors\n", dir, preset);
}

const std::vector<std::string> kWorkloads = {
    "sgemm",       "step_seed",   "step_d2l",   "step_transformer", "attention", "attention_projected", "gru",
    "linear_ce",   "op_overhead", "greedy_seed", "beam5_seed",      "greedy_d2l", "beam5_d2l",          "memory_seed",
    "memory_d2l",  "greedy_seed_int8", "beam5_seed_int8", "step_seed_bf16", "step_transformer_bf16",
    "greedy_transformer", "beam5_transformer", "greedy_transformer_int8", "beam5_transformer_int8"};

// On demand only (minutes at S = 8192), not in the default list: see bench_attention_chunked.
const char* kAttentionChunked = "attention_chunked";
// On demand: see bench_batching.
const std::vector<std::string> kBatching = {"batching_default", "batching_seed"};
// On demand, under mpirun: see bench_data_parallel.
const std::vector<std::string> kDataParallel = {"ddp_seed", "ddp_default"};

void run_workload(const std::string& w, const Plan& plan, const Reporter& out) {
  if (w == kAttentionChunked) return bench_attention_chunked(plan, plan.max_seq, out);
  if (std::find(kBatching.begin(), kBatching.end(), w) != kBatching.end())
    return bench_batching(w.substr(9), plan, out);
  if (std::find(kDataParallel.begin(), kDataParallel.end(), w) != kDataParallel.end())
    return (void)dist::run_on_every_rank([&] {  // an error on one rank ends the job, not a hang
      bench_data_parallel(w.substr(4), plan, out);
      return 0;
    });
  if (w == "sgemm") return bench_sgemm(plan, out);
  if (w == "step_seed" || w == "step_d2l" || w == "step_transformer") return bench_step(w.substr(5), plan, out);
  if (w == "memory_seed" || w == "memory_d2l") return bench_memory(w.substr(7), plan, out);
  if (w == "attention") return bench_attention(false, plan, out);
  if (w == "attention_projected") return bench_attention(true, plan, out);
  if (w == "gru") return bench_gru(plan, out);
  if (w == "linear_ce") {
    PresetData d = load_preset("seed", plan.data_dir);
    return bench_linear_ce(d.config.model.tgt_vocab, plan, out);
  }
  if (w == "op_overhead") return bench_overhead(plan, out);
  if (w == "greedy_seed" || w == "greedy_d2l" || w == "greedy_transformer") return bench_decode(w.substr(7), 1, plan, out);
  if (w == "beam5_seed" || w == "beam5_d2l" || w == "beam5_transformer") return bench_decode(w.substr(6), 5, plan, out);
  for (const char* preset : {"seed", "transformer"})  // greedy_seed_int8, ..., beam5_transformer_int8
    for (int64_t beam : {1, 5})
      if (w == decode_workload(preset, beam, true)) return bench_decode(preset, beam, plan, out, true);
  for (const char* preset : {"seed", "transformer"})  // step_seed_bf16, step_transformer_bf16
    if (w == fmt::format("step_{}_bf16", preset)) return bench_step(preset, plan, out, "bf16");
  std::string names;
  for (const std::string& n : kWorkloads) names += " " + n;
  names += fmt::format(" (on demand: {}, {}, {} under mpirun)", kAttentionChunked, fmt::join(kBatching, ", "),
                       fmt::join(kDataParallel, ", "));
  throw ValueError(fmt::format("bench: unknown workload '{}'; choose from:{}", w, names));
}

}  // namespace

int bench_main(int argc, char** argv) {
  Args args("bench", "Timed workloads: training steps of the seq2seq presets on real batches (the Transformer\n"
                     "preset's on synthetic ones of its shapes), attention, GRU,\n"
                     "Linear + cross-entropy, per-op overhead, decoding (one sentence's latency; the Transformer:\n"
                     "a batch's throughput), peak memory and the sgemm roof.\n"
                     "Each prints the median and spread (p10, p90) of repeated runs after warm-up.\n"
                     "bench/run.sh runs these and bench/torch_bench.py side by side.");
  args.positional("workload", "workloads to run (default: all)")
      .option("threads", "n", "threads (default: all cores)")
      .option("repeats", "n", "timed samples per workload", "7")
      .option("warmup", "n", "untimed runs first", "2")
      .option("quick", "", "a smoke run: 1 warm-up, 2 samples, single iterations (no meaningful timings)")
      .option("data-dir", "dir", "folder holding multi30k/ and fra-eng/", "data")
      .option("json", "", "one JSON line per result on stdout instead of text")
      .option("out-file", "file", "also append one JSON line per result to this file")
      .quiet_option()  // the header line
      .option("export", "dir", "write the presets' batches and initial weights for bench/torch_bench.py, then exit")
      .option("list", "", "list the workloads")
      .option("max-seq", "n", "attention_chunked (on demand, not run by default): S = 128, 256, ... up to n", "8192")
      .option("batch-tokens", "n", "batching_* (on demand): the token budget (0 = the sentence batches' mean "
              "padded tokens, rows x longest side)", "0");
  if (!args.parse(argc, argv)) return 0;
  if (args.flag("list")) {
    for (const std::string& w : kWorkloads) fmt::print("{}\n", w);
    fmt::print("{} (on demand)\n", kAttentionChunked);
    for (const std::string& w : kBatching) fmt::print("{} (on demand)\n", w);
    for (const std::string& w : kDataParallel) fmt::print("{} (on demand)\n", w);  // under mpirun -np N
    return 0;
  }
  apply_threads_flag(args);
  Plan plan;
  plan.data_dir = args.get("data-dir");
  plan.repeats = args.get_int32("repeats", 1);
  plan.warmup = args.get_int32("warmup", 0);
  plan.max_seq = args.get_int("max-seq");
  SG_CHECK_VALUE(plan.max_seq >= 128, "bench: --max-seq {} must be >= 128", plan.max_seq);
  plan.batch_tokens = args.get_int("batch-tokens", 0);
  if (args.flag("quick")) plan.quick = true, plan.repeats = 2, plan.warmup = 1;
  SG_CHECK_USAGE(plan.repeats >= 1 && plan.warmup >= 0, "bench: --repeats {} must be >= 1 and --warmup {} >= 0",
                 plan.repeats, plan.warmup);
  if (args.has("export")) {
    for (const char* preset : {"seed", "d2l", "transformer"}) export_preset(preset, plan.data_dir, args.get("export"));
    return 0;
  }
  Reporter out{args.has("out-file") ? args.get("out-file") : "", args.flag("json"), get_num_threads()};
  if (!out.json_path.empty()) {  // fail now, not after the first workload's minutes
    std::filesystem::path dir = std::filesystem::path(out.json_path).parent_path();
    SG_CHECK_IO(dir.empty() || std::filesystem::is_directory(dir), "bench --out-file {}: the folder {} does not exist",
                out.json_path, dir.string());
    SG_CHECK_IO(!std::filesystem::is_directory(out.json_path), "bench --out-file {}: is a folder, not a file",
                out.json_path);
  }
  const bool first_rank = !dist::launched_by_mpi() || dist::world()->rank() == 0;  // one header under mpirun
  if (!args.flag("quiet") && !out.json && first_rank)
    fmt::print("seqgrad bench: {} threads, BLAS {}, CPU kernels {}, load average {:.2f}\n", get_num_threads(),
               blas::describe(), cpu::kernel_isa(), load_average());
  std::vector<std::string> workloads = args.positionals().empty() ? kWorkloads : args.positionals();
  for (const std::string& w : workloads) run_workload(w, plan, out);
  return 0;
}

}  // namespace seqgrad::tools
