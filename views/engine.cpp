// Engine wiring: every #if __has_include below is a seam where an engine plugs in.
#include "views/engine.h"

#include <chrono>
#include <cstdio>
#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <mutex>
#include <unordered_set>

#include "core/ir/hlo_text.h"

#if __has_include("core/zoo/model_zoo.h")
#include "core/zoo/model_zoo.h"
#define SHARDSCOPE_HAVE_ZOO 1
#else
#define SHARDSCOPE_HAVE_ZOO 0
#endif

#if __has_include("partitioner/spmd/spmd_partitioner.h")
#include "core/eval/numeric_verify.h"
#include "partitioner/spmd/spmd_partitioner.h"
#define SHARDSCOPE_HAVE_PARTITIONER 1
#else
#define SHARDSCOPE_HAVE_PARTITIONER 0
#endif

#if __has_include("simulator/engine.h")
#include "simulator/collective_cost.h"
#include "simulator/engine.h"
#include "simulator/hardware.h"
#include "simulator/schedule.h"
#include "simulator/topology.h"
#define SHARDSCOPE_HAVE_SIMULATOR 1
#else
#define SHARDSCOPE_HAVE_SIMULATOR 0
#endif

#if __has_include("partitioner/propagation/sharding_propagation.h")
#include "partitioner/propagation/sharding_propagation.h"
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

namespace {
// How many devices a sharding talks about (tuple shardings: the most of their leaves).
int64_t DevicesNamedBy(const HloSharding& s) {
  if (s.IsTuple()) {
    int64_t n = 0;
    for (const auto& e : s.tuple_elements()) n = std::max(n, DevicesNamedBy(e));
    return n;
  }
  if (s.IsMaximal()) return s.maximal_device() + 1;
  return s.NumDevices();
}
}  // namespace

