// The one place in views/ that knows which engines exist (model zoo, HLO parser, sharding
// propagation, SPMD partitioner, simulator). Everything else in views/ talks to these functions and
// plain structs, so wiring or replacing an engine is a change here only.
//
// Nothing here touches Qt widgets; the functions are safe to call from a worker thread as long as
// each PropagationSession is used by one thread at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/ir/ir.h"
#include "core/sharding/mesh.h"
#include "core/sharding/sharding.h"
#include "core/base/status.h"
#include "simulator/run_result.h"
#include "simulator/run_store.h"  // value types only (RunComparison, ComparedFigure): use RunDatabase below

namespace shardscope::views {

// The simulator's value types (RunResult, RunComparison, ...) are the views' own.
using namespace ::shardscope::sim;

// ---- Examples ----------------------------------------------------------------------------------

struct ExampleInfo {
  std::string name;         // "transformer-layer"
  std::string description;  // one line
};

struct LoadedModel {
  std::unique_ptr<Module> module;  // shardings on instructions are the user annotations
  DeviceMesh mesh;
  std::string description;
};

// The examples the application offers (File > Examples). Never empty when a zoo is built in.
std::vector<ExampleInfo> ListExamples();
// The example shown at start-up.
std::string DefaultExampleName();
Result<LoadedModel> BuildExample(const std::string& name);

// Parses HLO text. Errors carry "FILE:LINE:COLUMN: error: ..." in their message.
Result<std::unique_ptr<Module>> ParseModuleText(const std::string& text, const std::string& filename);
std::string PrintModuleText(const Module& module);

// A mesh that fits a module read from a file: the shape of its first tiled sharding whose tile
// assignment spans every partition, else a near-square 2-D mesh over num_partitions.
DeviceMesh GuessMesh(const Module& module);

// ---- Propagation -------------------------------------------------------------------------------

// One link of a "why is this tensor sharded like that?" chain.
struct WhyStep {
  int64_t instruction_id = -1;  // the instruction this step is about (-1 when none)
  std::string instruction;      // its name
  std::string sharding;         // its sharding, HLO text ("" when none)
  std::string direction;        // "annotation", "forward", "backward", "shard-group", ...
  std::string rule;             // op family / rule ("dot", "elementwise", ...)
  int64_t source_id = -1;       // the instruction it was derived from
  std::string source;           // that instruction's name
  int64_t second_source_id = -1;  // merged in from a second operand (dot), -1 when none
  std::string second_source;
  int level = -1;               // propagation priority level 0..3
  int64_t iteration = -1;       // sweep
  std::string text;             // the engine's own one-line explanation
};

struct PropagatedTensor {
  HloSharding sharding;
  bool user = false;           // given by the user (an annotation), not inferred
  std::vector<WhyStep> why;    // provenance chain, nearest cause first
};

struct PropagationOutput {
  bool engine_available = false;  // false: only the user's annotations are known
  bool ok = true;
  std::string message;            // error or summary for the status bar
  std::unordered_map<int64_t, PropagatedTensor> tensors;  // by Instruction::id()
  bool incremental = false;       // true when produced by an incremental update
  double millis = 0;
};

// Owns a private copy of the module and (when the engine has one) its propagation state. Give it
// the full set of annotations every time; it works out what changed and updates incrementally
// when it can. Not thread-safe: one thread at a time (the Document's worker).
class PropagationSession {
 public:
  PropagationSession(std::unique_ptr<Module> module, DeviceMesh mesh);
  ~PropagationSession();
  PropagationSession(const PropagationSession&) = delete;
  PropagationSession& operator=(const PropagationSession&) = delete;

  PropagationOutput Run(const std::map<int64_t, HloSharding>& annotations);
  const Module& module() const { return *module_; }

