// One decoder step of a search, shared by the batch and continuous searches (search_step.h).
#include "models/seq2seq/search_step.h"

#include <algorithm>
#include <cmath>

#include "ops/batch_invariant.h"

namespace seqgrad::models::search {

Tensor mean_probability_log(const std::vector<Tensor>& member_log_probs) {
  if (member_log_probs.size() == 1) return member_log_probs.front();
  const auto m = static_cast<double>(member_log_probs.size());
  return add(logsumexp(stack(member_log_probs, 0), {0}), -std::log(m));
}

Tensor ids_tensor(const std::vector<int64_t>& ids, Device device) {
  return from_vector(ids, {static_cast<int64_t>(ids.size())}, {.dtype = DType::i64, .device = device});
}

HostRows::HostRows(const Tensor& rows)
    : values_(rows.defined() ? rows.to_vector<float>() : std::vector<float>{}), cols_(rows.defined() ? rows.size(1) : 0) {}

std::vector<float> HostRows::row(int64_t r, int64_t length) const {
  auto begin = values_.begin() + r * cols_;
  return {begin, begin + length};
}

HostAlternatives::HostAlternatives(const Tensor& log_probs, int64_t k) {
  if (k == 0) return;
  auto [top_lp, top_id] = topk(log_probs, std::min(k, log_probs.size(1)), -1);
  k_ = top_lp.size(1);
  probabilities_ = exp(top_lp).to_vector<float>();
  tokens_ = top_id.to_vector<int64_t>();
}

std::vector<Alternative> HostAlternatives::row(int64_t r, int64_t k) const {
  std::vector<Alternative> out;
  for (int64_t j = r * k_; j < r * k_ + std::min(k, k_); ++j) out.push_back({tokens_[j], probabilities_[j]});
  return out;
}

void HostStep::append(Hypothesis& h, int64_t r, int64_t src_len, double token_log_prob,
                      const DecodeOptions& options) const {
  h.attention.push_back(weights.row(r, src_len));
  if (energies.defined()) h.energies.push_back(energies.row(r, src_len));
  if (alternatives.defined() && options.top_alternatives > 0)
    h.alternatives.push_back(alternatives.row(r, options.top_alternatives));
  h.token_log_probs.push_back(token_log_prob);
  h.log_prob += token_log_prob;
}

// Every search encodes and steps here, under BatchInvariantMode: a row's products, and so its
// logits, have the same bits whatever rows share its batch (alone, in a translate batch, under a
// server's load), and a source padded to a longer batch's length keeps its own.
Stepper::Stepper(const Ensemble& models, const Tensor& src, const Tensor& lengths) {
  BatchInvariantMode invariant;
  for (TranslationModel* m : models.members()) members_.push_back({m, m->start(src, lengths)});
}

Stepper::Output Stepper::step(const Tensor& y_prev) {
  BatchInvariantMode invariant;
  Output out;
  std::vector<Tensor> log_probs;
  for (Member& m : members_) {
    TranslationModel::StepOutput s = m.model->step(*m.state, y_prev);
    log_probs.push_back(log_softmax(s.logits, -1));
    if (!out.weights.defined()) out.weights = s.weights, out.energies = s.energies;
  }
  out.log_probs = mean_probability_log(log_probs);
  return out;
}

void Stepper::keep_rows(const std::vector<int64_t>& rows) {
  for (Member& m : members_) m.model->reorder(*m.state, rows);
}

bool Stepper::can_append(const Stepper& other) const {
  SG_CHECK(other.members_.size() == members_.size(), "search: joining the rows of {} models to those of {}",
           other.members_.size(), members_.size());
  for (size_t i = 0; i < members_.size(); ++i)
    if (!members_[i].model->can_merge(*members_[i].state, *other.members_[i].state)) return false;
  return true;
}

void Stepper::append(Stepper&& other) {
  SG_CHECK(can_append(other), "search: these rows cannot join now (TranslationModel::can_merge)");
  for (size_t i = 0; i < members_.size(); ++i)
    members_[i].model->merge(*members_[i].state, std::move(*other.members_[i].state));
  other.members_.clear();
}

std::vector<Candidate> ranked_candidates(const std::vector<const SentenceBeams::Open*>& row_owner,
                                         const std::vector<double>& top_lp, const std::vector<int64_t>& top_id,
                                         int64_t stride, int64_t take, int64_t first, int64_t count) {
  std::vector<Candidate> candidates;
  for (int64_t i = first; i < first + count; ++i)
    for (int64_t j = i * stride; j < i * stride + take; ++j)
      candidates.push_back({row_owner[i]->hyp.log_prob + top_lp[j], top_lp[j], i, top_id[j]});
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const Candidate& x, const Candidate& y) { return x.log_prob > y.log_prob; });
  return candidates;
}

