// Automatic cross-replica sharding of the weight update (Xu et al., "Automatic Cross-Replica
// Sharding of Weight Update in Data-Parallel Training"; docs/weight-update-sharding.md).
//
// A partitioner stage that runs on a data-parallel SPMD program — the output of the SPMD
// partitioner for weights replicated and the batch split, or imported data-parallel HLO with its
// explicit cross-replica all-reduces — and rewrites it so the replicas split the weight update
// instead of repeating it:
//   1. redundancy analysis (section 3.1, redundancy.h): what every replica computes alike;
//   2. clusters: the redundant update ops around each gradient all-reduce (Figure 5), with the
//      weights and optimizer auxiliaries they read;
//   3. the shard format of each cluster (section 4.1, shard_format.h) and the sharding scheme
//      (section 5: one phase, two phases on a replica mesh, or partial sharding);
//   4. profitability (section 3.2): a cluster is sharded only when the update work it saves
//      outweighs the communication it adds (WeightUpdateShardingOptions documents the rule);
//   5. the rewrite (sections 2.2 and 4): the all-reduce becomes a reduce-scatter, the update runs
//      on the shard (norms and factored moments as masked reductions + all-reduce), the updated
//      weight is all-gathered where it is next used; weights and auxiliaries stay sharded across
//      the training loop (section 4.2; the weight is all-gathered before the next forward pass, in
//      the type the forward pass casts it to, Figure 7; auxiliaries only after the loop or in a
//      rarely taken branch); without a loop, the step is split into a sharding, a main and an
//      unsharding program;
//   6. batching (section 5.2): small reduce-scatters, all-gathers and all-reduces over the same
//      groups are combined up to a size threshold.
// Every collective and reformatting it inserts carries its reason ("weight-update sharding:
// gradient of layer3_wi reduce-scattered, section 4").
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/base/status.h"
#include "core/ir/ir.h"
#include "partitioner/spmd/spmd_partitioner.h"

namespace shardscope {

struct WeightUpdateShardingOptions {
  // ---- the replicas (section 5) ----
  // The replica mesh rows x cols over the program's devices (device = row * cols + col). Empty:
  // one row of every device (a ring). Two-phase reduce-scatters and partial sharding need two
  // dims > 1.
  std::vector<int64_t> replica_mesh;
  // Section 5.1: on a 2-D replica mesh, reduce-scatter rows then columns (and all-gather back).
  // Off by default: the simulator's collective model (the book's, cases C1-C8) runs one
  // reduce-scatter or all-gather over a 2-D group on both mesh axes at once, with the latency of
  // the two phases and half their bandwidth term, so the paper's phases (one axis after the other)
  // are never faster there (docs/weight-update-sharding.md, "Topology").
  bool two_phase = false;
  // Section 5.2: shard within each row (all-reduce across rows) when full shards would be smaller
  // than min_shard_bytes but row shards are not.
  bool partial_sharding = true;

  // ---- annotated parameters (section 3.1) ----
  // Entry parameters known to hold the same value on every replica, besides those whose sharding
  // is replicated (what the SPMD partitioner records for weights and optimizer state).
  std::vector<std::string> redundant_parameters;

  // ---- profitability (section 3.2): a conservative cost model ----
  // A cluster is sharded when   saved > added   with
  //   saved = (bytes of the update's non-fusible inputs and outputs: gradient, weight, auxiliaries
  //            read; weight and auxiliaries written) x (1 - 1/G) / hbm_bytes_per_second
  //   added = sum over the all-gathers it needs beyond the one that completes the old all-reduce
  //           (each weighted by how often it runs: once per step or iteration; 0 after a loop or in
  //           the unsharding program; 1/k in a branch taken every k steps) of
  //           (G-1)/G x bytes / link_bytes_per_second + steps x hop_latency_seconds, plus two
  //           rings of latency for each masked all-reduce of a norm; steps = those of a
  //           bidirectional ring per phase (ceil(n/2) for a ring of n: G for one phase, rows and
  //           columns for two phases, a row for partial sharding, plus an all-reduce across rows)
  // and its shards are at least min_shard_bytes (a smaller shard is latency-bound: the transfer
  // of one ring step costs less than a hop's latency; partial sharding is tried first).
  // Defaults: a TPU v3 core's HBM bandwidth and ICI link figures (reference/hardware).
  double hbm_bytes_per_second = 450e9;
  double link_bytes_per_second = 70e9;
  double hop_latency_seconds = 1e-6;
  int64_t min_shard_bytes = 64 * 1024;
  bool force = false;  // shard every candidate cluster regardless of profit (tests, teaching)

  // ---- data formatting (section 4.1) ----
  // The platform's tiled layout of the two minor dims (TPU: 8 x 128): dims above them may be
  // merged freely, and a whole array may be bitcast into [T, tile_rows, tile_cols]. 0: no bitcast.
  int64_t tile_rows = 8, tile_cols = 128;

  // ---- placement (section 4.2) ----
  // Keep weights sharded across loop iterations and steps, all-gathered before the forward pass
  // (Figure 4 right); false: all-gather the updated weight at the end of the step (Figure 4 left).
  bool keep_weights_sharded = true;
  // Figure 7: a weight the forward pass casts to a narrower type is all-gathered after the cast.
  bool gather_in_compute_type = true;
  // Without a training loop in the program: the three-program split (sharding, main, unsharding)
  // so auxiliaries stay sharded between steps. false: they are all-gathered every step (which the
  // profitability rule then usually rejects).
  bool split_step_program = true;
  // A full value needed only in a conditional branch taken every k steps is all-gathered inside
  // that branch (frequency from the predicate's use of the loop counter).
  bool gather_in_rare_branch = true;

