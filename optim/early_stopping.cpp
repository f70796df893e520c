// EarlyStopping (optim/early_stopping.h): the best score, the validations since it, and its state.
#include "optim/early_stopping.h"

#include <cmath>

#include "core/error.h"

namespace seqgrad::optim {
namespace {

EarlyStoppingOptions validate(EarlyStoppingOptions o) {
  SG_CHECK_VALUE(o.patience >= 0, "EarlyStopping: patience = {} must be >= 0", o.patience);
  SG_CHECK_VALUE(std::isfinite(o.min_delta) && o.min_delta >= 0, "EarlyStopping: min_delta = {} must be a finite "
                 "number >= 0", o.min_delta);
  return o;
}

const char* mode_name(PlateauMode mode) { return mode == PlateauMode::min ? "min" : "max"; }

}  // namespace

EarlyStopping::EarlyStopping(Options options) : options_(validate(std::move(options))) {}

EarlyStopping::Update EarlyStopping::update(double score) {
  SG_CHECK_VALUE(std::isfinite(score), "EarlyStopping.update: {} = {} is not a finite score", options_.metric, score);
  const double d = options_.min_delta;
  const bool improved = !best_ || (options_.mode == PlateauMode::max ? score > *best_ + d : score < *best_ - d);
  if (improved) {
    best_ = score;
    validations_since_best_ = 0;
  } else {
    ++validations_since_best_;
  }
  return {.improved = improved, .should_stop = should_stop()};
}

bool EarlyStopping::should_stop() const {
  return options_.patience > 0 && validations_since_best_ >= options_.patience;
}

void EarlyStopping::set_patience(int64_t patience) {
  Options o = options_;
  o.patience = patience;
  options_ = validate(o);
}

StateDict EarlyStopping::state_dict() const {
  return StateDict({}, {{"metric", options_.metric},
                        {"mode", mode_name(options_.mode)},
                        {"patience", options_.patience},
                        {"min_delta", options_.min_delta},
                        {"best", best_ ? nlohmann::json(*best_) : nlohmann::json(nullptr)},
                        {"validations_since_best", validations_since_best_}});
}

void EarlyStopping::load_state_dict(const StateDict& state) {
  const std::string op = "EarlyStopping.load_state_dict";
  const nlohmann::json& v = state.values;
  Options o;
  o.metric = state_string(v, "metric", op);
  const std::string mode = state_string(v, "mode", op);
  SG_CHECK_VALUE(mode == "min" || mode == "max", "{}: mode must be \"min\" or \"max\", got \"{}\"", op, mode);
  o.mode = mode == "min" ? PlateauMode::min : PlateauMode::max;
  o.patience = state_integer(v, "patience", op);
  o.min_delta = state_number(v, "min_delta", op);
  try {
    o = validate(o);
  } catch (const ValueError& e) {
    throw ValueError(fmt::format("{}: {}", op, e.what()));
  }
  std::optional<double> best;
  if (!state_value(v, "best", op).is_null()) best = state_number(v, "best", op);
  SG_CHECK_VALUE(!best || std::isfinite(*best), "{}: best = {} must be finite or null", op, *best);
  const int64_t since = state_integer(v, "validations_since_best", op);
  SG_CHECK_VALUE(since >= 0, "{}: validations_since_best = {} must be >= 0", op, since);
  options_ = o;
  best_ = best;
  validations_since_best_ = since;
}

}  // namespace seqgrad::optim
