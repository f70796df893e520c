// Greedy decoding and beam search for the seq2seq model, both batched over sentences.
#include "models/seq2seq/decode.h"

#include <algorithm>
#include <cmath>

namespace seqgrad::models {
namespace {

// A step's (N, S) attention weights or energies, copied to the host once for all N rows.
class HostRows {
 public:
  explicit HostRows(const Tensor& rows)
      : values_(rows.defined() ? rows.to_vector<float>() : std::vector<float>{}),
        cols_(rows.defined() ? rows.size(1) : 0) {}
  bool defined() const { return cols_ > 0; }
  std::vector<float> row(int64_t r, int64_t length) const {  // the first `length` columns of row r
    auto begin = values_.begin() + r * cols_;
    return {begin, begin + length};
  }

 private:
  std::vector<float> values_;
  int64_t cols_;
};

struct EvalMode {  // puts the model in eval mode for the scope, restoring the previous mode
  explicit EvalMode(Seq2Seq& m) : model(m), was_training(m.is_training()) { m.eval(); }
  ~EvalMode() { model.train(was_training); }
  Seq2Seq& model;
  bool was_training;
};

Tensor ids_tensor(const std::vector<int64_t>& ids, Device device) {
  return from_vector(ids, {static_cast<int64_t>(ids.size())}, {.dtype = DType::i64, .device = device});
}

// Appends one decoder step's attention (and energies) row of decoder row r to h.
void add_attention_row(Hypothesis& h, const HostRows& weights, const HostRows& energies, int64_t r, int64_t length) {
  h.attention.push_back(weights.row(r, length));
  if (energies.defined()) h.energies.push_back(energies.row(r, length));
}

double length_normalized(const Hypothesis& h, double alpha) {
  double length = static_cast<double>(h.tokens.size()) + (h.finished ? 1 : 0);  // <eos> counts
  return h.log_prob / std::pow(std::max(length, 1.0), alpha);
}

// One sentence's search: its open hypotheses (each the head of one decoder row) and finished ones.
struct SentenceBeams {
  struct Open {
    Hypothesis hyp;
    int64_t last;  // the token the next step is fed
  };
  std::vector<Open> open;
  std::vector<Hypothesis> finished;
};

struct Candidate {
  double log_prob;        // the hypothesis's, with this token
  double token_log_prob;  // this token's
  int64_t row, token;
};

// Extends sentence `beams` by one step from its candidates (best first): a candidate ending with
// <eos> is finished, another becomes an open hypothesis, until beam_size of either kind exist.
// Returns the decoder rows the new open hypotheses continue (their parents).
std::vector<int64_t> advance_sentence(SentenceBeams& beams, const std::vector<Candidate>& candidates,
                                      const std::vector<const SentenceBeams::Open*>& row_owner,
                                      const HostRows& weights, const HostRows& energies, int64_t src_len,
                                      const DecodeOptions& options) {
  std::vector<SentenceBeams::Open> next;
  std::vector<int64_t> parents;
  auto full = [&](size_t n) { return static_cast<int64_t>(n) >= options.beam_size; };
  for (const Candidate& c : candidates) {
    if (full(next.size()) || full(beams.finished.size())) break;
    Hypothesis h = row_owner[c.row]->hyp;
    h.token_log_probs.push_back(c.token_log_prob);
    h.log_prob = c.log_prob;
    add_attention_row(h, weights, energies, c.row, src_len);
    if (c.token == options.eos_id) {
      h.finished = true;
      h.score = length_normalized(h, options.length_penalty);
      beams.finished.push_back(std::move(h));
      continue;
    }
    h.tokens.push_back(c.token);
    next.push_back({std::move(h), c.token});
    parents.push_back(c.row);
  }
  if (full(beams.finished.size())) next.clear(), parents.clear();  // done: unfinished ones never win
  beams.open = std::move(next);
  return parents;
}

}  // namespace

std::vector<Hypothesis> greedy_decode(Seq2Seq& model, const Tensor& src, const Tensor& lengths,
                                      const DecodeOptions& options) {
  NoGradGuard no_grad;
  EvalMode eval(model);
  int64_t batch = src.size(0);
  std::vector<int64_t> src_len = lengths.to_vector<int64_t>();
  auto [state, memory] = model.encode(src, lengths);
  Tensor y = full({batch}, static_cast<double>(options.bos_id), {.dtype = DType::i64, .device = src.device()});
  std::vector<Hypothesis> out(batch);
  for (Hypothesis& h : out) h.finished = false;
  for (int64_t t = 0; t < options.max_len; ++t) {
    AttnDecoder::Step s = model.decoder.step(y, state, memory);
    Tensor log_probs = log_softmax(s.logits, -1);
    y = argmax(log_probs, -1);
    std::vector<int64_t> ids = y.to_vector<int64_t>();
    std::vector<double> lp = gather(log_probs, 1, y.unsqueeze(1)).squeeze(1).to_vector<double>();
    HostRows weights(s.weights), energies(s.energies);
    for (int64_t b = 0; b < batch; ++b) {
      if (out[b].finished) continue;
      add_attention_row(out[b], weights, energies, b, src_len[b]);
      out[b].token_log_probs.push_back(lp[b]);
      out[b].log_prob += lp[b];
      if (ids[b] == options.eos_id) out[b].finished = true;
      else out[b].tokens.push_back(ids[b]);
    }
    state = s.state;
    if (std::all_of(out.begin(), out.end(), [](const Hypothesis& h) { return h.finished; })) break;
  }
  for (Hypothesis& h : out) h.score = h.log_prob;
  return out;
}

std::vector<std::vector<Hypothesis>> beam_search(Seq2Seq& model, const Tensor& src, const Tensor& lengths,
                                                 const DecodeOptions& options) {
  SG_CHECK_SHAPE(src.ndim() == 2 && lengths.ndim() == 1 && lengths.size(0) == src.size(0),
                 "beam_search: expects src (B, S) and lengths (B,), got {} and {}", src.shape(), lengths.shape());
  SG_CHECK_VALUE(options.beam_size >= 1, "beam_search: beam_size {} must be >= 1", options.beam_size);
  SG_CHECK_VALUE(options.nbest >= 1 && options.nbest <= options.beam_size,
                 "beam_search: nbest {} must be in [1, beam_size {}]", options.nbest, options.beam_size);
  NoGradGuard no_grad;
  EvalMode eval(model);
  const Device device = src.device();
  int64_t batch = src.size(0);
  std::vector<int64_t> src_len = lengths.to_vector<int64_t>();
  Seq2Seq::Encoded source = model.encode(src, lengths);
  const AttnDecoder::Memory& all = source.memory;

  std::vector<SentenceBeams> sentences(batch);
  Hypothesis empty;
  empty.finished = false;
  for (SentenceBeams& s : sentences) s.open.push_back({empty, options.bos_id});
  Tensor state = source.state;           // (L, N, H): one row per open hypothesis, sentence by sentence
  std::vector<int64_t> owner, prev_owner;  // the sentence of each decoder row
  AttnDecoder::Memory memory;
  for (int64_t t = 0; t < options.max_len; ++t) {
    std::vector<const SentenceBeams::Open*> row_hyp;
    std::vector<int64_t> last;
    owner.clear();
    for (int64_t b = 0; b < batch; ++b)
      for (const SentenceBeams::Open& o : sentences[b].open) owner.push_back(b), row_hyp.push_back(&o), last.push_back(o.last);
    if (owner.empty()) break;  // every sentence is done
    if (owner != prev_owner) {  // rows changed: gather each row's sentence memory (once, not every step)
      Tensor index = ids_tensor(owner, device);
      memory = all.select_rows(index);
      prev_owner = owner;
    }
    AttnDecoder::Step s = model.decoder.step(ids_tensor(last, device), state, memory);
    Tensor log_probs = log_softmax(s.logits, -1).to(DType::f64);  // (N, V)
    // 2 * beam_size continuations per row: at most one is <eos>, so beam_size open ones remain
    auto [top_lp, top_id] = topk(log_probs, std::min(2 * options.beam_size, log_probs.size(1)), -1);
    std::vector<double> lp = top_lp.to_vector<double>();
    std::vector<int64_t> ids = top_id.to_vector<int64_t>();
    int64_t k = top_lp.size(1);
    HostRows weights(s.weights), energies(s.energies);
    std::vector<int64_t> parents;
    for (int64_t b = 0, r = 0; b < batch; ++b) {
      int64_t rows = static_cast<int64_t>(sentences[b].open.size());
      std::vector<Candidate> candidates;
      for (int64_t i = r; i < r + rows; ++i)
        for (int64_t j = 0; j < k; ++j) candidates.push_back({row_hyp[i]->hyp.log_prob + lp[i * k + j], lp[i * k + j], i, ids[i * k + j]});
      std::stable_sort(candidates.begin(), candidates.end(),
                       [](const Candidate& x, const Candidate& y) { return x.log_prob > y.log_prob; });
      r += rows;
      SentenceBeams updated{{}, std::move(sentences[b].finished)};
      if (rows > 0) {
        std::vector<int64_t> p = advance_sentence(updated, candidates, row_hyp, weights, energies, src_len[b], options);
        parents.insert(parents.end(), p.begin(), p.end());
      }
      SG_CHECK(static_cast<int64_t>(updated.finished.size()) >= options.beam_size || !updated.open.empty(),
               "beam_search: sentence {} has neither beam_size finished nor open hypotheses", b);
      sentences[b] = std::move(updated);  // done when beam_size finished: advance_sentence left none open
    }
    if (parents.empty()) break;
    state = index_select(s.state, 1, ids_tensor(parents, device));
  }
  std::vector<std::vector<Hypothesis>> out(batch);
  for (int64_t b = 0; b < batch; ++b) {
    std::vector<Hypothesis>& ranked = sentences[b].finished;
    for (SentenceBeams::Open& o : sentences[b].open) {  // still open: max_len cut them, so they compete
      o.hyp.score = length_normalized(o.hyp, options.length_penalty);
      ranked.push_back(std::move(o.hyp));
    }
    std::stable_sort(ranked.begin(), ranked.end(), [](const Hypothesis& x, const Hypothesis& y) { return x.score > y.score; });
    ranked.resize(std::min<size_t>(ranked.size(), options.nbest));
    out[b] = std::move(ranked);
  }
  return out;
}

std::vector<Hypothesis> decode(Seq2Seq& model, const Tensor& src, const Tensor& lengths, const DecodeOptions& options) {
  if (options.beam_size <= 1) return greedy_decode(model, src, lengths, options);
  DecodeOptions best_only = options;
  best_only.nbest = 1;
  std::vector<Hypothesis> out;
  for (std::vector<Hypothesis>& ranked : beam_search(model, src, lengths, best_only)) out.push_back(std::move(ranked.front()));
  return out;
}

}  // namespace seqgrad::models
