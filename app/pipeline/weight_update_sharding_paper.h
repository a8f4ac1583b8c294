// Weight-update sharding on a simulated slice: the pass's cost figures taken from the chip being
// simulated, and the paper's section 6.1 experiments (Xu et al., "Automatic Cross-Replica Sharding
// of Weight Update in Data-Parallel Training") as cases a reproduction command or a test runs:
// each builds the zoo model at the paper's settings, partitions it data-parallel, runs the pass
// and simulates the step before and after it on TPU v3 (each chip's two cores are replicas, the
// physical 2-D torus).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/base/status.h"
#include "core/sharding/mesh.h"
#include "core/zoo/zoo.h"
#include "partitioner/all_reduce_combiner.h"
#include "partitioner/weight_update_sharding/weight_update_sharding.h"
#include "simulator/topology.h"

namespace shardscope::pipeline {

// `options` with the simulated chip's figures (a device's HBM bandwidth, a link's both ways, the
// hop latency) and, unless already given, `mesh` as the replica mesh when it has two axes
// (device = row x cols + col, the mesh's own order).
WeightUpdateShardingOptions WeightUpdateShardingOptionsFor(const sim::Topology& topology, const DeviceMesh& mesh,
                                                           WeightUpdateShardingOptions options = {});

// One experiment of the paper's section 6.1.
struct WeightUpdateShardingPaperCase {
  std::string id;        // "wus-6.1-transformer-1024"
  std::string model;     // zoo model
  ZooOverrides settings; // zoo settings (the model's sizes, batch, optimizer, mesh)
  DeviceMesh mesh;       // the logical mesh: mesh_x x mesh_y replicas
  std::vector<int64_t> chips;         // the TPU v3 slice, chips per axis
  std::vector<int64_t> replica_mesh;  // rows x cols of replicas (the pass's topology, section 5)
  // The paper's figures: step times (0 when the paper gives none) and the step-time reduction
  // 1 - after / before.
  double paper_before_s = 0, paper_after_s = 0;
  double paper_reduction = 0;
  std::string source;  // where the figures are published
};

// Transformer on 16 and 1024 chips and ResNet-50 on 1024 chips (Table 1's batch sizes and
// optimizers; the model sizes are documented in docs/weight-update-sharding.md).
std::vector<WeightUpdateShardingPaperCase> WeightUpdateShardingPaperCases();

struct WeightUpdateShardingPaperRun {
  double before_s = 0, after_s = 0;            // simulated step time
  // The busy time of the slowest device's compute and communication streams, and the
  // communication not overlapped by compute.
  double before_compute_s = 0, after_compute_s = 0;
  double before_communication_s = 0, after_communication_s = 0;
  double before_exposed_s = 0, after_exposed_s = 0;
  int64_t before_peak = 0, after_peak = 0;     // peak memory per device, bytes
  int64_t all_reduces = 0, sharded = 0;        // gradient all-reduces, how many the pass sharded
  int64_t device_hbm_bytes = 0;                // HBM per device of the simulated chip
  double reduction() const { return before_s > 0 ? 1 - after_s / before_s : 0; }
};

// Builds, partitions, shards the weight update and simulates a case before and after the pass.
// `pass`: the pass's options besides the case's replica mesh and the chip's figures (defaults
// unless given; the batched profitability of section 5.2 is measured this way).
// `combiner`: the all-reduce combiner on both programs, or nullopt (the pipeline's default): off.
Result<WeightUpdateShardingPaperRun> RunWeightUpdateShardingPaperCase(
    const WeightUpdateShardingPaperCase& c, const WeightUpdateShardingOptions& pass = {},
    const std::optional<AllReduceCombinerOptions>& combiner = std::nullopt);

}  // namespace shardscope::pipeline
