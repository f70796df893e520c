// Greedy decoding and beam search for the seq2seq model.
#include "models/seq2seq/decode.h"

#include <algorithm>
#include <cmath>

namespace seqgrad::models {
namespace {

std::vector<float> row(const Tensor& weights, int64_t b, int64_t length) {
  std::vector<float> w = weights.select(0, b).narrow(0, 0, length).to_vector<float>();
  return w;
}

struct EvalMode {  // puts the model in eval mode for the scope, restoring the previous mode
  explicit EvalMode(Seq2Seq& m) : model(m), was_training(m.is_training()) { m.eval(); }
  ~EvalMode() { model.train(was_training); }
  Seq2Seq& model;
  bool was_training;
};

}  // namespace

std::vector<Hypothesis> greedy_decode(Seq2Seq& model, const Tensor& src, const Tensor& lengths,
                                      const DecodeOptions& options) {
  NoGradGuard no_grad;
  EvalMode eval(model);
  int64_t batch = src.size(0);
  std::vector<int64_t> src_len = lengths.to_vector<int64_t>();
  Encoder::Output enc = model.encoder(src, lengths);
  AttnDecoder::Memory memory = model.decoder.prepare(enc.outputs, lengths);
  Tensor state = enc.state;
  Tensor y = full({batch}, static_cast<double>(options.bos_id), {.dtype = DType::i64, .device = src.device()});
  std::vector<Hypothesis> out(batch);
  std::vector<bool> done(batch, false);
  for (int64_t t = 0; t < options.max_len; ++t) {
    AttnDecoder::Step s = model.decoder.step(y, state, memory);
    Tensor log_probs = log_softmax(s.logits, -1);
    y = argmax(log_probs, -1);
    std::vector<int64_t> ids = y.to_vector<int64_t>();
    Tensor picked = gather(log_probs, 1, y.unsqueeze(1)).squeeze(1);
    std::vector<double> lp = picked.to_vector<double>();
    for (int64_t b = 0; b < batch; ++b) {
      if (done[b]) continue;
      out[b].attention.push_back(row(s.weights, b, src_len[b]));
      if (s.energies.defined()) out[b].energies.push_back(row(s.energies, b, src_len[b]));
      out[b].log_prob += lp[b];
      if (ids[b] == options.eos_id) done[b] = true;
      else out[b].tokens.push_back(ids[b]);
    }
    state = s.state;
    if (std::all_of(done.begin(), done.end(), [](bool d) { return d; })) break;
  }
  for (Hypothesis& h : out) h.score = h.log_prob;
  return out;
}

Hypothesis beam_search(Seq2Seq& model, const Tensor& src, const Tensor& lengths, const DecodeOptions& options) {
  SG_CHECK_SHAPE(src.ndim() == 2 && src.size(0) == 1, "beam_search: expects one sentence (1, S), got {}", src.shape());
  SG_CHECK_VALUE(options.beam_size >= 1, "beam_search: beam_size {} must be >= 1", options.beam_size);
  NoGradGuard no_grad;
  EvalMode eval(model);
  int64_t src_len = lengths.to_vector<int64_t>()[0];
  Encoder::Output enc = model.encoder(src, lengths);
  AttnDecoder::Memory one = model.decoder.prepare(enc.outputs, lengths);

  struct Beam {
    Hypothesis hyp;
    int64_t last;
  };
  std::vector<Beam> beams{{Hypothesis{}, options.bos_id}};
  Tensor state = enc.state;  // (L, beams, H)
  std::vector<Hypothesis> finished;
  auto normalized = [&](const Hypothesis& h) {
    return h.log_prob / std::pow(static_cast<double>(h.tokens.size() + 1), options.length_penalty);
  };
  for (int64_t t = 0; t < options.max_len && !beams.empty(); ++t) {
    int64_t n = static_cast<int64_t>(beams.size());
    AttnDecoder::Memory memory = one.expand(n);
    std::vector<int64_t> last;
    for (const Beam& b : beams) last.push_back(b.last);
    AttnDecoder::Step s =
        model.decoder.step(from_vector(last, {n}, {.dtype = DType::i64, .device = src.device()}), state, memory);
    Tensor log_probs = log_softmax(s.logits, -1).to(DType::f64);  // (n, V)
    int64_t vocab = log_probs.size(1);
    // candidates: each beam's top-k continuations, then the best k overall
    auto [top_lp, top_id] = topk(log_probs, std::min(options.beam_size, vocab), -1);
    std::vector<double> lp = top_lp.to_vector<double>();
    std::vector<int64_t> ids = top_id.to_vector<int64_t>();
    int64_t k = top_lp.size(1);
    struct Candidate {
      double log_prob;
      int64_t beam, token;
    };
    std::vector<Candidate> cands;
    for (int64_t b = 0; b < n; ++b)
      for (int64_t j = 0; j < k; ++j) cands.push_back({beams[b].hyp.log_prob + lp[b * k + j], b, ids[b * k + j]});
    std::sort(cands.begin(), cands.end(), [](const Candidate& a, const Candidate& b) { return a.log_prob > b.log_prob; });
    std::vector<Beam> next;
    std::vector<int64_t> parents;
    for (const Candidate& c : cands) {
      if (static_cast<int64_t>(next.size()) >= options.beam_size) break;
      Hypothesis h = beams[c.beam].hyp;
      h.log_prob = c.log_prob;
      h.attention.push_back(row(s.weights, c.beam, src_len));
      if (s.energies.defined()) h.energies.push_back(row(s.energies, c.beam, src_len));
      if (c.token == options.eos_id) {
        h.score = normalized(h);
        finished.push_back(std::move(h));
        if (static_cast<int64_t>(finished.size()) >= options.beam_size) break;
        continue;
      }
      h.tokens.push_back(c.token);
      next.push_back({std::move(h), c.token});
      parents.push_back(c.beam);
    }
    if (static_cast<int64_t>(finished.size()) >= options.beam_size || next.empty()) break;
    state = index_select(s.state, 1, from_vector(parents, {static_cast<int64_t>(parents.size())},
                                                 {.dtype = DType::i64, .device = src.device()}));
    beams = std::move(next);
  }
  for (Beam& b : beams) {  // cut at max_len: still ranked
    b.hyp.score = normalized(b.hyp);
    finished.push_back(std::move(b.hyp));
  }
  return *std::max_element(finished.begin(), finished.end(),
                           [](const Hypothesis& a, const Hypothesis& b) { return a.score < b.score; });
}

std::vector<Hypothesis> decode(Seq2Seq& model, const Tensor& src, const Tensor& lengths, const DecodeOptions& options) {
  if (options.beam_size <= 1) return greedy_decode(model, src, lengths, options);
  std::vector<Hypothesis> out;
  std::vector<int64_t> len = lengths.to_vector<int64_t>();
  for (int64_t b = 0; b < src.size(0); ++b) {
    Tensor one = src.narrow(0, b, 1).narrow(1, 0, len[b]).contiguous();
    out.push_back(beam_search(model, one, lengths.narrow(0, b, 1).contiguous(), options));
  }
  return out;
}

}  // namespace seqgrad::models
