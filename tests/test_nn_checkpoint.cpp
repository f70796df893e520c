// nn checkpoints: round trip with extras and metadata, resuming training identically, key
// mismatches reported by name, and corrupted or truncated files rejected with a clear error.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

#include "core/fileio.h"
#include "core/rng.h"
#include "core/serialize.h"
#include "core/state_dict.h"
#include "nn/checkpoint.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "optim/optim.h"
#include "temp_dir.h"

using namespace seqgrad;

namespace {

struct TwoLayer : nn::Module {
  nn::Linear hidden, out;
  explicit TwoLayer(int64_t width = 3)
      : Module("TwoLayer"), hidden({.in_features = 4, .out_features = width}),
        out({.in_features = width, .out_features = 2}) {
    register_module("hidden", hidden);
    register_module("out", out);
  }
  Tensor operator()(const Tensor& x) const { return out(hidden(x).tanh()); }
};

using seqgrad::testing::temp_path;

// A plain (non-durable) write: thousands of corrupted copies need no fsync each.
void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::vector<double> flat(const nn::Module& m) {
  std::vector<double> out;
  for (const Tensor& p : m.parameters())
    for (double v : p.to_vector<double>()) out.push_back(v);
  return out;
}

}  // namespace

TEST_CASE("checkpoint: round trip of parameters, extra tensors and values") {
  manual_seed(1);
  TwoLayer a;
  manual_seed(2);
  TwoLayer b;
  REQUIRE(flat(a) != flat(b));
  const std::string path = temp_path("roundtrip.safetensors");
  Tensor step = tensor({7}, {}, {.dtype = DType::i64});
  StateDict train({{"step", step}}, {{"epoch", 3}, {"note", "ünïcode ok"}, {"lrs", {0.5, 0.25}}});
  StateDict extra;
  extra.nest("train", train);
  extra.values["seed"] = 11;
  nn::save_checkpoint(path, a, extra);
  nn::Checkpoint ckpt = nn::load_checkpoint(path, b);
  CHECK(flat(a) == flat(b));
  CHECK(ckpt.report.ok());
  REQUIRE(ckpt.extra.count("train.step") == 1);
  CHECK(ckpt.extra.at("train.step").item() == 7);
  CHECK(ckpt.extra.values["seed"] == 11);
  const StateDict back = ckpt.extra.nested("train");
  CHECK(back.size() == 1);
  CHECK(back.at("step").item() == 7);
  CHECK(back.values == nlohmann::json{{"epoch", 3}, {"note", "ünïcode ok"}, {"lrs", {0.5, 0.25}}});

  // A plain reader sees the model's weights under their state_dict names, and the values once, as
  // one JSON object (not JSON strings inside JSON).
  TensorFile plain = load_tensors(path);
  CHECK(plain.tensors.count("hidden.weight") == 1);
  CHECK(plain.tensors.count("out.bias") == 1);
  CHECK(nlohmann::json::parse(plain.metadata.at("seqgrad.values"))["train"]["lrs"][1] == 0.25);
  std::filesystem::remove(path);

  CHECK_THROWS_WITH_AS(nn::save_checkpoint(path, a, {{"out.bias", step}}),
                       "save_checkpoint: extra tensor 'out.bias' has the name of a TwoLayer tensor", ValueError);
  CHECK_THROWS_WITH_AS(extra.nest("train", train), "StateDict.nest: 'train' is taken already", ValueError);
  CHECK_THROWS_WITH_AS(extra.nest("a.b", train), doctest::Contains("name 'a.b' must be non-empty and contain no '.'"),
                       ValueError);
  CHECK_THROWS_WITH_AS(nn::load_checkpoint(temp_path("does_not_exist"), b), doctest::Contains("does_not_exist"),
                       IOError);

  // A plain safetensors file (e.g. written by PyTorch) loads as module tensors.
  save_tensors(path, a.state_dict());
  TwoLayer c;
  CHECK(nn::load_checkpoint(path, c).report.ok());
  CHECK(flat(c) == flat(a));
  std::filesystem::remove(path);
}

