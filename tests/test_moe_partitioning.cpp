// GShard's MoE Transformer (../shared/papers/002_*.txt) partitioned as GSPMD §5.4 and §5.5 describe
// (../shared/papers/001_*.txt, Figure 8): with the paper's annotations (E split over a 1-D mesh in
// the MoE layers, the batch elsewhere) the forward pass switches the sharded dimension from the
// groups to the experts and back with exactly two all-to-alls (Figure 8a), the backward pass
// all-reduces only the gradients of the weights that are not experts' (§5.4: "GSPMD inserts gradient
// AllReduce only for non-MoE layers"); with the hybrid annotations (E on X, H on Y, dense layers as
// Table 1) the MoE block has the all-to-all / all-gather / reduce-scatter of Figure 8b. Every case
// is verified numerically, the top-2 gating included: with a capacity of one token per expert
// most tokens overflow and both programs must drop the same ones.
#include <QtTest>

#include <algorithm>
#include <functional>
#include <optional>
#include <set>

#include "core/eval/evaluator.h"
#include "core/ir/builder.h"
#include "core/zoo/model_zoo.h"
#include "app/pipeline/pipeline.h"
#include "app/pipeline/reproduce.h"
#include "app/pipeline/simulate.h"
#include "simulator/buffer_layout.h"
#include "tests/zoo_partitioning.h"

using namespace shardscope;

namespace {

const ZooOverrides kSmall = {{"batch", "8"},  {"seq", "4"},   {"model", "8"}, {"heads", "2"},
                             {"head_dim", "4"}, {"hidden", "16"}, {"experts", "4"}};

ZooOverrides With(ZooOverrides o, const ZooOverrides& more) {
  for (const auto& [k, v] : more) o[k] = v;
  return o;
}

auto Run(const std::string& model, const ZooOverrides& o, std::string* why,
         const std::function<void(Module&)>& edit = nullptr) {
  return testing::PartitionZooModel(model, o, why, edit);
}

std::string Describe(const PartitionResult& r) { return testing::DescribeCollectives(r); }

bool Starts(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

// Groups along mesh axis X of an X x Y mesh (device = x*Y + y), or along Y.
bool Along(const ReplicaGroups& g, int64_t mx, int64_t my, bool x_axis) {
  const int64_t count = x_axis ? my : mx, size = x_axis ? mx : my, step = x_axis ? my : 1;
  if (static_cast<int64_t>(g.groups.size()) != count) return false;
  for (const auto& grp : g.groups) {
    if (static_cast<int64_t>(grp.size()) != size) return false;
    for (size_t i = 1; i < grp.size(); ++i)
      if (grp[i] - grp[i - 1] != step) return false;
  }
  return true;
}

}  // namespace

class MoePartitioningTest : public QObject {
  Q_OBJECT
 private slots:
  // Figure 8a: the MoE layer's forward pass on a 1-D mesh has exactly two all-to-alls over all
  // devices — groups -> experts before the experts' einsums, experts -> groups after them — and no
  // other collective (attention and gating run on the batch shard, the experts on their own).
  void gshardForwardHasExactlyTheAllToAllsOfFig8a_data() {
    QTest::addColumn<int>("devices");
    QTest::addColumn<int>("experts");
    QTest::newRow("4 devices, 1 expert each") << 4 << 4;
    QTest::newRow("4 devices, 2 experts each") << 4 << 8;
    QTest::newRow("8 devices, 1 expert each") << 8 << 8;
  }
  void gshardForwardHasExactlyTheAllToAllsOfFig8a() {
    QFETCH(int, devices);
    QFETCH(int, experts);
    std::string why;
    auto p = Run("moe-layer", With(kSmall, {{"mesh_x", std::to_string(devices)}, {"experts", std::to_string(experts)}}), &why);
    QVERIFY2(p, why.c_str());
    const auto& cs = p->spmd.collectives;
    QVERIFY2(cs.size() == 2, Describe(p->spmd).c_str());
    QCOMPARE(cs[0].kind, Opcode::kAllToAll);
    QCOMPARE(cs[1].kind, Opcode::kAllToAll);
    QCOMPARE(cs[0].origin, std::string("layer0_moe_dispatched"));
    QCOMPARE(cs[1].origin, std::string("layer0_moe_expert_outputs_by_group"));
    // Shards: [G/n, E, C, M] (the dispatch einsum, by group) -> [E/n, G, C, M] (the experts'
    // inputs) -> ... -> [E, G/n, C, M] (the experts' outputs by group).
    const int64_t n = devices, E = experts, G = devices, C = (2 * (8 / G) * 4 + E - 1) / E, M = 8;
    auto shard = [&](const std::string& original) {
      const auto& made = p->spmd.origin_map.at(original);
      return p->spmd.module->FindInstruction(made.back())->shape().dims;
    };
    QCOMPARE(shard("layer0_moe_dispatched_by_group"), (std::vector<int64_t>{G / n, E, C, M}));
    QCOMPARE(shard("layer0_moe_dispatched"), (std::vector<int64_t>{E / n, G, C, M}));
    QCOMPARE(shard("layer0_moe_experts_wo"), (std::vector<int64_t>{E / n, G, C, M}));
    QCOMPARE(shard("layer0_moe_expert_outputs_by_group"), (std::vector<int64_t>{E, G / n, C, M}));
    for (const auto& c : cs) {
      const Instruction* a = p->spmd.module->FindInstruction(c.instruction);
      QVERIFY(a);
      QCOMPARE(a->replica_groups.groups.size(), size_t(1));
      QCOMPARE(static_cast<int64_t>(a->replica_groups.groups[0].size()), n);
    }
    QVERIFY(p->spmd.replicated_fallbacks.empty());
  }

