// HLO text parser benchmark: generates a 100k-instruction module (parameters, dots with contracting
// dims, adds, broadcasts and reshapes, each with a sharding and metadata), then reports the median
// of 5 runs of parse, verify and print, and instructions per second.
//
// Usage: bench_parse [INSTRUCTIONS]   (default 100000)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>
#include <vector>

#include "core/ir/hlo_text.h"
#include "core/ir/verifier.h"
#include "benchmarks/bench_support.h"

using namespace shardscope;

using shardscope::bench::Median;

namespace {

std::string GenerateModule(int64_t target) {
  const int kWeights = 16;
  std::string s;
  s.reserve(static_cast<size_t>(target) * 230);
  s += "HloModule bench_mlp, num_partitions=4\n\n";
  s += "ENTRY %main (h.0: f32[256,1024]) -> f32[256,1024] {\n";
  int64_t count = 0;
  s += "  %h.0 = f32[256,1024]{1,0} parameter(0), sharding={devices=[2,1,2]<=[4] last_tile_dim_replicate}, "
       "metadata={op_name=\"input\"}\n";
  ++count;
  for (int k = 0; k < kWeights; ++k) {
    const std::string i = std::to_string(k);
    s += "  %w." + i + " = f32[1024,1024]{1,0} parameter(" + std::to_string(1 + 2 * k) +
         "), sharding={devices=[1,2,2]<=[4] last_tile_dim_replicate}, metadata={op_name=\"params/w" + i + "\"}\n";
    s += "  %bias." + i + " = f32[1024]{0} parameter(" + std::to_string(2 + 2 * k) +
         "), sharding={devices=[2,2]<=[4] last_tile_dim_replicate}, metadata={op_name=\"params/b" + i + "\"}\n";
    count += 2;
  }
  // Scalar constants make the count exact; then layers of 5 instructions.
  for (int64_t c = 0; (target - count) % 5 != 0; ++c, ++count)
    s += "  %c." + std::to_string(c) + " = f32[] constant(" + std::to_string(c) + "), sharding={replicated}\n";
  int64_t layer = 0;
  std::string prev = "h.0";
  while (count + 5 <= target) {
    ++layer;
    const std::string n = std::to_string(layer);
    const std::string k = std::to_string(layer % kWeights);
    const std::string md = ", metadata={op_name=\"jit(train_step)/layer_" + n +
                           "/dense\" source_file=\"model.py\" source_line=" + std::to_string(100 + layer % 400) + "}";
    s += "  %dot." + n + " = f32[256,1024]{1,0} dot(%" + prev + ", %w." + k +
         "), lhs_contracting_dims={1}, rhs_contracting_dims={0}, sharding={devices=[2,2]<=[4]}" + md + "\n";
    s += "  %bcast." + n + " = f32[256,1024]{1,0} broadcast(%bias." + k +
         "), dimensions={1}, sharding={devices=[2,2]<=[4]}" + md + "\n";
    s += "  %add." + n + " = f32[256,1024]{1,0} add(%dot." + n + ", %bcast." + n +
         "), sharding={devices=[2,2]<=[4]}" + md + "\n";
    s += "  %split." + n + " = f32[256,4,256]{2,1,0} reshape(%add." + n +
         "), sharding={devices=[2,1,2]<=[4]}" + md + "\n";
    s += std::string("  ") + (count + 5 + 5 > target ? "ROOT " : "") + "%h." + n + " = f32[256,1024]{1,0} reshape(%split." +
         n + "), sharding={devices=[2,2]<=[4]}" + md + "\n";
    prev = "h." + n;
    count += 5;
  }
  s += "}\n";
  return s;
}

double ThreadCpuMs() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

// Wall time and this thread's CPU time (the latter is what the code costs when the machine is
// shared with other work).
struct Timing {
  double wall_ms, cpu_ms;
};

template <typename F>
Timing Time(F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  const double c0 = ThreadCpuMs();
  f();
  return {std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count(), ThreadCpuMs() - c0};
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t target = argc > 1 ? std::max<int64_t>(100, std::atoll(argv[1])) : 100000;
  const std::string text = GenerateModule(target);
  std::printf("module: %.1f MB of HLO text\n", static_cast<double>(text.size()) / 1e6);

  std::vector<double> parse_ms, verify_ms, print_ms, parse_cpu, verify_cpu, print_cpu;
  int64_t instructions = 0;
  for (int run = 0; run < 5; ++run) {
    Result<std::unique_ptr<Module>> parsed = Error("not run");
    Timing t = Time([&] { parsed = ParseHloModule(text, "bench.hlo", ParseOptions{false}); });
    parse_ms.push_back(t.wall_ms);
    parse_cpu.push_back(t.cpu_ms);
    if (!parsed.ok()) {
      std::fprintf(stderr, "%s\n", parsed.error().message.c_str());
      return 1;
    }
    instructions = (*parsed)->instruction_count();
    Status verified;
    t = Time([&] { verified = VerifyModule(**parsed); });
    verify_ms.push_back(t.wall_ms);
    verify_cpu.push_back(t.cpu_ms);
    if (!verified.ok()) {
      std::fprintf(stderr, "verify: %s\n", verified.error().message.c_str());
      return 1;
    }
    std::string printed;
    t = Time([&] { printed = PrintHloModule(**parsed); });
    print_ms.push_back(t.wall_ms);
    print_cpu.push_back(t.cpu_ms);
    if (printed.empty()) return 1;
  }
  const double p = Median(parse_ms), v = Median(verify_ms), pr = Median(print_ms);
  const double pc = Median(parse_cpu), vc = Median(verify_cpu), prc = Median(print_cpu);
  const double n = static_cast<double>(instructions);
  std::printf("instructions:        %lld\n", static_cast<long long>(instructions));
  std::printf("medians of 5 runs:       wall ms     cpu ms   instructions/s (cpu)\n");
  std::printf("  parse              %9.1f  %9.1f   %12.0f\n", p, pc, n / (pc / 1e3));
  std::printf("  verify             %9.1f  %9.1f   %12.0f\n", v, vc, n / (vc / 1e3));
  std::printf("  parse + verify     %9.1f  %9.1f   %12.0f   (target: under 1000 ms)\n", p + v, pc + vc,
              n / ((pc + vc) / 1e3));
  std::printf("  print              %9.1f  %9.1f   %12.0f\n", pr, prc, n / (prc / 1e3));
  std::printf("parse throughput:    %.1f MB/s of text (cpu)\n", static_cast<double>(text.size()) / 1e6 / (pc / 1e3));
  return 0;
}
