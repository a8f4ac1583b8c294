// SPMD partitioner: the four matmul cases of "How To Scale Your Model" part 3 (§ "four cases"),
// each resharding strategy of GSPMD §4.5, uneven shards with masking (§4.1), and every program
// verified numerically against the unpartitioned module.
#include <QtTest>

#include <map>
#include <optional>

#include "core/ir/builder.h"
#include "core/ir/hlo_text.h"
#include "core/eval/numeric_verify.h"
#include "partitioner/spmd/partition_memo.h"
#include "partitioner/spmd/spmd_partitioner.h"
#include "partitioner/spmd/tile_map.h"
#include "spmd_test_support.h"

using namespace shardscope;

namespace {

HloSharding S(const char* text) {
  auto r = HloSharding::Parse(text);
  if (!r.ok()) qFatal("bad sharding %s: %s", text, r.error().message.c_str());
  return *r;
}

using testing::Find;

// A module that reshards one array `shape` ("f32[8,12]") from sharding `from` to `to` by a copy.
std::string CopyReshard(int devices, const std::string& shape, const std::string& from, const std::string& to) {
  return "HloModule m, num_partitions=" + std::to_string(devices) + "\n\nENTRY e {\n  p = " + shape +
         " parameter(0), sharding={" + from + "}\n  ROOT c = " + shape + " copy(p), sharding={" + to + "}\n}\n";
}

// The entry's collectives in program order: "kind shape", with " {src,dst ...}" when `pairs`.
QString CollectiveList(const Module& m, bool pairs) {
  QStringList got;
  for (const Instruction* i : m.entry()->MakePostOrder()) {
    if (!IsCollective(i->opcode())) continue;
    QString item = QString::fromStdString(std::string(OpcodeName(i->opcode())) + " " + i->shape().ToString(false));
    if (pairs) {
      QStringList p;
      for (const auto& [src, dst] : i->source_target_pairs) p << QString("%1,%2").arg(src).arg(dst);
      item += " {" + p.join(" ") + "}";
    }
    got << item;
  }
  return got.join(", ");
}

int CountCollectives(const Module& m) {
  int n = 0;
  for (const auto& c : m.computations())
    for (const auto& i : c->instructions())
      if (IsCollective(i->opcode()) || i->opcode() == Opcode::kReduceScatter) ++n;
  return n;
}

// Partitions and verifies numerically. On failure returns nullopt with the reason in *why.
std::optional<PartitionResult> TryPartitionAndVerify(const Module& m, int64_t devices, std::string* why) {
  SpmdOptions o;
  o.num_partitions = devices;
  auto r = PartitionModule(m, o);
  if (!r.ok()) {
    *why = "partition failed: " + r.error().message;
    return std::nullopt;
  }
  auto v = VerifyPartitioned(m, *r->module, devices, 42);
  if (!v.ok()) {
    *why = "verify failed to run: " + v.error().message + "\n" + PrintHloModule(*r->module);
    return std::nullopt;
  }
  if (!v->match) {
    *why = "numerical mismatch (max_abs_error " + std::to_string(v->max_abs_error) + "): " + v->detail + "\n" +
           PrintHloModule(*r->module);
    return std::nullopt;
  }
  return std::move(r).value();
}

// C = A . B with the given shardings, A f32[I,J], B f32[J,K].
std::unique_ptr<Module> Matmul(int64_t I, int64_t J, int64_t K, const char* a, const char* b, const char* c) {
  auto m = std::make_unique<Module>("matmul");
  Builder bld(m->AddComputation("main", true));
  auto* A = bld.Parameter(0, Shape(PrimitiveType::kF32, {I, J}), "A");
  auto* B = bld.Parameter(1, Shape(PrimitiveType::kF32, {J, K}), "B");
  DotDimensionNumbers dn;
  dn.lhs_contracting = {1};
  dn.rhs_contracting = {0};
  auto* C = bld.Dot(A, B, dn, "C");
  A->set_sharding(S(a));
  B->set_sharding(S(b));
  C->set_sharding(S(c));
  bld.SetRoot(C);
  if (!bld.ok()) return nullptr;
  return m;
}

}  // namespace

class SpmdPartitionerTest : public QObject {
  Q_OBJECT
 private slots:
  // A memo kept across runs (SpmdOptions::memo, what the strategy search shares between the depths
  // of a candidate) changes no program: the same modules partitioned with one memo, in turn and
  // again, print exactly as partitioned alone, and the memo's tables are kept per device count.
  // Tile indices are stored in place up to TileIndex::kInline dims and on the heap beyond: a
  // rank-8 map (two dims past the inline storage) keeps every device's index through copies,
  // moves, gathering, permuting and projecting, and projecting in one pass gives the map of
  // gathering the dropped labels first.
  void tileMapsBeyondTheInlineRank() {
    const HloSharding s = S("{devices=[2,1,2,1,1,2,1,2]0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15}");
    auto m = spmd::TileMap::FromSharding(s, 8, 16);
    QVERIFY2(m.ok(), m.ok() ? "" : m.error().message.c_str());
    QVERIFY(spmd::TileIndex::kInline < 8);
    for (int64_t dev = 0; dev < 16; ++dev) {
      const std::vector<int64_t> want = s.tile_assignment().IndexOfDevice(dev);
      QCOMPARE(m->device(dev).index.ToVector(), want);
      spmd::TileIndex copy = m->device(dev).index;
      spmd::TileIndex moved = std::move(copy);
      QCOMPARE(moved.ToVector(), want);
      spmd::TileIndex small = std::vector<int64_t>{1, 2};
      small = moved;  // an inline index takes a heap-sized one
      QVERIFY(small == m->device(dev).index);
      small.resize(3);
      QCOMPARE(small.ToVector(), std::vector<int64_t>(want.begin(), want.begin() + 3));
      spmd::TileIndex self = m->device(dev).index;  // assigned from its own storage, heap then inline
      self.assign(self.begin() + 1, self.end());
      QCOMPARE(self.ToVector(), std::vector<int64_t>(want.begin() + 1, want.end()));
      self.assign(self.begin() + 2, self.end());
      QCOMPARE(self.ToVector(), std::vector<int64_t>(want.begin() + 3, want.end()));
      self.assign(self.begin(), self.begin() + 2);
      QCOMPARE(self.ToVector(), std::vector<int64_t>(want.begin() + 3, want.begin() + 5));
    }
    auto back = m->ToSharding();
    QVERIFY(back.ok());
    // The same sharding, written in iota form (its devices are one: 0..15 in order).
    QVERIFY2(*back == s, back->ToString().c_str());
    QCOMPARE(back->ToString(), std::string("{devices=[2,1,2,1,1,2,1,2]<=[16]}"));
    // Gathering dims 0 and 7: device 15 (index 1,0,1,0,0,1,0,1) becomes replica 1 * 2 + 1 of tile 0,0,1,0,0,1,0,0.
    const spmd::TileMap g = m->Gathered({0, 7});
    QCOMPARE(g.device(15).index.ToVector(), (std::vector<int64_t>{0, 0, 1, 0, 0, 1, 0, 0}));
    QCOMPARE(g.device(15).replica, int64_t{3});
    const spmd::TileMap p = m->Permuted({7, 6, 5, 4, 3, 2, 1, 0});
    for (int64_t dev = 0; dev < 16; ++dev)
      for (int64_t d = 0; d < 8; ++d) QCOMPARE(p.device(dev).index[static_cast<size_t>(d)], m->device(dev).index[static_cast<size_t>(7 - d)]);
    // Projected on labels (5, -1, 2): the gathered map over the other labels (0, 1, 3, 4, 6, 7), read.
    const std::vector<int64_t> labels = {5, -1, 2};
    const spmd::TileMap proj = m->Projected(labels);
    const spmd::TileMap gathered = m->Gathered({0, 1, 3, 4, 6, 7});
    QCOMPARE(proj.tiles(), (std::vector<int64_t>{2, 1, 2}));
    for (int64_t dev = 0; dev < 16; ++dev) {
      QCOMPARE(proj.device(dev).index.ToVector(),
               (std::vector<int64_t>{gathered.device(dev).index[5], 0, gathered.device(dev).index[2]}));
      QCOMPARE(proj.device(dev).replica, gathered.device(dev).replica);
    }
    QCOMPARE(proj.replication(), int64_t{4});
  }

  void memoAcrossRunsChangesNothing() {
    std::vector<std::unique_ptr<Module>> modules;
    modules.push_back(Matmul(8, 6, 4, "{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}",
                             "{devices=[1,2,2]0,2,1,3 last_tile_dim_replicate}", "{devices=[2,2]0,1,2,3}"));
    modules.push_back(Matmul(8, 8, 8, "{devices=[1,4]0,1,2,3}", "{devices=[4,1]0,1,2,3}", "{devices=[4,1]0,1,2,3}"));
    modules.push_back(Matmul(16, 8, 8, "{devices=[1,4]0,1,2,3}", "{devices=[4,1]0,1,2,3}", "{devices=[4,1]0,1,2,3}"));
    modules.push_back(Matmul(8, 8, 8, "{devices=[2,1]0,1}", "{replicated}", "{devices=[1,2]0,1}"));
    const std::vector<int64_t> devices = {4, 4, 4, 2};
    std::vector<std::string> alone;
    for (size_t k = 0; k < modules.size(); ++k) {
      QVERIFY(modules[k]);
      SpmdOptions o;
      o.num_partitions = devices[k];
      auto r = PartitionModule(*modules[k], o);
      QVERIFY2(r.ok(), r.ok() ? "" : r.error().message.c_str());
      alone.push_back(PrintHloModule(*r->module));
    }
    SpmdOptions o;
    o.memo = std::make_shared<spmd::PartitionMemo>();
    for (int round = 0; round < 2; ++round) {
      for (size_t k = 0; k < modules.size(); ++k) {
        o.num_partitions = devices[k];
        auto r = PartitionModule(*modules[k], o);
        QVERIFY2(r.ok(), r.ok() ? "" : r.error().message.c_str());
        QCOMPARE(PrintHloModule(*r->module), alone[k]);
      }
    }
    QCOMPARE(o.memo->runs(), int64_t{8});
    // The numbers still hold with the memo's answers.
    std::string why;
    o.num_partitions = 4;
    auto r = PartitionModule(*modules[1], o);
    QVERIFY(r.ok());
    auto v = VerifyPartitioned(*modules[1], *r->module, 4, 42);
    QVERIFY(v.ok() && v->match);
  }

  // Case 1 (book): neither multiplicand has a sharded contracting dim: A[I_X, J] . B[J, K_Y] ->
  // C[I_X, K_Y] needs no communication.
  void case1NoCommunication() {
    auto m = Matmul(8, 6, 4, "{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}",
                    "{devices=[1,2,2]0,2,1,3 last_tile_dim_replicate}", "{devices=[2,2]0,1,2,3}");
    std::string why;
    auto r_opt = TryPartitionAndVerify(*m, 4, &why);
    QVERIFY2(r_opt.has_value(), why.c_str());
    auto& r = *r_opt;
    QCOMPARE(CountCollectives(*r.module), 0);
    QCOMPARE(r.module->entry()->root()->shape().ToString(false), std::string("f32[4,2]"));
  }

