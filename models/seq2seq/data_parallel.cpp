// Batch shards and per-rank seeds for data-parallel training.
#include "models/seq2seq/data_parallel.h"

#include "core/error.h"

namespace seqgrad::models {
namespace {

// Rows [begin, end) of a row-major (rows, width) matrix.
std::vector<int64_t> rows_of(const std::vector<int64_t>& m, int64_t width, int64_t begin, int64_t end) {
  return std::vector<int64_t>(m.begin() + begin * width, m.begin() + end * width);
}

}  // namespace

text::Batch batch_shard(const text::Batch& batch, int rank, int world_size) {
  SG_CHECK_VALUE(world_size >= 1 && rank >= 0 && rank < world_size,
                 "batch_shard: rank {} is not in a job of {} ranks", rank, world_size);
  const int64_t begin = batch.batch * rank / world_size, end = batch.batch * (rank + 1) / world_size;
  text::Batch shard;
  shard.batch = end - begin;
  shard.src_len_max = batch.src_len_max;
  shard.tgt_len_max = batch.tgt_len_max;
  shard.src = rows_of(batch.src, batch.src_len_max, begin, end);
  shard.tgt_in = rows_of(batch.tgt_in, batch.tgt_len_max, begin, end);
  shard.tgt_out = rows_of(batch.tgt_out, batch.tgt_len_max, begin, end);
  shard.src_lengths = rows_of(batch.src_lengths, 1, begin, end);
  shard.tgt_lengths = rows_of(batch.tgt_lengths, 1, begin, end);
  shard.index = rows_of(batch.index, 1, begin, end);
  return shard;
}

uint64_t rank_seed(uint64_t seed, int rank) {
  constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;  // 2^64 / golden ratio: spreads nearby seeds apart
  return rank == 0 ? seed : seed ^ (kGolden * static_cast<uint64_t>(rank));
}

}  // namespace seqgrad::models