 private:
  struct EngineState;
  std::unique_ptr<Module> module_;
  DeviceMesh mesh_;
  std::unique_ptr<EngineState> engine_;
  std::optional<std::map<int64_t, HloSharding>> last_annotations_;
};

// True when a sharding propagation engine is compiled in.
bool PropagationEngineAvailable();

// ---- Partitioning ------------------------------------------------------------------------------

struct CollectiveInfo {
  std::string origin;       // the original instruction that caused it
  std::string instruction;  // the SPMD instruction
  std::string kind;         // "all-gather", "reduce-scatter", ...
  int64_t bytes_per_device = 0;
  std::string replica_groups;
  std::string reason;       // "dot: contracting dim sharded", "reshard {..} -> {..}", ...
  // The groups as numbers (collective-permute: one {source, target} pair per entry).
  std::vector<std::vector<int64_t>> groups;
  bool halo = false;               // a halo exchange (collective-permute between neighbours)
  double estimated_seconds = -1;   // on the default chip, a slice shaped like the mesh; -1: unknown
  std::string algorithm;           // how the simulator runs it ("bidirectional ring along ...")
};

// The numerical check of a partitioning (core/numeric_verify.h): the SPMD program on N virtual
// devices against the original on one, with the same random inputs.
struct VerificationVerdict {
  enum class State { kNotRun, kMatch, kMismatch, kError, kSkipped };
  State state = State::kNotRun;
  double max_abs_error = 0;
  double tolerance = 0;
  std::string detail;  // the first mismatch, the error, or why it was skipped
  double millis = 0;
};

struct PartitionOutput {
  bool engine_available = false;
  bool ok = false;
  std::string message;
  std::shared_ptr<const Module> spmd;  // the partitioned program (per-device shapes)
  std::string spmd_text;               // the same as HLO text
  // original instruction name (computation-qualified outside the entry) -> SPMD instructions
  std::map<std::string, std::vector<std::string>> became;
  std::vector<CollectiveInfo> collectives;
  std::vector<std::string> replicated_fallbacks;  // ops partitioned by replicating their operands
  VerificationVerdict verification;
  std::string chip;                               // the chip the estimates are for
  double millis = 0;                              // partitioning only
};

struct PartitionRequestOptions {
  bool verify = true;  // check the program numerically when it is small enough
  // Above this many floating-point operations (original module) verification is skipped: the
  // evaluator runs the original once and the SPMD program on every device.
  double max_verify_flops = 4e8;
  double max_verify_elements = 4e7;  // sum of every instruction's element count x devices
};

// Partitions `module`, whose instructions carry the complete shardings (annotated + propagated),
// estimates each collective on DefaultChip() and, when small enough, verifies the program
// numerically.
PartitionOutput RunPartitioner(std::unique_ptr<Module> module, const DeviceMesh& mesh,
                               const PartitionRequestOptions& options = {});

// ---- Simulation ----------------------------------------------------------------------------------

struct SimulationOutput {
  bool engine_available = false;
  bool ok = false;
  std::string message;
  std::shared_ptr<const RunResult> run;
  std::vector<std::string> warnings;
  std::string description;  // the engine's summary lines
  int64_t collectives = 0;  // collectives in the partitioned program
  double millis = 0;
};

// Chip presets the simulator knows ("tpu-v4", ...) and the one used by default.
std::vector<std::string> ChipPresets();
std::string DefaultChip();
// Partitions `module` (which carries complete shardings) for `mesh` and simulates one step on a
// slice of `chip` chips shaped like the mesh.
SimulationOutput RunSimulation(std::unique_ptr<Module> module, const DeviceMesh& mesh, const std::string& chip,
                               const std::string& label);

// ---- Run store -----------------------------------------------------------------------------------

// The SQLite store of simulation runs (simulator/run_store.h) behind one small class: views use
// this, never the store itself. Every method may wait on the disk, so call them on a worker
// thread. Calls are serialised on an internal mutex: one RunDatabase may be shared by threads.
class RunDatabase {
 public:
  // Opens the store at `path`, creating the file (and its directory) when missing. Errors name the
  // file and say what is wrong ("not a ShardScope run store", "written by a newer ShardScope",
  // "unable to open database file", ...).
  static Result<std::shared_ptr<RunDatabase>> Open(const std::string& path);
  // The store that belongs to a project file: "dir/model.shardscope" -> "dir/model.runs.sqlite".
  static std::string ProjectStorePath(const std::string& project_file);

  ~RunDatabase();
  RunDatabase(const RunDatabase&) = delete;
  RunDatabase& operator=(const RunDatabase&) = delete;

  const std::string& path() const { return path_; }
  // Stores `run` in one transaction and returns its id. `cancelled` (may be empty) is polled while
  // writing; when it returns true nothing is stored and the result is an error.
  Result<int64_t> Save(const RunResult& run, const std::function<bool()>& cancelled = {});
  Result<std::vector<RunOverview>> List();  // oldest first
  Result<RunResult> Load(int64_t run_id);   // with all per-device detail
  Status SetLabel(int64_t run_id, const std::string& label);
  Status Delete(int64_t run_id);
  Result<RunComparison> Compare(int64_t run_a, int64_t run_b);