  // An optimization barrier keeps the shardings it carries (XLA partitions it as an elementwise op):
  // no collective, the barrier holds the shards. (It used to fall back to replication: a remat
  // barrier in the MoE Transformer all-gathered a layer's input.)
  void optimizationBarrierKeepsShards() {
    auto m = ParseHloModule(R"(HloModule barrier, num_partitions=4
ENTRY %main (p: f32[8,4], q: f32[8,4]) -> f32[8,4] {
  %p = f32[8,4] parameter(0), sharding={devices=[4,1]0,1,2,3}
  %q = f32[8,4] parameter(1), sharding={devices=[1,4]0,1,2,3}
  %t = (f32[8,4], f32[8,4]) tuple(%p, %q)
  %b = (f32[8,4], f32[8,4]) opt-barrier(%t)
  %x = f32[8,4] get-tuple-element(%b), index=0
  %y = f32[8,4] get-tuple-element(%b), index=1
  ROOT %s = f32[8,4] add(%x, %y), sharding={devices=[4,1]0,1,2,3}
}
)", "barrier.hlo");
    QVERIFY2(m.ok(), m.ok() ? "" : m.error().message.c_str());
    std::string why;
    auto r_opt = TryPartitionAndVerify(**m, 4, &why);
    QVERIFY2(r_opt.has_value(), why.c_str());
    auto barriers = Find(*r_opt->module, Opcode::kOptimizationBarrier);
    QCOMPARE(barriers.size(), size_t{1});
    QCOMPARE(barriers[0]->shape().ToString(false), std::string("(f32[2,4], f32[8,1])"));
    // Only the add's resharding of y (columns to rows) communicates; nothing is all-gathered.
    QCOMPARE(Find(*r_opt->module, Opcode::kAllGather).size(), size_t{0});
  }

  // Case 2: one multiplicand has a sharded contracting dim: A[I, J_X] . B[J, K] -> C[I, K]:
  // all-gather A along J, then a local matmul.
  void case2AllGatherContracting() {
    auto m = Matmul(8, 8, 8, "{devices=[1,2]0,1}", "{replicated}", "{replicated}");
    std::string why;
    auto r_opt = TryPartitionAndVerify(*m, 2, &why);
    QVERIFY2(r_opt.has_value(), why.c_str());
    auto& r = *r_opt;
    auto ags = Find(*r.module, Opcode::kAllGather);
    QCOMPARE(ags.size(), size_t{1});
    QCOMPARE(ags[0]->shape().ToString(false), std::string("f32[8,8]"));
    QCOMPARE(ags[0]->dimensions, std::vector<int64_t>{1});
    QCOMPARE(ags[0]->replica_groups.groups, (std::vector<std::vector<int64_t>>{{0, 1}}));
    QCOMPARE(CountCollectives(*r.module), 1);
  }

  // Case 3: both contracting dims sharded on the same axis: local matmul then all-reduce; with
  // the output wanted sharded, a reduce-scatter instead.
  void case3AllReduce() {
    auto m = Matmul(8, 8, 8, "{devices=[1,2]0,1}", "{devices=[2,1]0,1}", "{replicated}");
    std::string why;
    auto r_opt = TryPartitionAndVerify(*m, 2, &why);
    QVERIFY2(r_opt.has_value(), why.c_str());
    auto& r = *r_opt;
    auto ars = Find(*r.module, Opcode::kAllReduce);
    QCOMPARE(ars.size(), size_t{1});
    QCOMPARE(ars[0]->shape().ToString(false), std::string("f32[8,8]"));
    QCOMPARE(CountCollectives(*r.module), 1);
    QCOMPARE(r.collectives.at(0).origin, std::string("C"));
  }
  void case3ReduceScatter() {
    auto m = Matmul(8, 8, 8, "{devices=[1,2]0,1}", "{devices=[2,1]0,1}", "{devices=[2,1]0,1}");
    std::string why;
    auto r_opt = TryPartitionAndVerify(*m, 2, &why);
    QVERIFY2(r_opt.has_value(), why.c_str());
    auto& r = *r_opt;
    auto rss = Find(*r.module, Opcode::kReduceScatter);
    QCOMPARE(rss.size(), size_t{1});
    QCOMPARE(rss[0]->shape().ToString(false), std::string("f32[4,8]"));
    QCOMPARE(rss[0]->dimensions, std::vector<int64_t>{0});
    QCOMPARE(CountCollectives(*r.module), 1);
  }

  // A decision the dot handler cached in one partitioning run must not leak into the next: the
  // same dot partitioned again without reduce-scatter fusion gets an all-reduce + dynamic-slice,
  // and partitioned again with it, the reduce-scatter (the cache lives with its run's options).
  void dotDecisionsFollowTheRunsOptions() {
    auto m = Matmul(8, 8, 8, "{devices=[1,2]0,1}", "{devices=[2,1]0,1}", "{devices=[2,1]0,1}");
    for (bool fuse : {true, false, true}) {
      SpmdOptions o;
      o.num_partitions = 2;
      o.prefer_reduce_scatter = fuse;
      auto r = PartitionModule(*m, o);
      QVERIFY2(r.ok(), r.ok() ? "" : r.error().message.c_str());
      QCOMPARE(Find(*r->module, Opcode::kReduceScatter).size(), size_t{fuse ? 1u : 0u});
      QCOMPARE(Find(*r->module, Opcode::kAllReduce).size(), size_t{fuse ? 0u : 1u});
      auto v = VerifyPartitioned(*m, *r->module, 2, 7);
      QVERIFY(v.ok() && v->match);
    }
  }

  // Case 4: both non-contracting dims sharded on the same axis: all-gather one side.
  void case4AllGatherOneSide() {
    auto m = Matmul(8, 8, 8, "{devices=[2,1]0,1}", "{devices=[1,2]0,1}", "{devices=[2,1]0,1}");
    std::string why;
    auto r_opt = TryPartitionAndVerify(*m, 2, &why);
    QVERIFY2(r_opt.has_value(), why.c_str());
    auto& r = *r_opt;
    auto ags = Find(*r.module, Opcode::kAllGather);
    QCOMPARE(ags.size(), size_t{1});
    QCOMPARE(ags[0]->operand(0)->shape().ToString(false), std::string("f32[8,4]"));  // B's shard
    QCOMPARE(ags[0]->shape().ToString(false), std::string("f32[8,8]"));
    QCOMPARE(CountCollectives(*r.module), 1);
  }

  // 2-D mesh, contracting dim on X and batch-like rows on Y: subgrouped all-reduce over X only.
  void subgroupedAllReduce2D() {
    // A[I_Y, J_X] . B[J_X, K] -> C[I_Y, K] on a 2x2 mesh (X major): devices (x,y) = 2x+y.
    auto m = Matmul(8, 8, 6, "{devices=[2,2]0,2,1,3}", "{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}",
                    "{devices=[2,1,2]0,2,1,3 last_tile_dim_replicate}");
    std::string why;
    auto r_opt = TryPartitionAndVerify(*m, 4, &why);
    QVERIFY2(r_opt.has_value(), why.c_str());
    auto& r = *r_opt;
    auto ars = Find(*r.module, Opcode::kAllReduce);
    QCOMPARE(ars.size(), size_t{1});
    QCOMPARE(ars[0]->replica_groups.groups, (std::vector<std::vector<int64_t>>{{0, 2}, {1, 3}}));
    QCOMPARE(ars[0]->shape().ToString(false), std::string("f32[4,6]"));
  }

  // Resharding strategies (GSPMD §4.5) through copy instructions.
  void reshardStrategies_data() {
    QTest::addColumn<QString>("from");
    QTest::addColumn<QString>("to");
    QTest::addColumn<QString>("expected");  // opcode of the single collective, or "none"
    QTest::newRow("replicated->tiled is a dynamic-slice") << "{replicated}" << "{devices=[2,2]0,1,2,3}" << "none";
    QTest::newRow("tiled->replicated is an all-gather") << "{devices=[4,1]0,1,2,3}" << "{replicated}" << "all-gather";
    QTest::newRow("dim 0 -> dim 1 is an all-to-all") << "{devices=[4,1]0,1,2,3}" << "{devices=[1,4]0,1,2,3}" << "all-to-all";
    QTest::newRow("device order change is a collective-permute") << "{devices=[4,1]0,1,2,3}" << "{devices=[4,1]1,0,3,2}"
                                                                  << "collective-permute";
    QTest::newRow("partial -> finer is a dynamic-slice") << "{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}"
                                                         << "{devices=[2,2]0,1,2,3}" << "none";
    // Part of a dim's split moving to another dim (plan 2b: an all-to-all within pairs), where an
    // all-gather and a slice would receive twice the bytes.
    QTest::newRow("half of dim 1's split to dim 0 is one all-to-all") << "{devices=[1,4]0,1,2,3}" << "{devices=[2,2]0,2,1,3}"
                                                                       << "all-to-all";
    QTest::newRow("dim 1 merged into split dim 0 is one all-to-all") << "{devices=[2,2]0,1,2,3}" << "{devices=[4,1]0,1,2,3}"
                                                                      << "all-to-all";
    // Plan 3b (XLA's PartialReplicateToPartialReplicateReshardCollectivePermute1): devices 1 and 2
    // want a tile the other holds; each slices the other's tile out of its half and they swap
    // one [4,6] shard (an all-to-all would move more).
    QTest::newRow("partial replication to another device order is a slice and a collective-permute")
        << "{devices=[1,2,2]0,1,2,3 last_tile_dim_replicate}" << "{devices=[2,2]0,1,2,3}" << "collective-permute";
    // Plan 2e (XLA's ComplexReshardFromPartialReplicate): the two copies of each dim-1 half first
    // take their half of dim 0 locally, then pairs swap dim 1's halves for dim 0's quarters (one
    // [4,6] shard's half each), where gathering dim 1 and slicing would receive a whole [8,6].
    QTest::newRow("from partial replication to a split of another dim is a slice and one exchange")
        << "{devices=[1,2,2]0,1,2,3 last_tile_dim_replicate}" << "{devices=[4,1]0,2,1,3}" << "all-to-all";
  }
  void reshardStrategies() {
    QFETCH(QString, from);
    QFETCH(QString, to);
    QFETCH(QString, expected);
    Module m("reshard");
    Builder b(m.AddComputation("main", true));
    auto* p = b.Parameter(0, Shape(PrimitiveType::kF32, {8, 12}), "p");
    auto* c = b.Copy(p, "c");
    b.SetRoot(c);
    p->set_sharding(S(from.toStdString().c_str()));
    c->set_sharding(S(to.toStdString().c_str()));
    std::string why;
    auto r_opt = TryPartitionAndVerify(m, 4, &why);
    QVERIFY2(r_opt.has_value(), why.c_str());
    auto& r = *r_opt;
    if (expected == "none") {
      QCOMPARE(CountCollectives(*r.module), 0);
      QVERIFY(!Find(*r.module, Opcode::kDynamicSlice).empty());
    } else {
      QCOMPARE(CountCollectives(*r.module), 1);
      QCOMPARE(QString::fromStdString(std::string(OpcodeName(r.collectives.at(0).kind))), expected);
    }
    if (QString(QTest::currentDataTag()).startsWith("partial replication")) {
      auto cp = Find(*r.module, Opcode::kCollectivePermute);
      QCOMPARE(cp.size(), size_t{1});
      QCOMPARE(cp[0]->shape().ToString(false), std::string("f32[4,6]"));
      QCOMPARE(cp[0]->source_target_pairs, (std::vector<std::pair<int64_t, int64_t>>{{0, 0}, {1, 2}, {2, 1}, {3, 3}}));
      QVERIFY(!Find(*r.module, Opcode::kDynamicSlice).empty());
    }
    if (QString(QTest::currentDataTag()).endsWith("one exchange")) {
      QVERIFY(Find(*r.module, Opcode::kAllGather).empty());
      auto a2a = Find(*r.module, Opcode::kAllToAll);
      QCOMPARE(a2a.size(), size_t{1});
      QCOMPARE(a2a[0]->replica_groups.groups, (std::vector<std::vector<int64_t>>{{0, 2}, {1, 3}}));
      QCOMPARE(r.module->entry()->root()->shape().ToString(false), std::string("f32[2,12]"));
    }
    if (QString(QTest::currentDataTag()).contains("all-to-all") && !QString(QTest::currentDataTag()).startsWith("dim 0")) {
      // The pairs that exchange: devices differing only in the part of the split that moves.
      auto a2a = Find(*r.module, Opcode::kAllToAll);
      QCOMPARE(a2a.size(), size_t{1});
      QCOMPARE(a2a[0]->replica_groups.groups, (std::vector<std::vector<int64_t>>{{0, 1}, {2, 3}}));
    }
  }

