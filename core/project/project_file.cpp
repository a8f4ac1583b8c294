// The project file. See project_file.h.
#include "core/project/project_file.h"

#include <algorithm>

#include "core/base/json.h"
#include "core/ir/hlo_text.h"
#include "core/ir/verifier.h"

namespace shardscope {

namespace {

class ProjectReader {
 public:
  explicit ProjectReader(std::string_view where) : where_(where) {}

  Result<Project> Read(std::string_view text) {
    auto parsed = json::Parse(text);
    if (!parsed.ok()) {
      // "LINE:COLUMN: message" from the JSON reader.
      const std::string& m = parsed.error().message;
      const size_t colon = m.find(": ");
      return Error(where_ + ":" + m.substr(0, colon) + ": error: not valid JSON: " + m.substr(colon + 2), parsed.error().offset);
    }
    const json::Value& root = *parsed;
    if (!root.is_object()) return At(root.position(), "expected a JSON object, found " + std::string(json::TypeName(root.type())));

    const json::Value* format = root.Find("format");
    if (!format || !format->is_string() || format->string() != kProjectFormat) {
      return At(format ? format->position() : root.position(),
                "not a ShardScope project (\"format\" is not \"" + std::string(kProjectFormat) + "\")");
    }
    if (const json::Value* version = root.Find("version")) {
      const auto v = version->AsInt64();
      if (!v) return At(version->position(), "\"version\" must be a whole number");
      if (*v > kProjectVersion) {
        return At(version->position(), "written by a newer ShardScope (project version " + std::to_string(*v) +
                                           "; this one reads up to " + std::to_string(kProjectVersion) + ")");
      }
    }

    Project p;
    ProjectContents& c = p.contents;
    auto module_text = String(root, "module", /*required=*/true);
    if (!module_text.ok()) return module_text.error();
    auto module = ParseHloModule(*module_text, where_ + "#module");
    if (!module.ok()) return At(root.Find("module")->position(), "the embedded module does not parse: " + module.error().message);
    p.module = std::move(*module);

    auto mesh_text = String(root, "mesh", /*required=*/true);
    if (!mesh_text.ok()) return mesh_text.error();
    auto mesh = DeviceMesh::Parse(*mesh_text);
    if (!mesh.ok()) return At(root.Find("mesh")->position(), "bad mesh \"" + *mesh_text + "\": " + mesh.error().message);
    c.mesh = *mesh;
    if (const json::Value* order = root.Find("mesh_devices"); order && !(order->is_array() && order->items().empty())) {
      auto devices = DeviceOrder(*order, c.mesh.num_devices());
      if (!devices.ok()) return devices.error();
      c.mesh = DeviceMesh(c.mesh.axes(), *devices);
    }

    if (const json::Value* annotations = root.Find("annotations")) {
      if (!annotations->is_array()) return At(annotations->position(), "\"annotations\" must be an array");
      for (const json::Value& a : annotations->items()) {
        Status s = Annotate(a, p);
        if (!s.ok()) return s.error();
      }
    }

    if (const json::Value* source = root.Find("source")) {
      if (!source->is_object()) return At(source->position(), "\"source\" must be an object");
      auto kind = String(*source, "kind", false);
      if (!kind.ok()) return kind.error();
      auto from = String(*source, "source", false);
      if (!from.ok()) return from.error();
      c.source_kind = *kind;
      c.source = *from;
      if (const json::Value* zoo = source->Find("zoo_settings")) {
        if (!zoo->is_object()) return At(zoo->position(), "\"zoo_settings\" must be an object of strings");
        std::map<std::string, std::string, std::less<>> settings;
        for (const json::Member& m : zoo->members()) {
          if (!m.value.is_string()) return At(m.value.position(), "zoo setting \"" + m.key + "\" must be a string");
          settings[m.key] = m.value.string();
        }
        c.zoo_settings = std::move(settings);
      }
    }
    auto selected = String(root, "selected", false);
    if (!selected.ok()) return selected.error();
    c.selected = *selected;
    if (const json::Value* analysis = root.Find("analysis")) {
      if (!analysis->is_object()) return At(analysis->position(), "\"analysis\" must be an object");
      if (const json::Value* wus = analysis->Find("weight_update_sharding")) {
        if (!wus->is_bool()) return At(wus->position(), "\"weight_update_sharding\" must be true or false");
        c.weight_update_sharding = wus->boolean();
      }
      if (const json::Value* slice = analysis->Find("slice")) {
        if (!slice->is_object()) return At(slice->position(), "\"slice\" must be an object");
        if (const json::Value* placement = slice->Find("placement")) {
          if (!placement->is_string()) return At(placement->position(), "\"placement\" must be a string (snake or row-major)");
          c.slice.placement = placement->string();
        }
        if (const json::Value* wrap = slice->Find("wraparound")) {
          if (!wrap->is_bool()) return At(wrap->position(), "\"wraparound\" must be true or false");
          c.slice.wraparound = wrap->boolean();
        }
        if (const json::Value* shape = slice->Find("shape")) {
          if (!shape->is_array()) return At(shape->position(), "\"shape\" must be an array of chip counts, e.g. [4, 8]");
          for (const json::Value& n : shape->items()) {
            const auto v = n.AsInt64();
            if (!v || *v < 1) return At(n.position(), "\"shape\" takes whole numbers >= 1 (chips per axis)");
            c.slice.shape.push_back(*v);
          }
        }
        if (const json::Value* cores = slice->Find("cores_per_chip")) {
          const auto v = cores->AsInt64();
          if (v != 1 && v != 2) return At(cores->position(), "\"cores_per_chip\" must be 1 or 2");
          c.slice.cores_per_chip = v;
        }
        if (const json::Value* order = slice->Find("mesh_order")) {
          if (!order->is_string() || order->string().empty())
            return At(order->position(), "\"mesh_order\" must be the mesh axes minor first, e.g. \"Y,X\"");
          c.slice.mesh_order = order->string();
        }
      }
      if (const json::Value* sizes = analysis->Find("simulated_sizes")) {
        if (!sizes->is_object()) return At(sizes->position(), "\"simulated_sizes\" must be an object");
        if (const json::Value* zoo = sizes->Find("zoo_settings")) {
          if (!zoo->is_object()) return At(zoo->position(), "\"zoo_settings\" must be an object of strings");
          for (const json::Member& m : zoo->members()) {
            if (!m.value.is_string()) return At(m.value.position(), "zoo setting \"" + m.key + "\" must be a string");
            c.simulated_sizes.zoo_settings[m.key] = m.value.string();
          }
        }
        if (const json::Value* scale = sizes->Find("scale")) {
          const auto v = scale->AsInt64();
          if (!v || *v < 1) return At(scale->position(), "\"scale\" must be a whole number >= 1");
          c.simulated_sizes.scale = *v;
        }
        if (const json::Value* dims = sizes->Find("dimensions")) {
          if (!dims->is_object()) return At(dims->position(), "\"dimensions\" must be an object of factors, e.g. {\"x:0\": 8}");
          for (const json::Member& m : dims->members()) {
            const auto v = m.value.AsInt64();
            if (!v || *v < 1) return At(m.value.position(), "the factor of \"" + m.key + "\" must be a whole number >= 1");
            c.simulated_sizes.dimension_factors[m.key] = *v;
          }
        }
      }
    }
    return p;
  }

