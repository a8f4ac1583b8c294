#include "app/cli/slice_options.h"

#include "app/cli/cli.h"
#include "app/pipeline/simulate.h"

#include <vector>

namespace shardscope::cli {

using namespace shardscope::sim;

bool ParseInt(const std::string& text, int64_t lo, int64_t* out) {
  try {
    size_t used = 0;
    const long long v = std::stoll(text, &used);
    if (used != text.size() || v < lo) return false;
    *out = v;
    return true;
  } catch (...) {
    return false;
  }
}

SliceOptionTexts TakeSliceOptions(std::vector<std::string>& args) {
  SliceOptionTexts t;
  auto take = [&](const char* name, std::optional<std::string>& into) {
    std::string v;
    if (TakeOption(args, name, &v)) into = v;
  };
  take("chip", t.chip);
  take("mesh", t.mesh);
  take("topology", t.topology);
  take("placement", t.placement);
  take("cores-per-chip", t.cores);
  take("mesh-order", t.mesh_order);
  take("latency-model", t.latency_model);
  t.no_wraparound = TakeFlag(args, "no-wraparound");
  t.wraparound = TakeFlag(args, "wraparound");
  t.one_direction = TakeFlag(args, "one-direction");
  return t;
}

Result<Slice> ResolveSlice(const SliceOptionTexts& t) {
  if (!t.chip || !t.mesh) return Error("--chip and --mesh are required");
  if (t.wraparound && t.no_wraparound) return Error("--wraparound and --no-wraparound contradict each other");
  CollectiveOptions collectives;
  collectives.bidirectional = !t.one_direction;
  if (t.latency_model) {
    if (*t.latency_model == "overlapped") collectives.latency_model = LatencyModel::kOverlapped;
    else if (*t.latency_model == "additive") collectives.latency_model = LatencyModel::kAdditive;
    else return Error("--latency-model must be overlapped or additive, not '" + *t.latency_model + "'");
  }
  auto mesh = DeviceMesh::Parse(*t.mesh);
  if (!mesh.ok()) return Error("--mesh '" + *t.mesh + "': " + mesh.error().message);
  // The texts become the one SliceOptions the GUI fills too (app/pipeline/slice_options.h).
  pipeline::SliceOptions options;
  if (t.cores) {
    int64_t cores = 0;
    if (!ParseInt(*t.cores, 1, &cores)) return Error("--cores-per-chip must be 1 or 2, not '" + *t.cores + "'");
    options.cores_per_chip = cores;
  }
  if (t.topology) {
    auto shape = ParseSliceShape(*t.topology);
    if (!shape.ok()) return Error("--topology " + shape.error().message);
    options.shape = std::move(shape).value();
  }
  if (t.mesh_order) {
    if (t.mesh_order->empty()) return Error("--mesh-order takes the mesh axes minor first, e.g. Y,X");
    options.mesh_order = *t.mesh_order;
  }
  if (t.no_wraparound) options.wraparound = false;
  if (t.wraparound) options.wraparound = true;
  if (t.placement) {
    auto placement = MeshPlacementFromName(*t.placement);
    if (!placement.ok()) return Error("--placement: " + placement.error().message);
    options.placement = placement.value();
  }
  auto topology = pipeline::SliceForMesh(*t.chip, mesh.value(), options);
  if (!topology.ok()) return topology.error();
  ChipSpec spec = topology->chip();
  return Slice{std::move(spec), std::move(mesh.value()), std::move(topology.value()), collectives};
}

}  // namespace shardscope::cli
