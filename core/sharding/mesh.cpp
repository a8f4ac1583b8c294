// Logical device mesh, GSPMD mesh_split (§3.1, Fig. 1) and the named-axis notation of "How To
// Scale Your Model" part 3 (A[I_X, J_Y], A[I_XY, J], {U_X}).
#include "core/sharding/mesh.h"

#include <algorithm>
#include <cctype>
#include <limits>
#include <numeric>

#include "core/sharding/tile_assignment.h"

namespace shardscope {

namespace {

std::vector<int64_t> AxisSizes(const std::vector<MeshAxis>& axes) {
  std::vector<int64_t> sizes;
  for (const auto& a : axes) sizes.push_back(a.size);
  return sizes;
}

std::vector<int64_t> DefaultOrder(const std::vector<MeshAxis>& axes) {
  const int64_t n = CheckedProduct(AxisSizes(axes)).value_or(0);
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  return order;
}

bool IsDefaultOrder(const std::vector<int64_t>& order) {
  for (size_t i = 0; i < order.size(); ++i) {
    if (order[i] != static_cast<int64_t>(i)) return false;
  }
  return true;
}

std::string JoinInts(const std::vector<int64_t>& v) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? "," : "") + std::to_string(v[i]);
  return out;
}

// A small cursor for the mesh and named-axis grammars.
class Cursor {
 public:
  explicit Cursor(std::string_view s) : s(s) {}
  std::string_view s;
  size_t pos = 0;

  void SkipWs() {
    while (pos < s.size() && std::isspace(static_cast<unsigned char>(s[pos]))) ++pos;
  }
  bool AtEnd() {
    SkipWs();
    return pos >= s.size();
  }
  char Peek() {
    SkipWs();
    return pos < s.size() ? s[pos] : '\0';
  }
  bool Eat(char c) {
    if (Peek() == c && pos < s.size()) {
      ++pos;
      return true;
    }
    return false;
  }
  std::string Describe(size_t p) const {
    while (p < s.size() && std::isspace(static_cast<unsigned char>(s[p]))) ++p;
    if (p >= s.size()) return "end of text";
    size_t e = p;
    while (e < s.size() && e - p < 24 && (std::isalnum(static_cast<unsigned char>(s[e])) || s[e] == '_')) ++e;
    if (e == p) e = p + 1;
    return "'" + std::string(s.substr(p, e - p)) + "'";
  }
  Error Expected(const std::string& what) {
    SkipWs();
    return Error("expected " + what + ", found " + Describe(pos), static_cast<int64_t>(pos));
  }
  // Non-negative integer; nullopt (with *error set) on failure.
  std::optional<int64_t> Int(const std::string& what, Error* error) {
    SkipWs();
    const size_t start = pos;
    if (pos >= s.size() || !std::isdigit(static_cast<unsigned char>(s[pos]))) {
      *error = Expected(what);
      return std::nullopt;
    }
    int64_t v = 0;
    while (pos < s.size() && std::isdigit(static_cast<unsigned char>(s[pos]))) {
      const int digit = s[pos] - '0';
      if (v > (std::numeric_limits<int64_t>::max() - digit) / 10) {
        *error = Error("expected " + what + ", found a number that does not fit in 64 bits",
                       static_cast<int64_t>(start));
        return std::nullopt;
      }
      v = v * 10 + digit;
      ++pos;
    }
    return v;
  }
  // Axis name: identifier, or quoted with ' " or the typographic quotes of the book.
  std::optional<std::string> Name(Error* error) {
    SkipWs();
    static const std::string_view kOpenCurly = "\xE2\x80\x98", kCloseCurly = "\xE2\x80\x99";
    auto starts = [&](std::string_view t) { return s.substr(pos, t.size()) == t; };
    const size_t start = pos;
    if (pos < s.size() && (s[pos] == '\'' || s[pos] == '"' || starts(kOpenCurly))) {
      size_t open_len = starts(kOpenCurly) ? kOpenCurly.size() : 1;
      pos += open_len;
      const size_t begin = pos;
      while (pos < s.size() && s[pos] != '\'' && s[pos] != '"' && !starts(kCloseCurly)) ++pos;
      if (pos >= s.size()) {
        *error = Error("expected a closing quote after the axis name, found end of text", static_cast<int64_t>(start));
        return std::nullopt;
      }
      std::string name(s.substr(begin, pos - begin));
      pos += starts(kCloseCurly) ? kCloseCurly.size() : 1;
      if (name.empty()) {
        *error = Error("expected an axis name, found an empty name", static_cast<int64_t>(start));
        return std::nullopt;
      }
      return name;
    }
    while (pos < s.size() && (std::isalnum(static_cast<unsigned char>(s[pos])) || s[pos] == '_')) ++pos;
    if (pos == start) {
      *error = Expected("a mesh axis name");
      return std::nullopt;
    }
    return std::string(s.substr(start, pos - start));
  }
};

}  // namespace

