// What the GUI's teaching panel and mesh view say about the MoE and convolution models (issue 15),
// computed outside the widgets and checked here against the partitioned programs themselves:
//  - an MoE dispatch / combine all-to-all's pieces named in the tensor's terms ("tokens of group 3
//    for expert 1": partitioner/spmd/all_to_all_pieces.h), and those names on the teaching
//    walkthrough's transfers (WalkthroughOptions::piece_names);
//  - a spatially partitioned convolution's halo as one device receives it (the own slab, the rows
//    each neighbour sends: partitioner/spmd/conv_halo_slabs.h), equal to what the partitioner's
//    halo collective-permutes carry.
#include <QtTest/QtTest>

#include <map>
#include <set>

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

ShardingLookup Own() {
  return [](const Instruction& i) { return i.sharding(); };
}

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
  }
};

QTEST_GUILESS_MAIN(TestTeachingLabels)
#include "test_teaching_labels.moc"
