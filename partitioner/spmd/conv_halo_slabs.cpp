#include "partitioner/spmd/conv_halo_slabs.h"

#include <algorithm>
#include <map>

#include "partitioner/spmd/halo.h"

namespace shardscope {
namespace {

// Devices by tile index of a sharding, in id order: a device's neighbour is the one at the same
// place among the devices of the neighbouring tile (partial replication).
class Holders {
 public:
  explicit Holders(const HloSharding& sh) {
    for (int64_t d = 0; d < sh.NumDevices(); ++d) {
      auto i = sh.TileIndexForDevice(d);
      if (!i.empty()) by_index_[i].push_back(d);
    }
  }
  // The place of `device` among the holders of its tile `index`.
  int64_t Replica(const std::vector<int64_t>& index, int64_t device) const {
    auto it = by_index_.find(index);
    if (it == by_index_.end()) return 0;
    return std::find(it->second.begin(), it->second.end(), device) - it->second.begin();
  }
  // The device holding tile `at` at place `replica` (the last one when that tile has fewer); -1 none.
  int64_t At(const std::vector<int64_t>& at, int64_t replica) const {
    auto it = by_index_.find(at);
    if (it == by_index_.end() || it->second.empty()) return -1;
    return it->second[static_cast<size_t>(std::min<int64_t>(replica, static_cast<int64_t>(it->second.size()) - 1))];
  }

