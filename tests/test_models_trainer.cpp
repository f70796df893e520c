// The translator's Trainer (models/seq2seq/trainer.h): a step is exactly forward, loss, backward,
// clip and Adam; the split step leaves room for a gradient hook; save/restore resumes bit for bit;
// a diverged step changes nothing; a resumed train state is validated field by field; the
// learning-rate schedule steps per epoch (step) or per optimizer update (inverse_sqrt).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "core/rng.h"
#include "core/serialize.h"
#include "models/seq2seq/run.h"
#include "models/seq2seq/trainer.h"
#include "ops/bf16_gemm.h"
#include "temp_dir.h"

using namespace seqgrad;
using models::Trainer;

namespace {

// 24 pairs of a toy language (target = source words renamed, reversed): 3 batches of 8.
std::vector<text::TokenizedPair> toy_pairs() {
  const std::vector<std::string> src_words = {"a", "b", "c", "d", "e", "f"}, tgt_words = {"u", "v", "w", "x", "y", "z"};
  std::vector<text::TokenizedPair> pairs;
  for (size_t i = 0; i < 24; ++i) {
    text::TokenizedPair p;
    for (size_t k = 0; k < 2 + i % 4; ++k) p.src.push_back(src_words[(i + 2 * k) % 6]);
    for (auto it = p.src.rbegin(); it != p.src.rend(); ++it) p.tgt.push_back(tgt_words[(*it)[0] - 'a']);
    pairs.push_back(p);
  }
  return pairs;
}

struct Toy {
  std::vector<text::TokenizedPair> pairs = toy_pairs();
  text::Vocab src_vocab = text::Vocab::build(text::source_side(pairs));
  text::Vocab tgt_vocab = text::Vocab::build(text::target_side(pairs));
  text::EncodedCorpus corpus = text::encode_pairs(pairs, src_vocab, tgt_vocab);
  models::TrainConfig config = [] {
    models::TrainConfig c;
    c.model = {.embed_size = 8, .hidden_size = 8, .num_layers = 1, .dropout = 0.1};
    c.batch_size = 8, c.lr = 0.01, c.step_size = 1, c.gamma = 0.5, c.label_smoothing = 0.1, c.clip = 0.5;
    c.seed = 7;
    return c;
  }();
  models::TensorBatch batch(size_t i = 0) const {
    return models::to_tensors(text::make_batches(corpus.pairs, {.batch_size = 8, .seed = 3})[i]);
  }
};

void check_same_parameters(Trainer& a, Trainer& b) {
  auto pa = a.model().named_parameters(), pb = b.model().named_parameters();
  REQUIRE(pa.size() == pb.size());
  for (size_t i = 0; i < pa.size(); ++i) {
    INFO(pa[i].first);
    CHECK(pa[i].second.to_vector<float>() == pb[i].second.to_vector<float>());
  }
}

}  // namespace

TEST_CASE("trainer: a step is forward, label-smoothed loss, backward, clip and Adam") {
  Toy toy;
  toy.config.model.dropout = 0;  // no random stream to keep in step between the two
  Trainer trainer(toy.config, toy.src_vocab, toy.tgt_vocab);
  // The same step written out by hand, on a model built the same way.
  manual_seed(toy.config.seed);
  models::Seq2SeqConfig mc = toy.config.model;
  mc.src_vocab = toy.src_vocab.size(), mc.tgt_vocab = toy.tgt_vocab.size();
  models::Seq2Seq model(mc);
  models::init_xavier(model);
  optim::Adam adam(model.parameters(), {.lr = toy.config.lr});
  models::TensorBatch b = toy.batch();
  Tensor logits = model(b.src, b.src_lengths, b.tgt_in);  // (B, T, V)
  Tensor loss = nn::cross_entropy(logits.reshape({-1, logits.size(-1)}), b.tgt_out.reshape({-1}),
                                  {.label_smoothing = 0.1, .ignore_index = text::Vocab::kPad});
  adam.zero_grad();
  loss.backward();
  double norm = optim::clip_grad_norm_(model.parameters(), toy.config.clip);
  adam.step();

  models::StepResult r = trainer.train_step(b);
  CHECK(r.loss == loss.item());
  CHECK(r.grad_norm == norm);
  CHECK(r.grad_norm > toy.config.clip);  // the clip was active
  CHECK(r.tokens == b.target_tokens);
  CHECK_FALSE(r.skipped);
  auto pa = trainer.model().named_parameters(), pb = model.named_parameters();
  for (size_t i = 0; i < pa.size(); ++i) CHECK(pa[i].second.to_vector<float>() == pb[i].second.to_vector<float>());
  const models::TrainState& s = trainer.state();
  CHECK(s.step == 1);
  CHECK(s.batch == 1);
  CHECK(s.epoch_tokens == b.target_tokens);
  CHECK(s.epoch_loss() == doctest::Approx(r.loss).epsilon(1e-15));
}

