// Sharding propagation (GSPMD paper §3.5): the sharding algebra (merge of compatible shardings,
// reshape / transpose transforms), the paper's examples (§3.2 einsums, MoE, Fig. 3, Fig. 4,
// Table 1 on the model zoo's Transformer), options matching XLA's pass, partial annotations,
// manual shardings, while / conditional boundaries, provenance ("why"), and incremental
// re-propagation giving exactly the shardings of a full run.
#include <QtTest>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/ir/builder.h"
#include "core/ir/hlo_text.h"
#include "core/sharding/mesh.h"
#include "core/zoo/model_zoo.h"
#include "core/sharding/sharding.h"
#include "partitioner/propagation/sharding_propagation.h"
#include "partitioner/hlo_sharding_util.h"

using namespace shardscope;

namespace {

QString Q(const std::string& s) { return QString::fromStdString(s); }

HloSharding S(const std::string& text) {
  auto r = HloSharding::Parse(text);
  if (!r.ok()) qFatal("bad sharding in test: %s", text.c_str());
  return *r;
}

DeviceMesh Mesh(const std::string& text) {
  auto m = DeviceMesh::Parse(text);
  if (!m.ok()) qFatal("bad mesh in test: %s", text.c_str());
  return *m;
}

HloSharding Split(int64_t rank, const DeviceMesh& mesh, const std::vector<int64_t>& mapping) {
  auto s = MeshSplit(rank, mesh, mapping);
  if (!s.ok()) qFatal("MeshSplit failed: %s", s.error().message.c_str());
  return *s;
}

std::unique_ptr<Module> ParseOrDie(const std::string& text) {
  ParseOptions po;
  po.verify = false;
  auto m = ParseHloModule(text, "<test>", po);
  if (!m.ok()) qFatal("parse failed: %s", m.error().message.c_str());
  return std::move(*m);
}

std::string ShardingOf(const Module& m, const std::string& name) {
  const Instruction* i = m.FindInstruction(name);
  if (i == nullptr) return "(missing " + name + ")";
  return i->has_sharding() ? i->sharding()->ToString() : "none";
}

bool HasSharding(const Module& m, const std::string& name, const HloSharding& expected) {
  const Instruction* i = m.FindInstruction(name);
  return i != nullptr && i->has_sharding() && *i->sharding() == expected;
}

#define CHECK_SHARDING(module, name, expected)                                                             \
  QVERIFY2(HasSharding(module, name, expected),                                                            \
           qPrintable(Q(std::string(name) + ": got " + ShardingOf(module, name) + ", expected " +          \
                        (expected).ToString())))

std::map<std::string, std::string> AllShardings(const Module& m) {
  std::map<std::string, std::string> out;
  for (const auto& c : m.computations()) {
    for (const auto& i : c->instructions()) {
      out[c->name() + "/" + i->name()] = i->has_sharding() ? i->sharding()->ToString() : "none";
    }
  }
  return out;
}

// Runs `edit` (which changes annotations and returns the names it changed) after a full run and
// re-propagates incrementally; compares with a full run of a fresh module given the same edit.
struct IncrementalOutcome {
  int64_t region = 0, total = 0;
};
IncrementalOutcome CheckIncrementalMatchesFull(const std::function<std::unique_ptr<Module>()>& build,
                                               const std::function<std::vector<std::string>(Module&)>& edit,
                                               const PropagationOptions& options = {}) {
  IncrementalOutcome outcome;
  auto a = build();
  ShardingPropagation prop(options);
  auto first = prop.Run(*a);
  if (!first.ok()) {
    QTest::qFail(qPrintable(Q("run: " + first.error().message)), __FILE__, __LINE__);
    return outcome;
  }
  outcome.total = first->instructions;
  std::vector<Instruction*> changed;
  for (const auto& n : edit(*a)) changed.push_back(a->FindInstruction(n));
  auto update = prop.Update(*a, changed);
  if (!update.ok()) {
    QTest::qFail(qPrintable(Q("update: " + update.error().message)), __FILE__, __LINE__);
    return outcome;
  }
  outcome.region = update->instructions;

  auto b = build();
  edit(*b);
  ShardingPropagation fresh(options);
  auto full = fresh.Run(*b);
  if (!full.ok()) {
    QTest::qFail(qPrintable(Q("fresh run: " + full.error().message)), __FILE__, __LINE__);
    return outcome;
  }
  const auto sa = AllShardings(*a);
  const auto sb = AllShardings(*b);
  if (sa != sb) {
    for (const auto& [name, s] : sb) {
      auto it = sa.find(name);
      if (it == sa.end() || it->second != s) {
        QTest::qFail(qPrintable(Q("incremental differs at " + name + ": " + (it == sa.end() ? "?" : it->second) +
                                  " vs full " + s)),
                     __FILE__, __LINE__);
        return outcome;
      }
    }
  }
  return outcome;
}

std::unique_ptr<Module> SmallTransformer(int64_t layers, bool backward, AnnotationSet set = AnnotationSet::kFinalized) {
  TransformerConfig c;
  // Distinct sizes so every logical shape (BSM, BSND, BSH) is recognisable by its dims.
  c.batch = 2;
  c.seq = 6;
  c.model = 8;
  c.heads = 4;
  c.head_dim = 10;
  c.hidden = 12;
  c.layers = layers;
  c.backward = backward;
  c.optimizer = backward ? Optimizer::kSgd : Optimizer::kNone;
  c.annotations = set;
  c.mesh_x = 2;
  c.mesh_y = 2;
  auto m = BuildTransformer(c);
  if (!m.ok()) qFatal("BuildTransformer: %s", m.error().message.c_str());
  return std::move(*m);
}

}  // namespace

