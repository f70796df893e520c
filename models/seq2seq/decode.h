// Inference: greedy decoding and beam search with length normalisation, both batched over
// sentences. Both return the attention weights of every produced token, for heatmaps.
#pragma once
#include <vector>

#include "models/seq2seq/model.h"

namespace seqgrad::models {

struct Hypothesis {
  std::vector<int64_t> tokens;                 // target ids without <bos>, ending before <eos>
  std::vector<std::vector<float>> attention;   // one row (source length) per token, incl. <eos> if finished
  std::vector<std::vector<float>> energies;    // the same rows before the softmax (hybrid: the additive half's)
  std::vector<double> token_log_probs;         // each produced token's log-probability, incl. <eos> if finished
  double log_prob = 0;                         // their sum
  double score = 0;                            // log_prob / length^length_penalty (beam search)
  bool finished = true;                        // ended with <eos>; false when cut at max_len
};

struct DecodeOptions {
  int64_t max_len = 50;            // tokens produced at most (then the hypothesis is cut)
  int64_t beam_size = 1;           // 1 = greedy
  double length_penalty = 1.0;     // alpha in score = log_prob / length^alpha, length counting <eos>
  int64_t nbest = 1;               // hypotheses beam_search returns per sentence (<= beam_size)
  int64_t bos_id = 1, eos_id = 2;
};

// src: (B, S) ids, lengths: (B,), both on the model's device (decoding runs there; the tokens
// and attention rows come back to the host). Both run under NoGradGuard with the model in eval mode.
std::vector<Hypothesis> greedy_decode(Seq2Seq& model, const Tensor& src, const Tensor& lengths,
                                      const DecodeOptions& options);
// Every sentence keeps beam_size open hypotheses; the open hypotheses of all sentences form the
// batch of each decoder step. A sentence is done when beam_size hypotheses have ended with <eos>;
// its open ones then lose (they are unfinished). Only when max_len cuts a sentence do its open
// hypotheses compete with the finished ones. Returns, per sentence, its options.nbest best
// hypotheses by score, best first.
std::vector<std::vector<Hypothesis>> beam_search(Seq2Seq& model, const Tensor& src, const Tensor& lengths,
                                                 const DecodeOptions& options);
// The best hypothesis per sentence: greedy when options.beam_size is 1, else beam search.
std::vector<Hypothesis> decode(Seq2Seq& model, const Tensor& src, const Tensor& lengths, const DecodeOptions& options);

}  // namespace seqgrad::models
