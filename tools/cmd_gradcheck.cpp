// `seqgrad gradcheck`: runs op-table rows from the command line, one line per row: the in-tree
// table (tools/op_cases.cpp) or the rows of your own op from a plugin (--plugin; see
// docs/adding-an-op.md), with every check the tests run (tools/op_cases.h: check_op_case).
#include <chrono>
#include <cerrno>
#include <cstring>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "core/threads.h"
#include "tools/args.h"
#include "tools/commands.h"
#include "tools/gradcheck.h"
#include "tools/op_cases.h"

namespace {

namespace oc = seqgrad::op_cases;
using seqgrad::UsageError;
using nlohmann::json;

constexpr const char* kSummary = R"(Checks op-table rows: the in-tree table, or your own op's rows from --plugin. Per row:
  gradcheck       central differences vs autograd (float64; --dtype float32 or bf16), outputs
                  reduced with fixed random weights; each invariant on its own line: gradient
                  shapes and dtypes, backward twice -> the same gradients, zero grad_output ->
                  zero gradients, inputs unchanged by forward and backward
  second order    the same for the first-order gradients, where the row allows
  float32         float32 and float64 agree on values and gradients, where the row allows
  error rows      the bad call throws the right Error subclass with the expected words
  golden rows     non-differentiable ops give known values
ROW is an op name (matmul) or one row (matmul/batched_broadcast); none selects every row.
Inputs avoid the kinks the row declares and use its layouts (transposed, sliced, offset); a
failing element is differenced again at half the step, which tells a kink (the jump between
its one-sided slopes stays) from curvature (it halves): a confirmed kink is reported, not
failed, in a row that declares kinks, and fails a row that declares none (--move-kinks moves
it and checks again). Ops that draw random numbers see the same draws in
every evaluation. A failing gradcheck prints its report with the worst elements and the command
that reruns the row alone (docs/adding-an-op.md: how to read it).
Exit status: 0 when every selected row passes, 1 when one fails, 2 for a usage error.)";

struct Settings {
  oc::CheckOptions check;
  std::vector<std::string> rerun;  // the options that shape a row's result, as given: the rerun command's
  bool json = false;      // --json: the JSON document on stdout instead of the text
  std::string out_file;   // --out-file: the JSON document written there too
};

double parse_positive(const seqgrad::tools::Args& args, const char* name) {
  double v = args.get_double(name);
  SG_CHECK_USAGE(v > 0, "--{} must be positive, got {}", name, args.get(name));
  return v;
}

Settings read_settings(const seqgrad::tools::Args& args) {
  Settings s;
  SG_CHECK_USAGE(!(args.flag("fast") && args.flag("compress")), "--fast and --compress exclude each other: "
                 "--fast samples the Jacobian, --compress checks all of it where a row declares its sparsity");
  if (args.flag("fast")) s.check.mode = seqgrad::GradcheckMode::fast;
  if (args.flag("compress")) s.check.mode = seqgrad::GradcheckMode::compressed;
  std::string dtype = args.get("dtype");
  SG_CHECK_USAGE(dtype == "float64" || dtype == "float32" || dtype == "bf16",
                 "--dtype must be float64, float32 or bf16, got '{}'", dtype);
  s.check.precision = dtype == "float32" ? seqgrad::GradcheckPrecision::f32
                      : dtype == "bf16"  ? seqgrad::GradcheckPrecision::bf16
                                         : seqgrad::GradcheckPrecision::f64;
  s.check.move_kinks = args.flag("move-kinks");
  if (args.has("eps")) s.check.eps = parse_positive(args, "eps");
  if (args.has("atol")) s.check.atol = parse_positive(args, "atol");
  if (args.has("rtol")) s.check.rtol = parse_positive(args, "rtol");
  if (args.has("seed")) s.check.seed = static_cast<uint64_t>(args.get_int("seed", 0));
  if (args.has("threads")) seqgrad::set_num_threads(args.get_threads());
  s.check.second_order = !args.flag("no-second-order");
  s.check.float32_agreement = !args.flag("no-float32");
  s.json = args.flag("json");
  for (const char* name : {"plugin", "dtype", "eps", "atol", "rtol", "seed"})
    if (args.has(name) && !(std::string(name) == "dtype" && dtype == "float64"))
      s.rerun.insert(s.rerun.end(), {fmt::format("--{}", name), args.get(name)});
  for (const char* name : {"fast", "compress", "no-second-order", "no-float32", "move-kinks"})
    if (args.flag(name)) s.rerun.push_back(fmt::format("--{}", name));
  if (args.has("out-file")) s.out_file = args.get("out-file");
  return s;
}