class TestPropagation : public QObject {
  Q_OBJECT

 private slots:
  // ---- sharding algebra ----------------------------------------------------------------------

  // GSPMD Fig. 3 / §3.5: two orthogonal partial shardings (mesh_split on different dims along
  // different mesh axes) merge into the sharding that agrees with both on every sharded dim.
  void mergeOrthogonalPartialShardings() {
    const DeviceMesh mesh = Mesh("X=2,Y=4");
    const HloSharding on_x = Split(2, mesh, {0, -1});  // [B_X, F]
    const HloSharding on_y = Split(2, mesh, {-1, 1});  // [B, F_Y]
    HloSharding merged = on_y;
    QVERIFY(hlo_sharding_util::MergeShardingIfCompatible(on_x, &merged));
    QVERIFY2(merged == Split(2, mesh, {0, 1}), qPrintable(Q(merged.ToString())));
    // The same mesh axis on two dims is not compatible.
    HloSharding other = Split(2, mesh, {-1, 0});
    QVERIFY(!hlo_sharding_util::MergeShardingIfCompatible(on_x, &other));
    QCOMPARE(Q(other.ToString()), Q(Split(2, mesh, {-1, 0}).ToString()));  // unchanged on failure
  }

  void moreSpecific() {
    QVERIFY(hlo_sharding_util::IsShardingMoreSpecific(S("{devices=[2,2]0,1,2,3}"), S("{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}")));
    QVERIFY(!hlo_sharding_util::IsShardingMoreSpecific(S("{replicated}"), S("{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}")));
    QVERIFY(hlo_sharding_util::IsShardingMoreSpecific(S("{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}"), S("{replicated}")));
    QVERIFY(hlo_sharding_util::IsShardingMoreSpecific(S("{manual}"), S("{replicated}")));
    QVERIFY(!hlo_sharding_util::IsShardingMoreSpecific(S("{replicated}"), S("{manual}")));
  }

  // Reshape: splitting a sharded dim keeps the tiles on the major part; merging works when only
  // the major dim is sharded; a non-divisible split falls back to what can be kept.
  void reshapeTransforms() {
    const Shape s48(PrimitiveType::kF32, {4, 8});
    const Shape s32(PrimitiveType::kF32, {32});
    const Shape s2_2_8(PrimitiveType::kF32, {2, 2, 8});
    auto merge = hlo_sharding_util::ReshapeSharding(s48, s32, S("{devices=[4,1]0,1,2,3}"));
    QVERIFY(merge.has_value());
    QCOMPARE(Q(merge->ToString()), Q(S("{devices=[4]0,1,2,3}").ToString()));
    auto split = hlo_sharding_util::ReshapeSharding(s48, s2_2_8, S("{devices=[4,1]0,1,2,3}"));
    QVERIFY(split.has_value());
    QVERIFY(*split == S("{devices=[2,2,1]0,1,2,3}"));
    // A sharded minor dim merged into an unsharded major one: no exact reshape...
    QVERIFY(!hlo_sharding_util::ReshapeSharding(s48, s32, S("{devices=[1,4]0,1,2,3}")).has_value());
    // ...but propagation keeps what it can (here: nothing, replicated).
    QVERIFY(hlo_sharding_util::PropagateShardingThroughReshape(s48, s32, S("{devices=[1,4]0,1,2,3}")).IsReplicated());
  }

  void transposeAndPartialReplication() {
    QVERIFY(hlo_sharding_util::TransposeSharding(S("{devices=[2,4]<=[8]}"), {1, 0}) == S("{devices=[4,2]<=[2,4]T(1,0)}"));
    QVERIFY(hlo_sharding_util::PartiallyReplicateTiledShardingOnDims(S("{devices=[2,4]<=[8]}"), {1}) ==
            S("{devices=[2,1,4]<=[8] last_tile_dim_replicate}"));
    QVERIFY(hlo_sharding_util::PartiallyReplicateTiledShardingOnDims(S("{devices=[2,4]<=[8]}"), {0, 1}).IsReplicated());
    // Partial replication keeps a manual subgroup.
    QVERIFY(hlo_sharding_util::ReplicateAllDataDims(S("{devices=[2,2]0,1,2,3 last_tile_dims={manual}}"), 1) ==
            S("{devices=[1,2,2]0,2,1,3 last_tile_dims={manual, replicated}}"));
  }

  // ---- the paper's examples --------------------------------------------------------------------