// ---------------------------------------------------------------------------------------------
// DeviceMesh

DeviceMesh::DeviceMesh(std::vector<MeshAxis> axes) : axes_(std::move(axes)), devices_(DefaultOrder(axes_)) {}

DeviceMesh::DeviceMesh(std::vector<MeshAxis> axes, std::vector<int64_t> device_order)
    : axes_(std::move(axes)), devices_(std::move(device_order)) {}

Result<DeviceMesh> DeviceMesh::Parse(std::string_view text) {
  Cursor c(text);
  Error error;
  std::vector<char> closers;
  // Optional wrappers: Mesh( ... ), mesh[ ... ], { ... }, [ ... ], ( ... ).
  {
    const size_t save = c.pos;
    c.SkipWs();
    std::string_view rest = text.substr(c.pos);
    if (rest.size() >= 4 && (rest.substr(0, 4) == "mesh" || rest.substr(0, 4) == "Mesh") &&
        (rest.size() == 4 || !std::isalnum(static_cast<unsigned char>(rest[4])))) {
      c.pos += 4;
      if (c.Peek() != '(' && c.Peek() != '[') c.pos = save;
    }
  }
  while (true) {
    const char p = c.Peek();
    if (p == '{') closers.push_back('}');
    else if (p == '[') closers.push_back(']');
    else if (p == '(') closers.push_back(')');
    else break;
    ++c.pos;
  }
  std::vector<MeshAxis> axes;
  do {
    const size_t name_off = (c.SkipWs(), c.pos);
    auto name = c.Name(&error);
    if (!name) return error;
    for (const auto& a : axes) {
      if (a.name == *name) {
        return Error("expected distinct mesh axis names, found '" + *name + "' twice", static_cast<int64_t>(name_off));
      }
    }
    if (!c.Eat('=') && !c.Eat(':')) return c.Expected("'=' or ':' after mesh axis '" + *name + "'");
    const size_t size_off = (c.SkipWs(), c.pos);
    auto size = c.Int("the size of mesh axis '" + *name + "'", &error);
    if (!size) return error;
    if (*size < 1) {
      return Error("expected a positive size for mesh axis '" + *name + "', found 0", static_cast<int64_t>(size_off));
    }
    axes.push_back(MeshAxis{*name, *size});
    if (c.Peek() != ',') break;
    size_t after = c.pos + 1;
    while (after < text.size() && std::isspace(static_cast<unsigned char>(text[after]))) ++after;
    if (text.substr(after, 10) == "device_ids") break;  // the comma before device_ids=(...)
    ++c.pos;
  } while (true);
  while (!closers.empty()) {
    if (!c.Eat(closers.back())) return c.Expected(std::string("'") + closers.back() + "' or ','");
    closers.pop_back();
  }
  if (!CheckedProduct(AxisSizes(axes))) {
    return Error("mesh has more than " + std::to_string(kMaxShardingDevices) + " devices", 0);
  }
  DeviceMesh mesh(axes);
  c.Eat(',');
  if (!c.AtEnd()) {
    const size_t kw = c.pos;
    if (text.substr(kw, 10) != "device_ids") return c.Expected("end of the mesh or device_ids=(...)");
    c.pos += 10;
    if (!c.Eat('=')) return c.Expected("'=' after device_ids");
    if (!c.Eat('(')) return c.Expected("'(' to start the device_ids list");
    std::vector<int64_t> ids;
    std::vector<bool> seen(static_cast<size_t>(mesh.num_devices()), false);
    do {
      const size_t off = (c.SkipWs(), c.pos);
      auto id = c.Int("a device id", &error);
      if (!id) return error;
      if (*id >= mesh.num_devices()) {
        return Error("expected a device id below " + std::to_string(mesh.num_devices()) + ", found " +
                         std::to_string(*id), static_cast<int64_t>(off));
      }
      if (seen[static_cast<size_t>(*id)]) {
        return Error("expected distinct device ids, found " + std::to_string(*id) + " twice", static_cast<int64_t>(off));
      }
      seen[static_cast<size_t>(*id)] = true;
      ids.push_back(*id);
    } while (c.Eat(','));
    if (!c.Eat(')')) return c.Expected("')' or ',' in the device_ids list");
    if (static_cast<int64_t>(ids.size()) != mesh.num_devices()) {
      return Error("expected " + std::to_string(mesh.num_devices()) + " device ids, found " + std::to_string(ids.size()),
                   static_cast<int64_t>(kw));
    }
    mesh.devices_ = std::move(ids);
    if (!c.AtEnd()) return c.Expected("end of the mesh");
  }
  return mesh;
}

