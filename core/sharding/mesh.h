// Logical device mesh with named axes, mesh_split (GSPMD §3.1, Fig. 1) and the named-axis notation
// of "How To Scale Your Model" part 3: A[I_X, J_Y], A[I_XY, J], {U_X} for unreduced.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/sharding/sharding.h"
#include "core/base/status.h"

namespace shardscope {

struct MeshAxis {
  std::string name;  // "X", "Y", "data", ...
  int64_t size = 1;
};

class DeviceMesh {
 public:
  DeviceMesh() = default;
  // Devices default to 0..N-1 in row-major order over the axes.
  explicit DeviceMesh(std::vector<MeshAxis> axes);
  DeviceMesh(std::vector<MeshAxis> axes, std::vector<int64_t> device_order);
  // "X=4,Y=4" or "x:2,y:8,z:2" or "{X:2, Y:8, Z:2}".
  static Result<DeviceMesh> Parse(std::string_view text);
  std::string ToString() const;  // "X=4,Y=4"

  const std::vector<MeshAxis>& axes() const { return axes_; }
  int64_t num_axes() const { return static_cast<int64_t>(axes_.size()); }
  int64_t num_devices() const;
  int64_t AxisIndex(std::string_view name) const;  // -1 if absent
  int64_t axis_size(int64_t i) const { return axes_[static_cast<size_t>(i)].size; }
  const std::vector<int64_t>& device_order() const { return devices_; }  // row-major over axes
  // Device at mesh coordinates / coordinates of a device.
  int64_t DeviceAt(const std::vector<int64_t>& coords) const;
  std::vector<int64_t> CoordsOf(int64_t device) const;
  TileAssignment AsTileAssignment() const;  // dims = axis sizes, devices = device_order

  bool operator==(const DeviceMesh& o) const;

 private:
  std::vector<MeshAxis> axes_;
  std::vector<int64_t> devices_;
};

// GSPMD mesh_split(tensor, device_mesh, dims_mapping): dims_mapping[i] is the mesh axis that
// tensor dim i is split along, or -1 for not split. Mesh axes not used replicate the tensor
// (partial replication); when every axis is unused the result is Replicate().
Result<HloSharding> MeshSplit(int64_t rank, const DeviceMesh& mesh, const std::vector<int64_t>& dims_mapping);

// Generalised form: each tensor dim may be split along several mesh axes, major to minor
// ({{0,1}, {}} means dim 0 split over axes 0 and 1 — I_XY). `unreduced_axes` become an unreduced
// subgroup, `manual_axes` a manual subgroup (the axes a manual region, shard_map, owns).
struct AxisAssignment {
  std::vector<std::vector<int64_t>> dim_axes;  // per tensor dim: mesh axis indices, major first
  std::vector<int64_t> unreduced_axes;         // mesh axes holding partial sums ({U_X})
  std::vector<int64_t> manual_axes;            // mesh axes of a manual region
};
Result<HloSharding> MeshShard(int64_t rank, const DeviceMesh& mesh, const AxisAssignment& assignment);

// Recovers the per-dim mesh axes of a sharding over `mesh` (inverse of MeshShard). Error when the
// sharding's tile assignment cannot be expressed over this mesh.
Result<AxisAssignment> AxesOf(const HloSharding& sharding, int64_t rank, const DeviceMesh& mesh);

// Named-axis notation. Dimension letters default to I, J, K, L, M, ... when `dim_names` is empty.
// Examples: "A[I_X, J_Y]", "A[I_XY, J]", "A[I, J]{U_X}". Multi-letter axis names are joined with
// no separator when all names are single letters, otherwise with '.' ("I_data.model").
Result<std::string> ToNamedAxes(const HloSharding& sharding, int64_t rank, const DeviceMesh& mesh,
                                std::string_view tensor_name = "A",
                                const std::vector<std::string>& dim_names = {});
// Parses "[I_X, J_Y]", "A[I_XY, J]{U_Z}", "[E_Y, F]" over `mesh` for a tensor of `rank`.
Result<HloSharding> ParseNamedAxes(std::string_view text, int64_t rank, const DeviceMesh& mesh);

}  // namespace shardscope
