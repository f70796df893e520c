#include "tools/train_flags.h"

#include <algorithm>
#include <filesystem>
#include <optional>

#include <fmt/core.h>

#include "core/threads.h"
#include "models/seq2seq/trainer.h"
#include "models/text/subword.h"

namespace seqgrad::tools {
namespace {

std::string absolute(const std::string& path) { return std::filesystem::absolute(path).lexically_normal().string(); }

}  // namespace

std::optional<text::CorpusFiles> split_flag(const Args& a, const std::string& name, const std::string& tsv_name) {
  const bool aligned = a.is_pair_option(name) && a.has(name), tsv = a.has(tsv_name);
  SG_CHECK_USAGE(!(aligned && tsv), "--{} and --{} exclude each other (two aligned files, or one tab-separated "
                 "file)", name, tsv_name);
  if (!aligned && !tsv) return std::nullopt;
  text::CorpusFiles f;
  if (tsv) {
    f.tsv = absolute(a.get(tsv_name));
  } else {
    auto [src, tgt] = a.get_pair(name);
    f.src = absolute(src), f.tgt = absolute(tgt);
  }
  return f;
}

namespace {

// --corpus NAME (a bundled corpus), or the user's files: --train and --valid (or their -tsv
// forms), --test optional.
void apply_data_flags(models::TrainConfig& c, const Args& a) {
  const std::string valid_flag = a.is_pair_option("valid") ? "valid" : "valid-files";
  std::optional<text::CorpusFiles> train = split_flag(a, "train", "train-tsv"),
                                   valid = split_flag(a, valid_flag, "valid-tsv"),
                                   test = split_flag(a, "test", "test-tsv");
  if (a.has("corpus")) {
    SG_CHECK_USAGE(!train && !valid && !test, "--corpus {} names a bundled corpus; --train, --valid and --test give "
                   "your own files instead: use one or the other", a.get("corpus"));
    const std::vector<std::string> bundled = {"multi30k", "fra-eng"};
    SG_CHECK_USAGE(std::find(bundled.begin(), bundled.end(), a.get("corpus")) != bundled.end(),
                   "--corpus expects multi30k or fra-eng, got '{}'{} (your own files: --train SRC TGT --valid SRC TGT)",
                   a.get("corpus"), did_you_mean(a.get("corpus"), bundled));
    if (a.get("corpus") != c.corpus && a.get("corpus") == "fra-eng" && !a.has("src") && !a.has("tgt"))
      c.src_lang = "en", c.tgt_lang = "fr";  // fra-eng's languages
    if (a.get("corpus") != c.corpus && a.get("corpus") == "multi30k" && !a.has("src") && !a.has("tgt"))
      c.src_lang = "de", c.tgt_lang = "en";
    c.corpus = a.get("corpus");
    return;
  }
  if (!train && !valid && !test) return;
  SG_CHECK_USAGE(train.has_value() || c.corpus == "files", "--{} and --test go with --train: your own corpus "
                 "needs --train SRC_FILE TGT_FILE (or --train-tsv FILE)", valid_flag);
  SG_CHECK_USAGE(valid.has_value() || c.corpus == "files", "--train needs --{} SRC_FILE TGT_FILE (or --valid-tsv "
                 "FILE): a validation split picks the best checkpoint", valid_flag);
  if (c.corpus != "files" && !a.has("src") && !a.has("tgt")) c.src_lang = "src", c.tgt_lang = "tgt";
  c.corpus = "files";
  if (train) c.train_files = *train;
  if (valid) c.valid_files = *valid;
  if (test) c.test_files = *test;
}

}  // namespace

void add_data_options(Args& a, const DataOptions& o) {
  a.option("corpus", "name", "bundled corpus under --data-dir: multi30k | fra-eng (default: the preset's)")
      .pair_option("train", "src_file", "tgt_file", "your training corpus: two files aligned by line")
      .option("train-tsv", "file", "your training corpus as one file of source<TAB>target lines")
      .pair_option(o.valid_flag, "src_file", "tgt_file", "your validation corpus (needed with --train)")
      .option("valid-tsv", "file", "your validation corpus, tab-separated");
  if (o.test)
    a.pair_option("test", "src_file", "tgt_file", "your test corpus (optional; scored after training)")
        .option("test-tsv", "file", "your test corpus, tab-separated");
}

namespace {

// --vocab word | unigram:N | bpe:N and --joint-vocab, checked where they enter.
void check_vocab_flags(const models::TrainConfig& c) {
  if (c.vocab == "word") {
    SG_CHECK_USAGE(!c.joint_vocab, "--joint-vocab shares one subword model between the languages; it needs --vocab "
                   "unigram:N or bpe:N, not word");
    return;
  }
  text::parse_subword_spec(c.vocab, "--vocab");
  SG_CHECK_USAGE(text::subword_supported(), "--vocab {}: this build has no SentencePiece support (install "
                 "libsentencepiece-dev and reconfigure with -Dsentencepiece=enabled), or use --vocab word", c.vocab);
}

}  // namespace

models::TrainConfig apply_config_flags(models::TrainConfig c, const Args& a) {
  apply_data_flags(c, a);
  if (a.has("src")) c.src_lang = a.get("src");
  if (a.has("tgt")) c.tgt_lang = a.get("tgt");
  if (a.has("data-dir")) c.data_dir = a.get("data-dir");
  if (a.has("shuffle-buffer")) c.shuffle_buffer = a.get_int("shuffle-buffer");
  if (a.has("epochs")) c.epochs = a.get_int("epochs");
  if (a.has("batch-size")) c.batch_size = a.get_int("batch-size");
  if (a.has("lr")) c.lr = a.get_double("lr");
  if (a.has("embed")) c.model.embed_size = a.get_int("embed");
  if (a.has("hidden")) c.model.hidden_size = a.get_int("hidden");
  if (a.has("layers")) c.model.num_layers = a.get_int("layers");
  if (a.has("dropout")) c.model.dropout = a.get_double("dropout");
  SG_CHECK_USAGE(c.src_lang != c.tgt_lang, "--src and --tgt are both '{}': a translator needs two languages",
                 c.src_lang);
  SG_CHECK_USAGE(!a.has("attention") || a.get("attention") != "dot",
                 "--attention dot: the translator's dot-product attention is scaled_dot (scaling by 1/sqrt(d) keeps "
                 "the softmax from saturating); unscaled dot is only in `seqgrad attention demo --kind dot`");
  if (a.has("attention")) c.model.attention = models::parse_attention_kind(a.get("attention"));
  if (a.has("max-tokens")) c.max_tokens = a.get_int("max-tokens");
  if (a.has("subset")) c.train_subset = a.get_int("subset");
  if (a.has("label-smoothing")) c.label_smoothing = a.get_double("label-smoothing");
  if (a.has("clip")) c.clip = a.get_double("clip");
  if (a.has("amp")) c.amp = a.get("amp");
  if (a.has("vocab")) {
    c.vocab = a.get("vocab");
    // a preset's joint subword model does not carry over to word vocabularies (the seed preset's
    // `--vocab word`); only an explicit --joint-vocab with word is a contradiction
    if (c.vocab == "word") c.joint_vocab = false;
  }
  if (a.flag("joint-vocab")) c.joint_vocab = true;
  if (a.has("seed")) {
    SG_CHECK_VALUE(a.get_int("seed") >= 0, "--seed must be >= 0, got {}", a.get_int("seed"));
    c.seed = static_cast<uint64_t>(a.get_int("seed"));
  }
  models::amp_precision(c.amp);
  check_vocab_flags(c);
  // absolute, so that eval and resume find the data from any folder
  c.data_dir = absolute(c.data_dir);
  SG_CHECK_VALUE(c.epochs >= 1, "--epochs must be >= 1, got {}", c.epochs);
  SG_CHECK_VALUE(c.batch_size >= 1, "--batch-size must be >= 1, got {}", c.batch_size);
  SG_CHECK_VALUE(c.lr > 0 && std::isfinite(c.lr), "--lr must be positive, got {}", c.lr);
  SG_CHECK_VALUE(c.max_tokens >= 1, "--max-tokens must be >= 1, got {}", c.max_tokens);
  SG_CHECK_VALUE(c.train_subset >= 0, "--subset must be >= 0 (0 = every pair), got {}", c.train_subset);
  SG_CHECK_VALUE(c.shuffle_buffer >= 1, "--shuffle-buffer must be >= 1 (training pairs held at once), got {}",
                 c.shuffle_buffer);
  SG_CHECK_VALUE(c.label_smoothing >= 0 && c.label_smoothing < 1, "--label-smoothing must be in [0, 1), got {}",
                 c.label_smoothing);
  SG_CHECK_VALUE(c.clip > 0 && std::isfinite(c.clip), "--clip must be positive, got {}", c.clip);
  SG_CHECK_VALUE(c.model.embed_size >= 1 && c.model.hidden_size >= 1 && c.model.num_layers >= 1,
                 "--embed {}, --hidden {} and --layers {} must be >= 1", c.model.embed_size,
                 c.model.hidden_size, c.model.num_layers);
  SG_CHECK_VALUE(c.model.dropout >= 0 && c.model.dropout < 1, "--dropout must be in [0, 1), got {}",
                 c.model.dropout);
  return c;
}

void apply_threads_flag(const Args& a) {
  if (a.has("threads")) set_num_threads(a.get_threads());
}

}  // namespace seqgrad::tools