  // Plan 4c (XLA's TileToPartialReplicateReshardUnevenPartition): [2,3] -> [1,2] with 3 copies
  // over f32[8,8]. Dim 1's 3 tiles do not divide into 2, so it is gathered; dim 0's 2 tiles then
  // move onto it by one all-to-all (half a [4,8] shard), where gathering dim 0 too received a
  // whole [4,9] more.
  void gatherOneDimThenAllToAll() {
    std::string why;
    auto r = testing::PartitionAndVerify(
        "HloModule m, num_partitions=6\n\nENTRY e {\n  p = f32[8,8] parameter(0), sharding={devices=[2,3]<=[6]}\n"
        "  ROOT c = f32[8,8] copy(p), sharding={devices=[1,2,3]<=[6] last_tile_dim_replicate}\n}\n",
        6, &why);
    QVERIFY2(r, why.c_str());
    const auto ag = Find(*r->module, Opcode::kAllGather);
    QCOMPARE(ag.size(), size_t{1});
    QCOMPARE(ag[0]->shape().ToString(false), std::string("f32[4,9]"));
    QCOMPARE(ag[0]->dimensions, std::vector<int64_t>{1});
    const auto a2a = Find(*r->module, Opcode::kAllToAll);
    QCOMPARE(a2a.size(), size_t{1});
    QCOMPARE(a2a[0]->replica_groups.groups, (std::vector<std::vector<int64_t>>{{0, 3}, {1, 4}, {2, 5}}));
    QCOMPARE(r->module->entry()->root()->shape().ToString(false), std::string("f32[8,4]"));
  }

  // A reshape whose result is split on a minor dim of its group (12 -> 2 x 6, split on the 6): no
  // operand sharding gives that by a local reshape, so the partitioner reshapes in the operand's
  // own sharding (dim 0 split, a major dim of its group) and reshards the result: one all-to-all,
  // where it used to gather the whole operand.
  void reshapeToAMinorDimIsAnAllToAll() {
    Module m("reshape_minor");
    Builder b(m.AddComputation("main", true));
    auto* p = b.Parameter(0, Shape(PrimitiveType::kF32, {4, 6, 12}), "p");
    auto* e = b.Exp(p, "e");
    auto* r = b.Reshape(e, {4, 6, 2, 6}, "r");
    b.SetRoot(r);
    p->set_sharding(S("{devices=[2,1,1]0,1}"));
    e->set_sharding(S("{devices=[2,1,1]0,1}"));
    r->set_sharding(S("{devices=[1,1,1,2]0,1}"));
    std::string why;
    auto res = TryPartitionAndVerify(m, 2, &why);
    QVERIFY2(res.has_value(), why.c_str());
    QCOMPARE(CountCollectives(*res->module), 1);
    QCOMPARE(Find(*res->module, Opcode::kAllToAll).size(), size_t{1});
    QVERIFY(Find(*res->module, Opcode::kAllGather).empty());
  }

  // More tiles than elements (f32[1,3] over a 2x2 mesh: dim 0's second tile is all padding):
  // replicated by one masked all-reduce over the four tiles, as XLA does, not by two all-gathers
  // of mostly padding. An ordinary split (f32[8,12]) still gathers.
  void mostlyPaddingReplicatesByAllReduce() {
    for (const bool padded : {true, false}) {
      Module m("pad_rep");
      Builder b(m.AddComputation("main", true));
      auto* p = b.Parameter(0, Shape(PrimitiveType::kF32, padded ? std::vector<int64_t>{1, 3} : std::vector<int64_t>{8, 12}), "p");
      auto* e = b.Exp(p, "e");
      auto* c = b.Copy(e, "c");
      b.SetRoot(c);
      p->set_sharding(S("{devices=[2,2]0,1,2,3}"));
      e->set_sharding(S("{devices=[2,2]0,1,2,3}"));
      c->set_sharding(S("{replicated}"));
      std::string why;
      auto r = TryPartitionAndVerify(m, 4, &why);
      QVERIFY2(r.has_value(), why.c_str());
      if (padded) {
        QCOMPARE(CountCollectives(*r->module), 1);
        auto ar = Find(*r->module, Opcode::kAllReduce);
        QCOMPARE(ar.size(), size_t{1});
        QCOMPARE(ar[0]->replica_groups.groups, (std::vector<std::vector<int64_t>>{{0, 1, 2, 3}}));
      } else {
        QVERIFY(Find(*r->module, Opcode::kAllReduce).empty());
        QVERIFY(!Find(*r->module, Opcode::kAllGather).empty());
      }
    }
    // A tie in bytes with the all-gather goes to the masked all-reduce, as XLA picks it
    // (BroadcastAsReplicate3: f32[1,1] over 2 tiles, each on 2 devices, to replicated).
    const std::string tie = "HloModule t, num_partitions=4\n\nENTRY e {\n"
                            "  p = f32[1,1] parameter(0), sharding={devices=[2,1,2]<=[4] last_tile_dim_replicate}\n"
                            "  ROOT c = f32[1,1] copy(p), sharding={replicated}\n}\n";
    std::string why;
    auto r = testing::PartitionAndVerify(tie, 4, &why);
    QVERIFY2(r, why.c_str());
    QCOMPARE(CountCollectives(*r->module), 1);
    QCOMPARE(Find(*r->module, Opcode::kAllReduce).size(), size_t{1});
  }

  // A small window cut out of a sharded dim into a replicated result (the first token of a
  // sequence-sharded activation): each device's masked part placed into a zero buffer of the
  // window, one all-reduce over the devices of the dim (XLA's partitioning), no all-gather of the
  // whole sequence. Uneven (15 positions over 4) and a window crossing two shards; a window of
  // half the dim or more still gathers.
  void smallSliceIsAMaskedAllReduce_data() {
    QTest::addColumn<int>("start");
    QTest::addColumn<int>("limit");
    QTest::addColumn<QString>("collective");
    QTest::newRow("first position") << 0 << 1 << "all-reduce";
    QTest::newRow("across two shards") << 3 << 6 << "all-reduce";
    QTest::newRow("the last, in the padded shard") << 14 << 15 << "all-reduce";
    QTest::newRow("half of the dim gathers") << 2 << 10 << "all-gather";
  }
  void smallSliceIsAMaskedAllReduce() {
    QFETCH(int, start);
    QFETCH(int, limit);
    QFETCH(QString, collective);
    Module m("first_token");
    Builder b(m.AddComputation("main", true));
    auto* p = b.Parameter(0, Shape(PrimitiveType::kF32, {2, 15, 4}), "p");
    auto* e = b.Exp(p, "e");
    auto* sl = b.Slice(e, {0, start, 0}, {2, limit, 4}, {1, 1, 1}, "window");
    b.SetRoot(sl);
    p->set_sharding(S("{devices=[1,4,1,2]0,1,2,3,4,5,6,7 last_tile_dim_replicate}"));
    e->set_sharding(S("{devices=[1,4,1,2]0,1,2,3,4,5,6,7 last_tile_dim_replicate}"));
    sl->set_sharding(S("{replicated}"));
    std::string why;
    auto r_opt = TryPartitionAndVerify(m, 8, &why);
    QVERIFY2(r_opt.has_value(), why.c_str());
    QCOMPARE(CountCollectives(*r_opt->module), 1);
    QCOMPARE(QString::fromStdString(std::string(OpcodeName(r_opt->collectives.at(0).kind))), collective);
    if (collective == "all-reduce") {
      auto ar = Find(*r_opt->module, Opcode::kAllReduce);
      QCOMPARE(ar[0]->shape().ToString(false), QString("f32[2,%1,4]").arg(limit - start).toStdString());
      // The four shards of dim 1, once per replica: {0,2,4,6} and {1,3,5,7}.
      QCOMPARE(ar[0]->replica_groups.groups, (std::vector<std::vector<int64_t>>{{0, 2, 4, 6}, {1, 3, 5, 7}}));
    }
  }

  // Uneven shards (GSPMD §4.1): f32[10] over 4 devices pads to 3 per device; a reduce over the
  // sharded dim masks the padding with the reducer's identity before the all-reduce.
  void unevenReduceMasksPadding() {
    Module m("uneven");
    Builder b(m.AddComputation("main", true));
    auto* p = b.Parameter(0, Shape(PrimitiveType::kF32, {10, 3}), "p");
    auto* e = b.Exp(p, "e");  // exp(padding) != 0: masking is required for a correct sum
    auto* s = b.Reduce(e, b.ConstantScalar(PrimitiveType::kF32, 0), {0}, ScalarComputation(m, Opcode::kAdd, PrimitiveType::kF32));
    b.SetRoot(s);
    p->set_sharding(S("{devices=[4,1]0,1,2,3}"));
    e->set_sharding(S("{devices=[4,1]0,1,2,3}"));
    s->set_sharding(S("{replicated}"));
    std::string why;
    auto r_opt = TryPartitionAndVerify(m, 4, &why);
    QVERIFY2(r_opt.has_value(), why.c_str());
    auto& r = *r_opt;
    QCOMPARE(r.module->entry()->parameter(0)->shape().ToString(false), std::string("f32[3,3]"));
    QCOMPARE(Find(*r.module, Opcode::kAllReduce).size(), size_t{1});
    QVERIFY(!Find(*r.module, Opcode::kSelect).empty());
  }

  // A reduce's initial value enters once (XLA): the shards reduce from the identity and the
  // initial value is combined after the all-reduce, for a sum starting at 1.5 and a product at 2.
  void reduceInitialValueCountsOnce_data() {
    QTest::addColumn<int>("op");
    QTest::addColumn<double>("init");
    QTest::addColumn<bool>("combined");  // false: the initial value is the identity, nothing to add
    QTest::newRow("add from 1.5") << static_cast<int>(Opcode::kAdd) << 1.5 << true;
    QTest::newRow("multiply from 2") << static_cast<int>(Opcode::kMultiply) << 2.0 << true;
    QTest::newRow("max from 0.25") << static_cast<int>(Opcode::kMaximum) << 0.25 << true;
    QTest::newRow("add from 0") << static_cast<int>(Opcode::kAdd) << 0.0 << false;
  }
  void reduceInitialValueCountsOnce() {
    QFETCH(int, op);
    QFETCH(double, init);
    QFETCH(bool, combined);
    Module m("reduce_init");
    Builder b(m.AddComputation("main", true));
    auto* p = b.Parameter(0, Shape(PrimitiveType::kF32, {4, 6}), "p");
    auto* i = b.ConstantScalar(PrimitiveType::kF32, init);
    auto* s = b.Reduce(p, i, {1}, ScalarComputation(m, static_cast<Opcode>(op), PrimitiveType::kF32));
    b.SetRoot(s);
    p->set_sharding(S("{devices=[1,2]0,1}"));
    s->set_sharding(S("{replicated}"));
    std::string why;
    auto r_opt = TryPartitionAndVerify(m, 2, &why);
    QVERIFY2(r_opt.has_value(), why.c_str());
    auto& r = *r_opt;
    QCOMPARE(Find(*r.module, Opcode::kAllReduce).size(), size_t{1});
    // The local reduce starts from the reducer's identity, not from the user's value.
    auto reduces = Find(*r.module, Opcode::kReduce);
    QCOMPARE(reduces.size(), size_t{1});
    const Instruction* start = reduces[0]->operand(1);
    QCOMPARE(start->opcode(), Opcode::kConstant);
    const Instruction* root = r.module->entry()->root();
    if (!combined) {
      QCOMPARE(root->opcode(), Opcode::kAllReduce);
      return;
    }
    QVERIFY(!(start->literal == i->literal));
    // ... and the root combines the all-reduced value with the user's one.
    QCOMPARE(root->opcode(), static_cast<Opcode>(op));
    QCOMPARE(root->operand(0)->opcode(), Opcode::kAllReduce);
    QCOMPARE(root->operand(1)->opcode(), Opcode::kBroadcast);
  }