TEST_CASE("checkpoint: a file of format 1 (before StateDict) loads, its metadata strings as string values") {
  manual_seed(4);
  TwoLayer a;
  TwoLayer b;
  const std::string path = temp_path("format1.safetensors");
  // what save_checkpoint wrote before StateDict: extra tensors listed, the caller's metadata as strings
  std::map<std::string, Tensor> tensors = a.state_dict();
  tensors["optim.step"] = tensor({3}, {}, {.dtype = DType::i64});
  std::map<std::string, std::string> meta{{"seqgrad.format", "seqgrad-checkpoint-1"},
                                          {"seqgrad.extra_tensors", "[\"optim.step\"]"},
                                          {"epoch", "3"},
                                          {"optim", "{\"type\": \"Adam\"}"}};
  meta[nn::kChecksumKey] = nn::checkpoint_checksum(tensors, meta);
  save_tensors(path, tensors, meta);
  nn::Checkpoint ckpt = nn::load_checkpoint(path, b);
  CHECK(flat(b) == flat(a));
  CHECK(ckpt.extra.size() == 1);
  CHECK(ckpt.extra.at("optim.step").item() == 3);
  CHECK(ckpt.extra.values == nlohmann::json{{"epoch", "3"}, {"optim", "{\"type\": \"Adam\"}"}});
  // a format this build does not know is refused by name
  meta["seqgrad.format"] = "seqgrad-checkpoint-9";
  meta[nn::kChecksumKey] = nn::checkpoint_checksum(tensors, meta);
  save_tensors(path, tensors, meta);
  CHECK_THROWS_WITH_AS(nn::load_checkpoint(path, b), doctest::Contains("has format 'seqgrad-checkpoint-9'; this build "
                                                                       "reads 'seqgrad-checkpoint-2' and "
                                                                       "'seqgrad-checkpoint-1'"), IOError);
  std::filesystem::remove(path);
}

TEST_CASE("checkpoint: model + Adam + StepLR resume continues bit-identically") {
  manual_seed(5);
  Tensor x = randn({6, 4});
  Tensor y = tensor({0, 1, 1, 0, 1, 0}, {6}, {.dtype = DType::i64});
  auto train = [&](TwoLayer& m, optim::Adam& opt, optim::StepLR& sched, int steps) {
    for (int i = 0; i < steps; ++i) {
      opt.zero_grad();
      nn::cross_entropy(m(x), y).backward();
      opt.step();
      sched.step();
    }
  };
  manual_seed(9);
  TwoLayer ref;
  optim::Adam ref_opt(ref.parameters(), {.lr = 0.05, .amsgrad = true});
  optim::StepLR ref_sched(ref_opt, {.step_size = 2, .gamma = 0.5});
  train(ref, ref_opt, ref_sched, 3);

  const std::string path = temp_path("resume.safetensors");
  StateDict extra;
  extra.nest("optimizer", ref_opt.state_dict());
  extra.nest("scheduler", ref_sched.state_dict());
  nn::save_checkpoint(path, ref, extra);
  train(ref, ref_opt, ref_sched, 4);

  manual_seed(123);  // a different init, overwritten by the checkpoint
  TwoLayer resumed;
  optim::Adam opt(resumed.parameters(), {.lr = 0.05, .amsgrad = true});
  optim::StepLR sched(opt, {.step_size = 2, .gamma = 0.5});
  nn::Checkpoint ckpt = nn::load_checkpoint(path, resumed);
  opt.load_state_dict(ckpt.extra.nested("optimizer"));
  sched.load_state_dict(ckpt.extra.nested("scheduler"));
  train(resumed, opt, sched, 4);
  CHECK(flat(resumed) == flat(ref));
  CHECK(opt.lr() == ref_opt.lr());
  std::filesystem::remove(path);
}

