// A batch of source sentences (ids) padded with <pad> = 0 to the longest, with their lengths, as the
// data pipeline batches them: the decoding suites' input.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace seqgrad::testing {

struct Source {
  Tensor src, lengths;  // (B, S) int64, (B,) int64
};

inline Source source(const std::vector<std::vector<int64_t>>& sentences) {
  int64_t longest = 0;
  for (const auto& s : sentences) longest = std::max<int64_t>(longest, static_cast<int64_t>(s.size()));
  std::vector<int64_t> ids, lengths;
  for (const auto& s : sentences) {
    ids.insert(ids.end(), s.begin(), s.end());
    ids.insert(ids.end(), longest - static_cast<int64_t>(s.size()), 0);  // <pad>
    lengths.push_back(static_cast<int64_t>(s.size()));
  }
  const auto batch = static_cast<int64_t>(sentences.size());
  return {from_vector(ids, {batch, longest}, {.dtype = DType::i64}),
          from_vector(lengths, {batch}, {.dtype = DType::i64})};
}

}  // namespace seqgrad::testing
