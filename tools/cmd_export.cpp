// `seqgrad export`: a trained checkpoint as ONNX graphs (tools/export/onnx_export.h) plus the
// vocabularies and tokenizer settings a runtime needs to go from text to ids and back.
#include <filesystem>
#include <memory>
#include <optional>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "core/autograd.h"
#include "core/fileio.h"
#include "core/serialize.h"
#include "core/threads.h"
#include "models/seq2seq/checkpoint.h"
#include "models/seq2seq/run.h"
#include "models/seq2seq/transformer.h"
#include "models/seq2seq/translator.h"
#include "models/text/vocab.h"
#include "nn/quantized.h"
#include "tools/args.h"
#include "tools/commands.h"
#include "tools/export/onnx_export.h"

namespace seqgrad::tools {
namespace {

namespace fs = std::filesystem;

struct Exportable {
  std::unique_ptr<models::TranslationModel> model;  // models::Seq2Seq or models::TransformerTranslator
  models::Seq2SeqConfig config;
  std::optional<models::CheckpointInfo> info;  // absent for bench data (no vocabularies)
};

Exportable load_checkpoint_model(const std::string& path) {
  models::LoadedModel loaded = models::load_model(path);
  return {std::move(loaded.model), loaded.checkpoint.info.config.model, std::move(loaded.checkpoint.info)};
}

// PREFIX.json and PREFIX.safetensors as `seqgrad bench --export` writes them (the benchmark's
// initial weights and model config).
Exportable load_bench_model(const std::string& prefix) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_file(prefix + ".json"));
  } catch (const nlohmann::json::exception& err) {
    throw IOError(fmt::format("{}.json is not JSON: {}", prefix, err.what()));
  }
  models::Seq2SeqConfig config = models::Seq2SeqConfig::from_json(j.at("config").at("model"));
  Exportable e{models::build_translation_model(config), config, std::nullopt};
  e.model->load_state_dict(load_tensors(prefix + ".safetensors").tensors);
  e.model->eval();
  return e;
}

// A subword checkpoint's SentencePiece models, as files any SentencePiece library loads.
constexpr const char* kSubwordModelFiles[2] = {"src.spm.model", "tgt.spm.model"};

// What a runtime needs besides the graphs: the special ids, the tokenizer's settings (the rules
// are models/text/tokenizer.h's, or SentencePiece models; examples/onnx/translate.py implements
// both), both vocabularies and the graphs' inputs and outputs.
// What each graph takes and gives, as translator.json describes them to a runtime.
nlohmann::json graphs_json(const models::Seq2SeqConfig& c) {
  if (c.architecture == models::Architecture::transformer)
    return {{"model.onnx", "src (batch, src_seq) int64, src_lengths (batch) int64, tgt (batch, tgt_seq) int64 -> "
                           "output (batch, tgt_seq, tgt_vocab) float logits"},
            {"encoder.onnx", "src, src_lengths -> memory (batch, src_seq, E), per decoder layer i cross_key_i and "
                             "cross_value_i (batch, heads, src_seq, E/heads), src_keep (batch, src_seq) bool"},
            {"decoder_step.onnx", "y_prev (batch) int64, past_key_i and past_value_i (batch, heads, past_seq, "
                                  "E/heads) (past_seq 0 at the first step), cross_key_i, cross_value_i, src_keep -> "
                                  "log_probs (batch, tgt_vocab), present_key_i and present_value_i (batch, heads, "
                                  "past_seq + 1, E/heads), weights (batch, src_seq)"}};
  return {{"model.onnx", "src (batch, src_seq) int64, src_lengths (batch) int64, tgt (batch, tgt_seq) "
                         "int64 -> output (batch, tgt_seq, tgt_vocab) float logits"},
          {"encoder.onnx", "src, src_lengths -> memory (batch, src_seq, 2H), keys (batch, src_seq, A), "
                           "state (layers, batch, H), src_keep (batch, src_seq) bool"},
          {"decoder_step.onnx", "y_prev (batch) int64, state, memory, keys, src_keep -> log_probs (batch, "
                                "tgt_vocab), new_state (layers, batch, H), weights (batch, src_seq)"}};
}

