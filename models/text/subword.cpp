// SubwordModel over the SentencePiece plugin (loaded on first use, subword_engine.h), the
// vocabulary spec parser and merge_pieces. Without the plugin the model's entry points throw a
// clear error.
#include "models/text/subword.h"

#include <dlfcn.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <regex>

#include "core/error.h"
#include "core/fileio.h"
#include "models/text/subword_engine.h"
#include "models/text/tokenizer.h"


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
  // words (no piece marks a word start): each token is a word already
  const bool subword = std::any_of(pieces.begin(), pieces.end(), [](const std::string& p) {
    return p.starts_with(kWordStart);
  });
  bool special_before = false;  // a special token is a word of its own: what follows starts a new one
  for (const std::string& piece : pieces) {
    const bool starts = piece.starts_with(kWordStart);
    const bool special = piece.size() > 2 && piece.front() == '<' && piece.back() == '>';
    if (out.words.empty() || starts || special || special_before || !subword) out.words.emplace_back();
    out.words.back() += starts ? piece.substr(kWordStart.size()) : piece;
    out.word_of_piece.push_back(static_cast<int64_t>(out.words.size()) - 1);
    special_before = special;
  }
  return out;
}

namespace {

// RTLD_DEEPBIND: SentencePiece binds to its own protobuf, not the ONNX export's (subword_engine.h).
// ASan builds, which refuse DEEPBIND, are built without the ONNX export instead (models/meson.build).
#ifdef SG_SUBWORD_NO_DEEPBIND
constexpr int kDeepBind = 0;
#else
constexpr int kDeepBind = RTLD_DEEPBIND;
#endif

// The plugin's places relative to the library holding this code: <libdir>/seqgrad/ (an installed
// prefix, moved or staged too) and models/ (the build folder, where libseqgrad.so lies at the top).
// Only paths relative to the running code: an absolute path of the build folder compiled in would
// outlive that folder, and whoever recreated it would have their code run inside seqgrad.
std::vector<std::string> plugins_beside_library() {
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&plugins_beside_library), &info) == 0 || info.dli_fname == nullptr) return {};
  const std::filesystem::path dir = std::filesystem::path(info.dli_fname).lexically_normal().parent_path();
  return {(dir / "seqgrad" / "libseqgrad_sentencepiece.so").string(),
          (dir / "models" / "libseqgrad_sentencepiece.so").string()};
}

// The SentencePiece plugin, loaded once: $SEQGRAD_SENTENCEPIECE_PLUGIN, else beside the library
// (installed, then the build folder's layout), else at the prefix it was configured for. Null when
// none loads (a build without SentencePiece).
struct Plugin {
  SubwordEngine* engine = nullptr;
  std::string path;   // the file it was loaded from
  std::string error;  // why none loaded
};

const Plugin& plugin() {
  static const Plugin loaded = [] {
    Plugin p;
    std::vector<std::string> candidates;
    if (const char* env = std::getenv("SEQGRAD_SENTENCEPIECE_PLUGIN")) candidates.emplace_back(env);
#ifdef SG_SUBWORD_PLUGIN_INSTALL
    for (std::string& beside : plugins_beside_library())
      if (std::filesystem::exists(beside)) candidates.push_back(std::move(beside));
    candidates.emplace_back(SG_SUBWORD_PLUGIN_INSTALL);
#endif
    for (const std::string& path : candidates) {
      void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | kDeepBind);
      if (!handle) {
        p.error += fmt::format("{}{}", p.error.empty() ? "" : "; ", dlerror());
        continue;
      }
      auto entry = reinterpret_cast<SubwordEngine* (*)()>(dlsym(handle, "seqgrad_subword_engine"));
      if (entry) return p.engine = entry(), p.path = path, p;
      p.error += fmt::format("{}{}: no seqgrad_subword_engine", p.error.empty() ? "" : "; ", path);
    }
    return p;
  }();
  return loaded;
}

SubwordEngine& engine() {
  const Plugin& p = plugin();
  if (!p.engine)
    throw ValueError(fmt::format("subword vocabularies: this build has no SentencePiece support (install "
                                 "libsentencepiece-dev and reconfigure with -Dsentencepiece=enabled; --vocab word "
                                 "works without it){}", p.error.empty() ? "" : " (" + p.error + ")"));
  return *p.engine;
}