std::string pad(const std::string& s, size_t width) { return s.size() >= width ? s : s + std::string(width - s.size(), ' '); }

bool selected(const std::vector<std::string>& patterns, const std::string& op, const std::string& name) {
  if (patterns.empty()) return true;
  for (const std::string& p : patterns)
    if (oc::matches(p, op, name)) return true;
  return false;
}

// Every pattern must select something: a typo should not pass silently.
void check_patterns(const oc::OpCaseRegistry& table, const std::vector<std::string>& patterns, const std::string& source,
                    bool plugin) {
  std::vector<std::string> names = table.op_names();
  for (const std::string& p : patterns) {
    bool found = false;
    for (const oc::OpCase& r : table.op_cases()) found = found || oc::matches(p, r.op, r.name());
    for (const oc::ErrorCase& r : table.error_cases()) found = found || oc::matches(p, r.op, r.name());
    for (const oc::GoldenCase& r : table.golden_cases()) found = found || oc::matches(p, r.op, r.name());
    SG_CHECK_USAGE(found, "no op or row named '{}' in {}{}; its ops: {} (--list lists every row){}", p, source,
                   seqgrad::did_you_mean(p, names), fmt::join(names, ", "),
                   plugin ? "" : ". To check an op of your own, build its rows into a plugin and pass --plugin "
                                 "(docs/adding-an-op.md)");
  }
}

void list_rows(const oc::OpCaseRegistry& table, const std::string& source) {
  fmt::print("{}: {} rows\n", source, table.size());
  fmt::print("ops ({}):\n", table.op_names().size());
  std::string line;
  for (const std::string& op : table.op_names()) {
    if (!line.empty() && line.size() + op.size() > 96) {
      fmt::print("  {}\n", line);
      line.clear();
    }
    if (!line.empty()) line += ' ';
    line += op;
  }
  if (!line.empty()) fmt::print("  {}\n", line);
  fmt::print("gradcheck rows ({}):\n", table.op_cases().size());
  for (const oc::OpCase& row : table.op_cases()) {
    std::string notes;
    if (!row.gradgrad()) notes += "  (first order only)";
    if (row.jacobian.kind == seqgrad::Jacobian::Kind::elementwise) notes += "  (elementwise)";
    if (row.jacobian.kind == seqgrad::Jacobian::Kind::rowwise) notes += fmt::format("  (rowwise, dim {})", row.jacobian.dim);
    fmt::print("  {}{}\n", row.name(), notes);
  }
  fmt::print("error rows ({}):\n", table.error_cases().size());
  for (const oc::ErrorCase& row : table.error_cases()) fmt::print("  {}\n", row.name());
  fmt::print("golden rows ({}):\n", table.golden_cases().size());
  for (const oc::GoldenCase& row : table.golden_cases()) fmt::print("  {}\n", row.name());
}

// A word the shell reads back as itself: quoted unless it is plain.
std::string shell_word(const std::string& s) {
  bool plain = !s.empty() && s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./=:+-,"
                                                 "@%") == std::string::npos;
  if (plain) return s;
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// The command that checks one row alone, with every option that shapes its result.
std::string rerun_command(const Settings& settings, const std::string& row) {
  std::string cmd = "seqgrad gradcheck";
  for (const std::string& word : settings.rerun) cmd.append(" ").append(shell_word(word));
  return cmd.append(" ").append(shell_word(row));
}

std::string indent(const std::string& text) {
  std::string out;
  for (size_t start = 0; start < text.size();) {
    size_t end = std::min(text.find('\n', start), text.size());
    out += "      " + text.substr(start, end - start) + "\n";
    start = end + 1;
  }
  return out;
}

// One line per row: status, name, then what was checked.
std::string summary_line(const oc::RowResult& r) {
  if (!r.skipped.empty()) return fmt::format("skip  {}  {}\n", pad(r.name, 34), r.skipped);
  std::string what;
  if (r.kind == oc::RowKind::gradcheck && !r.ok) {
    what = r.headline();  // the failed check and its cause; the report below has the rest
  } else if (r.kind == oc::RowKind::gradcheck) {
    what = fmt::format("max abs {:8.2e}  max rel {:8.2e}  ", r.first.max_abs_err(), r.first.max_rel_err());
    if (int kinks = r.first.kinks() + r.second.kinks()) what += fmt::format("{} at kinks  ", kinks);
    if (size_t moved = r.first.moved.size() + r.second.moved.size()) what += fmt::format("{} moved  ", moved);
    what += r.second_ran ? fmt::format("2nd order: max abs {:8.2e}  ", r.second.max_abs_err()) : "2nd order: skipped  ";
    what += fmt::format("float32: {}", !r.float32.ran ? "skipped" : r.float32.ok ? "ok" : "FAIL");
  } else if (r.kind == oc::RowKind::error) {
    what = "error row";
  } else {
    what = "golden row";
  }
  return fmt::format("{}  {}  {}  {:6.3f}s\n", r.ok ? "ok  " : "FAIL", pad(r.name, 34), what, r.seconds);
}

