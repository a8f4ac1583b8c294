// shardscope-cli reproduce NAME [--small] [--column LABEL] [--csv OUT.csv] | reproduce --list
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
  std::cout << pipeline::ReproduceTableText(r);
  if (have_csv && !WriteFile(csv_path, pipeline::ReproduceCsv(r))) return 2;
  for (const auto& c : r.columns) {
    if (!c.status.ok()) return 2;
  }
  return 0;
}

const bool registered = Register(
    {kName, "NAME [--small] [--column LABEL] [--csv OUT.csv] " ALL_REDUCE_COMBINER_OPTION_USAGE " | --list",
     "Build a published configuration from the zoo, partition and simulate it, and print published vs simulated "
     "(last line: worst: P%)",
     &Run});

}  // namespace
}  // namespace shardscope::cli
