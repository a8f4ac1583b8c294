// Engine wiring: every #if __has_include below is a seam where an engine plugs in.
#include "views/engine.h"

#include <chrono>
#include <cmath>

#include "core/hlo_text.h"

#if __has_include("core/model_zoo.h")
#include "core/model_zoo.h"
#define SHARDSCOPE_HAVE_ZOO 1
#else
#define SHARDSCOPE_HAVE_ZOO 0
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
#endif
  return out;
}

std::string DefaultExampleName() { return "transformer-layer"; }

Result<LoadedModel> BuildExample(const std::string& name) {
#if SHARDSCOPE_HAVE_ZOO
  auto built = ZooBuild(name);
  if (!built.ok()) return built.error();
  LoadedModel m;
  m.module = std::move(built->module);
  m.mesh = built->mesh;
  m.description = built->description;
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
  int placeholder = 0;
};

PropagationSession::PropagationSession(std::unique_ptr<Module> module, DeviceMesh mesh)
    : module_(std::move(module)), mesh_(std::move(mesh)), engine_(std::make_unique<EngineState>()) {}

PropagationSession::~PropagationSession() = default;

PropagationOutput PropagationSession::Run(const std::map<int64_t, HloSharding>& annotations) {
  const auto t0 = std::chrono::steady_clock::now();
  PropagationOutput out;
  // Without an engine the only shardings known are the user's.
  for (const auto& [id, s] : annotations) {
    PropagatedTensor t;
    t.sharding = s;
    t.user = true;
    t.why.push_back({id, "", "annotated by the user"});
    out.tensors.emplace(id, std::move(t));
  }
  out.engine_available = false;
  out.message = "sharding propagation is not built in: showing annotations only";
  last_annotations_ = annotations;
  out.millis = MillisSince(t0);
  return out;
}

// ---- Partitioning ------------------------------------------------------------------------------

PartitionOutput RunPartitioner(std::unique_ptr<Module> module, const DeviceMesh& mesh) {
  PartitionOutput out;
  out.engine_available = false;
  out.message = "the SPMD partitioner is not built in yet";
  return out;
}

}  // namespace shardscope::views
