// The physical interconnect of a simulated slice: chips on a 1-D/2-D/3-D mesh or torus of ICI links
// (TPU), or all-to-all through a switch (an 8-GPU NVSwitch node), and the mapping of the logical
// devices of a DeviceMesh onto chips.
//
// Links are first-class: every link is ONE direction of one physical cable, with an id, its two end
// nodes, the physical axis and direction it runs along, its bandwidth and its latency, so traffic can
// be counted per link. A physical bidirectional ICI link is therefore two TopologyLinks.
//
// Wraparound follows each generation's rule (ChipSpec::wraparound), overridable per axis:
//   v2/v3: a torus only for the whole pod; v4/v5p: slices of whole 4x4x4 cubes are tori (all axes);
//   v5e/v6e: only an axis of size 16 wraps; h100: a switch (no rings at all).
// Axes of size <= 2 never get a separate wraparound link (it would join the same two chips).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/sharding/mesh.h"
#include "core/base/status.h"
#include "simulator/hardware.h"

namespace shardscope::sim {

struct TopologyLink {
  int64_t id = -1;
  int64_t src = -1;         // node id: a chip, or the switch node (== num_chips()) on a switch
  int64_t dst = -1;
  int64_t axis = -1;        // physical axis the link runs along; -1 for switch links
  int direction = +1;       // +1 towards higher coordinates (switch: chip -> switch), -1 otherwise
  bool wraparound = false;  // the link that closes a ring (last chip <-> first chip)
  double bandwidth = 0;     // bytes/s in this direction
  double latency = 0;       // seconds to traverse (switch: half the hop latency per link)
};

// How the axes of a logical mesh are laid on the slice's physical axes (Topology::ForMesh). Each mesh
// axis takes whole physical axes or a factor of one (later mesh axes innermost, as the device ids
// run); a mesh axis that spans several physical axes is laid out:
enum class MeshPlacement : uint8_t {
  kSnake,     // boustrophedon: consecutive devices are neighbours, so a 1-D mesh of 1024 TPU v3
              // chips is a ring snaking over the 32x32 torus (closed by its wraparound)
  kRowMajor,  // row-major over those axes (device i+1 may jump to the start of the next row)
};
std::string_view MeshPlacementName(MeshPlacement p);  // "snake" | "row-major"
Result<MeshPlacement> MeshPlacementFromName(std::string_view name);

// A slice shape as people write it: "4x4x4" (or "4,4,4") -> {4, 4, 4}, 1 to 3 axes of >= 1 chips.
// The error says what a slice shape looks like.
Result<std::vector<int64_t>> ParseSliceShape(std::string_view text);
std::string SliceShapeString(const std::vector<int64_t>& shape);  // {4, 8} -> "4x8"

struct TopologyOptions {
  enum class Wraparound : uint8_t { kGenerationRule, kAll, kNone };
  Wraparound wraparound = Wraparound::kGenerationRule;
  // Per-axis override (size == number of physical axes); wins over `wraparound` when given.
  std::optional<std::vector<bool>> wraparound_per_axis;
  // device id -> chip id. Empty: device d lives on chip d / cores_per_chip (row-major chips), or
  // for ForMesh the chip its mesh position is placed on (see `placement`).
  std::vector<int64_t> device_to_chip;
  MeshPlacement placement = MeshPlacement::kSnake;
  // ForMesh: the mesh axes minor first ("Y,X,L"), laid in that order by PlaceMeshInOrder
  // (simulator/mesh_placement.h), as the strategy search places its candidates; wins over
  // `placement` and the box rule. Empty: the mesh's own layout.
  std::string mesh_order;
  // Allow more chips than the chip's pod_shape holds (what-if studies). Off: an error.
  bool allow_larger_than_pod = false;
};

// Direction policy for routes on rings.
enum class RoutePolicy : uint8_t {
  kShortest,      // shortest way round each ring (ties: the positive direction)
  kPositiveOnly,  // always the positive direction on a ring (one-directional ring algorithms)
};

struct BisectionBandwidth {
  int64_t cut_axis = -1;          // the axis the cut is perpendicular to (-1: switch / single chip)
  int64_t links_cut = 0;          // physical (bidirectional) links crossing the cut
  double one_way = 0;             // bytes/s from one half to the other
  double both_ways = 0;           // both directions together (2 x one_way)
};

class Topology {
 public:
  Topology() = default;