  // Uneven all-gather drops the padding; uneven dot contracting dim masks both operands.
  void unevenDotContracting() {
    auto m = Matmul(4, 10, 4, "{devices=[1,4]0,1,2,3}", "{devices=[4,1]0,1,2,3}", "{replicated}");
    std::string why;
    auto r_opt = TryPartitionAndVerify(*m, 4, &why);
    QVERIFY2(r_opt.has_value(), why.c_str());
    auto& r = *r_opt;
    QCOMPARE(Find(*r.module, Opcode::kAllReduce).size(), size_t{1});
  }

  // Elementwise chains, broadcast, transpose and reshape stay local when shardings line up.
  void localOpsNeedNoCommunication() {
    Module m("local");
    Builder b(m.AddComputation("main", true));
    auto* x = b.Parameter(0, Shape(PrimitiveType::kF32, {8, 6}), "x");
    auto* v = b.Parameter(1, Shape(PrimitiveType::kF32, {8}), "v");
    auto* bv = b.Broadcast(v, {8, 6}, {0}, "bv");
    auto* y = b.Add(x, bv, "y");
    auto* t = b.Transpose(y, {1, 0}, "t");
    auto* r = b.Reshape(t, {6, 2, 4}, "r");
    b.SetRoot(r);
    x->set_sharding(S("{devices=[2,1]0,1}"));
    v->set_sharding(S("{devices=[2]0,1}"));
    bv->set_sharding(S("{devices=[2,1]0,1}"));
    y->set_sharding(S("{devices=[2,1]0,1}"));
    t->set_sharding(S("{devices=[1,2]0,1}"));
    // [6,8] -> [6,2,4]: the sharded 8 splits into (2 major, 4): shard on the major 2.
    r->set_sharding(S("{devices=[1,2,1]0,1}"));
    std::string why;
    auto res_opt = TryPartitionAndVerify(m, 2, &why);
    QVERIFY2(res_opt.has_value(), why.c_str());
    auto& res = *res_opt;
    QCOMPARE(CountCollectives(*res.module), 0);
    QCOMPARE(res.module->entry()->root()->shape().ToString(false), std::string("f32[6,1,4]"));
    QVERIFY(res.origin_map.count("t"));
  }

  // Plan 2c: factors of several dims' tile counts change places in one all-to-all (XLA's
  // MultipleSourceTargetDimsInOneAllToAll), where gathering the source dims and slicing receives
  // several times the bytes. Even (the XLA cases' meshes in small), uneven, and partially
  // replicated (the two copies of each tile in different groups); each verified numerically.
  void severalDimsInOneAllToAll_data() {
    QTest::addColumn<int>("devices");
    QTest::addColumn<QString>("shape");
    QTest::addColumn<QString>("from");
    QTest::addColumn<QString>("to");
    QTest::addColumn<QString>("a2a");     // the all-to-all's per-device shape
    QTest::addColumn<int>("groups");
    QTest::newRow("dims 1,2 -> 0,3 over 8") << 8 << "4,8,4,8" << "devices=[1,4,2,1]<=[8]" << "devices=[2,1,1,4]<=[4,2]T(1,0)"
                                            << "f32[8,2,2,2,2]" << 1;
    QTest::newRow("four dims over 64 (XLA's ...AllToAll3)") << 64 << "8,8,16,16" << "devices=[2,4,8,1]<=[64]"
                                                            << "devices=[4,2,1,8]<=[2,2,2,8]T(0,2,1,3)" << "f32[16,2,2,2,2]" << 4;
    QTest::newRow("uneven over 8") << 8 << "5,7,6,3" << "devices=[1,4,2,1]<=[8]" << "devices=[2,1,1,4]<=[4,2]T(1,0)"
                                   << "f32[8,3,2,3,1]" << 1;
    QTest::newRow("partially replicated over 8") << 8 << "6,8,4,10" << "devices=[1,2,2,1,2]<=[8] last_tile_dim_replicate"
                                                 << "devices=[2,1,1,2,2]<=[8] last_tile_dim_replicate" << "f32[4,3,4,2,5]" << 2;
  }
  void severalDimsInOneAllToAll() {
    QFETCH(int, devices);
    QFETCH(QString, shape);
    QFETCH(QString, from);
    QFETCH(QString, to);
    QFETCH(QString, a2a);
    QFETCH(int, groups);
    std::string why;
    auto r = testing::PartitionAndVerify(CopyReshard(devices, "f32[" + shape.toStdString() + "]", from.toStdString(), to.toStdString()),
                                         devices, &why);
    QVERIFY2(r, why.c_str());
    QCOMPARE(CountCollectives(*r->module), 1);
    const auto all = Find(*r->module, Opcode::kAllToAll);
    QCOMPARE(all.size(), size_t{1});
    QCOMPARE(QString::fromStdString(all[0]->shape().ToString(false)), a2a);
    QCOMPARE(static_cast<int>(all[0]->replica_groups.groups.size()), groups);
  }

  // Resharding plans that move only what each device lacks, by collective-permutes (each verified
  // numerically; the collectives exact):
  // - reorder devices around a gather: a collective-permute puts each device on the tile whose
  //   gather group yields its target tile, then one all-gather (4b); or the changing dims are
  //   gathered, each device slices the target tile it can serve and a collective-permute delivers
  //   it (4 finished as 3b). Before, both gathered every dim whose device order differed, and sliced.
  // - plan 2d's halo exchange: the tile count of one dim changes and each device's target rows lie
  //   within its shard widened by a few rows of the neighbouring tiles; one collective-permute per
  //   side brings them (XLA's ...PartialReplicateToTiledHaloExchange), where an all-gather brought
  //   everything.
  void reshardByPermutes_data() {
    QTest::addColumn<int>("devices");
    QTest::addColumn<QString>("shape");
    QTest::addColumn<QString>("from");
    QTest::addColumn<QString>("to");
    QTest::addColumn<bool>("pairs");  // list the collective-permutes' source,target pairs
    QTest::addColumn<QString>("collectives");
    QTest::newRow("permute, then gather the replicated dim (XLA's ...PermutedMeshesWithReplicatedAxes)")
        << 4 << "s32[8,2]" << "devices=[2,2]<=[4]" << "devices=[2,1,2]3,2,1,0 last_tile_dim_replicate" << false
        << "collective-permute s32[4,1], all-gather s32[4,2]";
    QTest::newRow("permute, then gather by pairs (XLA's ...ReshardWithCollectivePermute)")
        << 8 << "f32[8,8]" << "devices=[2,2,2]<=[8] last_tile_dim_replicate" << "devices=[1,2,4]<=[8] last_tile_dim_replicate"
        << false << "collective-permute f32[4,4], all-gather f32[8,4]";
    QTest::newRow("gather the changing dim, slice, permute (XLA's ReshardNoFullRematIncompatible)")
        << 8 << "f32[6,32,4]" << "devices=[4,2,1]<=[2,2,2]T(0,2,1)" << "devices=[2,2,2]0,1,3,4,2,6,5,7" << false
        << "all-gather f32[8,16,4], collective-permute f32[3,16,2]";
    QTest::newRow("halo: 2 tiles of 3 rows -> 4 of 2, device 1 needs row 3")
        << 4 << "f32[6,3]" << "devices=[2,1,2]<=[4] last_tile_dim_replicate" << "devices=[4,1]<=[4]" << true
        << "collective-permute f32[1,3] {2,1}";
    // Rows of 16 kB, so that the bytes outweigh the second permute's overhead (an all-gather
    // receives 5 rows).
    QTest::newRow("halo: 2 tiles of 5 -> 3 of 4, one row from the left, three from the right")
        << 6 << "f32[10,4096]" << "devices=[2,1,3]<=[6] last_tile_dim_replicate" << "devices=[3,1,2]<=[6] last_tile_dim_replicate"
        << true << "collective-permute f32[1,4096] {0,3}, collective-permute f32[3,4096] {3,2}";
    // An all-gather is charged one latency per ring step (k - 1 over k devices): gathering within
    // pairs and permuting (two steps) beats a gather over 4 (three) on a small array.
    QTest::newRow("gather by pairs, then permute, rather than a ring of 4 (XLA's ...AlignWithLHSPartial)")
        << 8 << "f32[5,4,16]" << "devices=[1,1,4,2]<=[8] last_tile_dim_replicate"
        << "devices=[1,1,2,4]<=[2,4]T(1,0) last_tile_dim_replicate" << false
        << "all-gather f32[5,4,8], collective-permute f32[5,4,8]";
  }
  // Plan 2f: the tile count of a dim drops by k but k source shards are not one target shard
  // (uneven rows): each device fetches its piece of the target tile cut k ways by plan 2d's
  // exchange, and a partial all-gather within groups of k puts the pieces together (XLA's
  // PartialReplicateToPartialReplicateReshardHaloExchange). Before, the dim was gathered whole
  // over all its tiles and sliced.
  void reshardByHaloIntoPieces_data() {
    QTest::addColumn<int>("devices");
    QTest::addColumn<QString>("shape");
    QTest::addColumn<QString>("from");
    QTest::addColumn<QString>("to");
    QTest::addColumn<QString>("collectives");
    QTest::newRow("4 tiles of 2 rows -> 2 of 3, copies (XLA's case)")
        << 8 << "f32[6,3]" << "devices=[4,1,2]<=[8] last_tile_dim_replicate" << "devices=[2,1,4]<=[8] last_tile_dim_replicate"
        << "collective-permute f32[1,3] {2,4 3,5 4,6 5,7}, all-gather f32[4,3] {}";
    QTest::newRow("4 tiles of 3 rows -> 2 of 5, rows of 16 kB")
        << 4 << "f32[10,4096]" << "devices=[4,1]<=[4]" << "devices=[2,1,2]<=[4] last_tile_dim_replicate"
        << "collective-permute f32[1,4096] {1,2 2,3}, all-gather f32[6,4096] {}";
  }
  void reshardByHaloIntoPieces() {
    QFETCH(int, devices);
    QFETCH(QString, shape);
    QFETCH(QString, from);
    QFETCH(QString, to);
    QFETCH(QString, collectives);
    std::string why;
    auto r = testing::PartitionAndVerify(CopyReshard(devices, shape.toStdString(), from.toStdString(), to.toStdString()), devices, &why);
    QVERIFY2(r, why.c_str());
    QCOMPARE(CollectiveList(*r->module, true), collectives);
    const auto gathers = Find(*r->module, Opcode::kAllGather);
    QCOMPARE(gathers.size(), size_t{1});
    QCOMPARE(static_cast<int>(gathers[0]->replica_groups.groups[0].size()), 2);  // pairs, not every tile
  }