json check_json(const seqgrad::GradcheckCheck& c) {
  return {{"name", c.name}, {"ok", c.ok}, {"ran", c.ran}, {"detail", c.detail}};
}

json report_json(const seqgrad::GradcheckReport& r) {
  json checks = json::array(), inputs = json::array();
  for (const seqgrad::GradcheckCheck& c : r.checks) checks.push_back(check_json(c));
  for (const seqgrad::GradcheckInput& in : r.inputs) {
    json worst = json::array();
    for (const seqgrad::GradcheckElement& e : in.worst)
      worst.push_back({{"index", e.index}, {"value", e.value}, {"numerical", e.numerical},
                       {"analytical", e.analytical}, {"abs_err", e.abs_err}, {"rel_err", e.rel_err},
                       {"tolerance", e.tolerance}, {"refined", e.refined}});
    json kinks = json::array();
    for (const seqgrad::GradcheckElement& e : in.kinks)
      kinks.push_back({{"index", e.index}, {"value", e.value}, {"left", e.left}, {"right", e.right},
                       {"analytical", e.analytical}, {"declared", e.declared}});
    inputs.push_back({{"input", in.input}, {"label", in.label}, {"output", in.output}, {"projections", in.projections}, {"shape", fmt::format("{}", in.shape)},
                      {"method", seqgrad::mode_name(in.method)}, {"failed_elements", in.failed_elements},
                      {"max_abs_err", in.max_abs_err}, {"max_rel_err", in.max_rel_err}, {"worst", worst},
                      {"kinks", kinks}});
  }
  return {{"ok", r.ok()}, {"headline", r.headline()}, {"max_abs_err", r.max_abs_err()}, {"max_rel_err", r.max_rel_err()},
          {"precision", seqgrad::precision_name(r.precision)}, {"eps", r.eps}, {"atol", r.atol}, {"rtol", r.rtol},
          {"forwards", r.forwards}, {"backwards", r.backwards}, {"checks", checks}, {"inputs", inputs},
          {"failures", r.failures}, {"moved", r.moved}};
}

json row_json(const oc::RowResult& r, const Settings& settings) {
  json j = {{"name", r.name}, {"kind", oc::row_kind_name(r.kind)}, {"ok", r.ok}, {"seconds", r.seconds},
            {"rerun", rerun_command(settings, r.name)}};
  if (!r.problem.empty()) j["problem"] = r.problem;
  if (!r.skipped.empty()) j["skipped"] = r.skipped;
  if (r.kind != oc::RowKind::gradcheck) return j;
  if (!r.first.checks.empty()) j["first_order"] = report_json(r.first);
  if (r.second_ran) j["second_order"] = report_json(r.second);
  j["float32"] = check_json(r.float32);
  return j;
}

void write_json(const std::string& path, const json& doc) {
  std::ofstream out(path);
  SG_CHECK_IO(out.good(), "--out-file: cannot write '{}': {}", path, std::strerror(errno));
  out << doc.dump(2) << "\n";
  SG_CHECK_IO(out.good(), "--out-file: writing '{}' failed: {}", path, std::strerror(errno));
}

}  // namespace

