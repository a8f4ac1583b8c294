// Shardy's attribute text, as JAX and XLA write it into HLO modules for the round trip through
// HLO: the meshes (module frontend attribute `xla.sdy.meshes`), tensor shardings
// (`xla.sdy.sharding`, `xla.sdy.in_shardings`, `xla.sdy.out_shardings`) and the manual axes of a
// manual computation (`xla.sdy.manual_axes`). Grammar (Shardy's dialect, sdy):
//
//   meshes    ::= '{' name '=' mesh (',' name '=' mesh)* '}'
//   mesh      ::= '#sdy.mesh<' '[' ('"axis"=' int (',' ...)*)? ']' (',' 'device_ids=[' ints ']')? '>'
//   sharding  ::= '#sdy.sharding<' (('@' name) | 'mesh<' ... '>') ',' '[' dim (',' dim)* ']'
//                 (',' 'replicated={' axes '}')? (',' 'unreduced={' axes '}')? '>'
//   per_value ::= '#sdy.sharding_per_value<[' '<' sharding-body '>' (',' ...)* ']>'
//   dim       ::= '{' (axis (',' axis)*)? (',' '?')? '}' ('p' int)?      ('?' = open dimension)
//   axis      ::= '"name"' (':(' pre_size ')' size)?                     (a sub-axis)
//   manual    ::= '#sdy<manual_axes{' axis (',' axis)* '}>'
//
// A mesh keeps the user's axis names (DeviceMesh). A sharding becomes an XLA HloSharding over
// the mesh (sub-axes split their axis); a mesh without axes but with one device id is a maximal
// mesh (the sharding is {maximal device=N}).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/status.h"
#include "core/sharding/mesh.h"
#include "core/sharding/sharding.h"

namespace shardscope {

struct SdyMesh {
  std::string name;  // the symbol name ("mesh", "maximal_mesh_0")
  DeviceMesh mesh;   // no axes and one device: a maximal mesh
  bool operator==(const SdyMesh&) const = default;
};

// An axis or a sub-axis of a mesh axis: "y":(2)2 is the part of axis y of size 2 whose major
// neighbours multiply to 2.
struct SdyAxisRef {
  std::string name;
  int64_t pre_size = 1;
  int64_t size = 0;  // 0: the whole axis
  std::string ToString() const;
};

struct SdyTensorSharding {
  std::string mesh_name;                  // "@mesh" without the '@'; empty for an inline mesh
  std::optional<DeviceMesh> inline_mesh;  // sharding<mesh<[...]>, ...>
  std::vector<std::vector<SdyAxisRef>> dims;  // per tensor dimension, major first
  std::vector<bool> open_dims;                // dimension written with '?'
  std::vector<SdyAxisRef> replicated, unreduced;
};

// `{mesh = #sdy.mesh<["x"=2]>, ...}` (the value of xla.sdy.meshes, unescaped).
Result<std::vector<SdyMesh>> ParseSdyMeshes(std::string_view text);
// `#sdy.mesh<["x"=2, "y"=4], device_ids=[...]>` or just `<["x"=2]>`.
Result<DeviceMesh> ParseSdyMesh(std::string_view text);
// `#sdy.sharding<...>` (one value) or `#sdy.sharding_per_value<[...]>` (one per result).
Result<std::vector<SdyTensorSharding>> ParseSdyShardings(std::string_view text);
// `#sdy<manual_axes{"x", "y"}>` -> {"x", "y"}.
Result<std::vector<std::string>> ParseSdyManualAxes(std::string_view text);

// The mesh a sharding refers to, by name among `meshes` or inline. nullptr when unknown.
const DeviceMesh* SdyMeshOf(const SdyTensorSharding& sharding, const std::vector<SdyMesh>& meshes);

// The XLA sharding of `sharding` for a tensor of its rank. With `manual_axes` (axis names of the
// mesh) the result is that of a manual computation's local value: the manual axes form a manual
// subgroup and no longer split a dimension.
Result<HloSharding> SdyToHloSharding(const SdyTensorSharding& sharding, const std::vector<SdyMesh>& meshes,
                                     const std::vector<std::string>& manual_axes = {});

}  // namespace shardscope
