#include "partitioner/spmd/conv_halo_slabs.h"

#include <algorithm>
#include <map>

#include "partitioner/spmd/halo.h"

namespace shardscope {

Result<ConvHalo> ConvHaloForDevice(const Instruction& conv, const HloSharding& output_sharding, int64_t device) {
  if (conv.opcode() != Opcode::kConvolution || conv.operand_count() < 1) return Error(conv.name() + " is not a convolution");
  if (!output_sharding.IsTiled()) return Error(conv.name() + " is not split across devices");
  const std::vector<int64_t> index = output_sharding.TileIndexForDevice(device);
  if (index.empty()) return Error("device " + std::to_string(device) + " holds no tile of " + conv.name());
  const Instruction& input = *conv.operand(0);
  const ConvolutionDimensionNumbers& cd = conv.conv_dims;
  const auto& win = conv.window.dims;
  if (win.size() != cd.input_spatial.size() || win.size() != cd.output_spatial.size()) {
    return Error(conv.name() + ": malformed window");
  }

  // Devices by tile index, in id order: a device's neighbour is the one at the same place among
  // the devices of the neighbouring tile (partial replication).
  std::map<std::vector<int64_t>, std::vector<int64_t>> holders;
  for (int64_t d = 0; d < output_sharding.NumDevices(); ++d) {
    auto i = output_sharding.TileIndexForDevice(d);
    if (!i.empty()) holders[i].push_back(d);
  }
  const auto& mine = holders[index];
  const int64_t replica = std::find(mine.begin(), mine.end(), device) - mine.begin();
  auto holder = [&](std::vector<int64_t> at) -> int64_t {
    auto it = holders.find(at);
    if (it == holders.end() || it->second.empty()) return -1;
    return it->second[static_cast<size_t>(std::min<int64_t>(replica, static_cast<int64_t>(it->second.size()) - 1))];
  };

  ConvHalo h;
  h.conv = conv.name();
  h.input = input.name();
  h.device = device;
  for (size_t s = 0; s < win.size(); ++s) {
    const int64_t od = cd.output_spatial[s], id = cd.input_spatial[s];
    const int64_t t = output_sharding.DimensionTiles(od);
    if (t <= 1) continue;
    const int64_t out_full = conv.shape().dim(od), full = input.shape().dim(id);
    auto tiling = spmd::TileWindowedDim(win[s], t, (out_full + t - 1) / t, out_full);
    if (!tiling) return Error(conv.name() + ": spatial dim " + std::to_string(s) + " cannot be tiled " + std::to_string(t) + " ways");
    const int64_t shard = (full + t - 1) / t;
    const spmd::HaloPlan plan = spmd::PlanHalo(shard, t, full, tiling->start, tiling->size, true, true, tiling->need);
    HaloDim hd;
    hd.input_dim = id;
    hd.spatial = static_cast<int64_t>(s);
    hd.tiles = t;
    hd.tile = index[static_cast<size_t>(od)];
    hd.full = full;
    hd.shard = shard;
    hd.window = win[s].size;
    for (const spmd::HaloPiece& piece : plan.pieces) {
      const int64_t from_tile = hd.tile + piece.hop;
      if (from_tile < 0 || from_tile >= t) continue;  // past the array's edge: nobody sends
      HaloSlab slab;
      slab.hop = piece.hop;
      slab.begin = from_tile * shard + piece.from;
      slab.end = std::min(full, from_tile * shard + piece.to);
      if (piece.hop == 0) {
        // The own slab: the whole shard the device holds (the window may use part of it).
        slab.begin = hd.tile * shard;
        slab.end = std::min(full, (hd.tile + 1) * shard);
        slab.from_device = device;
      } else {
        std::vector<int64_t> at = index;
        at[static_cast<size_t>(od)] = from_tile;
        slab.from_device = holder(at);
      }
      if (slab.width() <= 0) continue;
      if (piece.hop < 0) hd.left += slab.width();
      if (piece.hop > 0) hd.right += slab.width();
      hd.slabs.push_back(slab);
    }
    // A device whose window skips its own rows still shows what it holds.
    if (std::none_of(hd.slabs.begin(), hd.slabs.end(), [](const HaloSlab& x) { return x.hop == 0; })) {
      HaloSlab own{0, device, hd.tile * shard, std::min(full, (hd.tile + 1) * shard)};
      auto pos = std::find_if(hd.slabs.begin(), hd.slabs.end(), [](const HaloSlab& x) { return x.hop > 0; });
      hd.slabs.insert(pos, own);
    }
    h.dims.push_back(std::move(hd));
  }
  if (h.dims.empty()) return Error(conv.name() + ": no windowed dim is split, so no halo is exchanged");
  return h;
}

}  // namespace shardscope
