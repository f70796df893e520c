// A small command-line parser for the subcommands: --name value, --flag, positional arguments,
// generated --help, and a clear error for unknown flags or bad values.
#pragma once
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/suggest.h"

namespace seqgrad {
// A mistake on the command line (unknown option, bad flag value): `seqgrad` exits with status 2
// and points at --help, where runtime errors exit with 1.
struct UsageError : ValueError {
  using ValueError::ValueError;
};
}  // namespace seqgrad
#define SG_CHECK_USAGE(cond, ...) SG_CHECK_AS(UsageError, cond, __VA_ARGS__)

namespace seqgrad::tools {

// Runs `check`, which reads command-line values, turning a ValueError it throws (an unknown preset
// or attention kind, a value out of range) into a UsageError.
template <class Check>
auto checking_flags(Check&& check) -> decltype(check()) {
  try {
    return check();
  } catch (const UsageError&) {
    throw;
  } catch (const ValueError& e) {
    throw UsageError(e.what());
  }
}

// The most --threads accepts: 4 x the machine's cores (oversubscribing further only slows down, and
// thousands of threads can exhaust the address space).
int64_t max_threads();

class Args {
 public:
  Args(std::string command, std::string summary) : command_(std::move(command)), summary_(std::move(summary)) {}

  // Declare options before parse(); `value_name` empty means a boolean flag.
  Args& option(const std::string& name, const std::string& value_name, const std::string& help,
               const std::string& default_value = "");
  // An option left out of --help: test hooks such as train's --stop-after-steps. `help` documents
  // it in the source.
  Args& hidden_option(const std::string& name, const std::string& value_name, const std::string& help);
  // An option followed by two values, e.g. --train <src_file> <tgt_file>; read with get_pair().
  Args& pair_option(const std::string& name, const std::string& first_name, const std::string& second_name,
                    const std::string& help);
  // An option followed by one or more values, e.g. --checkpoint a.safetensors b.safetensors (read
  // with get_list()): after the first value, each following argument that `continues` accepts is
  // another, so the values end before a positional argument that it refuses. Given again
  // (--checkpoint a --checkpoint b), it adds to the list.
  Args& list_option(const std::string& name, const std::string& value_name, const std::string& help,
                    const std::string& default_value, std::function<bool(std::string_view)> continues);
  Args& positional(const std::string& name, const std::string& help);  // zero or more
  // The old positional spelling of a declared option (`inspect FILE` for `inspect --checkpoint
  // FILE`): positional arguments become its values (a list option takes several), with a
  // deprecation line on stderr naming the option. Not shown in --help.
  Args& deprecated_positional(const std::string& option);
  // Marks the option declared last as required: its help says so, and parse() refuses a command
  // line without it (a usage error, exit 2).
  Args& required();
  // Puts the option declared last in a named group (the config flags: tools/train_flags.h).
  Args& group(const std::string& name);
  bool in_group(const std::string& option, const std::string& name) const;
  // An old spelling of a declared option: it still works for one release, with a deprecation line
  // on stderr naming the new one.
  Args& deprecated_alias(const std::string& old_name, const std::string& new_name);
  // --quiet, with the one meaning it has in every command (kQuietHelp).
  Args& quiet_option();

  // The help text of --quiet in every command: print the results only. A command's results are what
  // it was asked for (scores, translations, tables, JSON, epoch lines); progress, headers, summaries
  // and lines about the inputs are not.
  static constexpr const char* kQuietHelp =
      "print only the results: no progress, headers, summaries or lines about the inputs (warnings and "
      "errors still go to stderr)";

  // Returns false when --help was given (the help text is printed) or the hidden --list-options (the
  // declarations as one JSON object on stdout: every option's name, value names, default, help,
  // group, hidden and required marks, the deprecated aliases and the positional argument; the test of
  // docs/cli.md's shared-options table reads it); throws UsageError otherwise.
  bool parse(int argc, char** argv);

  bool has(const std::string& name) const;  // given on the command line (or a flag set)
  std::string get(const std::string& name) const;
  // The integer value, which must lie in [min, max] (checked before any caller narrows it).
  int64_t get_int(const std::string& name, int64_t min = std::numeric_limits<int64_t>::min(),
                  int64_t max = std::numeric_limits<int64_t>::max()) const;
  int get_int32(const std::string& name, int min, int max = std::numeric_limits<int>::max()) const {
    return static_cast<int>(get_int(name, min, max));
  }
  // --threads in [1, max_threads()].
  int get_threads(const std::string& name = "threads") const;
  double get_double(const std::string& name) const;
  std::pair<std::string, std::string> get_pair(const std::string& name) const;  // a given pair_option
  // A list_option's values in command-line order, else its default alone (get() gives the first).
  std::vector<std::string> get_list(const std::string& name) const;
  bool is_pair_option(const std::string& name) const;  // declared with pair_option
  bool is_declared(const std::string& name) const { return options_.count(name) > 0; }
  bool flag(const std::string& name) const { return has(name); }
  const std::vector<std::string>& positionals() const { return positionals_; }
  std::string help() const;
  std::string declarations_json() const;  // what --list-options prints

 private:
  struct Option {
    std::string value_name, help, default_value;
    bool hidden = false;
    std::string second_value_name;  // a pair_option's second value
    std::function<bool(std::string_view)> continues;  // a list_option's test of a further value
    std::string group;
    bool required = false;
  };
  std::string command_, summary_;
  std::vector<std::string> order_;
  std::map<std::string, Option> options_;
  std::map<std::string, std::string> values_;
  std::map<std::string, std::string> second_values_;  // of pair options
  std::map<std::string, std::vector<std::string>> list_values_;  // of list options, every value
  std::map<std::string, std::string> aliases_;        // deprecated spelling -> option
  std::string positional_alias_;  // the option a deprecated positional spelling gives values to
  std::string positional_name_, positional_help_;
  std::vector<std::string> positionals_;
};

}  // namespace seqgrad::tools
