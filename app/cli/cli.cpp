#include "app/cli/cli.h"

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
  const std::string flag = "--" + std::string(name);
  const std::string short_flag = name.size() == 1 ? "-" + std::string(name) : std::string();
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
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) {
      std::cerr << path << ": error: cannot write file\n";
      return false;
    }
    out << contents;
    out.flush();
    if (!out) {
      std::cerr << path << ": error: write failed\n";
      std::remove(tmp.c_str());
      return false;
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::cerr << path << ": error: cannot replace file\n";
    std::remove(tmp.c_str());
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
