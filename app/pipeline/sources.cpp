#include "app/pipeline/sources.h"

#include <algorithm>
#include <cmath>

#include "core/ir/hlo_text.h"

namespace shardscope::pipeline {

std::vector<ZooModel> Examples() {
  std::vector<ZooModel> out = ZooList();
  std::stable_partition(out.begin(), out.end(), [](const ZooModel& m) { return m.name == kZooDefaultExample; });
  return out;
}

std::string DefaultExample() { return std::string(kZooDefaultExample); }

Result<LoadedModel> BuildZooModel(const std::string& name, const ZooOverrides& overrides) {
  auto built = ZooBuild(name, overrides);
  if (!built.ok()) return built.error();
  auto mesh = ZooMesh(name, overrides);
  if (!mesh.ok()) return mesh.error();
  LoadedModel m;
  m.module = std::move(built).value();
  m.mesh = std::move(mesh).value();
  for (const auto& e : ZooList()) {
    if (e.name == name) m.description = e.description;
  }
  return m;
}

Result<LoadedModel> ParseModel(const std::string& text, const std::string& filename) {
  auto parsed = ParseHloModule(text, filename);
  if (!parsed.ok()) return parsed.error();
  LoadedModel m;
  m.module = std::move(parsed).value();
  m.mesh = GuessMesh(*m.module);
  return m;
}

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

}  // namespace shardscope::pipeline
