// Token-based batching (BatchOptions::batch_tokens): the greedy cut on a hand-derived case, and on a
// synthetic corpus in memory and streamed in chunks: every pair once per epoch, no batch over the
// budget except a lone long pair, the same batches for a seed, exact resumption, data-parallel shards;
// and a measurement of the padding they save on the default preset's corpus.
#include <doctest/doctest.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "models/seq2seq/config.h"
#include "models/seq2seq/data_parallel.h"
#include "models/seq2seq/run.h"
#include "models/text/corpus.h"
#include "models/text/stream.h"
#include "models/text/vocab.h"
#include "temp_dir.h"

using namespace seqgrad::text;

namespace {

constexpr int64_t kPairs = 500;

// Pair i: a source of 1 + 7i mod 23 words (80 for every 97th pair, longer than some budgets) and a
// target of 1 + 11i mod 29 words. The first source word is i, so a pair is known by its first id.
SentencePair synthetic_pair(int64_t i) {
  const int64_t src_words = i % 97 == 0 ? 80 : 1 + (7 * i) % 23, tgt_words = 1 + (11 * i) % 29;
  SentencePair p{std::to_string(i), "y"};
  for (int64_t w = 1; w < src_words; ++w) p.src += " x";
  for (int64_t w = 1; w < tgt_words; ++w) p.tgt += " y";
  return p;
}

// Ids: the pair's number (offset past the special tokens), then one id per further word, then <eos>.
EncodedPair pair_ids(const SentencePair& p) {
  EncodedPair e;
  e.src.push_back(Vocab::kNumSpecial + std::stoll(p.src));
  for (char c : p.src) if (c == ' ') e.src.push_back(Vocab::kNumSpecial);
  e.tgt.push_back(Vocab::kNumSpecial);
  for (char c : p.tgt) if (c == ' ') e.tgt.push_back(Vocab::kNumSpecial);
  e.src.push_back(Vocab::kEos);
  e.tgt.push_back(Vocab::kEos);
  return e;
}

// One epoch from batch `skip`: each batch as the numbers of its pairs. Checks the budget on the way:
// rows x the longest side (with <eos>) is at most batch_tokens unless the batch is one pair.
std::vector<std::vector<int64_t>> epoch(BatchSource& source, uint64_t seed, int64_t budget, int64_t skip = 0) {
  source.start_epoch(seed, skip);
  std::vector<std::vector<int64_t>> out;
  while (std::optional<Batch> b = source.next()) {
    const int64_t padded = b->batch * std::max(b->src_len_max, b->tgt_len_max);
    CHECK_MESSAGE((padded <= budget || b->batch == 1), fmt::format("a batch of {} rows holds {} tokens", b->batch, padded));
    std::vector<int64_t> ids;
    for (int64_t r = 0; r < b->batch; ++r) ids.push_back(b->src[static_cast<std::size_t>(r * b->src_len_max)] -
                                                         Vocab::kNumSpecial);
    out.push_back(ids);
  }
  return out;
}

// Every pair of the corpus exactly once.
void check_once_each(const std::vector<std::vector<int64_t>>& batches) {
  std::vector<int64_t> seen;
  for (const auto& b : batches) seen.insert(seen.end(), b.begin(), b.end());
  std::sort(seen.begin(), seen.end());
  std::vector<int64_t> all(kPairs);
  for (int64_t i = 0; i < kPairs; ++i) all[static_cast<std::size_t>(i)] = i;
  CHECK(seen == all);
}

// The properties every token-batched source must have, for one seed and budget.
void check_epochs(BatchSource& source, uint64_t seed, int64_t budget) {
  const auto a = epoch(source, seed, budget), again = epoch(source, seed, budget);
  REQUIRE(static_cast<int64_t>(a.size()) == source.batches_per_epoch());
  check_once_each(a);
  CHECK(a == again);                          // the same seed, the same batches
  CHECK(epoch(source, seed + 1, budget) != a);  // the next epoch, another order
  for (int64_t skip : {int64_t{1}, source.batches_per_epoch() / 3, source.batches_per_epoch() - 1,
                       source.batches_per_epoch()})
    CHECK(epoch(source, seed, budget, skip) == std::vector(a.begin() + skip, a.end()));  // resumed: the tail
}

}  // namespace

TEST_CASE("batch_tokens: the greedy cut along the sorted order, a long pair alone") {
  // Longest sides (with <eos>) 2, 2, 3, 5, 9 with a budget of 8 tokens: {2, 2} holds 2 x 2 = 4 (a 3
  // would make 3 x 3 = 9); {3} (with the 5: 2 x 5 = 10); {5} (with the 9: 18); {9} alone, over 8.
  std::vector<EncodedPair> pairs;
  for (int64_t side : {2, 2, 3, 5, 9}) pairs.push_back({std::vector<int64_t>(side - 1, 7), {7, Vocab::kEos}});
  for (EncodedPair& p : pairs) p.src.push_back(Vocab::kEos);
  const auto plan = plan_batches(pairs, {.batch_tokens = 8, .shuffle = false});
  CHECK(plan == std::vector<std::vector<int64_t>>{{0, 1}, {2}, {3}, {4}});
  // the target side counts too: a 1-id source with a 4-id target is a side of 4
  pairs = {{{Vocab::kEos}, {7, 7, 7, Vocab::kEos}}, {{Vocab::kEos}, {7, Vocab::kEos}}};
  CHECK(plan_batches(pairs, {.batch_tokens = 7, .shuffle = false}).size() == 2u);  // 2 x 4 = 8 > 7
  CHECK(plan_batches(pairs, {.batch_tokens = 8, .shuffle = false}).size() == 1u);
  // batch_size plays no part
  CHECK(plan_batches(pairs, {.batch_size = 1, .batch_tokens = 8, .shuffle = false}).size() == 1u);

  CHECK_THROWS_WITH_AS(plan_batches(pairs, {.batch_tokens = -1}), doctest::Contains("batch_tokens = -1 must be >= 0"),
                       seqgrad::ValueError);
  CHECK_THROWS_WITH_AS(plan_batches(pairs, {.batch_tokens = 8, .bucket_by_length = false}),
                       doctest::Contains("batch_tokens = 8 needs bucket_by_length"), seqgrad::ValueError);
  CHECK_THROWS_WITH_AS(plan_batches(pairs, {.batch_tokens = 8, .drop_last = true}),
                       doctest::Contains("drop_last applies to sentence batches"), seqgrad::ValueError);
}