 private:
  struct Impl;
  explicit RunDatabase(std::unique_ptr<Impl> impl, std::string path);
  std::unique_ptr<Impl> impl_;
  std::string path_;
};

// The figures RunDatabase::Compare gives, for two runs that are not both stored (a store that could
// not be opened keeps runs in memory only).
using ::shardscope::sim::CompareRunOverviews;  // simulator/run_store.h

// The module a run was made from: RunInputs::module_name without the partitioner's ".spmd" suffix
// (the simulator records the name of the SPMD program it ran).
std::string RunModuleName(const RunInputs& inputs);

// For every figure of a comparison: true when a smaller value is better (times, bytes), false when
// a larger one is (MFU).
bool SmallerIsBetter(const ComparedFigure& figure);

}  // namespace shardscope::views

// ---- Teaching ----------------------------------------------------------------------------------
// Step through one collective on the mesh (simulator/collectives/walkthrough.h): the transfers of every
// synchronous step, what each device holds after it, and the cost formula with its numbers.

namespace shardscope::views {

// A collective to step through.
struct TeachingRequest {
  std::string title;        // one line above the mesh ("all-gather.3 for dot.1: ...")
  std::string kind;         // "all-gather", "reduce-scatter", "all-reduce", "all-to-all", "collective-permute"
  DeviceMesh mesh;
  // Replica groups as text ("{{0,1},{2,3}}", "[2,2]<=[4]", "" for one group of every device); for a
  // collective-permute the source-target pairs ("{{0,1},{1,2}}").
  std::string groups;
  double operand_bytes = 0;   // per device (all-gather: the shard; the others: the whole buffer)
  std::string chip;           // a chip preset; "" = DefaultChip()
  std::string wraparound = "generation";  // "generation" (the chip's rule), "on" or "off"
  bool bidirectional = true;  // rings use both directions of every link
};

struct TeachingTransfer {
  int64_t group = 0;
  int64_t src = -1, dst = -1;  // devices
  std::string label;           // "shard 3", "half of shard 2", "partial sum of chunk 1 (2 of 4 added)", ...
  std::vector<int64_t> chunks;
  double bytes = 0;
  bool reduce = false;         // added to the receiver's copy on arrival
  bool half = false;           // carries half of what its label names (a dashed arrow)
  bool wraparound = false;     // crosses a wraparound link
  bool on_chip = false;        // between devices of one chip (free, not drawn)
  int64_t hops = 0;
  int64_t part = 0;
};

struct TeachingCell {
  int64_t colour = -1;  // group position whose data it is (-1: empty)
  double fill = 0;      // 0..1
};

struct TeachingDevice {
  int64_t device = -1;
  int64_t group = -1;     // -1: not in any group
  int64_t position = -1;  // its position in the group (the shard / chunk it owns)
  std::vector<TeachingCell> cells;
  std::string text;
};

struct TeachingStep {
  std::string phase;    // "" or "reduce-scatter" / "all-gather" for an all-reduce
  std::string caption;  // "Step 2 of 3: ..."
  std::vector<TeachingTransfer> transfers;
  std::vector<TeachingDevice> devices;  // after the step, by device id
};

struct TeachingPlan {
  bool ok = false;
  std::string message;      // why it failed (a person can act on it)
  TeachingRequest request;  // what was asked (chip filled in)
  std::string title, kind, summary, algorithm, topology, halo;
  int64_t num_groups = 0, group_size = 0, colour_count = 0;
  std::vector<TeachingDevice> initial;  // before step 1
  std::vector<TeachingStep> steps;
  std::string formula;               // "T = max(...) = max(1.00 µs × 2, 12.6 MB / 45.0 GB/s) = 280 µs (bandwidth-bound)"
  std::vector<std::string> legend;   // what each symbol stands for, with its value
  std::string book;                  // the book's closed form with its numbers
  double time_s = 0, book_time_s = 0;
};

// Plans the walkthrough (quick for meshes of a few hundred devices; runs on the calling thread).
TeachingPlan PlanTeaching(const TeachingRequest& request);
// A collective of the partitioned program, on the document's mesh and the default chip.
TeachingRequest TeachingRequestFor(const CollectiveInfo& collective, const DeviceMesh& mesh);

struct TeachingExample {
  std::string name;   // "all-gather-ring"
  std::string title;  // "All-gather over X — a ring of 4 (4×4 torus)"
};
// Ready-made collectives to explore without partitioning anything; the first is the default.
std::vector<TeachingExample> TeachingExamples();
// The request for an example; nullopt for an unknown name.
std::optional<TeachingRequest> TeachingExampleRequest(const std::string& name);

}  // namespace shardscope::views