DeviceMesh GuessMesh(const Module& module) {
  // num_partitions when the module says so; many hand-written modules (XLA's own tests among them)
  // leave it out, so the devices their shardings name count too.
  int64_t n = std::max<int64_t>(1, module.num_partitions);
  for (const auto& c : module.computations())
    for (const auto& i : c->instructions())
      if (i->has_sharding()) n = std::max(n, DevicesNamedBy(*i->sharding()));
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

namespace {

#if SHARDSCOPE_HAVE_PARTITIONER
// The cost of every inserted collective on `chip`, on a slice shaped like the mesh.
void EstimateCollectives(const Module& spmd, const DeviceMesh& mesh, const std::string& chip,
                         std::vector<CollectiveInfo>& collectives) {
#if SHARDSCOPE_HAVE_SIMULATOR
  auto spec = ChipPreset(chip);
  if (!spec.ok()) return;
  auto topology = Topology::ForMesh(*spec, mesh);
  if (!topology.ok()) return;
  for (CollectiveInfo& c : collectives) {
    auto kind = CollectiveKindFromName(c.kind);
    if (!kind.ok()) continue;
    Result<CollectiveCost> cost = Error("");
    if (*kind == CollectiveKind::kCollectivePermute) {
      std::vector<std::pair<int64_t, int64_t>> pairs;
      for (const auto& p : c.groups)
        if (p.size() == 2) pairs.emplace_back(p[0], p[1]);
      cost = EstimateCollectivePermute(*topology, pairs, static_cast<double>(c.bytes_per_device));
    } else {
      cost = EstimateCollective(*topology, *kind, c.groups, static_cast<double>(c.bytes_per_device));
    }
    if (!cost.ok()) continue;
    c.estimated_seconds = cost->time_s;
    c.algorithm = cost->algorithm;
  }
  (void)spmd;
#else
  (void)spmd, (void)mesh, (void)chip, (void)collectives;
#endif
}

// Cheap upper bounds of what the evaluator would do, to decide whether to verify.
double ElementsOf(const Shape& s) {
  if (s.IsTuple()) {
    double n = 0;
    for (const Shape& t : s.tuple) n += ElementsOf(t);
    return n;
  }
  double n = 1;
  for (int64_t d = 0; d < s.rank(); ++d) n *= static_cast<double>(s.dim(d));
  return n;
}

VerificationVerdict VerifyIfSmall(const Module& original, const Module& spmd, int64_t devices,
                                  const PartitionRequestOptions& options) {
  VerificationVerdict v;
  const auto t0 = std::chrono::steady_clock::now();
  double elements = 0;
  for (const auto& c : original.computations())
    for (const auto& i : c->instructions()) elements += ElementsOf(i->shape());
  elements *= static_cast<double>(std::max<int64_t>(devices, 1));
#if SHARDSCOPE_HAVE_SIMULATOR
  const double flops = CountModuleFlops(original);
#else
  const double flops = 0;
#endif
  if (flops > options.max_verify_flops || elements > options.max_verify_elements) {
    v.state = VerificationVerdict::State::kSkipped;
    char buf[200];
    std::snprintf(buf, sizeof buf, "too large to evaluate here (%.3g FLOPs, %.3g elements over %lld devices)", flops,
                  elements, static_cast<long long>(devices));
    v.detail = buf;
    return v;
  }
  auto report = VerifyPartitioned(original, spmd, devices, /*seed=*/1);
  v.millis = MillisSince(t0);
  if (!report.ok()) {
    v.state = VerificationVerdict::State::kError;
    v.detail = report.error().message;
    return v;
  }
  v.state = report->match ? VerificationVerdict::State::kMatch : VerificationVerdict::State::kMismatch;
  v.max_abs_error = report->max_abs_error;
  v.tolerance = report->tolerance;
  v.detail = report->detail;
  return v;
}
#endif

}  // namespace

PartitionOutput RunPartitioner(std::unique_ptr<Module> module, const DeviceMesh& mesh,
                               const PartitionRequestOptions& request) {
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
  out.millis = MillisSince(t0);
  out.spmd_text = PrintHloModule(*result->module);
  out.became = result->origin_map;
  for (const auto& c : result->collectives) {
    CollectiveInfo info;
    info.origin = c.origin;
    info.instruction = c.instruction;
    info.kind = std::string(OpcodeName(c.kind));
    info.bytes_per_device = c.bytes_per_device;
    info.replica_groups = c.replica_groups;
    info.reason = c.reason;
    if (const Instruction* inst = result->module->FindInstruction(c.instruction)) {
      if (c.kind == Opcode::kCollectivePermute) {
        for (const auto& [s, t] : inst->source_target_pairs) info.groups.push_back({s, t});
      } else {
        info.groups = inst->replica_groups.groups;
      }
    }
    info.halo = c.kind == Opcode::kCollectivePermute && c.reason.rfind("halo exchange", 0) == 0;
    out.collectives.push_back(std::move(info));
  }
  out.chip = DefaultChip();
  EstimateCollectives(*result->module, mesh, out.chip, out.collectives);
  out.replicated_fallbacks = result->replicated_fallbacks;
  if (request.verify) out.verification = VerifyIfSmall(*module, *result->module, mesh.num_devices(), request);
  out.spmd = std::shared_ptr<const Module>(std::move(result->module));
  out.message = "partitioned into " + std::to_string(mesh.num_devices()) + " devices with " +
                std::to_string(out.collectives.size()) + " collectives";
#else
  out.message = "the SPMD partitioner is not built in";
#endif
  return out;
}

// ---- Simulation ----------------------------------------------------------------------------------

#if SHARDSCOPE_HAVE_SIMULATOR && SHARDSCOPE_HAVE_PARTITIONER
namespace {

// Inverts the partitioner's original -> SPMD map. SPMD names outside the entry are qualified with
// the computation of their original ("body/add" became "add.1": "body/add.1"), the way timeline
// events name them. The first original wins when an SPMD instruction is listed twice.
std::map<std::string, std::string> SpmdOriginMap(const std::map<std::string, std::vector<std::string>>& became,
                                                 const std::vector<InsertedCollective>& collectives) {
  std::map<std::string, std::string> out;
  for (const auto& [original, spmd_names] : became) {
    const auto slash = original.rfind('/');
    const std::string computation = slash == std::string::npos ? std::string() : original.substr(0, slash + 1);
    for (const auto& spmd : spmd_names) {
      out.emplace(spmd, original);
      if (!computation.empty() && spmd.find('/') == std::string::npos) out.emplace(computation + spmd, original);
    }
  }
  for (const auto& c : collectives) {
    if (!c.origin.empty()) out.emplace(c.instruction, c.origin);
  }
  return out;
}

}  // namespace
#endif

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
  sim->run.origins = SpmdOriginMap(partitioned->origin_map, partitioned->collectives);
  out.run = std::make_shared<const RunResult>(std::move(sim->run));
  out.millis = MillisSince(t0);
  out.message = "simulated one step on " + std::to_string(topology->num_devices()) + " " + chip + " devices";
#else
  out.message = "the simulator is not built in";
#endif
  return out;
}

