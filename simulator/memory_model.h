// Device memory over one step: buffer liveness on the executed schedule.
//
// A buffer (simulator/schedule.h: Buffer) is allocated when the op that defines it starts (entry
// parameters and constants at time 0) and freed when the last op reading it ends — by time, not by
// program order, so an asynchronous collective keeps its operand alive until it finishes. Entry
// outputs and constants stay live until the end of the step; so do entry parameters unless they
// are donated (the default for a training step). When an op takes over an operand's buffer in
// place, the operand is freed and the output allocated at the op's start. The level at an instant
// is the one after every allocation and free at that instant (an op that frees X as the next op
// allocates Y never holds both); the first sample is the state before anything runs (parameters and
// constants). Peak = the highest level; the buffers live at its first moment are listed, largest
// first.
//
// Categories (the rule, applied to the instruction defining the value; names and metadata op_name
// scopes are matched lower-case):
//  1. Entry parameters: optimizer state when the name says so ("adam", "momentum", "velocity",
//     "opt_state", "optimizer", "moment", "accumulator", "slot") or is another parameter's name
//     plus "_m"/"_v" (the zoo's Adam state: layer0_wi_m, layer0_wi_v); activations when it is the
//     input batch ("x", "input*", "target*", "label*", "batch*", "data*", "tokens*", "images*",
//     "features*"); otherwise parameters (weights).
//  2. Optimizer state: the name or op_name contains one of the optimizer-state words above, or the
//     name ends in "_m_new"/"_v_new".
//  3. Updated weights: inside the optimizer scope (op_name or name starting with "optimizer") and
//     the name ends in "_new" -> parameters.
//  4. Data movement inherits its operand's category: convert, copy, transpose, slice,
//     dynamic-slice, dynamic-update-slice, pad, concatenate, reverse, gather, and every collective
//     (an all-gathered weight is still a weight, a reduce-scattered gradient still a gradient).
//  5. Other values in the optimizer scope -> temporaries.
//  6. Gradients: the name contains "grad", or the op_name/name starts with "backward" (or has a
//     "/backward/" or "backward_" part).
//  7. Any other value with an op_name scope (forward, loss) -> activations.
//  8. Everything else (no metadata, loop counters, constants) -> temporaries.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/ir/ir.h"
#include "core/base/status.h"
#include "simulator/run_result.h"
#include "simulator/schedule.h"

namespace shardscope::sim {

// The category of the value `inst` defines (rules above). `entry_parameter_names` holds every entry
// parameter name (for the "_m"/"_v" rule); `operand_category` is the category of operand 0's value
// (for rule 4), when known.
MemoryCategory ClassifyValue(const Instruction& inst, bool is_entry_parameter,
                             const std::set<std::string, std::less<>>& entry_parameter_names,
                             std::optional<MemoryCategory> operand_category);

struct BufferLifetime {
  double alloc_s = 0;
  double free_s = 0;  // +infinity: live until the end of the step
};

struct MemoryProfile {
  std::vector<MemorySample> samples;  // time order; the first (time 0) is the state before any op
  int64_t peak_bytes = 0;
  double peak_time_s = 0;
  std::array<int64_t, kNumMemoryCategories> peak_by_category{};
  std::vector<PeakBuffer> peak_buffers;  // live at the peak, largest first
  std::vector<BufferLifetime> lifetimes;  // by buffer id
};

struct MemoryProfileOptions {
  // Downsample to at most this many samples (0 = keep all), keeping each interval's highest
  // sample so the peak never vanishes.
  size_t max_samples = 0;
  // Only the peak and its time: no samples after the first and no list of the buffers live at
  // the peak (the same peak; for callers that need the figure alone, e.g. the strategy search).
  bool peak_only = false;
};

// Liveness of every buffer of `program` given when each op started and ended (seconds; one entry
// per op), and the step's end. Error when the vectors do not match the program.
Result<MemoryProfile> ComputeMemoryProfile(const ExecProgram& program, const std::vector<double>& op_start,
                                           const std::vector<double>& op_end, double step_end_s,
                                           const MemoryProfileOptions& options = {});

// The peak of the program run with its ops one after another (op k from k to k+1: the order the
// scheduler and rematerialisation reason about). Equal to ComputeMemoryProfile's peak on those times,
// found in linear time (integer instants need no sort) and without samples or peak buffers.
struct SequentialPeak {
  int64_t peak_bytes = 0;
  double peak_time_s = 0;  // the instant (an op index) of the peak's first moment
  std::vector<BufferLifetime> lifetimes;  // by buffer id, in op-index units
};
SequentialPeak ComputeSequentialPeak(const ExecProgram& program);

}  // namespace shardscope::sim
