// Cost of collectives on a physical topology, following "How To Scale Your Model" part 3
// (../shared/papers/004_*.txt) but modelling the exact algorithms rather than the large-N formulas:
//
//  * AllGather on a ring with wraparound: the bidirectional ring. Every device sends its shard both
//    ways; each hop forwards what it received; after floor(N/2) steps everyone has everything (for
//    even N the last step carries half a shard each way). Each one-way link carries (N-1)/2 shards,
//    i.e. (N-1)/N of V over the two directions: T = (N-1)/N x V / W_bidirectional.
//  * On a line (no wraparound) shards flow both ways to the two ends: N-1 steps of one shard each,
//    the busiest one-way link carries N-1 shards (about twice the torus time).
//  * Over several physical axes at once: the shard is split into one part per axis; part j gathers
//    along the axes in the order j, j+1, ... (rotated) so every axis' links work at once; the split
//    fractions are chosen to balance the busiest link of each axis (equal parts for equal axes).
//  * ReduceScatter: the AllGather schedule run backwards (same link loads per step).
//    AllReduce = ReduceScatter + AllGather. (Reduction arithmetic is not timed.)
//  * AllToAll: every device sends 1/N of its buffer to every other member along its shortest route
//    (ties round a ring split half/half), store-and-forward one hop per step; on a bidirectional
//    ring this is the book's AllGather / 4 for large N (exactly N/(4(N-1)) of the exact AllGather).
//  * When every chip of a group holds the same number k of its devices (two cores per chip), the
//    group is planned over its chips: devices of one chip exchange data on-chip for free and a
//    chip's shard is k device shards.
//  * Groups that are neither a physical ring, a line nor a full sub-grid (strided or scattered
//    replica groups, uneven placements) run the bidirectional ring over the group in its given
//    order, each logical hop routed over the physical links (dimension order); groups share links.
//
// How a group is laid out (LayOutReplicaGroup) depends on that group alone: never on the other
// groups of the call, nor on where it comes in the list; the other groups only add load to shared
// links (contention). The layout is decided as follows:
//  * the group's chips are exactly a physical ring, a segment of one axis (also one that crosses a
//    wraparound link) or a full sub-grid: the physical ring / line / multi-axis plan, whatever the
//    members' order (the order only says which shard ends up where, not which links carry it: an
//    all-gather round a physical ring can place the shards in any order at no cost);
//  * otherwise the members' order, read as a cycle, is the ring: all of its hops physical
//    neighbours -> a ring without routing; all but one -> a line, cut at the one hop that is not;
//    more -> the logical ring in that order with routed hops. Rotating or reversing the order gives
//    the same plan.
//  * A switch (NVSwitch): direct sends, one step, through each chip's up- and down-link.
//  * CollectivePermute: point-to-point transfers routed hop by hop, links shared fairly (see
//    SimulateTransfers).
//
// Time: the bandwidth time is the busiest one-way link's total bytes / its bandwidth (the steps of
// the modelled algorithms pipeline, so the busiest link never waits); the latency is the sum over
// the synchronous steps of each step's longest route (T_min = 1 us per ICI hop): N/2 steps round a
// ring, N-1 along a line, sum over axes for several axes. Steps are synchronous within a replica
// group only: the collective's latency is the largest of its groups' latencies. Default (LatencyModel::kOverlapped, the
// book's max[T_min x hops, V / W]): time = max(latency, bandwidth time). LatencyModel::kAdditive
// (alpha-beta, as ASTRA-sim): their sum. The regime is latency-bound when latency > bandwidth time.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/sharding/mesh.h"
#include "core/base/status.h"
#include "simulator/topology.h"