 private:
  Error At(const json::Position& at, const std::string& message) const {
    if (at.line <= 0) return Error(where_ + ": error: " + message);
    return Error(where_ + ":" + std::to_string(at.line) + ":" + std::to_string(at.column) + ": error: " + message, at.offset);
  }

  // A string member ("" when absent and not required).
  Result<std::string> String(const json::Value& object, std::string_view key, bool required) const {
    const json::Value* v = object.Find(key);
    if (!v) {
      if (required) return At(object.position(), "missing \"" + std::string(key) + "\"");
      return std::string();
    }
    if (!v->is_string()) {
      std::string message = "\"";
      message.append(key).append("\" must be a string, found ").append(json::TypeName(v->type()));
      return At(v->position(), message);
    }
    return v->string();
  }

  // A permutation of 0..n-1.
  Result<std::vector<int64_t>> DeviceOrder(const json::Value& order, int64_t n) const {
    if (!order.is_array()) return At(order.position(), "\"mesh_devices\" must be an array of device ids");
    if (static_cast<int64_t>(order.items().size()) != n) {
      return At(order.position(), "mesh_devices lists " + std::to_string(order.items().size()) + " devices but the mesh has " +
                                      std::to_string(n));
    }
    std::vector<int64_t> devices;
    std::vector<bool> seen(static_cast<size_t>(n), false);
    for (const json::Value& d : order.items()) {
      const auto id = d.AsInt64();
      if (!id || *id < 0 || *id >= n) {
        return At(d.position(), "a device id of the mesh (0 to " + std::to_string(n - 1) + ") expected");
      }
      if (seen[static_cast<size_t>(*id)]) return At(d.position(), "device " + std::to_string(*id) + " listed twice");
      seen[static_cast<size_t>(*id)] = true;
      devices.push_back(*id);
    }
    return devices;
  }