  void reshardByPermutes() {
    QFETCH(int, devices);
    QFETCH(QString, shape);
    QFETCH(QString, from);
    QFETCH(QString, to);
    QFETCH(bool, pairs);
    QFETCH(QString, collectives);
    std::string why;
    auto r = testing::PartitionAndVerify(CopyReshard(devices, shape.toStdString(), from.toStdString(), to.toStdString()), devices, &why);
    QVERIFY2(r, why.c_str());
    QCOMPARE(CollectiveList(*r->module, pairs), collectives);
  }

  // Concatenate and sort along a sharded dim: the dim's tiles move onto an untouched dim by an
  // all-to-all, the op runs locally with the dim whole, and an all-to-all moves them back (XLA's
  // ConcatenateAlongPartitionedDimension, SortShardedOnSortDim_OneFreeNondivisibleDim in small);
  // before, the dim was all-gathered and every device concatenated or sorted the whole of it.
  void concatAndSortMoveTheirDim() {
    const std::string concat =
        "HloModule c, num_partitions=2\n\nENTRY e {\n"
        "  a = f32[14,257] parameter(0), sharding={devices=[1,2]<=[2]}\n"
        "  b = f32[14,116] parameter(1), sharding={devices=[1,2]<=[2]}\n"
        "  ROOT c = f32[14,373] concatenate(a, b), dimensions={1}, sharding={devices=[1,2]<=[2]}\n}\n";
    std::string why;
    auto r = testing::PartitionAndVerify(concat, 2, &why);
    QVERIFY2(r, why.c_str());
    QCOMPARE(Find(*r->module, Opcode::kAllToAll).size(), size_t{3});
    QVERIFY(Find(*r->module, Opcode::kAllGather).empty());
    const auto cat = Find(*r->module, Opcode::kConcatenate);
    QCOMPARE(cat.size(), size_t{1});
    QCOMPARE(cat[0]->shape().ToString(false), std::string("f32[7,373]"));  // rows split, columns whole

    const std::string sort =
        "HloModule s, num_partitions=8\n\ncmp {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
        "  c = s32[] parameter(2)\n  d = s32[] parameter(3)\n  ROOT lt = pred[] compare(a, b), direction=LT\n}\n\n"
        "ENTRY e {\n  p = f32[7,16,16] parameter(0), sharding={devices=[1,2,4]<=[8]}\n"
        "  i = s32[7,16,16] iota(), iota_dimension=2, sharding={devices=[1,2,4]<=[8]}\n"
        "  ROOT s = (f32[7,16,16], s32[7,16,16]) sort(p, i), dimensions={2}, is_stable=true, to_apply=cmp, "
        "sharding={{devices=[1,2,4]<=[8]}, {devices=[1,2,4]<=[8]}}\n}\n";
    auto rs = testing::PartitionAndVerify(sort, 8, &why);
    QVERIFY2(rs, why.c_str());
    QCOMPARE(Find(*rs->module, Opcode::kAllToAll).size(), size_t{4});
    QVERIFY(Find(*rs->module, Opcode::kAllGather).empty());
    const auto sorted = Find(*rs->module, Opcode::kSort);
    QCOMPARE(sorted.size(), size_t{1});
    QCOMPARE(sorted[0]->shape().tuple.at(0).ToString(false), std::string("f32[7,2,16]"));  // 7 rows do not split 8 ways
  }

  // Top-k along a sharded dim (XLA's TopK handling of sort): a sort of (values, iota) read only
  // through slices of its first k runs on every shard, the k candidates of each shard are
  // all-gathered and sorted again; the values are never moved whole. Uneven shards are filled with
  // the lowest value (a descending comparator); rows stay split over the other mesh axis.
  void topKAlongAShardedDim() {
    struct Row {
      std::string shape, sharding;
      int64_t devices;
      std::string local_sort, candidates;
    };
    const std::vector<Row> rows = {
        {"f32[4,24]", "{devices=[1,4]<=[4]}", 4, "f32[4,6]", "f32[4,12]"},
        {"f32[4,22]", "{devices=[1,4]<=[4]}", 4, "f32[4,6]", "f32[4,12]"},  // shards of 6, the last 4 long
        {"f32[4,24]", "{devices=[2,4]<=[8]}", 8, "f32[2,6]", "f32[2,12]"},
    };
    for (const Row& row : rows) {
      const std::string text =
          "HloModule k, num_partitions=" + std::to_string(row.devices) +
          "\n\ngt {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  c = s32[] parameter(2)\n"
          "  d = s32[] parameter(3)\n  ROOT g = pred[] compare(a, b), direction=GT\n}\n\n"
          "ENTRY e {\n  p = " + row.shape + " parameter(0), sharding=" + row.sharding + "\n"
          "  i = s32" + row.shape.substr(3) + " iota(), iota_dimension=1, sharding=" + row.sharding + "\n"
          "  s = (" + row.shape + ", s32" + row.shape.substr(3) + ") sort(p, i), dimensions={1}, is_stable=true, to_apply=gt, "
          "sharding={" + row.sharding + ", " + row.sharding + "}\n"
          "  v = " + row.shape + " get-tuple-element(s), index=0, sharding=" + row.sharding + "\n"
          "  x = s32" + row.shape.substr(3) + " get-tuple-element(s), index=1, sharding=" + row.sharding + "\n"
          "  tv = f32[4,3] slice(v), slice={[0:4], [0:3]}, sharding={replicated}\n"
          "  tx = s32[4,3] slice(x), slice={[0:4], [0:3]}, sharding={replicated}\n"
          "  ROOT t = (f32[4,3], s32[4,3]) tuple(tv, tx), sharding={{replicated}, {replicated}}\n}\n";
      std::string why;
      auto r = testing::PartitionAndVerify(text, row.devices, &why);
      QVERIFY2(r, (row.shape + " " + row.sharding + ": " + why).c_str());
      const auto sorts = Find(*r->module, Opcode::kSort);
      QCOMPARE(sorts.size(), size_t{2});
      QCOMPARE(sorts[0]->shape().tuple.at(0).ToString(false), row.local_sort);
      QCOMPARE(sorts[1]->shape().tuple.at(0).ToString(false), row.candidates);
      const auto ags = Find(*r->module, Opcode::kAllGather);
      QVERIFY(ags.size() >= 2);
      QCOMPARE(ags[0]->shape().ToString(false), row.candidates);
      QVERIFY(Find(*r->module, Opcode::kAllToAll).empty());
    }
  }

  // An unreduced dot keeps its partial sums (no all-reduce); linear ops of unreduced values stay
  // unreduced; the one all-reduce is where a replicated value is read.
  void unreducedDotKeepsPartialSums() {
    const std::string text =
        "HloModule u, num_partitions=2\n\nENTRY e {\n"
        "  a = f32[8,64] parameter(0), sharding={devices=[1,2]<=[2]}\n"
        "  b = f32[64,16] parameter(1), sharding={devices=[2,1]<=[2]}\n"
        "  c = f32[64,16] parameter(2), sharding={devices=[2,1]<=[2]}\n"
        "  d = f32[8,16] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}, sharding={unreduced}\n"
        "  e = f32[8,16] dot(a, c), lhs_contracting_dims={1}, rhs_contracting_dims={0}, sharding={unreduced}\n"
        "  s = f32[8,16] subtract(d, e), sharding={unreduced}\n"
        "  n = f32[8,16] negate(s), sharding={unreduced}\n"
        "  ROOT r = f32[8,16] copy(n), sharding={replicated}\n}\n";
    std::string why;
    auto r = testing::PartitionAndVerify(text, 2, &why);
    QVERIFY2(r, why.c_str());
    const auto ars = Find(*r->module, Opcode::kAllReduce);
    QCOMPARE(ars.size(), size_t{1});
    QCOMPARE(ars[0]->operand(0)->opcode(), Opcode::kNegate);
    QCOMPARE(Find(*r->module, Opcode::kDot).size(), size_t{2});
  }

  // Batched linear algebra: each matrix (the two minor dims) is one problem. The batch stays split
  // and only the matrix dims are made whole — gathered, or their tiles moved onto the batch dim
  // when that moves fewer bytes, so every device solves its own matrices.
  void batchedLinearAlgebraKeepsTheBatchSplit() {
    auto partition = [](const std::string& text) {
      auto m = ParseHloModule(text);
      SpmdOptions o;
      o.num_partitions = 8;
      return PartitionModule(**m, o);
    };
    // Cholesky of [32,32,32] on (2,2,2): the matrix dims' tiles join the batch's, 4 matrices each.
    auto chol = partition(
        "HloModule c, num_partitions=8\n\nENTRY e {\n  p = f32[32,32,32] parameter(0), sharding={devices=[2,2,2]<=[8]}\n"
        "  ROOT c = f32[32,32,32] cholesky(p), lower=true, sharding={devices=[2,2,2]<=[8]}\n}\n");
    QVERIFY2(chol.ok(), chol.ok() ? "" : chol.error().message.c_str());
    QVERIFY(chol->replicated_fallbacks.empty());
    bool found = false;
    for (const auto& c : chol->module->computations())
      for (const auto& i : c->instructions())
        if (i->opcode_text() == "cholesky") {
          found = true;
          QCOMPARE(i->shape().ToString(false), std::string("f32[4,32,32]"));
        }
    QVERIFY(found);
    QVERIFY(Find(*chol->module, Opcode::kAllGather).empty());
    QCOMPARE(Find(*chol->module, Opcode::kAllToAll).size(), size_t{2});
    // Triangular solve of 5-row batches (do not split 8 ways): the batch keeps its 2 tiles, the
    // matrices are gathered along dims 1 and 2 only.
    auto tri = partition(
        "HloModule t, num_partitions=8\n\nENTRY e {\n  a = f32[10,32,32] parameter(0), sharding={devices=[2,2,2]<=[8]}\n"
        "  b = f32[10,32,48] parameter(1), sharding={devices=[2,2,2]<=[8]}\n"
        "  ROOT t = f32[10,32,48] triangular-solve(a, b), left_side=true, unit_diagonal=true, lower=true, "
        "transpose_a=NO_TRANSPOSE, sharding={devices=[2,2,2]<=[8]}\n}\n");
    QVERIFY2(tri.ok(), tri.ok() ? "" : tri.error().message.c_str());
    const auto ags = Find(*tri->module, Opcode::kAllGather);
    QCOMPARE(ags.size(), size_t{4});
    for (const Instruction* ag : ags) QVERIFY(ag->dimensions.at(0) != 0);
    found = false;
    for (const auto& c : tri->module->computations())
      for (const auto& i : c->instructions())
        if (i->opcode_text() == "triangular-solve") {
          found = true;
          QCOMPARE(i->shape().ToString(false), std::string("f32[5,32,48]"));
        }
    QVERIFY(found);
  }

  // XLA's base case for a convolution written as a dot (TiledDotOutputTiled): operands both split
  // over every device along the input features multiply their shards and reduce the partial sums
  // (a reduce-scatter into the result's split), though gathering the small lhs and moving the rhs
  // would move fewer bytes here.
  void contractingSplitConvolutionReducesItsProducts() {
    const std::string text = "HloModule c, num_partitions=2\n\nENTRY e {\n"
                             "  a = f32[128,64] parameter(0), sharding={devices=[1,2]<=[2]}\n"
                             "  b = f32[64,256] parameter(1), sharding={devices=[2,1]<=[2]}\n"
                             "  ROOT d = f32[128,256] convolution(a, b), dim_labels=bf_io->bf, sharding={devices=[1,2]<=[2]}\n}\n";
    std::string why;
    auto r = testing::PartitionAndVerify(text, 2, &why);
    QVERIFY2(r, why.c_str());
    QVERIFY(Find(*r->module, Opcode::kAllGather).empty());
    QVERIFY(Find(*r->module, Opcode::kAllToAll).empty());
    const size_t reductions = Find(*r->module, Opcode::kReduceScatter).size() + Find(*r->module, Opcode::kAllReduce).size();
    QCOMPARE(reductions, size_t{1});
  }