namespace shardscope {

enum class CollectiveKind : uint8_t { kAllGather, kReduceScatter, kAllReduce, kAllToAll, kCollectivePermute };
std::string_view CollectiveKindName(CollectiveKind k);  // "all-gather", ...
// Accepts "all-gather", "allgather", "AllGather", "all_gather", "ag" (and likewise for the others).
Result<CollectiveKind> CollectiveKindFromName(std::string_view name);

enum class LatencyModel : uint8_t {
  kOverlapped,  // step = max(hop latency, bytes / bandwidth)   (the book's T_hop; default)
  kAdditive,    // step = hop latency + bytes / bandwidth       (alpha-beta; ASTRA-sim)
};
enum class CostRegime : uint8_t { kBandwidthBound, kLatencyBound };
std::string_view CostRegimeName(CostRegime r);  // "bandwidth-bound" | "latency-bound"

struct CollectiveOptions {
  LatencyModel latency_model = LatencyModel::kOverlapped;
  // false: ring algorithms use one direction only (ASTRA-sim's default ring); lines and switches
  // are unaffected.
  bool bidirectional = true;
  // All-to-all over a group that is exactly a sub-grid of chips: compute link loads per axis
  // (identical to routing every pair, much faster for large groups). false routes every pair;
  // kept for cross-checks.
  bool per_axis_all_to_all = true;
};

struct LinkTraffic {
  int64_t link = -1;
  double bytes = 0;
};

struct CollectiveCost {
  CollectiveKind kind = CollectiveKind::kAllGather;
  double time_s = 0;
  double latency_time_s = 0;    // summed over steps: the hop-latency part
  double bandwidth_time_s = 0;  // summed over steps: busiest link bytes / bandwidth
  CostRegime regime = CostRegime::kBandwidthBound;
  int64_t steps = 0;            // synchronous steps (hops on the critical path for a ring)
  int64_t num_groups = 0;
  int64_t group_size = 0;       // largest group
  double bytes_per_device = 0;  // payload each device receives (max over devices): AG (N-1)S,
                                // RS (N-1)V/N, AR 2(N-1)V/N, A2A (N-1)B/N, permute B
  double total_link_bytes = 0;  // bytes x links traversed, all links
  double max_link_bytes = 0;    // the busiest one-way link over the whole collective
  int64_t busiest_link = -1;
  std::vector<LinkTraffic> link_traffic;  // every link that carried data, by link id
  std::string algorithm;        // e.g. "bidirectional ring along physical axis 1 (wraparound)"
};

// A collective over replica groups of device ids (XLA semantics: all groups run at once; an empty
// list means one group of every device). `operand_bytes` is each device's operand (input buffer):
//   all-gather: its shard (the result is group_size x operand);
//   reduce-scatter: the full unreduced buffer (the result is operand / group_size);
//   all-reduce: the buffer; all-to-all: the buffer (operand / group_size goes to each member).
// For collective-permute use EstimateCollectivePermute.
Result<CollectiveCost> EstimateCollective(const Topology& topology, CollectiveKind kind,
                                          const std::vector<std::vector<int64_t>>& groups, double operand_bytes,
                                          const CollectiveOptions& options = {});

// Point-to-point sends (source device, target device), `bytes` each, all at once (halo exchange,
// rotations): routed hop by hop, links shared fairly, finish = the last transfer.
Result<CollectiveCost> EstimateCollectivePermute(const Topology& topology,
                                                 const std::vector<std::pair<int64_t, int64_t>>& source_target_pairs,
                                                 double bytes, const CollectiveOptions& options = {});

// Several collectives issued at the same time (e.g. async collectives an engine overlaps). Each is a
// fluid job that must move its per-link bytes; jobs share every link max-min fairly (progressive
// filling on their speed relative to running alone, re-solved when one finishes). A collective's
// finish = its data-done time combined with its latency per the LatencyModel. Alone, a request
// finishes exactly at EstimateCollective's time. Returns seconds from the common start.
struct CollectiveRequest {
  CollectiveKind kind = CollectiveKind::kAllGather;
  std::vector<std::vector<int64_t>> groups;
  double operand_bytes = 0;
  std::vector<std::pair<int64_t, int64_t>> source_target_pairs;  // collective-permute only
};
Result<std::vector<double>> EstimateConcurrentCollectives(const Topology& topology,
                                                          const std::vector<CollectiveRequest>& requests,
                                                          const CollectiveOptions& options = {});

// How one replica group lies on the network: the plan EstimateCollective times and the teaching
// walkthrough (collective_steps.h) steps through. A function of the group alone (see above).
struct GroupLayout {
  enum class Kind : uint8_t {
    kTrivial,   // one device, or all devices on one chip (exchanged on-chip, free)
    kSequence,  // a ring (closed) or a line, in `chips` order
    kGrid,      // a full sub-grid over several physical axes (`axes`, `lo`, `size`, `ring`)
    kSwitch,    // direct sends through a switch
  };
  Kind kind = Kind::kTrivial;
  // kSequence: the stops in ring/line order; kGrid: the distinct chips (in group order); kSwitch:
  // one per member in group order. A product layout has one stop per chip (per_chip members each),
  // any other layout one stop per member: stop i is member `members[i]` (a group position).
  std::vector<int64_t> chips;
  std::vector<int64_t> members;  // non-product layouts: the group position of each stop
  bool closed = false;   // kSequence: a ring
  bool routed = false;   // some logical hop spans several physical links
  // The group is exactly the chips of a sub-grid (also for a single-axis kSequence): every chip
  // holds per_chip of its members (a chip's shard is per_chip device shards).
  bool product = false;
  int64_t per_chip = 1;
  // Product layouts: the spanned physical axes, the first coordinate and extent along each (a
  // segment may cross the wraparound: coordinates are lo + offset modulo the axis), whether each
  // closes a ring, and the coordinates of a member chip (for the axes not spanned).
  std::vector<int64_t> axes, lo, size;
  std::vector<bool> ring;
  std::vector<int64_t> base;
  std::string description;

