// From an SPMD module to the flat program one device executes: the "executable program" the event
// engine (simulator/engine.h) runs and the memory model (simulator/memory_model.h) measures.
//
// What BuildExecProgram does, in order:
//  1. Orders each computation: program order (the instructions as written, which is a valid
//     topological order), or, with ScheduleKind::kCollectivesEarly, a list schedule that starts
//     every collective as early as its operands allow (see below).
//  2. Fuses (FusionOptions::fuse_elementwise, on by default), per computation:
//     - broadcast, iota and partition-id/replica-id whose users are all compute ops are inlined
//       into them (never materialised; their consumers read the broadcast's small operand);
//     - an elementwise op joins the fusion group of an operand (output fusion into a dot,
//       convolution, reduce, ..., or a chain of elementwise ops) when all its other operands were
//       computed before the group's first member (so grouping can never create a cycle);
//     - a reduce joins its operand's group when that group holds only elementwise ops (an input
//       fusion);
//     - multi-input loop fusion: an elementwise op's loop group then takes in the loop groups
//       (elementwise ops, slices, transposes; no dot, convolution or reduce) of its other operands
//       of its element count, when no op between the two needs the earlier one (so no cycle and no
//       reordering); the merged op runs at the later one's place (docs/simulator-engine.md).
//     A group runs as one compute op: FLOPs of its dots/convolutions, bytes = the buffers it reads
//     from outside plus the values it writes that are used outside (roofline on the sum). Values
//     used only inside a group are never materialised. Slices and dynamic-slices read only what
//     they keep; dynamic-update-slice writes only its update, and a scatter of one operand reads
//     and writes only the region its updates touch (both run in place, as XLA runs them).
//  3. Expands control flow: while loops are unrolled by their trip count (backend_config
//     known_trip_count, else the pattern `compare(get-tuple-element(param, i), constant)` with the
//     counter's init value and step, else SimulationOptions::default_trip_count with a warning);
//     the condition runs trip+1 times; call and conditional bodies are inlined (a conditional runs
//     the branch its constant predicate/index selects, otherwise branch 0, with a warning). When a
//     loop's iteration 3 is its iteration 2 with shifted ids and names, iterations 4 and later are
//     written from it instead of expanded (replay_loop_iterations; the same program).
//  4. Tracks buffers: every materialised array value is a Buffer (bytes, category, definer);
//     tuple, get-tuple-element, bitcast, reshape, opt-barrier, domain and the -done halves of async
//     pairs are aliases (no memory, no time). Parameters and constants are live from time 0.
//     In-place reuse (MemoryOptions::in_place_reuse): an op may take over the buffer of an operand
//     whose last use it is — same size: elementwise/fused groups, all-reduce; any size (the buffer
//     is resized): slice, dynamic-slice, gather, dynamic-update-slice and scatter (operand 0), all-gather,
//     reduce-scatter. This mirrors XLA's buffer sharing for elementwise and in-place ops and is
//     what makes the weight-update-sharding memory formula (validation M1) come out exactly.
//
// Collectives are separate ops (never fused). The async forms (all-gather-start/-done, ...) are the
// same collective: -start is the op, -done an alias of its result.
//
// Scheduling kCollectivesEarly: a topological list schedule per computation whose priority is
// (collective first, then instructions feeding the earliest collective, then program order). The
// engine starts each collective as soon as its operand is ready anyway; this schedule makes the
// operands ready sooner so collectives overlap more compute (and buffers may live longer).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/ir/ir.h"
#include "core/ir/replica_groups.h"
#include "core/base/status.h"
#include "simulator/collectives/cost.h"
#include "simulator/hardware.h"
#include "simulator/run_result.h"