  Status Annotate(const json::Value& a, Project& p) const {
    if (!a.is_object()) return At(a.position(), "an annotation must be an object {\"instruction\": ..., \"sharding\": ...}");
    auto name = String(a, "instruction", true);
    if (!name.ok()) return name.error();
    auto text = String(a, "sharding", true);
    if (!text.ok()) return text.error();
    Instruction* inst = p.module->FindInstruction(*name);
    if (!inst) return At(a.Find("instruction")->position(), "annotation for unknown instruction \"" + *name + "\"");
    auto sharding = HloSharding::Parse(*text);
    if (!sharding.ok()) return At(a.Find("sharding")->position(), "bad sharding for \"" + *name + "\": " + sharding.error().message);
    const DeviceMesh& mesh = p.contents.mesh;
    if (!sharding->IsTileMaximal() && !sharding->IsTuple() && sharding->NumDevices() > mesh.num_devices()) {
      return At(a.Find("sharding")->position(), "the sharding of \"" + *name + "\" spans " +
                                                    std::to_string(sharding->NumDevices()) + " devices but the mesh has " +
                                                    std::to_string(mesh.num_devices()));
    }
    Status fits = VerifySharding(*sharding, inst->shape(), mesh.num_devices(), "\"" + *name + "\"");
    if (!fits.ok()) return At(a.Find("sharding")->position(), "annotation does not fit: " + fits.error().message);
    inst->set_sharding(*sharding);
    p.contents.annotations.push_back({*name, *sharding});
    return Status::Ok();
  }