  // Product layouts: the chip at `offsets` (one per spanned axis, 0 <= offsets[i] < size[i]).
  int64_t ChipAtOffsets(const Topology& topology, const std::vector<int64_t>& offsets) const;
};
GroupLayout LayOutReplicaGroup(const Topology& topology, const std::vector<int64_t>& group);

// The split of a multi-axis all-gather over a sub-grid of sizes[a] chips per axis (ring[a]: that
// axis closes into a ring): part j of every shard gathers along the axes in the order j, j+1, ...
// (rotated); the returned fraction of the shard in each part balances the busiest link of every
// axis (equal parts for equal axes). The cost model and the teaching walkthrough both use it.
std::vector<double> GridAllGatherFractions(const std::vector<int64_t>& sizes, const std::vector<bool>& ring,
                                           bool bidirectional);

// ---- Mesh helpers (the book's notation: AllGather_X, AllGather_XY, ...) ------------------------------
// Replica groups of a collective over `axes` of the mesh: one group per combination of the other
// axes' coordinates, members ordered row-major over `axes` as listed.
Result<std::vector<std::vector<int64_t>>> ReplicaGroupsForAxes(const DeviceMesh& mesh,
                                                               const std::vector<std::string>& axes);
// (source, target) pairs of a shift by `offset` along one mesh axis; cyclic wraps the ends round,
// otherwise devices shifted off the end send nothing (a halo exchange).
Result<std::vector<std::pair<int64_t, int64_t>>> ShiftPairsAlongAxis(const DeviceMesh& mesh, std::string_view axis,
                                                                     int64_t offset, bool cyclic);

// ---- Contention: concurrent point-to-point transfers ---------------------------------------------------
struct Transfer {
  int64_t src_device = -1;
  int64_t dst_device = -1;
  double bytes = 0;
  double start_s = 0;
};
// A flow over an explicit path of link ids (for callers that route themselves).
struct LinkFlow {
  std::vector<int64_t> path;
  double bytes = 0;
  double start_s = 0;
};
struct TransferTiming {
  double start_s = 0;
  double data_done_s = 0;  // when its last byte left the bottleneck (fluid model)
  double finish_s = 0;     // data_done combined with the route latency per the LatencyModel
  int64_t hops = 0;
  double latency_s = 0;    // summed link latency of the route
  std::vector<int64_t> path;
};
// Transfers routed by Topology::Route (dimension order, shortest way round); every link is shared
// max-min fairly among the transfers crossing it at each moment (progressive filling, re-solved at
// every start and finish). Overlapped latency: finish = max(start + route latency, data done);
// additive: finish = data done + route latency. Transfers between devices on one chip are free.
Result<std::vector<TransferTiming>> SimulateTransfers(const Topology& topology, const std::vector<Transfer>& transfers,
                                                      const CollectiveOptions& options = {});
Result<std::vector<TransferTiming>> SimulateFlows(const Topology& topology, const std::vector<LinkFlow>& flows,
                                                  const CollectiveOptions& options = {});

// ---- The book's closed forms (SB part 3), for comparison ------------------------------------------------
// V = bytes of the whole gathered array (AllReduce: the buffer), link_bandwidth = ONE-way bandwidth
// of one link (the book's W_ICI is twice that), axis_sizes = |X_i| of the axes gathered over.
//   wraparound: AG = RS = max(T_min * sum|X_i| / 2, V / (W * n_axes)); AR = 2 AG; A2A = AG / 4.
//   no wraparound: the busiest one-way link carries N-1 shards: (N-1) (V/N) / (w_one_way * n_axes),
//   latency T_min * sum(|X_i| - 1).
double BookCollectiveTime(CollectiveKind kind, double V, double link_bandwidth, double hop_latency,
                          const std::vector<int64_t>& axis_sizes, bool wraparound);

}  // namespace shardscope
