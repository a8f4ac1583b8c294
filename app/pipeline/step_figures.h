// Figures of one simulated step that a before/after comparison of weight-update sharding shows
// (paper 000: the step, the time of the weight update, the peak memory by category). Plain C++.
#pragma once

#include <array>
#include <cstdint>

#include "core/ir/ir.h"
#include "simulator/run_result.h"

namespace shardscope::pipeline {

// Compute time of the weight update in a simulated step of `program`: the compute events of the
// instructions that depend on a gradient reduction (an all-reduce or reduce-scatter) within its
// computation, up to an all-gather — the optimizer's update, replicated after an all-reduce or on
// a shard after a reduce-scatter. The slowest device class's; 0 for a run without per-device
// detail.
double WeightUpdateSeconds(const Module& program, const sim::RunResult& run);

// The bytes live at the highest peak of the run, by memory category (indexed by MemoryCategory).
std::array<int64_t, sim::kNumMemoryCategories> PeakMemoryByCategory(const sim::RunResult& run);

}  // namespace shardscope::pipeline
