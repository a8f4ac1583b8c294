// Pipelining as the views show it (GSPMD §3.3): which device holds which pipeline stage and which
// layers, and when a stage computes on padding (the bubble). Derived from the program's structure,
// for the mesh view and the timeline; plain state, no widgets.
//
// A module is pipelined when a while loop carries weights stacked along a leading stage dim that
// is sharded over exactly one mesh axis ([L, R, ...]: L stages of R layers each, the zoo's
// pipelined-transformer). The schedule is circular when a loop body rotates a buffer along dim 0
// (concatenate of two slices of one value), GPipe otherwise; layer numbers follow
// PipelinedLayerIndex (core/zoo/pipelined_transformer.h).
//
// The bubble of a step: a loop of T iterations moves N·R' microbatch visits through L stages, so
// stage s works on real data in iterations s .. s + (T - L + 1) - 1 (counted in the loop's own
// direction for the forward loop, reversed for the backward one) and on padding in the other
// L - 1. On a simulated timeline every event of iteration [t] of a loop body belongs to that
// iteration; its span is the bubble when t is one of the stage's padded iterations.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/ir/ir.h"
#include "core/sharding/mesh.h"
#include "simulator/run_result.h"

namespace shardscope::views {

struct PipelineStageLayout {
  int64_t axis = -1;             // the mesh axis the stage dim is sharded over
  std::string axis_name;         // "L"
  int64_t stages = 0;            // L
  int64_t layers_per_stage = 0;  // R
  bool circular = false;
  std::vector<int64_t> stage_of_device;             // by device id
  std::vector<std::vector<int64_t>> layers_of_stage;  // the layers each stage holds, ascending
  // The pipeline's loop bodies (computation names of the module) and whether each moves data
  // towards higher stages (forward) or lower ones (backward: its iterations run in reverse).
  std::vector<std::pair<std::string, bool>> loops;

  // "layers 4-7" (GPipe) or "layers 1, 5, 9, 13" (circular; long lists elided in the middle).
  std::string LayersText(int64_t stage) const;
};

// The sharding an instruction has in the view (the document's, which may differ from the
// module's own while the user edits); empty: the instruction's own.
using ShardingLookup = std::function<std::optional<HloSharding>(const Instruction&)>;

// The layout of a pipelined `module` over `mesh`, or nullopt when it is not pipelined that way.
std::optional<PipelineStageLayout> DerivePipelineStages(const Module& module, const DeviceMesh& mesh,
                                                        const ShardingLookup& sharding = {});

// One span of the timeline in which a stage computes on padding.
struct BubbleSpan {
  double start_s = 0, end_s = 0;
  std::string loop;  // the loop body ("forward_body.spmd")
  int64_t iteration = 0;
};

struct StepBubble {
  int64_t stage = -1;
  // ClassBubbles: the stages of all devices of the row (a class may hold devices of several
  // stages: the simulator runs the same program on each, and the bubble shown is `stage`'s).
  int64_t row_first_stage = -1, row_last_stage = -1;
  // "bubble 43.1% (stage 0)", or "bubble 43.1% (stage 0 of 0-3)" for a row of several stages.
  std::string Caption() const;
  std::vector<BubbleSpan> spans;  // in time order
  double seconds = 0;             // their total
  double share = 0;               // of the step time (0..1)
};

// The bubble of `device`'s timeline in `run` under `layout` (loops recognised by their iteration
// suffixes "[t]" in event names; the loops of the pipeline are those with T >= L iterations).
StepBubble DeviceBubble(const sim::RunResult& run, int64_t device, const PipelineStageLayout& layout);
// DeviceBubble of each device class's lowest-numbered device, by class index (the timeline's rows);
// empty when the run's device count is not the layout's.
std::vector<StepBubble> ClassBubbles(const sim::RunResult& run, const PipelineStageLayout& layout);

}  // namespace shardscope::views
