// Shardy attribute text -> DeviceMesh / HloSharding. See shardy.h for the grammar.
#include "core/sharding/shardy.h"

#include <algorithm>
#include <cctype>
#include <limits>
#include <set>

#include "core/sharding/tile_assignment.h"

namespace shardscope {

namespace {

// A recursive-descent reader over one attribute text. Errors carry the byte offset.
class SdyReader {
 public:
  explicit SdyReader(std::string_view t) : t_(t) {}

  void SkipWs() {
    while (p_ < t_.size() && std::isspace(static_cast<unsigned char>(t_[p_]))) ++p_;
  }
  bool AtEnd() {
    SkipWs();
    return p_ >= t_.size();
  }
  char Peek() {
    SkipWs();
    return p_ < t_.size() ? t_[p_] : '\0';
  }
  bool Eat(char c) {
    if (Peek() != c) return false;
    ++p_;
    return true;
  }
  bool EatWord(std::string_view w) {
    SkipWs();
    if (t_.substr(p_, w.size()) != w) return false;
    p_ += w.size();
    return true;
  }
  Error Expected(std::string_view what) {
    SkipWs();
    std::string found = "end of text";
    if (p_ < t_.size()) {
      size_t e = p_ + 1;
      while (e < t_.size() && e - p_ < 20 && (std::isalnum(static_cast<unsigned char>(t_[e])) || t_[e] == '_')) ++e;
      found = "'" + std::string(t_.substr(p_, e - p_)) + "'";
    }
    return Error("expected " + std::string(what) + " in Shardy attribute, found " + found, static_cast<int64_t>(p_));
  }
  std::optional<Error> Expect(char c, std::string_view what) {
    if (Eat(c)) return std::nullopt;
    return Expected(what);
  }

  std::optional<int64_t> Int(Error* err, std::string_view what) {
    SkipWs();
    const size_t b = p_;
    int64_t v = 0;
    while (p_ < t_.size() && std::isdigit(static_cast<unsigned char>(t_[p_]))) {
      const int d = t_[p_] - '0';
      if (v > (std::numeric_limits<int64_t>::max() - d) / 10) {
        *err = Error("expected " + std::string(what) + ", found a number too large", static_cast<int64_t>(b));
        return std::nullopt;
      }
      v = v * 10 + d;
      ++p_;
    }
    if (p_ == b) {
      *err = Expected(what);
      return std::nullopt;
    }
    return v;
  }

  // "name" (backslash escapes honoured) or a bare identifier [A-Za-z0-9_.$-]+.
  std::optional<std::string> Name(Error* err, std::string_view what) {
    SkipWs();
    if (p_ < t_.size() && t_[p_] == '"') {
      const size_t b = p_++;
      std::string out;
      while (p_ < t_.size() && t_[p_] != '"') {
        if (t_[p_] == '\\' && p_ + 1 < t_.size()) ++p_;
        out += t_[p_++];
      }
      if (p_ >= t_.size()) {
        *err = Error("expected '\"' to close the name started here in Shardy attribute", static_cast<int64_t>(b));
        return std::nullopt;
      }
      ++p_;
      return out;
    }
    const size_t b = p_;
    while (p_ < t_.size() && (std::isalnum(static_cast<unsigned char>(t_[p_])) || t_[p_] == '_' || t_[p_] == '.' ||
                              t_[p_] == '$' || t_[p_] == '-'))
      ++p_;
    if (p_ == b) {
      *err = Expected(what);
      return std::nullopt;
    }
    return std::string(t_.substr(b, p_ - b));
  }

