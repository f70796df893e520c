// Embedding module over ops' embedding() gather (whose backward skips the padding row).
#include "nn/embedding.h"

#include "nn/init.h"

namespace seqgrad::nn {

Embedding::Embedding(Options options) : Module("Embedding"), options_(options) {
  SG_CHECK_VALUE(options.num_embeddings > 0, "embedding: num_embeddings = {} must be positive",
                 options.num_embeddings);
  SG_CHECK_VALUE(options.embedding_dim > 0, "embedding: embedding_dim = {} must be positive", options.embedding_dim);
  if (options.padding_idx) {
    int64_t p = *options.padding_idx, n = options.num_embeddings;
    SG_CHECK_VALUE(p >= -n && p < n, "embedding: padding_idx = {} not in [-{}, {}) (num_embeddings = {})", p, n, n, n);
    padding_index_ = p < 0 ? p + n : p;
  }
  weight = empty({options.num_embeddings, options.embedding_dim});
  register_parameter("weight", weight);
  reset_parameters();
}

void Embedding::reset_parameters() {
  NoGradGuard no_grad;
  init::normal_(weight);
  if (padding_index_ >= 0) init::zeros_(weight.select(0, padding_index_));
}

Tensor Embedding::operator()(const Tensor& ids) const {
  SG_CHECK(ids.defined(), "embedding: ids are undefined");
  SG_CHECK_DTYPE(ids.dtype() == DType::i64, "embedding: ids must be int64, got {} {}", ids.dtype(), ids.shape());
  return embedding(weight, ids, padding_index_);
}

}  // namespace seqgrad::nn
