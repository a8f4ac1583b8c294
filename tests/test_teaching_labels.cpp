// What the GUI's teaching panel and mesh view say about the MoE and convolution models (issue 15),
// computed outside the widgets and checked here against the partitioned programs themselves:
//  - an MoE dispatch / combine all-to-all's pieces named in the tensor's terms ("tokens of group 3
//    for expert 1": partitioner/spmd/all_to_all_pieces.h), and those names on the teaching
//    walkthrough's transfers (WalkthroughOptions::piece_names);
//  - a spatially partitioned convolution's halo as one device receives it (the own slab, the rows
//    each neighbour sends: partitioner/spmd/conv_halo_slabs.h), equal to what the partitioner's
//    halo collective-permutes carry — for the forward conv (its output's spatial dim split) and
//    for the filter-gradient conv (its kernel's spatial dim split, the partial sums all-reduced).
#include <QtTest/QtTest>

#include <map>
#include <set>

#include "core/eval/numeric_verify.h"
#include "tests/spmd_test_support.h"
#include "core/ir/hlo_text.h"
#include "core/sharding/mesh.h"
#include "partitioner/spmd/all_to_all_pieces.h"
#include "partitioner/spmd/conv_halo_slabs.h"
#include "simulator/collectives/walkthrough.h"
#include "simulator/hardware.h"
#include "simulator/topology.h"
#include "zoo_partitioning.h"

using namespace shardscope;

