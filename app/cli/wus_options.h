// The command-line options of weight-update sharding, shared by partition, verify and simulate.
#pragma once

#include <string>
#include <vector>

#include "partitioner/weight_update_sharding/weight_update_sharding.h"

#define WUS_OPTION_USAGE                                                                                  \
  "--replica-mesh RxC] [--two-phase|--no-two-phase] [--no-partial-sharding] [--min-shard-bytes B] [--wus-force] "     \
  "[--no-keep-weights-sharded] [--no-step-split] [--batch-small-updates] [--combine-threshold-bytes B"

namespace shardscope::cli {

// Takes --weight-update-sharding (sets *on) and the pass's options from args. Returns an error
// message ("" when fine).
std::string TakeWeightUpdateShardingOptions(std::vector<std::string>& args, bool* on, WeightUpdateShardingOptions* options);

}  // namespace shardscope::cli
