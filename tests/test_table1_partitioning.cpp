// GSPMD Table 1 (../shared/papers/001_*.txt §5.1, Figure 7): the three 2-D sharding configurations
// of a dense Transformer layer, propagated and partitioned, must produce the collectives the paper
// describes — validation cases G1, G2, G3 of ../shared/reference/validation.md — and compute the
// same numbers as the unpartitioned layer (verified on 2x2 and 2x4 meshes).
#include <QtTest>

#include <optional>

#include "core/zoo/model_zoo.h"
#include "core/eval/numeric_verify.h"
#include "partitioner/propagation/sharding_propagation.h"
#include "partitioner/spmd/spmd_partitioner.h"

using namespace shardscope;

namespace {

struct Partitioned {
  std::unique_ptr<Module> annotated;
  PartitionResult spmd;
};

// Builds the layer with `set` on an X x Y mesh, propagates (outputs and parameters may be
// sharded), partitions, and verifies numerically. Empty on failure with the reason in *why.
std::optional<Partitioned> Run(AnnotationSet set, int64_t mx, int64_t my, Optimizer opt, std::string* why) {
  TransformerConfig c;
  c.batch = 4;
  c.seq = 8;
  c.model = 16;
  c.heads = 4;
  c.head_dim = 4;
  c.hidden = 32;
  c.layernorm = false;  // Figure 7 shows the layer without LayerNorm
  c.backward = true;
  c.optimizer = opt;
  c.annotations = set;
  c.mesh_x = mx;
  c.mesh_y = my;
  auto m = BuildTransformer(c);
  if (!m.ok()) { *why = m.error().message; return std::nullopt; }
  PropagationOptions po;
  po.propagate_to_output = {true};
  po.propagate_to_parameters = {true};
  auto p = PropagateShardings(**m, po);
  if (!p.ok()) { *why = "propagation: " + p.error().message; return std::nullopt; }
  auto r = PartitionModule(**m);
  if (!r.ok()) { *why = "partition: " + r.error().message; return std::nullopt; }
  auto v = VerifyPartitioned(**m, *r->module, mx * my, 11);
  if (!v.ok()) { *why = "verify: " + v.error().message; return std::nullopt; }
  if (!v->match) { *why = "numerical mismatch: " + v->detail; return std::nullopt; }
  return Partitioned{std::move(m).value(), std::move(r).value()};
}

const Instruction* SpmdInst(const Partitioned& p, const std::string& name) {
  return p.spmd.module->FindInstruction(name);
}

bool IsWeightParameter(const Instruction* i) {
  while (i && (i->opcode() == Opcode::kReshape || i->opcode() == Opcode::kCopy || i->opcode() == Opcode::kConvert))
    i = i->operand(0);
  return i && i->opcode() == Opcode::kParameter && i->name().rfind("layer0_w", 0) == 0;
}

// Groups along mesh axis X of an X x Y mesh (device = x*Y + y): {y, Y+y, ...}; along Y: rows.
bool GroupsAlongX(const ReplicaGroups& g, int64_t mx, int64_t my) {
  if (static_cast<int64_t>(g.groups.size()) != my) return false;
  for (const auto& grp : g.groups) {
    if (static_cast<int64_t>(grp.size()) != mx) return false;
    for (size_t i = 1; i < grp.size(); ++i)
      if (grp[i] - grp[i - 1] != my) return false;
  }
  return true;
}
bool GroupsAlongY(const ReplicaGroups& g, int64_t mx, int64_t my) {
  if (static_cast<int64_t>(g.groups.size()) != mx) return false;
  for (const auto& grp : g.groups) {
    if (static_cast<int64_t>(grp.size()) != my) return false;
    for (size_t i = 1; i < grp.size(); ++i)
      if (grp[i] - grp[i - 1] != 1) return false;
  }
  return true;
}

}  // namespace

class Table1Test : public QObject {
  Q_OBJECT
 private slots:
  void meshes_data() {
    QTest::addColumn<int>("mx");
    QTest::addColumn<int>("my");
    QTest::newRow("2x2") << 2 << 2;
    QTest::newRow("2x4") << 2 << 4;
  }