namespace {

// test_moe_partitioning's small MoE layer: 4 devices on a 1-D mesh, G = 4 groups, E experts.
ZooOverrides SmallMoe(int experts) {
  return {{"batch", "8"}, {"seq", "4"}, {"model", "8"}, {"heads", "2"}, {"head_dim", "4"}, {"hidden", "16"},
          {"experts", std::to_string(experts)}, {"mesh_x", "4"}};
}
// test_spatial_partitioning's small U-Net: depth split 4 ways (mesh (1, 4)).
const ZooOverrides kSmallUNet = {{"batch", "2"}, {"image", "16"}, {"width", "2"}, {"levels", "3"}, {"classes", "2"}};
// Its backward pass's filter gradient of down0_conva_conv: dW = conv(x, d(pre-activation)).
const char* kUNetFilterGradient = "backward_down0_conva_dconv_kernel";

ShardingLookup Own() {
  return [](const Instruction& i) { return i.sharding(); };
}

// The shardings a conv of an annotated (propagated) module is partitioned from.
ConvShardings ShardingsOf(const Instruction& conv) {
  return {conv.operand(0)->sharding(), conv.operand(1)->sharding(),
          conv.sharding() ? *conv.sharding() : HloSharding::Replicate()};
}

// Checks the halo every device of `conv` is told it receives against the halo collective-permutes
// the partitioner inserted for it: each permute's pairs (src -> dst) are a slab of dst's halo on
// that side sent by src, its per-device bytes are that slab's rows times a row of the input's
// shard, and every received slab of every device is carried by one of them. Returns the number
// of halo permutes (-1 after a failed check, with the reason in *why).
int CheckHaloAgainstPermutes(const Instruction& conv, const ConvShardings& sh, const PartitionResult& r, std::string* why) {
  const int64_t n = sh.output.IsTiled() ? sh.output.NumDevices() : sh.lhs->NumDevices();
  std::map<int64_t, ConvHalo> halo;
  for (int64_t d = 0; d < n; ++d) {
    auto h = ConvHaloForDevice(conv, sh, d);
    if (!h.ok()) {
      *why = h.error().message;
      return -1;
    }
    halo.emplace(d, std::move(h).value());
  }
  const Instruction& x = *conv.operand(0);
  std::set<std::tuple<int64_t, int64_t, int64_t>> carried;  // (dst, spatial dim, hop sign) covered
  int permutes = 0;
  for (const auto& c : r.collectives) {
    if (c.origin != conv.name() || c.kind != Opcode::kCollectivePermute) continue;
    if (c.reason.rfind("halo exchange: convolution dim ", 0) != 0) {
      *why = "unexpected permute: " + c.reason;
      return -1;
    }
    ++permutes;
    const int64_t dim = std::stoll(c.reason.substr(std::string("halo exchange: convolution dim ").size()));
    const bool left = c.reason.find(" left halo ") != std::string::npos;
    const Instruction* cp = r.module->FindInstruction(c.instruction);
    if (!cp) {
      *why = "no instruction " + c.instruction;
      return -1;
    }
    // A row of the input's shard: the shard's elements without the exchanged dim.
    int64_t row = PrimitiveTypeBytes(x.shape().type);
    for (int64_t k = 0; k < cp->operand(0)->shape().rank(); ++k)
      if (k != dim) row *= cp->operand(0)->shape().dim(k);
    for (const auto& [src, dst] : cp->source_target_pairs) {
      const ConvHalo& h = halo.at(dst);
      const HaloSlab* slab = nullptr;
      for (const HaloDim& hd : h.dims)
        if (hd.input_dim == dim)
          for (const HaloSlab& s : hd.slabs)
            if (s.from_device == src && (left ? s.hop < 0 : s.hop > 0)) slab = &s;
      if (!slab) {
        *why = c.reason + ": " + std::to_string(src) + " -> " + std::to_string(dst) + " is no slab of the halo";
        return -1;
      }
      if (c.bytes_per_device != slab->width() * row) {
        *why = c.reason + ": " + std::to_string(c.bytes_per_device) + " bytes per device, the slab has " +
               std::to_string(slab->width()) + " rows of " + std::to_string(row);
        return -1;
      }
      carried.insert({dst, dim, left ? -1 : 1});
    }
  }
  for (const auto& [d, h] : halo)
    for (const HaloDim& hd : h.dims)
      for (const HaloSlab& s : hd.slabs)
        if (s.hop != 0 && !carried.count({d, hd.input_dim, s.hop < 0 ? -1 : 1})) {
          *why = "device " + std::to_string(d) + "'s slab from " + std::to_string(s.from_device) + " is carried by no permute";
          return -1;
        }
  return permutes;
}

// Parses, partitions with the defaults and verifies numerically on `devices` devices.
std::optional<PartitionResult> PartitionHlo(const std::string& hlo, int64_t devices, std::unique_ptr<Module>* module,
                                            std::string* why) {
  testing::PartitionVerifyOptions o;
  o.seeds = {5};
  return testing::PartitionAndVerify(hlo, devices, why, o, module);
}

// The filter gradient of a 3x3 "same" conv on NHWC activations: x [N=2, H=16, W=6, C=3] and the
// output gradient dy [2, 16, 6, F=5] split along H over 4 devices (in the order 0, 2, 1, 3, so a
// device's neighbours are not its id's), dW [3, 3, 3, 5] replicated; labelled like XLA's (and the
// zoo's) filter-gradient convs: the batch contracted, the activation's features as the batch.
const char* kFilterGradient = R"(HloModule wgrad
ENTRY e {
  x = f32[2,16,6,3] parameter(0), sharding={devices=[1,4,1,1]0,2,1,3}
  dy = f32[2,16,6,5] parameter(1), sharding={devices=[1,4,1,1]0,2,1,3}
  ROOT dw = f32[3,3,3,5] convolution(x, dy), window={size=16x6 pad=1_1x1_1}, dim_labels=f01b_i01o->01bf, sharding={replicated}
})";
// The same for a stride-2 conv (dy has 8 rows, dilated by 2 as the window): kernel tile j holds
// dy rows [2j, 2j+2), whose taps read x rows [4j-1, 4j+4) for the 3 outputs: one row from the
// left and none from the right.
const char* kStridedFilterGradient = R"(HloModule wgrad
ENTRY e {
  x = f32[2,16,6,3] parameter(0), sharding={devices=[1,4,1,1]<=[4]}
  dy = f32[2,8,6,5] parameter(1), sharding={devices=[1,4,1,1]<=[4]}
  ROOT dw = f32[3,3,3,5] convolution(x, dy), window={size=8x6 pad=1_0x1_1 rhs_dilate=2x1}, dim_labels=f01b_i01o->01bf, sharding={replicated}
})";

}  // namespace