// What a runtime needs besides the graphs: the special ids, the tokenizer's settings (the rules
// are models/text/tokenizer.h's, or SentencePiece models; examples/onnx/translate.py implements
// both), both vocabularies and the graphs' inputs and outputs.
nlohmann::json translator_json(const Exportable& e, int64_t opset) {
  const models::CheckpointInfo* info = e.info ? &*e.info : nullptr;
  nlohmann::json j = {{"format", "seqgrad.onnx_translator"}, {"version", 1}, {"opset", opset},
                      {"model", e.config.to_json()},
                      {"special_ids", {{"pad", text::Vocab::kPad}, {"bos", text::Vocab::kBos},
                                       {"eos", text::Vocab::kEos}, {"unk", text::Vocab::kUnk}}},
                      {"graphs", graphs_json(e.config)}};
  if (const auto* transformer = dynamic_cast<const models::TransformerTranslator*>(e.model.get()))
    j["max_positions"] = transformer->positions.options().max_len;  // the graphs' position table
  const models::TranslationModel& model = *e.model;
  std::vector<std::string> int8;  // names of the weights stored int8 (a quantized checkpoint)
  for (const auto& [name, weight] : nn::quantized_weights(model)) int8.push_back(name);
  j["int8_weights"] = int8;
  if (!int8.empty()) j["int8_activation_bits"] = onnx::int8_activation_bits();  // the graphs' codes: 8, or 7
  if (!info) return j;
  j["languages"] = {{"source", info->config.src_lang}, {"target", info->config.tgt_lang}};
  j["max_output_tokens"] = models::decode_options(info->config).max_len;  // as `seqgrad translate` decodes
  const int64_t max_source_tokens = info->config.max_tokens > 0 ? 2 * info->config.max_tokens : 0;
  if (info->src_vocab.is_subword())  // the SentencePiece models are written beside (write_export)
    j["tokenizer"] = {{"kind", "sentencepiece"}, {"src_model", kSubwordModelFiles[0]},
                      {"tgt_model", kSubwordModelFiles[1]}, {"max_source_tokens", max_source_tokens},
                      {"append_eos", true}};
  else
    j["tokenizer"] = {{"kind", "seqgrad.words"}, {"lowercase", true}, {"apostrophe", "attach_left"},
                      {"max_source_tokens", max_source_tokens}, {"append_eos", true}};
  j["src_vocab"] = info->src_vocab.tokens();
  j["tgt_vocab"] = info->tgt_vocab.tokens();
  return j;
}

// The encoder output the exporter calls "keys": the additive key projection (the hybrid's additive
// half), or for scaled dot the encoder outputs themselves (its query is projected instead).
Tensor exported_keys(const models::AttnDecoder::Memory& memory) {
  if (!memory.parts.empty()) return memory.parts[0].projected.at(0);  // hybrid: {additive, scaled dot}
  return memory.projected.empty() ? memory.keys : memory.projected[0];
}

// Test hook: seqgrad's own outputs for the inputs src, src_lengths, tgt in `inputs`. Both
// architectures: the teacher-forced logits, and the search's steps (start, then step fed tgt's
// tokens one at a time) as log-probabilities (B, T, V) and attention weights (B, T, S). The GRU's
// also: the encoder's values and one decoder step from tgt[:, 0].
void write_reference(const models::TranslationModel& model, const std::string& inputs, const std::string& outputs) {
  NoGradGuard no_grad;
  TensorFile in = load_tensors(inputs);
  for (const char* name : {"src", "src_lengths", "tgt"})
    SG_CHECK_VALUE(in.tensors.count(name), "--reference-inputs {} has no tensor '{}'", inputs, name);
  const Tensor &src = in.tensors.at("src"), &lengths = in.tensors.at("src_lengths"), &tgt = in.tensors.at("tgt");
  std::unique_ptr<models::TranslationModel::SearchState> search = model.start(src, lengths);
  std::vector<Tensor> step_log_probs, step_weights;
  for (int64_t t = 0; t < tgt.size(1); ++t) {
    models::TranslationModel::StepOutput out = model.step(*search, tgt.select(1, t).contiguous());
    step_log_probs.push_back(log_softmax(out.logits, -1));  // (B, V)
    step_weights.push_back(out.weights);                    // (B, S)
  }
  std::map<std::string, Tensor> reference = {{"output", model(src, lengths, tgt)},
                                             {"step_log_probs", stack(step_log_probs, 1)},
                                             {"step_weights", stack(step_weights, 1)}};
  if (const auto* gru = dynamic_cast<const models::Seq2Seq*>(&model)) {
    auto [state, memory] = gru->encode(src, lengths);
    models::AttnDecoder::Step step = gru->decoder.step(tgt.select(1, 0).contiguous(), state, memory);
    reference.insert({{"memory", memory.values},
                      {"keys", exported_keys(memory)},
                      {"state", state},
                      {"log_probs", log_softmax(step.logits, -1)},
                      {"new_state", step.state},
                      {"weights", step.weights}});
  }
  save_tensors(outputs, reference);
}