TEST_CASE("trainer: forward_backward then optimizer_step is train_step; after_backward sits between") {
  Toy toy;
  Trainer whole(toy.config, toy.src_vocab, toy.tgt_vocab);
  uint64_t offset = default_generator().offset();
  models::StepResult a = whole.train_step(toy.batch());
  default_generator().set_offset(offset);  // the same dropout masks for the split step
  Trainer split(toy.config, toy.src_vocab, toy.tgt_vocab);
  default_generator().set_offset(offset);
  models::StepResult b = split.forward_backward(toy.batch());
  CHECK(split.state().step == 0);  // nothing advanced yet
  split.optimizer_step(b);
  CHECK(a.loss == b.loss);
  CHECK(a.grad_norm == b.grad_norm);
  check_same_parameters(whole, split);

  // Between the halves the gradients are final and may be changed: a data-parallel trainer
  // averages them across ranks in after_backward. Zeroed there, Adam's first step moves nothing.
  struct ZeroingTrainer : Trainer {
    using Trainer::Trainer;
    int calls = 0;
    void after_backward() override {
      ++calls;
      for (Tensor& p : model().parameters())
        if (p.grad().defined()) p.grad().zero_();
    }
  };
  ZeroingTrainer hooked(toy.config, toy.src_vocab, toy.tgt_vocab);
  std::vector<std::vector<float>> before;
  for (Tensor& p : hooked.model().parameters()) before.push_back(p.to_vector<float>());
  models::StepResult h = hooked.train_step(toy.batch());
  CHECK(hooked.calls == 1);
  CHECK(h.grad_norm == 0);
  CHECK(h.loss == a.loss);  // the forward pass was the same
  std::vector<Tensor> after = hooked.model().parameters();
  for (size_t i = 0; i < after.size(); ++i) CHECK(after[i].to_vector<float>() == before[i]);
}

TEST_CASE("trainer: epochs, stopping after a step, and save/restore resume exactly") {
  Toy toy;
  std::string path = testing::temp_path("trainer.safetensors");
  // Straight through: two epochs of 3 batches.
  Trainer straight(toy.config, toy.src_vocab, toy.tgt_vocab);
  std::vector<double> straight_losses;
  for (int e = 0; e < 2; ++e) {
    models::EpochResult r = straight.train_epoch(toy.corpus);
    CHECK(r.completed);
    straight_losses.push_back(r.loss);
  }
  CHECK(straight.state().epoch == 2);
  CHECK(straight.state().step == 6);
  CHECK(straight.state().batch == 0);
  CHECK(straight.optimizer().lr() == doctest::Approx(0.01 * 0.25));  // StepLR stepped once per epoch

  // Stopped after the 2nd step, saved, restored into a fresh trainer, continued.
  Trainer first(toy.config, toy.src_vocab, toy.tgt_vocab);
  models::EpochResult stopped = first.train_epoch(toy.corpus, [&](const models::StepResult&) {
    return first.state().step < 2;
  });
  CHECK_FALSE(stopped.completed);
  CHECK(first.state().batch == 2);
  CHECK(first.state().epoch == 0);
  first.save(path);
  default_generator().set_offset(12345);  // whatever happens meanwhile, restore puts the stream back
  Trainer second(toy.config, toy.src_vocab, toy.tgt_vocab);
  second.restore(models::read_checkpoint(path), path);
  CHECK(second.state().step == 2);
  std::vector<double> resumed_losses;
  for (int e = 0; e < 2; ++e) resumed_losses.push_back(second.train_epoch(toy.corpus).loss);
  CHECK(resumed_losses == straight_losses);  // bit for bit, the first epoch's running loss included
  check_same_parameters(straight, second);
  std::filesystem::remove(path);
}