class TestTeachingLabels : public QObject {
  Q_OBJECT

 private slots:
  // Figure 8a's dispatch on 4 devices, one expert each: device i holds groups i (G split) and
  // sends device j the tokens of its group for expert j; the combine sends them back.
  void moeDispatchAndCombinePiecesOnFourDevices() {
    std::string why;
    auto p = testing::PartitionZooModel("moe-layer", SmallMoe(4), &why);
    QVERIFY2(p, why.c_str());
    const auto& cs = p->spmd.collectives;
    QCOMPARE(cs.size(), size_t{2});
    auto dispatch = DescribeAllToAllPieces(cs[0], *p->annotated, Own());
    QVERIFY2(dispatch.ok(), dispatch.ok() ? "" : dispatch.error().message.c_str());
    QCOMPARE(dispatch->role, std::string("dispatch"));
    QCOMPARE(dispatch->members, int64_t{4});
    QCOMPARE(dispatch->letters.size(), size_t{4});
    QCOMPARE(dispatch->letters[static_cast<size_t>(dispatch->from_dim)], 'G');
    QCOMPARE(dispatch->letters[static_cast<size_t>(dispatch->to_dim)], 'E');
    QCOMPARE(dispatch->pieces.size(), size_t{4});
    for (int i = 0; i < 4; ++i) {
      QCOMPARE(dispatch->pieces[static_cast<size_t>(i)].size(), size_t{4});
      for (int j = 0; j < 4; ++j) {
        QCOMPARE(dispatch->pieces[static_cast<size_t>(i)][static_cast<size_t>(j)],
                 "tokens of group " + std::to_string(i) + " for expert " + std::to_string(j));
      }
    }
    QCOMPARE(dispatch->pieces[3][1], std::string("tokens of group 3 for expert 1"));
    QVERIFY(dispatch->summary.find("MoE dispatch") == 0);

    auto combine = DescribeAllToAllPieces(cs[1], *p->annotated, Own());
    QVERIFY2(combine.ok(), combine.ok() ? "" : combine.error().message.c_str());
    QCOMPARE(combine->role, std::string("combine"));
    QCOMPARE(combine->pieces[1][3], std::string("outputs of expert 1 for group 3"));
    QCOMPARE(combine->pieces[2][0], std::string("outputs of expert 2 for group 0"));
    // Groups too large to name every piece are refused rather than listed.
    QVERIFY(!DescribeAllToAllPieces(cs[0], *p->annotated, Own(), 2).ok());
  }

  // Two experts per device: the pieces carry expert ranges.
  void moeDispatchWithTwoExpertsPerDeviceNamesRanges() {
    std::string why;
    auto p = testing::PartitionZooModel("moe-layer", SmallMoe(8), &why);
    QVERIFY2(p, why.c_str());
    auto dispatch = DescribeAllToAllPieces(p->spmd.collectives.at(0), *p->annotated, Own());
    QVERIFY2(dispatch.ok(), dispatch.ok() ? "" : dispatch.error().message.c_str());
    QCOMPARE(dispatch->pieces[3][1], std::string("tokens of group 3 for experts 2\u20133"));
    QCOMPARE(dispatch->pieces[0][3], std::string("tokens of group 0 for experts 6\u20137"));
  }

  // Collectives that are not a resharding all-to-all get no names (and no crash).
  void otherCollectivesAreRefused() {
    InsertedCollective c;
    c.kind = Opcode::kAllGather;
    Module empty("m");
    QVERIFY(!DescribeAllToAllPieces(c, empty, Own()).ok());
    c.kind = Opcode::kAllToAll;
    c.reason = "dot: something else";
    QVERIFY(!DescribeAllToAllPieces(c, empty, Own()).ok());
    c.reason = "reshard {devices=[4,1]<=[4]} -> {devices=[1,4]<=[4]}";
    c.origin = "nowhere";
    QVERIFY(!DescribeAllToAllPieces(c, empty, Own()).ok());
  }

