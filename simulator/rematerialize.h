// Rematerialisation under the memory limit, as XLA's HloRematerialization pass does when a
// scheduled program needs more memory than the device has: a value that is live across the peak
// but not used there is freed after its last use before the peak and computed again just before
// its next use after it. XLA compiles for TPU with the HBM size as that limit, so a configuration
// whose straightforward schedule peaks a little above HBM still runs — slower by the recomputed
// work. Without this pass the simulator would call such a program "does not fit" although XLA
// compiles and runs it (GSPMD Table 2's 128-device and 1T columns, docs/reproduce.md).
//
// The pass works on the program as the memory model measures it with ops one after another
// (simulator/memory_model.h, the same peak as schedule.cpp's memory-limit choice). As XLA's
// RematerializeComputation, it walks the program in order, and at each instant above the limit:
//  - the candidates are the buffers live there that the op running then does not read, defined by
//    a compute op (never a collective, a parameter or a side-effecting op), not part of the step's
//    result, and whose recomputation keeps nothing else alive longer: every buffer the defining op
//    reads is still live when the value is needed again (a weight's bf16 convert, whose f32
//    weight is kept for the update anyway, is the typical one);
//  - they are taken cheapest first (recompute seconds per byte freed, as XLA ranks its candidates
//    by cost over memory saved) until that instant fits; the later instants see what they freed;
//  - each taken value gets a clone of its defining op ("<op>.remat", ExecOp::recompute set, so the
//    run's recompute time counts it) placed just before the value's next use; later readers read
//    the clone's new buffer (XLA makes one clone per remaining use; here the later readers share
//    it, and the walk may take the value again between two of them).
// One walk is one pass over the whole program, whatever the number of instants above the limit
// (the unrolled microbatch loops of a pipelined step have one per iteration). A further pass
// measures the rewritten program and walks it again while that lowers the peak (up to 8); a pass
// that does not lower it is undone. It stops when the peak fits, when no instant above the limit
// has a candidate left, or after `max_values`.
#pragma once

#include <cstdint>

#include "simulator/schedule.h"

namespace shardscope::sim {

struct RematerializationResult {
  int64_t values = 0;          // values recomputed (clones added)
  int64_t bytes = 0;           // their bytes (each no longer kept across its peak)
  double added_time_s = 0;     // compute time of the clones (roofline, before overlap)
  int64_t peak_before = 0;     // sequential peak before and after
  int64_t peak_after = 0;
  int passes = 0;              // walks over the program that were kept
};

// Rewrites `program` in place; a program that fits (or a limit <= 0) is left unchanged.
RematerializationResult RematerializeToFit(ExecProgram* program, int64_t limit_bytes, int64_t max_values = 100000);

}  // namespace shardscope::sim
