// Continuous (iteration-level) batching, as Orca (Yu et al., OSDI 2022) schedules a server's
// decoding: sentences join a running search at a step boundary and leave it at the step they
// finish, so none waits for a batch to end, and each step decodes every live sentence's rows as one
// batch. Each sentence keeps its own DecodeOptions: greedy and beam sentences coexist, as do
// different lengths, penalties and n-best.
//
//   ContinuousSearch search(model);
//   search.add({ids_a, ids_b}, greedy);        // ids 0 and 1
//   search.step();                             // ...
//   search.add({ids_c}, beam4);                // id 2 joins at the next step
//   while (!search.empty())
//     for (ContinuousSearch::Finished& f : search.step()) use(f.id, f.hyps);
//
// A sentence gets the hypotheses that decoding it alone gives (greedy_decode, or beam_search with
// options.nbest): its rows attend to its own source only (shorter sources are padded and masked),
// and a row's products do not depend on the other rows (int8 bit for bit; float32 the same tokens,
// scores within float rounding, as in translate's batches: docs/serving.md#continuous-batching).
//
// A step that fails (out of memory, a position beyond a learned table) fails only the sentences it
// stepped: its cohort's (below), each returned with the error; the other cohorts go on.
#pragma once
#include <cstdint>
#include <exception>
#include <optional>
#include <vector>

#include "models/seq2seq/decode.h"
#include "models/seq2seq/model_config.h"
#include "models/seq2seq/search_step.h"

namespace seqgrad::models {

// An upper bound on the float32 search state (TranslationModel::SearchState) that `rows` decoder
// rows of one sentence of src_len source tokens hold after `positions` steps, in bytes: per row
// its copy of the source memory (the GRU's encoder outputs and attention keys, at most 4H + A per token; the
// Transformer's cross-attention keys and values, 2 x layers x E per token) and what it has decoded
// (the GRU's hidden state, layers x H; the Transformer's self-attention keys and values, 2 x
// layers x E per position). A server budgets its searches with it (padding to a cohort's longest
// source not counted).
int64_t search_state_bytes(const Seq2SeqConfig& model, int64_t rows, int64_t src_len, int64_t positions);

class ContinuousSearch {
 public:
  // The models (an ensemble's members, or one) must outlive the search.
  explicit ContinuousSearch(const Ensemble& models);

  // Encodes the sentences (source ids each, not empty) and returns their ids, in order; they are
  // decoded from the next step() on. options are validated here (ValueError naming the field);
  // sampling is not offered (a sampled sentence's draws depend on its place in a batch). With
  // record_trees, each beam sentence's search is recorded (Finished::beam_tree), as beam_search's
  // `trees` records it.
  std::vector<int64_t> add(const std::vector<std::vector<int64_t>>& sentences, const DecodeOptions& options,
                           bool record_trees = false);

  struct Finished {
    int64_t id;                    // as add() returned it
    std::vector<Hypothesis> hyps;  // best first: greedy's one, or beam search's options.nbest
    std::optional<BeamTree> beam_tree;  // with record_trees, for beam_size > 1
    std::exception_ptr error;      // set (and hyps empty) when a step of its cohort failed
  };
  // One decoder step of every live sentence; returns those that finished with it (ended with
  // <eos>, beam_size finished hypotheses, or max_len reached), and those of a cohort whose step
  // threw, with the error (the cohort is dropped; the others are stepped as if it had not been).
  std::vector<Finished> step();

  int64_t sentences() const;  // live: added and not finished
  int64_t rows() const;       // their decoder rows (a beam sentence has up to beam_size)
  bool empty() const { return cohorts_.empty(); }

 private:
  struct Sentence {
    int64_t id;
    DecodeOptions options;
    int64_t src_len;
    int64_t produced = 0;         // tokens decoded so far (the step number)
    search::SentenceBeams beams;  // greedy: one open hypothesis until it ends
    std::optional<BeamTree> tree;  // recorded (add's record_trees, beam search only)
  };
  // Rows stepped as one batch, in their sentences' order. The GRU's rows always form one; the
  // Transformer's join only rows at the same position (TranslationModel::can_merge), so each group
  // that joined at another step is a cohort of its own.
  struct Cohort {
    search::Stepper stepper;
    std::vector<Sentence> sentences;
  };
  // Steps the cohort once; appends its finished sentences to `done`; false when none is left.
  bool step_cohort(Cohort& cohort, std::vector<Finished>& done);

  Ensemble models_;
  EvalScope eval_;
  std::vector<Cohort> cohorts_;
  int64_t next_id_ = 0;
};

}  // namespace seqgrad::models