  // §5.4: the backward pass switches back with all-to-alls too, and only the weights that are not
  // experts' (attention, dense FFN, LayerNorm scales, the replicated gating weights) get a gradient
  // all-reduce; the experts' weights are updated where they live, with no collective at all.
  void gshardTrainingStepAllReducesOnlyNonExpertGradients() {
    std::string why;
    auto p = Run("moe-transformer", With(kSmall, {{"optimizer", "sgd"}}), &why);
    QVERIFY2(p, why.c_str());
    int all_to_alls = 0;
    std::set<std::string> reduced;  // weights whose gradient is all-reduced
    for (const auto& c : p->spmd.collectives) {
      QVERIFY2(c.kind == Opcode::kAllToAll || c.kind == Opcode::kAllReduce, Describe(p->spmd).c_str());
      if (c.kind == Opcode::kAllToAll) {
        ++all_to_alls;
        QVERIFY2(c.origin.find("_moe_") != std::string::npos, c.origin.c_str());
        continue;
      }
      QVERIFY2(c.origin.find("expert") == std::string::npos, c.origin.c_str());
      if (Starts(c.origin, "backward_")) reduced.insert(c.origin);
    }
    QCOMPARE(all_to_alls, 4);  // two forward, two backward
    // One all-reduce per weight that is not an expert's: layer 0 (dense) LayerNorm scales, W_qkv,
    // W_o, W_in, W_out; layer 1 (MoE) LayerNorm scales, W_qkv, W_o and the gating weights.
    QVERIFY2(reduced.size() == 11, Describe(p->spmd).c_str());
    for (const char* grad : {"backward_layer1_moe_gating_dwg", "backward_layer1_attention_dwo", "backward_layer1_ln2_dscale",
                             "backward_layer0_ffn_dwi", "backward_layer0_ffn_dwout", "backward_layer0_ln1_dscale"})
      QVERIFY2(reduced.count(grad), (std::string(grad) + " is not all-reduced:\n" + Describe(p->spmd)).c_str());
    // The experts' weights stay split over the experts, their updates too.
    const Instruction* wi = p->annotated->FindInstruction("layer1_expert_wi");
    QVERIFY(wi && wi->has_sharding());
    QCOMPARE(wi->sharding()->tile_assignment().dims()[0], int64_t(4));
  }

