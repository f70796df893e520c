// Greedy decoding, sampling, beam search and forced decoding for the seq2seq model (one model or
// an ensemble), all batched over sentences.
#include "models/seq2seq/decode.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <tuple>

#include <fmt/core.h>

#include "models/seq2seq/search_step.h"

namespace seqgrad::models {

using search::advance_sentence;
using search::HostAlternatives;
using search::HostRows;
using search::HostStep;
using search::ids_tensor;
using search::mean_probability_log;
using search::SentenceBeams;
using search::Stepper;

EvalScope::EvalScope(const Ensemble& models) {
  for (TranslationModel* m : models.members()) was_training_.emplace_back(m, m->is_training()), m->eval();
}

EvalScope::~EvalScope() {
  for (auto [m, training] : was_training_) m->train(training);
}

Ensemble::Ensemble(std::vector<TranslationModel*> members) : members_(std::move(members)) {
  SG_CHECK_VALUE(!members_.empty(), "Ensemble: no models");
  for (size_t m = 0; m < members_.size(); ++m) {
    SG_CHECK_VALUE(members_[m] != nullptr, "Ensemble: model {} is null", m);
    SG_CHECK_VALUE(members_[m]->target_vocab() == first().target_vocab(),
                   "Ensemble: model {} has a target vocabulary of {} tokens, model 0 one of {}: the averaged "
                   "distributions must be over the same tokens", m, members_[m]->target_vocab(),
                   first().target_vocab());
  }
}

Tensor Ensemble::forward(const Tensor& src, const Tensor& src_lengths, const Tensor& tgt_in) const {
  if (members_.size() == 1) return first()(src, src_lengths, tgt_in);
  std::vector<Tensor> log_probs;
  for (TranslationModel* m : members_) log_probs.push_back(log_softmax((*m)(src, src_lengths, tgt_in), -1));
  return mean_probability_log(log_probs);
}

namespace {

// The step's log-probabilities (N, V) with <eos> forbidden (-inf) while fewer than min_len tokens
// have been produced; the other tokens keep theirs (not renormalised, as in fairseq and OpenNMT-py).
Tensor forbid_early_eos(const Tensor& log_probs, int64_t produced, const DecodeOptions& options) {
  if (produced >= options.min_len) return log_probs;
  std::vector<double> barrier(log_probs.size(1), 0.0);
  barrier[options.eos_id] = -std::numeric_limits<double>::infinity();
  return add(log_probs, from_vector(barrier, {log_probs.size(1)},
                                    {.dtype = log_probs.dtype(), .device = log_probs.device()}));
}

// The index drawn with uniform u in [0, 1) from `probs` (one row, most probable first, not
// necessarily summing to 1) cut to the nucleus: the fewest leading entries whose sum reaches
// top_p of the row's total.
int64_t draw_sorted(const double* probs, int64_t n, double top_p, double u) {
  double total = 0;
  for (int64_t i = 0; i < n; ++i) total += probs[i];
  int64_t kept = 0;
  double nucleus = 0;
  while (kept < n && (kept == 0 || nucleus < top_p * total)) nucleus += probs[kept++];
  double target = u * nucleus, cumulative = 0;
  int64_t last_possible = 0;
  for (int64_t i = 0; i < kept; ++i) {
    if (probs[i] <= 0) continue;
    last_possible = i;
    cumulative += probs[i];
    if (cumulative > target) return i;
  }
  return last_possible;  // rounding left target at the nucleus's end
}

// One token per row of the step's log-probabilities (N, V), drawn as options.sampling says with
// uniforms[r] for row r; returns the ids (N,) on the log-probabilities' device.
Tensor sample_tokens(const Tensor& log_probs, const SamplingOptions& s, const std::vector<double>& uniforms) {
  Tensor lp = s.temperature == 1.0 ? log_probs : log_softmax(mul(log_probs, 1.0 / s.temperature), -1);
  const int64_t vocab = lp.size(1);
  ValuesIndices sorted;  // (N, k): the top-k, or the whole row, most probable first
  if (s.top_k > 0) std::tie(sorted.values, sorted.indices) = topk(lp, std::min(s.top_k, vocab), -1);
  else sorted = sort(lp, -1, true);
  const Tensor &sorted_lp = sorted.values, &sorted_ids = sorted.indices;
  const int64_t k = sorted_lp.size(1);
  std::vector<double> probs = exp(sorted_lp).to_vector<double>();
  std::vector<int64_t> ids = sorted_ids.to_vector<int64_t>(), picked;
  for (size_t r = 0; r < uniforms.size(); ++r)
    picked.push_back(ids[r * k + draw_sorted(probs.data() + r * k, k, s.top_p, uniforms[r])]);
  return ids_tensor(picked, log_probs.device());
}

// Greedy decoding and sampling: one hypothesis per sentence, each step's token picked by
// pick(log_probs (N, V) with early <eos> forbidden, step, live) -> ids (N,) on the device, where
// row r extends sentence live[r]. A sentence whose hypothesis ends leaves the decoder's rows, so a
// step computes only the unfinished ones (under batch invariance the others' bits do not change).
template <class Pick>
std::vector<Hypothesis> decode_one_each(const Ensemble& models, const Tensor& src, const Tensor& lengths,
                                        const DecodeOptions& options, Pick pick) {
  options.validate();
  NoGradGuard no_grad;
  EvalScope eval(models);
  const int64_t batch = src.size(0);
  std::vector<int64_t> src_len = lengths.to_vector<int64_t>();
  Stepper stepper(models, src, lengths);
  Tensor y = full({batch}, static_cast<double>(options.bos_id), {.dtype = DType::i64, .device = src.device()});
  std::vector<Hypothesis> out(batch);
  for (Hypothesis& h : out) h.finished = false;
  std::vector<int64_t> live(batch);  // the sentence of each decoder row
  std::iota(live.begin(), live.end(), int64_t{0});
  for (int64_t t = 0; t < options.max_len && !live.empty(); ++t) {
    Stepper::Output s = stepper.step(y);
    y = pick(forbid_early_eos(s.log_probs, t, options), t, live);
    std::vector<int64_t> ids = y.to_vector<int64_t>();
    std::vector<double> lp = gather(s.log_probs, 1, y.unsqueeze(1)).squeeze(1).to_vector<double>();
    HostStep rows{HostRows(s.weights), HostRows(s.energies), HostAlternatives(s.log_probs, options.top_alternatives)};
    std::vector<int64_t> going_on;  // the rows whose sentences continue
    for (size_t r = 0; r < live.size(); ++r) {
      Hypothesis& h = out[live[r]];
      rows.append(h, static_cast<int64_t>(r), src_len[live[r]], lp[r], options);
      if (ids[r] == options.eos_id) h.finished = true;
      else h.tokens.push_back(ids[r]), going_on.push_back(static_cast<int64_t>(r));
    }
    if (going_on.size() == live.size() || going_on.empty()) {
      if (going_on.empty()) live.clear();
      continue;
    }
    stepper.keep_rows(going_on);
    y = index_select(y, 0, ids_tensor(going_on, y.device()));
    std::vector<int64_t> still;
    for (int64_t r : going_on) still.push_back(live[r]);
    live = std::move(still);
  }
  for (Hypothesis& h : out) h.score = h.log_prob;
  return out;
}

// A source position that no step attended to would make log(0) = -inf: its coverage is floored
// at this, so the penalty stays finite (and very large) and the hypothesis still ranks.
constexpr double kCoverageFloor = 1e-10;

}  // namespace

double final_score(const Hypothesis& h, const DecodeOptions& options) {
  const double length = static_cast<double>(h.tokens.size()) + (h.finished ? 1 : 0);  // <eos> counts
  const double penalty = options.length_penalty_kind == LengthPenalty::gnmt
                             ? std::pow((5.0 + length) / 6.0, options.length_penalty)
                             : std::pow(std::max(length, 1.0), options.length_penalty);
  double score = h.log_prob / penalty;
  if (options.coverage_penalty == 0 || h.attention.empty()) return score;
  std::vector<double> coverage(h.attention.front().size(), 0.0);  // sum over target steps j of a_ij
  for (const std::vector<float>& row : h.attention)
    for (size_t i = 0; i < row.size(); ++i) coverage[i] += row[i];
  double log_coverage = 0;
  for (double c : coverage) log_coverage += std::log(std::max(std::min(c, 1.0), kCoverageFloor));
  return score + options.coverage_penalty * log_coverage;
}

std::vector<Hypothesis> greedy_decode(const Ensemble& models, const Tensor& src, const Tensor& lengths,
                                      const DecodeOptions& options) {
  return decode_one_each(models, src, lengths, options, [](const Tensor& log_probs, int64_t, const auto&) {
    return argmax(log_probs, -1);
  });
}

std::vector<Hypothesis> sample_decode(const Ensemble& models, const Tensor& src, const Tensor& lengths,
                                      const DecodeOptions& options, Generator& generator) {
  SG_CHECK_VALUE(options.sampling.has_value(), "sample_decode: DecodeOptions.sampling is not set");
  options.validate();
  const int64_t batch = src.size(0);
  const uint64_t first = generator.reserve(static_cast<uint64_t>(batch * options.max_len));
  return decode_one_each(models, src, lengths, options,
                         [&](const Tensor& log_probs, int64_t t, const std::vector<int64_t>& live) {
    std::vector<double> uniforms;  // one counter per (sentence, step): see the header
    for (int64_t b : live)
      uniforms.push_back(uniform_at_f64(generator.seed(), first + static_cast<uint64_t>(b * options.max_len + t), 0));
    return sample_tokens(log_probs, *options.sampling, uniforms);
  });
}

const char* beam_fate_name(BeamNode::Fate fate) {
  switch (fate) {
    case BeamNode::Fate::kept: return "kept";
    case BeamNode::Fate::finished: return "finished";
    case BeamNode::Fate::pruned: return "pruned";
  }
  return "?";
}

std::vector<std::vector<Hypothesis>> beam_search(const Ensemble& models, const Tensor& src, const Tensor& lengths,
                                                 const DecodeOptions& options, std::vector<BeamTree>* trees) {
  SG_CHECK_SHAPE(src.ndim() == 2 && lengths.ndim() == 1 && lengths.size(0) == src.size(0),
                 "beam_search: expects src (B, S) and lengths (B,), got {} and {}", src.shape(), lengths.shape());
  options.validate();
  NoGradGuard no_grad;
  EvalScope eval(models);
  const Device device = src.device();
  int64_t batch = src.size(0);
  std::vector<int64_t> src_len = lengths.to_vector<int64_t>();
  Stepper stepper(models, src, lengths);

  std::vector<SentenceBeams> sentences(batch);
  if (trees != nullptr) trees->assign(batch, {});
  Hypothesis empty;
  empty.finished = false;
  for (SentenceBeams& s : sentences) s.open.push_back({empty, options.bos_id});
  std::vector<int64_t> owner;  // the sentence of each decoder row
  for (int64_t t = 0; t < options.max_len; ++t) {
    std::vector<const SentenceBeams::Open*> row_hyp;
    std::vector<int64_t> last;
    owner.clear();
    for (int64_t b = 0; b < batch; ++b)
      for (const SentenceBeams::Open& o : sentences[b].open) owner.push_back(b), row_hyp.push_back(&o), last.push_back(o.last);
    if (owner.empty()) break;  // every sentence is done
    Stepper::Output s = stepper.step(ids_tensor(last, device));
    Tensor log_probs = forbid_early_eos(s.log_probs, t, options);  // (N, V)
    // 2 * beam_size continuations per row: at most one is <eos>, so beam_size open ones remain.
    // Ranked in the model's dtype; only they are widened to double (exactly, in the same order).
    auto [top_lp, top_id] = topk(log_probs, std::min(2 * options.beam_size, log_probs.size(1)), -1);
    std::vector<double> lp = top_lp.to_vector<double>();
    std::vector<int64_t> ids = top_id.to_vector<int64_t>();
    int64_t k = top_lp.size(1);
    HostStep rows{HostRows(s.weights), HostRows(s.energies), HostAlternatives(s.log_probs, options.top_alternatives)};
    std::vector<int64_t> parents;
    for (int64_t b = 0, r = 0; b < batch; ++b) {
      int64_t n_rows = static_cast<int64_t>(sentences[b].open.size());
      std::vector<search::Candidate> candidates = search::ranked_candidates(row_hyp, lp, ids, k, k, r, n_rows);
      r += n_rows;
      SentenceBeams updated{{}, std::move(sentences[b].finished)};
      if (n_rows > 0) {
        std::vector<int64_t> p = advance_sentence(updated, candidates, row_hyp, rows, src_len[b], t, options,
                                                  trees != nullptr ? &(*trees)[b] : nullptr);
        parents.insert(parents.end(), p.begin(), p.end());
      }
      SG_CHECK(static_cast<int64_t>(updated.finished.size()) >= options.beam_size || !updated.open.empty(),
               "beam_search: sentence {} has neither beam_size finished nor open hypotheses", b);
      sentences[b] = std::move(updated);  // done when beam_size finished: advance_sentence left none open
    }
    if (parents.empty()) break;
    stepper.keep_rows(parents);
  }
  std::vector<std::vector<Hypothesis>> out(batch);
  for (int64_t b = 0; b < batch; ++b) out[b] = search::ranked_hypotheses(sentences[b], options);
  return out;
}

std::vector<Hypothesis> decode(const Ensemble& models, const Tensor& src, const Tensor& lengths,
                               const DecodeOptions& options, Generator* generator) {
  if (options.sampling) {
    Generator seeded(options.sampling->seed);
    return sample_decode(models, src, lengths, options, generator ? *generator : seeded);
  }
  if (options.beam_size <= 1) return greedy_decode(models, src, lengths, options);
  DecodeOptions best_only = options;
  best_only.nbest = 1;
  std::vector<Hypothesis> out;
  for (std::vector<Hypothesis>& ranked : beam_search(models, src, lengths, best_only)) out.push_back(std::move(ranked.front()));
  return out;
}

std::vector<Hypothesis> score_targets(const Ensemble& models, const Tensor& src, const Tensor& lengths,
                                      const std::vector<std::vector<int64_t>>& targets, const DecodeOptions& options) {
  const int64_t batch = src.size(0), vocab = models.first().target_vocab();
  SG_CHECK_VALUE(static_cast<int64_t>(targets.size()) == batch, "score_targets: {} targets for {} source sentences",
                 targets.size(), batch);
  size_t longest = 0;
  for (size_t b = 0; b < targets.size(); ++b) {
    longest = std::max(longest, targets[b].size());
    for (size_t t = 0; t < targets[b].size(); ++t)
      SG_CHECK_VALUE(targets[b][t] >= 0 && targets[b][t] < vocab, "score_targets: targets[{}][{}] = {} not in [0, {})",
                     b, t, targets[b][t], vocab);
  }
  options.validate();
  NoGradGuard no_grad;
  EvalScope eval(models);
  std::vector<int64_t> src_len = lengths.to_vector<int64_t>();
  Stepper stepper(models, src, lengths);
  std::vector<Hypothesis> out(batch);
  Tensor y = full({batch}, static_cast<double>(options.bos_id), {.dtype = DType::i64, .device = src.device()});
  for (size_t t = 0; t <= longest; ++t) {  // step t scores token t, or <eos> after the last
    std::vector<int64_t> next;
    for (const std::vector<int64_t>& target : targets) next.push_back(t < target.size() ? target[t] : options.eos_id);
    Stepper::Output s = stepper.step(y);
    y = ids_tensor(next, src.device());
    std::vector<double> lp = gather(s.log_probs, 1, y.unsqueeze(1)).squeeze(1).to_vector<double>();
    HostStep rows{HostRows(s.weights), HostRows(s.energies), HostAlternatives(s.log_probs, options.top_alternatives)};
    for (int64_t b = 0; b < batch; ++b) {
      if (t > targets[b].size()) continue;  // scored to its <eos> already
      rows.append(out[b], b, src_len[b], lp[b], options);
      if (t < targets[b].size()) out[b].tokens.push_back(next[b]);
    }
  }
  for (Hypothesis& h : out) h.score = final_score(h, options);
  return out;
}

}  // namespace seqgrad::models
