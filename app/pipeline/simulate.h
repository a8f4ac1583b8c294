// The simulate and store stages of the analysis pipeline: one step of an SPMD program on a
// modelled slice (simulator/engine.h), and the SQLite run store (simulator/run_store.h) behind a
// mutex so a GUI's worker threads can share one connection.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/base/cancellation.h"
#include "core/base/status.h"
#include "core/ir/ir.h"
#include "core/sharding/mesh.h"
#include "simulator/engine.h"
#include "simulator/hardware.h"
#include "simulator/run_result.h"
#include "simulator/run_store.h"
#include "simulator/topology.h"
#include "app/pipeline/slice_options.h"

namespace shardscope::pipeline {

using namespace ::shardscope::sim;  // the simulator's types are the pipeline's

// The chip estimates and simulations use when none is named: "tpu-v4".
std::string DefaultChip();
// The slice `mesh` runs on: `chip` (a preset name or a chip .json file) shaped like the mesh with
// the generation's wraparound rule, unless `options` overrides the shape, wraparound, placement or
// cores per chip. An override that cannot hold the mesh is an error that says why ("cannot place
// mesh X=64 on tpu-v3 with slice 4x4: ...").
Result<Topology> SliceForMesh(const std::string& chip, const DeviceMesh& mesh, const SliceOptions& options = {});

// Simulates one step of `program` (an SPMD program: per-device shapes) on `topology`. `origins`
// (SPMD instruction -> original instruction, SpmdOrigins) is kept with the run so its timeline
// events can be traced back to the module that was partitioned.
Result<Simulation> SimulateStep(const Module& program, const Topology& topology, const SimulationOptions& options = {},
                                std::map<std::string, std::string> origins = {}, const CancellationToken& cancel = {});

// The SQLite store of simulation runs with every call serialised on a mutex: one RunDatabase may be
// shared by threads. Every method may wait on the disk.
class RunDatabase {
 public:
  // Opens the store at `path`, creating the file (and its folder) when missing. Errors name the file
  // and say what is wrong ("not a ShardScope run store", "written by a newer ShardScope", ...).
  static Result<std::shared_ptr<RunDatabase>> Open(const std::string& path);
  // The store that belongs to a project file: "dir/model.shardscope" -> "dir/model.runs.sqlite".
  static std::string ProjectStorePath(const std::string& project_file);

  RunDatabase(const RunDatabase&) = delete;
  RunDatabase& operator=(const RunDatabase&) = delete;

  const std::string& path() const { return path_; }
  // Stores `run` in one transaction and returns its id. A cancelled token (checked while writing)
  // stores nothing and gives an error.
  Result<int64_t> Save(const RunResult& run, const CancellationToken& cancel = {});
  Result<std::vector<RunOverview>> List();  // oldest first
  Result<RunResult> Load(int64_t run_id);   // with all per-device detail
  Status SetLabel(int64_t run_id, const std::string& label);
  Status Delete(int64_t run_id);
  Result<RunComparison> Compare(int64_t run_a, int64_t run_b);
  Result<std::optional<int64_t>> FindByKey(const std::string& key);
  // RunStore::MergeFrom: every run of the store at `other_path`, replacing runs with the same key.
  Result<MergeReport> MergeFrom(const std::string& other_path, const CancellationToken& cancel = {});

 private:
  RunDatabase(RunStore store, std::string path) : store_(std::move(store)), path_(std::move(path)) {}
  std::mutex mutex_;  // RunStore is one connection: one call at a time
  RunStore store_;
  std::string path_;
};

}  // namespace shardscope::pipeline
