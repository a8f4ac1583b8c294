// SpmdBuilder (XLA's name): builds the instructions of the SPMD program. Every instruction it
// emits goes into the current computation, is named after the original instruction being
// partitioned (the origin) and is recorded in the PartitionResult's origin map; every collective
// carries replica groups (or source-target pairs) and a channel id, and is listed with the reason
// it was inserted. Partition-id based offset tables, masking of the padding of uneven shards
// (GSPMD §4.1), scalar reducers and copies of the original module's scalar computations are built
// here too. The builder knows nothing of shardings beyond the tile maps it is handed.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/ir/ir.h"
#include "core/ir/replica_groups.h"
#include "partitioner/spmd/spmd_partitioner.h"
#include "partitioner/spmd/tile_map.h"

namespace shardscope::spmd {

class SpmdBuilder {
 public:
  SpmdBuilder(Module* out, int64_t num_devices, PartitionResult* result);

  int64_t num_devices() const { return n_; }
  Module* out_module() { return out_; }
  PartitionResult* result() { return result_; }

  // ---- where instructions go ----
  Computation* comp() { return comp_; }
  // Switches to another computation of the SPMD program (its partition-id is emitted anew).
  void set_comp(Computation* c) { comp_ = c; partition_id_ = nullptr; }
  // The original instruction being partitioned (names, origin map, metadata); nullptr: none.
  void set_origin(const Instruction* orig);
  // The builder's position (computation, partition-id, origin), to come back to after
  // partitioning a called computation.
  struct Position {
    Computation* comp = nullptr;
    Instruction* partition_id = nullptr;
    const Instruction* origin = nullptr;
  };
  Position Save() const;
  void Restore(const Position& p);

  // ---- plain instructions ----
  Instruction* Emit(Opcode op, Shape shape, std::vector<Instruction*> operands);
  Instruction* ConstantScalar(PrimitiveType t, double v);
  Instruction* PartitionId();
  // s32[] scalar: table[partition-id].
  Instruction* TableLookup(const std::vector<int64_t>& table);
  Instruction* DynamicSlice(Instruction* x, const std::vector<Instruction*>& offsets, std::vector<int64_t> sizes);
  Instruction* Slice(Instruction* x, std::vector<int64_t> limits);  // [0:limit) on every dim
  Instruction* SliceDim(Instruction* x, int64_t dim, int64_t from, int64_t to);  // [from:to) along dim, the rest whole
  Instruction* PadHigh(Instruction* x, const std::vector<int64_t>& high, double value);
  Instruction* Reshape(Instruction* x, std::vector<int64_t> dims);
  Instruction* Transpose(Instruction* x, const std::vector<int64_t>& perm);
  Instruction* Broadcast(Instruction* scalar, const Shape& shape);

  // ---- collectives (recorded in the result with `reason`) ----
  Instruction* AllGather(Instruction* x, int64_t dim, std::vector<std::vector<int64_t>> groups,
                         const std::string& reason);
  Instruction* AllReduce(Instruction* x, Computation* reducer, std::vector<std::vector<int64_t>> groups,
                         const std::string& reason);
  Instruction* ReduceScatter(Instruction* x, Computation* reducer, int64_t dim,
                             std::vector<std::vector<int64_t>> groups, const std::string& reason);
  Instruction* AllToAll(Instruction* x, int64_t dim, std::vector<std::vector<int64_t>> groups,
                        const std::string& reason);
  Instruction* CollectivePermute(Instruction* x, const std::vector<std::pair<int64_t, int64_t>>& pairs,
                                 const std::string& reason);
  int64_t NextChannelId() { return next_channel_++; }

  // ---- computations ----
  // A scalar binary computation (add/max/min/mul/or/and) in the output module, created once.
  Computation* ScalarReducer(Opcode op, PrimitiveType t);
  // Copies a scalar computation of the original module (reducers, comparators) unchanged.
  Computation* CloneScalarComputation(const Computation* c);

  // Replaces the padding of x (a shard of an array of shape `base` under `map`) along `dims` — the
  // part of each shard beyond the full extent — with `identity` (GSPMD §4.1: iota + compare +
  // select on partition-id offsets).
  Instruction* MaskPadding(Instruction* x, const TileMap& map, const Shape& base, const std::vector<int64_t>& dims,
                           double identity);

  // Records that the op was partitioned by the replicated fallback.
  void NoteFallback(const Instruction& orig);

 private:
  void Record(Instruction* collective, Instruction* operand, std::string groups, const std::string& reason);

  Module* out_;
  int64_t n_;
  PartitionResult* result_;
  Computation* comp_ = nullptr;
  Instruction* partition_id_ = nullptr;
  const Instruction* origin_ = nullptr;
  std::string origin_key_;
  std::vector<std::string>* origin_names_ = nullptr;  // origin_key_'s entry in the origin map, once looked up
  std::map<std::pair<int, int>, Computation*> reducers_;
  std::unordered_map<const Computation*, Computation*> cloned_;
  int64_t next_channel_ = 1;
  ReplicaGroupsTextMemo groups_text_;
};

}  // namespace shardscope::spmd
