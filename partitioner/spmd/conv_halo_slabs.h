// What one device of a spatially partitioned convolution holds of the conv's input, and the halo
// its neighbours send it (GSPMD §3.3 and Appendix A.2): for every windowed dim whose output the
// conv's sharding splits, the device's own slab of input rows and, on each side, the slabs of rows
// the devices 1, 2, ... tiles away send it (nothing at the array's edges: the padding). The widths
// come from the partitioner's own halo arithmetic (halo.h: TileWindowedDim, PlanHalo) for the
// tiling the output's sharding gives (the windowed handler's "window" label, the input split like
// the output), so they are the rows the halo collective-permutes carry.
//
// The mesh view draws this for the selected device ("2 rows from device 1").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/base/status.h"
#include "core/ir/ir.h"
#include "core/sharding/sharding.h"

namespace shardscope {

struct HaloSlab {
  int64_t hop = 0;           // tiles away: -1 the left neighbour, +1 the right one, 0 the device's own
  int64_t from_device = -1;  // the device sending it (own slab: the device itself)
  int64_t begin = 0, end = 0;  // input rows [begin, end) along the dim
  int64_t width() const { return end - begin; }
};

struct HaloDim {
  int64_t input_dim = -1;  // the conv input's dim
  int64_t spatial = -1;    // its index among the window's spatial dims
  int64_t tiles = 1;       // the dim split this many ways
  int64_t tile = 0;        // the device's tile along it
  int64_t full = 0;        // the input's extent
  int64_t shard = 0;       // rows per tile (ceil(full / tiles))
  int64_t window = 1;      // the kernel's extent along it
  int64_t left = 0, right = 0;  // rows received from the left / right neighbours (0 at an edge)
  // Along the dim in order: the left neighbours' slabs (farthest first), the own slab, the right
  // neighbours' slabs. Only slabs with rows (a missing neighbour sends nothing).
  std::vector<HaloSlab> slabs;
};

struct ConvHalo {
  std::string conv, input;  // instruction names
  int64_t device = -1;
  std::vector<HaloDim> dims;  // one per split windowed dim (empty: the conv needs no halo)
};

// The halo `device` receives for `conv` whose result has `output_sharding` (a tiled sharding over
// the conv's output dims). An error when the instruction is not a convolution, the sharding splits
// no windowed dim, or the device holds no tile.
Result<ConvHalo> ConvHaloForDevice(const Instruction& conv, const HloSharding& output_sharding, int64_t device);

}  // namespace shardscope
