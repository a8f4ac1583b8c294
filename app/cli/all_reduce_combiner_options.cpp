#include "app/cli/all_reduce_combiner_options.h"

#include "app/cli/cli.h"
#include "app/cli/slice_options.h"

namespace shardscope::cli {

std::string TakeAllReduceCombinerOptions(std::vector<std::string>& args, std::optional<AllReduceCombinerOptions>* options) {
  const bool on = TakeFlag(args, "all-reduce-combiner");
  const bool off = TakeFlag(args, "no-all-reduce-combiner");
  std::string threshold;
  const bool have_threshold = TakeOption(args, "all-reduce-combine-threshold-bytes", &threshold);
  if (off && (on || have_threshold))
    return "--no-all-reduce-combiner contradicts --all-reduce-combiner and --all-reduce-combine-threshold-bytes";
  if (off) {
    options->reset();
    return "";
  }
  if (on || have_threshold) {
    if (!*options) *options = AllReduceCombinerOptions{};
  }
  if (have_threshold) {
    int64_t bytes = 0;
    if (!ParseInt(threshold, 0, &bytes)) return "--all-reduce-combine-threshold-bytes takes a non-negative integer";
    (*options)->threshold_bytes = bytes;
  }
  return "";
}

}  // namespace shardscope::cli
