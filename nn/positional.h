// Positional encodings for the Transformer: y = dropout(x + P[offset + t]) for position t of x.
//   sinusoidal ("Attention is all you need", §3.5), laid out as PyTorch's Transformer tutorial
//   (and tensor2tensor's paper formula), sine and cosine interleaved:
//     P[p, 2i] = sin(p / 10000^(2i/E))   P[p, 2i+1] = cos(p / 10000^(2i/E))
//   (fairseq's SinusoidalPositionalEmbedding instead puts every sine first, then every cosine, and
//   starts counting at padding_idx + 1). Computed, not stored: no parameters, no length limit.
//   learned: a (max_len, E) table `weight`, initialised N(0, E^-1/2) as fairseq's learned
//   positional embeddings.
// Scaling the token embeddings by √E before the sum, as the paper does, is the model's choice.
#pragma once
#include <cstdint>

#include "nn/dropout.h"
#include "nn/module.h"

namespace seqgrad::nn {

class PositionalEncoding : public Module {
 public:
  enum class Kind { sinusoidal, learned };
  struct Options {
    int64_t d_model = 0;  // E; even for sinusoidal encodings
    Kind kind = Kind::sinusoidal;
    int64_t max_len = 1024;   // positions of the learned table (sinusoidal ones have no limit)
    double dropout = 0.0;     // applied to the sum, as the tutorial's, in [0, 1)
    bool batch_first = false; // x (B, T, E); else (T, B, E), as the tutorial and torch.nn.Transformer
  };
  explicit PositionalEncoding(Options options);

  // x (T, B, E) or (B, T, E) -> the same shape: x + P[offset .. offset + T), then dropout. offset is
  // the first position's index (an incremental decoder's step count).
  Tensor operator()(const Tensor& x, int64_t offset = 0) const;
  // P[offset .. offset + positions) (positions, E) in `options`' dtype and device (with the
  // learned table's gradient).
  Tensor encodings(int64_t positions, int64_t offset, TensorOptions options) const;
  const Options& options() const { return options_; }

  Tensor weight;  // (max_len, E): the learned table; undefined for sinusoidal encodings
  Dropout dropout;

 private:
  Options options_;
};

}  // namespace seqgrad::nn