TEST_CASE("batch_tokens: in memory and streamed in chunks, every pair once, within the budget, resumable") {
  const seqgrad::testing::TempDir dir;
  CorpusFiles files;
  files.src = dir.file("train.src"), files.tgt = dir.file("train.tgt");
  std::vector<EncodedPair> encoded;
  {
    std::ofstream src(files.src), tgt(files.tgt);
    for (int64_t i = 0; i < kPairs; ++i) {
      const SentencePair p = synthetic_pair(i);
      src << p.src << '\n', tgt << p.tgt << '\n';
      encoded.push_back(pair_ids(p));
    }
  }
  // 1: every pair alone; 50: below the long pairs' 81 ids; 200 and 1000: batches of many pairs
  for (int64_t budget : {1, 50, 200, 1000}) {
    const BatchOptions options{.batch_tokens = budget};
    MemoryBatches memory(encoded, options);
    for (uint64_t seed : {3u, 11u}) {
      CAPTURE(budget);
      CAPTURE(seed);
      check_epochs(memory, seed, budget);
      for (int64_t buffer : {int64_t{1000}, int64_t{160}, int64_t{37}}) {
        CAPTURE(buffer);
        StreamingBatches streamed(index_corpus(files, {.buffer_pairs = buffer}), pair_ids, options);
        check_epochs(streamed, seed, budget);
        if (buffer >= kPairs) CHECK(epoch(streamed, seed, budget) == epoch(memory, seed, budget));  // one chunk
      }
    }
    if (budget == 1) CHECK(memory.batches_per_epoch() == kPairs);
  }
}

TEST_CASE("batch_tokens: a lone long pair leaves data-parallel ranks without rows, and the shards cover it") {
  std::vector<EncodedPair> pairs = {pair_ids(synthetic_pair(0)), pair_ids(synthetic_pair(1))};  // sides 81 and 13
  const auto plan = plan_batches(pairs, {.batch_tokens = 50, .shuffle = false});
  REQUIRE(plan.size() == 2u);
  const Batch lone = make_batch(pairs, plan[1]);  // the 80-word source, sorted last
  REQUIRE(lone.batch == 1);
  const Batch first = seqgrad::models::batch_shard(lone, 0, 2), second = seqgrad::models::batch_shard(lone, 1, 2);
  CHECK(first.batch == 0);
  CHECK(first.src.empty());
  CHECK(second.batch == 1);
  CHECK(second.src == lone.src);
  CHECK(second.src_len_max == lone.src_len_max);
}

// A measurement, not a check (skipped; run it with
// `SEQGRAD_DATA=data ./build/tests/test_models --no-skip -tc='*padding*'`): one epoch of the default
// preset's Multi30k training split with sentence batches and with two token budgets. Padding counts
// both sides: a batch holds B x (S + T) ids, of which the pairs' own are the real tokens.
TEST_CASE("batch_tokens: padding and batch count of the default preset's training epoch" * doctest::skip()) {
  seqgrad::models::TrainConfig config = seqgrad::models::preset("default");
  if (const char* data = std::getenv("SEQGRAD_DATA")) config.data_dir = data;
  std::optional<seqgrad::models::Vocabularies> vocabs;
  for (int64_t budget : {0, 1600, 2400}) {
    config.batch_tokens = budget;
    seqgrad::models::RunData d = seqgrad::models::load_run_data(config, vocabs);
    vocabs = d.vocabs;
    int64_t batches = 0, slots = 0, real = 0, rows = 0, min_tgt = INT64_MAX, max_tgt = 0;
    d.train->start_epoch(config.seed, 0);
    while (std::optional<Batch> b = d.train->next()) {
      int64_t tgt = 0;
      for (int64_t r = 0; r < b->batch; ++r) {
        real += b->src_lengths[static_cast<std::size_t>(r)] + b->tgt_lengths[static_cast<std::size_t>(r)];
        tgt += b->tgt_lengths[static_cast<std::size_t>(r)];
      }
      slots += b->batch * (b->src_len_max + b->tgt_len_max);
      rows += b->batch, ++batches;
      min_tgt = std::min(min_tgt, tgt), max_tgt = std::max(max_tgt, tgt);
    }
    const std::string kind = budget == 0 ? fmt::format("batch_size {}", config.batch_size)
                                         : fmt::format("batch_tokens {}", budget);
    MESSAGE(fmt::format("{}: {} batches of {} pairs ({:.1f} a batch), padding / real tokens {:.3f}, padding / batch "
                        "slots {:.3f}, target tokens a batch {} to {}", kind, batches, rows,
                        static_cast<double>(rows) / static_cast<double>(batches),
                        static_cast<double>(slots - real) / static_cast<double>(real),
                        static_cast<double>(slots - real) / static_cast<double>(slots), min_tgt, max_tgt));
  }
}
