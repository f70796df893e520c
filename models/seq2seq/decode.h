// Inference, batched over sentences: greedy decoding, random sampling (top-k, nucleus, temperature),
// beam search with length and coverage penalties, and forced decoding (scoring given targets).
// Every search runs one model or an ensemble, and returns each produced token's attention weights
// (for heatmaps) and log-probability.
#pragma once
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/rng.h"
#include "models/seq2seq/decode_options.h"
#include "models/seq2seq/model.h"
#include "models/seq2seq/translation_model.h"

namespace seqgrad::models {

// One of the most probable tokens at a step (DecodeOptions::top_alternatives).
struct Alternative {
  int64_t token;
  float probability;
};

struct Hypothesis {
  std::vector<int64_t> tokens;                 // target ids without <bos>, ending before <eos>
  std::vector<std::vector<float>> attention;   // one row (source length) per token, incl. <eos> if finished
  std::vector<std::vector<float>> energies;    // the same rows before the softmax (hybrid: the additive half's)
  std::vector<double> token_log_probs;         // each produced token's log-probability, incl. <eos> if finished
  // Per produced token (as attention), the top_alternatives most probable tokens of its step, most
  // probable first; empty when DecodeOptions::top_alternatives is 0.
  std::vector<std::vector<Alternative>> alternatives;
  double log_prob = 0;                         // their sum
  double score = 0;                            // final_score(): beam search and forced decoding; greedy: log_prob
  bool finished = true;                        // ended with <eos>; false when cut at max_len
};

// The models a search decodes with: one model, or an ensemble whose members' next-token
// distributions are averaged at every step: log((1/M) sum_m p_m), the log of the mean probability
// (as OpenNMT-py and fairseq ensemble). Attention rows are the first member's. Members may be of
// either architecture (a GRU beside a Transformer). A model converts to an ensemble of one, so
// every function below takes a model as well.
class Ensemble {
 public:
  Ensemble(TranslationModel& model) : members_{&model} {}  // NOLINT(google-explicit-constructor): one model
  // Throws ValueError when `members` is empty or their target vocabularies differ in size (that
  // their tokens are the same is the caller's to check: the vocabularies live in the checkpoints).
  explicit Ensemble(std::vector<TranslationModel*> members);
  const std::vector<TranslationModel*>& members() const { return members_; }
  TranslationModel& first() const { return *members_.front(); }

  // Teacher forcing: next-token scores (B, T, V) for src (B, S), src_lengths (B,), tgt_in (B, T):
  // one model's logits, or the ensemble's mean-probability log-probabilities; log_softmax of
  // either gives the log-probabilities (cross_entropy takes either).
  Tensor forward(const Tensor& src, const Tensor& src_lengths, const Tensor& tgt_in) const;

 private:
  std::vector<TranslationModel*> members_;
};

// Puts every member of `models` in eval mode for the scope, restoring each one's previous mode.
class EvalScope {
 public:
  explicit EvalScope(const Ensemble& models);
  ~EvalScope();
  EvalScope(const EvalScope&) = delete;
  EvalScope& operator=(const EvalScope&) = delete;

 private:
  std::vector<std::pair<TranslationModel*, bool>> was_training_;
};

// What beam search did for one sentence (the explorer's beam tree): at every step, each
// candidate it kept open, each one that finished with <eos>, and the best candidates it pruned
// (up to beam_size after the last one it kept). A node's path from the root is its hypothesis:
// follow `parent` back to a node of step 0, whose parent is the <bos> root (-1).
struct BeamNode {
  enum class Fate {
    kept,      // extended at the next step (or cut there by max_len)
    finished,  // ended with <eos>: a finished hypothesis, scored by final_score()
    pruned,    // not kept: beam_size better candidates were, or the sentence had finished
  };
  int64_t parent = -1;            // index into BeamTree::nodes; -1: the root
  int64_t step = 0;               // the position of `token` in the output, from 0
  int64_t token = 0;              // <eos> for a finished node
  double token_log_prob = 0;      // log p(token | its prefix)
  double log_prob = 0;            // the hypothesis's, token included
  double score = 0;               // finished: final_score(); else log_prob
  Fate fate = Fate::kept;
};
struct BeamTree {
  std::vector<BeamNode> nodes;  // step by step; within a step in the order the search ranked them
};
const char* beam_fate_name(BeamNode::Fate fate);  // "kept" | "finished" | "pruned"

// The score beam search ranks a finished (or max_len-cut) hypothesis by: log_prob normalised by
// the length penalty, plus the coverage penalty.
double final_score(const Hypothesis& h, const DecodeOptions& options);

// src: (B, S) ids, lengths: (B,), both on the models' device (decoding runs there; the tokens
// and attention rows come back to the host). All run under NoGradGuard with the models in eval mode.
std::vector<Hypothesis> greedy_decode(const Ensemble& models, const Tensor& src, const Tensor& lengths,
                                      const DecodeOptions& options);
// Random sampling by options.sampling (required). Sentence b of the batch draws its token at step t
// from the uniform value at counter c + b * max_len + t of the generator's seed, where c is the
// generator's offset on entry (the call reserves B * max_len counters): the n-th sentence decoded
// with one generator gets the same draws however the sentences are batched.
std::vector<Hypothesis> sample_decode(const Ensemble& models, const Tensor& src, const Tensor& lengths,
                                      const DecodeOptions& options, Generator& generator);
// Every sentence keeps beam_size open hypotheses; the open hypotheses of all sentences form the
// batch of each decoder step. Candidates are ranked by log-probability; a hypothesis that ends
// with <eos> is scored by final_score(). A sentence is done when beam_size hypotheses have ended
// with <eos>; its open ones then lose (they are unfinished). Only when max_len cuts a sentence do
// its open hypotheses compete with the finished ones. Returns, per sentence, its options.nbest
// best hypotheses by score, best first. With `trees`, it also records each sentence's search there
// (one BeamTree per sentence).
std::vector<std::vector<Hypothesis>> beam_search(const Ensemble& models, const Tensor& src, const Tensor& lengths,
                                                 const DecodeOptions& options, std::vector<BeamTree>* trees = nullptr);
// The best hypothesis per sentence: sampling when options.sampling is set (from `generator`, or
// from a Generator seeded with options.sampling->seed when null), else greedy when
// options.beam_size is 1, else beam search.
std::vector<Hypothesis> decode(const Ensemble& models, const Tensor& src, const Tensor& lengths,
                               const DecodeOptions& options, Generator* generator = nullptr);

// Forced decoding: each sentence's given target (ids without <bos> and <eos>) fed to the decoder,
// and scored token by token, <eos> included, as the searches score what they produce: tokens,
// token_log_probs, log_prob, attention (and alternatives), score = final_score(), finished. max_len
// and min_len do not apply.
std::vector<Hypothesis> score_targets(const Ensemble& models, const Tensor& src, const Tensor& lengths,
                                      const std::vector<std::vector<int64_t>>& targets, const DecodeOptions& options);

}  // namespace seqgrad::models
