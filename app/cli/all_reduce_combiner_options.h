// The command-line options of the all-reduce combiner stage (partitioner/all_reduce_combiner.h),
// shared by partition, verify, simulate and reproduce.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "partitioner/all_reduce_combiner.h"

#define ALL_REDUCE_COMBINER_OPTION_USAGE \
  "[--all-reduce-combiner|--no-all-reduce-combiner] [--all-reduce-combine-threshold-bytes B]"

namespace shardscope::cli {

// Takes --all-reduce-combiner (on, XLA's 30 MiB threshold), --no-all-reduce-combiner (off, the
// pipeline's default) and --all-reduce-combine-threshold-bytes B (on, with that threshold) from
// args; *options keeps its value unless one is given. Returns an error message ("" when fine).
std::string TakeAllReduceCombinerOptions(std::vector<std::string>& args, std::optional<AllReduceCombinerOptions>* options);

}  // namespace shardscope::cli