TEST_CASE("trainer: a diverged step throws before the update and leaves the state as it was") {
  Toy toy;
  toy.config.lr = 1e10;  // the first update blows the weights up; the second loss explodes
  Trainer trainer(toy.config, toy.src_vocab, toy.tgt_vocab);
  trainer.train_step(toy.batch(0));
  std::vector<std::vector<float>> before;
  for (Tensor& p : trainer.model().parameters()) before.push_back(p.to_vector<float>());
  uint64_t offset = default_generator().offset();
  CHECK_THROWS_WITH_AS(trainer.train_step(toy.batch(1)),
                       doctest::Contains("at epoch 1 batch 2 (step 2)"), models::DivergenceError);
  CHECK(trainer.state().step == 1);
  CHECK(trainer.state().batch == 1);
  CHECK(default_generator().offset() == offset);  // resuming replays the step with the same masks
  std::vector<Tensor> after = trainer.model().parameters();
  for (size_t i = 0; i < after.size(); ++i) CHECK(after[i].to_vector<float>() == before[i]);
}

TEST_CASE("trainer: a checkpoint's train state is checked field by field") {
  models::TrainState s;
  s.epoch = 2, s.batch = 3, s.step = 40, s.epoch_loss_sum = 7.25;
  s.epoch_tokens = 100, s.epoch_skipped = 1, s.rng_offset = 99;
  s.early_stopping = optim::EarlyStopping({.metric = "sacrebleu", .patience = 4});
  s.early_stopping.update(12.5);
  models::TrainState back = models::train_state_from_json(models::train_state_to_json(s), "ck.safetensors");
  CHECK(back.epoch == 2);
  CHECK(back.batch == 3);
  CHECK(back.step == 40);
  CHECK(back.early_stopping.best() == 12.5);
  CHECK(back.epoch_loss_sum == 7.25);
  CHECK(back.epoch_tokens == 100);
  CHECK(back.epoch_skipped == 1);
  CHECK(back.rng_offset == 99);
  auto bad = [&](const char* field, nlohmann::json value) {
    nlohmann::json j = models::train_state_to_json(s);
    if (value.is_null()) j.erase(field);
    else j[field] = value;
    return j;
  };
  auto stopping = [&](const char* field, nlohmann::json value) {
    nlohmann::json j = models::train_state_to_json(s);
    j["early_stopping"][field] = value;
    return j;
  };
  auto check_error = [](const nlohmann::json& j, const char* message) {
    CHECK_THROWS_WITH_AS(models::train_state_from_json(j, "ck.safetensors"), doctest::Contains(message), IOError);
  };
  check_error(bad("batch", -1), "checkpoint ck.safetensors: train_state.batch = -1 must be >= 0");
  check_error(bad("step", -5), "train_state.step = -5 must be >= 0");
  check_error(bad("epoch", "2"), "train_state.epoch must be an integer, got \"2\"");
  check_error(bad("step", nullptr), "train_state has no 'step'");
  check_error(bad("epoch_loss_sum", -1.0), "train_state.epoch_loss_sum = -1 must be a finite number >= 0");
  check_error(bad("rng_offset", -1), "train_state.rng_offset must be an integer >= 0, got -1");
  check_error(bad("early_stopping", nullptr), "checkpoint ck.safetensors: train_state has no 'early_stopping'");
  check_error(bad("early_stopping", "{}"), "train_state.early_stopping: EarlyStopping.load_state_dict: the state's "
              "values must be a JSON object, got \"{}\"");
  check_error(stopping("metric", "bleu"), "train_state.early_stopping.metric must be one of sacrebleu, chrf, loss, got "
              "\"bleu\"");
  check_error(stopping("best", 101), "train_state.early_stopping.best = 101 must be in [0, 100] (sacrebleu)");
  check_error(stopping("validations_since_best", -1), "train_state.early_stopping: EarlyStopping.load_state_dict: "
              "validations_since_best = -1 must be >= 0");
  check_error(stopping("patience", "3"), "EarlyStopping.load_state_dict: the state's 'patience' must be an integer, "
              "got \"3\"");
  check_error(bad("kept_checkpoints", 1), "train_state.kept_checkpoints must be an array of {\"step\", \"score\"} "
              "objects, got 1");
  check_error(bad("kept_checkpoints", nlohmann::json::array({{{"step", 41}, {"score", 1.0}}})),
              "train_state.kept_checkpoints holds step 41 score 1: expected a step in [1, 40] and a finite score");
  check_error(bad("kept_checkpoints", nlohmann::json::array({{{"step", 8}}})), "train_state has no 'score'");
  check_error(nlohmann::json::array(), "train_state must be a JSON object");
}