TEST_CASE("checkpoint: missing, unexpected and mis-shaped keys are reported by name") {
  TwoLayer wide(3);
  const std::string path = temp_path("keys.safetensors");
  nn::save_checkpoint(path, wide);

  TwoLayer narrow(2);
  std::vector<double> before = flat(narrow);
  CHECK_THROWS_WITH_AS(nn::load_checkpoint(path, narrow),
                       doctest::Contains("hidden.weight: checkpoint (3, 4) vs model (2, 4)"), ValueError);
  CHECK(flat(narrow) == before);  // strict: nothing loaded

  nn::Checkpoint ckpt = nn::load_checkpoint(path, narrow, /*strict=*/false);
  CHECK(ckpt.report.mismatched_keys.size() == 3);  // hidden.weight, hidden.bias, out.weight
  CHECK(ckpt.report.missing_keys.empty());

  // Only the output layer saved: the hidden layer is missing; an extra module tensor is unexpected.
  std::map<std::string, Tensor> partial = wide.state_dict();
  partial.erase("hidden.weight");
  partial.erase("hidden.bias");
  partial["decoder.weight"] = zeros({2});
  save_tensors(path, partial);
  CHECK_THROWS_WITH_AS(nn::load_checkpoint(path, wide),
                       doctest::Contains("missing keys (2): hidden.bias hidden.weight; unexpected keys (1): "
                                         "decoder.weight"),
                       ValueError);
  std::filesystem::remove(path);
}

TEST_CASE("checkpoint: every flipped byte and every truncation is a clear error, never a crash") {
  manual_seed(3);
  TwoLayer model;
  const std::string path = temp_path("corrupt_source.safetensors");
  const std::string bad = temp_path("corrupt.safetensors");
  nn::save_checkpoint(path, model, StateDict({{"extra", tensor({1, 2}, {2})}}, {{"epoch", 1}}));
  const std::string bytes = read_file(path);
  const std::vector<double> original = flat(model);

  int errors = 0, harmless = 0;
  // Every byte inverted, and a single-bit flip at every 4th byte (file writes are the slow part).
  for (size_t i = 0; i < bytes.size(); ++i) {
    for (unsigned char mask : {0xFF, 0x01}) {
      if (mask == 0x01 && i % 4 != 0) continue;
      std::string flipped = bytes;
      flipped[i] = static_cast<char>(flipped[i] ^ mask);
      write_bytes(bad, flipped);
      TwoLayer target;
      try {
        nn::load_checkpoint(bad, target);
        // Only a change with no meaning may pass (e.g. one that JSON ignores); the model must
        // then hold exactly the saved values.
        CHECK(flat(target) == original);
        ++harmless;
      } catch (const Error& e) {
        ++errors;
        CHECK(std::string(e.what()).find(bad) != std::string::npos);  // names the file
      }
    }
  }
  INFO(errors << " errors, " << harmless << " harmless flips");
  CHECK(errors > 0);
  CHECK(harmless * 20 < errors);

  for (size_t n = 0; n < bytes.size(); n += n < 16 ? 1 : 3) {  // every cut in the length prefix
    write_bytes(bad, bytes.substr(0, n));
    TwoLayer target;
    CHECK_THROWS_AS(nn::load_checkpoint(bad, target), IOError);
  }
  std::filesystem::remove(path);
  std::filesystem::remove(bad);
}

TEST_CASE("checkpoint: non-finite values are refused on load, naming the file and the tensor") {
  TwoLayer a, b;
  const std::string path = temp_path("nonfinite.safetensors");
  {
    NoGradGuard no_grad;
    a.out.weight.data<float>()[3] = std::numeric_limits<float>::infinity();
  }
  // a valid checksum over the bad value: only the finiteness check stands between it and the model
  nn::save_checkpoint(path, a, {{"optim.exp_avg", tensor({1.0, std::nan("")}, {2})}});
  std::vector<double> before = flat(b);
  CHECK_THROWS_WITH_AS(nn::load_checkpoint(path, b), doctest::Contains((path + ": tensor 'optim.exp_avg' (2,) holds 1 "
                                                                        "non-finite value(s), the first nan at flat "
                                                                        "index 1").c_str()), IOError);
  CHECK(flat(b) == before);  // nothing was loaded
  nn::save_checkpoint(path, a);
  CHECK_THROWS_WITH_AS(nn::load_checkpoint(path, b), doctest::Contains("tensor 'out.weight' (2, 3) holds 1 non-finite "
                                                                       "value(s), the first inf at flat index 3"),
                       IOError);
  std::filesystem::remove(path);
}
