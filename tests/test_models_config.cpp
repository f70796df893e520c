// The translator's config tables: the run's (models/seq2seq/config.h), the model's (model_config.h)
// and the decode options' (decode_options.h). Every field round-trips through JSON, every range is
// enforced by validate() with the field named, config files take any subset of the fields, and
// unknown keys, wrong types and hostile nesting are clear errors.
#include <doctest/doctest.h>

#include <fstream>
#include <functional>
#include <set>

#include "core/json.h"
#include "models/seq2seq/config.h"
#include "models/seq2seq/decode_options.h"
#include "models/text/subword.h"
#include "temp_dir.h"

using namespace seqgrad;
using models::ConfigError;
using models::TrainConfig;

namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// A preset as this build can run it: without SentencePiece, validate() refuses subword
// vocabularies (tested below), so the presets that use one (and share it) fall back to words here.
TrainConfig buildable_preset(const std::string& name) {
  TrainConfig c = models::preset(name);
  if (!text::subword_supported() && c.vocab != "word") c.vocab = "word", c.joint_vocab = false;
  return c;
}

}  // namespace

TEST_CASE("config: every preset round-trips through JSON, field by field") {
  for (const std::string& name : models::preset_names()) {
    CAPTURE(name);
    TrainConfig c = buildable_preset(name);
    c.model.src_vocab = 100, c.model.tgt_vocab = c.model.tie_embeddings ? 100 : 90;  // a checkpoint's config
    nlohmann::json j = c.to_json();
    TrainConfig back = TrainConfig::from_json(j);
    CHECK(back.to_json() == j);
    for (const models::ConfigField& f : models::config_fields()) {
      if (f.key.starts_with("files.")) continue;  // only the user's corpus writes files
      CAPTURE(f.key);
      CHECK(f.get(back) == f.get(c));
    }
  }
}

TEST_CASE("config: the table's keys are JSON's keys, each declared once") {
  TrainConfig c = models::preset("default");
  c.corpus = "files";  // so that files.* are written too
  const std::string dump = c.to_json().dump();
  std::set<std::string> keys, flags;
  for (const models::ConfigField& f : models::config_fields()) {
    CAPTURE(f.key);
    CHECK(keys.insert(f.key).second);
    CHECK((f.flag.empty() || flags.insert(f.flag).second));
    CHECK(dump.find('"' + f.key.substr(f.key.rfind('.') + 1) + '"') != std::string::npos);
    CHECK(models::find_config_field(f.key) == &f);
  }
}