TEST_CASE("trainer: the early-stopping state round-trips through a checkpoint's train state") {
  models::TrainState s{.epoch = 3, .batch = 2, .step = 30};
  s.early_stopping = optim::EarlyStopping({.metric = "loss", .mode = optim::PlateauMode::min, .patience = 2});
  s.early_stopping.update(2.25), s.early_stopping.update(2.5), s.early_stopping.update(2.3);
  REQUIRE(s.early_stopping.should_stop());
  models::TrainState back = models::train_state_from_json(models::train_state_to_json(s), "ck.safetensors");
  CHECK(back.early_stopping.options().metric == "loss");
  CHECK(back.early_stopping.options().mode == optim::PlateauMode::min);
  CHECK(back.early_stopping.best() == 2.25);
  CHECK(back.early_stopping.validations_since_best() == 2);
  CHECK(back.early_stopping.should_stop());
  CHECK(back.kept_checkpoints.empty());
  s.kept_checkpoints = {{10, 2.5}, {30, 2.25}};  // keep-best checkpoints: step -> score
  CHECK(models::train_state_from_json(models::train_state_to_json(s), "ck.safetensors").kept_checkpoints ==
        std::map<int64_t, double>{{10, 2.5}, {30, 2.25}});
  s.early_stopping = optim::EarlyStopping({.metric = "loss", .mode = optim::PlateauMode::min});
  // before the first validation: null, read back as none
  CHECK_FALSE(models::train_state_from_json(models::train_state_to_json(s), "ck.safetensors").early_stopping.best());
}

// Gradient accumulation: K batches weighted by their target tokens give the gradient of their
// concatenation (the loss is a mean per target token). In float64 the two agree to summation order.
TEST_CASE("trainer: two accumulated batches give the gradients of one concatenated batch (float64)") {
  Toy toy;
  toy.config.model.dropout = 0;
  auto sorted = [&](int64_t size) { return text::make_batches(toy.corpus.pairs, {.batch_size = size, .shuffle = false}); };
  const std::vector<text::Batch> halves = sorted(8), whole = sorted(16);
  REQUIRE(halves[0].index.size() + halves[1].index.size() == whole[0].index.size());
  auto gradients = [&](const std::vector<text::Batch>& batches) {
    Trainer t(toy.config, toy.src_vocab, toy.tgt_vocab);
    t.model().to(DType::f64);
    std::vector<models::TensorBatch> group;
    double tokens = 0;
    for (const text::Batch& b : batches) group.push_back(models::to_tensors(b)), tokens += group.back().target_tokens;
    for (size_t i = 0; i < group.size(); ++i)
      t.forward_backward(group[i], {.weight = group[i].target_tokens / tokens, .first = i == 0,
                                    .last = i + 1 == group.size()});
    std::vector<std::vector<double>> out;
    for (Tensor& p : t.model().parameters()) out.push_back(p.grad().to_vector<double>());
    return out;
  };
  const auto accumulated = gradients({halves[0], halves[1]}), concatenated = gradients({whole[0]});
  REQUIRE(accumulated.size() == concatenated.size());
  double worst = 0, largest = 0;
  for (size_t p = 0; p < accumulated.size(); ++p)
    for (size_t i = 0; i < accumulated[p].size(); ++i) {
      worst = std::max(worst, std::fabs(accumulated[p][i] - concatenated[p][i]));
      largest = std::max(largest, std::fabs(concatenated[p][i]));
    }
  CHECK(largest > 1e-3);   // the gradients are not trivially zero
  CHECK(worst < 1e-12);    // summation order only
}

TEST_CASE("trainer: accum_steps makes one optimizer step of K batches in train_epoch") {
  Toy toy;
  toy.config.model.dropout = 0;
  toy.config.accum_steps = 2;  // 3 batches of 8: a step of 2, then the epoch's last batch alone
  Trainer t(toy.config, toy.src_vocab, toy.tgt_vocab);
  std::vector<int64_t> batches_per_step;
  models::EpochResult e = t.train_epoch(toy.corpus, [&](const models::StepResult& r) {
    batches_per_step.push_back(r.batches);
    return true;
  });
  CHECK(e.completed);
  CHECK(batches_per_step == std::vector<int64_t>{2, 1});
  CHECK(t.state().step == 2);
  CHECK(t.state().epoch == 1);
  // the step over a group equals the step over its concatenation (float32: Adam's first step is
  // about lr x sign(gradient), so the weights agree to float rounding)
  auto sorted = [&](int64_t size) { return text::make_batches(toy.corpus.pairs, {.batch_size = size, .shuffle = false}); };
  Trainer grouped(toy.config, toy.src_vocab, toy.tgt_vocab), single(toy.config, toy.src_vocab, toy.tgt_vocab);
  const std::vector<text::Batch> halves = sorted(8), whole = sorted(16);
  const std::vector<models::TensorBatch> group = {models::to_tensors(halves[0]), models::to_tensors(halves[1])};
  models::StepResult g = grouped.train_step(group), w = single.train_step(models::to_tensors(whole[0]));
  CHECK(g.tokens == w.tokens);
  CHECK(g.loss == doctest::Approx(w.loss).epsilon(1e-6));
  CHECK(g.grad_norm == doctest::Approx(w.grad_norm).epsilon(1e-5));
  CHECK(grouped.state().batch == 2);
  auto pa = grouped.model().parameters(), pb = single.model().parameters();
  for (size_t p = 0; p < pa.size(); ++p) {
    std::vector<float> a = pa[p].to_vector<float>(), b = pb[p].to_vector<float>();
    for (size_t i = 0; i < a.size(); ++i) CHECK(a[i] == doctest::Approx(b[i]).epsilon(1e-4));
  }
}

