// The command-line options of windowed einsum loops (partitioner/spmd/windowed_einsum.h), shared by
// partition, verify and simulate.
#pragma once

#include <string>
#include <vector>

#include "partitioner/spmd/spmd_partitioner.h"

#define WINDOWED_EINSUM_OPTION_USAGE "[--windowed-einsum-mib M [--windowed-einsum-max-iterations N]]"

namespace shardscope::cli {

// Takes --windowed-einsum-mib M (SpmdOptions::windowed_einsum_threshold_mib: loops for operands of
// at least M MiB gathered) and --windowed-einsum-max-iterations N (no loop over more than N
// windows, XLA's max_windowed_einsum_iteration) from args into *options. Returns an error message
// ("" when fine).
std::string TakeWindowedEinsumOptions(std::vector<std::string>& args, SpmdOptions* options);

}  // namespace shardscope::cli