  // '[' ('"x"=' int (',' ...)*)? ']' (',' 'device_ids=[' ints ']')? — the body of a mesh after
  // its '<'; consumes the closing '>'.
  Result<DeviceMesh> MeshBody() {
    Error err;
    if (auto e = Expect('[', "'[' to start the mesh axes")) return *e;
    std::vector<MeshAxis> axes;
    if (!Eat(']')) {
      while (true) {
        auto name = Name(&err, "a mesh axis name");
        if (!name) return err;
        if (auto e = Expect('=', "'=' after the mesh axis name")) return *e;
        auto size = Int(&err, "a mesh axis size");
        if (!size) return err;
        if (*size < 1) return Error("mesh axis '" + *name + "' has size 0", static_cast<int64_t>(p_));
        for (const auto& a : axes)
          if (a.name == *name) return Error("mesh axis '" + *name + "' appears twice", static_cast<int64_t>(p_));
        axes.push_back({*name, *size});
        if (Eat(',')) continue;
        if (auto e = Expect(']', "',' or ']' in the mesh axes")) return *e;
        break;
      }
    }
    int64_t count = 1;
    for (const auto& a : axes) {
      if (count > kMaxShardingDevices / a.size)
        return Error("mesh has more than " + std::to_string(kMaxShardingDevices) + " devices", static_cast<int64_t>(p_));
      count *= a.size;
    }
    std::vector<int64_t> ids;
    bool has_ids = false;
    while (Eat(',')) {
      auto key = Name(&err, "a mesh attribute such as device_ids");
      if (!key) return err;
      if (auto e = Expect('=', "'=' after the mesh attribute")) return *e;
      if (*key != "device_ids") return Error("unknown mesh attribute '" + *key + "'", static_cast<int64_t>(p_));
      has_ids = true;
      if (auto e = Expect('[', "'[' to start device_ids")) return *e;
      if (!Eat(']')) {
        while (true) {
          auto v = Int(&err, "a device id");
          if (!v) return err;
          ids.push_back(*v);
          if (Eat(',')) continue;
          if (auto e = Expect(']', "',' or ']' in device_ids")) return *e;
          break;
        }
      }
    }
    if (auto e = Expect('>', "'>' to close the mesh")) return *e;
    if (!has_ids) {
      if (axes.empty()) return DeviceMesh({}, {});  // the empty mesh: no devices named, replicated
      return DeviceMesh(std::move(axes));
    }
    if (static_cast<int64_t>(ids.size()) != count)
      return Error("mesh device_ids lists " + std::to_string(ids.size()) + " devices for " + std::to_string(count) +
                       " mesh positions",
                   static_cast<int64_t>(p_));
    std::vector<int64_t> sorted = ids;
    std::sort(sorted.begin(), sorted.end());
    if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
      return Error("mesh device_ids names a device twice", static_cast<int64_t>(p_));
    return DeviceMesh(std::move(axes), std::move(ids));
  }

  // '"x"' (':(' pre ')' size)?
  std::optional<SdyAxisRef> AxisRef(Error* err) {
    auto name = Name(err, "a mesh axis name");
    if (!name) return std::nullopt;
    SdyAxisRef r{*name, 1, 0};
    SkipWs();
    if (p_ < t_.size() && t_[p_] == ':') {
      ++p_;
      if (auto e = Expect('(', "'(' after ':' in a sub-axis")) {
        *err = *e;
        return std::nullopt;
      }
      auto pre = Int(err, "the sub-axis pre-size");
      if (!pre) return std::nullopt;
      if (auto e = Expect(')', "')' after the sub-axis pre-size")) {
        *err = *e;
        return std::nullopt;
      }
      auto size = Int(err, "the sub-axis size");
      if (!size) return std::nullopt;
      if (*pre < 1 || *size < 1) {
        *err = Error("sub-axis of '" + *name + "' has a zero size", static_cast<int64_t>(p_));
        return std::nullopt;
      }
      r.pre_size = *pre;
      r.size = *size;
    }
    return r;
  }

  // '{' axis (',' axis)* '}'
  std::optional<Error> AxisSet(std::vector<SdyAxisRef>* out) {
    if (auto e = Expect('{', "'{' to start a list of axes")) return e;
    if (Eat('}')) return std::nullopt;
    while (true) {
      Error err;
      auto r = AxisRef(&err);
      if (!r) return err;
      out->push_back(*r);
      if (Eat(',')) continue;
      return Expect('}', "',' or '}' in the list of axes");
    }
  }

