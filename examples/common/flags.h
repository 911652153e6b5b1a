// Command-line flags for the examples: --name value or --name=value, each with a default and a
// line of help; --help prints them. Unknown flags and bad numbers end the program with a message
// and status 2, on rank 0 only, before any collective.
#pragma once

#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

namespace examples {

struct Flag {
  std::string name;
  std::string value;  // the default, replaced by the command line's
  std::string help;
  bool is_switch = false;  // --name alone sets it to "true"
};

class Flags {
 public:
  Flags(std::string usage, std::vector<Flag> flags) : usage_(std::move(usage)), flags_(std::move(flags)) {}

  // Parses argv; prints the help and exits 0 for --help, or exits 2 on a bad flag.
  void parse(int argc, char** argv, bool print) {
    for (int i = 1; i < argc; ++i) {
      std::string arg = argv[i];
      if (arg == "--help" || arg == "-h") {
        if (print) std::fputs(help().c_str(), stdout);
        std::exit(0);
      }
      if (arg.rfind("--", 0) != 0) fail(print, fmt::format("unexpected argument '{}'", arg));
      std::string name = arg.substr(2), value;
      bool has_value = false;
      if (auto eq = name.find('='); eq != std::string::npos) {
        value = name.substr(eq + 1), name = name.substr(0, eq), has_value = true;
      }
      Flag* flag = find(name);
      if (!flag) fail(print, fmt::format("unknown flag --{}", name));
      if (flag->is_switch && !has_value) value = "true", has_value = true;
      if (!has_value) {
        if (i + 1 >= argc) fail(print, fmt::format("--{} needs a value", name));
        value = argv[++i];
      }
      flag->value = value;
    }
    print_ = print;
  }

  std::string str(const std::string& name) const { return find_const(name).value; }
  bool on(const std::string& name) const {
    const std::string& v = str(name);
    if (v != "true" && v != "1" && v != "false" && v != "0")
      fail(print_, fmt::format("--{} is a switch: true or false (1 or 0), got '{}'", name, v));
    return v == "true" || v == "1";
  }
  int64_t integer(const std::string& name, int64_t min = INT64_MIN) const {
    const std::string& v = str(name);
    char* end = nullptr;
    errno = 0;
    long long x = std::strtoll(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0' || errno == ERANGE || x < min)
      fail(print_, fmt::format("--{} needs an integer{}, got '{}'", name,
                               min == INT64_MIN ? "" : fmt::format(" >= {}", min), v));
    return x;
  }
  // A finite number, at least `min`.
  double number(const std::string& name, double min = -HUGE_VAL) const {
    const std::string& v = str(name);
    char* end = nullptr;
    double x = std::strtod(v.c_str(), &end);
    if (v.empty() || *end != '\0' || !std::isfinite(x) || x < min)
      fail(print_, fmt::format("--{} needs a finite number{}, got '{}'", name,
                               min == -HUGE_VAL ? "" : fmt::format(" >= {}", min), v));
    return x;
  }
  // A finite number above 0 (a learning rate).
  double positive(const std::string& name) const {
    const double x = number(name);
    if (x <= 0) fail(print_, fmt::format("--{} needs a number above 0, got '{}'", name, str(name)));
    return x;
  }

  std::string help() const {
    std::string out = usage_ + "\n\nFlags:\n";
    for (const auto& f : flags_)
      out += fmt::format("  --{:<22} {} (default: {})\n", f.name + (f.is_switch ? "" : " V"), f.help,
                         f.value.empty() ? "none" : f.value);
    return out + "  --help                   print this and exit\n";
  }

  [[noreturn]] void fail(bool print, const std::string& message) const {
    if (print) std::fprintf(stderr, "error: %s (see --help)\n", message.c_str());
    std::exit(2);
  }

 private:
  Flag* find(const std::string& name) {
    for (auto& f : flags_)
      if (f.name == name) return &f;
    return nullptr;
  }
  const Flag& find_const(const std::string& name) const {
    for (const auto& f : flags_)
      if (f.name == name) return f;
    std::fprintf(stderr, "internal error: no flag --%s\n", name.c_str());
    std::abort();
  }

  std::string usage_;
  std::vector<Flag> flags_;
  bool print_ = true;
};

}  // namespace examples