// lr_schedule inverse_sqrt (fairseq's): the rate of update k+1 (after k updates) is
//   lr x k / warmup_updates            for k < warmup_updates (warming up from fairseq's default 0)
//   lr x sqrt(warmup_updates / k)      from then on,
// stepped once per optimizer update, so an accumulated group of batches counts once.
TEST_CASE("trainer: lr_schedule inverse_sqrt sets the rate per optimizer update, and resumes exactly") {
  Toy toy;
  toy.config.lr_schedule = models::LRSchedule::inverse_sqrt, toy.config.warmup_updates = 4;
  toy.config.accum_steps = 2;  // 3 batches of 8: updates of 2 batches and 1 batch per epoch
  toy.config.step_size = 1, toy.config.gamma = 0.5;  // the step schedule's: unused
  const double lr = toy.config.lr;
  const std::vector<double> expected = {lr * 1 / 4, lr * 2 / 4, lr * 3 / 4, lr, lr * std::sqrt(4.0 / 5.0),
                                        lr * std::sqrt(4.0 / 6.0)};  // after updates 1..6
  Trainer straight(toy.config, toy.src_vocab, toy.tgt_vocab);
  CHECK(straight.optimizer().lr() == 0.0);  // the first update runs at warmup_init_lr 0, as fairseq's
  std::vector<std::vector<float>> initial;
  for (Tensor& p : straight.model().parameters()) initial.push_back(p.to_vector<float>());
  std::vector<double> rates;
  std::vector<double> losses;
  for (int e = 0; e < 3; ++e) {
    models::EpochResult r = straight.train_epoch(toy.corpus, [&](const models::StepResult&) {
      rates.push_back(straight.optimizer().lr());
      if (rates.size() == 1) {  // Adam at lr 0 moved nothing
        std::vector<Tensor> after = straight.model().parameters();
        for (size_t i = 0; i < after.size(); ++i) CHECK(after[i].to_vector<float>() == initial[i]);
      }
      return true;
    });
    CHECK(r.completed);
    CHECK(straight.optimizer().lr() == rates.back());  // an epoch's end does not step it
    losses.push_back(r.loss);
  }
  REQUIRE(rates.size() == expected.size());
  CHECK(straight.state().step == 6);
  for (size_t k = 0; k < rates.size(); ++k) {
    CAPTURE(k);
    CHECK(rates[k] == doctest::Approx(expected[k]).epsilon(1e-15));
  }

  // Stopped after update 3 (the first of epoch 2), saved, resumed in a fresh trainer: the same
  // rates, losses and weights to the bit.
  testing::TempDir dir;
  const std::string path = (dir.path / "inverse_sqrt.safetensors").string();
  Trainer first(toy.config, toy.src_vocab, toy.tgt_vocab);
  std::vector<double> resumed_losses = {first.train_epoch(toy.corpus).loss};
  CHECK_FALSE(first.train_epoch(toy.corpus, [&](const models::StepResult&) { return false; }).completed);
  CHECK(first.state().step == 3);
  first.save(path);
  models::LoadedCheckpoint checkpoint = models::read_checkpoint(path);
  CHECK(checkpoint.info.train_state.values["scheduler"]["type"] == "InverseSqrtLR");  // JSON, not a JSON string
  default_generator().set_offset(12345);
  Trainer second(toy.config, toy.src_vocab, toy.tgt_vocab);
  second.restore(checkpoint, path);
  CHECK(second.optimizer().lr() == rates[2]);
  std::vector<double> resumed_rates;
  for (int e = 0; e < 2; ++e)
    resumed_losses.push_back(second.train_epoch(toy.corpus, [&](const models::StepResult&) {
      resumed_rates.push_back(second.optimizer().lr());
      return true;
    }).loss);
  CHECK(resumed_losses == losses);
  CHECK(resumed_rates == std::vector<double>(rates.begin() + 3, rates.end()));
  check_same_parameters(straight, second);

  // A checkpoint of the step schedule does not resume an inverse_sqrt trainer (the resume check of
  // the config refuses it first; this is the scheduler's own check).
  models::TrainConfig step_config = toy.config;
  step_config.lr_schedule = models::LRSchedule::step, step_config.warmup_updates = 0;
  Trainer stepped(step_config, toy.src_vocab, toy.tgt_vocab);
  stepped.save(path);
  Trainer refused(toy.config, toy.src_vocab, toy.tgt_vocab);
  CHECK_THROWS_WITH_AS(refused.restore(models::read_checkpoint(path), path),
                       doctest::Contains("train_state.scheduler: InverseSqrtLR.load_state_dict: the state was saved "
                                         "by StepLR"), IOError);
}

