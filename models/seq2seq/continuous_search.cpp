// Continuous batching of greedy and beam search (models/seq2seq/continuous_search.h).
#include "models/seq2seq/continuous_search.h"

#include <algorithm>
#include <iterator>
#include <limits>
#include <utility>

#include <fmt/core.h>

namespace seqgrad::models {
namespace {

// The sentences' ids padded with <pad> (0) to the longest, (B, S), and their lengths (B,).
std::pair<Tensor, Tensor> padded_batch(const std::vector<std::vector<int64_t>>& sentences) {
  int64_t longest = 0;
  for (const auto& s : sentences) longest = std::max<int64_t>(longest, static_cast<int64_t>(s.size()));
  std::vector<int64_t> ids, lengths;
  for (const auto& s : sentences) {
    ids.insert(ids.end(), s.begin(), s.end());
    ids.insert(ids.end(), longest - static_cast<int64_t>(s.size()), 0);
    lengths.push_back(static_cast<int64_t>(s.size()));
  }
  const auto batch = static_cast<int64_t>(sentences.size());
  return {from_vector(ids, {batch, longest}, {.dtype = DType::i64}), from_vector(lengths, {batch}, {.dtype = DType::i64})};
}

bool greedy(const DecodeOptions& options) { return options.beam_size == 1; }

// The log-probabilities (N, V) with <eos> forbidden (-inf) in the rows of sentences that have
// produced fewer than their min_len tokens (as decode.h's searches forbid it for a whole batch).
Tensor forbid_early_eos_rows(const Tensor& log_probs, const std::vector<const DecodeOptions*>& row_options,
                             const std::vector<int64_t>& row_produced) {
  const int64_t vocab = log_probs.size(1);
  std::vector<float> barrier;
  for (size_t r = 0; r < row_options.size(); ++r) {
    if (row_produced[r] >= row_options[r]->min_len) continue;
    if (barrier.empty()) barrier.assign(row_options.size() * vocab, 0.0F);
    barrier[r * vocab + row_options[r]->eos_id] = -std::numeric_limits<float>::infinity();
  }
  if (barrier.empty()) return log_probs;
  return add(log_probs, from_vector(barrier, log_probs.shape(), {.dtype = log_probs.dtype(), .device = log_probs.device()}));
}

}  // namespace

int64_t search_state_bytes(const Seq2SeqConfig& model, int64_t rows, int64_t src_len, int64_t positions) {
  const int64_t H = model.hidden_size, L = model.num_layers, A = model.attention_size > 0 ? model.attention_size : H;
  const int64_t per_row = model.architecture == Architecture::transformer ? 2 * L * H * (src_len + positions)
                                                                          : (4 * H + A) * src_len + L * H;
  return rows * per_row * static_cast<int64_t>(sizeof(float));
}

ContinuousSearch::ContinuousSearch(const Ensemble& models) : models_(models), eval_(models_) {}

std::vector<int64_t> ContinuousSearch::add(const std::vector<std::vector<int64_t>>& sentences,
                                           const DecodeOptions& options, bool record_trees) {
  options.validate();
  SG_CHECK_VALUE(!options.sampling, "ContinuousSearch: sampling is not offered (DecodeOptions.sampling is set)");
  SG_CHECK_VALUE(!sentences.empty(), "ContinuousSearch::add: no sentences");
  for (size_t i = 0; i < sentences.size(); ++i)
    SG_CHECK_VALUE(!sentences[i].empty(), "ContinuousSearch::add: sentence {} has no tokens", i);
  NoGradGuard no_grad;
  auto [src, lengths] = padded_batch(sentences);
  Cohort joining{search::Stepper(models_, src, lengths), {}};
  std::vector<int64_t> ids;
  for (const auto& s : sentences) {
    Hypothesis empty;
    empty.finished = false;
    Sentence sentence{next_id_++, options, static_cast<int64_t>(s.size()), 0, {}, std::nullopt};
    sentence.beams.open.push_back({empty, options.bos_id});
    if (record_trees && !greedy(options)) sentence.tree.emplace();
    ids.push_back(sentence.id);
    joining.sentences.push_back(std::move(sentence));
  }
  for (Cohort& cohort : cohorts_) {
    if (!cohort.stepper.can_append(joining.stepper)) continue;
    cohort.stepper.append(std::move(joining.stepper));
    std::move(joining.sentences.begin(), joining.sentences.end(), std::back_inserter(cohort.sentences));
    return ids;
  }
  cohorts_.push_back(std::move(joining));
  return ids;
}

int64_t ContinuousSearch::sentences() const {
  int64_t n = 0;
  for (const Cohort& c : cohorts_) n += static_cast<int64_t>(c.sentences.size());
  return n;
}

int64_t ContinuousSearch::rows() const {
  int64_t n = 0;
  for (const Cohort& c : cohorts_)
    for (const Sentence& s : c.sentences) n += static_cast<int64_t>(s.beams.open.size());
  return n;
}

std::vector<ContinuousSearch::Finished> ContinuousSearch::step() {
  NoGradGuard no_grad;
  std::vector<Finished> done;
  std::erase_if(cohorts_, [&](Cohort& cohort) {
    std::vector<int64_t> ids;  // the cohort's sentences before the step, to answer if it throws
    for (const Sentence& s : cohort.sentences) ids.push_back(s.id);
    const size_t before = done.size();
    try {
      return !step_cohort(cohort, done);
    } catch (...) {  // its sentences fail (but those it finished before throwing); the rest go on
      const std::exception_ptr error = std::current_exception();
      for (int64_t id : ids)
        if (std::none_of(done.begin() + static_cast<std::ptrdiff_t>(before), done.end(),
                         [&](const Finished& f) { return f.id == id; }))
          done.push_back({id, {}, std::nullopt, error});
      return true;
    }
  });
  return done;
}

bool ContinuousSearch::step_cohort(Cohort& cohort, std::vector<Finished>& done) {
  // the rows: each sentence's open hypotheses, in order
  std::vector<const search::SentenceBeams::Open*> row_owner;
  std::vector<const DecodeOptions*> row_options;
  std::vector<int64_t> row_produced, last;
  int64_t width = 1, alternatives = 0;  // the top tokens each row needs, at most
  for (const Sentence& s : cohort.sentences) {
    for (const search::SentenceBeams::Open& o : s.beams.open) {
      row_owner.push_back(&o), row_options.push_back(&s.options), row_produced.push_back(s.produced);
      last.push_back(o.last);
    }
    width = std::max(width, greedy(s.options) ? 1 : 2 * s.options.beam_size);
    alternatives = std::max(alternatives, s.options.top_alternatives);
  }
  search::Stepper::Output out = cohort.stepper.step(search::ids_tensor(last, Device::cpu()));
  // beam search: 2 * beam_size continuations per row (at most one is <eos>); greedy: the argmax
  // (topk ranks ties by index, as argmax picks the first, so one topk serves every sentence)
  Tensor log_probs = forbid_early_eos_rows(out.log_probs, row_options, row_produced).to(DType::f64);  // (N, V)
  const int64_t vocab = log_probs.size(1);
  width = std::min(width, vocab);
  auto [top_lp_t, top_id_t] = topk(log_probs, width, -1);
  const std::vector<double> top_lp = top_lp_t.to_vector<double>();
  const std::vector<int64_t> top_id = top_id_t.to_vector<int64_t>();
  search::HostStep rows{search::HostRows(out.weights), search::HostRows(out.energies),
                        search::HostAlternatives(out.log_probs, alternatives)};

  std::vector<int64_t> parents;
  std::vector<Sentence> live;
  int64_t first = 0;
  for (Sentence& s : cohort.sentences) {
    const auto count = static_cast<int64_t>(s.beams.open.size());
    std::vector<int64_t> kept;
    if (greedy(s.options)) {
      Hypothesis& h = s.beams.open.front().hyp;
      const int64_t token = top_id[first * width];
      rows.append(h, first, s.src_len, top_lp[first * width], s.options);
      if (token == s.options.eos_id) {
        h.finished = true;
      } else {
        h.tokens.push_back(token);
        s.beams.open.front().last = token;
        kept.push_back(first);
      }
    } else {
      const int64_t take = std::min(2 * s.options.beam_size, vocab);
      kept = search::advance_sentence(s.beams, search::ranked_candidates(row_owner, top_lp, top_id, width, take, first,
                                                                        count),
                                      row_owner, rows, s.src_len, s.produced, s.options, s.tree ? &*s.tree : nullptr);
    }
    first += count;
    ++s.produced;
    if (kept.empty() || s.produced == s.options.max_len) {
      if (greedy(s.options)) {
        Hypothesis h = std::move(s.beams.open.front().hyp);
        h.score = h.log_prob;  // greedy_decode's score
        done.push_back({s.id, {std::move(h)}, std::nullopt, nullptr});
      } else {
        done.push_back({s.id, search::ranked_hypotheses(s.beams, s.options), std::move(s.tree), nullptr});
      }
      continue;
    }
    parents.insert(parents.end(), kept.begin(), kept.end());
    live.push_back(std::move(s));
  }
  cohort.sentences = std::move(live);
  if (parents.empty()) return false;
  cohort.stepper.keep_rows(parents);
  return true;
}

}  // namespace seqgrad::models