namespace {

// Adds a node for candidate `c` of step `step` to `tree` (when recording one); returns its index.
int64_t record_node(BeamTree* tree, const Candidate& c, const SentenceBeams::Open& parent, int64_t step,
                    BeamNode::Fate fate, double score) {
  if (tree == nullptr) return -1;
  tree->nodes.push_back({.parent = parent.node, .step = step, .token = c.token, .token_log_prob = c.token_log_prob,
                         .log_prob = c.log_prob, .score = score, .fate = fate});
  return static_cast<int64_t>(tree->nodes.size()) - 1;
}

}  // namespace

std::vector<int64_t> advance_sentence(SentenceBeams& beams, const std::vector<Candidate>& candidates,
                                      const std::vector<const SentenceBeams::Open*>& row_owner, const HostStep& rows,
                                      int64_t src_len, int64_t step, const DecodeOptions& options, BeamTree* tree) {
  std::vector<SentenceBeams::Open> next;
  std::vector<int64_t> parents;
  auto full = [&](size_t n) { return static_cast<int64_t>(n) >= options.beam_size; };
  int64_t pruned = 0;
  for (size_t rank = 0; rank < candidates.size(); ++rank) {
    const Candidate& c = candidates[rank];
    if (std::isinf(c.log_prob)) break;  // a forbidden <eos> (min_len), and all after it
    if (full(next.size()) || full(beams.finished.size())) {
      if (tree == nullptr || pruned++ == options.beam_size) break;
      record_node(tree, c, *row_owner[c.row], step, BeamNode::Fate::pruned, c.log_prob);
      continue;
    }
    // <eos> finishes a hypothesis only among the step's beam_size best candidates (fairseq's and
    // CTranslate2's rule): accepted from further down, short hypotheses fill the finished list and
    // end the search before a better, longer one can finish
    if (c.token == options.eos_id && static_cast<int64_t>(rank) >= options.beam_size) {
      if (tree != nullptr && pruned < options.beam_size) {
        ++pruned;
        record_node(tree, c, *row_owner[c.row], step, BeamNode::Fate::pruned, c.log_prob);
      }
      continue;
    }
    Hypothesis h = row_owner[c.row]->hyp;
    rows.append(h, c.row, src_len, c.token_log_prob, options);
    if (c.token == options.eos_id) {
      h.finished = true;
      h.score = final_score(h, options);
      record_node(tree, c, *row_owner[c.row], step, BeamNode::Fate::finished, h.score);
      beams.finished.push_back(std::move(h));
      continue;
    }
    h.tokens.push_back(c.token);
    const int64_t node = record_node(tree, c, *row_owner[c.row], step, BeamNode::Fate::kept, c.log_prob);
    next.push_back({std::move(h), c.token, node});
    parents.push_back(c.row);
  }
  if (full(beams.finished.size())) {  // done: unfinished ones never win
    if (tree != nullptr)
      for (const SentenceBeams::Open& o : next) tree->nodes[o.node].fate = BeamNode::Fate::pruned;
    next.clear(), parents.clear();
  }
  beams.open = std::move(next);
  return parents;
}

std::vector<Hypothesis> ranked_hypotheses(SentenceBeams& beams, const DecodeOptions& options) {
  std::vector<Hypothesis> ranked = std::move(beams.finished);
  for (SentenceBeams::Open& o : beams.open) {  // still open: max_len cut them, so they compete
    o.hyp.score = final_score(o.hyp, options);
    ranked.push_back(std::move(o.hyp));
  }
  beams.open.clear();
  std::stable_sort(ranked.begin(), ranked.end(), [](const Hypothesis& x, const Hypothesis& y) { return x.score > y.score; });
  ranked.resize(std::min<size_t>(ranked.size(), options.nbest));
  return ranked;
}

}  // namespace seqgrad::models::search
