// Shared by the train, translate, eval and attention commands: test reports with translations and
// heatmaps (evaluation lives with the trainer, models/seq2seq/trainer.h).
#pragma once
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "models/seq2seq/alignment.h"
#include "models/seq2seq/checkpoint.h"
#include "models/seq2seq/decode.h"
#include "models/seq2seq/internals.h"
#include "models/seq2seq/run.h"
#include "models/seq2seq/trainer.h"
#include "models/seq2seq/translator.h"
#include "tools/args.h"
#include "tools/plot/plot.h"

namespace seqgrad::tools {

using models::Evaluation;
using models::evaluate;

// How heatmaps label their rows and columns: with the vocabulary's tokens (subword pieces such as
// "▁Hund" "e"), or with words, the pieces merged (merged_into_words).
enum class HeatmapLabels { tokens, words };

// The test split decoded and scored: sacreBLEU (13a, cased), chrF and tokenised lower-cased BLEU.
Evaluation evaluate_test(const models::Ensemble& models, const text::Vocab& src_vocab, const text::Vocab& tgt_vocab,
                         const models::Corpora& data, const models::TrainConfig& config,
                         const models::DecodeOptions& decoding);
// The test line, the metrics' signatures and five sample translations on stdout.
void report_test(const Evaluation& test, const models::Corpora& data, const models::DecodeOptions& decoding);
// The five sample translations' heatmaps in out_dir (attention_test0..4); returns "<out_dir>/attention_test0..4.png".
std::string write_test_heatmaps(const Evaluation& test, const text::Vocab& src_vocab, const text::Vocab& tgt_vocab,
                                const models::Corpora& data, const std::string& out_dir,
                                HeatmapLabels labels = HeatmapLabels::tokens);
// The same as one JSON object (`eval --json`): the scores, the signatures, the decoding, every output.
nlohmann::json test_report_json(const Evaluation& test, const models::DecodeOptions& decoding);

// The heatmap of one translation's attention weights (or, with energies, its pre-softmax scores):
// source tokens across, target tokens down.
plot::Heatmap attention_heatmap(const std::vector<std::string>& src_tokens, const std::vector<std::string>& tgt_tokens,
                                const std::vector<std::vector<float>>& rows, const std::string& title, bool energies);
// The source tokens as heatmap labels: a word the vocabulary lacks (the model saw <unk>) is
// labelled "word (<unk>)".
std::vector<std::string> marked_unknown(const std::vector<std::string>& src_tokens, const text::Vocab& src_vocab);
// The heatmap with subword pieces merged back into words for display: models::merged_into_words
// (source columns summed, output rows averaged). Only for weights, not energies.
plot::Heatmap merged_into_words(const plot::Heatmap& pieces);
// Writes the attention heatmap (PNG and SVG) of one translation, and <stem>_energies.{png,svg}
// with the pre-softmax scores when the attention kind has them (always labelled with tokens).
void write_attention_heatmap(const std::string& path_stem, const std::vector<std::string>& src_tokens,
                             const std::vector<std::string>& tgt_tokens, const models::Hypothesis& hyp,
                             const std::string& title, HeatmapLabels labels = HeatmapLabels::tokens);

// A --checkpoint file and the model its weights build (float32 or int8), in eval mode; reads
// --allow-missing-checksum, and refuses a --beam wider than the target vocabulary and a decoding
// flag the checkpoint's architecture does not support (UsageErrors naming the file, before the
// model allocates anything). Shared by translate, eval, attention and serve.
std::pair<models::LoadedCheckpoint, std::unique_ptr<models::TranslationModel>> load_checkpoint_model(
    const std::string& path, const Args& a);

// Translations come from the library (models/seq2seq/translator.h).
using models::Translation;
using models::translate_batch;

// The alignment `translate --alignment` appends to each output line after " ||| " (docs/outputs.md).
enum class AlignmentOutput { none, hard, soft };
// --alignment's value: "hard" or "soft" (a UsageError names the flag otherwise).
AlignmentOutput parse_alignment_output(const std::string& value);
// One hypothesis's alignment as text: Pharaoh pairs (hard) or weight rows (soft), at the level of
// `labels` (words: pieces merged, models::merged_into_words).
std::string alignment_text(const Translation& t, size_t hypothesis, AlignmentOutput kind, HeatmapLabels labels);

// What a translation's JSON holds beyond the text, tokens and scores. The attention object (its
// axes and diagnostics) is always there; these add to it.
struct TranslationJsonOptions {
  HeatmapLabels labels = HeatmapLabels::tokens;  // the attention's units: tokens, or words (pieces merged)
  bool hard_alignment = false;                   // attention.alignment: [src, tgt] pairs
  bool weights = false;                          // attention.weights: the matrix, one row per output unit
  bool heads = false;  // attention.heads: a Transformer's every layer and head (Translation::heads, from explain)
};
// The JSON object of one translated sentence, the one shape `translate --json` prints (adding
// "line") and `serve` answers with; docs/outputs.md lists every field. An input that could not be
// translated gives {"src", "error"}.
nlohmann::json translation_json(const Translation& t, const std::string& source, const text::Vocab& tgt_vocab,
                                const TranslationJsonOptions& options = {});
// A Transformer's cross-attention replayed along another model's output (models::replay_batch's
// heads, over `reference`'s axes in tokens) against that model's attention `reference` (the GRU's
// along its own output): per layer, each head's models::attention_overlap with it, and the heads'
// average's. {"heads": [[per head] per layer], "average": [per layer]}, null where there is no row.
nlohmann::json agreement_json(const models::TransformerInternals& heads, const models::AttentionMatrix& reference);
// Per-head maps (h, R, C) as h arrays of R rows of C numbers; `causal`: row r keeps its first r + 1
// numbers (a causal self-attention's, whose later positions are not attended).
nlohmann::json head_rows_json(const Tensor& maps, bool causal = false);

// The decoding flags, from the decode options' table (models/seq2seq/decode_options.h): its search
// options (--beam, --max-len, --min-len, the penalties) for every command that decodes (train's
// test report, translate, eval, serve, attention), --nbest (translate), and the sampling options
// --sample, --temperature and --seed (translate, eval, attention; train's --seed seeds the run).
void add_decode_options(Args& args);
void add_nbest_option(Args& args);
void add_sampling_options(Args& args);
// The DecodeOptions the given flags make over the checkpoint's defaults (models::decode_options: at
// most 2 x its max_tokens + 10 tokens, as validation decodes); each value is checked against its
// row's range, and the flags against each other, as UsageErrors naming the flag.
models::DecodeOptions decode_options(const Args& args, const models::TrainConfig& config);
// Their usage errors, before anything loads (a command's flags are checked before its checkpoint).
void check_decode_flags(const Args& args);

// This process's resident memory from /proc/self/status, in bytes: VmRSS now and VmHWM, its peak
// so far; 0 where the file or a line is missing (not Linux).
struct ResidentMemory {
  int64_t now = 0, peak = 0;
};
ResidentMemory resident_memory();

// Checks that `path` is a regular file that starts like a safetensors file (an 8-byte header length
// that fits the file, then '{'), so that any other file is "not a safetensors checkpoint".
void check_safetensors_file(const std::string& path);
// Creates the output folder `path` (given with `flag`) and checks it is writable: an IOError names both.
std::string create_output_folder(const std::string& path, const std::string& flag);

}  // namespace seqgrad::tools
