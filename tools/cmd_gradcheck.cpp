// `seqgrad gradcheck`: runs the op table (tools/op_cases.h) from the command line, one line per
// row, so a new op can be checked without the test suite: gradcheck and gradgradcheck in
// float64, the error-message rows and the golden values.
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "tools/op_cases.h"
#include "tools/commands.h"
#include "tools/gradcheck.h"

namespace {

namespace oc = seqgrad::op_cases;

constexpr const char* kUsage = R"(usage: seqgrad gradcheck [OP ...] [--list] [--help]

Checks the rows of the op table (tools/op_cases.cpp) for the named ops, or for every op:
  gradcheck       float64 central differences vs autograd, output reduced with fixed random
                  weights; also zero upstream gradient -> zero gradients, backward twice ->
                  identical gradients, gradient shapes and dtypes
  gradgradcheck   the same for the first-order gradients (second order), where the row allows
  error rows      the bad call throws the right Error subclass with the expected message
  golden rows     non-differentiable ops (comparisons, argmax, topk, ...) give known values
OP is an op name (matmul) or one row (matmul/batched_broadcast). Prints one line per row and,
for a failing gradcheck, the report with the worst elements. Exit status: 0 when every selected
row passes, 1 when one fails, 2 for a usage error.

  --list   print the op names and every row, then exit
  --help   print this help
)";

std::string pad(const std::string& s, size_t width) { return s.size() >= width ? s : s + std::string(width - s.size(), ' '); }

bool selected(const std::vector<std::string>& patterns, const std::string& op, const std::string& name) {
  if (patterns.empty()) return true;
  for (const std::string& p : patterns)
    if (oc::matches(p, op, name)) return true;
  return false;
}

void list_rows() {
  fmt::print("ops ({}):\n", oc::op_names().size());
  std::string line;
  for (const std::string& op : oc::op_names()) {
    if (!line.empty() && line.size() + op.size() > 96) {
      fmt::print("  {}\n", line);
      line.clear();
    }
    if (!line.empty()) line += ' ';
    line += op;
  }
  if (!line.empty()) fmt::print("  {}\n", line);
  fmt::print("gradcheck rows ({}):\n", oc::op_cases().size());
  for (const oc::OpCase& row : oc::op_cases())
    fmt::print("  {}{}\n", row.name(), row.gradgrad() ? "" : "  (first order only)");
  fmt::print("error rows ({}):\n", oc::error_cases().size());
  for (const oc::ErrorCase& row : oc::error_cases()) fmt::print("  {}\n", row.name());
  fmt::print("golden rows ({}):\n", oc::golden_cases().size());
  for (const oc::GoldenCase& row : oc::golden_cases()) fmt::print("  {}\n", row.name());
}

std::string indent(const std::string& text) {
  std::string out;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    out += "      " + text.substr(start, end - start) + "\n";
    start = end + 1;
  }
  return out;
}

}  // namespace

int gradcheck_main(int argc, char** argv) {
  std::vector<std::string> patterns;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      fmt::print("{}", kUsage);
      return 0;
    }
    if (arg == "--list") {
      list_rows();
      return 0;
    }
    if (!arg.empty() && arg[0] == '-') {
      fmt::print(stderr, "seqgrad gradcheck: unknown option '{}'\n\n{}", arg, kUsage);
      return 2;
    }
    patterns.push_back(arg);
  }
  // Every pattern must select something: a typo should not pass silently.
  for (const std::string& p : patterns) {
    bool found = false;
    for (const oc::OpCase& r : oc::op_cases()) found = found || oc::matches(p, r.op, r.name());
    for (const oc::ErrorCase& r : oc::error_cases()) found = found || oc::matches(p, r.op, r.name());
    for (const oc::GoldenCase& r : oc::golden_cases()) found = found || oc::matches(p, r.op, r.name());
    if (!found) {
      std::string names;
      for (const std::string& op : oc::op_names()) names += (names.empty() ? "" : ", ") + op;
      fmt::print(stderr, "seqgrad gradcheck: no op or row named '{}'. Valid op names: {}\n"
                         "(`seqgrad gradcheck --list` also lists every row)\n", p, names);
      return 2;
    }
  }

  int rows = 0, failed = 0;
  for (const oc::OpCase& row : oc::op_cases()) {
    if (!selected(patterns, row.op, row.name())) continue;
    ++rows;
    std::string details;
    seqgrad::GradcheckReport first, second;
    bool ok = true;
    try {
      first = seqgrad::gradcheck(row.fn, oc::make_inputs(row), oc::options_for(row));
      ok = first.ok();
      if (!ok) details += first.format();
      if (row.gradgrad()) {
        second = seqgrad::gradgradcheck(row.fn, oc::make_inputs(row), oc::options_for(row));
        if (!second.ok()) details += second.format();
        ok = ok && second.ok();
      }
    } catch (const std::exception& e) {
      ok = false;
      details += fmt::format("threw: {}\n", e.what());
    }
    std::string second_order = row.gradgrad() ? fmt::format("2nd order: max abs {:8.2e}  max rel {:8.2e}",
                                                            second.max_abs_err(), second.max_rel_err())
                                              : "2nd order: skipped";
    fmt::print("{}  {}  max abs {:8.2e}  max rel {:8.2e}   {}\n", ok ? "ok  " : "FAIL", pad(row.name(), 34),
               first.max_abs_err(), first.max_rel_err(), second_order);
    if (!ok) {
      ++failed;
      fmt::print("{}", indent(details));
    }
  }
  for (const oc::ErrorCase& row : oc::error_cases()) {
    if (!selected(patterns, row.op, row.name())) continue;
    ++rows;
    std::string problem = oc::check_error_case(row);
    fmt::print("{}  {}  error row: {}\n", problem.empty() ? "ok  " : "FAIL", pad(row.name(), 34),
               problem.empty() ? fmt::format("throws {} \"{}\"", oc::error_kind_name(row.kind), row.expected) : problem);
    failed += !problem.empty();
  }
  for (const oc::GoldenCase& row : oc::golden_cases()) {
    if (!selected(patterns, row.op, row.name())) continue;
    ++rows;
    std::string problem = oc::check_golden_case(row);
    fmt::print("{}  {}  golden row{}{}\n", problem.empty() ? "ok  " : "FAIL", pad(row.name(), 34),
               problem.empty() ? "" : ": ", problem);
    failed += !problem.empty();
  }
  fmt::print("{} of {} rows passed{}\n", rows - failed, rows, failed ? fmt::format("; {} FAILED", failed) : "");
  return failed ? 1 : 0;
}
