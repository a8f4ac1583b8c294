// The cost of a collective on a physical topology: the step schedule of its algorithm
// (collectives/schedule.h) timed on the links it uses.
//
// Time: the bandwidth time is the busiest one-way link's total bytes / its bandwidth (the steps of
// the modelled algorithms pipeline, so the busiest link never waits; an all-reduce's two passes
// run one after the other, each at its busiest link's pace); the latency is the sum over
// the synchronous steps of each step's longest route (T_min = 1 us per ICI hop): N/2 steps round a
// ring, N-1 along a line, summed over axes for several axes. Steps are synchronous within a replica
// group only: the collective's latency is the largest of its groups' latencies. Default
// (LatencyModel::kOverlapped, the book's max[T_min x hops, V / W]): time = max(latency, bandwidth
// time). LatencyModel::kAdditive (alpha-beta, as ASTRA-sim): their sum. The regime is
// latency-bound when latency > bandwidth time.
//
// CollectivePermute: point-to-point transfers routed hop by hop, links shared fairly (see
// SimulateTransfers). Several collectives at once share links max-min fairly
// (EstimateConcurrentCollectives).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/base/status.h"
#include "simulator/collectives/collective.h"
#include "simulator/collectives/schedule.h"
#include "simulator/topology.h"

namespace shardscope::sim {

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
  // The bytes that set the bandwidth time: the busiest one-way link's. An all-reduce runs two
  // passes one after the other (reduce-scatter, then all-gather): the busiest link of each, added
  // (on a ring the same link; on a line the two ends).
  double max_link_bytes = 0;
  int64_t busiest_link = -1;                 // the (first pass's) busiest link
  std::vector<LinkTraffic> pass_busiest;     // per pass: its busiest link and that link's bytes in it
  std::vector<LinkTraffic> link_traffic;  // every link that carried data, by link id
  std::string algorithm;        // e.g. "bidirectional ring along physical axis 1 (wraparound)"
};

// A collective over replica groups of device ids (XLA semantics: all groups run at once; an empty
// list means one group of every device). `operand_bytes` is each device's operand (input buffer):
//   all-gather: its shard (the result is group_size x operand);
//   reduce-scatter: the full unreduced buffer (the result is operand / group_size);
//   all-reduce: the buffer; all-to-all: the buffer (operand / group_size goes to each member).
// For collective-permute use EstimateCollectivePermute. It times the collective's step schedule
// (collectives/schedule.h) hop by hop as it is emitted.
Result<CollectiveCost> EstimateCollective(const Topology& topology, CollectiveKind kind,
                                          const std::vector<std::vector<int64_t>>& groups, double operand_bytes,
                                          const CollectiveOptions& options = {});

// The same cost at one operand byte (every hop's bytes, the link loads and the bandwidth time are
// proportional to the operand; the latency, the steps and the busiest link are not), and that cost
// at `operand_bytes`: EstimateCollective(B) is CollectiveCostAt(per byte, B), so a
// caller that keeps the per-byte cost of a collective times it at any size exactly as
// EstimateCollective would (the simulator's collective memo, simulator/collective_timing.h).
Result<CollectiveCost> EstimateCollectivePerByte(const Topology& topology, CollectiveKind kind,
                                                 const std::vector<std::vector<int64_t>>& groups,
                                                 const CollectiveOptions& options = {});
CollectiveCost CollectiveCostAt(const CollectiveCost& per_byte, double operand_bytes, const CollectiveOptions& options = {});

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
// The two parts of each request's finish: its latency and its data-done time (the fluid model's).
// Requests of one operand size scale: at B bytes each, every data-done time is B times the one at
// one byte, the latencies unchanged. finish = CombineCollectiveLatency(latency, data done).
struct ConcurrentCollectiveParts {
  std::vector<double> latency_s, data_done_s;
};
Result<ConcurrentCollectiveParts> EstimateConcurrentCollectiveParts(const Topology& topology,
                                                                   const std::vector<CollectiveRequest>& requests,
                                                                   const CollectiveOptions& options = {});
double CombineCollectiveLatency(double latency_s, double bandwidth_time_s, const CollectiveOptions& options = {});

// The step-model time of a listed schedule (BuildCollectiveSchedule; what EstimateCollective returns
// for the same inputs, which times the schedule as it is emitted without listing it).
CollectiveCost TimeSchedule(const Topology& topology, const CollectiveSchedule& schedule,
                            const CollectiveOptions& options = {});

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

}  // namespace shardscope::sim
