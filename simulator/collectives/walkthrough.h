// Teaching: a collective taken apart into the synchronous steps of its schedule
// (collectives/schedule.h, where every algorithm is written), the very schedule the cost model
// times, so a person can follow it on the mesh one step at a time, with the cost formula filled in
// with the numbers. The walkthrough adds what the schedule does not need: which device holds what
// after each step, captions, and the formula.
//
// Every transfer below is a hop of the schedule (all-to-all pieces listed one by one, never counted
// per axis), so the per-link bytes of all transfers add up to CollectiveCost::link_traffic and
// there are CollectiveCost::steps steps. A collective-permute is recognised as a halo exchange
// when it is a shift by +-1 along one mesh axis without wraparound (as ShiftPairsAlongAxis
// produces it).
//
// Shards/chunks are numbered by their position in the replica group (XLA order): member i owns
// shard i of the gathered result, chunk i of a reduce-scatter, piece i of every all-to-all buffer.
// Where several devices of a group share a chip, they share what the chip holds (on-chip, free).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/sharding/mesh.h"
#include "core/base/status.h"
#include "core/ir/replica_groups.h"
#include "simulator/collectives/cost.h"
#include "simulator/collectives/schedule.h"
#include "simulator/hardware.h"
#include "simulator/topology.h"

