// The model zoo's registry: every model family (transformer.h, mlp.h, ...) adds its entries —
// a name, a description, its settings with defaults, how to build the module and the mesh its
// annotations refer to — and the CLI, the GUI, the tests and the benchmarks build models by name
// with setting overrides. A new family is a new file plus one line in zoo.cpp's table.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/status.h"
#include "core/ir/ir.h"
#include "core/sharding/mesh.h"

namespace shardscope {

struct ZooParameter {
  std::string name;           // "batch"
  std::string default_value;  // "8"
  std::string description;
};
using ZooOverrides = std::map<std::string, std::string, std::less<>>;

// A model's settings after overrides, with typed readers that remember the first error (so a
// family reads all it needs and checks ok() once).
class ZooParams {
 public:
  ZooParams(const std::string& model, const std::vector<ZooParameter>& parameters, const ZooOverrides& overrides);
  int64_t Int(const std::string& k);
  bool Bool(const std::string& k);
  double Real(const std::string& k);
  // Comma-separated integers ("3,4,6,3").
  std::vector<int64_t> IntList(const std::string& k);
  const std::string& Str(const std::string& k);
  // A floating-point element type; `fallback` when the setting is empty.
  PrimitiveType FloatType(const std::string& k, PrimitiveType fallback);
  // One of `choices` (the error lists them).
  std::string Choice(const std::string& k, const std::vector<std::string>& choices);
  void Fail(const std::string& e);
  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }

 private:
  std::map<std::string, std::string> values_;
  std::string error_;
};

struct ZooModel {
  std::string name;  // "transformer-layer"
  std::string description;
  std::vector<ZooParameter> parameters;
  std::function<Result<std::unique_ptr<Module>>(ZooParams&)> build;
  // The mesh the model's annotations refer to.
  std::function<Result<DeviceMesh>(ZooParams&)> mesh;
};

// Settings most families share ("annotations", "mesh_x", "mesh_y", "dtype", "act_dtype",
// "learning_rate") and the 2-D (X, Y) mesh they describe.
const std::vector<ZooParameter>& ZooCommonParameters();
// A family's own parameters followed by the common ones it does not list itself (its own entry of
// a common name, e.g. "annotations", replaces the common one).
std::vector<ZooParameter> WithCommonParameters(std::vector<ZooParameter> own);
Result<DeviceMesh> ZooMeshXY(ZooParams& p);

// Every model of the zoo, in the order the families are listed in zoo.cpp.
std::vector<ZooModel> ZooList();
// Builds a model with parameter overrides ({"layers", "64"}, {"annotations", "attempt2"}, ...).
// Unknown models or parameters and malformed values give an Error listing what is accepted; the
// built module is verified.
Result<std::unique_ptr<Module>> ZooBuild(std::string_view name, const ZooOverrides& overrides = {});
struct ZooBuildOptions {
  // Off: the module is not verified, for a caller that only counts its parameters and FLOPs (the
  // strategy search's bounds, whose modules are dropped and built again, verified, if evaluated).
  bool verify = true;
};
Result<std::unique_ptr<Module>> ZooBuild(std::string_view name, const ZooOverrides& overrides, const ZooBuildOptions& options);
// The mesh a zoo model's annotations refer to.
Result<DeviceMesh> ZooMesh(std::string_view name, const ZooOverrides& overrides = {});
// The overrides that make a zoo model's annotations refer to `mesh` (what `max-batch --mesh` and
// any caller that names a mesh beside a model need): each axis of `mesh` sets the model's setting
// for it — "mesh_x" for X, "mesh_y" for Y, or the parameter described as "(mesh axis L)" (the
// pipelined Transformer's "stages") — matched case-insensitively, and a model axis `mesh` does not
// name is set to 1. An override that contradicts `mesh`, an axis the model has no setting for, or
// a result whose mesh differs from `mesh` (axes of size 1 aside) is an error that names both.
Result<ZooOverrides> ZooOverridesForMesh(std::string_view name, ZooOverrides overrides, const DeviceMesh& mesh);
// The example the GUI opens on: "transformer-layer" (4x4 mesh, 2D finalized annotations).
inline constexpr std::string_view kZooDefaultExample = "transformer-layer";

}  // namespace shardscope