  // The walkthrough puts the names on every transfer of the all-to-all: each hop of piece i -> j
  // is labelled with pieces[i][j].
  void walkthroughCarriesThePieceNames() {
    std::string why;
    auto p = testing::PartitionZooModel("moe-layer", SmallMoe(4), &why);
    QVERIFY2(p, why.c_str());
    auto dispatch = DescribeAllToAllPieces(p->spmd.collectives.at(0), *p->annotated, Own());
    QVERIFY(dispatch.ok());
    auto mesh = DeviceMesh::Parse("X=4");
    QVERIFY(mesh.ok());
    sim::WalkthroughOptions o;
    o.piece_names = dispatch->pieces;
    auto w = sim::WalkThroughOnMesh(*mesh, "tpu-v4", sim::CollectiveKind::kAllToAll, {{0, 1, 2, 3}}, {},
                                    static_cast<double>(p->spmd.collectives[0].bytes_per_device), {}, o);
    QVERIFY2(w.ok(), w.ok() ? "" : w.error().message.c_str());
    int named = 0;
    std::set<std::pair<int64_t, int64_t>> arrived;
    for (const auto& step : w->steps) {
      for (const auto& t : step.transfers) {
        const int64_t i = t.chunks.at(0), j = t.final_dst_device;  // group {0,1,2,3}: position = device
        const std::string& name = dispatch->pieces[static_cast<size_t>(i)][static_cast<size_t>(j)];
        QVERIFY2(t.piece.size() >= name.size() && t.piece.compare(t.piece.size() - name.size(), name.size(), name) == 0,
                 t.piece.c_str());
        ++named;
        if (t.dst_device == j) arrived.emplace(i, j);
      }
    }
    QVERIFY(named >= 12);
    QCOMPARE(arrived.size(), size_t{12});  // every ordered pair of the 4 devices
    QVERIFY(arrived.count({3, 1}));
    // Without names: the old "piece i→j".
    auto plain = sim::WalkThroughOnMesh(*mesh, "tpu-v4", sim::CollectiveKind::kAllToAll, {{0, 1, 2, 3}}, {}, 4096);
    QVERIFY(plain.ok());
    QVERIFY(plain->steps.front().transfers.front().piece.rfind("piece ", 0) == 0);
  }

