#include "tools/train_flags.h"

#include <filesystem>

#include <fmt/core.h>

#include "core/threads.h"
#include "models/seq2seq/trainer.h"
#include "models/text/subword.h"

namespace seqgrad::tools {

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
  if (a.has("src")) c.src_lang = a.get("src");
  if (a.has("tgt")) c.tgt_lang = a.get("tgt");
  if (a.has("data-dir")) c.data_dir = a.get("data-dir");
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
  if (a.has("vocab")) c.vocab = a.get("vocab");
  if (a.flag("joint-vocab")) c.joint_vocab = true;
  if (a.has("seed")) {
    SG_CHECK_VALUE(a.get_int("seed") >= 0, "--seed must be >= 0, got {}", a.get_int("seed"));
    c.seed = static_cast<uint64_t>(a.get_int("seed"));
  }
  models::amp_precision(c.amp);
  check_vocab_flags(c);
  // absolute, so that eval and resume find the data from any folder
  c.data_dir = std::filesystem::absolute(c.data_dir).lexically_normal().string();
  SG_CHECK_VALUE(c.epochs >= 1, "--epochs must be >= 1, got {}", c.epochs);
  SG_CHECK_VALUE(c.batch_size >= 1, "--batch-size must be >= 1, got {}", c.batch_size);
  SG_CHECK_VALUE(c.lr > 0 && std::isfinite(c.lr), "--lr must be positive, got {}", c.lr);
  SG_CHECK_VALUE(c.max_tokens >= 1, "--max-tokens must be >= 1, got {}", c.max_tokens);
  SG_CHECK_VALUE(c.train_subset >= 0, "--subset must be >= 0 (0 = every pair), got {}", c.train_subset);
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