  // GSPMD §3.2: BD,DF->BF with bd = mesh_split(bd, mesh, [0,-1]) and df = mesh_split(df, mesh,
  // [-1,1]) completes the output to mesh_split(bf, mesh, [0,1]); with df = [0,1] (weight-update
  // sharding) the output is the same.
  void einsumDataAndModelParallel() {
    for (bool wus : {false, true}) {
      const DeviceMesh mesh = Mesh("X=2,Y=4");
      Module m("einsum");
      Builder b(m.AddComputation("main", true));
      auto* bd = b.Parameter(0, Shape(PrimitiveType::kF32, {16, 32}), "bd");
      auto* df = b.Parameter(1, Shape(PrimitiveType::kF32, {32, 64}), "df");
      b.Annotate(bd, Split(2, mesh, {0, -1}));
      b.Annotate(df, Split(2, mesh, wus ? std::vector<int64_t>{0, 1} : std::vector<int64_t>{-1, 1}));
      auto* bf = b.Dot(bd, df, {.lhs_batch = {}, .rhs_batch = {}, .lhs_contracting = {1}, .rhs_contracting = {0}}, "bf");
      b.SetRoot(b.Copy(bf, "out"));
      QVERIFY2(b.ok(), qPrintable(Q(b.status().error().message)));
      ShardingPropagation prop;
      QVERIFY(prop.Run(m).ok());
      CHECK_SHARDING(m, "bf", Split(2, mesh, {0, 1}));
      // Printed the way XLA prints it: an iota tile assignment.
      QCOMPARE(Q(ShardingOf(m, "bf")), Q("{devices=[2,4]<=[8]}"));
      // Provenance: the dot merged what both operands imply (Fig. 3).
      const ShardingOrigin* o = prop.OriginOf(*m.FindInstruction("bf"));
      QVERIFY(o != nullptr);
      QCOMPARE(int(o->direction), int(prop::Direction::kForward));
      QVERIFY(o->source != nullptr && o->second_source != nullptr);
      QVERIFY(o->source != o->second_source);
    }
  }

  // GSPMD §3.2 MoE: EBD,EDF->EBF with only the expert dim E annotated (on the weight). The
  // activations' shardings are inferred: E sharded like the weight.
  void moeExpertParallel() {
    const DeviceMesh mesh = Mesh("X=4,Y=2");
    Module m("moe");
    Builder b(m.AddComputation("main", true));
    auto* x = b.Parameter(0, Shape(PrimitiveType::kF32, {8, 16, 32}), "x");
    auto* w = b.Parameter(1, Shape(PrimitiveType::kF32, {8, 32, 64}), "w");
    auto* ebd = b.Tanh(x, "ebd");
    b.Annotate(w, Split(3, mesh, {0, -1, 1}));
    auto* ebf = b.Dot(ebd, w,
                      {.lhs_batch = {0}, .rhs_batch = {0}, .lhs_contracting = {2}, .rhs_contracting = {1}}, "ebf");
    auto* y = b.Tanh(ebf, "y");
    b.SetRoot(b.Copy(y, "out"));
    QVERIFY2(b.ok(), qPrintable(Q(b.status().error().message)));
    QVERIFY(PropagateShardings(m).ok());
    CHECK_SHARDING(m, "ebf", Split(3, mesh, {0, -1, 1}));
    CHECK_SHARDING(m, "y", Split(3, mesh, {0, -1, 1}));
    CHECK_SHARDING(m, "ebd", Split(3, mesh, {0, -1, -1}));

    // "Annotated only on E": weights and the dispatched input split on E alone.
    Module m2("moe2");
    Builder b2(m2.AddComputation("main", true));
    auto* x2 = b2.Parameter(0, Shape(PrimitiveType::kF32, {8, 16, 32}), "x");
    auto* w2 = b2.Parameter(1, Shape(PrimitiveType::kF32, {8, 32, 64}), "w");
    b2.Annotate(x2, Split(3, mesh, {0, -1, -1}));
    b2.Annotate(w2, Split(3, mesh, {0, -1, -1}));
    auto* ebf2 = b2.Dot(x2, w2,
                        {.lhs_batch = {0}, .rhs_batch = {0}, .lhs_contracting = {2}, .rhs_contracting = {1}}, "ebf");
    b2.SetRoot(b2.Copy(b2.Tanh(ebf2, "y"), "out"));
    QVERIFY(b2.ok());
    QVERIFY(PropagateShardings(m2).ok());
    CHECK_SHARDING(m2, "ebf", Split(3, mesh, {0, -1, -1}));
    CHECK_SHARDING(m2, "y", Split(3, mesh, {0, -1, -1}));
  }