std::string DeviceMesh::ToString() const {
  // Plain identifiers print bare ("X=4"); other names are quoted so that Parse reads them back.
  auto name = [](const std::string& n) {
    const bool plain = !n.empty() && std::all_of(n.begin(), n.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
    });
    if (plain) return n;
    return n.find('\'') == std::string::npos ? "'" + n + "'" : "\"" + n + "\"";
  };
  std::string out;
  for (size_t i = 0; i < axes_.size(); ++i) {
    out += (i ? "," : "") + name(axes_[i].name) + "=" + std::to_string(axes_[i].size);
  }
  if (!IsDefaultOrder(devices_)) out += " device_ids=(" + JoinInts(devices_) + ")";
  return out;
}

int64_t DeviceMesh::num_devices() const {
  int64_t n = 1;
  for (const auto& a : axes_) {
    if (a.size <= 0) return 0;
    if (n > std::numeric_limits<int64_t>::max() / a.size) return std::numeric_limits<int64_t>::max();
    n *= a.size;
  }
  return n;
}

int64_t DeviceMesh::AxisIndex(std::string_view name) const {
  for (size_t i = 0; i < axes_.size(); ++i) {
    if (axes_[i].name == name) return static_cast<int64_t>(i);
  }
  return -1;
}

int64_t DeviceMesh::DeviceAt(const std::vector<int64_t>& coords) const {
  if (coords.size() != axes_.size()) return -1;
  int64_t flat = 0;
  for (size_t i = 0; i < axes_.size(); ++i) {
    if (coords[i] < 0 || coords[i] >= axes_[i].size) return -1;
    flat = flat * axes_[i].size + coords[i];
  }
  if (flat >= static_cast<int64_t>(devices_.size())) return -1;
  return devices_[static_cast<size_t>(flat)];
}

std::vector<int64_t> DeviceMesh::CoordsOf(int64_t device) const {
  auto it = std::find(devices_.begin(), devices_.end(), device);
  if (it == devices_.end()) return {};
  int64_t flat = it - devices_.begin();
  std::vector<int64_t> coords(axes_.size(), 0);
  for (size_t i = axes_.size(); i-- > 0;) {
    if (axes_[i].size <= 0) return {};
    coords[i] = flat % axes_[i].size;
    flat /= axes_[i].size;
  }
  return coords;
}

TileAssignment DeviceMesh::AsTileAssignment() const {
  std::vector<int64_t> dims = AxisSizes(axes_);
  if (IsDefaultOrder(devices_)) return TileAssignment::Iota(dims);
  return TileAssignment::Explicit(dims, devices_);
}

bool DeviceMesh::operator==(const DeviceMesh& o) const {
  if (axes_.size() != o.axes_.size() || devices_ != o.devices_) return false;
  for (size_t i = 0; i < axes_.size(); ++i) {
    if (axes_[i].name != o.axes_[i].name || axes_[i].size != o.axes_[i].size) return false;
  }
  return true;
}

// ---------------------------------------------------------------------------------------------
// mesh_split / MeshShard / AxesOf

