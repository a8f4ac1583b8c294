// Chip presets for the simulated pod (TPU v2..v6e, an 8-GPU H100 node) and custom chips read from a
// small JSON file. Figures and their sources: ../shared/reference/hardware.md; the choices made where
// sources disagree are listed in docs/simulator.md and next to each preset in hardware.cpp.
//
// Units: FLOP/s, bytes, bytes/s, seconds. A "device" is what the SPMD program calls a partition: one
// chip, or one TensorCore when a v2/v3 chip is run as two devices (cores_per_chip = 2).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/status.h"

namespace shardscope::sim {

// How a generation decides which axes of a slice have wraparound links.
enum class WraparoundRule : uint8_t {
  kFullPodOnly,  // v2/v3: a torus only when the slice is the whole pod (pod_shape)
  kFullCubes,    // v4/v5p: slices made of whole 4x4x4 cubes (every axis a multiple of 4) are tori
  kAxisOf16,     // v5e/v6e: an axis wraps only when its size is 16
  kAlways,       // every axis of size >= 3 wraps (custom chips, "what if" studies)
  kNever,        // plain mesh
};
std::string_view WraparoundRuleName(WraparoundRule r);  // "full-pod", "full-cubes", "axis-of-16", ...
Result<WraparoundRule> WraparoundRuleFromName(std::string_view name);

// How chips are wired.
enum class InterconnectKind : uint8_t {
  kGrid,    // 1-D/2-D/3-D mesh or torus of point-to-point ICI links
  kSwitch,  // all-to-all through a switch (NVSwitch): each chip has one up and one down link
};

struct ChipSpec {
  std::string name;                  // preset name ("tpu-v5e") or the JSON file's "name"
  std::string description;           // one line for people
  double peak_flops = 0;             // dense bf16 FLOP/s per chip
  double hbm_bytes = 0;              // HBM capacity per chip
  double hbm_bandwidth = 0;          // bytes/s per chip
  double ici_link_bandwidth = 0;     // bytes/s per link, ONE direction (switch: per chip, each way)
  int64_t links_per_chip = 0;        // ICI links per chip (grid: 2 x physical_dims for a torus)
  double hop_latency = 1e-6;         // seconds per ICI hop (switch: per traversal of the switch)
  double dcn_bandwidth = 0;          // bytes/s per chip over the data-centre network; 0 = not known
  InterconnectKind interconnect = InterconnectKind::kGrid;
  int64_t physical_dims = 2;         // grid dimensionality (1..3); 1 for a switch
  std::vector<int64_t> pod_shape;    // the largest slice / whole pod, in chips
  WraparoundRule wraparound = WraparoundRule::kNever;
  int64_t max_cores_per_chip = 1;    // 2 for v2/v3 (two TensorCores that can be separate devices)
  int64_t cores_per_chip = 1;        // devices per chip actually used (1, or 2 where allowed)
  // ---- Compute calibration: one file per preset, simulator/calibration/<preset>.cpp, gives every
  // figure below with its source (ApplyPresetCalibration); custom chips take the keys of the same
  // names. 1.0 / 0 everywhere is the theoretical roofline the book uses.
  double flops_efficiency = 1.0;  // fraction of peak a large, tile-aligned matrix product sustains
  double hbm_efficiency = 1.0;    // fraction of HBM bandwidth a streaming (memory-bound) op sustains
  int64_t mxu_tile = 0;           // matrix-unit side: contracted and output-feature sizes padded to it (0: none)
  int64_t mxu_rows = 0;           // granule of the streamed (row) dimension, e.g. 8 sublanes (0: none)
  double op_overhead = 0;         // seconds every compute op (kernel) adds: launch, pipeline fill/drain
  std::string calibration;        // one line: where the figures above come from
  // ---- Memory layout (simulator/buffer_layout.h): TPU HBM arrays are stored in tiles of
  // (sublanes x lanes), so the minor dimension is padded to a multiple of `layout_lanes` (128) and
  // the second-minor to `layout_sublanes` x (4 / element bytes) (8 for 32-bit types, 16 for bf16,
  // 32 for 8-bit) — XLA's default TPU layouts. 0: no tiling (GPU, CPU, custom chips by default).
  int64_t layout_lanes = 0;
  int64_t layout_sublanes = 0;    // for 32-bit elements

