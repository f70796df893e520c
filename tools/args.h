// A small command-line parser for the subcommands: --name value, --flag, positional arguments,
// generated --help, and a clear error for unknown flags or bad values.
#pragma once
#include <map>
#include <string>
#include <vector>

namespace seqgrad::tools {

class Args {
 public:
  Args(std::string command, std::string summary) : command_(std::move(command)), summary_(std::move(summary)) {}

  // Declare options before parse(); `value_name` empty means a boolean flag.
  Args& option(const std::string& name, const std::string& value_name, const std::string& help,
               const std::string& default_value = "");
  // An option left out of --help: test hooks such as train's --stop-after-steps. `help` documents
  // it in the source.
  Args& hidden_option(const std::string& name, const std::string& value_name, const std::string& help);
  Args& positional(const std::string& name, const std::string& help);  // zero or more

  // Returns false when --help was given (the help text is printed); throws ValueError otherwise.
  bool parse(int argc, char** argv);

  bool has(const std::string& name) const;  // given on the command line (or a flag set)
  std::string get(const std::string& name) const;
  int64_t get_int(const std::string& name) const;
  double get_double(const std::string& name) const;
  bool flag(const std::string& name) const { return has(name); }
  const std::vector<std::string>& positionals() const { return positionals_; }
  std::string help() const;

 private:
  struct Option {
    std::string value_name, help, default_value;
    bool hidden = false;
  };
  std::string command_, summary_;
  std::vector<std::string> order_;
  std::map<std::string, Option> options_;
  std::map<std::string, std::string> values_;
  std::string positional_name_, positional_help_;
  std::vector<std::string> positionals_;
};

}  // namespace seqgrad::tools