Result<HloSharding> MeshSplit(int64_t rank, const DeviceMesh& mesh, const std::vector<int64_t>& dims_mapping) {
  if (static_cast<int64_t>(dims_mapping.size()) != rank) {
    return Error("mesh_split: dims_mapping has " + std::to_string(dims_mapping.size()) +
                 " entries but the tensor has rank " + std::to_string(rank));
  }
  AxisAssignment assignment;
  for (size_t d = 0; d < dims_mapping.size(); ++d) {
    const int64_t axis = dims_mapping[d];
    if (axis == -1) {
      assignment.dim_axes.push_back({});
    } else if (axis < 0 || axis >= mesh.num_axes()) {
      return Error("mesh_split: dims_mapping[" + std::to_string(d) + "] = " + std::to_string(axis) +
                   " is not a mesh dimension (the mesh has " + std::to_string(mesh.num_axes()) +
                   " dimensions; use -1 for not split)");
    } else {
      assignment.dim_axes.push_back({axis});
    }
  }
  return MeshShard(rank, mesh, assignment);
}

Result<HloSharding> MeshShard(int64_t rank, const DeviceMesh& mesh, const AxisAssignment& assignment) {
  if (rank < 0) return Error("tensor rank must not be negative, got " + std::to_string(rank));
  if (static_cast<int64_t>(assignment.dim_axes.size()) > rank) {
    return Error("the axis assignment names " + std::to_string(assignment.dim_axes.size()) +
                 " dimensions but the tensor has rank " + std::to_string(rank));
  }
  const int64_t num_devices = mesh.num_devices();
  if (num_devices <= 0 || num_devices > kMaxShardingDevices ||
      static_cast<int64_t>(mesh.device_order().size()) != num_devices) {
    return Error("mesh " + mesh.ToString() + " is invalid: its device order has " +
                 std::to_string(mesh.device_order().size()) + " devices for " + std::to_string(num_devices) +
                 " mesh positions");
  }
  const size_t k = static_cast<size_t>(mesh.num_axes());
  std::vector<bool> used(k, false);
  std::vector<int64_t> perm, tile_dims;
  std::vector<HloSharding::SubgroupType> types;
  auto use = [&](int64_t axis, const std::string& where) -> std::optional<Error> {
    if (axis < 0 || axis >= static_cast<int64_t>(k)) {
      return Error(where + " refers to mesh axis " + std::to_string(axis) + " but the mesh " + mesh.ToString() +
                   " has " + std::to_string(k) + " axes");
    }
    if (used[static_cast<size_t>(axis)]) {
      return Error("mesh axis " + mesh.axes()[static_cast<size_t>(axis)].name +
                   " is used twice; a mesh axis can shard only one tensor dimension");
    }
    used[static_cast<size_t>(axis)] = true;
    perm.push_back(axis);
    return std::nullopt;
  };
  for (int64_t d = 0; d < rank; ++d) {
    int64_t size = 1;
    if (d < static_cast<int64_t>(assignment.dim_axes.size())) {
      for (int64_t axis : assignment.dim_axes[static_cast<size_t>(d)]) {
        if (auto e = use(axis, "dimension " + std::to_string(d))) return *e;
        size *= mesh.axis_size(axis);
      }
    }
    tile_dims.push_back(size);
  }
  auto subgroup = [&](const std::vector<int64_t>& axes, const std::string& where,
                      HloSharding::SubgroupType type) -> std::optional<Error> {
    if (axes.empty()) return std::nullopt;
    int64_t size = 1;
    for (int64_t axis : axes) {
      if (auto e = use(axis, where)) return *e;
      size *= mesh.axis_size(axis);
    }
    tile_dims.push_back(size);
    types.push_back(type);
    return std::nullopt;
  };
  if (auto e = subgroup(assignment.manual_axes, "the manual axes", HloSharding::SubgroupType::kManual)) return *e;
  if (auto e = subgroup(assignment.unreduced_axes, "the unreduced axes", HloSharding::SubgroupType::kUnreduced))
    return *e;
  int64_t replicated = 1;
  for (size_t a = 0; a < k; ++a) {
    if (!used[a]) {
      perm.push_back(static_cast<int64_t>(a));
      replicated *= mesh.axis_size(static_cast<int64_t>(a));
    }
  }
  if (replicated > 1) {
    tile_dims.push_back(replicated);
    types.push_back(HloSharding::SubgroupType::kReplicated);
  }
  TileAssignment tiles = mesh.AsTileAssignment().Transpose(perm).Reshape(tile_dims);
  return HloSharding::Subgroup(std::move(tiles), types);
}