namespace shardscope::sim {

enum class ScheduleKind : uint8_t {
  kProgramOrder,      // instructions in the order written
  kCollectivesEarly,  // list schedule: collectives (and what feeds them) as early as possible
  kMemoryList,        // list schedule: the ready instruction that frees the most bytes net first
  kMemoryLimit,       // program order while it fits HBM, else the memory list schedule if it peaks lower (default)
};
std::string_view ScheduleKindName(ScheduleKind k);  // "program-order" | "collectives-early" | "memory-list" | "memory-limit"
Result<ScheduleKind> ScheduleKindFromName(std::string_view name);

struct ExecProgramOptions {
  ScheduleKind schedule = ScheduleKind::kMemoryLimit;
  bool fuse_elementwise = true;
  // With fuse_elementwise: a cheap elementwise value read only by dots and convolutions is computed
  // inside each of them (XLA's producer fusion, duplicated into every consumer) instead of being
  // materialised, when it reads no more memory than it writes (schedule.cpp, MakePlan).
  bool fuse_producers_into_dots = true;
  // Trip count for while loops whose count cannot be found (a warning names the loop).
  int64_t default_trip_count = 1;
  // Guard against huge unrolls: an error when the expanded program would exceed this many ops.
  int64_t max_exec_ops = 5'000'000;
  bool in_place_reuse = true;
  // Entry parameters are donated (a training step's state is replaced by its outputs): they are
  // freed after their last use and may be reused in place. Off: parameters live the whole step.
  bool donate_parameters = true;
  // Devices the program runs on (Simulate sets the topology's count). Collectives take their
  // participants from XLA's group modes over num_replicas x (num_devices / num_replicas)
  // partitions; 0: the module's own num_replicas x num_partitions.
  int64_t num_devices = 0;
  // Buffer sizes as the chip lays arrays out in memory (simulator/buffer_layout.h: TPU tiles pad
  // small minor dimensions). Off: logical sizes (elements x element bytes). Bytes an op moves stay
  // logical either way (the compute model's traffic).
  bool pad_to_layout_tiles = true;
  // When the program peaks above the device's HBM (ops one after another), recompute values live
  // across the peak instead of keeping them, as XLA's rematerialization pass does under the memory
  // limit (simulator/rematerialize.h).
  bool rematerialize = true;
  // The target of rematerialisation (0: the device's HBM); Simulate lowers it when the run's
  // overlapped peak exceeds the sequential one.
  int64_t rematerialize_limit_bytes = 0;
  // Names of compute ops and of the buffers ops define (ExecOp::name, Buffer::name): what timelines
  // and the list of buffers live at the peak show. Off: left empty — building a name per op and
  // per buffer of every unrolled iteration was a good part of the build, and a run without
  // timelines (SimulationOptions::timelines, the strategy search's) reads none. Collectives,
  // loops, parameters and constants are named either way (RunResult::collectives lists them).
  bool names = true;
  // Unrolling writes a while loop's iterations after the third from the second and third when
  // those repeat each other exactly but for ids, iteration numbers and names (schedule.cpp,
  // "Loop replay"): the same program, built faster. Off: every iteration expanded (tests).
  bool replay_loop_iterations = true;
};

enum class ExecKind : uint8_t { kCompute, kCollective };

// One unit of work on a device: a (fused) compute op on the compute stream, or a collective on the
// communication stream.
struct ExecOp {
  ExecKind kind = ExecKind::kCompute;
  std::string name;  // instruction name; "comp/name" outside the entry; "[i]" per enclosing loop
                     // (empty for a compute op built without names: ExecProgramOptions::names)
  std::string kind_name;  // "dot", "fusion", "reduce", "all-gather", ...
  double duration_s = 0;  // compute ops: roofline time
  double flops = 0;       // dot/convolution FLOPs
  double bytes = 0;       // compute: bytes accessed; collective: operand bytes per device
  int32_t collective = -1;  // index into ExecProgram::collectives
  std::vector<int32_t> deps;   // ops that must finish first (ascending, unique)
  std::vector<int32_t> uses;   // buffers read
  std::vector<int32_t> defs;   // buffers written (allocated when the op starts)
  // (output buffer, operand buffer): the output takes over the operand's memory when the op starts.
  std::vector<std::pair<int32_t, int32_t>> in_place;
  int32_t members = 1;  // instructions fused into this op
  // The innermost while loop this op runs in (index into ExecProgram::loops; -1: none) and the
  // iteration of that loop (0-based; the condition's last evaluation has iteration == trips).
  int32_t loop = -1;
  int64_t iteration = 0;
  // Rematerialisation: the op re-executes forward work in the backward pass (one of its
  // instructions carries a remat marker: IsRematerialization below).
  bool recompute = false;
};

// One while loop as unrolled into the program.
struct ExecLoop {
  std::string name;  // the while instruction, qualified as op names are ("forward", "body/while.3[2]")
  std::string body;  // the body computation's name
  int64_t trips = 0;
  int32_t parent = -1;            // the loop this one runs inside (-1: none)
  int64_t parent_iteration = 0;   // and in which of its iterations
};

struct Buffer {
  std::string name;  // the instruction that defines it ("x", "layer0_ffn_wi", "while.3{1}" for leaves;
                     // empty for an op's value built without names: ExecProgramOptions::names)
  int64_t bytes = 0;          // in device memory: padded to the chip's layout tiles (buffer_layout.h)
  int64_t logical_bytes = 0;  // elements x element bytes (what an op reads or writes)
  MemoryCategory category = MemoryCategory::kTemporaries;
  int32_t def_op = -1;  // -1: entry parameter or constant (allocated at time 0)
  bool is_parameter = false;
  bool is_constant = false;
  bool is_output = false;  // part of the entry result: live until the end of the step
  bool donated = false;    // parameter that may be freed after its last use
};

// A distinct collective (kind, groups and payload), shared by every op that performs it.
struct CollectiveSpec {
  CollectiveKind kind = CollectiveKind::kAllGather;
  std::vector<std::vector<int64_t>> groups;                // empty: one group of all devices
  std::vector<std::pair<int64_t, int64_t>> pairs;          // collective-permute
  double operand_bytes = 0;                                // per device (EstimateCollective's meaning)
  std::string groups_text;                                 // as in HLO text (abbreviated when huge)
};

struct ExecProgram {
  std::vector<ExecOp> ops;  // in issue order
  std::vector<Buffer> buffers;
  std::vector<CollectiveSpec> collectives;
  std::vector<ExecLoop> loops;  // every unrolled while loop, in the order they start
  std::vector<std::string> warnings;
  int64_t instructions = 0;  // instructions of the module considered
  double flops = 0;          // per device, one step
  // The order the ops were built in: the options' schedule, or for kMemoryLimit the one chosen
  // (kProgramOrder or kMemoryList), with the candidates' peaks when ops run one after another.
  ScheduleKind schedule = ScheduleKind::kProgramOrder;
  std::array<int64_t, 2> sequential_peak_bytes{};  // kMemoryLimit: {program order, memory list (0: not tried)}
  // Rematerialisation under the memory limit (ExecProgramOptions::rematerialize): values recomputed,
  // their bytes, and the sequential peak after it (0: the program fitted, nothing was tried).
  int64_t rematerialized_values = 0;
  int64_t rematerialized_bytes = 0;
  int64_t rematerialized_peak_bytes = 0;
  // Loop iterations written from the iterations before them (ExecProgramOptions::replay_loop_iterations).
  int64_t replayed_iterations = 0;
};

// Builds the program one device runs. `chip` prices compute ops (roofline).
Result<ExecProgram> BuildExecProgram(const Module& module, const ChipSpec& chip, const ExecProgramOptions& options = {});

// BuildExecProgram's last step, rematerialisation under the memory limit, split in two for a
// caller that keeps the program built without it (`rematerialize` off): the target it would
// rematerialise `program` to under `options` (nullopt: off, or the program's sequential peak is
// within it), and the step itself. Simulate rematerialises a copy again at a lower target instead
// of building the program again (the schedule chosen does not depend on the target).
std::optional<int64_t> RematerializationTarget(const ExecProgram& program, const ChipSpec& chip,
                                               const ExecProgramOptions& options);
void RematerializeTo(ExecProgram* program, int64_t target_bytes);

// The peak of `program` with its ops run one after another in issue order (memory_model.h): what
// the memory-limit schedule and rematerialisation (simulator/rematerialize.h) compare with HBM.
int64_t SequentialPeakBytes(const ExecProgram& program);

// Whether `i` is forward work recomputed in the backward pass (rematerialisation), by the markers
// the tools leave: XLA's rematerialization pass names its clones "<name>.remat" (".remat2", ...);
// JAX's checkpoint puts "remat" / "rematted_computation" / "checkpoint" in the op_name path; the
// model zoo scopes recomputed ops "backward/recompute/..." (core/zoo/pipelined_transformer.h). A
// path component of op_name metadata (split at '/') or a '.'-part of the name must match.
bool IsRematerialization(const Instruction& i);

// Trip count of a while instruction: known_trip_count, the counter pattern, or nullopt.
std::optional<int64_t> WhileTripCount(const Instruction& while_inst);

// FLOPs of dots and convolutions in the module with loops unrolled by their trip counts (unknown
// loops count once): the "useful" work of a step, e.g. of the unpartitioned module for MFU.
double CountModuleFlops(const Module& module);



}  // namespace shardscope::sim
