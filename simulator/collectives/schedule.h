// Every collective algorithm, written once as a step schedule: which stop sends what to which over
// which links in each synchronous step. The cost model (collectives/cost.h) times a schedule; the
// teaching walkthrough (collectives/walkthrough.h) animates the same schedule. The algorithms
// follow "How To Scale Your Model" part 3 (SB, ../shared/papers/004_*.txt) but model the exact
// algorithms rather than the large-N formulas:
//
//  * AllGather on a ring with wraparound: the bidirectional ring. In step 1 every stop sends its
//    block to both neighbours; in step k it forwards what it received in step k-1 one hop further
//    in the same direction. floor(N/2) steps; for even N the last hop carries half a block each
//    way. Each one-way link carries (N-1)/2 shards, i.e. (N-1)/N of V over the two directions.
//    One direction only (CollectiveOptions::bidirectional = false): N-1 steps round the ring.
//  * On a line (no wraparound) shards flow both ways to the two ends: N-1 steps of one shard each,
//    the busiest one-way link carries N-1 shards (about twice the torus time).
//  * Over several physical axes at once (a full sub-grid): the shard is split into one part per
//    axis; part j gathers along the axes in the order j, j+1, ... (rotated; blocks grow as they
//    go) so every axis' links work at once; the split fractions balance the busiest link of each
//    axis (GridAllGatherFractions: equal parts for equal axes).
//  * ReduceScatter: the AllGather schedule run backwards: step s is all-gather step S-1-s with every
//    hop reversed (over the reverse links), carrying partial sums that are added on arrival. On a
//    one-way ring the reversed hop is reflected round the chunk's owner so the partial sums keep to
//    the ring's direction. AllReduce = ReduceScatter, then AllGather. (Reduction arithmetic is not
//    timed.)
//  * AllToAll: every member sends 1/N of its buffer to every other member along its shortest route
//    (ties round a ring split half/half), store-and-forward one link per step. Over a sub-grid of
//    chips the link loads may be counted per axis instead of listing every piece
//    (CollectiveOptions::per_axis_all_to_all; the same loads, verified by a test).
//  * A switch (NVSwitch): direct sends through each chip's up- and down-link, one step (all-reduce:
//    two).
//  * CollectivePermute: one step of point-to-point sends, each routed over the links
//    (dimension order, shortest way round).
//
// Each replica group is laid out by LayOutReplicaGroup (collectives/layout.h), a function of the
// group alone. Steps are synchronous within a group only; the groups run at the same time and
// share the links they both use.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/base/status.h"
#include "simulator/collectives/collective.h"
#include "simulator/collectives/layout.h"
#include "simulator/topology.h"