  // Figure 8b: the hybrid MoE layer's forward: E on X, H on Y. The tokens' M is gathered along Y,
  // the groups switch to experts along X (all-to-all), the experts' output is reduce-scattered
  // over M along Y (H was contracted) and switches back to groups along X.
  void hybridForwardHasTheCollectivesOfFig8b() {
    const int64_t mx = 2, my = 2;
    std::string why;
    auto p = Run("moe-layer", With(kSmall, {{"annotations", "hybrid"}, {"mesh_x", "2"}, {"mesh_y", "2"}}), &why);
    QVERIFY2(p, why.c_str());
    std::vector<const InsertedCollective*> moe;
    for (const auto& c : p->spmd.collectives)
      if (Starts(c.origin, "layer0_moe_")) moe.push_back(&c);
    std::string seq;
    for (const auto* c : moe) seq += std::string(OpcodeName(c->kind)) + " ";
    QCOMPARE(seq, std::string("all-gather all-to-all reduce-scatter all-to-all "));
    auto groups = [&](const InsertedCollective* c) { return p->spmd.module->FindInstruction(c->instruction)->replica_groups; };
    QVERIFY(Along(groups(moe[0]), mx, my, false));  // M along Y
    QVERIFY(Along(groups(moe[1]), mx, my, true));   // groups -> experts along X
    QVERIFY(Along(groups(moe[2]), mx, my, false));  // M along Y
    QVERIFY(Along(groups(moe[3]), mx, my, true));   // experts -> groups along X
    QCOMPARE(moe[1]->origin, std::string("layer0_moe_dispatched"));
    QCOMPARE(moe[2]->origin, std::string("layer0_moe_experts_wo"));
    QCOMPARE(moe[3]->origin, std::string("layer0_moe_expert_outputs_by_group"));
  }

  // The hybrid training step partitions and verifies too (dense layers as Table 1 "2D finalized").
  void hybridTrainingStepVerifies() {
    std::string why;
    auto p = Run("moe-transformer", With(kSmall, {{"annotations", "hybrid"}, {"mesh_x", "2"}, {"mesh_y", "2"}}), &why);
    QVERIFY2(p, why.c_str());
    int all_to_alls = 0;
    for (const auto& c : p->spmd.collectives) all_to_alls += c.kind == Opcode::kAllToAll;
    QCOMPARE(all_to_alls, 4);
  }

  // Gating verified numerically: with capacity 1 most tokens overflow; the dispatch mask (made an
  // output here) and the layer's output are the same in the SPMD program as in the original.
  void capacityOverflowDropsTheSameTokens() {
    auto add_mask_output = [](Module& m) {
      Instruction* mask = m.FindInstruction("layer0_moe_gating_dispatch_mask");
      QVERIFY(mask);
      Builder b(m.entry());
      b.SetRoot(b.Tuple({m.entry()->root(), mask}, "outputs"));
    };
    const ZooOverrides o = With(kSmall, {{"capacity", "1"}});
    // The original drops tokens: with C = 1 at most E tokens per group are placed per choice.
    auto m = ZooBuild("moe-layer", o);
    QVERIFY(m.ok());
    add_mask_output(**m);
    auto args = MakeRandomArguments(*(*m)->entry(), 17);
    auto out = Evaluate(**m, args);
    QVERIFY2(out.ok(), out.ok() ? "" : out.error().message.c_str());
    const Tensor& mask = out->element(1);
    double placed = 0;
    for (int64_t i = 0; i < mask.size(); ++i) placed += mask.GetDouble(i);
    const double wanted = 2.0 * 8 * 4;  // two choices for each of the 32 tokens
    qInfo("capacity 1: %g of %g expert slots filled", placed, wanted);
    QVERIFY(placed <= 2 * 4 * 4);  // G * E * C per choice
    QVERIFY(placed < wanted);
    std::string why;
    for (const char* set : {"gshard", "hybrid"}) {
      ZooOverrides oo = o;
      oo["annotations"] = set;
      if (std::string(set) == "hybrid") oo["mesh_x"] = oo["mesh_y"] = "2";
      auto p = Run("moe-layer", oo, &why, add_mask_output);
      QVERIFY2(p, (std::string(set) + ": " + why).c_str());
    }
    // The default capacity 2N/(G E) verifies as well (some overflow at random gates).
    QVERIFY2(Run("moe-layer", kSmall, &why), why.c_str());
  }