  // The body of a tensor sharding after '<' (or the '<' of a per-value entry): mesh ref, dims,
  // replicated/unreduced; consumes the closing '>'.
  Result<SdyTensorSharding> ShardingBody() {
    SdyTensorSharding s;
    Error err;
    if (Eat('@')) {
      auto name = Name(&err, "a mesh name after '@'");
      if (!name) return err;
      s.mesh_name = *name;
    } else if (EatWord("#sdy.mesh<") || EatWord("mesh<")) {
      auto m = MeshBody();
      if (!m.ok()) return m.error();
      s.inline_mesh = std::move(m).value();
    } else {
      return Expected("'@mesh' or an inline mesh<...>");
    }
    if (auto e = Expect(',', "',' after the mesh")) return *e;
    if (auto e = Expect('[', "'[' to start the dimension shardings")) return *e;
    if (!Eat(']')) {
      while (true) {
        if (auto e = Expect('{', "'{' to start a dimension sharding")) return *e;
        std::vector<SdyAxisRef> axes;
        bool open = false;
        if (!Eat('}')) {
          while (true) {
            if (Eat('?')) {
              open = true;
            } else {
              auto r = AxisRef(&err);
              if (!r) return err;
              axes.push_back(*r);
            }
            if (Eat(',')) continue;
            if (auto e = Expect('}', "',' or '}' in a dimension sharding")) return *e;
            break;
          }
        }
        SkipWs();
        if (p_ < t_.size() && t_[p_] == 'p' && p_ + 1 < t_.size() && std::isdigit(static_cast<unsigned char>(t_[p_ + 1]))) {
          ++p_;  // priority pN: propagation order only
          if (!Int(&err, "a priority")) return err;
        }
        s.dims.push_back(std::move(axes));
        s.open_dims.push_back(open);
        if (Eat(',')) continue;
        if (auto e = Expect(']', "',' or ']' in the dimension shardings")) return *e;
        break;
      }
    }
    while (Eat(',')) {
      auto key = Name(&err, "replicated= or unreduced=");
      if (!key) return err;
      if (auto e = Expect('=', "'=' after '" + *key + "'")) return *e;
      std::vector<SdyAxisRef>* dst = *key == "replicated" ? &s.replicated : *key == "unreduced" ? &s.unreduced : nullptr;
      std::vector<SdyAxisRef> ignored;
      if (auto e = AxisSet(dst ? dst : &ignored)) return *e;
    }
    if (auto e = Expect('>', "'>' to close the sharding")) return *e;
    return s;
  }

  size_t pos() const { return p_; }

