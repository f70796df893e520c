// The translator's whole training run from a program, as `seqgrad train` runs it: a config from a
// preset, the data and vocabularies, a Trainer, and models::fit (models/seq2seq/run.h), which trains
// each epoch, validates it, writes metrics.jsonl and keeps best.safetensors and last.safetensors.
// A small de->en model on the first 2,000 pairs of the bundled Multi30k, two epochs, so that it
// runs in seconds; `seqgrad train --preset tiny` is the same run at a useful size.
// Data: SEQGRAD_DATA, else ./data (the folder holding multi30k/).
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include <fmt/core.h>

#include <seqgrad/core/threads.h>
#include <seqgrad/models/seq2seq/run.h>

#include "check.h"

using namespace seqgrad;
using examples::expect;

int main() {
  set_num_threads(2);
  models::TrainConfig config = models::preset("tiny");
  config.data_dir = std::getenv("SEQGRAD_DATA") ? std::getenv("SEQGRAD_DATA") : "data";
  config.train_subset = 2000, config.epochs = 2;
  config.model.embed_size = 32, config.model.hidden_size = 64;
  config.validate();  // a ConfigError names the field and its range

  models::RunData data = models::load_run_data(config);  // corpora read and checked, vocabularies built
  models::Trainer trainer(config, data.vocabs.src, data.vocabs.tgt);
  const std::string out = "runs/fit_example";
  std::filesystem::remove_all(out);
  models::RunOptions options;
  options.out_dir = out;
  options.callbacks.after_epoch = [](const models::EpochMetrics& m, const models::Evaluation&) {
    fmt::print("epoch {}: train loss {:.3f}, valid loss {:.3f}, sacreBLEU {:.2f}{}\n", m.epoch, m.train_loss,
               m.valid_loss, m.valid_sacrebleu, m.best ? " (best so far)" : "");
    return true;  // false would stop the run here, with last.safetensors saved
  };
  models::RunResult run = models::fit(trainer, *data.train, data.valid, options);

  expect(run.completed && run.epochs.size() == 2, "fit ran both epochs");
  expect(run.epochs[1].train_loss < run.epochs[0].train_loss, "the training loss fell from epoch 1 to epoch 2");
  expect(run.epochs[1].valid_loss < run.epochs[0].valid_loss, "so did the validation loss");
  // a uniform guess over the target vocabulary costs log(V) per token; two epochs are far below it
  expect(run.epochs[1].valid_loss < 0.7 * std::log(double(data.vocabs.tgt.size())),
         fmt::format("validation loss {:.2f} is well below a uniform guess's log(V) = {:.2f}", run.epochs[1].valid_loss,
                     std::log(double(data.vocabs.tgt.size()))));
  expect(run.best_checkpoint == out + "/best.safetensors" && std::filesystem::exists(out + "/last.safetensors"),
         "best.safetensors and last.safetensors written");
  expect(text::read_lines(out + "/metrics.jsonl").size() == 2, "metrics.jsonl holds one line per epoch");

  // the best checkpoint holds its config and vocabularies: it loads into a model without the data
  models::LoadedCheckpoint best = models::read_checkpoint(run.best_checkpoint);
  models::Seq2Seq model(best.info.config.model);
  models::load_weights(model, best, run.best_checkpoint);
  expect(best.info.config.to_json() == trainer.config().to_json(), "the checkpoint's config is the run's");
  return examples::exit_code();
}
