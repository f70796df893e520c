// SentencePiece behind SubwordModel (its headers stay out of ours), the vocabulary spec parser and
// merge_pieces. Built without SG_SENTENCEPIECE, the model's entry points throw a clear error.
#include "models/text/subword.h"

#include <charconv>
#include <regex>

#include "core/error.h"
#include "models/text/tokenizer.h"

#ifdef SG_SENTENCEPIECE
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>
#endif

namespace seqgrad::text {

SubwordOptions parse_subword_spec(std::string_view spec, std::string_view flag) {
  SubwordOptions options;
  const std::size_t colon = spec.find(':');
  const std::string_view kind = spec.substr(0, colon);
  const std::string_view size = colon == std::string_view::npos ? "" : spec.substr(colon + 1);
  int64_t value = 0;
  auto [end, ec] = std::from_chars(size.data(), size.data() + size.size(), value);
  SG_CHECK_VALUE((kind == "unigram" || kind == "bpe") && ec == std::errc() && end == size.data() + size.size() &&
                     !size.empty(),
                 "{} '{}': expected unigram:SIZE, bpe:SIZE or word (e.g. unigram:8000)", flag, spec);
  SG_CHECK_VALUE(value > 4 && value <= 1'000'000, "{} '{}': the size {} must be in [5, 1000000] (it counts the 4 "
                 "special tokens)", flag, spec, value);
  options.kind = kind == "bpe" ? SubwordKind::bpe : SubwordKind::unigram;
  options.vocab_size = value;
  return options;
}

std::string subword_spec(const SubwordOptions& options) {
  return fmt::format("{}:{}", options.kind == SubwordKind::bpe ? "bpe" : "unigram", options.vocab_size);
}

MergedPieces merge_pieces(std::span<const std::string> pieces) {
  MergedPieces out;
  bool special_before = false;  // a special token is a word of its own: what follows starts a new one
  for (const std::string& piece : pieces) {
    const bool starts = piece.starts_with(kWordStart);
    const bool special = piece.size() > 2 && piece.front() == '<' && piece.back() == '>';
    if (out.words.empty() || starts || special || special_before) out.words.emplace_back();
    out.words.back() += starts ? piece.substr(kWordStart.size()) : piece;
    out.word_of_piece.push_back(static_cast<int64_t>(out.words.size()) - 1);
    special_before = special;
  }
  return out;
}

#ifdef SG_SENTENCEPIECE

bool subword_supported() { return true; }

struct SubwordModel::Impl {
  sentencepiece::SentencePieceProcessor processor;
  std::string proto;
};

namespace {

// Feeds SentencePiece's trainer from a SentenceSource, one sentence at a time.
class SourceIterator : public sentencepiece::SentenceIterator {
 public:
  explicit SourceIterator(const SentenceSource& next) : next_(next) { Next(); }
  bool done() const override { return done_; }
  void Next() override { done_ = !next_(sentence_); }
  const std::string& value() const override { return sentence_; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  const SentenceSource& next_;
  std::string sentence_;
  bool done_ = false;
};

// SentencePiece refuses a vocabulary larger than the text supports with "Vocabulary size is too
// high (8000). Please set it to a value <= 1234." (unigram) or "Vocabulary size is smaller than
// required_chars. 40 vs 52." (too small for the characters): say it in our terms.
[[noreturn]] void throw_training_error(const std::string& message, const SubwordOptions& options) {
  std::smatch most;
  if (std::regex_search(message, most, std::regex(R"(value <= (\d+))")))
    throw ValueError(fmt::format("subword vocabulary {}: the training text supports at most {} pieces; choose a "
                                 "smaller size (SentencePiece: {})", subword_spec(options), most[1].str(), message));
  throw ValueError(fmt::format("subword vocabulary {}: SentencePiece could not train a model: {}",
                               subword_spec(options), message));
}

}  // namespace

SubwordModel::SubwordModel(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

SubwordModel SubwordModel::train(const SentenceSource& next, const SubwordOptions& options) {
  SourceIterator sentences(next);
  SG_CHECK_VALUE(!sentences.done(), "subword vocabulary {}: no training sentence", subword_spec(options));
  const std::unordered_map<std::string, std::string> spec = {
      {"model_type", options.kind == SubwordKind::bpe ? "bpe" : "unigram"},
      {"vocab_size", std::to_string(options.vocab_size)},
      {"input_sentence_size", std::to_string(options.max_sentences)},
      {"shuffle_input_sentence", "true"},
      {"character_coverage", "1.0"},  // every character of the sample gets a piece: no <unk> in the targets
      {"pad_id", "0"}, {"bos_id", "1"}, {"eos_id", "2"}, {"unk_id", "3"},  // Vocab's special ids
      {"pad_piece", "<pad>"}, {"bos_piece", "<bos>"}, {"eos_piece", "<eos>"}, {"unk_piece", "<unk>"},
      {"num_threads", "2"},
      {"minloglevel", "2"},  // errors only: they come back as the status below
  };
  sentencepiece::SetRandomGeneratorSeed(static_cast<unsigned>(options.seed));
  std::string proto;
  const auto status = sentencepiece::SentencePieceTrainer::Train(spec, &sentences, &proto);
  if (!status.ok()) throw_training_error(status.message(), options);
  return from_serialized(std::move(proto));
}

SubwordModel SubwordModel::from_serialized(std::string proto) {
  auto impl = std::make_shared<Impl>();
  const auto status = impl->processor.LoadFromSerializedProto(proto);
  SG_CHECK_VALUE(status.ok(), "subword model: the serialized SentencePiece model ({} bytes) does not load: {}",
                 proto.size(), status.message());
  impl->proto = std::move(proto);
  return SubwordModel(std::move(impl));
}

const std::string& SubwordModel::serialized() const { return impl_->proto; }

std::vector<std::string> SubwordModel::pieces() const {
  std::vector<std::string> out;
  for (int id = 0; id < impl_->processor.GetPieceSize(); ++id) out.push_back(impl_->processor.IdToPiece(id));
  return out;
}

std::vector<std::string> SubwordModel::encode(std::string_view text) const {
  if (auto bad = find_invalid_utf8(text))
    throw ValueError(fmt::format("subword model: invalid UTF-8 at byte {} of the text to encode", *bad));
  std::vector<std::string> pieces;
  const auto status = impl_->processor.Encode(text, &pieces);
  SG_CHECK_VALUE(status.ok(), "subword model: encoding failed: {}", status.message());
  return pieces;
}

std::string SubwordModel::decode(std::span<const std::string> pieces) const {
  std::string text;
  const auto status = impl_->processor.Decode(std::vector<std::string>(pieces.begin(), pieces.end()), &text);
  SG_CHECK_VALUE(status.ok(), "subword model: decoding failed: {}", status.message());
  return text;
}

#else  // no SentencePiece in this build

bool subword_supported() { return false; }

struct SubwordModel::Impl {};

namespace {
[[noreturn]] void no_support() {
  throw ValueError("subword vocabularies: this build has no SentencePiece support (install libsentencepiece-dev "
                   "and reconfigure with -Dsentencepiece=enabled); --vocab word works without it");
}
}  // namespace

SubwordModel::SubwordModel(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
SubwordModel SubwordModel::train(const SentenceSource&, const SubwordOptions&) { no_support(); }
SubwordModel SubwordModel::from_serialized(std::string) { no_support(); }
const std::string& SubwordModel::serialized() const { no_support(); }
std::vector<std::string> SubwordModel::pieces() const { no_support(); }
std::vector<std::string> SubwordModel::encode(std::string_view) const { no_support(); }
std::string SubwordModel::decode(std::span<const std::string>) const { no_support(); }

#endif

}  // namespace seqgrad::text