// SentencePiece refuses a vocabulary larger than the text supports with "Vocabulary size is too
// high (8000). Please set it to a value <= 1234." (unigram), and one smaller than the characters
// need with "Vocabulary size is smaller than required_chars. 30 vs 34.": say it in our terms.
[[noreturn]] void throw_training_error(const std::string& message, const SubwordOptions& options) {
  std::smatch most;
  if (std::regex_search(message, most, std::regex(R"(value <= (\d+))")))
    throw ValueError(fmt::format("subword vocabulary {}: the training text supports at most {} pieces; choose a "
                                 "smaller size (SentencePiece: {})", subword_spec(options), most[1].str(), message));
  if (std::regex_search(message, most, std::regex(R"(required_chars\. (\d+) vs (\d+))")))
    throw ValueError(fmt::format("subword vocabulary {}: the training text has {} distinct characters, each a piece "
                                 "of its own with the 4 special tokens: choose a size of at least {} (SentencePiece: "
                                 "{})", subword_spec(options), std::stoll(most[2].str()) - 4, most[2].str(), message));
  throw ValueError(fmt::format("subword vocabulary {}: SentencePiece could not train a model: {}",
                               subword_spec(options), message));
}

}  // namespace

bool subword_supported() { return plugin().engine != nullptr; }

std::string subword_plugin_description() {
  const Plugin& p = plugin();
  if (p.engine) return p.path;
  return p.error.empty() ? "not built" : "none loaded (" + p.error + ")";
}

struct SubwordModel::Impl {
  std::unique_ptr<SubwordProcessor> processor;
  std::string proto;
};

SubwordModel::SubwordModel(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

SubwordModel SubwordModel::train(const SentenceSource& next, const SubwordOptions& options) {
  // SentencePiece's default, stated here so that the error below can name it: the trainer drops
  // longer sentences, and with none left fails with "Internal: ... [!sentences_.empty()]".
  constexpr std::size_t kMaxSentenceBytes = 4192;
  bool any = false, any_short = false;  // the trainer sees the sentences through these checks
  SentenceSource counted = [&](std::string& sentence) {
    if (!next(sentence)) return false;
    any = true;
    any_short = any_short || sentence.size() <= kMaxSentenceBytes;
    return true;
  };
  const std::unordered_map<std::string, std::string> spec = {
      {"model_type", options.kind == SubwordKind::bpe ? "bpe" : "unigram"},
      {"vocab_size", std::to_string(options.vocab_size)},
      {"input_sentence_size", std::to_string(options.max_sentences)},
      {"shuffle_input_sentence", "true"},
      {"character_coverage", "1.0"},  // every character of the sample gets a piece: no <unk> in the targets
      {"pad_id", "0"}, {"bos_id", "1"}, {"eos_id", "2"}, {"unk_id", "3"},  // Vocab's special ids
      {"pad_piece", "<pad>"}, {"bos_piece", "<bos>"}, {"eos_piece", "<eos>"}, {"unk_piece", "<unk>"},
      {"num_threads", "2"},
      {"max_sentence_length", std::to_string(kMaxSentenceBytes)},
      {"minloglevel", "2"},  // errors only: they come back as the status
  };
  std::string proto, error;
  const bool trained = engine().train(counted, spec, static_cast<unsigned>(options.seed), proto, error);
  SG_CHECK_VALUE(any, "subword vocabulary {}: no training sentence", subword_spec(options));
  SG_CHECK_VALUE(any_short, "subword vocabulary {}: no training sentence is short enough for the SentencePiece "
                 "trainer, which skips sentences longer than {} bytes; split the corpus into shorter lines (one "
                 "sentence each), or use --vocab word", subword_spec(options), kMaxSentenceBytes);
  if (!trained) throw_training_error(error, options);
  return from_serialized(std::move(proto));
}

SubwordModel SubwordModel::from_serialized(std::string proto) {
  auto impl = std::make_shared<Impl>();
  std::string error;
  impl->processor = engine().load(proto, error);
  SG_CHECK_VALUE(impl->processor, "subword model: the serialized SentencePiece model ({} bytes) does not load: {}",
                 proto.size(), error);
  impl->proto = std::move(proto);
  return SubwordModel(std::move(impl));
}

SubwordModel SubwordModel::read(const std::string& path) {
  std::string proto = read_file(path);  // IOError naming the file
  try {
    return from_serialized(std::move(proto));
  } catch (const ValueError& e) {
    throw ValueError(fmt::format("SentencePiece model {}: {}", path, e.what()));
  }
}

const std::string& SubwordModel::serialized() const { return impl_->proto; }

std::vector<std::string> SubwordModel::pieces() const { return impl_->processor->pieces(); }

std::vector<std::string> SubwordModel::encode(std::string_view text) const {
  if (auto bad = find_invalid_utf8(text))
    throw ValueError(fmt::format("subword model: invalid UTF-8 at byte {} of the text to encode", *bad));
  std::vector<std::string> pieces;
  std::string error;
  SG_CHECK_VALUE(impl_->processor->encode(text, pieces, error), "subword model: encoding failed: {}", error);
  return pieces;
}

std::string SubwordModel::decode(std::span<const std::string> pieces) const {
  std::string text, error;
  SG_CHECK_VALUE(impl_->processor->decode({pieces.begin(), pieces.end()}, text, error),
                 "subword model: decoding failed: {}", error);
  return text;
}

}  // namespace seqgrad::text
