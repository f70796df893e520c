// The SentencePiece plugin (libseqgrad_sentencepiece.so): SubwordEngine over SentencePieceTrainer
// and SentencePieceProcessor. See subword_engine.h for why it is a plugin.
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <exception>
#include <string>

#include "models/text/subword_engine.h"

namespace seqgrad::text {
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

class Processor : public SubwordProcessor {
 public:
  std::vector<std::string> pieces() const override {
    std::vector<std::string> out;
    for (int id = 0; id < processor_.GetPieceSize(); ++id) out.push_back(processor_.IdToPiece(id));
    return out;
  }
  bool encode(std::string_view text, std::vector<std::string>& pieces, std::string& error) const override {
    return ok(processor_.Encode(text, &pieces), error);
  }
  bool decode(const std::vector<std::string>& pieces, std::string& text, std::string& error) const override {
    return ok(processor_.Decode(pieces, &text), error);
  }
  // SentencePiece reports a bad model through its Status, except where its trie builder (Darts)
  // throws on pieces it cannot insert (found by tests/fuzz/fuzz_subword): both become `error`.
  bool load(const std::string& proto, std::string& error) {
    try {
      return ok(processor_.LoadFromSerializedProto(proto), error);
    } catch (const std::exception& e) {
      error = std::string("the model's pieces cannot be indexed: ") + e.what();
      return false;
    }
  }

 private:
  static bool ok(const sentencepiece::util::Status& status, std::string& error) {
    if (!status.ok()) error = status.ToString();
    return status.ok();
  }
  sentencepiece::SentencePieceProcessor processor_;
};

class Engine : public SubwordEngine {
 public:
  bool train(const SentenceSource& next, const std::unordered_map<std::string, std::string>& spec, unsigned seed,
             std::string& proto, std::string& error) override {
    SourceIterator sentences(next);
    sentencepiece::SetRandomGeneratorSeed(seed);
    const auto status = sentencepiece::SentencePieceTrainer::Train(spec, &sentences, &proto);
    if (!status.ok()) error = status.ToString();
    return status.ok();
  }
  std::unique_ptr<SubwordProcessor> load(const std::string& proto, std::string& error) override {
    auto processor = std::make_unique<Processor>();
    if (!processor->load(proto, error)) return nullptr;
    return processor;
  }
};

}  // namespace
}  // namespace seqgrad::text

extern "C" __attribute__((visibility("default"))) seqgrad::text::SubwordEngine* seqgrad_subword_engine() {
  static seqgrad::text::Engine engine;
  return &engine;
}