TEST_CASE("config: validate() names the field and its range") {
  struct Bad {
    const char* key;
    nlohmann::json value;
    const char* message;
  };
  for (const Bad& bad : std::vector<Bad>{
           {"epochs", 0, "config field epochs = 0 must be >= 1"},
           {"lr", -0.5, "config field lr = -0.5 must be > 0"},
           {"gamma", 1.5, "config field gamma = 1.5 must be in (0, 1]"},
           {"label_smoothing", 1.25, "config field label_smoothing = 1.25 must be in [0, 1]"},
           {"clip", 0.0, "config field clip = 0.0 must be > 0"},
           {"batch_size", 0, "config field batch_size = 0 must be in [1, 1048576]"},
           {"max_tokens", 0, "config field max_tokens = 0 must be in [1, 1048576]"},
           {"model.dropout", 1.0, "config field model.dropout = 1.0 must be in [0, 1)"},
           {"model.hidden_size", 0, "config field model.hidden_size = 0 must be in [1, 1048576]"},
           {"model.num_layers", 65, "config field model.num_layers = 65 must be in [1, 64]"},
           {"shuffle_buffer", 0, "config field shuffle_buffer = 0 must be >= 1"},
           {"patience", -1, "config field patience = -1 must be >= 0"},
           {"batch_tokens", -1, "config field batch_tokens = -1 must be >= 0"},
           {"valid_every", -1, "config field valid_every = -1 must be >= 0"},
           {"early_stopping_metric", "bleu",
            "config field early_stopping_metric = \"bleu\" must be one of: sacrebleu, chrf, loss"},
           {"keep_checkpoints", 1001, "config field keep_checkpoints = 1001 must be in [0, 1000]"},
           {"accum_steps", 0, "config field accum_steps = 0 must be in [1, 4096]"},
           {"warmup_updates", -1, "config field warmup_updates = -1 must be >= 0"},
           {"vocab", "spm:", "config field vocab = \"spm:\" must name a SentencePiece model file after spm:"},
       }) {
    CAPTURE(bad.key);
    TrainConfig c = models::preset("d2l");
    models::find_config_field(bad.key)->set(c, bad.value);
    CHECK(error_of([&] { c.validate(); }) == bad.message);
    CHECK_THROWS_AS(c.validate(), ConfigError);
  }
  TrainConfig c = models::preset("d2l");
  c.tgt_lang = c.src_lang;
  CHECK(error_of([&] { c.validate(); }).find("config field tgt_lang = \"en\" must differ from src_lang") == 0);
  c = models::preset("d2l");
  c.joint_vocab = true;
  CHECK(error_of([&] { c.validate(); }).find("config field joint_vocab = true shares one subword model") == 0);
  // a subword vocabulary is valid exactly where the build can train one
  c = models::preset("d2l");
  c.vocab = "unigram:4000";
  if (text::subword_supported())
    CHECK_NOTHROW(c.validate());
  else
    CHECK(error_of([&] { c.validate(); }) ==
          "config field vocab = \"unigram:4000\" this build has no SentencePiece support (install "
          "libsentencepiece-dev and reconfigure with -Dsentencepiece=enabled), or use vocab word");
}

TEST_CASE("config: JSON of the wrong type, unknown keys and missing fields are errors naming the key") {
  nlohmann::json j = models::preset("d2l").to_json();
  j["model"]["hidden_size"] = 1e300;  // nlohmann would convert it to int64 with undefined behaviour
  CHECK(error_of([&] { TrainConfig::from_json(j); }) == "config field model.hidden_size = 1e+300 must be an integer");
  j = models::preset("d2l").to_json();
  j["amp"] = "fp32";
  CHECK(error_of([&] { TrainConfig::from_json(j); }) ==
        "config field amp = \"fp32\" must be one of: off, bf16, fp16");
  j = models::preset("d2l").to_json();
  j["epoch"] = 3;
  CHECK(error_of([&] { TrainConfig::from_json(j); }) ==
        "config field epoch is not a field of the translator's config (did you mean epochs?)");
  j = models::preset("d2l").to_json();
  j["model"]["hiden_size"] = 8;
  CHECK(error_of([&] { TrainConfig::from_json(j); }).find("(did you mean model.hidden_size?)") != std::string::npos);
  j = models::preset("d2l").to_json();
  j.erase("lr");
  CHECK(error_of([&] { TrainConfig::from_json(j); }) == "config field lr is missing (every config seqgrad writes has it)");
  TrainConfig sized = models::preset("d2l");
  sized.model.src_vocab = 50, sized.model.tgt_vocab = 60;
  j = sized.to_json();
  j.erase("amp"), j.erase("vocab");  // written by later versions: a checkpoint from before has them not
  for (const char* key : {"accum_steps", "valid_every", "patience", "early_stopping_metric", "keep_checkpoints",
                          "init_from", "batch_tokens"})
    j.erase(key);
  CHECK(TrainConfig::from_json(j).amp == GemmPrecision::full);
  CHECK(TrainConfig::from_json(j).patience == 0);  // an old run had no early stopping
  CHECK(TrainConfig::from_json(j).accum_steps == 1);
  CHECK(TrainConfig::from_json(j).batch_tokens == 0);  // sentence batches, as before
  j = models::preset("d2l").to_json();
  j["seed"] = -1;
  CHECK(error_of([&] { TrainConfig::from_json(j); }) == "config field seed = -1 must be an integer >= 0");
}

