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
// The bubble of a step is decided by the simulator (sim::PaddedIteration, sim::BubbleOnTimeline in
// simulator/pipeline_accounting.h); this file only says where each device sits in each loop: stage
// s is position s of the forward loop and position L - 1 - s of the backward one (the gradient
// enters at the last stage).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/ir/ir.h"
#include "core/sharding/mesh.h"
#include "simulator/pipeline_accounting.h"
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
  std::vector<std::string> loop_conditions;  // by loop: its condition computation's name

  // Where `stage` sits in each loop, for sim::BubbleOnTimeline.
  std::vector<sim::TimelinePipelineLoop> LoopPositions(int64_t stage) const;

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
using BubbleSpan = sim::TimelineBubbleSpan;

struct StepBubble {
  int64_t stage = -1;
  // ClassBubbles: the stages of all devices of the row (a class may hold devices of several
  // stages: the simulator runs the same program on each, and the bubble shown is `stage`'s).
  int64_t row_first_stage = -1, row_last_stage = -1;
  // "bubble 43.1% (stage 0)", or "bubble 43.1% (stage 0 of 0-3)" for a row of several stages.
  std::string Caption() const;
  std::vector<BubbleSpan> spans;  // in time order
  double seconds = 0;             // compute time in them (the accounting's bubble time)
  double share = 0;               // of the step time (0..1)
};

// The bubble of `device`'s timeline in `run` under `layout`: sim::BubbleOnTimeline at the device's
// stage's positions.
StepBubble DeviceBubble(const sim::RunResult& run, int64_t device, const PipelineStageLayout& layout);
// DeviceBubble of each device class's lowest-numbered device, by class index (the timeline's rows);
// empty when the run's device count is not the layout's.
std::vector<StepBubble> ClassBubbles(const sim::RunResult& run, const PipelineStageLayout& layout);

}  // namespace shardscope::views