  // An uneven merge (XLA's ReshapeWithReshard4 in small): [4,8,4,2] split (2,1,4,1) to [32,8]
  // split 8 ways gives each device a range of the merged dim that no operand sharding holds as a
  // block. Reshaped in the operand's own sharding (4 rows of 8 x 2 on dim 0, the 4-way dim becoming
  // dim 1's), one all-to-all moves dim 1's tiles onto dim 0 — no gather, no halos.
  void unevenMergeReshapesInTheOperandSharding() {
    const std::string text = "HloModule r, num_partitions=8\n\nENTRY e {\n"
                             "  p = f32[4,8,4,2] parameter(0), sharding={devices=[2,1,4,1]<=[8]}\n"
                             "  ROOT r = f32[32,8] reshape(p), sharding={devices=[8,1]<=[8]}\n}\n";
    std::string why;
    auto r = testing::PartitionAndVerify(text, 8, &why);
    QVERIFY2(r, why.c_str());
    QCOMPARE(Find(*r->module, Opcode::kAllToAll).size(), size_t{1});
    QVERIFY(Find(*r->module, Opcode::kAllGather).empty());
    QVERIFY(Find(*r->module, Opcode::kCollectivePermute).empty());
  }

  // select-and-scatter (max-pool's backward) with non-overlapping windows that start at the shard
  // boundaries runs in each device's shard: the last shard's padding is never selected, and a
  // source window past the end (11 rows, windows of 3 with no padding: three windows on two
  // devices, the second device's second one is padding over rows 9-11) scatters zero. Overlapping
  // windows exchange halos.
  void selectAndScatterStaysSharded() {
    struct Row {
      int64_t rows, sources, devices;
      std::string window;
      bool sharded;
      std::string local;
    };
    const std::vector<Row> rows = {
        {11, 4, 4, "size=3x2 stride=3x2 pad=0_1x0_0", true, "f32[3,4]"},
        {11, 3, 2, "size=3x2 stride=3x2", true, "f32[6,4]"},  // rows 9, 10 in no window; source padded
        {12, 4, 2, "size=2x2 stride=3x2", true, "f32[6,4]"},
        // Overlapping windows (a 3x3 stride-2 max-pool's backward): halos of operand rows and source
        // windows, the local result cut to the shard.
        {16, 8, 4, "size=3x2 stride=2x2 pad=1_1x0_0", true, "f32[4,4]"},
        {15, 8, 4, "size=3x2 stride=2x2 pad=1_2x0_0", true, "f32[4,4]"},
        {12, 5, 2, "size=4x2 stride=2x2", true, "f32[6,4]"},
        {12, 5, 4, "size=3x2 stride=2x2", false, "f32[12,4]"},  // shards of 3 rows, stride 2: replicated
    };
    for (const Row& row : rows) {
      const std::string n = std::to_string(row.rows), m = std::to_string(row.sources);
      const std::string text =
          "HloModule s, num_partitions=" + std::to_string(row.devices) +
          "\n\nge {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT c = pred[] compare(a, b), direction=GE\n}\n\n"
          "sum {\n  c = f32[] parameter(0)\n  d = f32[] parameter(1)\n  ROOT e = f32[] add(c, d)\n}\n\n"
          "ENTRY e {\n  p = f32[" + n + ",4] parameter(0), sharding={devices=[" + std::to_string(row.devices) + ",1]<=[" +
          std::to_string(row.devices) + "]}\n"
          "  g = f32[" + m + ",2] parameter(1), sharding={devices=[" + std::to_string(row.devices) + ",1]<=[" +
          std::to_string(row.devices) + "]}\n"
          "  z = f32[] constant(0), sharding={replicated}\n"
          "  ROOT s = f32[" + n + ",4] select-and-scatter(p, g, z), window={" + row.window + "}, select=ge, scatter=sum, "
          "sharding={devices=[" + std::to_string(row.devices) + ",1]<=[" + std::to_string(row.devices) + "]}\n}\n";
      std::string why;
      auto r = testing::PartitionAndVerify(text, row.devices, &why);
      QVERIFY2(r, (row.window + ": " + why).c_str());
      const auto ss = Find(*r->module, Opcode::kSelectAndScatter);
      QCOMPARE(ss.size(), size_t{1});
      QVERIFY(Find(*r->module, Opcode::kAllGather).empty() == row.sharded);
      if (!row.sharded) continue;
      QCOMPARE(r->module->entry()->root()->shape().ToString(false), row.local);
      QVERIFY(r->replicated_fallbacks.empty());
    }
  }

  // A block-scaled dot (custom-call "__op$block_scaled_dot": lhs, rhs and their scales) partitions
  // as a dot, each scale split like its operand. Batch-split operands and result need no collective.
  void blockScaledDotSplitsItsScalesLikeItsOperands() {
    auto text = [](const std::string& lhs_sharding, int64_t blocks) {
      const std::string b = std::to_string(blocks);
      return "HloModule m, num_partitions=4\n\nENTRY e {\n"
             "  l = f8e4m3fn[4,128,64] parameter(0), sharding=" + lhs_sharding + "\n"
             "  ls = f8e8m0fnu[4,128," + b + "] parameter(1), sharding=" + lhs_sharding + "\n"
             "  r = f8e4m3fn[4,256,64] parameter(2), sharding=" + lhs_sharding + "\n"
             "  rs = f8e8m0fnu[4,256," + b + "] parameter(3), sharding=" + lhs_sharding + "\n"
             "  ROOT d = f32[4,128,256] custom-call(l, r, ls, rs), custom_call_target=\"__op$block_scaled_dot\", "
             "sharding={devices=[4,1,1]<=[4]}\n}\n";
    };
    auto partition = [](const std::string& t) {
      auto m = ParseHloModule(t);
      SpmdOptions o;
      o.num_partitions = 4;
      return PartitionModule(**m, o);
    };
    auto batch = partition(text("{devices=[4,1,1]<=[4]}", 2));
    QVERIFY2(batch.ok(), batch.ok() ? "" : batch.error().message.c_str());
    const auto cc = Find(*batch->module, Opcode::kCustomCall);
    QCOMPARE(cc.size(), size_t{1});
    QCOMPARE(cc[0]->shape().ToString(false), std::string("f32[1,128,256]"));
    QCOMPARE(cc[0]->operand(2)->shape().ToString(false), std::string("f8e8m0fnu[1,128,2]"));
    QCOMPARE(cc[0]->operand(3)->shape().ToString(false), std::string("f8e8m0fnu[1,256,2]"));
    QCOMPARE(batch->collectives.size(), size_t{0});
    // The contracting dim split over every device on both sides: XLA's base case multiplies the
    // shards and reduces the products (here a reduce-scatter onto the batch) — with 4 blocks the
    // scales follow the split; 2 blocks over 4 devices cannot, and the op runs replicated.
    auto two = partition(text("{devices=[1,1,4]<=[4]}", 2));
    QVERIFY2(two.ok(), two.ok() ? "" : two.error().message.c_str());
    const auto cc2 = Find(*two->module, Opcode::kCustomCall);
    QCOMPARE(cc2.size(), size_t{1});
    QCOMPARE(cc2[0]->operand(0)->shape().ToString(false), std::string("f8e4m3fn[4,128,64]"));
    auto four = partition(text("{devices=[1,1,4]<=[4]}", 4));
    QVERIFY2(four.ok(), four.ok() ? "" : four.error().message.c_str());
    const auto cc4 = Find(*four->module, Opcode::kCustomCall);
    QCOMPARE(cc4.size(), size_t{1});
    QCOMPARE(cc4[0]->operand(0)->shape().ToString(false), std::string("f8e4m3fn[4,128,16]"));
    QCOMPARE(cc4[0]->operand(2)->shape().ToString(false), std::string("f8e8m0fnu[4,128,1]"));
    QCOMPARE(Find(*four->module, Opcode::kReduceScatter).size() + Find(*four->module, Opcode::kAllReduce).size(), size_t{1});
    // A small replicated result: the products stay split along the contracting dim and are
    // all-reduced — when the scales can follow (4 blocks); 2 blocks over 4 devices cannot, and the
    // op runs replicated.
    for (const int64_t blocks : {int64_t{2}, int64_t{4}}) {
      const std::string b = std::to_string(blocks);
      auto small = partition("HloModule m, num_partitions=4\n\nENTRY e {\n"
                             "  l = f8e4m3fn[4,8,64] parameter(0), sharding={devices=[1,1,4]<=[4]}\n"
                             "  ls = f8e8m0fnu[4,8," + b + "] parameter(1), sharding={devices=[1,1,4]<=[4]}\n"
                             "  r = f8e4m3fn[4,8,64] parameter(2), sharding={devices=[1,1,4]<=[4]}\n"
                             "  rs = f8e8m0fnu[4,8," + b + "] parameter(3), sharding={devices=[1,1,4]<=[4]}\n"
                             "  ROOT d = f32[4,8,8] custom-call(l, r, ls, rs), custom_call_target=\"__op$block_scaled_dot\", "
                             "sharding={replicated}\n}\n");
      QVERIFY2(small.ok(), small.ok() ? "" : small.error().message.c_str());
      const auto c = Find(*small->module, Opcode::kCustomCall);
      QCOMPARE(c.size(), size_t{1});
      QCOMPARE(c[0]->operand(0)->shape().ToString(false), std::string(blocks == 4 ? "f8e4m3fn[4,8,16]" : "f8e4m3fn[4,8,64]"));
      size_t result_reductions = 0;  // of the f32 products (the replicated scales may be summed too)
      for (const Instruction* a : Find(*small->module, Opcode::kAllReduce)) result_reductions += a->shape().type == PrimitiveType::kF32;
      QCOMPARE(result_reductions, blocks == 4 ? size_t{1} : size_t{0});
    }
  }