TEST_CASE("config: lr_schedule is step (per epoch) by default, or inverse_sqrt with its warmup_updates") {
  // every preset before the field keeps the step schedule, so every run and result before it is
  // unchanged; the transformer preset warms up (inverse_sqrt, 800 updates)
  for (const std::string& name : models::preset_names()) {
    CAPTURE(name);
    const bool transformer = name == "transformer";
    CHECK(models::preset(name).lr_schedule == (transformer ? models::LRSchedule::inverse_sqrt : models::LRSchedule::step));
    CHECK(models::preset(name).warmup_updates == (transformer ? 800 : 0));
  }
  TrainConfig c = models::preset("d2l");
  c.lr_schedule = models::LRSchedule::inverse_sqrt, c.warmup_updates = 4000;
  c.model.src_vocab = 100, c.model.tgt_vocab = 90;
  nlohmann::json j = c.to_json();
  CHECK(j["lr_schedule"] == "inverse_sqrt");
  CHECK(j["warmup_updates"] == 4000);
  TrainConfig back = TrainConfig::from_json(j);
  CHECK(back.lr_schedule == models::LRSchedule::inverse_sqrt);
  CHECK(back.warmup_updates == 4000);
  CHECK(back.to_json() == j);
  // a checkpoint from before the fields has neither: it trained with the step schedule
  j.erase("lr_schedule"), j.erase("warmup_updates");
  CHECK(TrainConfig::from_json(j).lr_schedule == models::LRSchedule::step);
  CHECK(TrainConfig::from_json(j).warmup_updates == 0);
  // the schedule's name, and warmup_updates only with (and always with) inverse_sqrt
  j = c.to_json();
  j["lr_schedule"] = "noam";
  CHECK(error_of([&] { TrainConfig::from_json(j); }) ==
        "config field lr_schedule = \"noam\" must be one of: step, inverse_sqrt");
  c.warmup_updates = 0;
  CHECK(error_of([&] { c.validate(); }) ==
        "config field warmup_updates = 0 must be >= 1 with lr_schedule inverse_sqrt (the optimizer updates of its "
        "linear warmup; fairseq's default is 4000)");
  c.lr_schedule = models::LRSchedule::step;
  CHECK_NOTHROW(c.validate());
  c.warmup_updates = 100;
  CHECK(error_of([&] { c.validate(); }) ==
        "config field warmup_updates = 100 needs lr_schedule inverse_sqrt (the step schedule has no warmup: 0 there)");
  CHECK_THROWS_AS(c.validate(), ConfigError);
}

TEST_CASE("config: a config file takes any subset of the fields over its preset") {
  seqgrad::testing::TempDir dir;
  auto write = [&](const std::string& text) {
    std::string path = (dir.path / "run.json").string();
    std::ofstream(path) << text;
    return path;
  };
  TrainConfig c = models::read_config_file(write(R"({"preset": "d2l", "lr": 0.01, "model": {"hidden_size": 48}})"));
  TrainConfig expected = models::preset("d2l");
  expected.lr = 0.01, expected.model.hidden_size = 48;
  CHECK(c.to_json() == expected.to_json());
  // the caller's preset (--preset) wins over the file's
  CHECK(models::read_config_file(write(R"({"preset": "d2l", "epochs": 3})"), "tiny").preset == "tiny");
  // what --print-config writes is valid input, and reads back the same
  TrainConfig seed = buildable_preset("seed");
  CHECK(models::read_config_file(write(seed.to_json().dump(2))).to_json() == seed.to_json());
  std::string path = write(R"({"preset": "d2l", "lr": -0.5})");
  CHECK(error_of([&] { models::read_config_file(path); }) ==
        "config file " + path + ": config field lr = -0.5 must be > 0");
  path = write(R"({"preset": "d2l", "dropuot": 0.1})");
  CHECK(error_of([&] { models::read_config_file(path); }).find("config field dropuot is not a field") !=
        std::string::npos);
  path = write(R"({"preset": "d2l", "lr": )");
  CHECK(error_of([&] { models::read_config_file(path); }).find("config file " + path + ": not valid JSON") == 0);
  // nesting deeper than kMaxJsonDepth is refused while parsing, before anything recurses over it
  path = write(std::string(200000, '[') + std::string(200000, ']'));
  CHECK(error_of([&] { models::read_config_file(path); }) ==
        fmt::format("config file {}: JSON nested deeper than {} levels", path, kMaxJsonDepth));
}

