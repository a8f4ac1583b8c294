// The one place in views/ that knows which engines exist (model zoo, HLO parser, sharding
// propagation, SPMD partitioner, simulator). Everything else in views/ talks to these functions and
// plain structs, so wiring or replacing an engine is a change here only.
//
// Nothing here touches Qt widgets; the functions are safe to call from a worker thread as long as
// each PropagationSession is used by one thread at a time.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/ir.h"
#include "core/mesh.h"
#include "core/sharding.h"
#include "core/status.h"
#include "simulator/run_result.h"

namespace shardscope::views {

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
  double millis = 0;
};

// Partitions `module`, whose instructions carry the complete shardings (annotated + propagated).
PartitionOutput RunPartitioner(std::unique_ptr<Module> module, const DeviceMesh& mesh);

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

}  // namespace shardscope::views