// ---- Run store -----------------------------------------------------------------------------------

struct RunDatabase::Impl {
  std::mutex mutex;  // RunStore is a connection: one call at a time
  RunStore store;
};

RunDatabase::RunDatabase(std::unique_ptr<Impl> impl, std::string path) : impl_(std::move(impl)), path_(std::move(path)) {}
RunDatabase::~RunDatabase() = default;

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
  auto impl = std::unique_ptr<Impl>(new Impl{{}, std::move(*store)});
  return std::shared_ptr<RunDatabase>(new RunDatabase(std::move(impl), path));
}

std::string RunDatabase::ProjectStorePath(const std::string& project_file) { return RunStore::DefaultStorePath(project_file); }

Result<int64_t> RunDatabase::Save(const RunResult& run, const std::function<bool()>& cancelled) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  SaveOptions options;
  if (cancelled) options.progress = [&cancelled](int64_t, int64_t) { return !cancelled(); };
  if (cancelled && cancelled()) return Error("run store '" + path_ + "': saving the run was cancelled");
  return impl_->store.SaveRun(run, options);
}

Result<std::vector<RunOverview>> RunDatabase::List() {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->store.ListRuns();
}

Result<RunResult> RunDatabase::Load(int64_t run_id) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->store.LoadRun(run_id, LoadDetail::kFull);
}

Status RunDatabase::SetLabel(int64_t run_id, const std::string& label) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->store.SetLabel(run_id, label);
}

Status RunDatabase::Delete(int64_t run_id) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->store.DeleteRun(run_id);
}

Result<RunComparison> RunDatabase::Compare(int64_t run_a, int64_t run_b) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->store.CompareRuns(run_a, run_b);
}


std::string RunModuleName(const RunInputs& inputs) {
  const std::string& n = inputs.module_name;
  constexpr std::string_view kSuffix = ".spmd";
  if (n.size() > kSuffix.size() && n.compare(n.size() - kSuffix.size(), kSuffix.size(), kSuffix) == 0) {
    return n.substr(0, n.size() - kSuffix.size());
  }
  return n;
}

bool SmallerIsBetter(const ComparedFigure& figure) {
  std::string name = figure.name;
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  return name.find("mfu") == std::string::npos && name.find("utili") == std::string::npos;
}

}  // namespace shardscope::views

// ---- Teaching ----------------------------------------------------------------------------------

#if __has_include("simulator/collective_steps.h")
#include "simulator/collective_cost.h"
#include "simulator/collective_steps.h"
#include "simulator/hardware.h"
#include "simulator/topology.h"
#define SHARDSCOPE_HAVE_TEACHING 1
#else
#define SHARDSCOPE_HAVE_TEACHING 0
#endif

