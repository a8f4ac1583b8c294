// The event-driven execution engine: runs the SPMD program (every device runs the same program) on
// a modelled pod and fills a RunResult (simulator/run_result.h).
//
// Per device there are two streams. The compute stream runs the program's compute ops one at a
// time in issue order (simulator/schedule.h: program order, or the collectives-early list
// schedule); an op starts when the stream is free and its operands are ready. The communication
// stream takes the collectives in issue order and starts each one as soon as its operands are ready
// (asynchronously: independent compute keeps running) and a slot is free
// (SimulationOptions::max_concurrent_collectives, default 1: one collective at a time). A
// collective synchronises its replica group: it starts when the last member is ready, and ends for
// the group after the group's duration. Compute time is the roofline of each (fused) op; a
// collective's duration comes from EstimateCollective over all its replica groups when the groups
// are translates of each other on the topology (the usual case: groups along mesh axes), which then
// all take that joint time; groups laid out differently get their own times from
// EstimateConcurrentCollectives, one request per group, all running together. With several collectives in flight on a device they share bandwidth: each progresses
// at rate A/F, where A is its time alone and F its finish time when the in-flight set runs together
// (EstimateConcurrentCollectives), re-evaluated whenever the set changes.
//
// Symmetry: devices are simulated in classes, not one by one. All devices start in one class; a
// class is split only when its members must diverge — when the members' replica groups of a
// collective start at different times or last different times. Devices of one class therefore have
// provably identical timelines under this model (the split is exact, not a heuristic), and a
// 2048-device step whose replica groups are translates of each other on the torus costs about as
// much as one device. The approximation: with more than max_device_classes classes, further splits
// are refused and a class waits for the last of its members' groups and takes the longest group's
// time (a warning says so). Per-device detail is stored once per class (RunResult device classes).
//
// Memory: buffer liveness on the executed timeline of each class (simulator/memory_model.h).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/ir/ir.h"
#include "core/base/status.h"
#include "simulator/collective_timing.h"
#include "simulator/collectives/cost.h"
#include "simulator/memory_model.h"
#include "simulator/run_result.h"
#include "simulator/schedule.h"
#include "simulator/topology.h"

namespace shardscope::sim {

struct SimulationOptions {
  ExecProgramOptions program;        // schedule, fusion, while trip counts, in-place reuse, donation
  CollectiveOptions collectives;     // latency model, bidirectional rings
  int64_t max_concurrent_collectives = 1;  // collectives in flight per device (>= 1)
  int64_t max_device_classes = 64;   // cap on distinct timelines (see the header comment)
  // FLOPs of the whole step over all devices that count as useful (e.g. CountModuleFlops of the
  // unpartitioned module). 0: the FLOPs of the SPMD program on every device.
  double model_flops = 0;
  MemoryProfileOptions memory;
  std::string mesh_text;  // recorded in RunInputs (e.g. "X=4,Y=4")
  std::string label;      // RunResult::label
  // Timings of collectives shared between simulations (collective_timing.h; null: none). The
  // results are the same with or without it.
  std::shared_ptr<CollectiveTimingMemo> collective_memo;
  // Off: the run keeps its figures only — the summary, the collectives and each class's peak —
  // without the classes' timeline events, memory samples and peak buffers (the figures are the
  // same; the strategy search ranks candidates by them).
  bool timelines = true;
};

struct SimulationStats {
  int64_t exec_ops = 0;
  int64_t compute_ops = 0;
  int64_t collective_ops = 0;
  int64_t distinct_collectives = 0;
  int64_t buffers = 0;
  int64_t device_classes = 0;  // classes the engine ended with (before identical details merge)
  double build_ms = 0;         // module -> program
  double collective_cost_ms = 0;
  double engine_ms = 0;
  double memory_ms = 0;
  // The order the program ran in (ExecProgram::schedule) and, under memory-limit, the candidates'
  // peaks with ops one after another ({program order, memory list}; 0: not tried).
  ScheduleKind schedule = ScheduleKind::kProgramOrder;
  std::array<int64_t, 2> sequential_peak_bytes{};
  // Rematerialisation under the memory limit (ExecProgram's fields of the same names).
  int64_t rematerialized_values = 0;
  int64_t rematerialized_bytes = 0;
  int64_t rematerialized_peak_bytes = 0;
};

struct Simulation {
  RunResult run;
  std::vector<std::string> warnings;
  SimulationStats stats;
};

// Simulates one step of `module` (an SPMD program: shapes are per-device shards) on `topology`.
// RunInputs gets the module name, a hash of the module's structure (FNV-1a over names, opcodes,
// shapes, operands and the attributes the simulation uses), the chip, options.mesh_text, the
// topology's description and the settings.
// Errors: the module's num_partitions differs from the topology's device count (when > 1), a
// replica group names a device outside the slice, an unsupported construct, or invalid options.
Result<Simulation> Simulate(const Module& module, const Topology& topology, const SimulationOptions& options = {});

// Same, from an already built program (tests; callers that cache the program).
Result<Simulation> SimulateProgram(const ExecProgram& program, const Topology& topology,
                                   const SimulationOptions& options = {});

// Human-readable summary lines (step time, breakdown, MFU, peak memory by category).
std::string DescribeSimulation(const Simulation& sim);

}  // namespace shardscope::sim
