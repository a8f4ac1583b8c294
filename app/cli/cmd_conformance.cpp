// shardscope-cli conformance KIND DIR [--filter TEXT] [--quiet]: runs XLA's own test expectations
// (../shared/conformance/xla/<kind>) and prints failing checks, a table by op kind and, last, the
// pass rate. Exit 0 when every check holds, 1 when some fail, 2 on bad input.
#include <iostream>
#include <string>
#include <vector>

#include "app/cli/cli.h"
#include "partitioner/conformance.h"

namespace {

int Run(const std::vector<std::string>& args_in) {
  using namespace shardscope;
  std::vector<std::string> args = args_in;
  conformance::ConformanceOptions options;
  cli::TakeOption(args, "filter", &options.filter);
  const bool quiet = cli::TakeFlag(args, "quiet");
  if (args.size() != 2) {
    std::string kinds;
    for (const auto& k : conformance::ConformanceKinds()) kinds += (kinds.empty() ? "" : "|") + k;
    return cli::UsageError("conformance", "expected KIND DIR (KIND: " + kinds + ")");
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
     "Measure against XLA's test expectations (KIND: propagation); last line: pass rate", &Run});

}  // namespace
