#include <charconv>

#include "app/search/depth.h"
#include "app/search/family.h"

namespace shardscope::search {

const std::vector<const StrategyFamily*>& StrategyFamilies() {
  // A new family is one file and one line here.
  static const std::vector<const StrategyFamily*> families = {
      &InLayerFamily(),
      &DataParallelFamily(),
      &WeightUpdateShardingFamily(),
      &PipeliningFamily(),
      &ExpertParallelFamily(),
      &SpatialFamily(),
  };
  return families;
}

const StrategyFamily* FindFamily(std::string_view name) {
  for (const StrategyFamily* f : StrategyFamilies())
    if (f->name() == name) return f;
  return nullptr;
}

const std::vector<std::string_view>& StrategyChoiceSettings() {
  static const std::vector<std::string_view> keys = {"annotations", "mesh_x", "mesh_y", "stages", "schedule"};
  return keys;
}

SearchSpace::SearchSpace(std::string model, ZooOverrides settings, Pod pod)
    : model_(std::move(model)), settings_(std::move(settings)), pod_(std::move(pod)) {
  for (const ZooModel& m : ZooList()) {
    if (m.name != model_) continue;
    parameters_ = m.parameters;
    known_ = true;
  }
}

bool SearchSpace::HasParameter(std::string_view name) const {
  for (const ZooParameter& p : parameters_)
    if (p.name == name) return true;
  return false;
}

std::string SearchSpace::Setting(std::string_view name) const {
  if (auto it = settings_.find(name); it != settings_.end()) return it->second;
  for (const ZooParameter& p : parameters_)
    if (p.name == name) return p.default_value;
  return {};
}

int64_t SearchSpace::IntSetting(std::string_view name, int64_t fallback) const {
  const std::string v = Setting(name);
  int64_t out = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  return ec == std::errc() && p == v.data() + v.size() ? out : fallback;
}

bool SearchSpace::AcceptsAnnotations(const std::string& set) const {
  if (!HasParameter("annotations")) return false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto it = accepts_.find(set); it != accepts_.end()) return it->second;
  }
  Candidate probe;
  probe.model = model_;
  probe.settings = settings_;
  probe.settings["annotations"] = set;
  if (HasParameter("mesh_x")) probe.settings["mesh_x"] = std::string("1");
  if (HasParameter("mesh_y")) probe.settings["mesh_y"] = std::string("1");
  if (auto depth = DepthRuleOf(model_, [this](std::string_view k) { return Setting(k); }))
    probe.settings[depth->parameter] = std::to_string(depth->unit);
  const bool ok = BuildCandidateModule(probe).ok();
  std::lock_guard<std::mutex> lock(mutex_);
  accepts_[set] = ok;
  return ok;
}

Candidate SearchSpace::Base(std::string family, std::string strategy, const MeshChoice& mesh) const {
  Candidate c;
  c.family = std::move(family);
  c.strategy = std::move(strategy);
  c.model = model_;
  c.settings = settings_;
  c.chip = pod_.chip_name;
  c.cores_per_chip = pod_.chip.cores_per_chip;
  c.slice = pod_.SliceText();
  c.mesh = mesh.mesh.ToString();
  c.placement = mesh.order;
  // A pipelined model on a mesh without a stage axis runs as one stage (its in-layer and data-parallel
  // strategies), unless the user fixed the stages; the pipelining family sets them per mesh.
  if (HasParameter("stages") && mesh.mesh.AxisIndex("L") < 0 && !settings_.count("stages")) c.settings["stages"] = "1";
  return c;
}

}  // namespace shardscope::search
