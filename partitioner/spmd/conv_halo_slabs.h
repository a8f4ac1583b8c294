// What one device of a spatially partitioned convolution holds of the conv's input, and the halo
// its neighbours send it (GSPMD §3.3 and Appendix A.2): for every split spatial dim of the input,
// the device's own slab of input rows and, on each side, the slabs of rows the devices 1, 2, ...
// tiles away send it (nothing at the array's edges: the padding). Two cases, as the windowed
// handler (handlers/windowed.cpp) labels them:
//  - the forward conv: the output's spatial dim is split (the handler's "window" label, the input
//    split like the output); tiling by TileWindowedDim;
//  - the filter-gradient conv (dW = conv(x, dy)): the kernel's (rhs's) spatial dim is split and
//    the input alike (the "kernel" label): tile j holds the window taps [j*ks, (j+1)*ks), reads
//    the input rows those taps see for every output, and computes a partial result that is
//    all-reduced; tiling by TileKernelDim (the input-side halo, the default
//    SpmdOptions::conv_halo_exchange_always_on_lhs; the kernel-side halo of the option's false is
//    not drawn).
// The widths come from the partitioner's own halo arithmetic (halo.h: the tiling, then PlanHalo
// with the same arguments the handler passes), so they are the rows the halo collective-permutes
// carry — when the handler exchanges halos for that dim rather than gathering the input (it
// gathers when a halo would move more than an all-gather).
//
// The mesh view draws this for the selected device ("2 rows from device 1").
#pragma once

#include <cstdint>
#include <optional>
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

// Which of the conv's dims the split spatial dim is, for the windowed handler.
enum class HaloSplit {
  kOutput,  // the output's spatial dim (forward conv): each device computes its own outputs
  kKernel,  // the kernel's spatial dim (filter gradient): each device computes every output over
            // its taps, a partial sum; the partial sums are all-reduced
};

struct HaloDim {
  HaloSplit split = HaloSplit::kOutput;
  int64_t input_dim = -1;  // the conv input's dim
  int64_t spatial = -1;    // its index among the window's spatial dims
  int64_t tiles = 1;       // the dim split this many ways
  int64_t tile = 0;        // the device's tile along it
  int64_t full = 0;        // the input's extent
  int64_t shard = 0;       // rows per tile (ceil(full / tiles))
  int64_t window = 1;      // the window's extent along it (kKernel: the kernel operand's, all taps)
  // kKernel: the rows [kernel_begin, kernel_end) of the kernel operand (the window's taps) this
  // device's tile holds.
  int64_t kernel_begin = 0, kernel_end = 0;
  int64_t left = 0, right = 0;  // rows received from the left / right neighbours (0 at an edge)
  // Along the dim in order: the left neighbours' slabs (farthest first), the own slab, the right
  // neighbours' slabs. Only slabs with rows (a missing neighbour sends nothing).
  std::vector<HaloSlab> slabs;
};

struct ConvHalo {
  std::string conv, input, kernel;  // instruction names (kernel: the conv's rhs)
  int64_t device = -1;
  std::vector<HaloDim> dims;  // one per split spatial dim (empty: the conv needs no halo)
  // Some dim is kKernel: the device's result is a partial sum, all-reduced across the tiles.
  bool partial_sums() const;
};

// The shardings a convolution's partitioning starts from: its input's (lhs), its kernel's (rhs)
// and its own. An unset operand sharding counts as replicated.
struct ConvShardings {
  std::optional<HloSharding> lhs, rhs;
  HloSharding output;
};

// The halo `device` receives for `conv`. A spatial dim whose output is split is the forward
// case; one whose output is whole but whose kernel (rhs) spatial dim is split, with the input
// split alike, is the filter-gradient case (the tile index and the neighbours then come from the
// input's sharding, along which the handler exchanges). An error when the instruction is not a
// convolution, no spatial dim is split so, or the device holds no tile.
Result<ConvHalo> ConvHaloForDevice(const Instruction& conv, const ConvShardings& shardings, int64_t device);
// The forward conv alone: only the output's sharding known (the operands count as replicated).
Result<ConvHalo> ConvHaloForDevice(const Instruction& conv, const HloSharding& output_sharding, int64_t device);

// The device a view shows first: the first (by id) whose tile along the first split dim has
// neighbours on both sides (tile 1), else the first device with a halo at all; -1 when the conv
// has no halo.
int64_t ConvHaloDefaultDevice(const Instruction& conv, const ConvShardings& shardings);

}  // namespace shardscope
