// Method 2 of the strategy search: an integer program over per-instruction sharding choices (the
// Alpa / XLA auto-sharding formulation), for any HLO module — one of the zoo's or one read from a
// file. docs/search.md ("Method 2") describes it; in short, for one device mesh of the pod:
//
//   * every array instruction of the entry computation gets a set of strategies: how its result is
//     split (each dimension unsharded or split over one mesh axis, each axis used at most once, only
//     where the axis divides the dimension) and which operand shardings it then needs. Dots get
//     Alpa's strategies (batch, either free dimension or the contracting dimension split; the
//     contracting split needs an all-reduce of the result), reduces may split a reduced dimension
//     (an all-reduce), broadcasts / transposes / same-size dimensions pass splits through, other
//     ops need their operands unsplit where a dimension changes. An elementwise op follows its first
//     operand (it takes the operand's choice: one variable for the chain). Parameters, constants:
//     any split.
//   * node cost (seconds): the instruction's compute time on one device for its shard (the
//     simulator's roofline, simulator/compute_cost.h) plus the collective the strategy itself needs,
//     priced by the simulator's collective model on the pod's topology (simulator/collectives).
//   * edge cost: resharding the producer's result to the sharding the consumer needs (all-to-all
//     when an axis moves to another dimension, all-gather when it is dropped, a slice — free — when
//     one is added), priced the same way.
//   * one binary per (instruction group, strategy), exactly one per group; per edge continuous
//     variables e[k][l] >= 0 with sum_l e[k][l] = s_u[k] and sum_k e[k][l] = s_v[l] (for binary s
//     they are the products s_u[k] s_v[l]: the linearisation of the edge cost);
//   * memory: the entry parameters' shard bytes per device <= the chip's HBM.
//
// The solution annotates a copy of the module (entry parameters and dot results) with HloSharding;
// that copy then goes through the search's evaluation (propagate -> partition -> simulate), so the
// step time and peak memory reported are the simulator's; the program's objective is reported
// beside them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "app/pipeline/simulate.h"
#include "app/search/candidate.h"
#include "app/search/evaluate.h"
#include "app/search/mesh_space.h"
#include "core/base/cancellation.h"
#include "core/base/status.h"
#include "core/ir/ir.h"

namespace shardscope::search {

struct AutoShardingOptions {
  // The meshes to solve on ("X=2,Y=4"; named axes, one or two). Empty: the pod's 1-D mesh X=N and
  // every 2-D factorisation X x Y with both axes >= 2 (EnumerateMeshes).
  std::vector<std::string> meshes;
  // The size limit: a program with more variables than this is refused before it is solved (the
  // 32-layer Transformer of GSPMD Table 2 on a 2-D mesh of 128 devices has 561091; CBC solves it
  // in about 30 s, docs/search.md).
  int64_t max_variables = 1000000;
  double time_limit_s = 120;    // the solver's, per mesh; then the best solution found
  double hbm_bytes = 0;         // the memory constraint's capacity; 0: the chip's HBM per device
  bool annotate_dots = true;    // besides the parameters, the dots' results
  bool annotate_all = false;    // every array instruction of the entry computation (the whole plan)
  // Entry instructions the module already annotates keep their sharding when it is one of their
  // strategies (a split of whole dimensions over the mesh's axes) and they have variables of their
  // own (parameters, dots, ...; not an elementwise op that follows its operand): the program
  // chooses the rest. Off: every annotation of the entry computation is dropped and chosen afresh.
  bool keep_annotations = false;
  bool keep_modules = false;    // each solved plan keeps a copy of its annotated module (annotated)
  // What identifies the candidates (Candidate): a zoo model with its settings, or an HLO file
  // (Candidate::hlo_file, hlo_hash). AutoShard fills family, strategy, chip, slice, mesh.
  Candidate source;
  EvaluationOptions evaluation;                  // extrapolation does not apply (the module is given)
  std::shared_ptr<pipeline::RunDatabase> store;  // null: nothing stored
};

// One sharding chosen for an entry parameter.
struct ChosenSharding {
  std::string instruction;
  std::string named;     // "[I_X, J]" (core/sharding/mesh.h's notation)
  std::string sharding;  // HloSharding text
  int64_t bytes_per_device = 0;
};

// The integer program on one mesh, solved.
struct AutoShardingPlan {
  MeshChoice mesh;
  int64_t instructions = 0;  // array instructions of the entry computation in the program
  int64_t groups = 0;        // after elementwise chains follow their operand
  int64_t edges = 0;         // producer/consumer group pairs with a resharding cost
  int64_t variables = 0, binaries = 0, constraints = 0;
  double build_s = 0, solve_s = 0;
  std::string status;        // "optimal", "infeasible", ... (MilpStatusName)
  bool solved = false;       // a solution (optimal or at the time limit)
  double objective_s = 0;    // the program's estimate of the step (seconds)
  double compute_s = 0, communication_s = 0;  // its two parts (node compute; node collectives + edges)
  int64_t parameter_bytes = 0;  // per device, the memory constraint's left side
  double hbm_bytes = 0;         // its right side
  std::vector<ChosenSharding> parameters;
  std::unique_ptr<Module> module;  // the annotated copy (solved only)
  // With AutoShardingOptions::keep_modules, a copy of `module` that outlives its evaluation (the
  // GUI opens a chosen plan from it).
  std::shared_ptr<const Module> annotated;
};

// Builds and solves the program for `module` on one placed mesh of `pod`. An error for input it
// cannot take (no entry, a mesh that divides no dimension, over the size limit); an infeasible
// program is a plan with solved = false and status "infeasible".
Result<AutoShardingPlan> SolveAutoSharding(const Module& module, const Pod& pod, const MeshChoice& mesh,
                                           const AutoShardingOptions& options, const CancellationToken& cancel = {});

struct AutoShardingResult {
  Pod pod;
  std::vector<AutoShardingPlan> plans;        // per mesh, in order (module moved into the evaluation)
  std::vector<CandidateResult> ranked;        // the simulated plans, ranked as the search ranks
  std::vector<size_t> pareto;
  std::vector<std::pair<size_t, size_t>> plan_of_ranked;  // (ranked index, plans index)
  std::vector<std::string> notes;             // meshes skipped or infeasible
  double wall_s = 0;
};

// Method 2's entry point (the CLI's `search FILE.hlo`, the GUI's worker thread): solves the program
// on every mesh of the options (`cancel` is checked between meshes and stages; a solve itself runs
// until it is done or reaches time_limit_s), evaluates every solution through the same pipeline as method 1's
// candidates, stores each as a run (options.store) and ranks them. Error when no mesh has a
// solution (each mesh's reason in the message: "infeasible: the parameters need at least ...").
Result<AutoShardingResult> AutoShard(const Module& module, const Pod& pod, const AutoShardingOptions& options,
                                     const CancellationToken& cancel = {});

// The plan's text for people: mesh, program size, solve time, objective, the parameters' shardings.
std::string DescribePlan(const AutoShardingPlan& plan);

}  // namespace shardscope::search
