// Data-parallel training of the translator (`mpirun -np N seqgrad train`): which part of every
// global batch a rank trains on, and its dropout stream. The gradient averaging itself is
// nn::DistributedDataParallel; models::Trainer uses both when given a communicator.
#pragma once
#include <cstdint>

#include "models/text/corpus.h"

namespace seqgrad::models {

// Rank `rank`'s rows of a global batch: rows [rank x B / N, (rank + 1) x B / N), so shards differ by
// at most one pair and together hold every pair once. The padded lengths stay the global batch's,
// so each pair is computed exactly as in a one-rank run. A rank may get no rows (B < N).
text::Batch batch_shard(const text::Batch& batch, int rank, int world_size);

// The dropout seed of a rank: rank 0 keeps `seed` (a one-rank run is rank 0 of one), the others get
// distinct streams, so the ranks do not drop the same units of their different examples in lockstep.
uint64_t rank_seed(uint64_t seed, int rank);

}  // namespace seqgrad::models
