#include "app/cli/slice_options.h"

#include "app/cli/cli.h"

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
  take("cores-per-chip", t.cores);
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
  auto chip = ResolveChip(*t.chip);
  if (!chip.ok()) return chip.error();
  ChipSpec spec = chip.value();
  if (t.cores) {
    int64_t cores = 0;
    if (!ParseInt(*t.cores, 1, &cores)) return Error("--cores-per-chip must be 1 or 2, not '" + *t.cores + "'");
    auto c = WithCoresPerChip(spec, cores);
    if (!c.ok()) return c.error();
    spec = c.value();
  }
  auto mesh = DeviceMesh::Parse(*t.mesh);
  if (!mesh.ok()) return Error("--mesh '" + *t.mesh + "': " + mesh.error().message);
  std::vector<int64_t> slice;
  if (t.topology) {
    std::string cur;
    for (char c : *t.topology + "x") {
      if (c == 'x' || c == ',') {
        int64_t v = 0;
        if (!ParseInt(cur, 1, &v)) return Error("--topology '" + *t.topology + "' is not a slice shape such as 4x4x4");
        slice.push_back(v);
        cur.clear();
      } else {
        cur += c;
      }
    }
  }
  TopologyOptions options;
  if (t.no_wraparound) options.wraparound = TopologyOptions::Wraparound::kNone;
  if (t.wraparound) options.wraparound = TopologyOptions::Wraparound::kAll;
  auto topology = Topology::ForMesh(spec, mesh.value(), slice, options);
  if (!topology.ok()) return topology.error();
  return Slice{std::move(spec), std::move(mesh.value()), std::move(topology.value()), collectives};
}

}  // namespace shardscope::cli
