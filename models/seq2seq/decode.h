// Inference: greedy decoding (batched over sentences) and beam search with length normalisation.
// Both return the attention weights of every produced token, for heatmaps.
#pragma once
#include <vector>

#include "models/seq2seq/model.h"

namespace seqgrad::models {

struct Hypothesis {
  std::vector<int64_t> tokens;                 // target ids without <bos>, ending before <eos>
  std::vector<std::vector<float>> attention;   // one row (source length) per token incl. <eos>
  std::vector<std::vector<float>> energies;    // the same rows before the softmax (additive kinds)
  double log_prob = 0;                         // sum of token log-probabilities incl. <eos>
  double score = 0;                            // log_prob / length^length_penalty (beam search)
};

struct DecodeOptions {
  int64_t max_len = 50;            // tokens produced at most (then the hypothesis is cut)
  int64_t beam_size = 1;           // 1 = greedy
  double length_penalty = 1.0;     // alpha in score = log_prob / length^alpha
  int64_t bos_id = 1, eos_id = 2;
};

// src: (B, S) ids, lengths: (B,), both on the model's device (decoding runs there; the tokens
// and attention rows come back to the host). Runs under NoGradGuard with the model in eval mode.
std::vector<Hypothesis> greedy_decode(Seq2Seq& model, const Tensor& src, const Tensor& lengths,
                                      const DecodeOptions& options);
// One sentence: src (1, S). The beam is the batch dimension of every decoder step.
Hypothesis beam_search(Seq2Seq& model, const Tensor& src, const Tensor& lengths, const DecodeOptions& options);
// Either of the two, per options.beam_size, for a batch of sentences.
std::vector<Hypothesis> decode(Seq2Seq& model, const Tensor& src, const Tensor& lengths, const DecodeOptions& options);

}  // namespace seqgrad::models