TEST_CASE("trainer: a restored state's batches fit its steps x accum_steps, and init weights need equal vocabularies") {
  Toy toy;
  toy.config.accum_steps = 2;
  Trainer trainer(toy.config, toy.src_vocab, toy.tgt_vocab);
  testing::TempDir dir;
  const std::string path = (dir.path / "ck.safetensors").string();
  trainer.save(path);
  models::LoadedCheckpoint checkpoint = models::read_checkpoint(path);
  checkpoint.info.train_state.values["step"] = 2, checkpoint.info.train_state.values["batch"] = 5;
  Trainer resumed(toy.config, toy.src_vocab, toy.tgt_vocab);
  CHECK_THROWS_WITH_AS(resumed.restore(checkpoint, path),
                       doctest::Contains("train_state.batch = 5 exceeds step = 2 x accum_steps = 2"), IOError);
  // init_from: weights only; another target vocabulary is named as the side that differs
  text::Vocab other = text::Vocab::build(text::source_side(toy.pairs));
  Trainer elsewhere(toy.config, toy.src_vocab, other);
  CHECK_THROWS_WITH_AS(elsewhere.init_weights_from(models::read_checkpoint(path), path),
                       doctest::Contains(doctest::String(("its target vocabulary (word " +
                                                          std::to_string(toy.tgt_vocab.size()) +
                                                          " tokens) differs from the run's").c_str())), IOError);
  Trainer same(toy.config, toy.src_vocab, toy.tgt_vocab);
  same.init_weights_from(models::read_checkpoint(path), path);
  CHECK(same.state().step == 0);
  auto pa = same.model().parameters(), pb = trainer.model().parameters();
  for (size_t i = 0; i < pa.size(); ++i) CHECK(pa[i].to_vector<float>() == pb[i].to_vector<float>());
}

// The accuracy guard of --amp bf16: the same short training run (fixed seed, no dropout, label
// smoothing 0.1 so that the loss settles near 0.5 instead of diving to 0, 300 steps) in float32 and
// under Autocast(bf16) must give the same loss curve. Stated tolerance, per epoch's mean loss: within
// 1.5% of float32's over the first 25 epochs (the smooth descent; measured 0.5% at most, native and
// emulated bf16 alike) and within 10% over all 100 (later, the two runs' Adam bumps differ in time:
// measured 6.2%). A bf16 path broken to 3 mantissa bits (truncated) measured 4.3% by epoch 10 and
// 22% overall, so either bound catches it.
TEST_CASE("trainer: --amp bf16 follows float32's loss curve over 300 steps: the same descent, the same plateau") {
  // bf16 products even where a run would prefer float32 ones (training_precision): the curve of bf16
  // is the point, native where the CPU has it, else the emulation
  setenv("SEQGRAD_BF16_GEMM", "native", 1);
  struct Unset {
    ~Unset() { unsetenv("SEQGRAD_BF16_GEMM"); }
  } unset;
  Toy toy;
  toy.config.model = {.embed_size = 16, .hidden_size = 32, .num_layers = 1, .dropout = 0};
  toy.config.label_smoothing = 0.1, toy.config.gamma = 1.0, toy.config.lr = 0.005, toy.config.clip = 1.0;
  auto curve = [&](const std::string& amp) {
    models::TrainConfig c = toy.config;
    c.amp = models::parse_amp(amp);
    Trainer trainer(c, toy.src_vocab, toy.tgt_vocab);
    REQUIRE(trainer.precision() == c.amp);
    std::vector<double> losses;
    for (int epoch = 0; epoch < 100; ++epoch) losses.push_back(trainer.train_epoch(toy.corpus).loss);
    return losses;
  };
  const std::vector<double> f32 = curve("off"), bf16 = curve("bf16");
  // Two things are meaningful: the descent, where both curves fall steeply and rounding cannot move
  // them apart, is followed point by point; after it both sit on a plateau where Adam's bumps fall
  // wherever the rounding of the last steps puts them (on another BLAS kernel, or with or without
  // AVX-512 BF16, they move), so there the plateau's level over a window is compared, not its points.
  double descent = 0;  // the largest relative gap in epochs 1-25
  for (size_t e = 0; e < 25; ++e) descent = std::max(descent, std::abs(bf16[e] - f32[e]) / f32[e]);
  auto plateau = [](const std::vector<double>& losses) {  // the mean of the last 50 epochs
    return std::accumulate(losses.end() - 50, losses.end(), 0.0) / 50;
  };
  const double level_gap = std::abs(plateau(bf16) - plateau(f32)) / plateau(f32);
  MESSAGE("epoch loss float32 " << f32.front() << " -> " << f32.back() << ", bf16 " << bf16.front() << " -> "
          << bf16.back() << "; largest relative gap " << descent << " in epochs 1-25; plateau (epochs 51-100) "
          << plateau(f32) << " and " << plateau(bf16) << ", relative gap " << level_gap);
  CHECK(f32[24] < 0.4 * f32.front());  // it learned: the guard compares two real curves
  CHECK(descent <= 0.015);
  CHECK(level_gap <= 0.05);
}

