// Convolutional models of the zoo partitioned: GSPMD §5.6 (../shared/papers/001_*.txt, Table 8,
// validation case G6) — the 3-D U-Net with only its inputs' depth annotated: propagation carries
// the spatial sharding to every convolution, the partitioner runs each convolution with halo
// exchanges (collective-permutes of the neighbours' boundary rows, Figure 5a) and never gathers an
// activation; and ResNet-50 data parallel (the weight-update-sharding paper's image model): only
// all-reduces (BatchNorm statistics forward, gradients backward). Every case is verified
// numerically against the unpartitioned model.
#include <QtTest>

#include <string>

#include "core/zoo/model_zoo.h"
#include "partitioner/propagation/sharding_propagation.h"
#include "partitioner/spmd/spmd_partitioner.h"
#include "tests/zoo_partitioning.h"

using namespace shardscope;
using testing::DescribeCollectives;
using testing::PartitionZooModel;

namespace {

const ZooOverrides kSmallUNet = {{"batch", "2"}, {"image", "16"}, {"width", "2"}, {"levels", "3"}, {"classes", "2"}};

ZooOverrides With(ZooOverrides o, const ZooOverrides& more) {
  for (const auto& [k, v] : more) o[k] = v;
  return o;
}

bool Starts(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }
bool Forward(const std::string& origin) {
  return !Starts(origin, "backward_") && !Starts(origin, "optimizer_") && !Starts(origin, "loss_");
}

// How many ways dim `d` of the instruction's sharding is split.
int64_t Ways(const Instruction* i, int64_t d) {
  if (!i || !i->has_sharding() || !i->sharding()->IsTiled()) return 1;
  return i->sharding()->tile_assignment().dims()[static_cast<size_t>(d)];
}

}  // namespace

class SpatialPartitioningTest : public QObject {
  Q_OBJECT
 private slots:
  // Table 8's spatial partitioning (mesh (1, 4)): one annotation on each input's depth, and every
  // forward convolution — 3x3x3, the up-sampling (base-dilated) ones, the final 1x1x1 — has its
  // input and output split along the depth 4 ways; each 3x3x3 convolution exchanges halos; the
  // forward pass gathers nothing.
  void unetSpatialShardingReachesEveryConvolution() {
    std::string why;
    auto p = PartitionZooModel("unet3d", kSmallUNet, &why);
    QVERIFY2(p, why.c_str());
    int annotated = 0, convs = 0;
    for (const auto& i : p->annotated->entry()->instructions()) {
      if (i->opcode() == Opcode::kParameter && (i->name() == "x" || i->name() == "labels")) ++annotated;
      if (i->opcode() != Opcode::kConvolution || Starts(i->name(), "backward_")) continue;
      ++convs;
      QVERIFY2(Ways(i.get(), 1) == 4, (i->name() + " output is not split 4 ways along D").c_str());
      QVERIFY2(Ways(i->operand(0), 1) == 4, (i->name() + " input is not split 4 ways along D").c_str());
    }
    QCOMPARE(annotated, 2);
    QCOMPARE(convs, 3 * 2 + 2 * 3 + 1);  // analysis 2 per level, synthesis 3 per level, final
    std::map<std::string, int> halos;  // forward convolution -> collective-permutes
    for (const auto& c : p->spmd.collectives) {
      if (!Forward(c.origin)) continue;
      QVERIFY2(c.kind == Opcode::kCollectivePermute || c.kind == Opcode::kAllReduce,
               (c.origin + ": " + std::string(OpcodeName(c.kind)) + "\n" + DescribeCollectives(p->spmd)).c_str());
      if (c.kind == Opcode::kCollectivePermute) {
        QVERIFY2(c.reason.find("halo exchange") != std::string::npos, c.reason.c_str());
        ++halos[c.origin];
      }
      // All-reduces are BatchNorm's statistics over the split depth.
      if (c.kind == Opcode::kAllReduce) QVERIFY2(c.origin.find("_bn_") != std::string::npos, c.origin.c_str());
    }
    for (const char* conv : {"down0_conva_conv", "down0_convb_conv", "down1_conva_conv", "down2_convb_conv",
                             "up1_conva_conv", "up0_convb_conv"})
      QVERIFY2(halos[conv] >= 2, (std::string(conv) + " has no halo exchange (left and right)").c_str());
    qInfo("U-Net (3 levels) on 4 spatial partitions: max abs error %.3g", p->max_abs_error);
  }

  // At Table 8's real sizes (128^3 images, batch 4, 16 spatial partitions) the whole training step
  // — forward, backward (input and kernel gradients of every convolution, the up-sampling ones
  // included) and the optimizer — gathers no activation: the only collectives are halo exchanges
  // (collective-permutes) and all-reduces (BatchNorm statistics, the weights' gradients).
  void unetRealSizeTrainingStepGathersNothing() {
    auto m = ZooBuild("unet3d", {{"mesh_y", "16"}});
    QVERIFY(m.ok());
    PropagationOptions po;
    po.propagate_to_output = {true};
    QVERIFY(PropagateShardings(**m, po).ok());
    auto r = PartitionModule(**m);
    QVERIFY2(r.ok(), r.ok() ? "" : r.error().message.c_str());
    int halos = 0, convs = 0;
    for (const auto& c : r->collectives) {
      QVERIFY2(c.kind == Opcode::kCollectivePermute || c.kind == Opcode::kAllReduce,
               (c.origin + ": " + std::string(OpcodeName(c.kind)) + " " + c.reason).c_str());
      halos += c.kind == Opcode::kCollectivePermute;
    }
    for (const auto& i : (*m)->entry()->instructions()) {
      if (i->opcode() != Opcode::kConvolution) continue;
      ++convs;
      // Every convolution's input keeps its depth split 16 ways (the kernel gradients' input too).
      QVERIFY2(Ways(i->operand(0), 1) == 16, i->name().c_str());
    }
    QVERIFY(r->replicated_fallbacks.empty());
    qInfo("U-Net 128^3 on 16 partitions: %d convolutions, %d halo collective-permutes, %zu collectives", convs, halos,
          r->collectives.size());
    QVERIFY(halos > 2 * 20);
  }

