// Embedding: a lookup table of num_embeddings vectors, as torch.nn.Embedding.
#pragma once
#include <cstdint>
#include <optional>

#include "nn/module.h"

namespace seqgrad::nn {

class Embedding : public Module {
 public:
  struct Options {
    int64_t num_embeddings = 0;
    int64_t embedding_dim = 0;
    // This row is zeroed at init and never gets a gradient (it stays whatever it is set to).
    // Negative values count from the end, as in PyTorch.
    std::optional<int64_t> padding_idx = std::nullopt;
  };
  explicit Embedding(Options options);

  // ids: int64 of any shape, values in [0, num_embeddings) -> (ids..., embedding_dim)
  Tensor operator()(const Tensor& ids) const;

  // PyTorch's default: weight ~ N(0, 1), the padding row zeroed.
  void reset_parameters();
  const Options& options() const { return options_; }
  // padding_idx made non-negative, or -1 for none.
  int64_t padding_index() const { return padding_index_; }

  Tensor weight;  // (num_embeddings, embedding_dim)

 private:
  Options options_;
  int64_t padding_index_ = -1;
};

}  // namespace seqgrad::nn