  // Unreduced subgroups (last_tile_dims={unreduced}): a dot whose contracting groups are the
  // result's unreduced groups keeps its partial sums (no all-reduce, XLA's SubgroupUnreducedDot);
  // adding two such values stays local; reading the sum replicated all-reduces over the groups.
  void unreducedSubgroupsKeepPartialSumsPerTile() {
    const std::string u = "{devices=[2,2,2]<=[2,2,2]T(0,2,1) last_tile_dims={unreduced}}";
    const std::string text =
        "HloModule u, num_partitions=8\n\nENTRY e {\n"
        "  a = f32[8,64] parameter(0), sharding={devices=[2,2,2]<=[2,2,2]T(0,1,2) last_tile_dim_replicate}\n"
        "  b = f32[64,16] parameter(1), sharding={devices=[2,2,2]<=[2,2,2]T(1,2,0) last_tile_dim_replicate}\n"
        "  c = f32[64,16] parameter(2), sharding={devices=[2,2,2]<=[2,2,2]T(1,2,0) last_tile_dim_replicate}\n"
        "  d = f32[8,16] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}, sharding=" + u + "\n"
        "  e = f32[8,16] dot(a, c), lhs_contracting_dims={1}, rhs_contracting_dims={0}, sharding=" + u + "\n"
        "  s = f32[8,16] add(d, e), sharding=" + u + "\n"
        "  ROOT r = f32[8,16] copy(s), sharding={replicated}\n}\n";
    std::string why;
    auto r = testing::PartitionAndVerify(text, 8, &why);
    QVERIFY2(r, why.c_str());
    const auto ars = Find(*r->module, Opcode::kAllReduce);
    QCOMPARE(ars.size(), size_t{1});
    QCOMPARE(ars[0]->operand(0)->opcode(), Opcode::kAdd);
    QCOMPARE(ars[0]->replica_groups.groups, (std::vector<std::vector<int64_t>>{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
    QCOMPARE(Find(*r->module, Opcode::kDot).at(0)->shape().ToString(false), std::string("f32[4,8]"));
    // And a replicated value made unreduced over subgroups: the first device of each group keeps it.
    const std::string make = "HloModule m, num_partitions=4\n\nENTRY e {\n"
                             "  p = f32[4,6] parameter(0), sharding={replicated}\n"
                             "  ROOT u = f32[4,6] copy(p), sharding={devices=[2,1,2]<=[4] last_tile_dims={unreduced}}\n}\n";
    auto m = testing::PartitionAndVerify(make, 4, &why);
    QVERIFY2(m, why.c_str());
    QVERIFY(Find(*m->module, Opcode::kAllReduce).empty());
    QCOMPARE(Find(*m->module, Opcode::kSelect).size(), size_t{1});
  }

  // dynamic-update-slice along a sharded dim (a sequence-sharded KV cache's update) keeps the operand
  // split: the small update is made whole along the dim, moved into each shard's coordinates and
  // selected where the shard lies in the updated range. Starts are runtime values (the verifier
  // draws them past both ends: clamped as the op clamps); the range may cross shards (3 rows of 15
  // over shards of 4) and an updated dim that is not split keeps a local dynamic-update-slice.
  void dynamicUpdateSliceKeepsTheOperandSplit() {
    struct Row {
      std::string operand, update, sharding;
      int64_t devices;
    };
    const std::vector<Row> rows = {
        {"f32[4,16,8]", "f32[4,1,8]", "{devices=[1,4,1]<=[4]}", 4},
        {"f32[4,15,8]", "f32[4,3,8]", "{devices=[1,4,1]<=[4]}", 4},
        {"f32[4,15,8]", "f32[4,3,5]", "{devices=[2,4,1]<=[8]}", 8},
    };
    for (const Row& row : rows) {
      const std::string text = "HloModule d, num_partitions=" + std::to_string(row.devices) + "\n\nENTRY e {\n"
                               "  cache = " + row.operand + " parameter(0), sharding=" + row.sharding + "\n"
                               "  new = " + row.update + " parameter(1), sharding={replicated}\n"
                               "  i = s32[] parameter(2), sharding={replicated}\n"
                               "  j = s32[] parameter(3), sharding={replicated}\n"
                               "  z = s32[] constant(0), sharding={replicated}\n"
                               "  ROOT u = " + row.operand + " dynamic-update-slice(cache, new, z, i, j), sharding=" + row.sharding +
                               "\n}\n";
      testing::PartitionVerifyOptions o;
      o.seeds = {7u, 42u, 1234u};
      o.verify.int_min = -3;
      o.verify.int_max = 17;
      std::string why;
      auto r = testing::PartitionAndVerify(text, row.devices, &why, o);
      QVERIFY2(r, (row.operand + " " + row.sharding + ": " + why).c_str());
      QVERIFY(Find(*r->module, Opcode::kAllGather).empty());
      QCOMPARE(r->collectives.size(), size_t{0});  // the update was replicated already
      QCOMPARE(Find(*r->module, Opcode::kSelect).size(), size_t{1});
    }
  }

  // A variadic reduce (argmax) over a sharded dim (XLA's TiledToPartiallyTiledTupleReduce): each
  // device reduces its part, the partial (value, index) pairs are all-gathered over the reduced
  // dim's groups and reduced again; the inputs are never gathered. A reducer that is not a
  // selection of one whole candidate still runs whole on gathered inputs: a pair of sums, and
  // (a fuzz finding) one that keeps the left value but picks the index by the comparison, or picks
  // the value and the index from opposite sides — regrouped, they gave another index.
  void variadicReduceOverAShardedDim() {
    auto module = [](const std::string& body) {
      return "HloModule r, num_partitions=8\n\nf {\n  a = f32[] parameter(0)\n  i = s32[] parameter(1)\n"
             "  b = f32[] parameter(2)\n  j = s32[] parameter(3)\n" + body + "  ROOT t = (f32[], s32[]) tuple(v, w)\n}\n\n"
             "ENTRY e {\n  x = f32[28,12] parameter(0), sharding={devices=[2,4]<=[8]}\n"
             "  y = s32[28,12] parameter(1), sharding={devices=[2,4]<=[8]}\n"
             "  x0 = f32[] parameter(2)\n  y0 = s32[] parameter(3)\n"
             "  ROOT r = (f32[28], s32[28]) reduce(x, y, x0, y0), dimensions={1}, to_apply=f, "
             "sharding={{devices=[2,4]<=[8] last_tile_dim_replicate}, {devices=[2,4]<=[8] last_tile_dim_replicate}}\n}\n";
    };
    const std::string compare = "  c = pred[] compare(a, b), direction=GT\n";
    std::string why;
    for (const std::string& argmax : {compare + "  v = f32[] select(c, a, b)\n  w = s32[] select(c, i, j)\n",
                                      compare + "  v = f32[] select(c, b, a)\n  w = s32[] select(c, j, i)\n"}) {
      auto r = testing::PartitionAndVerify(module(argmax), 8, &why);
      QVERIFY2(r, why.c_str());
      const auto ags = Find(*r->module, Opcode::kAllGather);
      QCOMPARE(ags.size(), size_t{2});
      QCOMPARE(ags[0]->shape().ToString(false), std::string("f32[14,4]"));  // the partial results, not the inputs
      QCOMPARE(ags[1]->shape().ToString(false), std::string("s32[14,4]"));
      QCOMPARE(Find(*r->module, Opcode::kReduce).size(), size_t{2});
    }
    for (const std::string& whole : {std::string("  v = f32[] add(a, b)\n  w = s32[] add(i, j)\n"),
                                     compare + "  v = f32[] select(c, a, a)\n  w = s32[] select(c, i, j)\n",
                                     compare + "  v = f32[] select(c, a, b)\n  w = s32[] select(c, j, i)\n"}) {
      auto r = testing::PartitionAndVerify(module(whole), 8, &why);
      QVERIFY2(r, (whole + why).c_str());
      bool gathers_inputs = false;
      for (const Instruction* ag : Find(*r->module, Opcode::kAllGather)) gathers_inputs |= ag->shape().dim(1) == 12;
      QVERIFY2(gathers_inputs, whole.c_str());
    }
  }

  // A bitcast-convert that changes the rank (s32 pairs <-> f64, XLA's BitcastConvertInputRank*):
  // the folded dim is made whole first (or the unfolded one kept whole and sliced after). Checked
  // by structure: the evaluator does not reinterpret bytes across widths, so these programs are
  // not run.
  void bitcastConvertAcrossWidths() {
    auto partition = [](const std::string& hlo) {
      auto m = ParseHloModule(hlo);
      if (!m.ok()) qFatal("%s", m.error().message.c_str());
      SpmdOptions o;
      o.num_partitions = 4;
      auto r = PartitionModule(**m, o);
      if (!r.ok()) qFatal("%s", r.error().message.c_str());
      return std::move(*r);
    };
    const PartitionResult fold = partition(
        "HloModule f, num_partitions=4\n\nENTRY e {\n  p = s32[4,2] parameter(0), sharding={devices=[2,2]<=[4]}\n"
        "  ROOT r = f64[4] bitcast-convert(p), sharding={devices=[2,2]<=[2,2]T(1,0) last_tile_dim_replicate}\n}\n");
    const auto ag = Find(*fold.module, Opcode::kAllGather);
    QCOMPARE(ag.size(), size_t{1});
    QCOMPARE(ag[0]->shape().ToString(false), std::string("s32[2,2]"));  // the pair made whole
    QCOMPARE(fold.module->entry()->root()->shape().ToString(false), std::string("f64[2]"));
    const PartitionResult unfold = partition(
        "HloModule u, num_partitions=4\n\nENTRY e {\n"
        "  p = s64[4] parameter(0), sharding={devices=[2,2]<=[2,2]T(1,0) last_tile_dim_replicate}\n"
        "  ROOT r = f32[4,2] bitcast-convert(p), sharding={devices=[2,2]<=[4]}\n}\n");
    const auto bc = Find(*unfold.module, Opcode::kBitcastConvert);
    QCOMPARE(bc.size(), size_t{1});
    QCOMPARE(bc[0]->shape().ToString(false), std::string("f32[2,2]"));
    QCOMPARE(unfold.module->entry()->root()->shape().ToString(false), std::string("f32[2,1]"));
  }

  // An all-reduce written in the program (XLA's HandleAllReduce): across replicas (no channel id)
  // it reduces each partition's own shard, so a sharded one stays sharded and moves nothing more
  // (XLA's TiledAllReduce: f32[3,3] over 2, the all-reduce on the [2,3] shard). Across partitions
  // under a manual subgroup, a group that spans two subgroups is refused (XLA's
  // SubgroupIllegalManualAllReduce): devices 0 and 1 hold different data tiles.
  void programAllReduce() {
    const std::string sum = "sum {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT add = f32[] add(a, b)\n}\n\n";
    const std::string tiled = "HloModule t, num_partitions=2\n\n" + sum +
                              "ENTRY e {\n  p = f32[3,3] parameter(0), sharding={devices=[2,1]<=[2]}\n"
                              "  ROOT ar = f32[3,3] all-reduce(p), to_apply=sum, replica_groups={}, sharding={devices=[2,1]<=[2]}\n}\n";
    std::string why;
    auto r = testing::PartitionAndVerify(tiled, 2, &why);
    QVERIFY2(r, why.c_str());
    const auto ars = Find(*r->module, Opcode::kAllReduce);
    QCOMPARE(ars.size(), size_t{1});
    QCOMPARE(ars[0]->shape().ToString(false), std::string("f32[2,3]"));
    QCOMPARE(r->collectives.size(), size_t{0});  // the program's own all-reduce; nothing inserted
    QVERIFY(Find(*r->module, Opcode::kAllGather).empty());

    const std::string manual = "HloModule m, num_partitions=4\n\n" + sum +
                               "ENTRY e {\n  p = f32[2,2] parameter(0), sharding={devices=[2,1,2]<=[2,2]T(1,0) last_tile_dims={manual}}\n"
                               "  ROOT ar = f32[2,2] all-reduce(p), to_apply=sum, replica_groups={{1,0},{2,3}}, "
                               "use_global_device_ids=true, channel_id=1, sharding={devices=[2,1,2]<=[2,2]T(1,0) last_tile_dims={manual}}\n}\n";
    auto m = ParseHloModule(manual);
    QVERIFY(m.ok());
    SpmdOptions o;
    o.num_partitions = 4;
    auto p = PartitionModule(**m, o);
    QVERIFY(!p.ok());
    QVERIFY2(p.error().message.find("Manual all-reduce across devices that belong to different manual subgroups (1 and 0") !=
                 std::string::npos,
             p.error().message.c_str());
  }

  // A manual region's boundary keeps each device's local value (XLA's SPMDFullToShardShape and
  // SPMDShardToFullShape): the region's shapes are the shards (a manual subgroup's, split over the
  // axes still partitioned). A module whose shapes say otherwise
  // is refused with the instruction named (fuzz findings: the partitioned program added an f32[8,2]
  // to an f32[4,2], and returned an s32[16,1648] as the shards of s32[16,16,16]).
  void manualRegionBoundaryShapes() {
    auto module = [](const std::string& in_sharding, const std::string& region, const std::string& region_op) {
      return "HloModule m, num_partitions=2\n\nENTRY e {\n  p = f32[8,2] parameter(0), sharding=" + in_sharding +
             "\n  q = f32[4,2] parameter(1), sharding={manual}\n  m = " + region +
             " custom-call(p), custom_call_target=\"SPMDFullToShardShape\", sharding={manual}\n" + region_op +
             "  ROOT out = f32[8,2] custom-call(a), custom_call_target=\"SPMDShardToFullShape\", "
             "sharding={devices=[2,1]<=[2]}\n}\n";
    };
    const std::string add = "  a = f32[4,2] add(m, q), sharding={manual}\n";
    std::string why;
    auto good = testing::PartitionAndVerify(module("{devices=[2,1]<=[2]}", "f32[4,2]", add), 2, &why);
    QVERIFY2(good, why.c_str());
    QCOMPARE(good->module->entry()->root()->shape().ToString(false), std::string("f32[4,2]"));

    auto refused = [](const std::string& text, const std::string& expected) {
      auto m = ParseHloModule(text);
      QVERIFY2(m.ok(), m.ok() ? "" : m.error().message.c_str());
      SpmdOptions o;
      o.num_partitions = 2;
      auto p = PartitionModule(**m, o);
      QVERIFY(!p.ok());
      QVERIFY2(p.error().message.find(expected) != std::string::npos, p.error().message.c_str());
    };
    // A manual subgroup (dim 0's axis manual, dim 1 still split): the region's f32[2,8] is each
    // manual group's part, split over the other axis, [2,4] on each device — the operand's shard.
    auto partial = testing::PartitionAndVerify(
        "HloModule m, num_partitions=4\n\nENTRY e {\n  p = f32[4,8] parameter(0), sharding={devices=[2,2]<=[4]}\n"
        "  m = f32[2,8] custom-call(p), custom_call_target=\"SPMDFullToShardShape\", "
        "sharding={devices=[1,2,2]<=[2,2]T(1,0) last_tile_dims={manual}}\n"
        "  a = f32[2,8] add(m, m), sharding={devices=[1,2,2]<=[2,2]T(1,0) last_tile_dims={manual}}\n"
        "  ROOT out = f32[4,8] custom-call(a), custom_call_target=\"SPMDShardToFullShape\", sharding={devices=[2,2]<=[4]}\n}\n",
        4, &why);
    QVERIFY2(partial, why.c_str());
    QCOMPARE(CountCollectives(*partial->module), 0);
    QCOMPARE(partial->module->entry()->root()->shape().ToString(false), std::string("f32[2,4]"));
    // The operand is whole on each device, the region says it holds half.
    refused(module("{replicated}", "f32[4,2]", add),
            "m: SPMDFullToShardShape's operand p holds f32[8,2] on each device, but the result f32[4,2] is manual, each "
            "device's own");
    // The region returns a value of another shape than the result's shard.
    refused(module("{devices=[2,1]<=[2]}", "f32[4,2]", "  a = f32[2,4] reshape(m), sharding={manual}\n"),
            "out: SPMDShardToFullShape's operand a holds f32[2,4] on each device, but the result f32[8,2] under "
            "its sharding is f32[4,2] on each device");
  }

  // A tuple sharding lists the leaves of the whole nested tuple, as XLA's does (an infeed's
  // ((data, data), token)): element 0 of ((f32[8,2], f32[2]), f32[4]) under {A, B, C} is {A, B}.
  // The partitioner indexed it by element (A for the inner tuple) and refused the module.
  void nestedTupleShardingsAreLeaves() {
    std::string why;
    auto r = testing::PartitionAndVerify(
        "HloModule m, num_partitions=2\n\nENTRY e {\n"
        "  p = ((f32[8,2], f32[2]), f32[4]) parameter(0), sharding={{devices=[2,1]<=[2]}, {replicated}, {devices=[2]<=[2]}}\n"
        "  a = (f32[8,2], f32[2]) get-tuple-element(p), index=0\n  x = f32[8,2] get-tuple-element(a), index=0\n"
        "  y = f32[2] get-tuple-element(a), index=1\n  z = f32[4] get-tuple-element(p), index=1\n"
        "  e = f32[8,2] exponential(x), sharding={devices=[2,1]<=[2]}\n  n = (f32[8,2], f32[2]) tuple(e, y)\n"
        "  ROOT t = ((f32[8,2], f32[2]), f32[4]) tuple(n, z), sharding={{devices=[2,1]<=[2]}, {replicated}, {replicated}}\n}\n",
        2, &why);
    QVERIFY2(r, why.c_str());
    QCOMPARE(r->module->entry()->parameter(0)->shape().ToString(false), std::string("((f32[4,2], f32[2]), f32[2])"));
    QCOMPARE(r->module->entry()->root()->shape().ToString(false), std::string("((f32[4,2], f32[2]), f32[4])"));
    const auto ag = Find(*r->module, Opcode::kAllGather);
    QCOMPARE(ag.size(), size_t{1});  // only z, made whole
    QCOMPARE(ag[0]->shape().ToString(false), std::string("f32[4]"));
  }

  // rng: every device draws its own shard; copies of one tile must agree, so the first copy's draw
  // is shared by an all-reduce over the copies (XLA's HandleRng).
  void rngSharesOneDrawPerTile() {
    struct Row {
      std::string sharding;
      std::string local;
      std::vector<std::vector<int64_t>> groups;  // empty: no all-reduce
    };
    const std::vector<Row> rows = {
        {"{devices=[4,1]<=[4]}", "f32[2,4]", {}},
        {"{devices=[2,1,2]<=[4] last_tile_dim_replicate}", "f32[4,4]", {{0, 1}, {2, 3}}},
        {"{devices=[2,1,2]<=[2,2]T(1,0) last_tile_dim_replicate}", "f32[4,4]", {{0, 2}, {1, 3}}},
        {"{replicated}", "f32[8,4]", {{0, 1, 2, 3}}},
    };
    for (const Row& row : rows) {
      const std::string text = "HloModule r, num_partitions=4\n\nENTRY e {\n"
                               "  lo = f32[] parameter(0), sharding={replicated}\n"
                               "  hi = f32[] parameter(1), sharding={replicated}\n"
                               "  ROOT r = f32[8,4] rng(lo, hi), distribution=rng_uniform, sharding=" +
                               row.sharding + "\n}\n";
      auto m = ParseHloModule(text);
      QVERIFY(m.ok());
      SpmdOptions o;
      o.num_partitions = 4;
      auto p = PartitionModule(**m, o);
      QVERIFY2(p.ok(), p.ok() ? "" : p.error().message.c_str());
      const auto rng = Find(*p->module, Opcode::kRng);
      QCOMPARE(rng.size(), size_t{1});
      QCOMPARE(rng[0]->shape().ToString(false), row.local);
      const auto ars = Find(*p->module, Opcode::kAllReduce);
      QCOMPARE(ars.size(), row.groups.empty() ? size_t{0} : size_t{1});
      if (row.groups.empty()) continue;
      QCOMPARE(ars[0]->replica_groups.groups, row.groups);
      // What enters the all-reduce is the draw on the first copy of each tile, zeros elsewhere.
      const Instruction* sel = ars[0]->operand(0);
      QCOMPARE(sel->opcode(), Opcode::kSelect);
      QCOMPARE(sel->operand(1), static_cast<const Instruction*>(rng[0]));
      QVERIFY(Find(*p->module, Opcode::kAllGather).empty());
    }
  }

  // A while loop carries its sharding through body and condition.
  void whileLoopKeepsSharding() {
    const char* text = R"(
HloModule loop, num_partitions=2
cond {
  p = (s32[], f32[8,4]) parameter(0), sharding={{replicated}, {devices=[2,1]0,1}}
  i = s32[] get-tuple-element(p), index=0, sharding={replicated}
  n = s32[] constant(3), sharding={replicated}
  ROOT lt = pred[] compare(i, n), direction=LT, sharding={replicated}
}
body {
  p = (s32[], f32[8,4]) parameter(0), sharding={{replicated}, {devices=[2,1]0,1}}
  i = s32[] get-tuple-element(p), index=0, sharding={replicated}
  x = f32[8,4] get-tuple-element(p), index=1, sharding={devices=[2,1]0,1}
  one = s32[] constant(1), sharding={replicated}
  i2 = s32[] add(i, one), sharding={replicated}
  x2 = f32[8,4] multiply(x, x), sharding={devices=[2,1]0,1}
  ROOT t = (s32[], f32[8,4]) tuple(i2, x2), sharding={{replicated}, {devices=[2,1]0,1}}
}
ENTRY main {
  a = f32[8,4] parameter(0), sharding={devices=[2,1]0,1}
  z = s32[] constant(0), sharding={replicated}
  init = (s32[], f32[8,4]) tuple(z, a), sharding={{replicated}, {devices=[2,1]0,1}}
  w = (s32[], f32[8,4]) while(init), condition=cond, body=body, sharding={{replicated}, {devices=[2,1]0,1}}
  ROOT r = f32[8,4] get-tuple-element(w), index=1, sharding={devices=[2,1]0,1}
}
)";
    auto m = ParseHloModule(text, "loop.hlo");
    QVERIFY2(m.ok(), m.ok() ? "" : m.error().message.c_str());
    std::string why;
    auto r_opt = TryPartitionAndVerify(**m, 2, &why);
    QVERIFY2(r_opt.has_value(), why.c_str());
    auto& r = *r_opt;
    QCOMPARE(CountCollectives(*r.module), 0);
    auto ws = Find(*r.module, Opcode::kWhile);
    QCOMPARE(ws.size(), size_t{1});
    QCOMPARE(ws[0]->shape().tuple.at(1).ToString(false), std::string("f32[4,4]"));
  }

  // The SPMD program prints as HLO text that parses back.
  void printsAndReparses() {
    auto m = Matmul(8, 8, 8, "{devices=[1,2]0,1}", "{devices=[2,1]0,1}", "{devices=[2,1]0,1}");
    std::string why;
    auto r_opt = TryPartitionAndVerify(*m, 2, &why);
    QVERIFY2(r_opt.has_value(), why.c_str());
    auto& r = *r_opt;
    std::string text = PrintHloModule(*r.module);
    QVERIFY(text.find("reduce-scatter(") != std::string::npos);
    QVERIFY(text.find("replica_groups={{0,1}}") != std::string::npos);
    QVERIFY(text.find("channel_id=") != std::string::npos);
    auto back = ParseHloModule(text, "spmd.hlo");
    QVERIFY2(back.ok(), back.ok() ? "" : back.error().message.c_str());
  }

  void missingShardingIsReplicated() {
    auto m = Matmul(4, 4, 4, "{replicated}", "{replicated}", "{replicated}");
    for (const auto& i : m->entry()->instructions()) i->clear_sharding();
    std::string why;
    auto r_opt = TryPartitionAndVerify(*m, 2, &why);
    QVERIFY2(r_opt.has_value(), why.c_str());
    auto& r = *r_opt;
    QCOMPARE(CountCollectives(*r.module), 0);
  }
};

QTEST_APPLESS_MAIN(SpmdPartitionerTest)
#include "test_spmd_partitioner.moc"