  // GSPMD Fig. 4: a linear layer followed by ReLU (and a residual add). The input x is split on
  // the batch along X; the weight's output dim also along X, so the dot could follow either. With
  // priorities (elementwise ops first) every BD-shaped tensor ends with x's sharding; propagating
  // everything at once (topological order) leaves a mismatch around the elementwise add.
  void figure4Priorities() {
    const DeviceMesh mesh = Mesh("X=4");
    auto build = [&](Module& m) {
      Builder b(m.AddComputation("main", true));
      auto* x = b.Parameter(0, Shape(PrimitiveType::kF32, {8, 32}), "x");
      auto* w = b.Parameter(1, Shape(PrimitiveType::kF32, {32, 32}), "w");
      b.Annotate(x, Split(2, mesh, {0, -1}));
      b.Annotate(w, Split(2, mesh, {-1, 0}));
      auto* y = b.Dot(x, w, {.lhs_batch = {}, .rhs_batch = {}, .lhs_contracting = {1}, .rhs_contracting = {0}}, "linear");
      auto* relu = b.Max(y, b.FullLike(y, 0.0, "zero"), "relu");
      auto* out = b.Add(relu, x, "residual");
      b.SetRoot(b.Tuple({out}, "out"));
      QVERIFY(b.ok());
    };
    const HloSharding batch = Split(2, mesh, {0, -1});
    {
      Module m("fig4");
      build(m);
      QVERIFY(PropagateShardings(m).ok());
      for (const char* name : {"linear", "relu", "residual", "zero"}) CHECK_SHARDING(m, name, batch);
    }
    {
      Module m("fig4_no_priorities");
      build(m);
      PropagationOptions o;
      o.use_priorities = false;
      QVERIFY(PropagateShardings(m, o).ok());
      const Instruction* linear = m.FindInstruction("linear");
      QVERIFY(linear->has_sharding());
      QVERIFY2(!(*linear->sharding() == batch), qPrintable(Q("without priorities the dot followed x: " +
                                                            linear->sharding()->ToString())));
      // The add now meets mismatched operands: x split on the batch, relu on the features.
      const Instruction* relu = m.FindInstruction("relu");
      QVERIFY(relu->has_sharding() && *relu->sharding() == *linear->sharding());
      QVERIFY(!(*relu->sharding() == batch));
    }
  }

  // GSPMD Table 1: the 7 annotations of a Transformer layer complete every other tensor of the
  // layer: BSM-, BSND- and BSH-shaped tensors take the table's sharding (2D Attempt 1, 2D Attempt
  // 2 and 2D finalized), on a 2-layer forward model and a training step (gradients included).
  void table1TransformerLayer_data() {
    QTest::addColumn<int>("set");
    QTest::addColumn<bool>("backward");
    QTest::newRow("attempt1") << int(AnnotationSet::kAttempt1) << false;
    QTest::newRow("attempt2") << int(AnnotationSet::kAttempt2) << false;
    QTest::newRow("finalized") << int(AnnotationSet::kFinalized) << false;
    QTest::newRow("finalized-training") << int(AnnotationSet::kFinalized) << true;
  }
  void table1TransformerLayer() {
    QFETCH(int, set);
    QFETCH(bool, backward);
    const auto aset = static_cast<AnnotationSet>(set);
    auto m = SmallTransformer(2, backward, aset);
    const DeviceMesh mesh = Mesh("X=2,Y=2");
    PropagationOptions o;
    o.propagate_to_output = {true};
    auto report = PropagateShardings(*m, o);
    QVERIFY(report.ok());
    const HloSharding bsm = Split(3, mesh, Table1DimsMapping(aset, Table1Tensor::kBSM));
    const HloSharding bsnd = Split(4, mesh, Table1DimsMapping(aset, Table1Tensor::kBSND));
    const HloSharding bsh = Split(3, mesh, Table1DimsMapping(aset, Table1Tensor::kBSH));
    int checked = 0;
    for (const auto& up : m->entry()->instructions()) {
      const Instruction& inst = *up;
      const auto& dims = inst.shape().dims;
      const HloSharding* want = nullptr;
      if (dims == std::vector<int64_t>{2, 6, 8}) want = &bsm;
      if (dims == std::vector<int64_t>{2, 6, 4, 10}) want = &bsnd;
      if (dims == std::vector<int64_t>{2, 6, 12}) want = &bsh;
      if (want == nullptr || inst.opcode() == Opcode::kParameter) continue;
      // Gradient accumulations into the layer input are activations too; the target's loss
      // arithmetic ("loss/...") follows the output.
      ++checked;
      QVERIFY2(inst.has_sharding() && *inst.sharding() == *want,
               qPrintable(Q(inst.name() + " " + inst.shape().ToString() + ": got " +
                            (inst.has_sharding() ? inst.sharding()->ToString() : "none") + ", Table 1 says " +
                            want->ToString())));
    }
    QVERIFY2(checked >= (backward ? 60 : 30), qPrintable(QString::number(checked)));
  }

