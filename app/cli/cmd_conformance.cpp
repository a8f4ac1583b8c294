// shardscope-cli conformance KIND DIR [--filter TEXT] [--quiet] [--verbose]: measures against
// expectations kept as data (app/conformance/conformance.h): XLA's own tests
// (../shared/conformance/xla/<kind>, KIND propagation or spmd) or a folder of real HLO dumps
// (KIND dumps). Prints failing checks, case errors, tables by op kind, the unsupported ops and,
// last, the pass rate ("propagation: H/T checks hold (P%)", "spmd: H/T cases match (P%)",
// "dumps: H/T dumps pass (P%)"). Exit 0 when everything counted holds, 1 when something fails, 2
// on bad input.
#include <iostream>
#include <string>
#include <vector>

#include "app/cli/cli.h"
#include "app/conformance/conformance.h"

namespace {

int Run(const std::vector<std::string>& args_in) {
  using namespace shardscope;
  std::vector<std::string> args = args_in;
  conformance::ConformanceOptions options;
  cli::TakeOption(args, "filter", &options.filter);
  const bool quiet = cli::TakeFlag(args, "quiet");
  options.verbose = cli::TakeFlag(args, "verbose");
  if (int rc = cli::RejectUnknownOptions("conformance", args)) return rc;
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
    std::cout << conformance::FormatReport(*report, options.verbose);
  }
  return report->rate.passed == report->rate.total ? 0 : 1;
}

const bool registered = shardscope::cli::Register(
    {"conformance", "KIND DIR [--filter TEXT] [--quiet] [--verbose]",
     "Measure against XLA's test expectations (KIND: propagation|spmd) or run the pipeline over real dumps (dumps); "
     "last line: pass rate",
     &Run});

}  // namespace