  // A 3x3x3 convolution of the U-Net split 4 ways along the depth: every device runs on its own 4
  // rows plus 1 row from each neighbour (none past the array's edges), and those are exactly the
  // rows and the pairs of the partitioner's halo collective-permutes.
  void unetConvHaloMatchesThePartitioner() {
    std::string why;
    auto p = testing::PartitionZooModel("unet3d", kSmallUNet, &why);
    QVERIFY2(p, why.c_str());
    const Instruction* conv = p->annotated->FindInstruction("down0_conva_conv");
    QVERIFY(conv);
    QVERIFY(conv->sharding());
    const int64_t full = conv->operand(0)->shape().dim(1);  // the depth D = 16
    QCOMPARE(full, int64_t{16});
    // The devices along the depth, by tile.
    std::map<int64_t, int64_t> device_of_tile;
    for (int64_t d = 0; d < 4; ++d) device_of_tile[conv->sharding()->TileIndexForDevice(d).at(1)] = d;
    QCOMPARE(device_of_tile.size(), size_t{4});

    for (int64_t tile = 0; tile < 4; ++tile) {
      const int64_t device = device_of_tile[tile];
      auto h = ConvHaloForDevice(*conv, *conv->sharding(), device);
      QVERIFY2(h.ok(), h.ok() ? "" : h.error().message.c_str());
      QCOMPARE(h->dims.size(), size_t{1});
      const HaloDim& d = h->dims[0];
      QCOMPARE(d.input_dim, int64_t{1});
      QCOMPARE(d.tiles, int64_t{4});
      QCOMPARE(d.tile, tile);
      QCOMPARE(d.shard, int64_t{4});
      QCOMPARE(d.window, int64_t{3});
      QCOMPARE(d.left, tile > 0 ? int64_t{1} : int64_t{0});
      QCOMPARE(d.right, tile < 3 ? int64_t{1} : int64_t{0});
      QCOMPARE(d.slabs.size(), size_t{1} + (tile > 0) + (tile < 3));
      size_t k = 0;
      if (tile > 0) {
        QCOMPARE(d.slabs[k].hop, int64_t{-1});
        QCOMPARE(d.slabs[k].from_device, device_of_tile[tile - 1]);
        QCOMPARE(d.slabs[k].begin, tile * 4 - 1);  // the left neighbour's last row
        QCOMPARE(d.slabs[k].width(), int64_t{1});
        ++k;
      }
      QCOMPARE(d.slabs[k].hop, int64_t{0});
      QCOMPARE(d.slabs[k].from_device, device);
      QCOMPARE(d.slabs[k].begin, tile * 4);
      QCOMPARE(d.slabs[k].end, tile * 4 + 4);
      ++k;
      if (tile < 3) {
        QCOMPARE(d.slabs[k].hop, int64_t{1});
        QCOMPARE(d.slabs[k].from_device, device_of_tile[tile + 1]);
        QCOMPARE(d.slabs[k].begin, tile * 4 + 4);  // the right neighbour's first row
        QCOMPARE(d.slabs[k].width(), int64_t{1});
      }
    }

    // The partitioner's halo exchanges for this conv: one permute per side carrying 1 row along
    // the depth, from the neighbour ConvHaloForDevice names.
    int permutes = 0;
    for (const auto& c : p->spmd.collectives) {
      if (c.origin != "down0_conva_conv" || c.kind != Opcode::kCollectivePermute) continue;
      ++permutes;
      const Instruction* cp = p->spmd.module->FindInstruction(c.instruction);
      QVERIFY(cp);
      QCOMPARE(cp->operand(0)->shape().dim(1), int64_t{1});
      const bool left = c.reason.find("left") != std::string::npos;
      for (const auto& [src, dst] : cp->source_target_pairs) {
        auto h = ConvHaloForDevice(*conv, *conv->sharding(), dst);
        QVERIFY(h.ok());
        bool found = false;
        for (const HaloSlab& s : h->dims[0].slabs) found |= s.from_device == src && (left ? s.hop < 0 : s.hop > 0);
        QVERIFY2(found, (c.reason + ": " + std::to_string(src) + " -> " + std::to_string(dst)).c_str());
      }
    }
    QCOMPARE(permutes, 2);
  }