  // hlo_sharding_util::DotShardingMemo: one memo kept across runs (as the strategy search keeps
  // one per mesh) gives every run exactly the shardings a run with its own memo gives, and its
  // later runs take the dot rules' answers from the earlier ones.
  void sharedDotMemoChangesNoSharding() {
    const std::vector<AnnotationSet> sets = {AnnotationSet::kAttempt1, AnnotationSet::kAttempt2,
                                             AnnotationSet::kFinalized, AnnotationSet::kFinalized};
    auto shared = std::make_shared<hlo_sharding_util::DotShardingMemo>();
    int64_t hits_before_last = 0;
    for (size_t k = 0; k < sets.size(); ++k) {
      PropagationOptions own;
      own.propagate_to_output = {true};
      PropagationOptions kept = own;
      kept.dot_memo = shared;
      auto a = SmallTransformer(2, true, sets[k]);
      auto b = SmallTransformer(2, true, sets[k]);
      QVERIFY(PropagateShardings(*a, own).ok());
      if (k + 1 == sets.size()) hits_before_last = shared->hits();
      QVERIFY(PropagateShardings(*b, kept).ok());
      QCOMPARE(AllShardings(*b), AllShardings(*a));
    }
    QVERIFY(shared->misses() > 0);
    // The last run repeats the third: every dot question it asks was answered before.
    QVERIFY(shared->hits() > hits_before_last);
    const int64_t misses = shared->misses();
    auto c = SmallTransformer(2, true, AnnotationSet::kFinalized);
    PropagationOptions again;
    again.propagate_to_output = {true};
    again.dot_memo = shared;
    QVERIFY(PropagateShardings(*c, again).ok());
    QCOMPARE(shared->misses(), misses);

    // By value, the same answer as the function; a sharding with metadata is answered, not kept.
    auto dot = ParseOrDie(R"(
HloModule m
ENTRY e {
  a = f32[8,16] parameter(0)
  b = f32[16,4] parameter(1)
  ROOT d = f32[8,4] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
})");
    const auto dims = hlo_sharding_util::ParseDotDims(*dot->FindInstruction("d"));
    const HloSharding out = S("{devices=[2,2]0,1,2,3}");
    const HloSharding rhs = S("{devices=[2,1,2]0,2,1,3 last_tile_dim_replicate}");
    hlo_sharding_util::DotShardingMemo memo;
    for (int i = 0; i < 2; ++i) {
      QCOMPARE(memo.InferOperand(&out, &rhs, 0, dims, true), hlo_sharding_util::InferDotOperandSharding(&out, &rhs, 0, dims, true));
      QCOMPARE(memo.FromOperand(rhs, dims, 1), hlo_sharding_util::DotShardingFromOperand(rhs, dims, 1));
    }
    QCOMPARE(memo.misses(), int64_t{2});
    QCOMPARE(memo.hits(), int64_t{2});
    HloSharding tagged = out;
    tagged.set_metadata({ShardingMetadata{"op_name=\"x\""}});
    QCOMPARE(memo.InferOperand(&tagged, &rhs, 0, dims, true), hlo_sharding_util::InferDotOperandSharding(&tagged, &rhs, 0, dims, true));
    QCOMPARE(memo.misses() + memo.hits(), int64_t{4});
  }

  // ---- options matching XLA's pass -------------------------------------------------------------

