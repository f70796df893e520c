// libFuzzer target: corpus reading (models/text/corpus: read_parallel, read_tsv_pairs) and what
// training does next with the pairs (tokenize, vocabulary, encode, batches).
//
// Input: the bytes up to the first NUL are the source file, the rest the target file (aligned
// files); the whole input is also read as a TSV file.
#include <string_view>

#include "models/text/corpus.h"
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
    train_pipeline(text::read_tsv_pairs(tsv_path, 1, 0, {.columns = 2, .on_bad_line = text::OnBadLine::skip}));
  });
  return 0;
}