TEST_CASE("config: json_preview never recurses into a value and bounds strings") {
  nlohmann::json deep = parse_json("[[[[1]]]]", "test");
  CHECK(json_preview(deep) == "an array of 1 item");
  CHECK(json_preview(nlohmann::json::object({{"a", 1}, {"b", 2}})) == "an object of 2 keys");
  CHECK(json_preview(std::string(100, 'x'), 5) == "\"xxxxx\"... (100 bytes)");
  CHECK(json_preview(3) == "3");
}

// ---- the model's table (models/seq2seq/model_config.h)

TEST_CASE("model config: its table is the run's model.* rows, and its JSON the run's \"model\" object") {
  size_t model_rows = 0;
  for (const models::ConfigField& f : models::config_fields()) model_rows += f.key.starts_with("model.");
  CHECK(model_rows == models::model_fields().size());
  TrainConfig run = models::preset("transformer");
  run.model.src_vocab = run.model.tgt_vocab = 100;
  for (const models::ModelField& m : models::model_fields()) {
    CAPTURE(m.key);
    const models::ConfigField* f = models::find_config_field(m.key);
    REQUIRE(f != nullptr);
    CHECK(f->flag == m.flag);
    CHECK(f->get(run) == m.get(run.model));
    // the run's help says which architecture reads a field only one of them has
    if (m.architectures.size() == 1)
      CHECK(f->help == models::architecture_name(m.architectures[0]) + std::string(": ") + m.help);
    else
      CHECK(f->help == m.help);
  }
  CHECK(models::find_config_field("model.heads")->help.starts_with("transformer: attention heads"));
  CHECK(models::find_config_field("model.attention")->help.starts_with("gru: attention: additive"));
  CHECK(run.model.to_json() == run.to_json()["model"]);
  CHECK(models::Seq2SeqConfig::from_json(run.model.to_json()).to_json() == run.model.to_json());
}

TEST_CASE("model config: the JSON checkpoints hold reads back, and one written before the Transformer is a GRU's") {
  // the "model" object as checkpoints have held it since the Transformer (the hand-written to_json
  // this table replaced wrote these keys and values)
  const nlohmann::json today = nlohmann::json::parse(R"({"src_vocab": 50, "tgt_vocab": 60, "embed_size": 32,
      "hidden_size": 48, "num_layers": 2, "attention_size": 0, "dropout": 0.1, "attention": "scaled_dot",
      "deep_output": false, "pad_id": 0, "architecture": "gru", "heads": 4, "ffn_size": 0, "norm_first": true,
      "tie_embeddings": false, "positional": "sinusoidal"})");
  const models::Seq2SeqConfig c = models::Seq2SeqConfig::from_json(today);
  CHECK(c.hidden_size == 48);
  CHECK(c.attention == models::AttentionKind::scaled_dot);
  CHECK_FALSE(c.deep_output);
  CHECK(c.to_json() == today);
  // before the Transformer: no architecture and none of its fields
  nlohmann::json before = today;
  for (const char* key : {"architecture", "heads", "ffn_size", "norm_first", "tie_embeddings", "positional"})
    before.erase(key);
  const models::Seq2SeqConfig old = models::Seq2SeqConfig::from_json(before);
  CHECK(old.architecture == models::Architecture::gru);
  CHECK(old.heads == 4);
  CHECK(old.to_json() == today);
  // a field every version wrote may not be missing; unknown keys and wrong types name the field
  nlohmann::json j = today;
  j.erase("hidden_size");
  CHECK(error_of([&] { models::Seq2SeqConfig::from_json(j); }) ==
        "config field model.hidden_size is missing (every config seqgrad writes has it)");
  j = today;
  j["hiden_size"] = 8;
  CHECK(error_of([&] { models::Seq2SeqConfig::from_json(j); }) ==
        "config field model.hiden_size is not a field of the model's config (did you mean hidden_size?)");
  j = today;
  j["heads"] = "four";
  CHECK(error_of([&] { models::Seq2SeqConfig::from_json(j); }) == "config field model.heads = \"four\" must be an integer");
  j = today;
  j["architecture"] = "lstm";
  CHECK(error_of([&] { models::Seq2SeqConfig::from_json(j); }) ==
        "config field model.architecture = \"lstm\" must be one of: gru, transformer");
  CHECK(error_of([&] { models::Seq2SeqConfig::from_json(nlohmann::json::array()); }) ==
        "config field model = an array of 0 items must be an object");
}