Result<AxisAssignment> AxesOf(const HloSharding& sharding, int64_t rank, const DeviceMesh& mesh) {
  const size_t k = static_cast<size_t>(mesh.num_axes());
  AxisAssignment result;
  result.dim_axes.assign(static_cast<size_t>(std::max<int64_t>(rank, 0)), {});
  switch (sharding.kind()) {
    case HloSharding::Kind::kReplicated: return result;
    case HloSharding::Kind::kUnreduced:
      for (size_t a = 0; a < k; ++a) {
        if (mesh.axis_size(static_cast<int64_t>(a)) > 1) result.unreduced_axes.push_back(static_cast<int64_t>(a));
      }
      return result;
    case HloSharding::Kind::kTiled: break;
    default:
      return Error("sharding " + sharding.ToString() + " is not expressible over mesh axes (only replicated, "
                   "tiled, partially replicated and unreduced shardings are)");
  }
  if (sharding.TiledDataRank() != rank) {
    return Error("sharding " + sharding.ToString() + " tiles " + std::to_string(sharding.TiledDataRank()) +
                 " dimensions but the tensor has rank " + std::to_string(rank));
  }
  const TileAssignment& tiles = sharding.tile_assignment();
  const int64_t n = mesh.num_devices();
  if (tiles.num_elements() != n || static_cast<int64_t>(mesh.device_order().size()) != n) {
    return Error("sharding " + sharding.ToString() + " spans " + std::to_string(tiles.num_elements()) +
                 " devices but mesh " + mesh.ToString() + " has " + std::to_string(n));
  }
  const auto& types = sharding.subgroup_types();
  const int64_t data_rank = sharding.TiledDataRank();
  // Tile index (data and subgroup dims) of every mesh position.
  std::vector<std::vector<int64_t>> index(static_cast<size_t>(n));
  for (int64_t flat = 0; flat < n; ++flat) {
    index[static_cast<size_t>(flat)] = tiles.IndexOfDevice(mesh.device_order()[static_cast<size_t>(flat)]);
    if (index[static_cast<size_t>(flat)].empty()) {
      return Error("mesh device " + std::to_string(mesh.device_order()[static_cast<size_t>(flat)]) +
                   " is not in the tile assignment of " + sharding.ToString());
    }
  }
  std::vector<int64_t> stride(k, 1);
  for (size_t a = k; a-- > 1;) stride[a - 1] = stride[a] * mesh.axis_size(static_cast<int64_t>(a));
  // Which tile dim each axis drives: a replicated subgroup dim never counts (its order is sorted).
  const int64_t num_tile_dims = tiles.num_dimensions();
  std::vector<std::vector<std::pair<int64_t, int64_t>>> by_dim(static_cast<size_t>(num_tile_dims));  // (stride, axis)
  for (size_t a = 0; a < k; ++a) {
    const int64_t size = mesh.axis_size(static_cast<int64_t>(a));
    if (size <= 1) continue;
    std::vector<bool> affected(static_cast<size_t>(num_tile_dims), false);
    for (int64_t flat = 0; flat < n; ++flat) {
      const int64_t coord = (flat / stride[a]) % size;
      if (coord + 1 >= size) continue;
      const auto& here = index[static_cast<size_t>(flat)];
      const auto& next = index[static_cast<size_t>(flat + stride[a])];
      for (int64_t t = 0; t < num_tile_dims; ++t) {
        if (here[static_cast<size_t>(t)] != next[static_cast<size_t>(t)]) affected[static_cast<size_t>(t)] = true;
      }
    }
    std::vector<int64_t> dims;
    for (int64_t t = 0; t < num_tile_dims; ++t) {
      const bool replicated_dim = t >= data_rank &&
                                  types[static_cast<size_t>(t - data_rank)] == HloSharding::SubgroupType::kReplicated;
      if (affected[static_cast<size_t>(t)] && !replicated_dim) dims.push_back(t);
    }
    if (dims.empty()) continue;  // replicated along this axis
    if (dims.size() > 1) {
      return Error("sharding " + sharding.ToString() + " is not expressible over mesh " + mesh.ToString() +
                   ": mesh axis " + mesh.axes()[a].name + " would shard more than one dimension");
    }
    const int64_t t = dims[0];
    if (t >= data_rank && types[static_cast<size_t>(t - data_rank)] != HloSharding::SubgroupType::kUnreduced) {
      return Error("sharding " + sharding.ToString() + " has a " +
                   std::string(SubgroupTypeName(types[static_cast<size_t>(t - data_rank)])) +
                   " subgroup, which has no mesh-axis notation");
    }
    // Stride of this axis within the tile dim: index change when moving one step from the origin.
    const int64_t step = index[static_cast<size_t>(stride[a])][static_cast<size_t>(t)] - index[0][static_cast<size_t>(t)];
    by_dim[static_cast<size_t>(t)].emplace_back(step, static_cast<int64_t>(a));
  }
  for (int64_t t = 0; t < num_tile_dims; ++t) {
    auto& axes = by_dim[static_cast<size_t>(t)];
    std::sort(axes.begin(), axes.end(), [](const auto& x, const auto& y) { return x.first > y.first; });
    std::vector<int64_t> ordered;
    for (const auto& p : axes) ordered.push_back(p.second);
    if (t < data_rank) {
      result.dim_axes[static_cast<size_t>(t)] = ordered;
    } else {
      result.unreduced_axes.insert(result.unreduced_axes.end(), ordered.begin(), ordered.end());
    }
  }
  auto rebuilt = MeshShard(rank, mesh, result);
  if (!rebuilt.ok() || rebuilt->tile_assignment() != tiles || rebuilt->subgroup_types() != types ||
      rebuilt->kind() != sharding.kind()) {
    return Error("sharding " + sharding.ToString() + " is not expressible over mesh " + mesh.ToString() +
                 ": its device order is not a split of the mesh axes");
  }
  return result;
}