 private:
  std::map<std::vector<int64_t>, std::vector<int64_t>> by_index_;
};

// One split spatial dim: how it is split and which sharding numbers its tiles (the output's for
// the forward case, the input's for the filter gradient: the handler exchanges along the input).
struct SplitDim {
  HaloSplit split = HaloSplit::kOutput;
  size_t spatial = 0;
  const HloSharding* by = nullptr;
  int64_t index_dim = -1;  // the dim of `by` the tiles run along
  int64_t tiles = 1;
};

int64_t Tiles(const std::optional<HloSharding>& sh, int64_t dim) {
  return sh && sh->IsTiled() && dim >= 0 && dim < sh->TiledDataRank() ? sh->DimensionTiles(dim) : 1;
}

// The split spatial dims of `conv` in window order, or why there are none.
Result<std::vector<SplitDim>> SplitDims(const Instruction& conv, const ConvShardings& sh) {
  if (conv.opcode() != Opcode::kConvolution || conv.operand_count() < 2) return Error(conv.name() + " is not a convolution");
  const ConvolutionDimensionNumbers& cd = conv.conv_dims;
  const auto& win = conv.window.dims;
  if (win.size() != cd.input_spatial.size() || win.size() != cd.output_spatial.size() ||
      win.size() != cd.kernel_spatial.size()) {
    return Error(conv.name() + ": malformed window");
  }
  const std::optional<HloSharding> out = sh.output;
  std::vector<SplitDim> dims;
  std::string unlike;  // kernel dims split without the input split alike
  for (size_t s = 0; s < win.size(); ++s) {
    const int64_t od = cd.output_spatial[s], id = cd.input_spatial[s], kd = cd.kernel_spatial[s];
    if (const int64_t t = Tiles(out, od); t > 1) {
      dims.push_back({HaloSplit::kOutput, s, &sh.output, od, t});
      continue;
    }
    const int64_t kt = Tiles(sh.rhs, kd);
    if (kt <= 1) continue;
    if (Tiles(sh.lhs, id) != kt) {
      unlike += (unlike.empty() ? "" : ", ") + std::to_string(kd);
      continue;
    }
    dims.push_back({HaloSplit::kKernel, s, &*sh.lhs, id, kt});
  }
  if (dims.empty()) {
    if (!unlike.empty()) {
      return Error(conv.name() + ": its kernel " + conv.operand(1)->name() + " is split along dim " + unlike + " but its input " +
                   conv.operand(0)->name() + " is not split alike, so the partitioner gathers or reshards the input: no halo");
    }
    if (!sh.output.IsTiled()) return Error(conv.name() + " is not split across devices");
    return Error(conv.name() + ": no windowed dim is split, so no halo is exchanged");
  }
  return dims;
}

}  // namespace

bool ConvHalo::partial_sums() const {
  return std::any_of(dims.begin(), dims.end(), [](const HaloDim& d) { return d.split == HaloSplit::kKernel; });
}

Result<ConvHalo> ConvHaloForDevice(const Instruction& conv, const ConvShardings& shardings, int64_t device) {
  auto split = SplitDims(conv, shardings);
  if (!split.ok()) return split.error();
  const Instruction& input = *conv.operand(0);
  const Instruction& kernel = *conv.operand(1);
  const ConvolutionDimensionNumbers& cd = conv.conv_dims;
  const auto& win = conv.window.dims;

  ConvHalo h;
  h.conv = conv.name();
  h.input = input.name();
  h.kernel = kernel.name();
  h.device = device;
  std::map<const HloSharding*, Holders> holders;
  for (const SplitDim& sd : *split) {
    const size_t s = sd.spatial;
    const int64_t t = sd.tiles, od = cd.output_spatial[s], id = cd.input_spatial[s];
    const std::vector<int64_t> index = sd.by->TileIndexForDevice(device);
    if (index.empty() || sd.index_dim >= static_cast<int64_t>(index.size())) {
      return Error("device " + std::to_string(device) + " holds no tile of " +
                   (sd.split == HaloSplit::kOutput ? conv.name() : input.name()));
    }
    const int64_t out_full = conv.shape().dim(od), full = input.shape().dim(id);
    HaloDim hd;
    hd.split = sd.split;
    hd.input_dim = id;
    hd.spatial = static_cast<int64_t>(s);
    hd.tiles = t;
    hd.tile = index[static_cast<size_t>(sd.index_dim)];
    hd.full = full;
    hd.shard = (full + t - 1) / t;
    hd.window = win[s].size;
    // The tiling the windowed handler uses for this label, with the same arguments.
    std::optional<spmd::WindowedTiling> tiling;
    if (sd.split == HaloSplit::kOutput) {
      tiling = spmd::TileWindowedDim(win[s], t, (out_full + t - 1) / t, out_full);
    } else {
      const int64_t K = kernel.shape().dim(cd.kernel_spatial[s]), ks = (K + t - 1) / t;
      tiling = spmd::TileKernelDim(win[s], t, K, out_full);
      hd.kernel_begin = std::min(K, hd.tile * ks);
      hd.kernel_end = std::min(K, (hd.tile + 1) * ks);
    }
    if (!tiling) return Error(conv.name() + ": spatial dim " + std::to_string(s) + " cannot be tiled " + std::to_string(t) + " ways");
    const spmd::HaloPlan plan = spmd::PlanHalo(hd.shard, t, full, tiling->start, tiling->size, true, true, tiling->need);
    const Holders& who = holders.try_emplace(sd.by, *sd.by).first->second;
    const int64_t replica = who.Replica(index, device);
    for (const spmd::HaloPiece& piece : plan.pieces) {
      const int64_t from_tile = hd.tile + piece.hop;
      if (from_tile < 0 || from_tile >= t) continue;  // past the array's edge: nobody sends
      HaloSlab slab;
      slab.hop = piece.hop;
      slab.begin = from_tile * hd.shard + piece.from;
      slab.end = std::min(full, from_tile * hd.shard + piece.to);
      if (piece.hop == 0) {
        // The own slab: the whole shard the device holds (the window may use part of it).
        slab.begin = hd.tile * hd.shard;
        slab.end = std::min(full, (hd.tile + 1) * hd.shard);
        slab.from_device = device;
      } else {
        std::vector<int64_t> at = index;
        at[static_cast<size_t>(sd.index_dim)] = from_tile;
        slab.from_device = who.At(at, replica);
      }
      if (slab.width() <= 0) continue;
      if (piece.hop < 0) hd.left += slab.width();
      if (piece.hop > 0) hd.right += slab.width();
      hd.slabs.push_back(slab);
    }
    // A device whose window skips its own rows still shows what it holds.
    if (std::none_of(hd.slabs.begin(), hd.slabs.end(), [](const HaloSlab& x) { return x.hop == 0; })) {
      HaloSlab own{0, device, hd.tile * hd.shard, std::min(full, (hd.tile + 1) * hd.shard)};
      auto pos = std::find_if(hd.slabs.begin(), hd.slabs.end(), [](const HaloSlab& x) { return x.hop > 0; });
      hd.slabs.insert(pos, own);
    }
    h.dims.push_back(std::move(hd));
  }
  return h;
}

Result<ConvHalo> ConvHaloForDevice(const Instruction& conv, const HloSharding& output_sharding, int64_t device) {
  return ConvHaloForDevice(conv, ConvShardings{std::nullopt, std::nullopt, output_sharding}, device);
}

int64_t ConvHaloDefaultDevice(const Instruction& conv, const ConvShardings& shardings) {
  auto split = SplitDims(conv, shardings);
  if (!split.ok()) return -1;
  const SplitDim& first = split->front();
  const int64_t want = std::min<int64_t>(1, first.tiles - 1);
  const int64_t n = first.by->NumDevices();
  for (int64_t d = 0; d < n; ++d) {
    const auto index = first.by->TileIndexForDevice(d);
    if (first.index_dim < static_cast<int64_t>(index.size()) && index[static_cast<size_t>(first.index_dim)] == want &&
        ConvHaloForDevice(conv, shardings, d).ok())
      return d;
  }
  for (int64_t d = 0; d < n; ++d)
    if (ConvHaloForDevice(conv, shardings, d).ok()) return d;
  return -1;
}

}  // namespace shardscope
