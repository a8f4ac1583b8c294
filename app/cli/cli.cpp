#include "app/cli/cli.h"

#include "core/base/file_write.h"

#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include <unistd.h>

namespace shardscope::cli {

namespace {
std::vector<Command>& Registry() {
  static std::vector<Command> commands;
  return commands;
}
}  // namespace

bool Register(Command cmd) {
  Registry().push_back(std::move(cmd));
  return true;
}

const std::vector<Command>& Commands() { return Registry(); }

bool TakeOption(std::vector<std::string>& args, std::string_view name, std::string* value) {
  // One-letter options are written "-o VALUE" (also accepted as "--o VALUE").
  std::string flag = "--", short_flag;
  flag.append(name);
  if (name.size() == 1) short_flag.append("-").append(name);
  for (size_t i = 0; i < args.size(); ++i) {
    if ((args[i] == flag || (!short_flag.empty() && args[i] == short_flag)) && i + 1 < args.size()) {
      *value = args[i + 1];
      args.erase(args.begin() + static_cast<long>(i), args.begin() + static_cast<long>(i) + 2);
      return true;
    }
    if (args[i].rfind(flag + "=", 0) == 0) {
      *value = args[i].substr(flag.size() + 1);
      args.erase(args.begin() + static_cast<long>(i));
      return true;
    }
  }
  return false;
}

bool TakeFlag(std::vector<std::string>& args, std::string_view name) {
  const std::string flag = "--" + std::string(name);
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == flag) {
      args.erase(args.begin() + static_cast<long>(i));
      return true;
    }
  }
  return false;
}

bool ReadFile(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::cerr << path << ": error: cannot open file\n";
    return false;
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  return true;
}

bool WriteFile(const std::string& path, std::string_view contents) {
  if (path == "-") {
    std::cout << contents;
    return static_cast<bool>(std::cout);
  }
  // Whole or not at all, and a device such as /dev/null written in place (core/base/file_write.h).
  if (Status s = WriteFileAtomically(path, contents); !s.ok()) {
    std::cerr << path << ": error: " << s.error().message << "\n";
    return false;
  }
  return true;
}

int UsageError(std::string_view command, std::string_view message) {
  std::cerr << "shardscope-cli " << command << ": " << message << "\n";
  return 2;
}

int RejectUnknownOptions(std::string_view command, const std::vector<std::string>& args) {
  for (const auto& a : args)
    if (a.rfind("--", 0) == 0) return UsageError(command, "unknown or incomplete option '" + a + "' (see --help)");
  return 0;
}

}  // namespace shardscope::cli
