// PositionalEncoding: the sinusoidal table computed per call, or the learned one looked up.
#include "nn/positional.h"

#include <cmath>
#include <vector>

#include "nn/init.h"

namespace seqgrad::nn {
namespace {

constexpr const char* kOp = "positional_encoding";

const PositionalEncoding::Options& checked(const PositionalEncoding::Options& o) {
  SG_CHECK_VALUE(o.d_model > 0, "{}: d_model = {} must be positive", kOp, o.d_model);
  SG_CHECK_VALUE(o.kind == PositionalEncoding::Kind::learned || o.d_model % 2 == 0,
                 "{}: d_model = {} must be even for sinusoidal encodings (a sine and a cosine per frequency)", kOp,
                 o.d_model);
  SG_CHECK_VALUE(o.kind == PositionalEncoding::Kind::sinusoidal || o.max_len > 0,
                 "{}: max_len = {} must be positive for learned encodings", kOp, o.max_len);
  return o;
}

// P[offset + t] for t < positions: (positions, E), in float64 (rounded once to the input's dtype).
Tensor sinusoidal_table(int64_t positions, int64_t offset, int64_t E) {
  std::vector<double> table(static_cast<size_t>(positions * E));
  for (int64_t i = 0; i < E / 2; ++i) {
    // 1 / 10000^(2i/E) as the tutorial's exp(2i · -ln(10000) / E)
    const double inv_freq = std::exp(static_cast<double>(2 * i) * (-std::log(10000.0) / static_cast<double>(E)));
    for (int64_t t = 0; t < positions; ++t) {
      const double angle = static_cast<double>(offset + t) * inv_freq;
      table[t * E + 2 * i] = std::sin(angle);
      table[t * E + 2 * i + 1] = std::cos(angle);
    }
  }
  return from_vector(table, {positions, E});
}

}  // namespace

PositionalEncoding::PositionalEncoding(Options options)
    : Module("PositionalEncoding"), dropout({.p = checked(options).dropout}), options_(options) {
  if (options.kind == Kind::learned) {
    weight = empty({options.max_len, options.d_model});
    register_parameter("weight", weight);
    init::normal_(weight, 0.0, 1.0 / std::sqrt(static_cast<double>(options.d_model)));
  }
  register_module("dropout", dropout);
}

Tensor PositionalEncoding::encodings(int64_t positions, int64_t offset, TensorOptions options) const {
  SG_CHECK_VALUE(positions >= 0 && offset >= 0, "{}: positions = {} and offset = {} must be >= 0", kOp, positions,
                 offset);
  if (options_.kind == Kind::sinusoidal)
    return sinusoidal_table(positions, offset, options_.d_model).to(options.dtype).to(options.device);
  SG_CHECK_VALUE(offset + positions <= options_.max_len,
                 "{}: positions {} .. {} exceed the learned table's max_len = {}", kOp, offset,
                 offset + positions - 1, options_.max_len);
  Tensor ids = arange(static_cast<double>(offset), static_cast<double>(offset + positions), 1,
                      {.dtype = DType::i64, .device = weight.device()});
  return embedding(weight, ids);  // (positions, E)
}

Tensor PositionalEncoding::operator()(const Tensor& x, int64_t offset) const {
  SG_CHECK(x.defined(), "{}: input is undefined", kOp);
  SG_CHECK_SHAPE(x.ndim() == 3 && x.size(2) == options_.d_model,
                 "{}: expected x {} of d_model = {} features, got {}", kOp,
                 options_.batch_first ? "(B, T, E)" : "(T, B, E)", options_.d_model, x.shape());
  const int time_dim = options_.batch_first ? 1 : 0;
  Tensor p = encodings(x.size(time_dim), offset, {.dtype = x.dtype(), .device = x.device()});  // (T, E)
  return dropout(add(x, options_.batch_first ? p : p.unsqueeze(1)));
}

}  // namespace seqgrad::nn
