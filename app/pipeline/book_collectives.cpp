#include "app/pipeline/book_collectives.h"

#include "core/sharding/mesh.h"
#include "simulator/collectives/cost.h"
#include "simulator/hardware.h"
#include "simulator/topology.h"

namespace shardscope::pipeline {

using sim::CollectiveKind;

namespace {

constexpr double kUs = 1e-6;
constexpr double kBf16 = 2;

BookCollectiveCase Case(std::string id, std::string label, std::string chip, std::string mesh, std::vector<std::string> axes,
                        double bytes_per_device, double published, std::string source) {
  BookCollectiveCase c;
  c.id = std::move(id);
  c.label = std::move(label);
  c.chip = std::move(chip);
  c.mesh = std::move(mesh);
  c.axes = std::move(axes);
  c.bytes_per_device = bytes_per_device;
  c.published = published;
  c.source = std::move(source);
  return c;
}

}  // namespace

std::vector<BookCollectiveCase> BookCollectiveCases() {
  std::vector<BookCollectiveCase> out;
  // C1/C2: bf16[E, F] sharded [E_Y, F] over Y = 4 on a v5e {X:8, Y:4}; an axis of 4 on v5e has no
  // wraparound.
  const double c1_shard = 2048.0 / 4 * 8192 * kBf16;  // 8.4 MB
  out.push_back(Case("C1", "C1 AllGather_Y 8.4 MB, v5e X=8,Y=4 (Y a line)", "tpu-v5e", "X=8,Y=4", {"Y"},
                     c1_shard, 560 * kUs, "about 560 us because an axis of 4 on v5e has no wraparound"));
  {
    BookCollectiveCase c = Case("C1-torus", "C1 same, Y with wraparound", "tpu-v5e", "X=8,Y=4", {"Y"},
                                c1_shard, 377 * kUs, "377 us with bidirectional links (V / W)");
    c.wraparound_all = true;
    c.exact_factor = 3.0 / 4;  // validation.md: about 283 us plus latency
    out.push_back(c);
  }
  out.push_back(Case("C2", "C2 AllGather_Y 32 kB, v5e X=8,Y=4", "tpu-v5e", "X=8,Y=4", {"Y"},
                     256.0 / 4 * 256 * kBf16, 3 * kUs, "latency-bound: about 3 us in theory (3 hops)"));
  // C3-C7: TPU v4 4x4x4 {X:4, Y:4, Z:4}, bf16[B_X, D_Y], B = 1024, D = 4096.
  const double per_device = 2.0 * 1024 * 4096 / 16;
  for (const char* axis : {"X", "Y"}) {
    BookCollectiveCase c = Case(axis[0] == 'X' ? "C3" : "C4",
                                std::string(axis[0] == 'X' ? "C3" : "C4") + " AllGather_" + axis + ", v4 4x4x4",
                                "tpu-v4", "X=4,Y=4,Z=4", {axis}, per_device, 23 * kUs, "23 us (V / W)");
    c.exact_factor = 3.0 / 4;
    out.push_back(c);
  }
  out.push_back(Case("C5", "C5 AllGather_XY, v4 4x4x4", "tpu-v4", "X=4,Y=4,Z=4", {"X", "Y"}, per_device,
                     46 * kUs, "46 us (throughput-bound; latency floor about 2-4 us)"));
  {
    BookCollectiveCase c = Case("C6", "C6 AllGather_Z {U_Z}, v4 4x4x4", "tpu-v4", "X=4,Y=4,Z=4", {"Z"},
                                per_device / 4, 5.8 * kUs, "5.8 us (V / W)");
    c.exact_factor = 3.0 / 4;
    out.push_back(c);
  }
  out.push_back(Case("C7", "C7 AllGather_X bf16[128], v4 4x4x4", "tpu-v4", "X=4,Y=4,Z=4", {"X"}, 128 * kBf16 / 4,
                     2 * kUs, "about 2 us (2 hops, latency-bound)"));
  {
    // C8 on a v5e axis of 16 (which wraps): the large-N figure; exactly N / (4 (N - 1)) = 0.267.
    BookCollectiveCase c = Case("C8", "C8 AllToAll / AllGather, v5e ring of 16", "tpu-v5e",
                                "X=16,Y=16", {"X"}, 4.0 * 1024 * 1024, 0.25, "AllToAll = AllGather / 4");
    c.all_to_all_ratio = true;
    out.push_back(c);
  }
  return out;
}

Result<double> SimulateBookCollective(const BookCollectiveCase& c) {
  auto chip = sim::ChipPreset(c.chip);
  if (!chip.ok()) return chip.error();
  auto mesh = DeviceMesh::Parse(c.mesh);
  if (!mesh.ok()) return mesh.error();
  sim::TopologyOptions options;
  if (c.wraparound_all) options.wraparound = sim::TopologyOptions::Wraparound::kAll;
  auto topology = sim::Topology::ForMesh(*chip, *mesh, {}, options);
  if (!topology.ok()) return topology.error();
  auto groups = sim::ReplicaGroupsForAxes(*mesh, c.axes);
  if (!groups.ok()) return groups.error();
  auto cost = sim::EstimateCollective(*topology, c.kind, *groups, c.bytes_per_device);
  if (!cost.ok()) return cost.error();
  if (!c.all_to_all_ratio) return cost->time_s;
  auto a2a = sim::EstimateCollective(*topology, CollectiveKind::kAllToAll, *groups, c.bytes_per_device);
  if (!a2a.ok()) return a2a.error();
  return a2a->time_s / cost->time_s;
}

}  // namespace shardscope::pipeline