  // Table 8's combined (data, spatial) meshes partition and verify the same way; and the data
  // annotation alone splits only the batch (no halo anywhere).
  void unetDataAndSpatialMeshes() {
    std::string why;
    auto both = PartitionZooModel("unet3d", With(kSmallUNet, {{"mesh_x", "2"}, {"mesh_y", "2"}}), &why);
    QVERIFY2(both, why.c_str());
    auto data = PartitionZooModel("unet3d", With(kSmallUNet, {{"annotations", "data"}, {"mesh_x", "2"}, {"mesh_y", "1"}}), &why);
    QVERIFY2(data, why.c_str());
    for (const auto& c : data->spmd.collectives)
      QVERIFY2(c.kind == Opcode::kAllReduce, DescribeCollectives(data->spmd).c_str());
  }

  // ResNet data parallel over 4 devices: the forward pass all-reduces only BatchNorm statistics;
  // no halo exchange, no all-to-all anywhere.
  void resnetDataParallel() {
    std::string why;
    auto p = PartitionZooModel("resnet50",
                               {{"batch", "8"}, {"image", "32"}, {"width", "4"}, {"blocks", "1,1"}, {"classes", "10"},
                                {"mesh_x", "4"}, {"optimizer", "sgd"}},
                               &why);
    QVERIFY2(p, why.c_str());
    int forward = 0;
    for (const auto& c : p->spmd.collectives) {
      QVERIFY2(c.kind == Opcode::kAllReduce || c.kind == Opcode::kAllGather, DescribeCollectives(p->spmd).c_str());
      if (Forward(c.origin)) {
        ++forward;
        QVERIFY2(c.kind == Opcode::kAllReduce && c.origin.find("_bn_") != std::string::npos, c.origin.c_str());
      }
    }
    QCOMPARE(forward, 2 * (1 + 4 + 4));  // mean and variance of every BatchNorm: stem, 3 + projection per stage
  }

  // bn_batch = each replica's examples (the reference TPU ResNet's distributed_group_size = 1):
  // BatchNorm's statistics need no communication, forward or backward; what remains is the
  // gradients' all-reduces, one per weight, and the loss's. Verified numerically against the unpartitioned step.
  void resnetPerReplicaBatchNorm() {
    std::string why;
    const ZooOverrides small = {{"batch", "8"},   {"image", "32"}, {"width", "4"},      {"blocks", "1,1"},
                                {"classes", "10"}, {"mesh_x", "4"}, {"optimizer", "sgd"}, {"bn_batch", "2"}};
    auto p = PartitionZooModel("resnet50", small, &why);
    QVERIFY2(p, why.c_str());
    int64_t weights = 0, grouped = 0;
    for (const auto& i : p->annotated->entry()->instructions()) {
      if (i->opcode() == Opcode::kParameter && i->name() != "x" && i->name() != "labels") ++weights;
      if (i->opcode() == Opcode::kReshape && i->name().find("_bn_groups") != std::string::npos) {
        ++grouped;
        QCOMPARE(i->shape().dim(0), int64_t{4});  // [groups, 2 examples, ...]
        QCOMPARE(i->shape().dim(1), int64_t{2});
      }
    }
    QCOMPARE(weights, int64_t{3 + 2 * 4 * 3 + 2});  // sgd, no state: stem, 4 layers per stage, fc w and b
    QCOMPARE(grouped, int64_t{1 + 2 * 4});          // every BatchNorm
    int64_t all_reduces = 0;
    for (const auto& c : p->spmd.collectives) {
      QVERIFY2(c.kind == Opcode::kAllReduce, DescribeCollectives(p->spmd).c_str());
      QVERIFY2(!Forward(c.origin), c.origin.c_str());
      QVERIFY2(c.origin.find("_bn_mean") == std::string::npos && c.origin.find("_bn_reduce") == std::string::npos &&
                   c.origin.find("mean_dnormalized") == std::string::npos,
               c.origin.c_str());
      ++all_reduces;
    }
    qInfo("resnet, per-replica BatchNorm on 4 devices: %lld all-reduces, %lld weights", static_cast<long long>(all_reduces), static_cast<long long>(weights));
    QCOMPARE(all_reduces, weights + 1);  // one per weight's gradient, and the loss

    auto bad = PartitionZooModel("resnet50", With(small, {{"bn_batch", "3"}}), &why);
    QVERIFY(!bad);
    QVERIFY2(why.find("bn_batch = 3 must divide the batch (8)") != std::string::npos, why.c_str());
  }
};

QTEST_APPLESS_MAIN(SpatialPartitioningTest)
#include "test_spatial_partitioning.moc"