  std::string where_;
};

}  // namespace

std::string QualifiedInstructionName(const Module& module, const Instruction& inst) {
  if (inst.parent() && inst.parent() != module.entry()) return inst.parent()->name() + "/" + inst.name();
  return inst.name();
}

std::string ProjectSimulatedSizes::Describe() const {
  std::string out;
  for (const auto& [k, v] : zoo_settings) out += (out.empty() ? "" : ", ") + k + "=" + v;
  std::string dims;
  for (const auto& [k, f] : dimension_factors) dims += (dims.empty() ? "" : ", ") + k + " x" + std::to_string(f);
  if (!dims.empty()) out += (out.empty() ? "" : "; ") + dims;
  if (scale != 1)
    out += (out.empty() ? "" : "; ") + std::string(dims.empty() ? "every dimension x" : "every other dimension x") +
           std::to_string(scale);
  return out;
}

Result<Project> ReadProjectFile(std::string_view json_text, std::string_view where) {
  return ProjectReader(where).Read(json_text);
}

std::string WriteProjectFile(const Module* module, const ProjectContents& contents) {
  std::vector<json::Member> root;
  auto add = [](std::vector<json::Member>& object, std::string key, json::Value value) {
    object.push_back(json::Member{std::move(key), {}, std::move(value)});
  };
  add(root, "format", json::Value::String(std::string(kProjectFormat)));
  add(root, "version", json::Value::Integer(kProjectVersion));
  if (module) {
    std::vector<json::Member> source;
    add(source, "kind", json::Value::String(contents.source_kind));
    add(source, "source", json::Value::String(contents.source));
    if (contents.zoo_settings) {
      std::vector<json::Member> zoo;
      for (const auto& [k, v] : *contents.zoo_settings) add(zoo, k, json::Value::String(v));
      add(source, "zoo_settings", json::Value::Object(std::move(zoo)));
    }
    add(root, "source", json::Value::Object(std::move(source)));
    add(root, "mesh", json::Value::String(contents.mesh.ToString()));
    std::vector<json::Value> order;
    for (int64_t d : contents.mesh.device_order()) order.push_back(json::Value::Integer(d));
    add(root, "mesh_devices", json::Value::Array(std::move(order)));
    add(root, "module", json::Value::String(PrintHloModule(*module)));
    std::vector<json::Value> annotations;
    for (const ProjectAnnotation& a : contents.annotations) {
      std::vector<json::Member> entry;
      add(entry, "instruction", json::Value::String(a.instruction));
      add(entry, "sharding", json::Value::String(a.sharding.ToString()));
      const Instruction* inst = module->FindInstruction(a.instruction);
      if (inst && inst->shape().IsArray()) {
        auto named = ToNamedAxes(a.sharding, inst->shape().rank(), contents.mesh, inst->name());
        if (named.ok()) add(entry, "named", json::Value::String(*named));
      }
      annotations.push_back(json::Value::Object(std::move(entry)));
    }
    add(root, "annotations", json::Value::Array(std::move(annotations)));
    if (!contents.selected.empty()) add(root, "selected", json::Value::String(contents.selected));
    std::vector<json::Member> analysis;
    if (contents.weight_update_sharding) add(analysis, "weight_update_sharding", json::Value::Bool(true));
    if (!contents.slice.empty()) {
      std::vector<json::Member> slice;
      if (!contents.slice.placement.empty()) add(slice, "placement", json::Value::String(contents.slice.placement));
      if (contents.slice.wraparound) add(slice, "wraparound", json::Value::Bool(*contents.slice.wraparound));
      if (!contents.slice.shape.empty()) {
        std::vector<json::Value> shape;
        for (int64_t n : contents.slice.shape) shape.push_back(json::Value::Integer(n));
        add(slice, "shape", json::Value::Array(std::move(shape)));
      }
      if (contents.slice.cores_per_chip) add(slice, "cores_per_chip", json::Value::Integer(*contents.slice.cores_per_chip));
      if (!contents.slice.mesh_order.empty()) add(slice, "mesh_order", json::Value::String(contents.slice.mesh_order));
      add(analysis, "slice", json::Value::Object(std::move(slice)));
    }
    if (!contents.simulated_sizes.empty()) {
      std::vector<json::Member> sizes;
      if (!contents.simulated_sizes.zoo_settings.empty()) {
        std::vector<json::Member> zoo;
        for (const auto& [k, v] : contents.simulated_sizes.zoo_settings) add(zoo, k, json::Value::String(v));
        add(sizes, "zoo_settings", json::Value::Object(std::move(zoo)));
      }
      if (contents.simulated_sizes.scale != 1) add(sizes, "scale", json::Value::Integer(contents.simulated_sizes.scale));
      if (!contents.simulated_sizes.dimension_factors.empty()) {
        std::vector<json::Member> dims;
        for (const auto& [k, v] : contents.simulated_sizes.dimension_factors) add(dims, k, json::Value::Integer(v));
        add(sizes, "dimensions", json::Value::Object(std::move(dims)));
      }
      add(analysis, "simulated_sizes", json::Value::Object(std::move(sizes)));
    }
    if (!analysis.empty()) add(root, "analysis", json::Value::Object(std::move(analysis)));
  }
  return json::Serialize(json::Value::Object(std::move(root)), 4) + "\n";
}

}  // namespace shardscope
