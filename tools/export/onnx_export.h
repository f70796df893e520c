// ONNX export of both translators in standard ONNX ops, for any ONNX runtime: three graphs each,
// each checked by the ONNX checker and strict shape inference before it is returned.
//
// The GRU translator (models/seq2seq/model.h):
//   model.onnx         the teacher-forced model (as the seeds' torch.onnx.export):
//                      src (B, S) int64, src_lengths (B,) int64, tgt (B, T) int64 -> output (B, T, V) float logits
//   encoder.onnx       src, src_lengths -> memory (B, S, 2H), keys (B, S, A | 2H), state (L, B, H), src_keep (B, S)
//                      bool, true at real tokens (the library's keep mask)
//   decoder_step.onnx  y_prev (B,) int64, state, memory, keys, src_keep
//                      -> log_probs (B, V), new_state (L, B, H), weights (B, S)
// B, S and T are dynamic axes ("batch", "src_seq", "tgt_seq"). How each part maps to ONNX:
//   Embedding -> Gather; Linear -> MatMul (+ Add) with the weight stored transposed;
//   the bidirectional encoder GRU -> one ONNX GRU per layer (direction "bidirectional",
//     sequence_lens = src_lengths, so each sequence's reverse pass starts at its last valid step);
//   PyTorch-style GRUs -> linear_before_reset = 1, gates reordered from [r; z; n] to ONNX's [z; r; h],
//     bias = [b_ih | b_hh] (ONNX's [Wb | Rb]);
//   masked softmax -> Where(keep, Softmax(Where(keep, scores, -inf)), 0): a fully masked row gives
//     zeros, as nn::masked_softmax does, instead of NaN;
//   the decoder loop of model.onnx -> Scan over tgt's time axis, whose body is the decoder step
//     (it reads memory, keys, src_keep and the weights from the enclosing graph).
// Every attention kind of the translator (additive, scaled_dot, hybrid) is expressible this way.
// An int8 model (nn::quantize_dynamic, a `seqgrad quantize` checkpoint) exports int8:
//   int8 Linear -> each activation row to uint8 with its own range, as seqgrad's quantized_linear
//     (ReduceMin/ReduceMax, PyTorch's scale and zero point per row in Div/Where/Round/Clip, not
//     DynamicQuantizeLinear, which has one range per tensor) + MatMulInteger (int8 weight, exact
//     int32 product) - z · Σ_k W_q, Cast, scaled by s_x · s_w (+ Add for the bias);
//   int8 Embedding -> Gather of the int8 rows and of their scales, Cast, Mul;
//   int8 GRU -> int8 W and R stored, dequantized once (Cast, Mul) in the top-level graph, and the
//     float ONNX GRU: ONNX has no int8 GRU, so the recurrence runs in float32 where seqgrad's
//     int8 GRU also rounds its inputs to 8 bits.
// A row's int8 products therefore do not depend on the batch, as in seqgrad; the int8 graphs'
// outputs differ from seqgrad's int8 ones through the float32 GRUs, about as much as seqgrad's int8
// outputs differ from float32 (tests/test_onnx_export.py, Quantized).
//
// The Transformer translator (models/seq2seq/transformer.h), N layers each side, h heads of d = E / h;
// the decoder step's key/value cache is an input and an output, as onnxruntime users run decoders:
//   model.onnx         src, src_lengths, tgt -> output (B, T, V) float logits (the causal mask inside)
//   encoder.onnx       src, src_lengths -> memory (B, S, E), per decoder layer i the cross-attention's
//                      projected heads cross_key_i, cross_value_i (B, h, S, d), src_keep (B, S)
//   decoder_step.onnx  y_prev (B,), past_key_i, past_value_i (B, h, t, d) (t = 0 before the first
//                      token: empty tensors), cross_key_i, cross_value_i, src_keep
//                      -> log_probs (B, V), present_key_i, present_value_i (B, h, t + 1, d),
//                      weights (B, S) (the last layer's cross-attention averaged over its heads, as
//                      TranslationModel::step reports it)
// with "past_seq" and "present_seq" the caches' dynamic axes. The step's position is t, read from
// the cache's shape, so no separate input can disagree with it (seqgrad's State::steps). The mapping:
//   √E · Embedding + positions -> Gather, Mul, + Gather of a stored (max_len, E) table
//     (nn::PositionalEncoding's max_len, 1024): the learned one, or the sinusoidal one that
//     seqgrad computes per call (so the graphs take at most max_len positions a side);
//   multi-head attention -> the packed in_proj_weight as three MatMuls, Reshape/Transpose into
//     heads, MatMul, the masked softmax above (padding keys; the causal mask as LessOrEqual of
//     positions), MatMul, heads merged, out_proj;
//   LayerNorm -> LayerNormalization at opset 17; ReduceMean, Sub, Mul, Add, Sqrt, Div before it;
//   pre-norm and post-norm residuals, the final norms, relu feed-forward blocks, and the output
//     layer or the tied embedding matrix (stored once, transposed by the runtime as it loads).
// An int8 Transformer (`seqgrad quantize`: out_proj, linear1, linear2, an untied output layer)
// exports those Linear layers int8 as the GRU's above; its embeddings and in_proj stay float32.
// Built with libonnx (the protobuf schema and checker); without it, a stub throws (onnx_available()).
#pragma once
#include <cstdint>
#include <string>

#include "models/seq2seq/model.h"
#include "models/seq2seq/transformer.h"
#include "ops/quantized.h"

namespace seqgrad::tools::onnx {

constexpr int64_t kDefaultOpset = 13;
constexpr int64_t kMinOpset = 13, kMaxOpset = 17;  // the ops used here have one meaning over 13..17

struct ExportOptions {
  int64_t opset = kDefaultOpset;  // in [kMinOpset, kMaxOpset]
};
// Throws ValueError naming the supported range for an opset outside [kMinOpset, kMaxOpset].
inline void check_options(const ExportOptions& options) {
  SG_CHECK_VALUE(options.opset >= kMinOpset && options.opset <= kMaxOpset,
                 "ONNX opset {} is not supported (supported: {} to {})", options.opset, kMinOpset, kMaxOpset);
}

// The serialized ModelProto of each graph; each passed the ONNX checker and strict shape inference.
struct Graphs {
  std::string model, encoder, decoder_step;
};

// True when this build has the ONNX libraries (meson option onnx); else export_graphs throws
// Error(kNoOnnxSupport).
bool onnx_available();
constexpr const char* kNoOnnxSupport =
    "this build of seqgrad lacks ONNX support (install libonnx-dev and libprotobuf-dev, then reconfigure with "
    "meson setup --reconfigure -Donnx=enabled)";

// The bits an int8 layer's activation codes have in the graphs: what seqgrad's own int8 products
// use on this CPU (ops/quantized.h's reduce_range): 7 where oneDNN's kernels lack VNNI (their u8 · s8
// pair sums saturate an int16 above 7 bits), else 8. The graphs then compute what seqgrad computes
// here, and onnxruntime's kernels without VNNI, which saturate the same way, stay exact on them.
inline int64_t int8_activation_bits() { return int8_needs_reduce_range() ? 7 : 8; }

// Builds and checks the three graphs from the model's weights (on any device; copied to the host),
// for a models::Seq2Seq or a models::TransformerTranslator.
// Throws ValueError for a bad option (check_options), Error when the checker rejects a
// graph (a bug in the exporter: the message names the graph and the checker's complaint).
Graphs export_graphs(const models::TranslationModel& model, const ExportOptions& options = {});

}  // namespace seqgrad::tools::onnx
