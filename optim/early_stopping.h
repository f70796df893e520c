// Early stopping on a validation metric (Lightning's EarlyStopping callback, Keras' EarlyStopping):
// the best score so far and the validations since it; `patience` validations in a row without an
// improvement of more than min_delta end the run. Fed once per validation:
//
//   optim::EarlyStopping stopping({.metric = "loss", .mode = optim::PlateauMode::min, .patience = 3});
//   for (epoch...) {
//     train(...);
//     auto [improved, should_stop] = stopping.update(validation_loss);
//     if (improved) save("best.safetensors");
//     if (should_stop) break;
//   }
//
// Its state_dict goes into every checkpoint, so a resumed run goes on counting where it was.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "core/state_dict.h"
#include "optim/scheduler.h"

namespace seqgrad::optim {

struct EarlyStoppingOptions {
  std::string metric = "score";       // what is scored: names it in the state and in errors
  PlateauMode mode = PlateauMode::max;  // max: higher is better (BLEU); min: lower (a loss)
  int64_t patience = 0;               // >= 0; 0 never stops (the best is still tracked)
  double min_delta = 0.0;             // >= 0: an improvement must exceed it
};

class EarlyStopping {
 public:
  using Options = EarlyStoppingOptions;
  explicit EarlyStopping(Options options = {});

  struct Update {
    bool improved = false;     // a new best (the first score is one)
    bool should_stop = false;  // patience ran out
  };
  // One validation's score. Improved (max): score > best + min_delta; (min): score < best -
  // min_delta. Throws ValueError for a NaN or infinite score (naming the metric).
  Update update(double score);

  // Whether patience ran out: patience > 0 and validations_since_best() >= patience.
  bool should_stop() const;
  std::optional<double> best() const { return best_; }  // none before the first update
  int64_t validations_since_best() const { return validations_since_best_; }
  const Options& options() const { return options_; }
  // A resumed run may change the patience (more lets a stopped run go on; less stops it sooner).
  void set_patience(int64_t patience);

  // Values only: metric, mode, patience, min_delta, best (null before the first update) and
  // validations_since_best.
  StateDict state_dict() const;
  // Restores everything saved, options included (as PyTorch's schedulers do). Every value is
  // checked; errors name the field.
  void load_state_dict(const StateDict& state);

 private:
  Options options_;
  std::optional<double> best_;
  int64_t validations_since_best_ = 0;
};

}  // namespace seqgrad::optim