  void outputAndParameterOptions() {
    const std::string text = R"(
HloModule m
ENTRY e {
  p0 = f32[8,8] parameter(0), sharding={devices=[4,1]0,1,2,3}
  p1 = f32[8,8] parameter(1)
  a = f32[8,8] add(p0, p1)
  ROOT r = f32[8,8] copy(a)
})";
    {
      auto m = ParseOrDie(text);
      QVERIFY(PropagateShardings(*m).ok());
      QCOMPARE(Q(ShardingOf(*m, "r")), Q("none"));   // the output keeps what the host expects
      QCOMPARE(Q(ShardingOf(*m, "p1")), Q("none"));  // parameters too
      CHECK_SHARDING(*m, "a", S("{devices=[4,1]0,1,2,3}"));
    }
    {
      auto m = ParseOrDie(text);
      PropagationOptions o;
      o.propagate_to_output = {true};
      o.propagate_to_parameters = {false, true};
      QVERIFY(PropagateShardings(*m, o).ok());
      CHECK_SHARDING(*m, "r", S("{devices=[4,1]0,1,2,3}"));
      CHECK_SHARDING(*m, "p1", S("{devices=[4,1]0,1,2,3}"));
      CHECK_SHARDING(*m, "p0", S("{devices=[4,1]0,1,2,3}"));
    }
    {
      // Uneven splits are not pushed onto outputs: replicated instead.
      auto m = ParseOrDie(R"(
HloModule m
ENTRY e {
  p0 = f32[6] parameter(0), sharding={devices=[4]0,1,2,3}
  ROOT r = f32[6] negate(p0)
})");
      PropagationOptions o;
      o.propagate_to_output = {true};
      QVERIFY(PropagateShardings(*m, o).ok());
      CHECK_SHARDING(*m, "r", HloSharding::Replicate());
    }
  }

  void csePreventionOnly() {
    const std::string text = R"(
HloModule m
ENTRY e {
  p = f32[] parameter(0), sharding={replicated}
  br = f32[4] broadcast(p), dimensions={}
  add = f32[4] add(br, br)
  ROOT c = f32[4] copy(add), sharding={devices=[4]0,1,2,3}
})";
    auto m = ParseOrDie(text);
    PropagationOptions o;
    o.cse_prevention_only = true;
    QVERIFY(PropagateShardings(*m, o).ok());
    CHECK_SHARDING(*m, "br", S("{devices=[4]0,1,2,3}"));  // scalar broadcasts keep theirs
    QCOMPARE(Q(ShardingOf(*m, "add")), Q("none"));         // everything else is reverted
    // A later normal run drops the CSE-prevention marks and propagates everything.
    QVERIFY(PropagateShardings(*m).ok());
    CHECK_SHARDING(*m, "add", S("{devices=[4]0,1,2,3}"));
  }

  void nonSpmdDoesNotSplitReducedDims() {
    const std::string text = R"(
HloModule m
add { a = f32[] parameter(0)  b = f32[] parameter(1)  ROOT s = f32[] add(a, b) }
ENTRY e {
  p = f32[8,8] parameter(0)
  c = f32[8,8] copy(p), sharding={devices=[2,2]0,1,2,3}
  z = f32[] constant(0)
  r = f32[8] reduce(c, z), dimensions={1}, to_apply=add
  ROOT o = f32[8] copy(r)
})";
    auto spmd = ParseOrDie(text);
    QVERIFY(PropagateShardings(*spmd).ok());
    CHECK_SHARDING(*spmd, "r", S("{devices=[2,2]0,1,2,3 last_tile_dim_replicate}"));
    auto mpmd = ParseOrDie(text);
    PropagationOptions o;
    o.is_spmd = false;
    QVERIFY(PropagateShardings(*mpmd, o).ok());
    CHECK_SHARDING(*mpmd, "r", HloSharding::Replicate());
  }

  // ---- partial specification, manual shardings, groups -------------------------------------------

  void unspecifiedDimsAreRefined() {
    auto m = ParseOrDie(R"(
HloModule m
ENTRY e {
  p = f32[8,8] parameter(0)
  c = f32[8,8] copy(p), sharding={devices=[1,2,2]0,1,2,3 last_tile_dim_replicate}
  ann = f32[8,8] custom-call(c), custom_call_target="Sharding", backend_config="unspecified_dims=[1]", sharding={devices=[2,1,2]0,2,1,3 last_tile_dim_replicate}
  ROOT o = f32[8,8] copy(ann)
})");
    QVERIFY(PropagateShardings(*m).ok());
    // Dim 0 is given (split 2 ways over {0,2} / {1,3}), dim 1 was left open and takes the
    // operand's split ({0,1} / {2,3}): each device holds the intersection of its two tiles.
    CHECK_SHARDING(*m, "ann", S("{devices=[2,2]0,2,1,3}"));
    CHECK_SHARDING(*m, "c", S("{devices=[1,2,2]0,1,2,3 last_tile_dim_replicate}"));  // annotation kept
  }

  void manualShardingsPassThrough() {
    auto m = ParseOrDie(R"(
HloModule m
ENTRY e {
  p = f32[8,8] parameter(0), sharding={manual}
  a = f32[8,8] negate(p)
  b = f32[8,8] add(a, a)
  ROOT t = (f32[8,8]) tuple(b)
})");
    QVERIFY(PropagateShardings(*m).ok());
    CHECK_SHARDING(*m, "a", HloSharding::Manual());
    CHECK_SHARDING(*m, "b", HloSharding::Manual());
    CHECK_SHARDING(*m, "p", HloSharding::Manual());
  }

  void shardAsGroupsAgree() {
    auto m = ParseOrDie(R"(
HloModule m
ENTRY e {
  p0 = s32[16,16] parameter(0), sharding={devices=[4,2]0,1,2,3,4,5,6,7}
  p1 = s32[16,16] parameter(1), sharding={devices=[2,4]0,1,2,3,4,5,6,7}
  a1 = s32[16,16] add(p0, p0)
  s1 = s32[16,16] custom-call(a1), custom_call_target="Sharding", sharding={unknown shard_as 0}
  a2 = s32[16,16] add(p1, p1)
  s2 = s32[16,16] custom-call(a2), custom_call_target="Sharding", sharding={unknown shard_as 0}
  ROOT mul = s32[16,16] multiply(a1, a2)
})");
    PropagationOptions o;
    o.propagate_to_output = {true};
    QVERIFY(PropagateShardings(*m, o).ok());
    const Instruction* a1 = m->FindInstruction("a1");
    const Instruction* a2 = m->FindInstruction("a2");
    QVERIFY(a1->has_sharding() && a2->has_sharding());
    QCOMPARE(Q(a1->sharding()->ToString()), Q(a2->sharding()->ToString()));
  }

  // ---- control flow --------------------------------------------------------------------------------

  void whileLoopCarriedValuesAgree() {
    auto m = ParseOrDie(R"(
HloModule m
cond {
  pc = (s32[], f32[8,16]) parameter(0)
  i = s32[] get-tuple-element(pc), index=0
  n = s32[] constant(4)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  pb = (s32[], f32[8,16]) parameter(0)
  i = s32[] get-tuple-element(pb), index=0
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  x = f32[8,16] get-tuple-element(pb), index=1
  y = f32[8,16] tanh(x)
  ROOT t = (s32[], f32[8,16]) tuple(i1, y)
}
ENTRY e {
  p = f32[8,16] parameter(0), sharding={devices=[4,1]0,1,2,3}
  z = s32[] constant(0)
  init = (s32[], f32[8,16]) tuple(z, p)
  w = (s32[], f32[8,16]) while(init), condition=cond, body=body
  ROOT r = f32[8,16] get-tuple-element(w), index=1
})");
    QVERIFY(PropagateShardings(*m).ok());
    const HloSharding rows = S("{devices=[4,1]0,1,2,3}");
    CHECK_SHARDING(*m, "body/y", rows);
    CHECK_SHARDING(*m, "body/x", rows);
    const std::string w = ShardingOf(*m, "w");
    QCOMPARE(Q(ShardingOf(*m, "body/pb")), Q(w));
    QCOMPARE(Q(ShardingOf(*m, "cond/pc")), Q(w));
    QCOMPARE(Q(ShardingOf(*m, "body/t")), Q(w));
    QVERIFY(HasSharding(*m, "w", S("{{replicated}, {devices=[4,1]0,1,2,3}}")));
  }

  void conditionalBranchesAgree() {
    auto m = ParseOrDie(R"(
HloModule m
t_branch {
  tp = f32[8,8] parameter(0)
  ROOT tr = f32[8,8] negate(tp)
}
f_branch {
  fp = f32[8,8] parameter(0)
  ROOT fr = f32[8,8] exponential(fp)
}
ENTRY e {
  c = pred[] parameter(0)
  x = f32[8,8] parameter(1)
  xc = f32[8,8] copy(x), sharding={devices=[1,4]0,1,2,3}
  cond = f32[8,8] conditional(c, xc, xc), true_computation=t_branch, false_computation=f_branch
  ROOT o = f32[8,8] copy(cond)
})");
    QVERIFY(PropagateShardings(*m).ok());
    const HloSharding cols = S("{devices=[1,4]0,1,2,3}");
    for (const char* n : {"t_branch/tp", "t_branch/tr", "f_branch/fp", "f_branch/fr", "cond"}) CHECK_SHARDING(*m, n, cols);
  }

  // ---- provenance ----------------------------------------------------------------------------------

  void explainChainEndsAtAnnotation() {
    auto m = ParseOrDie(R"(
HloModule m
ENTRY e {
  p = f32[8,16] parameter(0), sharding={devices=[2,1]0,1}
  a = f32[8,16] negate(p)
  t = f32[16,8] transpose(a), dimensions={1,0}
  r = f32[4,4,8] reshape(t)
  ROOT o = (f32[4,4,8]) tuple(r)
})");
    ShardingPropagation prop;
    QVERIFY(prop.Run(*m).ok());
    const auto steps = prop.Explain(*m->FindInstruction("r"));
    QCOMPARE(int(steps.size()), 4);  // r <- t <- a <- p
    QCOMPARE(Q(steps[0].instruction->name()), Q("r"));
    QCOMPARE(Q(std::string(steps[0].origin.rule)), Q("reshape"));
    QCOMPARE(Q(steps[1].instruction->name()), Q("t"));
    QCOMPARE(Q(std::string(steps[1].origin.rule)), Q("transpose"));
    QCOMPARE(Q(steps[2].instruction->name()), Q("a"));
    QCOMPARE(Q(steps[3].instruction->name()), Q("p"));
    QCOMPARE(int(steps[3].origin.direction), int(prop::Direction::kAnnotation));
    QVERIFY(prop.IsUserAnnotation(*m->FindInstruction("p")));
    QVERIFY(!prop.IsUserAnnotation(*m->FindInstruction("r")));
    CHECK_SHARDING(*m, "r", S("{devices=[1,1,2]0,1}"));
    QVERIFY(prop.ExplainText(*m->FindInstruction("r")).find("user annotation") != std::string::npos);
    // Elementwise ops propagate at the first priority level; the transpose too (a pass-through).
    QCOMPARE(steps[2].origin.aggressiveness, 0);
  }

  void unsupportedOpsAreReported() {
    auto m = ParseOrDie(R"(
HloModule m
ENTRY e {
  p = f32[8] parameter(0), sharding={devices=[2]0,1}
  q = f32[8] mystery-op(p)
  ROOT o = f32[8] copy(q)
})");
    auto r = PropagateShardings(*m);
    QVERIFY(r.ok());
    QCOMPARE(int(r->unsupported_ops.size()), 1);
    QCOMPARE(Q(r->unsupported_ops[0]), Q("mystery-op"));
  }

  void badInputIsAnErrorNotACrash() {
    Module m("empty");
    auto r = PropagateShardings(m);
    QVERIFY(!r.ok());
    QVERIFY(!r.error().message.empty());
    // A sharding that does not fit its shape is reported, by Run and by Update.
    auto bad = ParseOrDie(R"(
HloModule m
ENTRY e {
  p = f32[8] parameter(0)
  n = f32[8] negate(p)
  ROOT o = f32[8] copy(n)
})");
    bad->FindInstruction("p")->set_sharding(S("{devices=[2,2]0,1,2,3}"));
    auto r2 = PropagateShardings(*bad);
    QVERIFY(!r2.ok());
    QVERIFY2(r2.error().message.find("p") != std::string::npos, r2.error().message.c_str());
    bad->FindInstruction("p")->set_sharding(S("{devices=[2]0,1}"));
    ShardingPropagation prop;
    QVERIFY(prop.Run(*bad).ok());
    bad->FindInstruction("p")->set_sharding(S("{devices=[2,2]0,1,2,3}"));
    QVERIFY(!prop.Update(*bad, {bad->FindInstruction("p")}).ok());
    // A good update reports what changed (for repainting).
    bad->FindInstruction("p")->set_sharding(S("{devices=[2]1,0}"));
    auto u = prop.Update(*bad, {bad->FindInstruction("p")});
    QVERIFY(u.ok());
    QCOMPARE(int(u->changed_instructions.size()), 2);  // p and n (the output is kept)
    CHECK_SHARDING(*bad, "n", S("{devices=[2]1,0}"));
  }

  // ---- incremental re-propagation ------------------------------------------------------------------

  void incrementalMatchesFullRun_transformerTraining() {
    const DeviceMesh mesh = Mesh("X=2,Y=2");
    // Forward only: the per-layer activation annotations bound the region of one weight change.
    auto o0 = CheckIncrementalMatchesFull([] { return SmallTransformer(3, false); }, [&](Module& m) {
      m.FindInstruction("layer1_wi")->set_sharding(Split(2, mesh, {1, 0}));
      return std::vector<std::string>{"layer1_wi"};
    });
    QVERIFY2(o0.region > 0 && 3 * o0.region < o0.total,
             qPrintable(QString("region %1 of %2").arg(o0.region).arg(o0.total)));
    // A training step: the backward pass links every layer, the answer must still match.
    auto build = [] { return SmallTransformer(3, true); };
    CheckIncrementalMatchesFull(build, [&](Module& m) {
      m.FindInstruction("layer1_wi")->set_sharding(Split(2, mesh, {1, 0}));
      return std::vector<std::string>{"layer1_wi"};
    });
    // Remove one.
    CheckIncrementalMatchesFull(build, [&](Module& m) {
      m.FindInstruction("layer0_wo")->clear_sharding();
      return std::vector<std::string>{"layer0_wo"};
    });
    // Add one where there was none.
    CheckIncrementalMatchesFull(build, [&](Module& m) {
      m.FindInstruction("layer2_ffn_relu")->set_sharding(Split(3, mesh, {-1, -1, 1}));
      return std::vector<std::string>{"layer2_ffn_relu"};
    });
  }

  void incrementalMatchesFullRun_mlpAndOptions() {
    const DeviceMesh mesh = Mesh("X=4,Y=4");
    auto build = [] {
      MlpConfig c;
      c.layers = 3;
      auto m = BuildMlp(c);
      if (!m.ok()) qFatal("BuildMlp: %s", m.error().message.c_str());
      return std::move(*m);
    };
    PropagationOptions o;
    o.propagate_to_output = {true};
    o.propagate_to_parameters = {true};
    CheckIncrementalMatchesFull(build, [&](Module& m) {
      Instruction* x = m.entry()->parameter(0);
      x->set_sharding(Split(x->shape().rank(), mesh, {1, -1}));
      return std::vector<std::string>{x->name()};
    }, o);
  }

  void incrementalMatchesFullRun_controlFlow() {
    const std::string text = R"(
HloModule m
cond {
  pc = (s32[], f32[8,16]) parameter(0)
  i = s32[] get-tuple-element(pc), index=0
  n = s32[] constant(4)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  pb = (s32[], f32[8,16]) parameter(0)
  i = s32[] get-tuple-element(pb), index=0
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  x = f32[8,16] get-tuple-element(pb), index=1
  y = f32[8,16] tanh(x)
  ROOT t = (s32[], f32[8,16]) tuple(i1, y)
}
ENTRY e {
  p = f32[8,16] parameter(0), sharding={devices=[4,1]0,1,2,3}
  q = f32[8,16] parameter(1), sharding={devices=[1,4]0,1,2,3}
  z = s32[] constant(0)
  init = (s32[], f32[8,16]) tuple(z, p)
  w = (s32[], f32[8,16]) while(init), condition=cond, body=body
  r = f32[8,16] get-tuple-element(w), index=1
  qq = f32[8,16] negate(q)
  ROOT o = (f32[8,16], f32[8,16]) tuple(r, qq)
})";
    auto build = [&] { return ParseOrDie(text); };
    auto outcome = CheckIncrementalMatchesFull(build, [](Module& m) {
      m.FindInstruction("p")->set_sharding(S("{devices=[2,2]0,1,2,3}"));
      return std::vector<std::string>{"p"};
    });
    // The loop's region does not include the independent q -> qq chain.
    QVERIFY2(outcome.region < outcome.total, qPrintable(QString("%1 of %2").arg(outcome.region).arg(outcome.total)));
    CheckIncrementalMatchesFull(build, [](Module& m) {
      m.FindInstruction("body/y")->set_sharding(S("{devices=[1,4]0,1,2,3}"));
      return std::vector<std::string>{"body/y"};
    });
  }

  void updateWithoutRunFallsBackToFullRun() {
    auto m = ParseOrDie(R"(
HloModule m
ENTRY e {
  p = f32[8] parameter(0), sharding={devices=[2]0,1}
  ROOT o = f32[8] negate(p)
})");
    ShardingPropagation prop;
    auto r = prop.Update(*m, {m->FindInstruction("p")});
    QVERIFY(r.ok());
    QVERIFY(!r->incremental);
  }
};

QTEST_APPLESS_MAIN(TestPropagation)
#include "test_propagation.moc"