  // The filter-gradient conv dW = conv(x, dy), x and dy split along H over 4 devices in the order
  // 0, 2, 1, 3: kernel tile j holds dy rows [4j, 4j+4), whose taps read x rows [4j-1, 4j+5) for
  // the 3 outputs — the own 4 rows plus 1 from each neighbour (none past the edges) — and the
  // partial results are all-reduced. Those are the partitioner's halo permutes, row for row.
  void filterGradientHaloMatchesThePartitioner() {
    std::string why;
    std::unique_ptr<Module> m;
    auto r = PartitionHlo(kFilterGradient, 4, &m, &why);
    QVERIFY2(r, why.c_str());
    const Instruction* conv = m->FindInstruction("dw");
    QVERIFY(conv);
    const ConvShardings sh = ShardingsOf(*conv);
    QVERIFY(sh.lhs && sh.rhs);
    const std::map<int64_t, int64_t> device_of_tile = {{0, 0}, {1, 2}, {2, 1}, {3, 3}};

    // The interior device holding tile 1 (device 2): 1 row from device 0 and 1 from device 1.
    auto h = ConvHaloForDevice(*conv, sh, 2);
    QVERIFY2(h.ok(), h.ok() ? "" : h.error().message.c_str());
    QCOMPARE(h->conv, std::string("dw"));
    QCOMPARE(h->input, std::string("x"));
    QCOMPARE(h->kernel, std::string("dy"));
    QVERIFY(h->partial_sums());
    QCOMPARE(h->dims.size(), size_t{1});
    const HaloDim& d = h->dims[0];
    QCOMPARE(d.split, HaloSplit::kKernel);
    QCOMPARE(d.input_dim, int64_t{1});
    QCOMPARE(d.spatial, int64_t{0});
    QCOMPARE(d.tiles, int64_t{4});
    QCOMPARE(d.tile, int64_t{1});
    QCOMPARE(d.full, int64_t{16});
    QCOMPARE(d.shard, int64_t{4});
    QCOMPARE(d.window, int64_t{16});
    QCOMPARE(d.kernel_begin, int64_t{4});
    QCOMPARE(d.kernel_end, int64_t{8});
    QCOMPARE(d.left, int64_t{1});
    QCOMPARE(d.right, int64_t{1});
    QCOMPARE(d.slabs.size(), size_t{3});
    QCOMPARE(d.slabs[0].hop, int64_t{-1});
    QCOMPARE(d.slabs[0].from_device, int64_t{0});
    QCOMPARE(d.slabs[0].begin, int64_t{3});
    QCOMPARE(d.slabs[0].end, int64_t{4});
    QCOMPARE(d.slabs[1].hop, int64_t{0});
    QCOMPARE(d.slabs[1].from_device, int64_t{2});
    QCOMPARE(d.slabs[1].begin, int64_t{4});
    QCOMPARE(d.slabs[1].end, int64_t{8});
    QCOMPARE(d.slabs[2].hop, int64_t{1});
    QCOMPARE(d.slabs[2].from_device, int64_t{1});
    QCOMPARE(d.slabs[2].begin, int64_t{8});
    QCOMPARE(d.slabs[2].end, int64_t{9});

    // The edges: tile 0 (device 0) gets the first row of tile 1 only, tile 3 (device 3) the last
    // row of tile 2 only.
    for (int64_t tile : {int64_t{0}, int64_t{3}}) {
      const int64_t device = device_of_tile.at(tile);
      auto e = ConvHaloForDevice(*conv, sh, device);
      QVERIFY2(e.ok(), e.ok() ? "" : e.error().message.c_str());
      const HaloDim& ed = e->dims.at(0);
      QCOMPARE(ed.tile, tile);
      QCOMPARE(ed.slabs.size(), size_t{2});
      QCOMPARE(ed.left, tile == 0 ? int64_t{0} : int64_t{1});
      QCOMPARE(ed.right, tile == 0 ? int64_t{1} : int64_t{0});
      const HaloSlab& own = ed.slabs[tile == 0 ? 0 : 1];
      const HaloSlab& got = ed.slabs[tile == 0 ? 1 : 0];
      QCOMPARE(own.from_device, device);
      QCOMPARE(own.begin, tile * 4);
      QCOMPARE(own.end, tile * 4 + 4);
      QCOMPARE(got.from_device, device_of_tile.at(tile == 0 ? 1 : 2));
      QCOMPARE(got.begin, tile == 0 ? int64_t{4} : int64_t{11});
      QCOMPARE(got.width(), int64_t{1});
      QCOMPARE(ed.kernel_begin, tile * 4);
    }

    // The partitioner's program: one permute per side, each carrying those rows (1 row of the
    // [2, ., 6, 3] shard: 144 bytes per device) between those devices, and the all-reduce of the
    // partial filter gradients.
    QCOMPARE(CheckHaloAgainstPermutes(*conv, sh, *r, &why), 2);
    int all_reduces = 0;
    for (const auto& c : r->collectives) {
      if (c.origin != "dw") continue;
      if (c.kind == Opcode::kCollectivePermute) QCOMPARE(c.bytes_per_device, int64_t{1 * 2 * 6 * 3 * 4});
      if (c.kind == Opcode::kAllReduce) {
        ++all_reduces;
        QCOMPARE(c.bytes_per_device, int64_t{3 * 3 * 3 * 5 * 4});
        QCOMPARE(c.replica_groups, std::string("{{0,2,1,3}}"));  // all four devices, in tile order
      }
    }
    QCOMPARE(all_reduces, 1);
    // The view shows the device of tile 1 first.
    QCOMPARE(ConvHaloDefaultDevice(*conv, sh), int64_t{2});
  }

