// Translating from a program: models::Translator loads checkpoints of either architecture (and
// ensembles of them) and translates sentences with any decode options, as `seqgrad translate` does.
// A small Transformer is trained here with fit (two epochs on 2,000 pairs of the bundled Multi30k,
// seconds), then translated with greedy and beam search; when 10_fit_translator has left its GRU
// checkpoint in this folder, the two translate as an ensemble too.
// Data: SEQGRAD_DATA, else ./data (the folder holding multi30k/).
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/core.h>

#include <seqgrad/core/threads.h>
#include <seqgrad/models/seq2seq/run.h>
#include <seqgrad/models/seq2seq/translator.h>

#include "check.h"

using namespace seqgrad;
using examples::expect;

int main() {
  set_num_threads(2);
  // the tiny preset's data and vocabulary, a 2 + 2 layer Transformer of width 64
  models::TrainConfig config = models::preset("tiny");
  config.data_dir = std::getenv("SEQGRAD_DATA") ? std::getenv("SEQGRAD_DATA") : "data";
  config.train_subset = 2000, config.epochs = 2, config.lr = 0.002;
  config.model = {.architecture = models::Architecture::transformer, .embed_size = 64, .hidden_size = 64,
                  .num_layers = 2, .dropout = 0.1, .heads = 4, .ffn_size = 128};
  config.validate();
  models::RunData data = models::load_run_data(config);
  models::Trainer trainer(config, data.vocabs.src, data.vocabs.tgt);
  models::RunOptions options;
  options.out_dir = "runs/translator_example";
  std::filesystem::remove_all(options.out_dir);
  const models::RunResult run = models::fit(trainer, *data.train, data.valid, options);
  expect(run.completed, "a Transformer trained for two epochs with fit");

  // the library's translator: the checkpoint's vocabularies and decoding defaults come with it
  const models::Translator translator({run.best_checkpoint});
  const std::vector<std::string> sentences = {"Ein Hund rennt durch den Schnee.", "Zwei Männer spielen Fußball.", ""};
  models::DecodeOptions greedy = translator.default_options();
  std::vector<models::Translation> out = translator.translate(sentences, greedy);
  for (size_t i = 0; i < 2; ++i) fmt::print("  {} -> {}\n", sentences[i], translator.detokenize(out[i]));
  expect(out[0].error.empty() && !out[0].hyps.front().tokens.empty(), "a sentence translated greedily");
  expect(!out[2].error.empty(), fmt::format("an empty sentence is an error of its own: {}", out[2].error));
  // every step's attention row is a distribution over the source tokens (<eos> included)
  const models::Hypothesis& best = out[0].hyps.front();
  bool rows_sum_to_one = !best.attention.empty();
  for (const std::vector<float>& row : best.attention) {
    double sum = 0;
    for (float w : row) sum += w;
    rows_sum_to_one = rows_sum_to_one && std::abs(sum - 1.0) < 1e-4 && row.size() == out[0].src_tokens.size() + 1;
  }
  expect(rows_sum_to_one, "each output token's attention row sums to 1 over the source");

  models::DecodeOptions beam = greedy;
  beam.beam_size = 4, beam.nbest = 3;
  std::vector<models::Translation> ranked = translator.translate({sentences[0]}, beam);
  const auto& hyps = ranked[0].hyps;
  expect(hyps.size() == 3 && hyps[0].score >= hyps[1].score && hyps[1].score >= hyps[2].score,
         "beam 4 gives 3 hypotheses, best first");

  const std::string gru = "runs/fit_example/best.safetensors";  // 10_fit_translator's, when it ran here
  if (std::filesystem::exists(gru)) {
    const models::Translator both({run.best_checkpoint, gru});
    expect(both.size() == 2 && both.translate({sentences[0]}, greedy)[0].error.empty(),
           "the Transformer and the GRU translate as an ensemble (mean probabilities)");
  }
  return examples::exit_code();
}