  // ---- batching (section 5.2) ----
  // Reduce-scatters, all-gathers and all-reduces of the pass over the same groups are combined
  // while the combined operands stay within this many bytes (0: no combining).
  int64_t combine_threshold_bytes = 32 * 1024 * 1024;
  // Batched profitability: a weight too small to shard alone (its shard, even a row's, below
  // min_shard_bytes) is not rejected outright but joins a batch of such small updates — same
  // computation, scheme (partial sharding when the replica mesh has rows) and gradient type, in
  // program order, while the batch's gradients fit combine_threshold_bytes (the combiner's batch).
  // The batch is judged as one: its combined shard (sum of gradient bytes / G) must reach
  // min_shard_bytes, and   saved > added   is taken over the sums, with each combined collective's
  // latency counted once for the batch (one reduce-scatter, one all-gather per frequency, one
  // masked all-reduce, one cross-row all-reduce) against the one combined all-reduce it replaces,
  // and bandwidth per tensor. The whole batch is sharded or kept replicated. Weights large enough
  // alone keep the per-tensor rule. false (or combine_threshold_bytes = 0): small weights stay
  // replicated one by one. Off by default: docs/weight-update-sharding.md ("Batched
  // profitability") says what it does to the simulated section 6.1 and why it is not yet the
  // default.
  bool batch_small_updates = false;
};

// What the pass did with one gradient all-reduce (one cluster).
struct WeightUpdateDecision {
  std::string all_reduce;       // the gradient all-reduce of the input program
  std::string weight;           // the weight it updates (best guess: the cluster's full-shape input)
  std::string computation;      // where it is ("main", "body", ...)
  bool sharded = false;
  std::string format;           // section 4.1: "[3,3,256,256] -> merge [9,256,256] -> pad ..."
  std::string scheme;           // section 5: "one phase over 16 replicas", ...
  std::vector<std::string> sharded_state;  // values kept sharded across iterations / steps
  std::vector<std::string> non_elementwise;  // reduces run on shards: "layer0_norm: masked reduce + all-reduce"
  int64_t update_bytes = 0;     // bytes of the update's inputs and outputs (unsharded)
  // The rule's figures: this update's own; for a member of a batch of small updates, its saving
  // and its share of the batch's communication (bandwidth its own, latency split evenly).
  double saved_seconds = 0, added_seconds = 0;
  int64_t batch = 0;            // small updates decided together (section 5.2); 0: decided alone
  std::string reason;           // why sharded / kept replicated
  // Where the pieces are (section 5): per device, the shard of the formatted value it keeps (and
  // updates; partial sharding: the same shards in every row); how many shards; one shard's dims.
  std::vector<int64_t> shard_of_device;
  int64_t shards = 1;
  std::vector<int64_t> shard_dims;
};

// An instruction the pass inserted that is not a collective (formatting, slicing, masking, casts).
struct InsertedFormatting {
  std::string instruction;
  std::string reason;
};

struct WeightUpdateShardingResult {
  // The rewritten program. With a step split (no loop), the main program: it takes and returns
  // the sharded weights and auxiliaries; `sharding_program` makes them from the full values and
  // `unsharding_program` gathers them back (ComposeStepPrograms runs the three in order). Without a
  // split both are null (the module itself has the input's signature).
  std::unique_ptr<Module> module;
  std::unique_ptr<Module> sharding_program, unsharding_program;
  // ShardWeightUpdatesOf: the program the pass read (the partition's module before it).
  std::unique_ptr<Module> input;
  std::vector<WeightUpdateDecision> decisions;
  std::vector<InsertedCollective> collectives;    // inserted (after batching), with reasons
  std::vector<std::string> replaced_all_reduces;   // input all-reduces that no longer exist
  std::vector<InsertedFormatting> formatting;
  int64_t redundant_instructions = 0;
  int64_t combined_collectives = 0;  // collectives merged away by batching
  bool split = false;
  std::string summary;  // one paragraph
};

Result<WeightUpdateShardingResult> ShardWeightUpdates(const Module& spmd_program,
                                                      const WeightUpdateShardingOptions& options = {});

// Runs the pass on a partitioner result: its module becomes the rewritten (main) program, the
// removed all-reduces leave its collective list and the inserted collectives join it, so the
// partitioned-program view shows one consistent record. Returns the pass's result, whose `module`
// is then the partition's old program (the data-parallel one, for comparisons) moved to `input`.
Result<WeightUpdateShardingResult> ShardWeightUpdatesOf(PartitionResult& partition,
                                                        const WeightUpdateShardingOptions& options = {});

// The three programs of a step split run in order — sharding, main, unsharding — as one program
// with the input's signature (what numerical verification checks against the input). Error when
// the result is not split. The second form takes the main program from elsewhere (after
// ShardWeightUpdatesOf it is the partition's module).
Result<std::unique_ptr<Module>> ComposeStepPrograms(const WeightUpdateShardingResult& result);
Result<std::unique_ptr<Module>> ComposeStepPrograms(const WeightUpdateShardingResult& result, const Module& main_program);

// A report: per all-reduce what was done, the collectives before and after.
std::string DescribeWeightUpdateSharding(const WeightUpdateShardingResult& result);

}  // namespace shardscope