  // Rematerialisation (remat=1): the backward pass recomputes each layer's forward from the layer's
  // input. The step computes exactly what it computes without it (same loss, same updated weights),
  // its partitioned program verifies numerically, and the forward's activations no longer live into
  // the backward pass, so the simulated peak memory falls while the compute grows.
  void rematComputesTheSameStepInLessMemory() {
    const ZooOverrides o = With(kSmall, {{"layers", "4"}, {"optimizer", "sgd"}, {"seq", "16"}});
    auto plain = ZooBuild("moe-transformer", o);
    auto remat = ZooBuild("moe-transformer", With(o, {{"remat", "1"}}));
    QVERIFY2(plain.ok(), plain.ok() ? "" : plain.error().message.c_str());
    QVERIFY2(remat.ok(), remat.ok() ? "" : remat.error().message.c_str());
    QCOMPARE((*remat)->entry()->parameters().size(), (*plain)->entry()->parameters().size());
    int recomputed = 0;
    for (const auto& i : (*remat)->entry()->instructions())
      recomputed += i->op_name().find("/remat/") != std::string::npos;
    QVERIFY2(recomputed > 100, std::to_string(recomputed).c_str());
    QCOMPARE((*remat)->instruction_count(), (*plain)->instruction_count() + recomputed);

    auto args = MakeRandomArguments(*(*plain)->entry(), 23);
    auto want = Evaluate(**plain, args);
    auto got = Evaluate(**remat, args);
    QVERIFY2(want.ok() && got.ok(), "evaluation failed");
    QCOMPARE(got->element_count(), want->element_count());
    for (int64_t e = 0; e < want->element_count(); ++e) {
      const Tensor &a = want->element(e), &b = got->element(e);
      QCOMPARE(a.size(), b.size());
      for (int64_t k = 0; k < a.size(); ++k) QCOMPARE(b.GetDouble(k), a.GetDouble(k));  // the same ops, in order
    }

    std::string why;
    auto p0 = Run("moe-transformer", o, &why);
    QVERIFY2(p0, why.c_str());
    auto p1 = Run("moe-transformer", With(o, {{"remat", "1"}}), &why);
    QVERIFY2(p1, why.c_str());
    auto slice = pipeline::SliceForMesh("tpu-v3", DeviceMesh({{"X", 4}}));
    QVERIFY(slice.ok());
    // Logical sizes: this toy model's tensors (seq 16) are mostly smaller than a TPU tile, so with
    // layout padding (simulator/buffer_layout.h) whole 8x128 tiles, not the activations, set the
    // peak (2.04 -> 1.90 MB, -7%); the activations' liveness is what this test is about.
    sim::SimulationOptions logical;
    logical.program.pad_to_layout_tiles = false;
    auto s0 = pipeline::SimulateStep(*p0->spmd.module, *slice, logical);
    auto s1 = pipeline::SimulateStep(*p1->spmd.module, *slice, logical);
    QVERIFY(s0.ok() && s1.ok());
    const double peak0 = static_cast<double>(s0->run.summary.peak_memory_bytes), peak1 = static_cast<double>(s1->run.summary.peak_memory_bytes);
    qInfo("peak %.0f -> %.0f bytes, step %.1f -> %.1f us", peak0, peak1, s0->run.summary.step_time_s * 1e6, s1->run.summary.step_time_s * 1e6);
    // 126784 -> 118676 bytes (-6.4%). Before a window (slice, dynamic-slice, one-start gather) read
    // only by dots was read in place by them (docs/simulator-engine.md, "Fusion"): 128832 -> 116628
    // (-9.5%); before cheap producers read only by dots were fused into them, 147264 -> 117652
    // (-20%): the plain step keeps fewer values the dots read, part of what remat saved.
    QVERIFY2(peak1 < 0.95 * peak0, qPrintable(QString("%1 -> %2").arg(peak0).arg(peak1)));
    QVERIFY(s1->run.summary.step_time_s > s0->run.summary.step_time_s);
    // The recomputed ops are counted as recompute (simulator/pipeline_accounting.h), as in Tables 4-5.
    QCOMPARE(s0->run.summary.recompute_time_s, 0.0);
    QVERIFY(s1->run.summary.recompute_time_s > 0);
  }

