// Findings and reach counters. See fuzz_target.h.
#include "fuzz/fuzz_target.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

namespace shardscope::fuzz {

namespace {

struct Counters {
  std::vector<std::pair<const char*, int64_t>> stages;  // few stages: a linear search is fine
  Counters() {
    const char* env = std::getenv("SHARDSCOPE_FUZZ_STATS");
    if (env && *env && std::strcmp(env, "0") != 0) std::atexit([] { std::fputs(ReachReport().c_str(), stderr); });
  }
};

// Never destroyed: the report printed at exit reads it after static destructors may have run.
Counters& Get() {
  static Counters* counters = new Counters;
  return *counters;
}

}  // namespace

void Finding(std::string_view what, std::string_view detail) {
  std::fprintf(stderr, "\nFINDING: %.*s\n", static_cast<int>(what.size()), what.data());
  if (!detail.empty()) std::fprintf(stderr, "%.*s\n", static_cast<int>(detail.size()), detail.data());
  std::fflush(stderr);
  std::abort();
}

void CheckErrorOffset(const Error& error, size_t size, std::string_view what) {
  if (error.offset < -1 || error.offset > static_cast<int64_t>(size)) {
    Finding(std::string(what) + " error with an offset outside the text",
            error.message + " (offset " + std::to_string(error.offset) + ")");
  }
}

void Reach(const char* stage) {
  for (auto& [name, count] : Get().stages) {
    if (name == stage || std::strcmp(name, stage) == 0) {
      ++count;
      return;
    }
  }
  Get().stages.emplace_back(stage, 1);
}

std::string ReachReport() {
  int64_t inputs = 0;
  for (const auto& [name, count] : Get().stages) {
    if (std::strcmp(name, "inputs") == 0) inputs = count;
  }
  std::string out;
  char line[200];
  for (const auto& [name, count] : Get().stages) {
    std::snprintf(line, sizeof line, "  %-32s %10lld  (%.1f%% of inputs)\n", name, static_cast<long long>(count),
                  inputs ? 100.0 * static_cast<double>(count) / static_cast<double>(inputs) : 0.0);
    out += line;
  }
  return out;
}

}  // namespace shardscope::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  shardscope::fuzz::Reach("inputs");
  shardscope::fuzz::TestOneInput(std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