TEST_CASE("model config: validate() names the field: its range, and the fields against each other") {
  struct Bad {
    void (*edit)(models::Seq2SeqConfig&);
    const char* message;
  };
  for (const Bad& bad : std::vector<Bad>{
           {[](models::Seq2SeqConfig& c) { c.heads = 0; }, "config field model.heads = 0 must be in [1, 1024]"},
           {[](models::Seq2SeqConfig& c) { c.dropout = 1; }, "config field model.dropout = 1.0 must be in [0, 1)"},
           {[](models::Seq2SeqConfig& c) { c.tgt_vocab = 4; },
            "config field model.tgt_vocab = 4 must be > 4 (a vocabulary holds the 4 special tokens, and words)"},
           {[](models::Seq2SeqConfig& c) { c.architecture = models::Architecture::transformer, c.heads = 5; },
            "config field model.heads = 5 must divide model.hidden_size = 16 (the width each head gets)"},
           {[](models::Seq2SeqConfig& c) { c.architecture = models::Architecture::transformer, c.embed_size = 8; },
            "config field model.embed_size = 8 must equal model.hidden_size = 16 (the embeddings are the "
            "Transformer's width)"},
           {[](models::Seq2SeqConfig& c) {
              c.architecture = models::Architecture::transformer, c.embed_size = c.hidden_size = 15, c.heads = 5;
            },
            "config field model.hidden_size = 15 must be even for sinusoidal positions (sine and cosine pairs)"},
       }) {
    models::Seq2SeqConfig c{.src_vocab = 20, .tgt_vocab = 20, .embed_size = 16, .hidden_size = 16, .num_layers = 1};
    CHECK_NOTHROW(c.validate());
    bad.edit(c);
    CHECK(error_of([&] { c.validate(); }) == bad.message);
    CHECK_THROWS_AS(c.validate(), ConfigError);
  }
  // a GRU reads none of the Transformer's consistency rules: heads that do not divide are its default's business
  models::Seq2SeqConfig gru{.src_vocab = 20, .tgt_vocab = 20, .embed_size = 8, .hidden_size = 18, .num_layers = 1};
  gru.heads = 4;
  CHECK_NOTHROW(gru.validate());
}

// ---- the decode options' table (models/seq2seq/decode_options.h)

TEST_CASE("decode options: one row per option, each name once, the defaults --help shows the struct's") {
  std::set<std::string> keys, flags, members;
  for (const models::DecodeField& f : models::decode_fields()) {
    CAPTURE(f.key);
    CHECK(keys.insert(f.key).second);
    CHECK(flags.insert(f.flag).second);
    CHECK(members.insert(f.member).second);
    CHECK(&models::decode_field(f.key) == &f);
    // every search option works for both architectures (the Transformer's steps return attention rows)
    CHECK(f.supports(models::Architecture::gru));
    CHECK(f.supports(models::Architecture::transformer));
    CHECK(f.in_requests() == (f.scope != models::DecodeScope::sampling));
    if (f.default_text.empty()) continue;
    models::DecodeOptions defaults;
    defaults.sampling = models::SamplingOptions{};  // so that the sampling options have their value
    const nlohmann::json v = f.get(defaults);
    if (f.type == models::FieldType::text) CHECK(v == f.default_text);
    else CHECK(v.get<double>() == std::stod(f.default_text));
  }
  CHECK(models::decode_field("beam").member == "beam_size");
  CHECK(models::decode_field("length_penalty_type").flag == "length-penalty-type");
  CHECK(error_of([] { models::decode_field("beem"); }) == "decode_field: no decoding option has the key 'beem'");
}

