// Halo exchange (GSPMD §3.3, §4.3 and Appendix A.2): the one primitive every windowed op uses
// (convolution, reduce-window, pad, slice), and its arithmetic — which rows each device needs
// from which neighbour — which the windowed handlers' cost models call too.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/base/status.h"
#include "core/ir/ir.h"
#include "partitioner/spmd/spmd_builder.h"
#include "partitioner/spmd/tile_map.h"

namespace shardscope::spmd {

// ---- halo planning: the arithmetic behind ExchangeHalo ----
// One piece of the exchanged region: rows [from, to) of the shard `hop` tiles away (hop < 0: to
// the left, 0: the device's own shard).
struct HaloPiece {
  int64_t hop = 0, from = 0, to = 0;
};
struct HaloPlan {
  int64_t shard = 0, tiles = 1, full = 0, size = 0;
  // The pieces every device concatenates, in order along the dimension: for each hop the union of
  // the rows any device needs from the shard that far away (adjacent halos for windowed ops; a
  // distant piece alone when windows lie away from the own shard, as after a slice).
  std::vector<HaloPiece> pieces;
  int64_t pad_low = 0, pad_high = 0;  // pad of the concatenation so every window fits
  std::vector<int64_t> offsets;       // per tile index: window start in the padded concatenation
  bool dynamic = false;               // offsets differ: a dynamic-slice, else a static slice
  bool mask_low = false, mask_high = false;  // needed positions < 0 / >= full must be masked
  int64_t permutes = 0;               // collective-permutes (pieces from other shards)
  int64_t rows_received = 0;          // rows a device receives
  // Rows times hops: a piece from k tiles away crosses k links of the mesh axis, so this is what
  // the busiest link carries (an all-gather's ring carries (tiles - 1) * shard).
  int64_t link_rows = 0;
  // A halo exchange is worth it when its links carry no more than gathering the dimension would.
  bool cheaper_than_gather() const { return link_rows <= (tiles - 1) * shard; }
};
// Plans the windows [start[i], start[i] + size) for shards of `shard` elements over `tiles`
// tiles of a dimension of extent `full`. Only the first need[i] positions of tile i's window
// matter (the rest feed the padding of an uneven output; empty `need`: all of them).
// `x_sharded` false: the input holds the whole dimension. `pad_is_zero`: the pad value is 0 (the
// zeros a collective-permute delivers where no neighbour exists need no masking then).
HaloPlan PlanHalo(int64_t shard, int64_t tiles, int64_t full, const std::vector<int64_t>& start, int64_t size,
                  bool x_sharded, bool pad_is_zero, const std::vector<int64_t>& need = {});

// How a windowed op runs per tile of its output along one dimension (GSPMD Appendix A.2, with
// base dilation as in Figure 10): the output is split into `tiles` tiles of `out_shard` elements;
// tile i reads the input elements [start[i], start[i] + size) (positions outside the input read
// the pad value) and runs the local window `local` (padding folded in, base dilation kept), which
// yields `local_out` outputs of which the tile's own start at out_offset[i] (all 0 unless the
// tiles' windows start at different phases of the base dilation: then, with stride 1, every tile
// uses the largest low padding and a dynamic-slice of the output drops the extra windows).
// With stride > 1 no output slice reconciles different phases; the input is then dilated
// explicitly (explicit_dilation): the exchanged elements are interior-padded by base_dilation - 1
// (and dilated_pad_low / dilated_pad_high around), each tile cuts its dilated_size positions from
// dilated_offset[i] (a dynamic-slice) and `local` has neither base dilation nor padding.
struct WindowedTiling {
  std::vector<int64_t> start;
  int64_t size = 0;
  std::vector<int64_t> need;  // per tile: input elements its valid (unpadded) outputs read
  WindowDimension local;
  int64_t local_out = 0;
  std::vector<int64_t> out_offset;
  bool explicit_dilation = false;
  int64_t base_dilation = 1, dilated_pad_low = 0, dilated_pad_high = 0, dilated_size = 0;
  std::vector<int64_t> dilated_offset;
  bool sliced() const {
    for (int64_t o : out_offset)
      if (o != 0) return true;
    return false;
  }
  // The extent of the local op's input along the dim.
  int64_t local_input() const { return explicit_dilation ? dilated_size : size; }
};
// `out_full`: the output's extent (outputs past it are the padding of the last tiles). nullopt
// only for a malformed window.
std::optional<WindowedTiling> TileWindowedDim(const WindowDimension& w, int64_t tiles, int64_t out_shard,
                                              int64_t out_full);
// A kernel-sharded spatial dim (filter gradients: the input and the kernel split alike): kernel
// tile j holds taps [j*ks, (j+1)*ks) of K (counted from the end under window reversal) and, for
// every one of the `out_full` outputs, reads the input elements those taps see; the local window
// is the kernel shard (base dilation kept, or explicit when the tiles' phases differ). Every
// tile computes all outputs (partial sums).
std::optional<WindowedTiling> TileKernelDim(const WindowDimension& w, int64_t tiles, int64_t K, int64_t out_full);

// ---- the exchange ----
// Gives every device the window of dimension `dim` it needs: the device holding tile i of `map`
// along `dim` gets the full positions [start[i], start[i] + size) of a dimension of extent
// `full` (start may be negative or run past the end); positions outside [0, full) read
// `pad_value`. When `x_sharded`, x holds map's shard along `dim` (tile i at [i*S, (i+1)*S)) and
// the window is built by halo exchange: collective-permutes of the rows needed from the shards
// to the left and right along `dim` (several hops when a window is wider than a shard; only the
// distant rows when windows lie away from the own shard, as after a slice), concatenated in
// order with the own rows still needed; a pad + dynamic-slice picks each device's window when
// the halo sizes differ per device, and a select masks positions outside the array (and the
// padding of uneven shards). When !x_sharded, x holds the whole dimension and a local pad +
// dynamic-slice suffices. Other dimensions of x are left as they are, so several dimensions are
// exchanged one after the other. Every collective-permute carries the reason
// "halo exchange: <what> dim D left|right halo N row(s) from K tile(s) away".
// Only the first need[i] positions of tile i's window matter (empty: all; see PlanHalo).
// `pad_scalar`, when given, is a scalar of the SPMD program holding the pad value (a pad op's
// operand) and replaces `pad_value`.
Result<Instruction*> ExchangeHalo(SpmdBuilder& b, Instruction* x, const TileMap& map, int64_t dim, int64_t full,
                                  const std::vector<int64_t>& start, int64_t size, double pad_value, bool x_sharded,
                                  const std::string& what, const std::vector<int64_t>& need = {},
                                  Instruction* pad_scalar = nullptr);

// A tiling's explicit dilation applied to the exchanged windows `x` along `dim` (each device's
// tile index along dim from `map`); x itself when the tiling has none.
Result<Instruction*> DilateWindows(SpmdBuilder& b, Instruction* x, const TileMap& map, int64_t dim,
                                   const WindowedTiling& t, double pad_value, Instruction* pad_scalar = nullptr);

}  // namespace shardscope::spmd
