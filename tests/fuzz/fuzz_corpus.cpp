// libFuzzer target: corpus reading (models/text/corpus: read_parallel, read_tsv_pairs) and what
// training does next with the pairs (tokenize, vocabulary, encode, batches), and the streamed
// path (models/text/stream: index_corpus, StreamingBatches over chunks of two pairs).
//
// Input: the bytes up to the first NUL are the source file, the rest the target file (aligned
// files); the whole input is also read as a TSV file.
#include <string_view>

#include "models/text/corpus.h"
#include "models/text/stream.h"
#include "tests/fuzz/fuzz_common.h"

namespace {

using namespace seqgrad;

void train_pipeline(const text::ParallelCorpus& corpus) {
  std::vector<text::TokenizedPair> pairs = text::tokenize_pairs(corpus.pairs);
  text::Vocab src = text::Vocab::build(text::source_side(pairs));
  text::Vocab tgt = text::Vocab::build(text::target_side(pairs), {.min_freq = 2});
  text::EncodedCorpus encoded = text::encode_pairs(pairs, src, tgt, {.max_src_tokens = 5, .max_tgt_tokens = 7});
  for (const text::Batch& b : text::make_batches(encoded.pairs, {.batch_size = 3}))
    if (b.src.size() != static_cast<size_t>(b.batch * b.src_len_max)) __builtin_trap();
  (void)corpus.report.summary();
}

// Every pair the index counted comes back once per epoch, in batches of the right shape.
void streamed(const text::CorpusFiles& files) {
  text::CorpusIndex index = text::index_corpus(files, {.buffer_pairs = 2});
  const int64_t pairs = index.pairs;
  text::StreamingBatches batches(std::move(index), [](const text::SentencePair& p) {
    return text::EncodedPair{{4 + static_cast<int64_t>(p.src.size() % 7), text::Vocab::kEos}, {text::Vocab::kEos}};
  }, {.batch_size = 3});
  for (uint64_t seed : {0u, 1u}) {
    batches.start_epoch(seed, 0);
    int64_t rows = 0;
    while (std::optional<text::Batch> b = batches.next()) {
      if (b->src.size() != static_cast<size_t>(b->batch * b->src_len_max)) __builtin_trap();
      rows += b->batch;
    }
    if (rows != pairs) __builtin_trap();
  }
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
  fuzz::expect_clean([&] { train_pipeline(text::read_parallel(src_path, tgt_path)); });
  fuzz::expect_clean([&] { train_pipeline(text::read_tsv_pairs(tsv_path, 0, 1)); });
  fuzz::expect_clean([&] {
    text::CorpusFiles aligned;
    aligned.src = src_path, aligned.tgt = tgt_path;
    streamed(aligned);
  });
  fuzz::expect_clean([&] {
    train_pipeline(text::read_tsv_pairs(tsv_path, 1, 0, {.columns = 2, .on_bad_line = text::OnBadLine::skip}));
  });
  return 0;
}