namespace shardscope::sim {

// ---- The walkthrough ----------------------------------------------------------------------------------

// One piece of data moving from one device to another within a step.
struct StepTransfer {
  int64_t group = 0;            // replica group index (collective-permute: 0)
  int64_t src_device = -1;      // where the hop starts / ends (all-to-all: the chips of this hop)
  int64_t dst_device = -1;
  std::string piece;            // "shard 3", "half of shard 2", "partial sum of chunk 1 (3 of 4 added)",
                                // "piece 2→5", "halo", "shards 0, 4 (part 1 of 2)"; an all-to-all
                                // with WalkthroughOptions::piece_names: "tokens of group 2 for expert 5"
  std::vector<int64_t> chunks;  // the shards/chunks/pieces it carries (group positions; a2a: the source)
  double fraction = 1;          // of each chunk (0.5: half a shard on the last hop of an even ring,
                                // or the part of a shard in a multi-axis gather)
  bool half = false;            // half a chunk each way on the last hop of an even bidirectional ring
  double bytes = 0;
  bool reduce_on_arrival = false;  // reduce-scatter / all-reduce's first phase: added to the receiver's copy
  bool on_chip = false;         // between devices of one chip (free, no link)
  int64_t hops = 0;             // links crossed in this step
  bool wraparound = false;      // crosses a wraparound link (drawn round the outside)
  int64_t axis = -1;            // physical axis of the first link (-1: switch / on-chip)
  int direction = 0;            // +1 / -1 along that axis (0: switch / on-chip)
  std::vector<int64_t> path;    // topology link ids, in order
  int64_t part = 0;             // multi-axis gather: which part of the shard (0..parts-1)
  int64_t final_dst_device = -1;  // all-to-all: the piece's destination
};

// What one device holds, as a row of cells (one per group position).
struct HeldCell {
  int64_t colour = -1;  // the group position whose data fills the cell (-1: empty)
  double fill = 0;      // 0..1: gather: fraction of the shard present; reduce: fraction of the N
                        // contributions summed in; all-reduce's all-gather phase: fraction of the
                        // fully reduced chunk present; all-to-all: fraction of the piece present
};
struct DeviceHolding {
  int64_t device = -1;
  int64_t group = -1;     // -1: not in any group (permute: 0 when it sends or receives)
  int64_t position = -1;  // its position in the group: the shard / chunk it owns
  std::vector<HeldCell> cells;
  std::string text;       // "holds shards 0, 1, 3 (3 of 4)", "chunk 2: 4 of 4 added (done)", ...
};

struct CollectiveStep {
  int64_t index = 0;            // 1-based
  std::string phase;            // "" or "reduce-scatter" / "all-gather" (all-reduce)
  std::string caption;          // "Step 2 of 3: each device forwards the shard it received ..."
  std::vector<StepTransfer> transfers;
  std::vector<DeviceHolding> after;  // every device of the slice, by device id
};

// T with the numbers filled in, consistent with EstimateCollective(Permute) for the same inputs.
struct CostFormula {
  std::string symbolic;     // "T = max(T_hop × hops, V_link / W)"
  std::string substituted;  // "max(1.00 µs × 3, 25.2 MB / 45.0 GB/s)"
  std::string result;       // "559 µs (bandwidth-bound)"
  std::string text;         // symbolic = substituted = result
  std::vector<std::string> legend;  // what N, S, V_link, W, T_hop, ... are, with their values
  std::string book;         // the book's closed form with its numbers (empty when it does not apply)
  double time_s = 0;        // == cost.time_s
  double latency_s = 0;     // == cost.latency_time_s
  double bandwidth_s = 0;   // == cost.bandwidth_time_s
  double hop_latency_s = 0;
  double hops = 0;          // latency_s / hop_latency_s (hops on the critical path)
  double link_bytes = 0;    // the busiest one-way link's bytes (V_link)
  double link_bandwidth = 0;  // its bandwidth (W)
  double unit_bytes = 0;    // a shard / chunk / piece
  double book_time_s = 0;   // BookCollectiveTime, 0 when not applicable
};

struct CollectiveWalkthrough {
  CollectiveKind kind = CollectiveKind::kAllGather;
  std::vector<std::vector<int64_t>> groups;  // as run (an empty input becomes one group of all)
  std::vector<std::pair<int64_t, int64_t>> pairs;  // collective-permute
  double operand_bytes = 0;
  int64_t group_size = 0;
  int64_t num_groups = 0;
  int64_t parts = 1;            // multi-axis gathers: the shard is split into this many parts
  std::vector<double> part_fractions;  // their sizes (sum 1)
  std::string algorithm;        // cost.algorithm
  std::string summary;          // two or three sentences: what happens and why it takes these steps
  std::string halo;             // collective-permute: "halo exchange: shift by +1 along X ..." or ""
  int64_t colour_count = 0;     // distinct cell colours (group size; permute: devices)
  std::vector<DeviceHolding> initial;  // before step 1, every device by id
  std::vector<CollectiveStep> steps;
  CollectiveCost cost;          // EstimateCollective / EstimateCollectivePermute for the same inputs
  CostFormula formula;
  std::vector<double> link_bytes;  // per topology link: the sum over this plan's transfers
};

struct WalkthroughOptions {
  CollectiveOptions collective;
  // The logical mesh the devices belong to: names the axes in captions ("along X") and lets a
  // collective-permute be recognised as a halo exchange. Optional.
  std::optional<DeviceMesh> mesh;
  // All-to-all: what piece i -> j carries ([from position][to position], the same in every
  // group), e.g. "tokens of group 3 for expert 5" (partitioner/spmd/all_to_all_pieces.h). Empty:
  // the pieces are called "piece i→j". Used when it is group-size square.
  std::vector<std::vector<std::string>> piece_names;
  // Collective-permute: the shift of a pipeline's shifting buffer (GSPMD §3.3), captioned as such
  // (every stage sends its buffer to the next) instead of as a halo exchange or a rotation.
  bool pipeline_shift = false;
  // Refuse plans larger than this (transfers summed over steps), with a message saying so.
  int64_t max_transfers = 200000;
  // Refuse plans whose per-step holdings would exceed this many cells (devices x cells x steps).
  int64_t max_cells = 6000000;
};

// All-gather, reduce-scatter, all-reduce, all-to-all over replica groups (empty: one group of all
// devices); `operand_bytes` per device as EstimateCollective takes it.
Result<CollectiveWalkthrough> WalkThroughCollective(const Topology& topology, CollectiveKind kind,
                                                    const std::vector<std::vector<int64_t>>& groups,
                                                    double operand_bytes, const WalkthroughOptions& options = {});
// Collective-permute: `bytes` per pair.
Result<CollectiveWalkthrough> WalkThroughCollectivePermute(const Topology& topology,
                                                           const std::vector<std::pair<int64_t, int64_t>>& pairs,
                                                           double bytes, const WalkthroughOptions& options = {});
// The same on the slice a mesh runs on (Topology::ForMesh): `chip` is a preset name or a chip JSON
// path; `pairs` are used for collective-permute, `groups` otherwise.
Result<CollectiveWalkthrough> WalkThroughOnMesh(const DeviceMesh& mesh, std::string_view chip, CollectiveKind kind,
                                                const std::vector<std::vector<int64_t>>& groups,
                                                const std::vector<std::pair<int64_t, int64_t>>& pairs,
                                                double operand_bytes, const TopologyOptions& topology_options = {},
                                                WalkthroughOptions options = {});

}  // namespace shardscope::sim
