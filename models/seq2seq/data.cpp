#include "models/seq2seq/data.h"

#include <algorithm>
#include <filesystem>

#include "models/text/subword.h"
#include "models/text/tokenizer.h"

namespace seqgrad::models {

text::CorpusFiles split_files(const TrainConfig& c, const std::string& split) {
  text::CorpusFiles f;
  if (c.corpus == "multi30k") {
    const std::string name = split == "valid" ? "val" : split == "test" ? "test2016" : split;
    f.src = fmt::format("{}/multi30k/{}.{}", c.data_dir, name, c.src_lang);
    f.tgt = fmt::format("{}/multi30k/{}.{}", c.data_dir, name, c.tgt_lang);
  } else if (c.corpus == "fra-eng") {
    const bool en_fr = c.src_lang == "en" && c.tgt_lang == "fr";
    SG_CHECK_VALUE(en_fr || (c.src_lang == "fr" && c.tgt_lang == "en"),
                   "data: fra-eng has the languages en and fr, got {}->{}", c.src_lang, c.tgt_lang);
    f.tsv = c.data_dir + "/fra-eng/fra.txt";
    f.src_col = en_fr ? 0 : 1, f.tgt_col = en_fr ? 1 : 0;
    // held-out pairs: every 50th pair goes to valid/test, so all lengths are represented
    f.period = 50;
    f.residues = split == "valid" ? std::vector<int64_t>{7} : split == "test" ? std::vector<int64_t>{23}
                                                                               : std::vector<int64_t>{7, 23};
    f.exclude = split == "train";
  } else if (c.corpus == "files") {
    f = split == "train" ? c.train_files : split == "valid" ? c.valid_files : c.test_files;
  } else {
    throw ValueError(fmt::format("data: config field corpus = '{}' is not one of: multi30k, fra-eng, files",
                                 c.corpus));
  }
  return f;
}

namespace {

// Every file of a split must exist; the error names the flag or folder it came from.
void check_files_exist(const TrainConfig& c, const text::CorpusFiles& f, const std::string& split) {
  auto check = [&](const std::string& path, const std::string& what) {
    std::error_code ec;  // a symlink loop or a denied folder: reading the file names the reason
    SG_CHECK_IO(std::filesystem::exists(path, ec) || ec, "data: missing file {} ({})", path, what);
  };
  if (c.corpus == "files") {
    const std::string field = "config field files." + split;
    if (f.is_tsv()) check(f.tsv, field + ", tab-separated");
    else check(f.src, field + ", source"), check(f.tgt, field + ", target");
  } else if (f.is_tsv()) {
    check(f.tsv, fmt::format("corpus {}", c.corpus));
  } else {
    for (const auto& [path, lang] : {std::pair{f.src, c.src_lang}, {f.tgt, c.tgt_lang}})
      check(path, fmt::format("corpus {}, split {}, language {}", c.corpus, split, lang));
  }
}

// A split that has no pair after cleaning is an error before training (an empty test set found
// only after the last epoch would waste the run).
void check_not_empty(const TrainConfig& c, int64_t pairs, const text::CorpusFiles& f, const std::string& split,
                     const text::ReadReport& r) {
  // Multi30k's splits by their file names (val, test2016), as its README names them
  const std::string name = c.corpus != "multi30k" ? split : split == "valid" ? "val" : split == "test" ? "test2016"
                                                                                                        : split;
  SG_CHECK_IO(pairs > 0, "data: split {} has no usable sentence pair in {} ({})", name, f.describe(), r.summary());
}

// A held split, tokenized, with its raw sentences.
struct HeldSplit {
  std::vector<text::TokenizedPair> pairs;
  std::vector<std::string> sources, references;
  std::string report;
};

HeldSplit read_held_split(const TrainConfig& c, const std::string& split) {
  const text::CorpusFiles f = split_files(c, split);
  check_files_exist(c, f, split);
  text::ParallelCorpus corpus = text::read_corpus(f);
  check_not_empty(c, static_cast<int64_t>(corpus.pairs.size()), f, split, corpus.report);
  HeldSplit out;
  out.report = corpus.report.summary();
  for (const text::SentencePair& p : corpus.pairs) out.sources.push_back(p.src), out.references.push_back(p.tgt);
  out.pairs = text::tokenize_pairs(corpus.pairs);
  return out;
}

}  // namespace

Corpora load_corpora(const TrainConfig& c, Splits splits, const text::PairVisitor& visit_train) {
  SG_CHECK_IO(c.corpus == "files" || std::filesystem::is_directory(c.data_dir), "data: the data folder '{}' does not "
              "exist (it should hold multi30k/ and fra-eng/)", c.data_dir);
  Corpora out;
  std::vector<std::string> reports;
  if (splits == Splits::all) {
    const text::CorpusFiles f = split_files(c, "train");
    check_files_exist(c, f, "train");
    out.train = text::index_corpus(f, {.buffer_pairs = c.shuffle_buffer, .max_pairs = c.train_subset}, visit_train);
    check_not_empty(c, out.train.pairs, f, "train", out.train.report);
    reports.push_back("train: " + out.train.report.summary());
    HeldSplit valid = read_held_split(c, "valid");
    out.valid = std::move(valid.pairs);
    out.valid_references = std::move(valid.references);
    out.valid_sources = std::move(valid.sources);
    reports.push_back("valid: " + valid.report);
  }
  const bool has_test = !(c.corpus == "files" && c.test_files.src.empty() && c.test_files.tsv.empty());
  SG_CHECK_VALUE(has_test || splits == Splits::all, "data: the checkpoint was trained without a test split; give "
                 "one (config field files.test; `seqgrad eval --test SRC_FILE TGT_FILE`)");
  if (has_test) {
    HeldSplit test = read_held_split(c, "test");
    out.test = std::move(test.pairs);
    out.test_sources = std::move(test.sources);
    out.test_references = std::move(test.references);
    reports.push_back("test: " + test.report);
  }
  for (const std::string& r : reports) out.report += (out.report.empty() ? "" : "\n") + r;
  return out;
}

std::vector<text::TokenizedPair> read_train_pairs(const Corpora& corpora, int64_t max_pairs) {
  const int64_t n = max_pairs > 0 ? std::min(max_pairs, corpora.train.pairs) : corpora.train.pairs;
  return text::tokenize_pairs(text::read_corpus(corpora.train.files, corpora.train.read_options, n).pairs);
}

void WordCounts::add(const text::SentencePair& pair) {
  for (std::string& token : text::tokenize(pair.src)) ++src[std::move(token)];
  for (std::string& token : text::tokenize(pair.tgt)) ++tgt[std::move(token)];
}

text::PairEncoder pair_encoder(const text::Vocab& src_vocab, const text::Vocab& tgt_vocab, int64_t max_tokens) {
  const text::EncodeOptions truncate{.max_src_tokens = max_tokens, .max_tgt_tokens = max_tokens};
  return [&src_vocab, &tgt_vocab, truncate](const text::SentencePair& pair) {
    const text::TokenizedPair tokens{src_vocab.tokenize(pair.src), tgt_vocab.tokenize(pair.tgt)};
    return std::move(text::encode_pairs(std::span(&tokens, 1), src_vocab, tgt_vocab, truncate).pairs.front());
  };
}

namespace {

// One side (or, joint, both sides) of the training sample, one sentence per call, for SentencePiece.
text::SentenceSource sentences_of(std::span<const text::SentencePair> pairs, bool src, bool tgt) {
  const std::size_t per_pair = std::size_t{src} + std::size_t{tgt};  // joint: src, tgt of each pair in turn
  return [pairs, src, tgt, per_pair, next = std::size_t{0}](std::string& sentence) mutable {
    if (next >= pairs.size() * per_pair) return false;
    const text::SentencePair& pair = pairs[next / per_pair];
    sentence = src && (!tgt || next % 2 == 0) ? pair.src : pair.tgt;
    ++next;
    return true;
  };
}

}  // namespace

VocabularyBuilder::VocabularyBuilder(const TrainConfig& config)
    : config_(config), sample_(config.vocab == "word" ? 1 : kSubwordSampleSentences, config.seed) {}  // words: unused

void VocabularyBuilder::add(const text::SentencePair& pair) {
  if (config_.vocab == "word") counts_.add(pair);
  else sample_.add(pair);
}

Vocabularies VocabularyBuilder::build() const {
  if (config_.vocab == "word")
    return {text::Vocab::from_counts(counts_.src, {.min_freq = config_.min_freq}),
            text::Vocab::from_counts(counts_.tgt, {.min_freq = config_.min_freq})};
  return build_vocabularies(config_, sample_.pairs());
}

Vocabularies build_vocabularies(const TrainConfig& c, std::span<const text::SentencePair> train_text) {
  if (c.vocab == "word") {
    VocabularyBuilder words(c);
    for (const text::SentencePair& p : train_text) words.add(p);
    return words.build();
  }
  text::SubwordOptions options = text::parse_subword_spec(c.vocab, "config field vocab");
  options.max_sentences = kSubwordSampleSentences;
  options.seed = c.seed;
  auto train = [&](bool src, bool tgt) {
    return text::Vocab::from_subword(text::SubwordModel::train(sentences_of(train_text, src, tgt), options));
  };
  if (c.joint_vocab) {
    text::Vocab joint = train(true, true);
    return {joint, joint};
  }
  return {train(true, false), train(false, true)};
}

std::vector<text::TokenizedPair> tokenize_text(std::span<const text::SentencePair> pairs, const text::Vocab& src_vocab,
                                               const text::Vocab& tgt_vocab) {
  std::vector<text::TokenizedPair> out;
  out.reserve(pairs.size());
  for (const text::SentencePair& p : pairs) out.push_back({src_vocab.tokenize(p.src), tgt_vocab.tokenize(p.tgt)});
  return out;
}

void tokenize_held_splits(Corpora& data, const text::Vocab& src_vocab, const text::Vocab& tgt_vocab) {
  auto tokenize = [&](const std::vector<std::string>& sources, const std::vector<std::string>& references) {
    std::vector<text::TokenizedPair> out;
    for (std::size_t i = 0; i < sources.size(); ++i)
      out.push_back({src_vocab.tokenize(sources[i]), tgt_vocab.tokenize(references[i])});
    return out;
  };
  data.valid = tokenize(data.valid_sources, data.valid_references);
  data.test = tokenize(data.test_sources, data.test_references);
}

TensorBatch to_tensors(const text::Batch& b, Device device) {
  TensorOptions i64{.dtype = DType::i64, .device = device};
  TensorBatch t;
  t.src = from_vector(b.src, {b.batch, b.src_len_max}, i64);
  t.src_lengths = from_vector(b.src_lengths, {b.batch}, i64);
  t.tgt_in = from_vector(b.tgt_in, {b.batch, b.tgt_len_max}, i64);
  t.tgt_out = from_vector(b.tgt_out, {b.batch, b.tgt_len_max}, i64);
  for (int64_t n : b.tgt_lengths) t.target_tokens += n;
  t.index = b.index;
  return t;
}

std::vector<int64_t> encode_sentence(const text::Vocab& vocab, const std::vector<std::string>& tokens,
                                     int64_t max_tokens) {
  std::vector<int64_t> ids = vocab.encode(tokens);
  if (max_tokens > 0 && static_cast<int64_t>(ids.size()) > max_tokens) ids.resize(max_tokens);
  ids.push_back(text::Vocab::kEos);
  return ids;
}

}  // namespace seqgrad::models