TEST_CASE("trainer: --amp bf16 trains with bf16 products only where the backend prefers them") {
  const Bf16GemmInfo info = bf16_gemm_info(Device::cpu());
  CHECK(models::training_precision(GemmPrecision::bf16, Device::cpu()) ==
        (info.preferred ? GemmPrecision::bf16 : GemmPrecision::full));
  CHECK(models::training_precision(GemmPrecision::full, Device::cpu()) == GemmPrecision::full);
  CHECK(models::training_precision(GemmPrecision::f16, Device::cpu()) == GemmPrecision::f16);
  Toy toy;
  toy.config.amp = GemmPrecision::bf16;
  Trainer trainer(toy.config, toy.src_vocab, toy.tgt_vocab);
  CHECK(trainer.precision() == models::training_precision(GemmPrecision::bf16, Device::cpu()));
  CHECK(trainer.config().amp == GemmPrecision::bf16);  // what was asked is kept (checkpoints, resume)
}

namespace {

// A checkpoint file kept in the source tree (tests/fixtures), found from the build folder (meson
// runs the suites there) or from the source root.
std::string fixture(const std::string& name) {
  std::vector<std::filesystem::path> roots = {std::filesystem::path(__FILE__).parent_path(), "tests"};
  if (const char* data = std::getenv("SEQGRAD_DATA")) roots.push_back(std::filesystem::path(data).parent_path() / "tests");
  for (const auto& root : roots)
    if (std::filesystem::exists(root / "fixtures" / name)) return (root / "fixtures" / name).string();
  FAIL("no fixture " << name);
  return "";
}

}  // namespace

// Checkpoints of format version 2, as `seqgrad train` wrote them before StateDict (the optimizer's
// and scheduler's states as JSON strings inside train_state, the optimizer's tensors "optim.*",
// early stopping as loose fields beside best_bleu): read, upgraded, resumed, and saved again in
// the current layout. The GRU one predates early stopping (its best_bleu was the tokenised BLEU),
// the Transformer one has best_metric and best_score.
TEST_CASE("trainer: checkpoints of format version 2 resume, upgraded on read") {
  struct Case {
    const char* file;
    std::optional<double> best;
    int64_t step;
  };
  for (const Case& c : {Case{"checkpoint_format2_gru.safetensors", std::nullopt, 2},
                        Case{"checkpoint_format2_transformer.safetensors", 0.012124272849803774, 1}}) {
    CAPTURE(c.file);
    const std::string path = fixture(c.file);
    models::LoadedCheckpoint old = models::read_checkpoint(path);
    const StateDict& state = old.info.train_state;
    CHECK(state.values["optimizer"]["type"] == "Adam");  // a JSON value now, not a JSON string
    CHECK(state.values["scheduler"]["type"] == "StepLR");
    CHECK_FALSE(state.values.contains("best_bleu"));
    CHECK(state.count("optimizer.state.0.exp_avg") == 1);
    for (const auto& [name, t] : old.tensors) CHECK_FALSE(name.starts_with("optim."));
    CHECK(state.values["early_stopping"]["metric"] == "sacrebleu");
    CHECK(state.values["early_stopping"]["validations_since_best"] == 0);

    Trainer resumed(old.info.config, old.info.src_vocab, old.info.tgt_vocab);
    resumed.restore(old, path);
    CHECK(resumed.state().step == c.step);
    CHECK(resumed.state().early_stopping.best() == c.best);
    CHECK(resumed.optimizer().state_dict().values["groups"][0]["params"][0]["step"] == c.step);
    CHECK(resumed.optimizer().state_dict().at("state.0.exp_avg").to_vector<float>() ==
          state.at("optimizer.state.0.exp_avg").to_vector<float>());

    // saved again: version 3, read back as saved
    testing::TempDir dir;
    const std::string again = (dir.path / "again.safetensors").string();
    resumed.save(again);
    CHECK(load_tensors(again).metadata.at("format_version") == "3");
    models::LoadedCheckpoint now = models::read_checkpoint(again);
    CHECK(now.info.train_state.values["optimizer"] == state.values["optimizer"]);
    CHECK(now.info.train_state.values["early_stopping"]["best"] == state.values["early_stopping"]["best"]);
    CHECK(now.info.train_state.at("optimizer.state.3.exp_avg_sq").to_vector<float>() ==
          state.at("optimizer.state.3.exp_avg_sq").to_vector<float>());
  }
}