void write_export(const std::string& dir, const onnx::Graphs& graphs, const nlohmann::json& translator,
                  const models::CheckpointInfo* info) {
  std::error_code error;
  fs::create_directories(dir, error);
  SG_CHECK_IO(!error && fs::is_directory(dir), "cannot create the output folder {}: {}", dir,
              error ? error.message() : "a file of that name exists");
  // Each file is written under a temporary name and renamed (core/fileio.h): a failure leaves the
  // previous file or none, never a partial one. Everything was built and checked before this.
  write_file_atomic(dir + "/model.onnx", graphs.model);
  write_file_atomic(dir + "/encoder.onnx", graphs.encoder);
  write_file_atomic(dir + "/decoder_step.onnx", graphs.decoder_step);
  if (info && info->src_vocab.is_subword()) {
    write_file_atomic(dir + "/" + kSubwordModelFiles[0], info->src_vocab.subword()->serialized());
    write_file_atomic(dir + "/" + kSubwordModelFiles[1], info->tgt_vocab.subword()->serialized());
  }
  write_file_atomic(dir + "/translator.json", translator.dump(1) + "\n");
}

}  // namespace

int export_main(int argc, char** argv) {
  Args a("export", "Export a trained checkpoint to ONNX: model.onnx (teacher-forced logits), encoder.onnx and\n"
                   "decoder_step.onnx (for greedy or beam search in any ONNX runtime) and translator.json\n"
                   "(vocabularies, tokenizer settings, special ids), with a subword checkpoint also\n"
                   "src.spm.model and tgt.spm.model (SentencePiece). Every graph passes the ONNX checker.\n"
                   "A Transformer's decoder_step.onnx takes and returns each layer's key/value cache.\n"
                   "An int8 checkpoint (seqgrad quantize) exports int8: Linear layers as a per-row activation\n"
                   "quantization + MatMulInteger, int8 embeddings and GRU weights stored int8 (the GRUs compute\n"
                   "in float32). examples/onnx/translate.py translates with them in onnxruntime.");
  a.option("checkpoint", "file", "checkpoint to export", "runs/default/best.safetensors")
      .option("out", "dir", "output folder (created once the checkpoint has loaded; existing files are replaced)")
      .required()
      .option("threads", "n", "threads (default: all cores)")
      .quiet_option()  // the summary line
      .option("opset", "n", fmt::format("ONNX opset, {} to {}", onnx::kMinOpset, onnx::kMaxOpset),
              std::to_string(onnx::kDefaultOpset))
      // bench/run.sh: export the benchmark's model, PREFIX.{json,safetensors} from `seqgrad bench --export`
      .hidden_option("bench-data", "prefix", "export bench data instead of a checkpoint")
      // ... its model quantized as `seqgrad bench`'s int8 workloads quantize it (Linear and GRU, per channel)
      .hidden_option("bench-int8", "", "with --bench-data: export the int8 model")
      // tests/test_onnx_export.py: seqgrad's own outputs for the inputs in a safetensors file
      .hidden_option("reference-inputs", "file", "src, src_lengths, tgt to run seqgrad on")
      .hidden_option("reference-outputs", "file", "where seqgrad's outputs for --reference-inputs go");
  if (!a.parse(argc, argv)) return 0;
  if (a.has("threads")) set_num_threads(a.get_threads());
  const int64_t opset = a.get_int("opset");
  onnx::check_options({.opset = opset});  // before loading anything
  SG_CHECK_VALUE(a.has("reference-inputs") == a.has("reference-outputs"),
                 "--reference-inputs and --reference-outputs go together");
  SG_CHECK(onnx::onnx_available(), "{}", onnx::kNoOnnxSupport);
  SG_CHECK_VALUE(!a.has("bench-int8") || a.has("bench-data"), "--bench-int8 goes with --bench-data");
  Exportable e = a.has("bench-data") ? load_bench_model(a.get("bench-data")) : load_checkpoint_model(a.get("checkpoint"));
  if (a.has("bench-int8")) nn::quantize_dynamic(*e.model);
  onnx::Graphs graphs = onnx::export_graphs(*e.model, {.opset = opset});
  const models::CheckpointInfo* info = e.info ? &*e.info : nullptr;
  write_export(a.get("out"), graphs, translator_json(e, opset), info);
  const size_t int8_weights = nn::quantized_weights(*e.model).size();
  const bool transformer = e.config.architecture == models::Architecture::transformer;
  if (!a.flag("quiet"))
    fmt::print("exported {}, {} layer(s), opset {}{} to {}: model.onnx ({:.1f} MB), encoder.onnx, "
             "decoder_step.onnx, translator.json\n",
             transformer ? fmt::format("a Transformer ({} heads)", e.config.heads)
                         : fmt::format("{} attention", models::attention_kind_name(e.config.attention)),
             e.config.num_layers, opset,
             int8_weights ? fmt::format(", {} int8 weights{}", int8_weights, transformer ? "" : " (GRUs compute in float32)")
                          : "",
             a.get("out"), graphs.model.size() / 1e6);
  if (a.has("reference-inputs"))
    write_reference(*e.model, a.get("reference-inputs"), a.get("reference-outputs"));
  return 0;
}

}  // namespace seqgrad::tools