  // GSPMD Table 6 (validation.md G5): weak scaling, one expert and 4 sequences of 1024 tokens per
  // device, so the paper's per-device peak is flat (10.8, 11.2, 11.2, 11.6 GB at 32 ... 2048
  // devices). The dispatch and combine masks [G,S,E,C] (one group of S = 4096 tokens per device,
  // capacity C = 2S/E) hold 2 S^2 elements per device at every E; with C in the 128 lanes of a TPU
  // tile they grew as E/C (4 at 32 experts ... 2048 at 2048) and the 36-layer peak with them,
  // 18.2 -> 108.7 GB. Laid out as XLA's layout assignment is free to (simulator/buffer_layout.h: the
  // least padded minor dimensions) they take their logical size, and Table 6's configuration at two
  // layers peaks alike at 32 and 512 devices (before: 1.44 and 4.16 GB).
  void gspmdTable6PeakDoesNotGrowWithTheExperts() {
    auto spec = pipeline::FindReproduceCase("gspmd-table6");
    QVERIFY(spec.ok());
    int64_t peak[2] = {0, 0}, mask_bytes[2] = {0, 0};
    const int64_t devices[2] = {32, 512};
    for (int k = 0; k < 2; ++k) {
      const std::string n = std::to_string(devices[k]);
      const pipeline::ReproduceColumn* column = nullptr;
      for (const pipeline::ReproduceColumn& c : spec.value()->columns)
        if (c.label == n + " experts/devices") column = &c;
      QVERIFY2(column, n.c_str());
      auto module = ZooBuild(column->model, With(column->settings, {{"layers", "2"}}));
      QVERIFY2(module.ok(), module.ok() ? "" : module.error().message.c_str());
      const DeviceMesh mesh({{"X", devices[k]}});
      pipeline::SliceOptions so;
      so.cores_per_chip = 2;
      auto slice = pipeline::SliceForMesh("tpu-v3", mesh, so);
      QVERIFY2(slice.ok(), slice.ok() ? "" : slice.error().message.c_str());
      pipeline::PipelineOptions o;
      o.propagation = pipeline::StandardPropagationOptions(pipeline::EntryIo::kShard);
      o.partitioning = pipeline::Partitioning::kAlways;
      o.topology = slice.value();
      o.simulation = sim::SimulationOptions{};
      auto r = pipeline::RunPipeline(std::move(module).value(), o);
      QVERIFY2(r.ok(), r.FailureText().c_str());
      // The per-device dispatch mask: [1 group, S = 4096, E experts, C = 8192 / E] in bf16.
      const Instruction* mask = nullptr;
      for (const auto& i : r.partition->module->entry()->instructions())
        if (i->name() == "layer1_moe_gating_dispatch_mask") mask = i.get();
      QVERIFY(mask);
      QCOMPARE(mask->shape().dims, (std::vector<int64_t>{1, 4096, devices[k], 8192 / devices[k]}));
      mask_bytes[k] = sim::PaddedByteSize(mask->shape(), slice->chip());
      peak[k] = r.simulation->run.summary.peak_memory_bytes;
      qInfo("%s devices: dispatch mask %lld bytes per device, peak %.3f GB", n.c_str(),
            static_cast<long long>(mask_bytes[k]), static_cast<double>(peak[k]) / 1e9);
    }
    QCOMPARE(mask_bytes[0], int64_t{2} * 4096 * 4096 * 2);  // 2 S^2 bf16 elements, unpadded
    QCOMPARE(mask_bytes[1], mask_bytes[0]);
    // What still grows with E per device is small: the gating weights [M,E] and logits [G,S,E].
    const double growth = static_cast<double>(peak[1]) / static_cast<double>(peak[0]);
    QVERIFY2(growth > 0.97 && growth < 1.05, std::to_string(growth).c_str());
  }

  void buildErrors() {
    auto odd = ZooBuild("moe-layer", With(kSmall, {{"experts", "6"}}));
    QCOMPARE(odd.error().message, std::string("moe-layer: experts = 6 must be a multiple of mesh_x = 4 (the experts are split over X)"));
    auto two_d = ZooBuild("moe-layer", With(kSmall, {{"mesh_y", "2"}}));
    QVERIFY(two_d.error().message.find("set mesh_y=1") != std::string::npos);
    auto one = ZooBuild("moe-layer", With(kSmall, {{"experts", "1"}, {"annotations", "none"}}));
    QCOMPARE(one.error().message, std::string("moe-layer: top-2 gating needs experts >= 2"));
    auto groups = ZooBuild("moe-layer", With(kSmall, {{"groups", "3"}}));
    QCOMPARE(groups.error().message, std::string("moe-layer: batch = 8 must be a multiple of the groups G = 3"));
    auto mesh = ZooMesh("moe-layer", {{"mesh_x", "8"}});
    QVERIFY(mesh.ok());
    QCOMPARE(mesh->ToString(), std::string("X=8"));
    auto hybrid = ZooMesh("moe-transformer", {{"annotations", "hybrid"}, {"mesh_x", "4"}, {"mesh_y", "2"}});
    QVERIFY(hybrid.ok());
    QCOMPARE(hybrid->ToString(), std::string("X=4,Y=2"));
  }
};

QTEST_APPLESS_MAIN(MoePartitioningTest)
#include "test_moe_partitioning.moc"