int gradcheck_main(int argc, char** argv) {
  seqgrad::tools::Args args("gradcheck", kSummary);
  args.positional("ROW", "an op name or op/variant; none: every row")
      .option("plugin", "lib.so", "check the rows this shared library registers (SG_REGISTER_OP_CASES) instead of the "
              "in-tree table")
      .option("list", "", "list every registered row (the in-tree table's, and --plugin's), then exit")
      .option("fast", "", "fast mode: random projections vᵀJu per (input, output) instead of the full Jacobian, as many "
              "as miss one element wrong by its gradient's rms with probability 1e-6 (float64) or 1e-3 (float32, bf16)")
      .option("compress", "", "full Jacobian, perturbing independent columns together where a row declares sparsity (the declaration verified first)")
      .option("eps", "x", "central-difference step (default: the row's, 1e-6)")
      .option("atol", "x", "absolute tolerance (default: the row's, 1e-5)")
      .option("rtol", "x", "relative tolerance (default: the row's, 1e-3)")
      .option("seed", "n", "random seed of the output weights and projections (default: 24301)")
      .option("threads", "n", "threads (default: all cores)")
      .option("dtype", "float64|float32|bf16", "the precision gradcheck runs in, each with its own step and "
              "tolerances (float32: eps 1e-2, atol 1e-3, rtol 1e-2; bf16: bfloat16 inputs and steps under bf16 "
              "autocast, eps 0.125 (relative past 1), atol 0.01, rtol 0.01; a row's looser values stay)", "float64")
      .option("move-kinks", "", "move input elements confirmed at a non-differentiable point 0.1 up and check again there")
      .option("no-second-order", "", "skip the second-order checks")
      .option("no-float32", "", "skip the float32-vs-float64 agreement checks")
      .option("json", "", "every row's result as one JSON document on stdout, instead of the text")
      .option("out-file", "file", "also write that JSON document to this file");
  if (!args.parse(argc, argv)) return 0;
  Settings settings = seqgrad::tools::checking_flags([&] { return read_settings(args); });

  oc::OpCaseRegistry plugin_rows;
  const oc::OpCaseRegistry* table = &oc::builtin_registry();
  std::string source = "the in-tree table";
  if (args.has("plugin")) {
    oc::load_plugin(args.get("plugin"), plugin_rows);
    table = &plugin_rows;
    source = fmt::format("plugin '{}'", args.get("plugin"));
  }
  if (args.flag("list")) {
    list_rows(oc::builtin_registry(), "the in-tree table");
    if (table != &oc::builtin_registry()) list_rows(*table, source);
    return 0;
  }
  const std::vector<std::string>& patterns = args.positionals();
  check_patterns(*table, patterns, source, args.has("plugin"));

  const bool text = !settings.json;
  auto start = std::chrono::steady_clock::now();
  std::vector<oc::RowResult> results;
  auto report = [&](oc::RowResult r) {
    if (text) {
      fmt::print("{}", summary_line(r));
      if (!r.ok) fmt::print("{}      rerun: {}\n", indent(r.format()), rerun_command(settings, r.name));
      else fmt::print("{}", indent(r.first.format_kinks() + r.second.format_kinks()));
      std::fflush(stdout);
    }
    results.push_back(std::move(r));
  };
  for (const oc::OpCase& row : table->op_cases())
    if (selected(patterns, row.op, row.name())) report(oc::check_op_case(row, settings.check));
  for (const oc::ErrorCase& row : table->error_cases())
    if (selected(patterns, row.op, row.name())) report(oc::check_error_row(row));
  for (const oc::GoldenCase& row : table->golden_cases())
    if (selected(patterns, row.op, row.name())) report(oc::check_golden_row(row));

  int failed = 0;
  for (const oc::RowResult& r : results) failed += r.ok ? 0 : 1;
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const char* mode = seqgrad::mode_name(settings.check.mode);
  seqgrad::GradcheckPrecision precision = settings.check.precision;
  seqgrad::GradcheckTolerances t = seqgrad::precision_defaults(precision);
  t = {settings.check.eps.value_or(t.eps), settings.check.atol.value_or(t.atol), settings.check.rtol.value_or(t.rtol)};
  if (text)
    fmt::print("{} of {} rows passed{} ({} mode, {}{}, {:.2f} s)\n", results.size() - failed, results.size(),
               failed ? fmt::format("; {} FAILED", failed) : "", mode, seqgrad::precision_name(precision),
               precision == seqgrad::GradcheckPrecision::f64
                   ? ""
                   : fmt::format(": eps {:g}, atol {:g}, rtol {:g} or the row's where looser", t.eps, t.atol, t.rtol),
               seconds);
  if (settings.json || !settings.out_file.empty()) {
    json rows = json::array();
    for (const oc::RowResult& r : results) rows.push_back(row_json(r, settings));
    json doc = {{"source", source}, {"mode", mode}, {"dtype", args.get("dtype")}, {"rows", rows},
                {"passed", results.size() - failed}, {"failed", failed}, {"seconds", seconds}};
    if (settings.json) fmt::print("{}\n", doc.dump(2));
    if (!settings.out_file.empty()) write_json(settings.out_file, doc);
  }
  return failed ? 1 : 0;
}