// Early stopping is one object the run feeds and every checkpoint saves: a run stopped after two
// validations and resumed from last.safetensors stops after one more, as the run without the
// interruption did. With lr 1e-30 (Adam's steps of about lr are below float32's resolution of
// the weights) and no dropout every validation scores the same, so only the first is a best:
// patience 2 ends the run after 3 validations.
TEST_CASE("fit: early stopping resumed mid-patience goes on counting where it was") {
  Toy toy;
  toy.config.lr = 1e-30, toy.config.model.dropout = 0, toy.config.epochs = 10, toy.config.patience = 2;
  toy.config.early_stopping_metric = "loss";
  models::ValidationSet valid{toy.corpus, toy.pairs, {}};
  for (const text::TokenizedPair& p : toy.pairs) {
    std::string sentence;
    for (const std::string& w : p.tgt) sentence += (sentence.empty() ? "" : " ") + w;
    valid.raw_references.push_back(sentence);
  }
  text::MemoryBatches batches(toy.corpus.pairs, {.batch_size = 8});

  Trainer straight(toy.config, toy.src_vocab, toy.tgt_vocab);
  models::RunResult all = models::fit(straight, batches, valid);
  CHECK(all.completed);
  CHECK(all.stopped_early);
  REQUIRE(all.epochs.size() == 3);
  CHECK(all.epochs[0].best);
  CHECK_FALSE(all.epochs[1].best);
  CHECK(straight.state().epoch == 3);

  testing::TempDir dir;
  Trainer first(toy.config, toy.src_vocab, toy.tgt_vocab);
  int validations = 0;
  models::RunOptions stop_after_two{.out_dir = dir.path.string()};
  stop_after_two.callbacks.after_epoch = [&](const models::EpochMetrics&, const models::Evaluation&) {
    return ++validations < 2;
  };
  models::RunResult part = models::fit(first, batches, valid, stop_after_two);
  CHECK_FALSE(part.completed);
  CHECK(first.state().early_stopping.validations_since_best() == 1);

  const std::string last = (dir.path / "last.safetensors").string();
  Trainer second(toy.config, toy.src_vocab, toy.tgt_vocab);
  second.restore(models::read_checkpoint(last), last);
  CHECK(second.state().early_stopping.validations_since_best() == 1);
  CHECK(second.state().early_stopping.best() == all.epochs[0].valid_loss);
  models::RunResult rest = models::fit(second, batches, valid, {.out_dir = dir.path.string()});
  CHECK(rest.completed);
  CHECK(rest.stopped_early);
  CHECK(rest.epochs.size() == 1);  // a fresh count would have taken two more
  CHECK(second.state().epoch == 3);

  // a resumed run with more patience goes on (patience is resumable): the count stays, the limit moves
  models::TrainConfig patient = toy.config;
  patient.patience = 4;
  Trainer third(patient, toy.src_vocab, toy.tgt_vocab);
  third.restore(models::read_checkpoint(last), last);
  CHECK_FALSE(third.state().early_stopping.should_stop());
  CHECK(third.state().early_stopping.validations_since_best() == 2);
  CHECK(third.state().early_stopping.options().patience == 4);
}