namespace shardscope::views {

#if SHARDSCOPE_HAVE_TEACHING
namespace {

TeachingDevice ToTeachingDevice(const DeviceHolding& h) {
  TeachingDevice d;
  d.device = h.device;
  d.group = h.group;
  d.position = h.position;
  d.text = h.text;
  for (const auto& c : h.cells) d.cells.push_back({c.colour, c.fill});
  return d;
}

}  // namespace
#endif

TeachingPlan PlanTeaching(const TeachingRequest& request) {
  TeachingPlan plan;
  plan.request = request;
  plan.title = request.title;
#if SHARDSCOPE_HAVE_TEACHING
  if (plan.request.chip.empty()) plan.request.chip = DefaultChip();
  auto kind = CollectiveKindFromName(request.kind);
  if (!kind.ok()) {
    plan.message = kind.error().message;
    return plan;
  }
  plan.kind = std::string(CollectiveKindName(kind.value()));
  auto chip = ResolveChip(plan.request.chip);
  if (!chip.ok()) {
    plan.message = chip.error().message;
    return plan;
  }
  TopologyOptions topology_options;
  if (request.wraparound == "on") topology_options.wraparound = TopologyOptions::Wraparound::kAll;
  else if (request.wraparound == "off") topology_options.wraparound = TopologyOptions::Wraparound::kNone;
  else if (request.wraparound != "generation" && !request.wraparound.empty()) {
    plan.message = "wraparound must be generation, on or off, not '" + request.wraparound + "'";
    return plan;
  }
  if (request.mesh.num_devices() < 1) {
    plan.message = "the mesh has no devices";
    return plan;
  }
  auto topology = Topology::ForMesh(chip.value(), request.mesh, {}, topology_options);
  if (!topology.ok()) {
    plan.message = "cannot place mesh " + request.mesh.ToString() + " on " + plan.request.chip + ": " + topology.error().message;
    return plan;
  }
  plan.topology = topology->Describe();
  WalkthroughOptions options;
  options.mesh = request.mesh;
  options.collective.bidirectional = request.bidirectional;
  Result<CollectiveWalkthrough> walk = Error("not planned");
  if (kind.value() == CollectiveKind::kCollectivePermute) {
    auto pairs = ParseSourceTargetPairsText(request.groups);
    if (!pairs.ok()) {
      plan.message = "source-target pairs \"" + request.groups + "\": " + pairs.error().message;
      return plan;
    }
    walk = WalkThroughCollectivePermute(topology.value(), pairs.value(), request.operand_bytes, options);
  } else {
    auto groups = ParseReplicaGroupsText(request.groups);
    if (!groups.ok()) {
      plan.message = "replica groups \"" + request.groups + "\": " + groups.error().message;
      return plan;
    }
    walk = WalkThroughCollective(topology.value(), kind.value(), groups->groups, request.operand_bytes, options);
  }
  if (!walk.ok()) {
    plan.message = walk.error().message;
    return plan;
  }
  const CollectiveWalkthrough& w = walk.value();
  plan.ok = true;
  plan.summary = w.summary;
  plan.algorithm = w.algorithm;
  plan.halo = w.halo;
  plan.num_groups = w.num_groups;
  plan.group_size = w.group_size;
  plan.colour_count = w.colour_count;
  for (const auto& h : w.initial) plan.initial.push_back(ToTeachingDevice(h));
  for (const auto& s : w.steps) {
    TeachingStep step;
    step.phase = s.phase;
    step.caption = s.caption;
    for (const auto& t : s.transfers) {
      TeachingTransfer x;
      x.group = t.group;
      x.src = t.src_device;
      x.dst = t.dst_device;
      x.label = t.piece;
      x.chunks = t.chunks;
      x.bytes = t.bytes;
      x.reduce = t.reduce_on_arrival;
      x.half = t.half;
      x.wraparound = t.wraparound;
      x.on_chip = t.on_chip;
      x.hops = t.hops;
      x.part = t.part;
      step.transfers.push_back(std::move(x));
    }
    for (const auto& h : s.after) step.devices.push_back(ToTeachingDevice(h));
    plan.steps.push_back(std::move(step));
  }
  plan.formula = w.formula.text;
  plan.legend = w.formula.legend;
  plan.book = w.formula.book;
  plan.time_s = w.formula.time_s;
  plan.book_time_s = w.formula.book_time_s;
  if (plan.title.empty()) plan.title = plan.kind + " on " + request.mesh.ToString();
#else
  plan.message = "the simulator is not built in";
#endif
  return plan;
}

TeachingRequest TeachingRequestFor(const CollectiveInfo& collective, const DeviceMesh& mesh) {
  TeachingRequest r;
  r.kind = collective.kind;
  r.mesh = mesh;
  r.groups = collective.replica_groups;
#if SHARDSCOPE_HAVE_TEACHING
  if (r.groups.empty() && !collective.groups.empty()) {
    // Only the numbers: write them as text (pairs for a collective-permute).
    if (collective.kind == "collective-permute") {
      std::vector<std::pair<int64_t, int64_t>> pairs;
      for (const auto& p : collective.groups) {
        if (p.size() == 2) pairs.emplace_back(p[0], p[1]);
      }
      r.groups = SourceTargetPairsText(pairs);
    } else {
      r.groups = ReplicaGroupsText(collective.groups);
    }
  }
#endif
  r.operand_bytes = static_cast<double>(collective.bytes_per_device);
  r.chip = DefaultChip();
  r.title = collective.instruction + (collective.origin.empty() ? "" : " for " + collective.origin) +
            (collective.reason.empty() ? "" : ": " + collective.reason);
  return r;
}

namespace {

struct ExampleSpec {
  const char* name;
  const char* title;
  const char* kind;
  const char* mesh;
  std::vector<std::string> axes;  // replica groups over these mesh axes; permute: the shift axis
  double bytes;
  const char* chip;  // "" = the default chip
  const char* wraparound;
};

const std::vector<ExampleSpec>& ExampleSpecs() {
  static const std::vector<ExampleSpec> specs = {
      {"all-gather-ring", "All-gather over X \u2014 rings of 4 with wraparound (4\u00D74 torus)", "all-gather", "X=4,Y=4",
       {"X"}, 8388608, "", "on"},
      {"all-gather-line", "All-gather over Y \u2014 lines of 4 without wraparound (book case C1: TPU v5e, 8\u00D74)",
       "all-gather", "X=8,Y=4", {"Y"}, 8388608, "tpu-v5e", "generation"},
      {"reduce-scatter", "Reduce-scatter over Y \u2014 partial sums flow to their owners (4\u00D74 torus)", "reduce-scatter",
       "X=4,Y=4", {"Y"}, 4 * 8388608.0, "", "on"},
      {"all-reduce", "All-reduce over X \u2014 reduce-scatter, then all-gather (4\u00D74 torus)", "all-reduce", "X=4,Y=4",
       {"X"}, 4 * 8388608.0, "", "on"},
      {"all-reduce-xy", "All-reduce over X and Y \u2014 both axes at once (4\u00D74 torus)", "all-reduce", "X=4,Y=4",
       {"X", "Y"}, 16 * 1048576.0, "", "on"},
      {"all-to-all", "All-to-all over X \u2014 every device sends a piece to every other (4\u00D74 torus)", "all-to-all",
       "X=4,Y=4", {"X"}, 4 * 2097152.0, "", "on"},
      {"halo-exchange", "Halo exchange along Y \u2014 collective-permute by +1, no wraparound (4\u00D74 mesh)",
       "collective-permute", "X=4,Y=4", {"Y"}, 65536, "", "off"},
  };
  return specs;
}

}  // namespace

std::vector<TeachingExample> TeachingExamples() {
  std::vector<TeachingExample> out;
  for (const auto& s : ExampleSpecs()) out.push_back({s.name, s.title});
  return out;
}

std::optional<TeachingRequest> TeachingExampleRequest(const std::string& name) {
#if SHARDSCOPE_HAVE_TEACHING
  for (const auto& s : ExampleSpecs()) {
    if (name != s.name) continue;
    auto mesh = DeviceMesh::Parse(s.mesh);
    if (!mesh.ok()) return std::nullopt;
    TeachingRequest r;
    r.title = s.title;
    r.kind = s.kind;
    r.mesh = mesh.value();
    r.operand_bytes = s.bytes;
    r.chip = *s.chip ? std::string(s.chip) : DefaultChip();
    r.wraparound = s.wraparound;
    if (r.kind == "collective-permute") {
      auto pairs = ShiftPairsAlongAxis(r.mesh, s.axes.front(), +1, /*cyclic=*/false);
      if (!pairs.ok()) return std::nullopt;
      r.groups = SourceTargetPairsText(pairs.value());
    } else {
      auto groups = ReplicaGroupsForAxes(r.mesh, s.axes);
      if (!groups.ok()) return std::nullopt;
      r.groups = ReplicaGroupsText(groups.value());
    }
    return r;
  }
#else
  (void)name;
#endif
  return std::nullopt;
}

}  // namespace shardscope::views
