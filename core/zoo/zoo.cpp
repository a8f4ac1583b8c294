#include "core/zoo/zoo.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>

#include "core/ir/verifier.h"
#include "core/zoo/mlp.h"
#include "core/zoo/ncf.h"
#include "core/zoo/moe_transformer.h"
#include "core/zoo/pipelined_transformer.h"
#include "core/zoo/resnet.h"
#include "core/zoo/transformer.h"
#include "core/zoo/unet3d.h"

namespace shardscope {

ZooParams::ZooParams(const std::string& model, const std::vector<ZooParameter>& parameters,
                     const ZooOverrides& overrides) {
  for (const auto& p : parameters) values_[p.name] = p.default_value;
  for (const auto& [k, v] : overrides) {
    if (!values_.count(k)) {
      std::string names;
      for (const auto& p : parameters) names += (names.empty() ? "" : ", ") + p.name;
      Fail("model " + model + " has no parameter '" + k + "' (parameters: " + names + ")");
      continue;
    }
    values_[k] = v;
  }
}

void ZooParams::Fail(const std::string& e) {
  if (error_.empty()) error_ = e;
}

const std::string& ZooParams::Str(const std::string& k) { return values_[k]; }

int64_t ZooParams::Int(const std::string& k) {
  const std::string& v = values_[k];
  int64_t out = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (ec != std::errc() || p != v.data() + v.size()) Fail("parameter " + k + " must be an integer, found '" + v + "'");
  return out;
}

std::vector<int64_t> ZooParams::IntList(const std::string& k) {
  const std::string& v = values_[k];
  std::vector<int64_t> out;
  size_t start = 0;
  while (start <= v.size()) {
    const size_t end = std::min(v.find(',', start), v.size());
    int64_t x = 0;
    auto [p, ec] = std::from_chars(v.data() + start, v.data() + end, x);
    if (ec != std::errc() || p != v.data() + end) {
      Fail("parameter " + k + " must be comma-separated integers, found '" + v + "'");
      return {};
    }
    out.push_back(x);
    start = end + 1;
  }
  return out;
}

bool ZooParams::Bool(const std::string& k) {
  const std::string& v = values_[k];
  if (v == "1" || v == "true" || v == "yes" || v == "on") return true;
  if (v == "0" || v == "false" || v == "no" || v == "off") return false;
  Fail("parameter " + k + " must be 0 or 1, found '" + v + "'");
  return false;
}

double ZooParams::Real(const std::string& k) {
  const std::string& v = values_[k];
  try {
    size_t pos = 0;
    double d = std::stod(v, &pos);
    if (pos == v.size() && std::isfinite(d)) return d;
  } catch (...) {
  }
  Fail("parameter " + k + " must be a number, found '" + v + "'");
  return 0;
}

PrimitiveType ZooParams::FloatType(const std::string& k, PrimitiveType fallback) {
  const std::string& v = values_[k];
  if (v.empty()) return fallback;
  auto t = PrimitiveTypeFromName(v);
  if (!t || !IsFloatingPoint(*t)) {
    Fail("parameter " + k + " must be a floating-point type (f32, bf16, f16, f64), found '" + v + "'");
    return fallback;
  }
  return *t;
}

std::string ZooParams::Choice(const std::string& k, const std::vector<std::string>& choices) {
  const std::string& v = values_[k];
  for (const auto& c : choices)
    if (c == v) return v;
  std::string list;
  for (size_t i = 0; i < choices.size(); ++i)
    list += (i == 0 ? "" : i + 1 == choices.size() ? " or " : ", ") + choices[i];
  Fail("parameter " + k + " must be " + list + ", found '" + v + "'");
  return choices.empty() ? v : choices.front();
}

const std::vector<ZooParameter>& ZooCommonParameters() {
  static const std::vector<ZooParameter> params = {
      {"annotations", "finalized",
       "annotation set: none | attempt1 | attempt2 | finalized (GSPMD Table 1) | data-parallel (weights replicated, batch over every device)"},
      {"mesh_x", "4", "mesh axis X size"},
      {"mesh_y", "4", "mesh axis Y size"},
      {"dtype", "f32", "weight (and optimizer state) element type"},
      {"act_dtype", "", "activation element type (default: dtype); weights are converted when it differs"},
      {"learning_rate", "0.001", "optimizer step size"},
  };
  return params;
}

std::vector<ZooParameter> WithCommonParameters(std::vector<ZooParameter> own) {
  for (const auto& c : ZooCommonParameters()) {
    bool listed = false;
    for (const auto& o : own) listed = listed || o.name == c.name;
    if (!listed) own.push_back(c);
  }
  return own;
}

Result<DeviceMesh> ZooMeshXY(ZooParams& p) {
  const int64_t x = p.Int("mesh_x"), y = p.Int("mesh_y");
  if (!p.ok()) return Error(p.error());
  if (x < 1 || y < 1) return Error("mesh_x and mesh_y must be >= 1");
  return DeviceMesh({{"X", x}, {"Y", y}});
}

namespace {

// The families of the zoo, in listing order. A new family adds one line.
const std::vector<void (*)(std::vector<ZooModel>&)>& Families() {
  static const std::vector<void (*)(std::vector<ZooModel>&)> families = {
      &AddMlpModels,
      &AddTransformerModels,
      &AddResNetModels,
      &AddUNet3dModels,
      &AddMoeTransformerModels,
      &AddPipelinedTransformerModels,
      &AddNcfModels,
  };
  return families;
}

const ZooModel* FindModel(const std::vector<ZooModel>& models, std::string_view name) {
  for (const auto& m : models)
    if (m.name == name) return &m;
  return nullptr;
}

Error UnknownModel(const std::vector<ZooModel>& models, std::string_view name) {
  std::string names;
  for (const auto& m : models) names += (names.empty() ? "" : ", ") + m.name;
  return Error("unknown zoo model '" + std::string(name) + "' (models: " + names + ")");
}

}  // namespace

std::vector<ZooModel> ZooList() {
  std::vector<ZooModel> models;
  for (auto add : Families()) add(models);
  return models;
}

Result<DeviceMesh> ZooMesh(std::string_view name, const ZooOverrides& overrides) {
  const auto models = ZooList();
  const ZooModel* model = FindModel(models, name);
  if (!model) return UnknownModel(models, name);
  ZooParams p(model->name, model->parameters, overrides);
  if (!p.ok()) return Error(p.error());
  return model->mesh ? model->mesh(p) : ZooMeshXY(p);
}

namespace {

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool SameAxisName(std::string_view a, std::string_view b) { return Lower(a) == Lower(b); }

// The setting that sizes mesh axis `axis` (as the model's own mesh names it), or "".
std::string SettingOfAxis(const ZooModel& model, std::string_view axis) {
  const std::string direct = "mesh_" + Lower(axis);
  for (const auto& p : model.parameters)
    if (p.name == direct) return p.name;
  const std::string tag = "(mesh axis " + std::string(axis) + ")";
  for (const auto& p : model.parameters)
    if (p.description.find(tag) != std::string::npos) return p.name;
  return "";
}

// The axes of size > 1, for comparing two meshes that differ only by trivial axes.
std::vector<MeshAxis> NonTrivialAxes(const DeviceMesh& m) {
  std::vector<MeshAxis> out;
  for (const MeshAxis& a : m.axes())
    if (a.size > 1) out.push_back(a);
  return out;
}

}  // namespace

Result<ZooOverrides> ZooOverridesForMesh(std::string_view name, ZooOverrides overrides, const DeviceMesh& mesh) {
  const auto models = ZooList();
  const ZooModel* model = FindModel(models, name);
  if (!model) return UnknownModel(models, name);
  auto own = ZooMesh(name, overrides);
  if (!own.ok()) return own.error();
  std::vector<std::string> settings;
  for (const MeshAxis& a : own->axes()) settings.push_back(SettingOfAxis(*model, a.name));
  auto settings_text = [&] {
    std::string t;
    for (size_t i = 0; i < settings.size(); ++i)
      if (!settings[i].empty()) t += (t.empty() ? "" : ", ") + settings[i] + " (" + own->axes()[i].name + ")";
    return t.empty() ? std::string("none") : t;
  };
  std::vector<bool> named(own->axes().size(), false);
  for (const MeshAxis& want : mesh.axes()) {
    size_t i = 0;
    while (i < own->axes().size() && !SameAxisName(own->axes()[i].name, want.name)) ++i;
    if (i == own->axes().size() || settings[i].empty()) {
      if (want.size == 1) continue;  // an axis of one device changes nothing
      return Error("mesh " + mesh.ToString() + ": model " + std::string(name) + " has no setting for mesh axis '" + want.name +
                   "' (its mesh is " + own->ToString() + "; mesh settings: " + settings_text() + ")");
    }
    named[i] = true;
    const std::string value = std::to_string(want.size);
    auto it = overrides.find(settings[i]);
    if (it != overrides.end() && it->second != value) {
      return Error("mesh " + mesh.ToString() + " gives axis " + want.name + " " + value + " devices, but " + settings[i] + "=" +
                   it->second + " was set");
    }
    overrides[settings[i]] = value;
  }
  for (size_t i = 0; i < own->axes().size(); ++i) {
    if (named[i] || settings[i].empty() || overrides.count(settings[i])) continue;
    overrides[settings[i]] = "1";
  }
  auto result = ZooMesh(name, overrides);
  if (!result.ok()) return Error("mesh " + mesh.ToString() + ": " + result.error().message);
  const auto got = NonTrivialAxes(*result), want = NonTrivialAxes(mesh);
  bool same = got.size() == want.size();
  for (size_t i = 0; same && i < got.size(); ++i) same = SameAxisName(got[i].name, want[i].name) && got[i].size == want[i].size;
  if (!same) {
    return Error("model " + std::string(name) + " with these settings is annotated for mesh " + result->ToString() + ", not " +
                 mesh.ToString() + " (mesh settings: " + settings_text() + ")");
  }
  return overrides;
}

Result<std::unique_ptr<Module>> ZooBuild(std::string_view name, const ZooOverrides& overrides) {
  return ZooBuild(name, overrides, ZooBuildOptions{});
}

Result<std::unique_ptr<Module>> ZooBuild(std::string_view name, const ZooOverrides& overrides, const ZooBuildOptions& options) {
  const auto models = ZooList();
  const ZooModel* model = FindModel(models, name);
  if (!model) return UnknownModel(models, name);
  ZooParams p(model->name, model->parameters, overrides);
  if (!p.ok()) return Error(p.error());
  Result<std::unique_ptr<Module>> built = model->build(p);
  if (!p.ok()) return Error(p.error());  // a setting the family read is malformed
  if (!built.ok()) return Error(std::string(name) + ": " + built.error().message);
  if (!options.verify) return built;
  if (Status s = VerifyModule(**built); !s.ok())
    return Error(std::string(name) + ": the built module does not verify: " + s.error().message);
  return built;
}

}  // namespace shardscope