namespace shardscope::sim {

// One transfer of a step.
struct ScheduleHop {
  int32_t step = 0;   // synchronous step, 0-based (all-reduce: the reduce-scatter's, then the all-gather's)
  int32_t group = 0;  // replica group (collective-permute: 0)
  int32_t part = 0;   // multi-axis gathers: the part of the shard it belongs to
  int32_t phase = 0;  // multi-axis gathers: the phase of that part (0: along its first axis)
  // Gathers: stops of the group's layout. All-to-all and collective-permute: the chips at the two
  // ends of the links crossed in this step.
  int32_t from = -1, to = -1;
  // Gathers: the stop whose block (as held at the start of the phase) the hop carries.
  // All-to-all: the source member (group position); collective-permute: the pair's index.
  int32_t origin = -1;
  int32_t target = -1;  // all-to-all: the destination member (group position)
  // The hop's route has route_links links; this step crosses those from first_link on (all of
  // them for a logical hop, cut-through; one for store-and-forward). 0 links: devices of one chip.
  int32_t first_link = 0, route_links = 0;
  // Gathers: 0.5 on the last hop of an even bidirectional ring (half a block each way), else 1.
  // All-to-all: the share of the piece taking this route (0.5 each way for a tie round a ring).
  double fraction = 1;
  double bytes = 0;
  double latency = 0;   // seconds: the latency of the links crossed in this step
  bool reduce = false;  // reduce-scatter: a partial sum, added to the receiver's on arrival
};

// A run of steps of one group along sequences of stops (one or more parallel lines).
struct SchedulePhase {
  int32_t part = 0, phase = 0;
  int64_t first_step = 0, steps = 0;  // within one pass
  int64_t axis = -1;                  // layout axis index for a grid phase, else -1
  int64_t physical_axis = -1;         // the physical axis it runs along (-1: not along one axis)
  int64_t line_size = 0;              // stops along each sequence
  bool ring = false;                  // a bidirectional ring (the last hop may carry halves)
  bool closed = false;                // a ring, bidirectional or not
  int64_t block = 1;                  // shards per block carried
};

struct ScheduledGroup {
  GroupLayout layout;
  std::vector<double> part_fractions = {1.0};  // multi-axis gathers: the size of each part
  int64_t pass_steps = 0;                      // the steps of one pass of this group
  std::vector<SchedulePhase> phases;           // a gather pass, in order (parts, then phases)
  // All-to-all counted per axis: no hops; this many steps at this hop latency.
  bool counted = false;
  int64_t counted_steps = 0;
  double counted_step_latency = 0;
};

// Everything about a collective's schedule but its hops: the groups, their layouts and phases,
// and the step counts. EmitSchedule lists the hops.
struct CollectivePlan {
  CollectiveKind kind = CollectiveKind::kAllGather;
  std::vector<std::vector<int64_t>> groups;         // as run (an empty input becomes one group of all)
  std::vector<std::pair<int64_t, int64_t>> pairs;   // collective-permute
  double operand_bytes = 0;
  bool bidirectional = true;
  std::vector<ScheduledGroup> plans;                // per group (collective-permute: none)
  int64_t pass_steps = 0;  // gathers: the steps of one pass (the largest over the groups)
  int64_t steps = 0;       // synchronous steps of the whole collective (all-reduce: two passes)
  int64_t group_size = 0;  // the largest group
  int64_t parts = 1;       // multi-axis gathers: the most parts any group uses
  // Link loads counted in bulk (all-to-all per axis): bytes per link id, added to the hops' loads.
  std::vector<std::pair<int64_t, double>> counted_loads;
  double bytes_per_device = 0;  // payload each device receives (max over devices)
  std::string algorithm;        // e.g. "bidirectional ring along physical axis 1 (wraparound)"
  // An all-reduce runs two passes one after the other: the reduce-scatter's hops (reduce), then
  // the all-gather's.
  int num_passes() const { return kind == CollectiveKind::kAllReduce ? 2 : 1; }
};

// Plans an all-gather, reduce-scatter, all-reduce or all-to-all over replica groups of device ids
// (XLA semantics: all groups run at once; an empty list means one group of every device).
// `operand_bytes` is each device's operand:
//   all-gather: its shard (the result is group_size x operand);
//   reduce-scatter: the full unreduced buffer (the result is operand / group_size);
//   all-reduce: the buffer; all-to-all: the buffer (operand / group_size goes to each member).
// `max_hops` (> 0) refuses schedules of more hops than about that (an error saying so; the
// teaching walkthrough's limit).
Result<CollectivePlan> PlanCollective(const Topology& topology, CollectiveKind kind,
                                      const std::vector<std::vector<int64_t>>& groups, double operand_bytes,
                                      const CollectiveOptions& options = {}, int64_t max_hops = 0);
// Collective-permute: every (source, target) pair sends `bytes` in step 0 over its route.
Result<CollectivePlan> PlanPermute(const Topology& topology,
                                   const std::vector<std::pair<int64_t, int64_t>>& source_target_pairs, double bytes);

// Receives the hops of a schedule, group by group, with the links each crosses in its step.
class ScheduleSink {
 public:
  virtual ~ScheduleSink() = default;
  virtual void Hop(const ScheduleHop& hop, std::span<const int64_t> links) = 0;
};
// Lists the hops of a plan, in order: replica group by replica group (an all-reduce's
// reduce-scatter hops, then its all-gather hops), within a group in step order of each sequence.
void EmitSchedule(const Topology& topology, const CollectivePlan& plan, ScheduleSink& sink);

// A schedule with its hops listed (what the teaching walkthrough animates).
struct CollectiveSchedule {
  CollectivePlan plan;
  std::vector<ScheduleHop> hops;
  std::vector<std::vector<int64_t>> links;  // per hop: the links it crosses in its step
};
Result<CollectiveSchedule> BuildCollectiveSchedule(const Topology& topology, CollectiveKind kind,
                                                   const std::vector<std::vector<int64_t>>& groups,
                                                   double operand_bytes, const CollectiveOptions& options = {},
                                                   int64_t max_hops = 0);
Result<CollectiveSchedule> BuildPermuteSchedule(const Topology& topology,
                                                const std::vector<std::pair<int64_t, int64_t>>& source_target_pairs,
                                                double bytes);

// The group positions whose data a gather hop carries (its origin stop's block at the start of
// its phase; sorted), and how many they are.
std::vector<int64_t> CarriedChunks(const CollectivePlan& plan, const ScheduleHop& hop);
int64_t CarriedChunkCount(const CollectivePlan& plan, const ScheduleHop& hop);

}  // namespace shardscope::sim
