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
#include <vector>

#include "simulator/schedule.h"

namespace shardscope::sim {

struct PipelineLoop {
  int32_t loop = -1;   // index into ExecProgram::loops
  int32_t shift = -1;  // the collective-permute of iteration 0 that shifts the buffer (ExecProgram::ops)
  int64_t stages = 0;  // P: devices in each chain or ring
  int64_t trips = 0;   // T
  bool ring = false;   // a rotation (circular schedule) rather than a chain
  std::vector<int64_t> position;  // by device: its place along the flow, 0 .. P - 1

  // Whether `device` computes on padding in iteration t (0 <= t < trips; false otherwise).
  bool Padded(int64_t device, int64_t t) const;
};

struct PipelineStructure {
  std::vector<PipelineLoop> loops;  // in program order
  // By op of the program: the pipeline loop it runs in (index into `loops`; -1: none; an op of a
  // loop nested in a pipeline iteration belongs to that iteration) and that loop's iteration.
  std::vector<int32_t> op_loop;
  std::vector<int64_t> op_iteration;

  bool pipelined() const { return !loops.empty(); }
  int64_t stages() const;  // the largest P (0: not pipelined)
  // Whether op `op` is bubble work on `device`.
  bool InBubble(size_t op, int64_t device) const;
};

// The pipeline loops of `program` run on `num_devices` devices.
PipelineStructure FindPipelineStructure(const ExecProgram& program, int64_t num_devices);

}  // namespace shardscope::sim
