// libFuzzer target: corpus reading (models/text/corpus: read_parallel, read_tsv_pairs, strict and
// skipping bad lines) and the streamed path (models/text/stream: index_corpus with chunks of two
// pairs and a --subset-style early stop, then one epoch of StreamingBatches seeking back into the
// files). Only the readers run per input: tokenizing is the tokenizer target's, and vocabularies,
// encoding and batching take what the readers return, not file bytes.
//
// Input: the bytes up to the first NUL are the source file, the rest the target file (aligned
// files); the whole input is also read as a TSV file.
#include <string_view>

#include "models/text/corpus.h"
#include "models/text/stream.h"
#include "tests/fuzz/fuzz_common.h"

namespace {

using namespace seqgrad;

// Every pair the index counted comes back once in an epoch, in batches of the right shape; the
// encoder stands in for the vocabulary (ids from the sentence lengths, no tokenizing).
void streamed(const text::CorpusFiles& files, int64_t max_pairs) {
  text::CorpusIndex index = text::index_corpus(files, {.buffer_pairs = 2, .max_pairs = max_pairs});
  const int64_t pairs = index.pairs;
  text::StreamingBatches batches(std::move(index), [](const text::SentencePair& p) {
    return text::EncodedPair{{4 + static_cast<int64_t>(p.src.size() % 7), text::Vocab::kEos}, {text::Vocab::kEos}};
  }, {.batch_size = 3});
  batches.start_epoch(1, 0);
  int64_t rows = 0;
  while (std::optional<text::Batch> b = batches.next()) {
    if (b->src.size() != static_cast<size_t>(b->batch * b->src_len_max)) __builtin_trap();
    rows += b->batch;
  }
  if (rows != pairs) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string src_path = fuzz::scratch_path("corpus.src"), tgt_path = fuzz::scratch_path("corpus.tgt");
  static const std::string tsv_path = fuzz::scratch_path("corpus.tsv");
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  size_t nul = bytes.find('\0');
  fuzz::write_scratch(src_path, bytes.substr(0, nul));
  fuzz::write_scratch(tgt_path, nul == std::string_view::npos ? std::string_view() : bytes.substr(nul + 1));
  fuzz::write_scratch(tsv_path, bytes);
  text::CorpusFiles aligned;
  aligned.src = src_path, aligned.tgt = tgt_path;
  fuzz::expect_clean([&] { (void)text::read_parallel(src_path, tgt_path).report.summary(); });
  fuzz::expect_clean([&] { (void)text::read_tsv_pairs(tsv_path, 0, 1); });
  fuzz::expect_clean([&] {
    (void)text::read_tsv_pairs(tsv_path, 1, 0, {.columns = 2, .on_bad_line = text::OnBadLine::skip});
  });
  fuzz::expect_clean([&] { streamed(aligned, 0); });
  fuzz::expect_clean([&] { streamed(aligned, 1 + static_cast<int64_t>(size % 3)); });  // stops early
  return 0;
}