  // Per-device figures (a device is a chip, or a core when cores_per_chip == 2).
  double device_peak_flops() const { return peak_flops / static_cast<double>(cores_per_chip); }
  double device_hbm_bytes() const { return hbm_bytes / static_cast<double>(cores_per_chip); }
  double device_hbm_bandwidth() const { return hbm_bandwidth / static_cast<double>(cores_per_chip); }
  // Both directions of one link together (the book's W_ICI "bidirectional").
  double ici_link_bandwidth_bidirectional() const { return 2 * ici_link_bandwidth; }

  std::string ToString() const;  // multi-line summary for the CLI / GUI
};

// Preset names in a stable order: tpu-v2, tpu-v3, tpu-v4, tpu-v5e, tpu-v5p, tpu-v6e, h100.
const std::vector<std::string>& ChipPresetNames();
// A preset by name (case-insensitive; "v5e", "TPU v5e" and "tpu_v5e" are accepted too).
Result<ChipSpec> ChipPreset(std::string_view name);
// Runs a v2/v3 chip as two devices per chip (halves per-device FLOP/s, HBM and HBM bandwidth; both
// devices share the chip's links). Error on a chip whose max_cores_per_chip is smaller.
Result<ChipSpec> WithCoresPerChip(ChipSpec chip, int64_t cores_per_chip);
// A mesh smaller than one chip: `devices` of its cores_per_chip cores used as devices, the others
// idle (a 1-device mesh on a two-core v3 chip is one TensorCore: half the chip's FLOP/s, HBM and
// HBM bandwidth, as with two devices per chip). The result describes one chip of that many cores,
// the per-chip figures scaled to them (device_* figures unchanged); the name stays the preset's,
// the description says "(1 of its 2 cores in use)". Error unless 1 <= devices < cores_per_chip
// and devices divides it.
Result<ChipSpec> WithCoresInUse(ChipSpec chip, int64_t devices);
// The chip with its compute calibration switched off: full peak FLOP/s and HBM bandwidth, no tile
// padding, no per-op overhead (the theoretical roofline the book's arithmetic uses).
ChipSpec IdealRoofline(ChipSpec chip);
// Checks that the figures make sense (positive, dimensions in range, ...).
Status ValidateChipSpec(const ChipSpec& chip);

// ---- Custom chips from JSON ------------------------------------------------------------------------
// A flat JSON object of numbers, strings and booleans, e.g.
//   { "name": "my-chip", "base": "tpu-v5e", "peak_flops": 2.5e14, "ici_bandwidth": 5e10 }
// Keys: name, description, base (a preset to start from), peak_flops, hbm_bytes, hbm_bandwidth,
// ici_bandwidth (one way, per link), links_per_chip, hop_latency (s), dcn_bandwidth,
// interconnect ("grid" | "switch"), physical_dims, pod_shape ("16x16x16"), wraparound
// ("full-pod" | "full-cubes" | "axis-of-16" | "always" | "never"), max_cores_per_chip,
// cores_per_chip, flops_efficiency, hbm_efficiency, mxu_tile, mxu_rows, layout_lanes, layout_sublanes,
// op_overhead (s), calibration.
// Without "base", peak_flops, hbm_bytes, hbm_bandwidth and ici_bandwidth are required.
// Errors carry "LINE:COLUMN: message" (1-based) and the byte offset.
Result<ChipSpec> ParseChipSpecJson(std::string_view text);
// Reads a file and parses it; errors are prefixed with the path ("chip.json:3:14: ...").
Result<ChipSpec> LoadChipSpecFile(const std::string& path);
// A preset name, or a path to a JSON file (anything ending in .json or containing a '/').
Result<ChipSpec> ResolveChip(std::string_view name_or_path);

}  // namespace shardscope::sim
