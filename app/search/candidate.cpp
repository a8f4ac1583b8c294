#include "app/search/candidate.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>

#include "core/base/json.h"
#include "core/ir/hlo_text.h"
#include "core/ir/verifier.h"
#include "simulator/memory_model.h"

namespace shardscope::search {

namespace {

constexpr std::string_view kModelPrefix = "model.";
constexpr std::string_view kOptionPrefix = "option.";

bool StartsWith(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

bool IsOn(std::string_view v) { return v == "1" || v == "true" || v == "on" || v == "yes"; }

uint64_t Fnv1a(std::string_view s, uint64_t h = 1469598103934665603ull) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace

Settings Candidate::ToSettings() const {
  Settings s = {{"search.model", model},
                {"search.family", family},
                {"search.strategy", strategy},
                {"search.chip", chip},
                {"search.cores_per_chip", std::to_string(cores_per_chip)},
                {"search.slice", slice},
                {"search.mesh", mesh},
                {"search.placement", placement}};
  if (!hlo_file.empty()) {
    s.emplace_back("search.hlo_file", hlo_file);
    s.emplace_back("search.hlo_hash", hlo_hash);
  }
  for (const auto& [k, v] : settings) s.emplace_back(std::string(kModelPrefix) + k, v);  // ZooOverrides is sorted
  Settings opts = options;
  std::sort(opts.begin(), opts.end());
  for (const auto& [k, v] : opts) s.emplace_back(std::string(kOptionPrefix) + k, v);
  if (!annotate.empty()) s.emplace_back("annotate", annotate);
  return s;
}

Result<Candidate> Candidate::FromSettings(const Settings& settings) {
  Candidate c;
  bool have_model = false;
  for (const auto& [k, v] : settings) {
    if (k == "search.model") {
      c.model = v;
      have_model = true;
    } else if (k == "search.family") {
      c.family = v;
    } else if (k == "search.strategy") {
      c.strategy = v;
    } else if (k == "search.chip") {
      c.chip = v;
    } else if (k == "search.cores_per_chip") {
      auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), c.cores_per_chip);
      if (ec != std::errc() || p != v.data() + v.size() || c.cores_per_chip < 1)
        return Error("search.cores_per_chip must be a positive integer, found '" + v + "'");
    } else if (k == "search.slice") {
      c.slice = v;
    } else if (k == "search.mesh") {
      c.mesh = v;
    } else if (k == "search.placement") {
      c.placement = v;
    } else if (k == "search.hlo_file") {
      c.hlo_file = v;
    } else if (k == "search.hlo_hash") {
      c.hlo_hash = v;
    } else if (StartsWith(k, kModelPrefix)) {
      c.settings[k.substr(kModelPrefix.size())] = v;
    } else if (StartsWith(k, kOptionPrefix)) {
      c.options.emplace_back(k.substr(kOptionPrefix.size()), v);
    } else if (k == "annotate") {
      c.annotate = v;
    }
  }
  if (!have_model || c.model.empty()) return Error("no search.model setting: not a candidate of a strategy search");
  if (c.chip.empty()) return Error("candidate of " + c.model + " has no search.chip");
  if (c.mesh.empty()) return Error("candidate of " + c.model + " has no search.mesh");
  std::sort(c.options.begin(), c.options.end());
  return c;
}

std::string Candidate::Key() const {
  uint64_t h = 1469598103934665603ull;
  for (const auto& [k, v] : ToSettings()) {
    h = Fnv1a(k, h);
    h = Fnv1a(std::string_view("\x1f", 1), h);
    h = Fnv1a(v, h);
    h = Fnv1a(std::string_view("\x1e", 1), h);
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return std::string("search:") + hex;
}

std::string Candidate::ToJson() const {
  std::string out = "{";
  bool first = true;
  for (const auto& [k, v] : ToSettings()) {
    if (!first) out += ",";
    first = false;
    json::AppendQuoted(out, k);
    out += ":";
    json::AppendQuoted(out, v);
  }
  return out + "}";
}

Result<Candidate> Candidate::FromJson(std::string_view line) {
  auto v = json::Parse(line);
  if (!v.ok()) return v.error();
  if (!v->is_object()) return Error("a candidate is a JSON object of strings, found " + std::string(json::TypeName(v->type())));
  Settings s;
  for (const json::Member& m : v->members()) {
    if (!m.value.is_string()) return json::ErrorAt(m.value.position(), "candidate setting '" + m.key + "' must be a string");
    s.emplace_back(m.key, m.value.string());
  }
  return FromSettings(s);
}

std::string Candidate::Label() const {
  std::string s = strategy.empty() ? family : strategy;
  s += " on " + mesh;
  if (OptionOn("weight_update_sharding") && s.find("weight-update") == std::string::npos) s += ", weight-update sharding";
  return s;
}

const std::string* Candidate::Option(std::string_view key) const {
  for (const auto& [k, v] : options)
    if (k == key) return &v;
  return nullptr;
}

bool Candidate::OptionOn(std::string_view key) const {
  const std::string* v = Option(key);
  return v && IsOn(*v);
}

int64_t Candidate::devices() const {
  auto m = DeviceMesh::Parse(mesh);
  return m.ok() ? m->num_devices() : 0;
}

std::string HloTextHash(std::string_view text) {
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(Fnv1a(text)));
  return std::string("fnv1a:") + hex;
}

Result<Pod> PodOf(const Candidate& c) {
  auto mesh = DeviceMesh::Parse(c.mesh);
  if (!mesh.ok()) return Error("candidate mesh '" + c.mesh + "': " + mesh.error().message);
  return MakePod(c.chip, mesh->num_devices(), c.slice, c.cores_per_chip);
}

Result<MeshChoice> MeshOf(const Candidate& c, const Pod& pod) {
  auto mesh = DeviceMesh::Parse(c.mesh);
  if (!mesh.ok()) return Error("candidate mesh '" + c.mesh + "': " + mesh.error().message);
  return PlaceMesh(pod, mesh.value(), c.placement, /*require_boxes=*/false);
}

// ---- annotation rules ------------------------------------------------------------------------------

const std::vector<std::string>& AnnotationRules() {
  static const std::vector<std::string> rules = {"data-parallel"};
  return rules;
}

Status ApplyAnnotationRule(Module& module, std::string_view rule) {
  if (rule.empty()) return Status::Ok();
  if (rule != "data-parallel") {
    std::string names;
    for (const auto& r : AnnotationRules()) names += (names.empty() ? "" : ", ") + r;
    return Error("unknown annotation rule '" + std::string(rule) + "' (rules: " + names + ")");
  }
  const int64_t devices = std::max<int64_t>(1, module.num_partitions);
  const DeviceMesh mesh({{"X", devices}});
  for (const auto& comp : module.computations())
    for (const auto& inst : comp->instructions()) inst->clear_sharding();
  Computation* entry = module.entry();
  if (!entry) return Error("the module has no entry computation");
  std::set<std::string, std::less<>> names;
  for (const Instruction* p : entry->parameters()) names.insert(p->name());
  int64_t batch_inputs = 0;
  for (Instruction* p : entry->parameters()) {
    if (p->shape().IsTuple()) continue;
    const bool batch = ClassifyValue(*p, true, names, std::nullopt) == MemoryCategory::kActivations;
    if (batch && p->shape().rank() >= 1) {
      std::vector<int64_t> mapping(static_cast<size_t>(p->shape().rank()), -1);
      mapping[0] = 0;
      auto s = MeshSplit(p->shape().rank(), mesh, mapping);
      if (!s.ok()) return Error("annotating " + p->name() + ": " + s.error().message);
      p->set_sharding(s.value());
      ++batch_inputs;
    } else {
      p->set_sharding(HloSharding::Replicate());
    }
  }
  if (batch_inputs == 0) return Error("data-parallel: the model has no batch input (an entry parameter named x, input*, labels*, ...)");
  return Status::Ok();
}

Result<std::unique_ptr<Module>> BuildCandidateModule(const Candidate& c, const ZooOverrides& overrides,
                                                     const ZooBuildOptions& options) {
  if (!c.hlo_file.empty()) {
    std::ifstream in(c.hlo_file, std::ios::binary);
    if (!in) return Error("cannot read the candidate's HLO file '" + c.hlo_file + "'");
    std::stringstream text;
    text << in.rdbuf();
    const std::string hash = HloTextHash(text.str());
    if (!c.hlo_hash.empty() && hash != c.hlo_hash)
      return Error("the HLO file '" + c.hlo_file + "' changed since the run was stored (hash " + hash + ", stored " + c.hlo_hash + ")");
    auto m = ParseHloModule(text.str(), c.hlo_file);
    if (!m.ok()) return m.error();
    (*m)->num_partitions = c.devices();
    return m;
  }
  ZooOverrides o = c.settings;
  for (const auto& [k, v] : overrides) o[k] = v;
  auto m = ZooBuild(c.model, o, options);
  if (!m.ok()) return m.error();
  if (Status s = ApplyAnnotationRule(**m, c.annotate); !s.ok()) return s.error();
  if (c.family == "auto-sharding") (*m)->num_partitions = c.devices();
  return m;
}

Settings AnnotationList(const Module& module) {
  Settings out;
  auto add = [&](const Computation& comp, bool entry) {
    for (const auto& inst : comp.instructions()) {
      if (!inst->has_sharding()) continue;
      out.emplace_back(entry ? inst->name() : comp.name() + "/" + inst->name(), inst->sharding()->ToString());
    }
  };
  if (module.entry()) add(*module.entry(), true);
  for (const auto& comp : module.computations())
    if (comp.get() != module.entry()) add(*comp, false);
  return out;
}

Result<std::unique_ptr<Module>> ReopenCandidate(const Settings& run_settings, const Settings& annotations) {
  auto c = Candidate::FromSettings(run_settings);
  if (!c.ok()) return Error("the run cannot be re-opened as a candidate: " + c.error().message);
  auto m = BuildCandidateModule(c.value());
  if (!m.ok()) return m.error();
  if (annotations.empty()) return m;
  Module& module = **m;
  for (const auto& comp : module.computations())
    for (const auto& inst : comp->instructions()) inst->clear_sharding();
  for (const auto& [name, text] : annotations) {
    Instruction* inst = module.FindInstruction(name);
    if (!inst) return Error("stored annotation of '" + name + "': the rebuilt model has no such instruction");
    auto s = HloSharding::Parse(text);
    if (!s.ok()) return Error("stored annotation of '" + name + "': " + s.error().message);
    inst->set_sharding(s.value());
  }
  if (Status v = VerifyModule(module); !v.ok()) return Error("the re-opened candidate does not verify: " + v.error().message);
  return m;
}

}  // namespace shardscope::search