 private:
  std::string_view t_;
  size_t p_ = 0;
};

template <typename T>
Result<T> AtEnd(SdyReader& r, Result<T> v) {
  if (!v.ok()) return v;
  if (!r.AtEnd()) return r.Expected("the end of the attribute");
  return v;
}

}  // namespace

std::string SdyAxisRef::ToString() const {
  std::string s = "\"" + name + "\"";
  if (size > 0) s += ":(" + std::to_string(pre_size) + ")" + std::to_string(size);
  return s;
}

Result<DeviceMesh> ParseSdyMesh(std::string_view text) {
  SdyReader r(text);
  if (!r.EatWord("#sdy.mesh<") && !r.Eat('<')) return r.Expected("'#sdy.mesh<'");
  return AtEnd(r, r.MeshBody());
}

Result<std::vector<SdyMesh>> ParseSdyMeshes(std::string_view text) {
  SdyReader r(text);
  std::vector<SdyMesh> out;
  if (auto e = r.Expect('{', "'{' to start the meshes")) return *e;
  if (!r.Eat('}')) {
    while (true) {
      Error err;
      auto name = r.Name(&err, "a mesh name");
      if (!name) return err;
      if (auto e = r.Expect('=', "'=' after the mesh name")) return *e;
      if (!r.EatWord("#sdy.mesh<")) return r.Expected("'#sdy.mesh<'");
      auto m = r.MeshBody();
      if (!m.ok()) return m.error();
      for (const auto& o : out)
        if (o.name == *name) return Error("mesh '" + *name + "' is defined twice", static_cast<int64_t>(r.pos()));
      out.push_back({*name, std::move(m).value()});
      if (r.Eat(',')) continue;
      if (auto e = r.Expect('}', "',' or '}' after a mesh")) return *e;
      break;
    }
  }
  if (!r.AtEnd()) return r.Expected("the end of the meshes");
  return out;
}

Result<std::vector<SdyTensorSharding>> ParseSdyShardings(std::string_view text) {
  SdyReader r(text);
  std::vector<SdyTensorSharding> out;
  if (r.EatWord("#sdy.sharding_per_value<")) {
    if (auto e = r.Expect('[', "'[' to start the per-value shardings")) return *e;
    if (!r.Eat(']')) {
      while (true) {
        if (auto e = r.Expect('<', "'<' to start a value's sharding")) return *e;
        auto s = r.ShardingBody();
        if (!s.ok()) return s.error();
        out.push_back(std::move(s).value());
        if (r.Eat(',')) continue;
        if (auto e = r.Expect(']', "',' or ']' in the per-value shardings")) return *e;
        break;
      }
    }
    if (auto e = r.Expect('>', "'>' to close the per-value shardings")) return *e;
  } else if (r.EatWord("#sdy.sharding<")) {
    auto s = r.ShardingBody();
    if (!s.ok()) return s.error();
    out.push_back(std::move(s).value());
  } else {
    return r.Expected("'#sdy.sharding<' or '#sdy.sharding_per_value<'");
  }
  if (!r.AtEnd()) return r.Expected("the end of the sharding");
  return out;
}

Result<std::vector<std::string>> ParseSdyManualAxes(std::string_view text) {
  SdyReader r(text);
  if (!r.EatWord("#sdy<manual_axes")) return r.Expected("'#sdy<manual_axes{'");
  std::vector<SdyAxisRef> axes;
  if (auto e = r.AxisSet(&axes)) return *e;
  if (auto e = r.Expect('>', "'>' to close the manual axes")) return *e;
  if (!r.AtEnd()) return r.Expected("the end of the manual axes");
  std::vector<std::string> names;
  for (const auto& a : axes) names.push_back(a.name);
  return names;
}

const DeviceMesh* SdyMeshOf(const SdyTensorSharding& sharding, const std::vector<SdyMesh>& meshes) {
  if (sharding.inline_mesh) return &*sharding.inline_mesh;
  for (const auto& m : meshes)
    if (m.name == sharding.mesh_name) return &m.mesh;
  return nullptr;
}

Result<HloSharding> SdyToHloSharding(const SdyTensorSharding& sharding, const std::vector<SdyMesh>& meshes,
                                     const std::vector<std::string>& manual_axes) {
  const DeviceMesh* mesh = SdyMeshOf(sharding, meshes);
  if (!mesh) return Error("the sharding refers to mesh '@" + sharding.mesh_name + "', which xla.sdy.meshes does not define");
  if (mesh->num_axes() == 0) {
    // A maximal mesh (one device id) or the empty mesh (replicated).
    if (mesh->device_order().size() == 1 && !mesh->device_order().empty()) {
      for (const auto& d : sharding.dims)
        if (!d.empty()) return Error("a sharding over a maximal mesh cannot shard a dimension");
      return HloSharding::AssignDevice(mesh->device_order()[0]);
    }
    return HloSharding::Replicate();
  }
  // Every axis reference, to split axes into the sub-axes the sharding uses.
  const auto k = static_cast<size_t>(mesh->num_axes());
  std::vector<std::set<int64_t>> cuts(k);
  for (size_t a = 0; a < k; ++a) cuts[a] = {1, mesh->axis_size(static_cast<int64_t>(a))};
  auto axis_index = [&](const std::string& name) -> Result<size_t> {
    const int64_t i = mesh->AxisIndex(name);
    if (i < 0) return Error("the sharding names axis \"" + name + "\", which its mesh " + mesh->ToString() + " does not have");
    return static_cast<size_t>(i);
  };
  auto note = [&](const SdyAxisRef& r) -> std::optional<Error> {
    auto a = axis_index(r.name);
    if (!a.ok()) return a.error();
    if (r.size == 0) return std::nullopt;
    const int64_t n = mesh->axis_size(static_cast<int64_t>(*a));
    if (r.pre_size > n || r.size > n / r.pre_size || n % (r.pre_size * r.size) != 0)
      return Error("sub-axis " + r.ToString() + " does not divide axis \"" + r.name + "\" of size " + std::to_string(n));
    cuts[*a].insert(r.pre_size);
    cuts[*a].insert(r.pre_size * r.size);
    return std::nullopt;
  };
  for (const auto& d : sharding.dims)
    for (const auto& r : d)
      if (auto e = note(r)) return *e;
  for (const auto& r : sharding.unreduced)
    if (auto e = note(r)) return *e;
  for (const auto& r : sharding.replicated)
    if (auto e = note(r)) return *e;
  for (const auto& name : manual_axes)
    if (auto e = note(SdyAxisRef{name, 1, 0})) return *e;
  // Refined axes, major to minor within each axis; cut positions index the pieces.
  std::vector<MeshAxis> refined;
  std::vector<std::vector<int64_t>> cut_list(k), first_piece(k);
  for (size_t a = 0; a < k; ++a) {
    cut_list[a].assign(cuts[a].begin(), cuts[a].end());
    for (size_t i = 1; i < cut_list[a].size(); ++i)
      if (cut_list[a][i] % cut_list[a][i - 1] != 0)
        return Error("the sub-axes of \"" + mesh->axes()[a].name + "\" overlap without nesting");
    first_piece[a].push_back(static_cast<int64_t>(refined.size()));
    for (size_t i = 0; i + 1 < cut_list[a].size(); ++i) {
      std::string name = mesh->axes()[a].name;
      if (cut_list[a].size() > 2)
        name += ":(" + std::to_string(cut_list[a][i]) + ")" + std::to_string(cut_list[a][i + 1] / cut_list[a][i]);
      refined.push_back({name, cut_list[a][i + 1] / cut_list[a][i]});
    }
  }
  auto pieces = [&](const SdyAxisRef& r) {
    const size_t a = *axis_index(r.name);
    const auto& c = cut_list[a];
    const int64_t lo = r.size == 0 ? 1 : r.pre_size;
    const int64_t hi = r.size == 0 ? c.back() : r.pre_size * r.size;
    std::vector<int64_t> out;
    for (size_t i = 0; i + 1 < c.size(); ++i)
      if (c[i] >= lo && c[i + 1] <= hi) out.push_back(first_piece[a][0] + static_cast<int64_t>(i));
    return out;
  };
  // Manual axes are the region's own: a local value is not split along them any more.
  AxisAssignment assignment;
  for (const auto& name : manual_axes)
    for (int64_t p : pieces(SdyAxisRef{name, 1, 0})) assignment.manual_axes.push_back(p);
  auto is_manual = [&](int64_t p) {
    return std::find(assignment.manual_axes.begin(), assignment.manual_axes.end(), p) != assignment.manual_axes.end();
  };
  for (const auto& d : sharding.dims) {
    std::vector<int64_t> axes;
    for (const auto& r : d)
      for (int64_t p : pieces(r))
        if (!is_manual(p)) axes.push_back(p);
    assignment.dim_axes.push_back(std::move(axes));
  }
  for (const auto& r : sharding.unreduced)
    for (int64_t p : pieces(r))
      if (!is_manual(p)) assignment.unreduced_axes.push_back(p);
  const DeviceMesh refined_mesh(std::move(refined), mesh->device_order());
  return MeshShard(static_cast<int64_t>(sharding.dims.size()), refined_mesh, assignment);
}

}  // namespace shardscope
