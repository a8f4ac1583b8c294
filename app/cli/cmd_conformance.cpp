// shardscope-cli conformance KIND DIR [--filter TEXT] [--quiet]: runs XLA's own test expectations
// (../shared/conformance/xla/<kind>) and prints failing checks, a table by op kind and, last, the
// pass rate. Exit 0 when every check holds, 1 when some fail, 2 on bad input.
// KIND spmd runs the SPMD partitioner corpus (partitioner/spmd_conformance.h; cases whose pipeline
// propagates shardings first use this project's propagation); its last line is its pass rate.
// KIND dumps runs the whole pipeline over a folder of real HLO dumps (dump_conformance.h).
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "app/cli/cli.h"
#include "app/conformance/dump_conformance.h"
#include "app/conformance/propagation_conformance.h"
#include "app/pipeline/propagate.h"
#include "app/conformance/spmd_conformance.h"

namespace {

int RunSpmd(const std::string& dir, bool quiet) {
  using namespace shardscope;
  SpmdConformanceOptions o;
  o.propagate = [](Module& m) -> Status {
    auto r = pipeline::Propagate(m, pipeline::StandardPropagationOptions(pipeline::EntryIo::kKeep));
    if (!r.ok()) return r.error();
    return Status::Ok();
  };
  std::ostringstream out;
  auto summary = RunSpmdConformance(dir, out, o);
  if (!summary.ok()) {
    std::cerr << "shardscope-cli conformance: " << summary.error().message << "\n";
    return 2;
  }
  const std::string text = out.str();
  if (quiet) {
    const size_t at = text.rfind("spmd: ");
    std::cout << (at == std::string::npos ? text : text.substr(at));
  } else {
    std::cout << text;
  }
  return summary->matched_supported == summary->supported ? 0 : 1;
}

int Run(const std::vector<std::string>& args_in) {
  using namespace shardscope;
  std::vector<std::string> args = args_in;
  conformance::ConformanceOptions options;
  cli::TakeOption(args, "filter", &options.filter);
  const bool quiet = cli::TakeFlag(args, "quiet");
  if (args.size() != 2) {
    std::string kinds;
    for (const auto& k : conformance::ConformanceKinds()) kinds += (kinds.empty() ? "" : "|") + k;
    return cli::UsageError("conformance", "expected KIND DIR (KIND: " + kinds + "|spmd|dumps)");
  }
  if (args[0] == "spmd") return RunSpmd(args[1], quiet);
  if (args[0] == "dumps") {
    DumpConformanceOptions o;
    o.verbose = !quiet;
    auto s = RunDumpConformance(args[1], std::cout, o);
    if (!s.ok()) {
      std::cerr << "shardscope-cli conformance: " << s.error().message << "\n";
      return 2;
    }
    return s->passed == s->total ? 0 : 1;
  }
  auto report = conformance::RunConformance(args[0], args[1], options);
  if (!report.ok()) {
    std::cerr << "shardscope-cli conformance: " << report.error().message << "\n";
    return 2;
  }
  if (quiet) {
    std::cout << report->SummaryLine() << "\n";
  } else {
    std::cout << conformance::FormatReport(*report);
  }
  return report->passed_checks == report->total_checks ? 0 : 1;
}

const bool registered = shardscope::cli::Register(
    {"conformance", "KIND DIR [--filter TEXT] [--quiet]",
     "Measure against XLA's test expectations (KIND: propagation|spmd), or run the pipeline over real dumps (dumps); last line: pass rate", &Run});

}  // namespace