TEST_CASE("decode options: one range per option, checked by the rows and by validate()") {
  const models::DecodeField& penalty = models::decode_field("length_penalty");
  CHECK(penalty.check(10.0) == "");
  CHECK(penalty.check(10.5) == "must be in [0, 10]");
  CHECK(penalty.check(-1) == "must be in [0, 10]");
  CHECK(penalty.check("1") == "must be a number");
  CHECK(models::decode_field("coverage_penalty").check(-0.5) == "must be in [0, 10]");
  CHECK(models::decode_field("beam").check(0) == "must be >= 1");
  CHECK(models::decode_field("beam").check(2.5) == "must be an integer");
  CHECK(models::decode_field("length_penalty_type").check("wu") == "must be one of: power, gnmt");
  CHECK(models::decode_field("temperature").check(0.0) == "must be > 0");
  const models::DecodeField& sample = models::decode_field("sample");
  for (const char* bad : {"topk:0", "topk:1.5", "topp:0", "topp:1.5", "nucleus", "topk:"})
    CHECK(sample.check(bad) == "expects topk:K (K >= 1) or topp:P (0 < P <= 1)");
  models::DecodeOptions o;
  sample.set(o, "topp:0.9");
  REQUIRE(o.sampling);
  CHECK(o.sampling->top_p == 0.9);
  CHECK(o.sampling->top_k == 0);
  // the library refuses what the front ends refuse, naming the member
  struct Bad {
    void (*edit)(models::DecodeOptions&);
    const char* message;
  };
  for (const Bad& bad : std::vector<Bad>{
           {[](models::DecodeOptions& d) { d.length_penalty = 10.5; }, "DecodeOptions: length_penalty 10.5 must be in [0, 10]"},
           {[](models::DecodeOptions& d) { d.coverage_penalty = -1; },
            "DecodeOptions: coverage_penalty -1.0 must be in [0, 10]"},
           {[](models::DecodeOptions& d) { d.beam_size = 0; }, "DecodeOptions: beam_size 0 must be >= 1"},
           {[](models::DecodeOptions& d) { d.min_len = 60; }, "DecodeOptions: min_len 60 must be in [0, max_len 50]"},
           {[](models::DecodeOptions& d) { d.sampling = models::SamplingOptions{.temperature = 0}; },
            "DecodeOptions: sampling.temperature 0.0 must be > 0"},
           {[](models::DecodeOptions& d) { d.sampling = models::SamplingOptions{.top_p = 1.5}; },
            "DecodeOptions: sampling.top_p 1.5 must be in (0, 1]"},
       }) {
    models::DecodeOptions d;
    CHECK_NOTHROW(d.validate());
    bad.edit(d);
    CHECK(error_of([&] { d.validate(); }) == bad.message);
  }
}

TEST_CASE("decode options: their JSON is every option that applies, keyed as requests key them") {
  models::DecodeOptions o{.max_len = 30, .beam_size = 4, .length_penalty = 0.6,
                          .length_penalty_kind = models::LengthPenalty::gnmt, .coverage_penalty = 0.2, .nbest = 2};
  CHECK(models::decode_options_json(o) == nlohmann::json{{"beam", 4}, {"nbest", 2}, {"max_len", 30}, {"min_len", 0},
                                                         {"length_penalty", 0.6}, {"length_penalty_type", "gnmt"},
                                                         {"coverage_penalty", 0.2}});
  models::DecodeOptions sampled{.sampling = models::SamplingOptions{.top_k = 5, .temperature = 0.7, .seed = 3}};
  const nlohmann::json j = models::decode_options_json(sampled);
  CHECK(j["sample"] == "topk:5");
  CHECK(j["temperature"] == 0.7);
  CHECK(j["seed"] == 3);
  // each value sets back through its row
  models::DecodeOptions back;
  for (const models::DecodeField& f : models::decode_fields())
    if (j.contains(f.key)) f.set(back, j[f.key]);
  CHECK(models::decode_options_json(back) == j);
}
