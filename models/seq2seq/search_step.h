// What every search does at one decoder step, shared by the batch searches (decode.h) and the
// continuous one (continuous_search.h): the members' decoders stepped together, the step's rows
// copied to the host, and one sentence's beams advanced from its candidates. Internal to models/.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "models/seq2seq/decode.h"

namespace seqgrad::models::search {

// The ensemble's log-probabilities from its members' (each (..., V)): log((1/M) sum_m exp(lp_m)),
// computed as logsumexp over the members minus log M; one member's come back unchanged.
Tensor mean_probability_log(const std::vector<Tensor>& member_log_probs);

// Token ids as an int64 (N,) tensor on `device`.
Tensor ids_tensor(const std::vector<int64_t>& ids, Device device);

// A step's (N, S) attention weights or energies, copied to the host once for all N rows.
class HostRows {
 public:
  explicit HostRows(const Tensor& rows);
  bool defined() const { return cols_ > 0; }
  std::vector<float> row(int64_t r, int64_t length) const;  // the first `length` columns of row r

 private:
  std::vector<float> values_;
  int64_t cols_;
};

// The k most probable tokens of each row of a step's (N, V) log-probabilities, on the host; with
// k = 0 nothing is computed or copied.
class HostAlternatives {
 public:
  HostAlternatives(const Tensor& log_probs, int64_t k);
  bool defined() const { return k_ > 0; }
  // Row r's first min(k, its k) alternatives, most probable first (topk ranks ties by index, so
  // these are the k most probable whatever k the step computed).
  std::vector<Alternative> row(int64_t r, int64_t k) const;

 private:
  int64_t k_ = 0;
  std::vector<float> probabilities_;
  std::vector<int64_t> tokens_;
};

// What a decoder step gives each produced token, on the host: its row's attention (and energies)
// and alternatives.
struct HostStep {
  HostRows weights, energies;
  HostAlternatives alternatives;

  // Appends the token that decoder row r produced with log-probability token_log_prob to h
  // (everything but the token id, which <eos> does not add), with options.top_alternatives
  // alternatives.
  void append(Hypothesis& h, int64_t r, int64_t src_len, double token_log_prob, const DecodeOptions& options) const;
};

// Every member's decoder over the rows of a search (one per sentence, or per open hypothesis),
// stepped together.
class Stepper {
 public:
  Stepper(const Ensemble& models, const Tensor& src, const Tensor& lengths);
  struct Output {
    Tensor log_probs;          // (N, V): the ensemble's
    Tensor weights, energies;  // (N, S): the first member's
  };
  // Feeds y_prev (N,) to every member and advances its state.
  Output step(const Tensor& y_prev);
  // Beam search: row r of the next step continues row rows[r] of the last one.
  void keep_rows(const std::vector<int64_t>& rows);
  // Continuous batching: `other`'s rows (of the same models) join after this one's
  // (TranslationModel::merge); can_append says whether every member can join them now.
  bool can_append(const Stepper& other) const;
  void append(Stepper&& other);

 private:
  struct Member {
    TranslationModel* model;
    std::unique_ptr<TranslationModel::SearchState> state;
  };
  std::vector<Member> members_;
};

// One sentence's search: its open hypotheses (each the head of one decoder row) and finished ones.
struct SentenceBeams {
  struct Open {
    Hypothesis hyp;
    int64_t last;       // the token the next step is fed
    int64_t node = -1;  // its node in the sentence's BeamTree, when one is recorded
  };
  std::vector<Open> open;
  std::vector<Hypothesis> finished;
};

struct Candidate {
  double log_prob;        // the hypothesis's, with this token
  double token_log_prob;  // this token's
  int64_t row, token;
};

// The continuations of decoder rows [first, first + count) (one sentence's), best first: each
// row's first `take` entries of the step's top tokens, top_lp and top_id ((N, stride) on the host,
// best first per row), added to its hypothesis's log-probability. Ties keep row, then rank, order.
std::vector<Candidate> ranked_candidates(const std::vector<const SentenceBeams::Open*>& row_owner,
                                         const std::vector<double>& top_lp, const std::vector<int64_t>& top_id,
                                         int64_t stride, int64_t take, int64_t first, int64_t count);

// Extends sentence `beams` by one step from its candidates (best first): a candidate ending with
// <eos> among the first beam_size is finished (further down it is dropped), another becomes an
// open hypothesis, until beam_size of either kind exist.
// Returns the decoder rows the new open hypotheses continue (their parents). With `tree`, records
// them and the next beam_size candidates, pruned.
std::vector<int64_t> advance_sentence(SentenceBeams& beams, const std::vector<Candidate>& candidates,
                                      const std::vector<const SentenceBeams::Open*>& row_owner, const HostStep& rows,
                                      int64_t src_len, int64_t step, const DecodeOptions& options, BeamTree* tree);

// A sentence's ranked result once its search ends: its finished hypotheses and, when max_len cut
// it, its open ones scored by final_score(), best first, the first options.nbest.
std::vector<Hypothesis> ranked_hypotheses(SentenceBeams& beams, const DecodeOptions& options);

}  // namespace seqgrad::models::search