  // A strided conv's filter gradient: the window (dy, 8 rows) is dilated by the stride 2, kernel
  // tile j holds dy rows [2j, 2j+2), their taps read x rows [4j-1, 4j+4): 1 row from the left
  // neighbour, none from the right; the partitioner exchanges the left halo only.
  void stridedFilterGradientHasALeftHaloOnly() {
    std::string why;
    std::unique_ptr<Module> m;
    auto r = PartitionHlo(kStridedFilterGradient, 4, &m, &why);
    QVERIFY2(r, why.c_str());
    const Instruction* conv = m->FindInstruction("dw");
    const ConvShardings sh = ShardingsOf(*conv);
    for (int64_t device = 0; device < 4; ++device) {
      auto h = ConvHaloForDevice(*conv, sh, device);
      QVERIFY2(h.ok(), h.ok() ? "" : h.error().message.c_str());
      const HaloDim& d = h->dims.at(0);
      QCOMPARE(d.split, HaloSplit::kKernel);
      QCOMPARE(d.tile, device);
      QCOMPARE(d.window, int64_t{8});
      QCOMPARE(d.kernel_begin, 2 * device);
      QCOMPARE(d.kernel_end, 2 * device + 2);
      QCOMPARE(d.right, int64_t{0});
      QCOMPARE(d.left, device > 0 ? int64_t{1} : int64_t{0});
      QCOMPARE(d.slabs.size(), device > 0 ? size_t{2} : size_t{1});
      if (device > 0) {
        QCOMPARE(d.slabs[0].from_device, device - 1);
        QCOMPARE(d.slabs[0].begin, 4 * device - 1);
        QCOMPARE(d.slabs[0].width(), int64_t{1});
      }
      QCOMPARE(d.slabs.back().hop, int64_t{0});
      QCOMPARE(d.slabs.back().begin, 4 * device);
      QCOMPARE(d.slabs.back().end, 4 * device + 4);
    }
    QCOMPARE(CheckHaloAgainstPermutes(*conv, sh, *r, &why), 1);
    QVERIFY2(why.empty(), why.c_str());
  }

