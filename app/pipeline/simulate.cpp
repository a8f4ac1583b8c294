#include "app/pipeline/simulate.h"

#include <filesystem>

namespace shardscope::pipeline {

std::string DefaultChip() {
  const auto& presets = ChipPresetNames();
  for (const auto& p : presets) {
    if (p == "tpu-v4") return p;
  }
  return presets.empty() ? std::string() : presets.front();
}

Result<Topology> SliceForMesh(const std::string& chip, const DeviceMesh& mesh, const SliceOptions& options) {
  auto spec = ResolveChip(chip);
  if (!spec.ok()) return spec.error();
  if (options.cores_per_chip) {
    auto c = WithCoresPerChip(*spec, *options.cores_per_chip);
    if (!c.ok()) return c.error();
    spec = std::move(c);
  }
  auto topology = Topology::ForMesh(*spec, mesh, options.shape, options.ToTopologyOptions());
  if (!topology.ok()) {
    const std::string with = options.empty() ? std::string() : " with " + options.ToString();
    return Error("cannot place mesh " + mesh.ToString() + " on " + chip + with + ": " + topology.error().message);
  }
  return topology;
}

Result<Simulation> SimulateStep(const Module& program, const Topology& topology, const SimulationOptions& options,
                                std::map<std::string, std::string> origins, const CancellationToken& cancel) {
  if (cancel.cancelled()) return CancelledError("the simulation");
  auto sim = Simulate(program, topology, options);
  if (!sim.ok()) return sim.error();
  if (!origins.empty()) sim->run.origins = std::move(origins);
  return sim;
}

// ---- RunDatabase ---------------------------------------------------------------------------------

Result<std::shared_ptr<RunDatabase>> RunDatabase::Open(const std::string& path) {
  if (path.empty()) return Error("run store: no database path");
  std::error_code ec;
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (!dir.empty() && !std::filesystem::exists(dir, ec)) {
    std::filesystem::create_directories(dir, ec);
    if (ec) return Error("run store '" + path + "': cannot create the folder '" + dir.string() + "': " + ec.message());
  }
  auto store = RunStore::Open(path, RunStore::OpenMode::kCreate);
  if (!store.ok()) return store.error();
  return std::shared_ptr<RunDatabase>(new RunDatabase(std::move(store).value(), path));
}

std::string RunDatabase::ProjectStorePath(const std::string& project_file) {
  return RunStore::DefaultStorePath(project_file);
}

Result<int64_t> RunDatabase::Save(const RunResult& run, const CancellationToken& cancel) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (cancel.cancelled()) return Error("run store '" + path_ + "': saving the run was cancelled");
  SaveOptions options;
  options.progress = [&cancel](int64_t, int64_t) { return !cancel.cancelled(); };
  return store_.SaveRun(run, options);
}

Result<std::vector<RunOverview>> RunDatabase::List() {
  std::lock_guard<std::mutex> lock(mutex_);
  return store_.ListRuns();
}

Result<RunResult> RunDatabase::Load(int64_t run_id) {
  std::lock_guard<std::mutex> lock(mutex_);
  return store_.LoadRun(run_id, LoadDetail::kFull);
}

Status RunDatabase::SetLabel(int64_t run_id, const std::string& label) {
  std::lock_guard<std::mutex> lock(mutex_);
  return store_.SetLabel(run_id, label);
}

Status RunDatabase::Delete(int64_t run_id) {
  std::lock_guard<std::mutex> lock(mutex_);
  return store_.DeleteRun(run_id);
}

Result<RunComparison> RunDatabase::Compare(int64_t run_a, int64_t run_b) {
  std::lock_guard<std::mutex> lock(mutex_);
  return store_.CompareRuns(run_a, run_b);
}

Result<std::optional<int64_t>> RunDatabase::FindByKey(const std::string& key) {
  std::lock_guard<std::mutex> lock(mutex_);
  return store_.FindRunByKey(key);
}

Result<MergeReport> RunDatabase::MergeFrom(const std::string& other_path, const CancellationToken& cancel) {
  std::lock_guard<std::mutex> lock(mutex_);
  return store_.MergeFrom(other_path, [&cancel] { return !cancel.cancelled(); });
}

}  // namespace shardscope::pipeline
