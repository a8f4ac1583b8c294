// shardscope-cli reproduce NAME [--small] [--column LABEL] [--csv OUT.csv] [--verify] | reproduce --list
#include <iostream>
#include <string>
#include <vector>

#include "app/cli/all_reduce_combiner_options.h"
#include "app/cli/cli.h"
#include "app/pipeline/reproduce.h"

namespace shardscope::cli {
namespace {

constexpr const char* kName = "reproduce";

int Run(const std::vector<std::string>& arguments) {
  std::vector<std::string> args = arguments;
  std::string csv_path, column;
  const bool have_csv = TakeOption(args, "csv", &csv_path);
  TakeOption(args, "column", &column);
  const bool small = TakeFlag(args, "small");
  const bool list = TakeFlag(args, "list");
  const bool verify = TakeFlag(args, "verify");
  std::optional<AllReduceCombinerOptions> combiner;
  if (std::string e = TakeAllReduceCombinerOptions(args, &combiner); !e.empty()) return UsageError(kName, e);
  if (list) {
    for (const auto& c : pipeline::ReproduceCases()) {
      std::cout << c.name << ": " << c.title << " (" << c.source << ")\n";
      for (const auto& col : c.columns) std::cout << "  " << col.label << (col.small ? " (small)" : "") << "\n";
    }
    return 0;
  }
  if (int rc = RejectUnknownOptions(kName, args)) return rc;
  if (args.size() != 1) return UsageError(kName, "expected one case name (reproduce --list shows them)");
  auto spec = pipeline::FindReproduceCase(args[0]);
  if (!spec.ok()) return UsageError(kName, spec.error().message);
  pipeline::ReproduceOptions options;
  options.small_only = small;
  options.only_column = column;
  options.all_reduce_combiner = combiner;
  options.on_column = [](const pipeline::ReproduceColumn& c) {
    std::cerr << "simulating " << c.label << " (" << (c.model.empty() ? "" : c.model + " ") << "on " << c.chip
              << ", mesh " << c.mesh << ")\n";
  };
  const pipeline::ReproducedCase r = pipeline::RunReproduceCase(*spec.value(), options);
  if (r.columns.empty()) return UsageError(kName, "no column of " + args[0] + " matches '" + column + "'");
  // --verify: each zoo column's sharding checked numerically on its small twin, before the table
  // (whose last line stays "worst: P%").
  bool mismatch = false;
  for (const auto& c : verify ? r.columns : std::vector<pipeline::ReproducedColumn>{}) {
    if (c.column->model.empty() || !c.column->weight_update_sharding_case.empty() || !c.column->book_collective_case.empty())
      continue;
    auto v = pipeline::VerifyColumnOnSmallTwin(*c.column);
    std::cout << "verify " << c.column->label << ": ";
    if (!v.ok()) {
      std::cout << "error: " << v.error().message << "\n";
      mismatch = true;
      continue;
    }
    using S = VerificationVerdict::State;
    const S state = v->verdict.state;
    std::cout << (state == S::kMatch      ? "verified on a small twin"
                  : state == S::kMismatch ? "MISMATCH on a small twin"
                  : state == S::kSkipped  ? "not verified: " + v->verdict.reason
                                          : "error: " + v->verdict.reason);
    if (state == S::kMatch || state == S::kMismatch) std::cout << ", max |error| " << v->verdict.report.max_abs_error;
    std::cout << " (" << (v->changes.empty() ? "the same sizes" : v->changes) << "; " << v->instructions << " instructions)\n";
    mismatch = mismatch || state == S::kMismatch || state == S::kError;
  }
  std::cout << pipeline::ReproduceTableText(r);
  if (have_csv && !WriteFile(csv_path, pipeline::ReproduceCsv(r))) return 2;
  for (const auto& c : r.columns) {
    if (!c.status.ok()) return 2;
  }
  return mismatch ? 1 : 0;
}

const bool registered = Register(
    {kName, "NAME [--small] [--column LABEL] [--csv OUT.csv] [--verify] " ALL_REDUCE_COMBINER_OPTION_USAGE " | --list",
     "Build a published configuration from the zoo, partition and simulate it, and print published vs simulated "
     "(last line: worst: P%); --verify: check each column's sharding numerically on its small twin first",
     &Run});

}  // namespace
}  // namespace shardscope::cli
