// The interface between SubwordModel (models/text/subword.cpp) and the SentencePiece plugin
// (subword_sentencepiece.cpp, libseqgrad_sentencepiece.so). Debian's libsentencepiece carries its
// own copy of protobuf 3.14 and exports it, while the ONNX export links the system's protobuf 3.21:
// in one symbol namespace one of the two aborts ("compiled against version 3.14.0 of the Protocol
// Buffer runtime"). So the plugin is loaded with dlopen(RTLD_LOCAL | RTLD_DEEPBIND): SentencePiece
// binds to its own protobuf. Only virtual calls and standard library types cross this boundary,
// and no exception does (errors come back as text).
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "models/text/subword.h"

namespace seqgrad::text {

class SubwordProcessor {
 public:
  virtual ~SubwordProcessor() = default;
  virtual std::vector<std::string> pieces() const = 0;
  // false with `error` set when SentencePiece fails
  virtual bool encode(std::string_view text, std::vector<std::string>& pieces, std::string& error) const = 0;
  virtual bool decode(const std::vector<std::string>& pieces, std::string& text, std::string& error) const = 0;
};

class SubwordEngine {
 public:
  virtual ~SubwordEngine() = default;
  // SentencePieceTrainer with the `spec` keyword arguments; the model's serialized proto in `proto`.
  virtual bool train(const SentenceSource& next, const std::unordered_map<std::string, std::string>& spec,
                     unsigned seed, std::string& proto, std::string& error) = 0;
  // Null with `error` set when the proto does not load.
  virtual std::unique_ptr<SubwordProcessor> load(const std::string& proto, std::string& error) = 0;
};

}  // namespace seqgrad::text

// The plugin's one exported symbol: a process-wide engine.
extern "C" seqgrad::text::SubwordEngine* seqgrad_subword_engine();