  // G1: "2D Attempt 1": GSPMD adds subgrouped AllReduce only — no resharding anywhere.
  void attempt1SubgroupedAllReduceOnly_data() { meshes_data(); }
  void attempt1SubgroupedAllReduceOnly() {
    QFETCH(int, mx);
    QFETCH(int, my);
    std::string why;
    auto p = Run(AnnotationSet::kAttempt1, mx, my, Optimizer::kNone, &why);
    QVERIFY2(p, why.c_str());
    QVERIFY(p->spmd.collectives.size() >= 4);  // one per forward einsum at least
    for (const auto& c : p->spmd.collectives) {
      QVERIFY2(c.kind == Opcode::kAllReduce, (c.instruction + " is " + std::string(OpcodeName(c.kind))).c_str());
      const Instruction* i = SpmdInst(*p, c.instruction);
      QVERIFY(i);
      for (const auto& g : i->replica_groups.groups) QVERIFY(static_cast<int>(g.size()) < mx * my);  // subgrouped
    }
  }

  // G2: "2D Attempt 2": AllGather of weights along X before the layer's einsums; ReduceScatter of
  // the weight gradients in the backward pass (with the weight update sharded like the weights).
  void attempt2WeightAllGatherGradientReduceScatter_data() { meshes_data(); }
  void attempt2WeightAllGatherGradientReduceScatter() {
    QFETCH(int, mx);
    QFETCH(int, my);
    std::string why;
    auto p = Run(AnnotationSet::kAttempt2, mx, my, Optimizer::kSgd, &why);
    QVERIFY2(p, why.c_str());
    int weight_gathers = 0, gradient_scatters = 0, gradient_allreduces = 0;
    for (const auto& c : p->spmd.collectives) {
      const Instruction* i = SpmdInst(*p, c.instruction);
      QVERIFY(i);
      if (c.kind == Opcode::kAllGather && c.origin.rfind("layer0_", 0) == 0 && IsWeightParameter(i->operand(0))) {
        QVERIFY2(GroupsAlongX(i->replica_groups, mx, my), c.replica_groups.c_str());
        ++weight_gathers;
      }
      const bool grad = c.origin.rfind("backward_layer0_", 0) == 0 && c.origin.find("_dw") != std::string::npos;
      if (grad && c.kind == Opcode::kReduceScatter) ++gradient_scatters;
      if (grad && c.kind == Opcode::kAllReduce) ++gradient_allreduces;
    }
    QVERIFY2(weight_gathers >= 3, std::to_string(weight_gathers).c_str());
    QVERIFY2(gradient_scatters >= 3, std::to_string(gradient_scatters).c_str());
    QCOMPARE(gradient_allreduces, 0);
  }

  // G3: "2D finalized": a subgrouped AllGather of BSM along Y at the layer start (M unsharded
  // for the einsums) and ReduceScatter instead of AllReduce on the output BSM.
  void finalizedGatherBsmAlongYReduceScatterOutput_data() { meshes_data(); }
  void finalizedGatherBsmAlongYReduceScatterOutput() {
    QFETCH(int, mx);
    QFETCH(int, my);
    std::string why;
    auto p = Run(AnnotationSet::kFinalized, mx, my, Optimizer::kNone, &why);
    QVERIFY2(p, why.c_str());
    bool bsm_gather = false;
    int output_scatters = 0, output_allreduces = 0;
    for (const auto& c : p->spmd.collectives) {
      const Instruction* i = SpmdInst(*p, c.instruction);
      QVERIFY(i);
      if (c.kind == Opcode::kAllGather && i->operand(0)->opcode() == Opcode::kParameter &&
          i->operand(0)->name() == "x") {
        QVERIFY2(GroupsAlongY(i->replica_groups, mx, my), c.replica_groups.c_str());
        QCOMPARE(i->dimensions, std::vector<int64_t>{2});  // M of [B,S,M]
        bsm_gather = true;
      }
      const bool output_einsum = c.origin == "layer0_attention_out" || c.origin == "layer0_ffn_wo";
      if (output_einsum && c.kind == Opcode::kReduceScatter) ++output_scatters;
      if (output_einsum && c.kind == Opcode::kAllReduce) ++output_allreduces;
    }
    QVERIFY(bsm_gather);
    QCOMPARE(output_scatters, 2);
    QCOMPARE(output_allreduces, 0);
  }
};

QTEST_APPLESS_MAIN(Table1Test)
#include "test_table1_partitioning.moc"