// ---------------------------------------------------------------------------------------------
// Named-axis notation

namespace {

std::string DefaultDimName(size_t i) {
  static const char* kNames[] = {"I", "J", "K", "L", "M", "N", "O", "P", "Q", "R", "S", "T"};
  if (i < sizeof(kNames) / sizeof(kNames[0])) return kNames[i];
  return "D" + std::to_string(i);
}

bool AllSingleLetterAxes(const DeviceMesh& mesh) {
  return std::all_of(mesh.axes().begin(), mesh.axes().end(), [](const MeshAxis& a) { return a.name.size() == 1; });
}

std::string AxesSubscript(const DeviceMesh& mesh, const std::vector<int64_t>& axes) {
  const bool compact = AllSingleLetterAxes(mesh);
  std::string out;
  for (size_t i = 0; i < axes.size(); ++i) {
    if (i && !compact) out += ".";
    out += mesh.axes()[static_cast<size_t>(axes[i])].name;
  }
  return out;
}

}  // namespace

Result<std::string> ToNamedAxes(const HloSharding& sharding, int64_t rank, const DeviceMesh& mesh,
                                std::string_view tensor_name, const std::vector<std::string>& dim_names) {
  auto axes = AxesOf(sharding, rank, mesh);
  if (!axes.ok()) return axes.error();
  std::string out(tensor_name);
  out += "[";
  for (int64_t d = 0; d < rank; ++d) {
    if (d) out += ", ";
    out += static_cast<size_t>(d) < dim_names.size() ? dim_names[static_cast<size_t>(d)]
                                                      : DefaultDimName(static_cast<size_t>(d));
    const auto& dim_axes = axes->dim_axes[static_cast<size_t>(d)];
    if (!dim_axes.empty()) out += "_" + AxesSubscript(mesh, dim_axes);
  }
  out += "]";
  if (!axes->unreduced_axes.empty()) out += "{U_" + AxesSubscript(mesh, axes->unreduced_axes) + "}";
  return out;
}

namespace {

// Splits a subscript ("XY", "data.model", "{XY}") into mesh axes.
std::optional<Error> SplitSubscript(std::string_view sub, size_t offset, const DeviceMesh& mesh,
                                    std::vector<int64_t>* axes) {
  auto unknown = [&](std::string_view name, size_t off) {
    std::string names;
    for (const auto& a : mesh.axes()) names += (names.empty() ? "" : ", ") + a.name;
    return Error("expected a mesh axis (" + names + "), found '" + std::string(name) + "'", static_cast<int64_t>(off));
  };
  if (sub.find('.') != std::string_view::npos) {
    size_t start = 0;
    while (start <= sub.size()) {
      size_t end = sub.find('.', start);
      if (end == std::string_view::npos) end = sub.size();
      const std::string_view name = sub.substr(start, end - start);
      const int64_t a = mesh.AxisIndex(name);
      if (a < 0) return unknown(name, offset + start);
      axes->push_back(a);
      start = end + 1;
    }
    return std::nullopt;
  }
  size_t p = 0;
  while (p < sub.size()) {
    int64_t best = -1;
    size_t best_len = 0;
    for (size_t a = 0; a < mesh.axes().size(); ++a) {
      const std::string& name = mesh.axes()[a].name;
      if (name.size() > best_len && sub.substr(p, name.size()) == name) {
        best = static_cast<int64_t>(a);
        best_len = name.size();
      }
    }
    if (best < 0) return unknown(sub.substr(p), offset + p);
    axes->push_back(best);
    p += best_len;
  }
  return std::nullopt;
}

bool IsNameChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '\''; }
bool IsSubscriptChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_'; }

}  // namespace

