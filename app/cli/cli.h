// shardscope-cli subcommand registry. Each subcommand lives in its own cmd_<name>.cpp and registers
// itself at static-initialisation time:
//   static const bool registered = shardscope::cli::Register({"check", "FILE.hlo", "Parse and verify", &Run});
// Exit codes: 0 success, 1 a check failed (mismatch), 2 bad input or usage.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace shardscope::cli {

struct Command {
  std::string name;     // "check"
  std::string usage;    // "FILE.hlo [-o OUT]"
  std::string summary;  // one line for --help
  int (*run)(const std::vector<std::string>& args);  // args after the subcommand name
};

bool Register(Command cmd);
const std::vector<Command>& Commands();

// Small helpers shared by subcommands.
// Finds "--name VALUE" or "--name=VALUE"; removes it from args. Returns true if present.
bool TakeOption(std::vector<std::string>& args, std::string_view name, std::string* value);
// Finds a flag "--name"; removes it. Returns true if present.
bool TakeFlag(std::vector<std::string>& args, std::string_view name);
// Reads a whole file; false with a message on stderr if it cannot.
bool ReadFile(const std::string& path, std::string* out);
// Writes a file atomically (temp + rename); false with a message on stderr if it cannot.
bool WriteFile(const std::string& path, std::string_view contents);
// Prints "shardscope-cli NAME: message" to stderr and returns 2.
int UsageError(std::string_view command, std::string_view message);
// After a command has taken its options: an argument left that looks like one ("--mesh", a
// misspelt or incomplete option) is a usage error naming it (returns 2); else 0.
int RejectUnknownOptions(std::string_view command, const std::vector<std::string>& args);

}  // namespace shardscope::cli