  // On a 2x4 mesh: the batch (the filter gradient's contracted dim) split 2 ways, H 4 ways. Device
  // d holds batch tile d / 4 and H tile d % 4; its neighbours are those of its own batch tile
  // (device 5: 4 and 6, not 1 or 9), as the partitioner's permute pairs are; the partial sums
  // are all-reduced over all 8.
  void filterGradientOnATwoDimensionalMesh() {
    const std::string hlo = R"(HloModule wgrad
ENTRY e {
  x = f32[2,16,6,3] parameter(0), sharding={devices=[2,4,1,1]<=[8]}
  dy = f32[2,16,6,5] parameter(1), sharding={devices=[2,4,1,1]<=[8]}
  ROOT dw = f32[3,3,3,5] convolution(x, dy), window={size=16x6 pad=1_1x1_1}, dim_labels=f01b_i01o->01bf, sharding={replicated}
})";
    std::string why;
    std::unique_ptr<Module> m;
    auto r = PartitionHlo(hlo, 8, &m, &why);
    QVERIFY2(r, why.c_str());
    const Instruction* conv = m->FindInstruction("dw");
    const ConvShardings sh = ShardingsOf(*conv);
    for (int64_t device = 0; device < 8; ++device) {
      auto h = ConvHaloForDevice(*conv, sh, device);
      QVERIFY2(h.ok(), h.ok() ? "" : h.error().message.c_str());
      const HaloDim& d = h->dims.at(0);
      const int64_t tile = device % 4;
      QCOMPARE(d.tile, tile);
      QCOMPARE(d.slabs.size(), size_t{1} + (tile > 0) + (tile < 3));
      if (tile > 0) QCOMPARE(d.slabs.front().from_device, device - 1);
      if (tile < 3) QCOMPARE(d.slabs.back().from_device, device + 1);
    }
    QCOMPARE(ConvHaloDefaultDevice(*conv, sh), int64_t{1});
    QCOMPARE(CheckHaloAgainstPermutes(*conv, sh, *r, &why), 2);
    QVERIFY2(why.empty(), why.c_str());
    bool all_reduce = false;
    for (const auto& c : r->collectives)
      if (c.origin == "dw" && c.kind == Opcode::kAllReduce) {
        all_reduce = true;
        QCOMPARE(c.replica_groups, std::string("{{0,1,2,3,4,5,6,7}}"));
      }
    QVERIFY(all_reduce);
  }

  // The zoo U-Net's backward pass (only the input's depth annotated): the filter gradient of the
  // first 3x3x3 convolution has its kernel (the output gradient) and its input split along the
  // depth like the forward conv; each device reads 1 depth row from each neighbour, as the
  // partitioner's permutes carry.
  void unetFilterGradientHaloMatchesThePartitioner() {
    std::string why;
    auto p = testing::PartitionZooModel("unet3d", kSmallUNet, &why);
    QVERIFY2(p, why.c_str());
    const Instruction* conv = p->annotated->FindInstruction(kUNetFilterGradient);
    QVERIFY(conv);
    QCOMPARE(conv->opcode(), Opcode::kConvolution);
    const ConvShardings sh = ShardingsOf(*conv);
    // A forward-only look finds nothing: the output (the kernel's gradient) is not split spatially.
    QVERIFY(!ConvHaloForDevice(*conv, sh.output, 0).ok());
    int64_t inner = -1;
    for (int64_t device = 0; device < 4; ++device) {
      auto h = ConvHaloForDevice(*conv, sh, device);
      QVERIFY2(h.ok(), h.ok() ? "" : h.error().message.c_str());
      QVERIFY(h->partial_sums());
      QCOMPARE(h->dims.size(), size_t{1});
      const HaloDim& d = h->dims[0];
      QCOMPARE(d.split, HaloSplit::kKernel);
      QCOMPARE(d.input_dim, int64_t{1});
      QCOMPARE(d.full, int64_t{16});
      QCOMPARE(d.shard, int64_t{4});
      QCOMPARE(d.window, int64_t{16});
      QCOMPARE(d.left, d.tile > 0 ? int64_t{1} : int64_t{0});
      QCOMPARE(d.right, d.tile < 3 ? int64_t{1} : int64_t{0});
      if (d.tile == 1) inner = device;
    }
    QCOMPARE(ConvHaloDefaultDevice(*conv, sh), inner);
    QCOMPARE(CheckHaloAgainstPermutes(*conv, sh, p->spmd, &why), 2);
  }

  // Not a convolution, or not split along a windowed dim: a clear error.
  void haloOfOtherInstructionsIsRefused() {
    std::string why;
    auto p = testing::PartitionZooModel("unet3d", kSmallUNet, &why);
    QVERIFY2(p, why.c_str());
    const Instruction* x = p->annotated->FindInstruction("x");
    QVERIFY(x && x->sharding());
    QVERIFY(!ConvHaloForDevice(*x, *x->sharding(), 0).ok());
    const Instruction* conv = p->annotated->FindInstruction("down0_conva_conv");
    QVERIFY(!ConvHaloForDevice(*conv, HloSharding::Replicate(), 0).ok());
    QVERIFY(!ConvHaloForDevice(*conv, *conv->sharding(), 99).ok());
    QCOMPARE(ConvHaloDefaultDevice(*conv, ConvShardings{std::nullopt, std::nullopt, HloSharding::Replicate()}), int64_t{-1});
  }

  // A filter gradient whose kernel is split along H but whose input is not: the partitioner
  // gathers or reshards the input, so there is no halo to draw, and the error says why.
  void filterGradientWithoutTheInputSplitIsRefused() {
    auto m = ParseHloModule(kFilterGradient);
    QVERIFY(m.ok());
    const Instruction* conv = (*m)->FindInstruction("dw");
    ConvShardings sh = ShardingsOf(*conv);
    sh.lhs = HloSharding::Replicate();
    auto h = ConvHaloForDevice(*conv, sh, 0);
    QVERIFY(!h.ok());
    QVERIFY2(h.error().message.find("not split alike") != std::string::npos, h.error().message.c_str());
    sh.lhs.reset();
    QVERIFY(!ConvHaloForDevice(*conv, sh, 0).ok());
    QCOMPARE(ConvHaloDefaultDevice(*conv, sh), int64_t{-1});
  }
};

QTEST_GUILESS_MAIN(TestTeachingLabels)
#include "test_teaching_labels.moc"
