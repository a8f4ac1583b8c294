#include "app/cli/windowed_einsum_options.h"

#include "app/cli/cli.h"
#include "app/cli/slice_options.h"

namespace shardscope::cli {

std::string TakeWindowedEinsumOptions(std::vector<std::string>& args, SpmdOptions* options) {
  std::string mib, iterations;
  const bool have_mib = TakeOption(args, "windowed-einsum-mib", &mib);
  const bool have_iterations = TakeOption(args, "windowed-einsum-max-iterations", &iterations);
  if (have_mib && !ParseInt(mib, 0, &options->windowed_einsum_threshold_mib))
    return "--windowed-einsum-mib takes a non-negative integer (MiB of the gathered operand)";
  if (have_iterations) {
    if (!have_mib) return "--windowed-einsum-max-iterations needs --windowed-einsum-mib (the loops are off without it)";
    if (!ParseInt(iterations, 1, &options->windowed_einsum_max_iterations))
      return "--windowed-einsum-max-iterations takes a positive integer (windows per loop)";
  }
  return "";
}

}  // namespace shardscope::cli
