// Engine wiring: every #if __has_include below is a seam where an engine plugs in.
#include "views/engine.h"

#include <chrono>
#include <algorithm>
#include <cmath>
#include <unordered_set>

#include "core/hlo_text.h"

#if __has_include("core/model_zoo.h")
#include "core/model_zoo.h"
#define SHARDSCOPE_HAVE_ZOO 1
#else
#define SHARDSCOPE_HAVE_ZOO 0
#endif

#if __has_include("partitioner/spmd_partitioner.h")
#include "partitioner/spmd_partitioner.h"
#define SHARDSCOPE_HAVE_PARTITIONER 1
#else
#define SHARDSCOPE_HAVE_PARTITIONER 0
#endif

#if __has_include("simulator/engine.h")
#include "simulator/engine.h"
#include "simulator/hardware.h"
#include "simulator/schedule.h"
#include "simulator/topology.h"
#define SHARDSCOPE_HAVE_SIMULATOR 1
#else
#define SHARDSCOPE_HAVE_SIMULATOR 0
#endif

#if __has_include("partitioner/propagation.h")
#include "partitioner/propagation.h"
#define SHARDSCOPE_HAVE_PROPAGATION 1
#else
#define SHARDSCOPE_HAVE_PROPAGATION 0
#endif

namespace shardscope::views {

namespace {

double MillisSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

// ---- Examples ----------------------------------------------------------------------------------

std::vector<ExampleInfo> ListExamples() {
  std::vector<ExampleInfo> out;
#if SHARDSCOPE_HAVE_ZOO
  for (const auto& e : ZooList()) out.push_back({e.name, e.description});
  // The default example first.
  std::stable_partition(out.begin(), out.end(), [](const ExampleInfo& e) { return e.name == DefaultExampleName(); });
#endif
  return out;
}

std::string DefaultExampleName() {
#if SHARDSCOPE_HAVE_ZOO
  return std::string(kZooDefaultExample);
#else
  return "transformer-layer";
#endif
}

Result<LoadedModel> BuildExample(const std::string& name) {
#if SHARDSCOPE_HAVE_ZOO
  auto built = ZooBuild(name);
  if (!built.ok()) return built.error();
  auto mesh = ZooMesh(name);
  if (!mesh.ok()) return mesh.error();
  LoadedModel m;
  m.module = std::move(*built);
  m.mesh = *mesh;
  for (const auto& e : ZooList()) {
    if (e.name == name) m.description = e.description;
  }
  return m;
#else
  return Error("example '" + name + "' is not available: this build has no model zoo");
#endif
}

Result<std::unique_ptr<Module>> ParseModuleText(const std::string& text, const std::string& filename) {
  return ParseHloModule(text, filename);
}

std::string PrintModuleText(const Module& module) { return PrintHloModule(module); }

DeviceMesh GuessMesh(const Module& module) {
  const int64_t n = std::max<int64_t>(1, module.num_partitions);
  if (const Computation* entry = module.entry()) {
    for (const auto& inst : entry->instructions()) {
      if (!inst->has_sharding()) continue;
      const HloSharding& s = *inst->sharding();
      if (!s.IsTiled() || s.tile_assignment().num_elements() != n) continue;
      std::vector<MeshAxis> axes;
      static const char* kNames[] = {"X", "Y", "Z", "W", "V", "U"};
      for (int64_t d : s.tile_assignment().dims()) {
        if (d <= 1) continue;
        if (axes.size() >= 6) break;
        axes.push_back({kNames[axes.size()], d});
      }
      int64_t product = 1;
      for (const auto& a : axes) product *= a.size;
      if (!axes.empty() && product == n) return DeviceMesh(axes);
    }
  }
  int64_t a = static_cast<int64_t>(std::floor(std::sqrt(static_cast<double>(n))));
  while (a > 1 && n % a != 0) --a;
  if (a <= 1) return DeviceMesh({{"X", n}});
  return DeviceMesh({{"X", a}, {"Y", n / a}});
}

// ---- Propagation -------------------------------------------------------------------------------

bool PropagationEngineAvailable() { return SHARDSCOPE_HAVE_PROPAGATION != 0; }

struct PropagationSession::EngineState {
#if SHARDSCOPE_HAVE_PROPAGATION
  std::unique_ptr<ShardingPropagation> propagation;
#endif
  bool ran = false;
};

PropagationSession::PropagationSession(std::unique_ptr<Module> module, DeviceMesh mesh)
    : module_(std::move(module)), mesh_(std::move(mesh)), engine_(std::make_unique<EngineState>()) {}

PropagationSession::~PropagationSession() = default;

namespace {

std::unordered_map<int64_t, Instruction*> IndexById(const Module& module) {
  std::unordered_map<int64_t, Instruction*> by_id;
  for (const auto& comp : module.computations()) {
    for (const auto& inst : comp->instructions()) by_id.emplace(inst->id(), inst.get());
  }
  return by_id;
}

}  // namespace

PropagationOutput PropagationSession::Run(const std::map<int64_t, HloSharding>& annotations) {
  const auto t0 = std::chrono::steady_clock::now();
  PropagationOutput out;
  const auto by_id = IndexById(*module_);
#if SHARDSCOPE_HAVE_PROPAGATION
  out.engine_available = true;
  // What changed since the last run (added, removed or different annotations).
  std::vector<Instruction*> changed;
  if (engine_->ran && last_annotations_) {
    for (const auto& [id, s] : annotations) {
      auto it = last_annotations_->find(id);
      if (it == last_annotations_->end() || !(it->second == s)) {
        if (auto inst = by_id.find(id); inst != by_id.end()) changed.push_back(inst->second);
      }
    }
    for (const auto& [id, s] : *last_annotations_) {
      if (!annotations.count(id)) {
        if (auto inst = by_id.find(id); inst != by_id.end()) changed.push_back(inst->second);
      }
    }
  }
  Result<PropagationReport> report = Error("not run");
  if (engine_->ran && last_annotations_) {
    for (Instruction* inst : changed) {
      auto a = annotations.find(inst->id());
      if (a != annotations.end()) inst->set_sharding(a->second);
      else inst->clear_sharding();
    }
    if (changed.empty()) {
      PropagationReport same;
      same.incremental = true;
      report = same;
    } else {
      report = engine_->propagation->Update(*module_, changed);
    }
  } else {
    for (const auto& [id, inst] : by_id) {
      auto a = annotations.find(id);
      if (a != annotations.end()) inst->set_sharding(a->second);
      else inst->clear_sharding();
    }
    PropagationOptions options;
    options.propagate_to_output = {true};
    options.propagate_to_parameters = {true};
    engine_->propagation = std::make_unique<ShardingPropagation>(options);
    report = engine_->propagation->Run(*module_);
    engine_->ran = report.ok();
  }
  last_annotations_ = annotations;
  if (!report.ok()) {
    out.ok = false;
    out.message = "sharding propagation failed: " + report.error().message;
    engine_->ran = false;  // start from scratch next time
    return out;
  }
  out.incremental = report->incremental;
  for (const auto& [id, inst] : by_id) {
    if (!inst->has_sharding()) continue;
    PropagatedTensor t;
    t.sharding = *inst->sharding();
    t.user = annotations.count(id) != 0;
    for (const ExplainStep& step : engine_->propagation->Explain(*inst)) {
      WhyStep w;
      if (step.instruction) {
        w.instruction_id = step.instruction->id();
        w.instruction = step.instruction->name();
      }
      w.sharding = step.sharding == "none" ? "" : step.sharding;
      w.direction = std::string(prop::DirectionName(step.origin.direction));
      w.rule = std::string(step.origin.rule);
      if (step.origin.source) {
        w.source_id = step.origin.source->id();
        w.source = step.origin.source->name();
      }
      if (step.origin.second_source) {
        w.second_source_id = step.origin.second_source->id();
        w.second_source = step.origin.second_source->name();
      }
      w.level = step.origin.aggressiveness;
      w.iteration = step.origin.iteration;
      w.text = step.text;
      t.why.push_back(std::move(w));
    }
    out.tensors.emplace(id, std::move(t));
  }
  int64_t user = 0, inferred = 0, unsharded = 0;
  for (const auto& [id, inst] : by_id) {
    if (!inst->has_sharding()) ++unsharded;
    else if (annotations.count(id)) ++user;
    else ++inferred;
  }
  out.millis = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  char buf[256];
  std::snprintf(buf, sizeof buf, "%s propagation: %lld annotated, %lld inferred, %lld unsharded (%.1f ms)",
                out.incremental ? "incremental" : "full", static_cast<long long>(user),
                static_cast<long long>(inferred), static_cast<long long>(unsharded), out.millis);
  out.message = buf;
  if (!report->unsupported_ops.empty()) {
    out.message += "; no rule for:";
    for (const auto& op : report->unsupported_ops) out.message += " " + op;
  }
  return out;
#else
  // Without an engine the only shardings known are the user's.
  for (const auto& [id, s] : annotations) {
    PropagatedTensor t;
    t.sharding = s;
    t.user = true;
    WhyStep w;
    w.instruction_id = id;
    w.direction = "annotation";
    w.sharding = s.ToString();
    w.text = "annotated by the user";
    t.why.push_back(std::move(w));
    out.tensors.emplace(id, std::move(t));
  }
  out.engine_available = false;
  out.message = "sharding propagation is not built in: showing annotations only";
  last_annotations_ = annotations;
  out.millis = MillisSince(t0);
  return out;
#endif
}

// ---- Partitioning ------------------------------------------------------------------------------

PartitionOutput RunPartitioner(std::unique_ptr<Module> module, const DeviceMesh& mesh) {
  const auto t0 = std::chrono::steady_clock::now();
  PartitionOutput out;
#if SHARDSCOPE_HAVE_PARTITIONER
  out.engine_available = true;
  if (!module) {
    out.message = "no module";
    return out;
  }
  SpmdOptions options;
  options.num_partitions = mesh.num_devices();
  module->num_partitions = mesh.num_devices();
  auto result = PartitionModule(*module, options);
  if (!result.ok()) {
    out.message = "SPMD partitioning failed: " + result.error().message;
    return out;
  }
  out.ok = true;
  out.spmd_text = PrintHloModule(*result->module);
  out.spmd = std::shared_ptr<const Module>(std::move(result->module));
  out.became = result->origin_map;
  for (const auto& c : result->collectives) {
    out.collectives.push_back({c.origin, c.instruction, std::string(OpcodeName(c.kind)), c.bytes_per_device,
                               c.replica_groups, c.reason});
  }
  out.replicated_fallbacks = result->replicated_fallbacks;
  out.millis = MillisSince(t0);
  out.message = "partitioned into " + std::to_string(mesh.num_devices()) + " devices with " +
                std::to_string(out.collectives.size()) + " collectives";
#else
  out.message = "the SPMD partitioner is not built in";
#endif
  return out;
}

// ---- Simulation ----------------------------------------------------------------------------------

std::vector<std::string> ChipPresets() {
#if SHARDSCOPE_HAVE_SIMULATOR
  return ChipPresetNames();
#else
  return {};
#endif
}

std::string DefaultChip() {
  const auto presets = ChipPresets();
  for (const auto& p : presets) {
    if (p == "tpu-v4") return p;
  }
  return presets.empty() ? std::string() : presets.front();
}

SimulationOutput RunSimulation(std::unique_ptr<Module> module, const DeviceMesh& mesh, const std::string& chip,
                               const std::string& label) {
  const auto t0 = std::chrono::steady_clock::now();
  SimulationOutput out;
#if SHARDSCOPE_HAVE_SIMULATOR && SHARDSCOPE_HAVE_PARTITIONER
  out.engine_available = true;
  if (!module) {
    out.message = "no module";
    return out;
  }
  auto spec = ChipPreset(chip);
  if (!spec.ok()) {
    out.message = spec.error().message;
    return out;
  }
  auto topology = Topology::ForMesh(*spec, mesh);
  if (!topology.ok()) {
    out.message = "cannot place mesh " + mesh.ToString() + " on " + chip + ": " + topology.error().message;
    return out;
  }
  const double model_flops = CountModuleFlops(*module);
  SpmdOptions so;
  so.num_partitions = topology->num_devices();
  module->num_partitions = topology->num_devices();
  auto partitioned = PartitionModule(*module, so);
  if (!partitioned.ok()) {
    out.message = "SPMD partitioning failed: " + partitioned.error().message;
    return out;
  }
  out.collectives = static_cast<int64_t>(partitioned->collectives.size());
  SimulationOptions options;
  options.mesh_text = mesh.ToString();
  options.label = label;
  options.model_flops = model_flops;
  auto sim = Simulate(*partitioned->module, *topology, options);
  if (!sim.ok()) {
    out.message = "simulation failed: " + sim.error().message;
    return out;
  }
  out.ok = true;
  out.warnings = sim->warnings;
  out.description = DescribeSimulation(*sim);
  out.run = std::make_shared<const RunResult>(std::move(sim->run));
  out.millis = MillisSince(t0);
  out.message = "simulated one step on " + std::to_string(topology->num_devices()) + " " + chip + " devices";
#else
  out.message = "the simulator is not built in";
#endif
  return out;
}

}  // namespace shardscope::views
