// Pipelining as the simulator accounts for it (GSPMD §3.3; the "Bubbles" and "Recompute" rows of
// Tables 4 and 5): which compute of an unrolled program (simulator/schedule.h) is spent on padded
// microbatches, found from the program's structure alone, for any pipeline written the paper's way.
//
// A pipeline loop is a while loop whose body shifts a buffer from device to device: in one
// iteration a collective-permute whose source -> target pairs form disjoint chains (GPipe's
// pad + slice shift) or rings (the circular schedule's rotation), every one of the same length
// P >= 2, covering every device, with no other permute of that iteration sending the reverse way
// (a halo exchange sends both ways; a pipeline shift one way), and at least P iterations. Each
// device has a position p along the flow: 0 where data enters (a chain's device with nothing
// coming in; for a ring, the target of the one pair running against the others in device order —
// stage numbers grow with device ids along the mesh axis, so the rotation's wrap-around pair runs
// back to the first stage; a ring of two takes the lower id in the first pipeline loop of the
// program, the higher in later ones, which run the pipeline backwards).
//
// A loop of T iterations moves T - P + 1 microbatch visits through P positions, so the device at
// position p works on real data in iterations p .. p + T - P and on padding in the other P - 1:
// its compute in those iterations (every op of the iteration, in nested loops too) is the bubble.
// This holds for both schedules and for the backward loop (where the gradient enters at the last
// stage), and needs nothing from the model but the loop and its shift.
//
// Recompute is op by op: ExecOp::recompute (the remat markers of IsRematerialization).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "simulator/run_result.h"
#include "simulator/schedule.h"

namespace shardscope::sim {

// The one rule of what is bubble: in a pipeline loop of `trips` (T) iterations through `stages` (P)
// positions, the device at `position` p (0 where data enters) computes on padding in iteration t
// unless p <= t <= p + T - P. Everything that marks or counts bubbles (the engine's accounting, the
// timeline's marks, the teaching panel's table) asks this.
inline bool PaddedIteration(int64_t position, int64_t stages, int64_t trips, int64_t t) {
  if (stages < 2 || trips < stages || t < 0 || t >= trips) return false;
  return t < position || t > position + trips - stages;
}

// The closed form of the bubble share, for an estimate before anything is simulated (the strategy
// search): each position computes on padding in P - 1 of the T iterations, (P - 1) / T — GPipe's
// (L - 1) / (N + L - 1) with T = N + L - 1. 0 when there is no pipeline (P < 2 or T < P).
double BubbleShareEstimate(int64_t stages, int64_t trips);

struct PipelineLoop {
  int32_t loop = -1;   // index into ExecProgram::loops
  int32_t shift = -1;  // the collective-permute of iteration 0 that shifts the buffer (ExecProgram::ops)
  int64_t stages = 0;  // P: devices in each chain or ring
  int64_t trips = 0;   // T
  bool ring = false;   // a rotation (circular schedule) rather than a chain
  std::vector<int64_t> position;  // by device: its place along the flow, 0 .. P - 1

  // Whether `device` computes on padding in iteration t (0 <= t < trips; false otherwise).
  bool Padded(int64_t device, int64_t t) const {
    if (device < 0 || static_cast<size_t>(device) >= position.size()) return false;
    return PaddedIteration(position[static_cast<size_t>(device)], stages, trips, t);
  }
};

struct PipelineStructure {
  std::vector<PipelineLoop> loops;  // in program order
  // By op of the program: the pipeline loop it runs in (index into `loops`; -1: none; an op of a
  // loop nested in a pipeline iteration belongs to that iteration) and that loop's iteration.
  std::vector<int32_t> op_loop;
  std::vector<int64_t> op_iteration;

  bool pipelined() const { return !loops.empty(); }
  int64_t stages() const;  // the largest P (0: not pipelined)
  // Whether op `op` is bubble work on `device` (inline: the engine asks it for every op of every
  // pipeline position).
  bool InBubble(size_t op, int64_t device) const {
    if (op >= op_loop.size() || op_loop[op] < 0) return false;
    return loops[static_cast<size_t>(op_loop[op])].Padded(device, op_iteration[op]);
  }
};

// The pipeline loops of `program` run on `num_devices` devices.
PipelineStructure FindPipelineStructure(const ExecProgram& program, int64_t num_devices);

// The bubble on one device's simulated timeline, for views that show a stored or fresh run (which
// carries no ExecProgram): the caller names the pipeline loops by their body computation (as in
// event names, "forward_body" for "forward_body.spmd/dot.3[2]") and the device's position in each.
// An event of iteration [t] of such a body is bubble when PaddedIteration says so.
struct TimelinePipelineLoop {
  std::string body;
  std::string condition;  // the loop's condition computation (the engine counts its ops as the loop's); may be empty
  int64_t position = 0;
};
struct TimelineBubbleSpan {
  double start_s = 0, end_s = 0;  // the padded iteration's extent on the device (every stream)
  std::string loop;               // the loop body ("forward_body")
  int64_t iteration = 0;
};
struct TimelineBubble {
  std::vector<TimelineBubbleSpan> spans;  // in time order
  // Compute-stream time of the padded iterations: RunSummary::bubble_time_s's measure, so the mean
  // of `seconds` over the devices is the summary's bubble time.
  double seconds = 0;
  double share = 0;  // seconds over the step time (0..1)
};
// Loops with fewer iterations than `stages` are not pipelines and have no bubble. Ops of a loop
// nested inside a pipeline iteration carry their own body's name and are not counted here (the
// engine's accounting counts them; the zoo's pipelines have no nested loops).
TimelineBubble BubbleOnTimeline(const RunResult& run, int64_t device, int64_t stages,
                                const std::vector<TimelinePipelineLoop>& loops);

}  // namespace shardscope::sim