Result<HloSharding> ParseNamedAxes(std::string_view text, int64_t rank, const DeviceMesh& mesh) {
  Cursor c(text);
  Error error;
  c.SkipWs();
  while (c.pos < text.size() && text[c.pos] != '[' && (IsNameChar(text[c.pos]) || text[c.pos] == '_')) ++c.pos;
  if (!c.Eat('[')) return c.Expected("'[' to start the dimension list (as in A[I_X, J])");
  AxisAssignment assignment;
  std::vector<size_t> axis_offsets(static_cast<size_t>(mesh.num_axes()), std::string_view::npos);
  auto record = [&](const std::vector<int64_t>& axes, size_t off) -> std::optional<Error> {
    for (int64_t a : axes) {
      if (axis_offsets[static_cast<size_t>(a)] != std::string_view::npos) {
        return Error("mesh axis " + mesh.axes()[static_cast<size_t>(a)].name +
                         " is used twice; a mesh axis can shard only one dimension",
                     static_cast<int64_t>(off));
      }
      axis_offsets[static_cast<size_t>(a)] = off;
    }
    return std::nullopt;
  };
  // Reads "_XY" / "_{XY}" at the cursor into axes.
  auto subscript = [&](std::vector<int64_t>* axes) -> std::optional<Error> {
    const size_t start = c.pos;
    std::string_view sub;
    size_t sub_off = start;
    if (c.pos < text.size() && text[c.pos] == '{') {
      const size_t end = text.find('}', c.pos);
      if (end == std::string_view::npos) return Error("expected '}' to close the subscript, found end of text", static_cast<int64_t>(start));
      sub_off = c.pos + 1;
      sub = text.substr(sub_off, end - sub_off);
      c.pos = end + 1;
    } else {
      while (c.pos < text.size() && IsSubscriptChar(text[c.pos])) ++c.pos;
      sub = text.substr(start, c.pos - start);
    }
    if (sub.empty()) return c.Expected("mesh axes after '_'");
    if (auto e = SplitSubscript(sub, sub_off, mesh, axes)) return e;
    return record(*axes, sub_off);
  };
  if (c.Peek() != ']') {
    do {
      c.SkipWs();
      const size_t name_start = c.pos;
      while (c.pos < text.size() && IsNameChar(text[c.pos])) ++c.pos;
      if (c.pos == name_start) return c.Expected("a dimension name (as in I or I_X)");
      std::vector<int64_t> axes;
      if (c.pos < text.size() && text[c.pos] == '_') {
        ++c.pos;
        if (auto e = subscript(&axes)) return *e;
      }
      assignment.dim_axes.push_back(std::move(axes));
    } while (c.Eat(','));
  }
  if (!c.Eat(']')) return c.Expected("']' or ',' in the dimension list");
  if (c.Eat('{')) {
    do {
      c.SkipWs();
      if (text.substr(c.pos, 2) != "U_") return c.Expected("'U_' followed by mesh axes (as in {U_X})");
      c.pos += 2;
      std::vector<int64_t> axes;
      if (auto e = subscript(&axes)) return *e;
      assignment.unreduced_axes.insert(assignment.unreduced_axes.end(), axes.begin(), axes.end());
    } while (c.Eat(','));
    if (!c.Eat('}')) return c.Expected("'}' or ',' to end the unreduced axes");
  }
  if (!c.AtEnd()) return c.Expected("end of the sharding");
  if (rank >= 0 && static_cast<int64_t>(assignment.dim_axes.size()) != rank) {
    return Error("expected " + std::to_string(rank) + " dimensions for a rank-" + std::to_string(rank) +
                     " tensor, found " + std::to_string(assignment.dim_axes.size()),
                 0);
  }
  return MeshShard(static_cast<int64_t>(assignment.dim_axes.size()), mesh, assignment);
}

}  // namespace shardscope