  // A slice of `chip_shape` chips (grid: 1..3 axes, padded/checked against chip.physical_dims; a
  // switch: the number of chips). Devices: num_chips x chip.cores_per_chip.
  static Result<Topology> Create(const ChipSpec& chip, std::vector<int64_t> chip_shape,
                                 const TopologyOptions& options = {});
  // The slice a logical mesh runs on, placed as a real slice is. When `chip_shape` is empty it is
  // the mesh's own shape when that is a slice of the chip's pod (mesh axes become physical axes,
  // leading axes merged when the mesh has more axes than the chip has dimensions, trailing 1s added
  // when fewer; with 2 cores per chip the last axis is halved), else the generation's slice for
  // that many chips (SliceShapeFor: 1024 TPU v3 chips are the 32x32 pod, a torus). The mesh is then
  // laid on the slice axis by axis (options.placement; DescribePlacement says how). The mesh's
  // device ids must be 0..N-1 where N = chips x cores_per_chip. A mesh of fewer devices than one
  // chip has cores (one device of a two-core v3 chip) runs on one chip with those cores in use
  // (WithCoresInUse: one TensorCore's FLOP/s, HBM and bandwidth).
  static Result<Topology> ForMesh(const ChipSpec& chip, const DeviceMesh& mesh,
                                  std::vector<int64_t> chip_shape = {}, const TopologyOptions& options = {});
  // The slice shape a generation gives `chips` chips: powers of two spread over its physical
  // axes as evenly as the pod allows (v3: 64 -> 8x8, 128 -> 8x16, 1024 -> 32x32; v4: 64 -> 4x4x4);
  // other counts: all on the last axis. Error when no such slice fits the pod.
  static Result<std::vector<int64_t>> SliceShapeFor(const ChipSpec& chip, int64_t chips);
  // The generation's wraparound rule applied to a slice shape (one flag per axis).
  static std::vector<bool> GenerationWraparound(const ChipSpec& chip, const std::vector<int64_t>& chip_shape);

  const ChipSpec& chip() const { return chip_; }
  bool is_switch() const { return chip_.interconnect == InterconnectKind::kSwitch; }
  const std::vector<int64_t>& shape() const { return shape_; }  // chips per physical axis
  int64_t num_axes() const { return static_cast<int64_t>(shape_.size()); }
  bool wraps(int64_t axis) const { return wraps_[static_cast<size_t>(axis)]; }
  const std::vector<bool>& wraparound() const { return wraps_; }
  int64_t num_chips() const { return num_chips_; }
  int64_t num_nodes() const { return is_switch() ? num_chips_ + 1 : num_chips_; }
  int64_t switch_node() const { return is_switch() ? num_chips_ : -1; }
  int64_t devices_per_chip() const { return chip_.cores_per_chip; }
  int64_t num_devices() const { return num_chips_ * chip_.cores_per_chip; }

  const std::vector<TopologyLink>& links() const { return links_; }
  const TopologyLink& link(int64_t id) const { return links_[static_cast<size_t>(id)]; }
  int64_t num_links() const { return static_cast<int64_t>(links_.size()); }
  // Links leaving a node (chip or switch).
  const std::vector<int64_t>& OutLinks(int64_t node) const { return out_links_[static_cast<size_t>(node)]; }

  std::vector<int64_t> ChipCoords(int64_t chip) const;
  int64_t ChipAt(const std::vector<int64_t>& coords) const;  // -1 if out of range
  // The link leaving `chip` along `axis` in `direction` (+1/-1), or -1 at a mesh edge.
  int64_t NeighborLink(int64_t chip, int64_t axis, int direction) const;
  // A direct link from chip a to chip b (grid neighbours), or -1.
  int64_t LinkBetween(int64_t a, int64_t b) const;

  // Device placement.
  int64_t ChipOfDevice(int64_t device) const { return device_to_chip_[static_cast<size_t>(device)]; }
  const std::vector<int64_t>& DevicesOnChip(int64_t chip) const { return chip_devices_[static_cast<size_t>(chip)]; }
  const std::vector<int64_t>& device_to_chip() const { return device_to_chip_; }
  // Reorders the placement (a permutation-like map: every chip gets exactly cores_per_chip devices).
  Status SetDeviceToChip(std::vector<int64_t> device_to_chip);

  // Dimension-order route (axis 0 first) from chip to chip: the link ids in order (empty when
  // src == dst). Switch: {up-link of src, down-link of dst}.
  std::vector<int64_t> Route(int64_t src_chip, int64_t dst_chip, RoutePolicy policy = RoutePolicy::kShortest) const;
  // Like Route, but where both ways round a ring are equally short the traffic is split half/half:
  // a list of (fraction, route) whose fractions sum to 1.
  std::vector<std::pair<double, std::vector<int64_t>>> SplitRoutes(int64_t src_chip, int64_t dst_chip) const;
  // Hops on the shortest route (switch: 1 between different chips).
  int64_t HopDistance(int64_t a, int64_t b) const;
  double PathLatency(const std::vector<int64_t>& path) const;

  // Minimum bisection: the cut perpendicular to the axis whose cut crosses the fewest links
  // (wraparound links count: a ring is cut twice). Switch: half the chips send at full rate.
  BisectionBandwidth Bisection() const;

  // "8x4 mesh (wraparound: none), 32 chips, 1 device per chip, 104 links" and the like.
  std::string Describe() const;
  // How ForMesh laid the mesh on the slice, e.g. "X=1024 over physical axes 0,1 (32x32, snake: a
  // closed ring)"; "devices in id order" when not placed from a mesh.
  const std::string& DescribePlacement() const { return placement_; }
  std::string ShapeString() const;  // "8x4"

 private:
  ChipSpec chip_;
  std::vector<int64_t> shape_;
  std::vector<bool> wraps_;
  int64_t num_chips_ = 0;
  std::vector<TopologyLink> links_;
  std::vector<std::vector<int64_t>> out_links_;
  std::vector<int64_t> neighbor_;  // [chip * 2 * axes + axis * 2 + (dir > 0 ? 0 : 1)] -> link id
  std::vector<int64_t> device_to_chip_;
  std::vector<std::vector<int64_t>> chip_devices_;
  std::string placement_ = "devices in id order (device d on chip d / devices per chip)";
};

}  // namespace shardscope::sim
