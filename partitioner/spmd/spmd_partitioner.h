// The SPMD partitioner (GSPMD §4): turns a module whose instructions all carry shardings into one
// program that every device runs on its shard, with the collectives, dynamic-slices and masking
// that keep the math equal to the unpartitioned module. The public entry point of spmd/; the
// driver is spmd_partitioner.cpp, the handlers handlers/*.cpp (handler_table.h), the shared
// machinery context.h.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/ir/ir.h"
#include "core/base/status.h"

namespace shardscope {

namespace spmd {
class PartitionMemo;
}

struct SpmdOptions {
  int64_t num_partitions = 0;       // 0: the module's num_partitions
  bool prefer_reduce_scatter = true;  // fuse all-reduce + dynamic-slice into reduce-scatter
  // A convolution whose kernel spatial dim is sharded (filter gradients: input and kernel both
  // sharded along it) exchanges halos of the input (true, XLA's default) or of the kernel (false:
  // each device keeps its input rows and fetches the kernel taps that read them; XLA's
  // conv_halo_exchange_always_on_lhs=false).
  bool conv_halo_exchange_always_on_lhs = true;
  // Windowed einsum (spmd/windowed_einsum.h; XLA's threshold_for_windowed_einsum_mib): a dot whose
  // plan all-gathers one operand along one dimension to at least this many MiB per device runs as
  // a loop that multiplies one window at a time and passes windows round the ring with
  // collective-permutes, overlapping the transfers with the products. < 0: never, ShardScope's
  // default (the papers' programs all-gather; XLA's option default is 256, its GPU flag 100000).
  int64_t windowed_einsum_threshold_mib = -1;
  // A windowed loop over more windows than this is not built (XLA's max_windowed_einsum_iteration):
  // the plan all-gathers instead.
  int64_t windowed_einsum_max_iterations = std::numeric_limits<int64_t>::max();
  // Memo tables kept across runs (partition_memo.h): null, each run starts afresh. A memo serves
  // one thread at a time.
  std::shared_ptr<spmd::PartitionMemo> memo;
};

// One collective (or halo exchange) the partitioner inserted, linked to the op that caused it.
struct InsertedCollective {
  std::string origin;       // original instruction name
  std::string instruction;  // the SPMD instruction
  Opcode kind = Opcode::kAllReduce;
  int64_t bytes_per_device = 0;  // per-device operand bytes
  std::string replica_groups;    // text form
  std::string reason;            // "dot: contracting dim sharded", "reshard {..} -> {..}", ...
};

struct PartitionResult {
  std::unique_ptr<Module> module;  // the SPMD program
  // Original instruction name (computation-qualified when not in the entry: "body/add") -> the
  // SPMD instructions it became, in creation order.
  std::map<std::string, std::vector<std::string>> origin_map;
  std::vector<InsertedCollective> collectives;
  // Ops that had no dedicated handler and were partitioned by replicating their operands
  // (correct but communication-heavy), by opcode name.
  std::vector<std::string> replicated_fallbacks;
};

// True when the op family of `inst` has a dedicated handler (handler_table.h); others are
// partitioned by replicating their operands.
bool HasSpmdHandler(const Instruction& inst);

// Every instruction of `module` must carry a sharding (run propagation first); instructions
// without one are treated as replicated. Returns an error naming the instruction on unsupported
// input; never crashes.
Result<PartitionResult> PartitionModule(const Module& module, const SpmdOptions& options = {});

}  // namespace shardscope
