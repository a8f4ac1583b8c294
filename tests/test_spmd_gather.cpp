// SPMD gather and scatter (partitioner/spmd/gather_scatter_handlers.cpp): operand passthrough,
// index passthrough / index parallel, operand sharded on an indexed dim (masked gather +
// all-reduce; scatter with offset indices, out-of-shard updates skipped), partial scatter-add +
// all-reduce, explicit batching dims; 2/4 devices and a 2x2 mesh, uneven sizes. Every program is
// verified numerically with indices that run out of range (gather clamps, scatter skips) and,
// for scatters, duplicates (combined).
#include <QtTest>

#include <optional>
#include <string>

#include "core/ir/hlo_text.h"
#include "core/eval/numeric_verify.h"
#include "tests/spmd_test_support.h"
#include "partitioner/spmd/spmd_partitioner.h"
#include "tests/built_paths.h"

using namespace shardscope;

namespace {

using testing::Find;

int CountCollectives(const Module& m) {
  int n = 0;
  for (const auto& c : m.computations())
    for (const auto& i : c->instructions())
      if (IsCollective(i->opcode()) || i->opcode() == Opcode::kReduceScatter) ++n;
  return n;
}

using Groups = std::vector<std::vector<int64_t>>;

// Parses, partitions over `devices` and verifies numerically with integer inputs (the indices)
// drawn from [int_min, int_max] — beyond the operand's extent, so out-of-range indices occur.
std::optional<PartitionResult> Run(const std::string& hlo, int64_t devices, int64_t int_min, int64_t int_max,
                                   std::string* why, std::unique_ptr<Module>* original = nullptr) {
  testing::PartitionVerifyOptions o;
  o.seeds = {42u, 7u, 1234u};
  o.verify.int_min = int_min;
  o.verify.int_max = int_max;
  return testing::PartitionAndVerify(hlo, devices, why, o, original);
}

const char* kAdd = R"(
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
)";

// Embedding lookup: table f32[V, D], ids s32[B, S] -> f32[B, S, D].
std::string Embedding(int64_t V, int64_t D, int64_t B, int64_t S, const std::string& ts, const std::string& is,
                      const std::string& os) {
  const std::string v = std::to_string(V), d = std::to_string(D), b = std::to_string(B), s = std::to_string(S);
  return "HloModule emb\nENTRY main {\n  table = f32[" + v + "," + d + "] parameter(0), sharding=" + ts +
         "\n  ids = s32[" + b + "," + s + "] parameter(1), sharding=" + is + "\n  ROOT g = f32[" + b + "," + s + "," + d +
         "] gather(table, ids), offset_dims={2}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=2, "
         "slice_sizes={1," + d + "}, sharding=" + os + "\n}\n";
}

// Gradient of the embedding: scatter-add of updates f32[B, S, D] into f32[V, D].
std::string ScatterAdd(int64_t V, int64_t D, int64_t B, int64_t S, const std::string& ts, const std::string& is,
                       const std::string& us, const std::string& os, const std::string& combiner = kAdd,
                       const std::string& comb_name = "add") {
  const std::string v = std::to_string(V), d = std::to_string(D), b = std::to_string(B), s = std::to_string(S);
  return "HloModule grad\n" + combiner + "\nENTRY main {\n  table = f32[" + v + "," + d + "] parameter(0), sharding=" + ts +
         "\n  ids = s32[" + b + "," + s + "] parameter(1), sharding=" + is + "\n  upd = f32[" + b + "," + s + "," + d +
         "] parameter(2), sharding=" + us + "\n  ROOT sc = f32[" + v + "," + d +
         "] scatter(table, ids, upd), update_window_dims={2}, inserted_window_dims={0}, "
         "scatter_dims_to_operand_dims={0}, index_vector_dim=2, to_apply=" + comb_name + ", sharding=" + os + "\n}\n";
}

const Instruction* Only(const Module& m, Opcode op) {
  auto v = Find(m, op);
  return v.size() == 1 ? v[0] : nullptr;
}

}  // namespace

class SpmdGatherTest : public QObject {
  Q_OBJECT
 private slots:
  // Table sharded on V (the indexed dim) over 4 devices, V = 101 uneven (shards of 26, the last
  // holding 23 rows + 3 of padding): every device gathers from its rows with ids offset by its
  // shard start, masks the others to 0 and one all-reduce sums; the table (3.2 KB) is never
  // gathered — the all-reduce moves the small output instead. Ids in [-3, 104] include
  // out-of-range ones, clamped as by the unpartitioned gather.
  void gatherOperandShardedOnIndexedDim() {
    std::string why;
    auto r = Run(Embedding(101, 8, 2, 3, "{devices=[4,1]0,1,2,3}", "{replicated}", "{replicated}"), 4, -3, 104, &why);
    QVERIFY2(r.has_value(), why.c_str());
    QCOMPARE(CountCollectives(*r->module), 1);
    QVERIFY(Find(*r->module, Opcode::kAllGather).empty());
    const Instruction* ar = Only(*r->module, Opcode::kAllReduce);
    QVERIFY(ar);
    QCOMPARE(ar->replica_groups.groups, (Groups{{0, 1, 2, 3}}));
    QCOMPARE(ar->shape().ToString(false), std::string("f32[2,3,8]"));
    const Instruction* g = Only(*r->module, Opcode::kGather);
    QVERIFY(g);
    QCOMPARE(g->operand(0)->shape().ToString(false), std::string("f32[26,8]"));
    QCOMPARE(g->shape().ToString(false), std::string("f32[2,3,8]"));
    QCOMPARE(r->collectives.size(), size_t{1});
    QVERIFY2(r->collectives[0].reason.find("gather: operand sharded on indexed dim 0, masked + all-reduce") == 0,
             r->collectives[0].reason.c_str());
    QVERIFY(r->replicated_fallbacks.empty());
  }

  // Table sharded on D (an offset dim kept whole in every slice): passthrough, no communication.
  void gatherOperandPassthrough() {
    std::string why;
    auto r = Run(Embedding(10, 8, 6, 3, "{devices=[1,4]0,1,2,3}", "{replicated}", "{devices=[1,1,4]0,1,2,3}"), 4, -3,
                 13, &why);
    QVERIFY2(r.has_value(), why.c_str());
    QCOMPARE(CountCollectives(*r->module), 0);
    const Instruction* g = Only(*r->module, Opcode::kGather);
    QVERIFY(g);
    QCOMPARE(g->shape().ToString(false), std::string("f32[6,3,2]"));
    QCOMPARE(g->gather_slice_sizes, (std::vector<int64_t>{1, 2}));
  }

  // Ids sharded on B (7, uneven over 2 devices): index passthrough, no communication.
  void gatherIndexParallel() {
    std::string why;
    auto r = Run(Embedding(10, 8, 7, 3, "{replicated}", "{devices=[2,1]0,1}", "{devices=[2,1,1]0,1}"), 2, -3, 13, &why);
    QVERIFY2(r.has_value(), why.c_str());
    QCOMPARE(CountCollectives(*r->module), 0);
    const Instruction* g = Only(*r->module, Opcode::kGather);
    QVERIFY(g);
    QCOMPARE(g->shape().ToString(false), std::string("f32[4,3,8]"));
    QCOMPARE(g->operand(1)->shape().ToString(false), std::string("s32[4,3]"));
  }

  // 2x2 mesh: table (V = 41, shards of 21) sharded on V over mesh axis 0, ids on B over axis 1.
  // The joint tiling uses
  // both: each device gathers its B rows from its V shard; the all-reduce runs over the devices
  // sharing a B tile ({0,2}, {1,3}) and the output is left sharded on B.
  void gatherMesh2x2IndexedAndBatch() {
    std::string why;
    auto r = Run(Embedding(41, 4, 4, 2, "{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}",
                           "{devices=[2,1,2]0,2,1,3 last_tile_dim_replicate}",
                           "{devices=[2,1,1,2]0,2,1,3 last_tile_dim_replicate}"),
                 4, -2, 43, &why);
    QVERIFY2(r.has_value(), why.c_str());
    QCOMPARE(CountCollectives(*r->module), 1);
    QVERIFY(Find(*r->module, Opcode::kAllGather).empty());
    const Instruction* ar = Only(*r->module, Opcode::kAllReduce);
    QVERIFY(ar);
    QCOMPARE(ar->replica_groups.groups, (Groups{{0, 2}, {1, 3}}));
    const Instruction* g = Only(*r->module, Opcode::kGather);
    QVERIFY(g);
    QCOMPARE(g->operand(0)->shape().ToString(false), std::string("f32[21,4]"));
    QCOMPARE(g->shape().ToString(false), std::string("f32[2,2,4]"));
  }

  // XLA-style dimension numbers: index_vector_dim=0, two indexed dims in swapped order
  // (start_index_map={1,0}), both collapsed, operand dim 2 passthrough and sharded; dim 1 is
  // indexed with slice size 1 and sharded as well (masked + all-reduce over its 2 tiles only).
  void gatherXlaDimensionNumbers() {
    const std::string hlo = R"(
HloModule g
ENTRY main {
  op = f32[5,6,8] parameter(0), sharding={devices=[1,2,2]0,1,2,3}
  idx = s32[2,4,3] parameter(1), sharding={replicated}
  ROOT g = f32[4,3,8] gather(op, idx), offset_dims={2}, collapsed_slice_dims={0,1}, start_index_map={1,0},
    index_vector_dim=0, slice_sizes={1,1,8}, sharding={devices=[1,1,2,2]0,2,1,3 last_tile_dim_replicate}
}
)";
    std::string why;
    auto r = Run(hlo, 4, -2, 8, &why);
    QVERIFY2(r.has_value(), why.c_str());
    QCOMPARE(CountCollectives(*r->module), 1);
    const Instruction* ar = Only(*r->module, Opcode::kAllReduce);
    QVERIFY(ar);
    QCOMPARE(ar->replica_groups.groups, (Groups{{0, 2}, {1, 3}}));
    QCOMPARE(ar->shape().ToString(false), std::string("f32[4,3,4]"));
    QVERIFY(Find(*r->module, Opcode::kAllGather).empty());
  }

  // Explicit batching dims (operand_batching_dims / start_indices_batching_dims): operand and
  // indices sharded alike on the batch: index parallel, no communication.
  void gatherExplicitBatchDims() {
    const std::string hlo = R"(
HloModule g
ENTRY main {
  op = f32[4,10,8] parameter(0), sharding={devices=[2,1,1]0,1}
  idx = s32[4,3,1] parameter(1), sharding={devices=[2,1,1]0,1}
  ROOT g = f32[4,3,8] gather(op, idx), offset_dims={2}, collapsed_slice_dims={1}, start_index_map={1},
    operand_batching_dims={0}, start_indices_batching_dims={0}, index_vector_dim=2, slice_sizes={1,1,8},
    sharding={devices=[2,1,1]0,1}
}
)";
    std::string why;
    auto r = Run(hlo, 2, -3, 13, &why);
    QVERIFY2(r.has_value(), why.c_str());
    QCOMPARE(CountCollectives(*r->module), 0);
    const Instruction* g = Only(*r->module, Opcode::kGather);
    QVERIFY(g);
    QCOMPARE(g->shape().ToString(false), std::string("f32[2,3,8]"));
    QCOMPARE(g->operand(0)->shape().ToString(false), std::string("f32[2,10,8]"));
  }

  // A slice wider than 1 along a sharded indexed dim cannot be masked per shard: the operand's
  // indexed dim is gathered (one all-gather, still correct), the other dim stays sharded.
  void gatherWideSliceOnShardedDimGathers() {
    const std::string hlo = R"(
HloModule g
ENTRY main {
  op = f32[12,6] parameter(0), sharding={devices=[2,2]0,1,2,3}
  idx = s32[5] parameter(1), sharding={replicated}
  ROOT g = f32[5,3,6] gather(op, idx), offset_dims={1,2}, collapsed_slice_dims={}, start_index_map={0},
    index_vector_dim=1, slice_sizes={3,6}, sharding={devices=[1,1,2,2]0,2,1,3 last_tile_dim_replicate}
}
)";
    std::string why;
    auto r = Run(hlo, 4, -4, 14, &why);
    QVERIFY2(r.has_value(), why.c_str());
    const auto ags = Find(*r->module, Opcode::kAllGather);
    QCOMPARE(ags.size(), size_t{1});
    QCOMPARE(ags[0]->shape().ToString(false), std::string("f32[12,3]"));
    QCOMPARE(CountCollectives(*r->module), 1);
  }

  // Scatter-add of gradients into a table sharded on V (4 devices, V = 10 uneven): ids offset
  // by each shard's start, updates for other shards fall outside the local table and are
  // skipped; no communication at all. Ids in [-2, 11]: 18 ids over 14 values, so duplicates
  // (accumulated) and out-of-range ids (skipped) both occur.
  void scatterAddIntoShardedTable() {
    std::string why;
    auto r = Run(ScatterAdd(10, 8, 6, 3, "{devices=[4,1]0,1,2,3}", "{replicated}", "{replicated}",
                            "{devices=[4,1]0,1,2,3}"),
                 4, -2, 11, &why);
    QVERIFY2(r.has_value(), why.c_str());
    QCOMPARE(CountCollectives(*r->module), 0);
    const Instruction* s = Only(*r->module, Opcode::kScatter);
    QVERIFY(s);
    QCOMPARE(s->shape().ToString(false), std::string("f32[3,8]"));
    QCOMPARE(s->operand(2)->shape().ToString(false), std::string("f32[6,3,8]"));
  }

  // Updates and ids sharded on B (5, uneven over 2): each device scatters its part into a
  // partial result (the table enters on device 0 only, the identity elsewhere; B's padding
  // masked to 0), one all-reduce adds them. The table is never all-gathered.
  void scatterAddPartialUpdatesAllReduce() {
    std::string why;
    auto r = Run(ScatterAdd(6, 4, 5, 4, "{replicated}", "{devices=[2,1]0,1}", "{devices=[2,1,1]0,1}", "{replicated}"),
                 2, -1, 7, &why);
    QVERIFY2(r.has_value(), why.c_str());
    QCOMPARE(CountCollectives(*r->module), 1);
    const Instruction* ar = Only(*r->module, Opcode::kAllReduce);
    QVERIFY(ar);
    QCOMPARE(ar->replica_groups.groups, (Groups{{0, 1}}));
    QCOMPARE(ar->shape().ToString(false), std::string("f32[6,4]"));
    const Instruction* s = Only(*r->module, Opcode::kScatter);
    QVERIFY(s);
    QCOMPARE(s->operand(2)->shape().ToString(false), std::string("f32[3,4,4]"));
    QVERIFY(r->collectives.at(0).reason.find("scatter: updates sharded on scatter dim 0") == 0);
  }

  // Index passthrough merged with operand passthrough over the indices' replication (XLA's
  // merged strategy, ScatterPreferUpdateIndexIfSmaller): the ids split 4 ways and copied twice, the
  // table's columns split 2 ways across those copies, so each of the 8 devices applies a distinct
  // quarter of the updates to its half of the columns; partial sums meet in all-reduces of 4. (The
  // updates are large beside the table: gathering them would move more.)
  void scatterIndexAndOperandPassthroughMerged() {
    std::string why;
    auto r = Run(ScatterAdd(256, 1024, 64, 64, "{devices=[1,2,4]<=[8] last_tile_dim_replicate}",
                            "{devices=[4,1,2]<=[8] last_tile_dim_replicate}",
                            "{devices=[4,1,1,2]<=[8] last_tile_dim_replicate}",
                            "{devices=[1,2,4]<=[8] last_tile_dim_replicate}"),
                 8, -1, 7, &why);
    QVERIFY2(r.has_value(), why.c_str());
    const Instruction* s = Only(*r->module, Opcode::kScatter);
    QVERIFY(s);
    QCOMPARE(s->operand(0)->shape().ToString(false), std::string("f32[256,512]"));
    QCOMPARE(s->operand(2)->shape().ToString(false), std::string("f32[16,64,512]"));
    const Instruction* ar = Only(*r->module, Opcode::kAllReduce);
    QVERIFY(ar);
    QCOMPARE(ar->replica_groups.groups.size(), size_t{2});
    QCOMPARE(ar->replica_groups.groups[0].size(), size_t{4});
    QVERIFY(Find(*r->module, Opcode::kAllGather).empty());
  }

  // Same with a max combiner: partial maxima combined by an all-reduce max.
  void scatterMaxPartialUpdates() {
    const std::string comb = R"(
mx {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] maximum(a, b)
}
)";
    std::string why;
    auto r = Run(ScatterAdd(6, 4, 5, 4, "{replicated}", "{devices=[2,1]0,1}", "{devices=[2,1,1]0,1}", "{replicated}",
                            comb, "mx"),
                 2, -1, 7, &why);
    QVERIFY2(r.has_value(), why.c_str());
    QCOMPARE(CountCollectives(*r->module), 1);
    const Instruction* ar = Only(*r->module, Opcode::kAllReduce);
    QVERIFY(ar);
    QVERIFY(ar->to_apply() && ar->to_apply()->root()->opcode() == Opcode::kMaximum);
  }

  // 2x2 mesh: table sharded on V over axis 0, ids/updates on B over axis 1: local scatter into
  // the V shard, all-reduce over the devices sharing a V tile ({0,1}, {2,3}); output stays on V.
  void scatterMesh2x2() {
    std::string why;
    auto r = Run(ScatterAdd(9, 4, 6, 2, "{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}",
                            "{devices=[2,1,2]0,2,1,3 last_tile_dim_replicate}",
                            "{devices=[2,1,1,2]0,2,1,3 last_tile_dim_replicate}",
                            "{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}"),
                 4, -2, 10, &why);
    QVERIFY2(r.has_value(), why.c_str());
    QCOMPARE(CountCollectives(*r->module), 1);
    const Instruction* ar = Only(*r->module, Opcode::kAllReduce);
    QVERIFY(ar);
    QCOMPARE(ar->replica_groups.groups, (Groups{{0, 1}, {2, 3}}));
    QCOMPARE(ar->shape().ToString(false), std::string("f32[5,4]"));
  }

  // Overwrite scatter (combiner returns the update) with the table sharded on D: the window dim
  // passes through, no communication.
  void scatterOverwritePassthrough() {
    const std::string comb = R"(
assign {
  a = f32[] parameter(0)
  ROOT b = f32[] parameter(1)
}
)";
    // Unique ids (one per row at most) keep the overwrite deterministic: a single id per update.
    const std::string hlo = "HloModule s\n" + comb + R"(
ENTRY main {
  table = f32[10,8] parameter(0), sharding={devices=[1,4]0,1,2,3}
  ids = s32[1,1] parameter(1), sharding={replicated}
  upd = f32[1,1,8] parameter(2), sharding={replicated}
  ROOT sc = f32[10,8] scatter(table, ids, upd), update_window_dims={2}, inserted_window_dims={0},
    scatter_dims_to_operand_dims={0}, index_vector_dim=2, to_apply=assign, sharding={devices=[1,4]0,1,2,3}
}
)";
    std::string why;
    auto r = Run(hlo, 4, -2, 11, &why);
    QVERIFY2(r.has_value(), why.c_str());
    QCOMPARE(CountCollectives(*r->module), 0);
    const Instruction* s = Only(*r->module, Opcode::kScatter);
    QVERIFY(s);
    QCOMPARE(s->shape().ToString(false), std::string("f32[10,2]"));
    QCOMPARE(s->operand(2)->shape().ToString(false), std::string("f32[1,1,2]"));
  }

  // Scatter with explicit batching dims, all sharded alike on the batch: local.
  void scatterExplicitBatchDims() {
    const std::string hlo = std::string("HloModule s\n") + kAdd + R"(
ENTRY main {
  op = f32[4,10,8] parameter(0), sharding={devices=[2,1,1]0,1}
  idx = s32[4,3,1] parameter(1), sharding={devices=[2,1,1]0,1}
  upd = f32[4,3,8] parameter(2), sharding={devices=[2,1,1]0,1}
  ROOT sc = f32[4,10,8] scatter(op, idx, upd), update_window_dims={2}, inserted_window_dims={1},
    scatter_dims_to_operand_dims={1}, input_batching_dims={0}, scatter_indices_batching_dims={0},
    index_vector_dim=2, to_apply=add, sharding={devices=[2,1,1]0,1}
}
)";
    std::string why;
    auto r = Run(hlo, 2, -2, 11, &why);
    QVERIFY2(r.has_value(), why.c_str());
    QCOMPARE(CountCollectives(*r->module), 0);
    const Instruction* s = Only(*r->module, Opcode::kScatter);
    QVERIFY(s);
    QCOMPARE(s->shape().ToString(false), std::string("f32[2,10,8]"));
  }

  // The conformance runner now counts XLA's gather and scatter cases.
  void conformanceCountsGatherScatter() {
#ifndef SHARDSCOPE_SHARED_DIR
    QSKIP("no shared data dir");
#else
    const std::string dir = std::string(SHARDSCOPE_SHARED_DIR) + "/conformance/xla/spmd/GatherPartitionedOnTrivialSliceDims.hlo";
    if (!QFile::exists(QString::fromStdString(dir))) QSKIP("conformance data absent");
    QFile f(QString::fromStdString(dir));
    QVERIFY(f.open(QIODevice::ReadOnly));
    std::string why;
    auto r = Run(f.readAll().toStdString(), 2, -3, 20, &why);
    QVERIFY2(r.has_value(), why.c_str());
    // XLA: root is all-reduce(masked) : f32[2,3,9].
    QCOMPARE(r->module->entry()->root()->opcode(), Opcode::kAllReduce);
    QCOMPARE(r->module->entry()->root()->shape().ToString(false), std::string("f32[2,3,9]"));
#endif
  }

  // GSPMD's parallel-dim case: the index of operand dim 0 is an iota along the indices' batch dim of
  // the same extent (a "take along axis"), so both are tiled alike and every device gathers from its
  // own rows — no collective; the local index is the global one minus the shard start. Uneven (10
  // over 4) included.
  void gatherParallelDimFromIota_data() {
    QTest::addColumn<int>("rows");
    QTest::newRow("even 8 over 4") << 8;
    QTest::newRow("uneven 10 over 4") << 10;
  }
  void gatherParallelDimFromIota() {
    QFETCH(int, rows);
    const std::string n = std::to_string(rows);
    const std::string hlo = "HloModule take, num_partitions=4\n\nENTRY main {\n"
                            "  p = f32[" + n + ",6] parameter(0), sharding={devices=[4,1]0,1,2,3}\n"
                            "  row = s32[" + n + ",1] iota(), iota_dimension=0, sharding={devices=[4,1]0,1,2,3}\n"
                            "  col = s32[" + n + ",1] parameter(1), sharding={devices=[4,1]0,1,2,3}\n"
                            "  idx = s32[" + n + ",2] concatenate(row, col), dimensions={1}, sharding={devices=[4,1]0,1,2,3}\n"
                            "  ROOT g = f32[" + n + "] gather(p, idx), offset_dims={}, collapsed_slice_dims={0,1}, "
                            "start_index_map={0,1}, index_vector_dim=1, slice_sizes={1,1}, sharding={devices=[4]0,1,2,3}\n}\n";
    std::string why;
    auto r = Run(hlo, 4, -2, 7, &why);
    QVERIFY2(r.has_value(), why.c_str());
    QCOMPARE(CountCollectives(*r->module), 0);
    const Instruction* g = Only(*r->module, Opcode::kGather);
    QVERIFY(g);
    const std::string shard = std::to_string((rows + 3) / 4);
    QCOMPARE(g->operand(0)->shape().ToString(false), "f32[" + shard + ",6]");
    QCOMPARE(g->shape().ToString(false), "f32[" + shard + "]");
    QVERIFY(r->replicated_fallbacks.empty());
  }

  // The same parallel dim for scatter: each device adds its own rows' updates into its own rows,
  // no collective (even and uneven).
  void scatterParallelDimFromIota_data() {
    QTest::addColumn<int>("rows");
    QTest::newRow("even 8 over 4") << 8;
    QTest::newRow("uneven 10 over 4") << 10;
  }
  void scatterParallelDimFromIota() {
    QFETCH(int, rows);
    const std::string n = std::to_string(rows);
    const std::string hlo = "HloModule put, num_partitions=4\n\nadd {\n  a = f32[] parameter(0)\n"
                            "  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}\n\nENTRY main {\n"
                            "  p = f32[" + n + ",6] parameter(0), sharding={devices=[4,1]0,1,2,3}\n"
                            "  row = s32[" + n + ",1] iota(), iota_dimension=0, sharding={devices=[4,1]0,1,2,3}\n"
                            "  col = s32[" + n + ",1] parameter(1), sharding={devices=[4,1]0,1,2,3}\n"
                            "  idx = s32[" + n + ",2] concatenate(row, col), dimensions={1}, sharding={devices=[4,1]0,1,2,3}\n"
                            "  u = f32[" + n + "] parameter(2), sharding={devices=[4]0,1,2,3}\n"
                            "  ROOT sc = f32[" + n + ",6] scatter(p, idx, u), update_window_dims={}, "
                            "inserted_window_dims={0,1}, scatter_dims_to_operand_dims={0,1}, index_vector_dim=1, "
                            "to_apply=add, sharding={devices=[4,1]0,1,2,3}\n}\n";
    std::string why;
    auto r = Run(hlo, 4, -2, 7, &why);
    QVERIFY2(r.has_value(), why.c_str());
    QCOMPARE(CountCollectives(*r->module), 0);
    const Instruction* sc = Only(*r->module, Opcode::kScatter);
    QVERIFY(sc);
    const std::string shard = std::to_string((rows + 3) / 4);
    QCOMPARE(sc->shape().ToString(false), "f32[" + shard + ",6]");
    QVERIFY(r->replicated_fallbacks.empty());
  }

  // Peak memory first (XLA orders its strategies by memory): the operand is split on two
  // trivially-sliced dims (T, over the same devices as the ids' batch dims) and one passthrough
  // dim, the updates are replicated. Keeping the operand's T split would mean gathering the ids
  // and scattering all the updates into each shard; XLA's partial grouping instead gathers the
  // operand's T dims (f32[7,4,1,3] per device), keeps the ids where they are, scatters each
  // device's slice of the updates, sums over the ids' groups and slices the T dims back — the
  // smaller footprint, 536 bytes against 816 (XLA's
  // ScatterMergedOperandPassthroughAndIndexPassthrough_PartialGrouping, uneven here: 7 rows and 9
  // updates over 2).
  void scatterPartialGroupingGathersTheTrivialDims() {
    const std::string hlo = std::string("HloModule s, num_partitions=8\n") + kAdd + R"(
ENTRY main {
  op = f32[7,4,2,3] parameter(0), sharding={devices=[2,2,2,1]<=[8]}
  idx = s32[2,9,4] parameter(1), sharding={devices=[1,2,2,2]<=[8] last_tile_dim_replicate}
  upd = f32[9,4,2,3] parameter(2), sharding={replicated}
  ROOT sc = f32[7,4,2,3] scatter(op, idx, upd), to_apply=add, update_window_dims={2,3}, inserted_window_dims={0,1},
    scatter_dims_to_operand_dims={0,1}, index_vector_dim=0, sharding={devices=[2,2,2,1]<=[8]}
}
)";
    std::string why;
    auto r = Run(hlo, 8, -2, 8, &why);
    QVERIFY2(r.has_value(), why.c_str());
    const Instruction* s = Only(*r->module, Opcode::kScatter);
    QVERIFY(s);
    QCOMPARE(s->shape().ToString(false), std::string("f32[7,4,1,3]"));
    QCOMPARE(s->operand(1)->opcode(), Opcode::kParameter);  // the ids are not moved
    QCOMPARE(s->operand(1)->shape().ToString(false), std::string("s32[2,5,2]"));
    QCOMPARE(s->operand(2)->shape().ToString(false), std::string("f32[5,2,1,3]"));
    const Instruction* ar = Only(*r->module, Opcode::kAllReduce);
    QVERIFY(ar);
    QCOMPARE(ar->replica_groups.groups, (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}}));
    for (const Instruction* ag : Find(*r->module, Opcode::kAllGather))
      QCOMPARE(ag->shape().type, PrimitiveType::kF32);  // only the operand's T dims are gathered
    QCOMPARE(r->module->entry()->root()->opcode(), Opcode::kDynamicSlice);
    QCOMPARE(r->module->entry()->root()->shape().ToString(false), std::string("f32[4,2,1,3]"));
  }

  // Peak memory first: a table split on V (trivially sliced, 4 ways) and on D (passthrough, 2
  // ways), the ids split on their batch over D's devices. The table keeps its V split and gathers
  // only D (f32[2,16] per device); each device gathers its ids from its rows, masks the others and
  // an all-reduce over the V tiles sums them (XLA's trivial-slice strategy with the other operand
  // dims replicated in its groups, GatherPartitionedOnTrivialSliceDimsForceIndexParallel). Gathering
  // V instead would leave a [1,16,8] result to all-gather along D: a larger footprint.
  void gatherTrivialSliceDimsKeptBesideAPassthroughSplit() {
    const std::string hlo = R"(
HloModule g, num_partitions=8
ENTRY main {
  table = f32[7,16] parameter(0), sharding={devices=[4,2]<=[2,4]T(1,0)}
  ids = s32[2,16,1] parameter(1), sharding={devices=[2,1,1,4]<=[8] last_tile_dim_replicate}
  ROOT g = f32[2,16,16] gather(table, ids), offset_dims={2}, collapsed_slice_dims={0}, start_index_map={0},
    index_vector_dim=2, slice_sizes={1,16}, sharding={devices=[2,1,1,4]<=[8] last_tile_dim_replicate}
}
)";
    std::string why;
    auto r = Run(hlo, 8, -3, 9, &why);
    QVERIFY2(r.has_value(), why.c_str());
    QCOMPARE(CountCollectives(*r->module), 2);
    const Instruction* ag = Only(*r->module, Opcode::kAllGather);
    QVERIFY(ag);
    QCOMPARE(ag->shape().ToString(false), std::string("f32[2,16]"));
    const Instruction* g = Only(*r->module, Opcode::kGather);
    QVERIFY(g);
    QCOMPARE(g->shape().ToString(false), std::string("f32[1,16,16]"));
    const Instruction* ar = Only(*r->module, Opcode::kAllReduce);
    QVERIFY(ar);
    QCOMPARE(ar->replica_groups.groups, (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
    QCOMPARE(ar->shape().ToString(false), std::string("f32[1,16,16]"));
  }

  // Equal footprints, then the ids split over the most devices: the operand is split on a
  // passthrough dim over device halves, the ids on their batch over the same halves, 4 copies
  // each; the result is replicated, so every plan ends in the same all-gather. Gathering the ids
  // (each device looking up all 6 rows) is fewer bytes, but XLA's merged strategy keeps the
  // operand split and moves the ids onto its copies instead: one collective-permute of the ids'
  // shard, each device gathers 3 rows of its half of the columns (XLA's
  // GatherMergedOperandPassthroughAndIndexPassthrough). The operand is never moved.
  void gatherIdsSplitOverTheOperandsCopies() {
    const std::string hlo = R"(
HloModule g, num_partitions=8
ENTRY main {
  op = f32[6,4,2,3] parameter(0), sharding={devices=[1,1,2,1,4]<=[8] last_tile_dim_replicate}
  idx = s32[2,6,4] parameter(1), sharding={devices=[1,2,1,4]<=[8] last_tile_dim_replicate}
  ROOT g = f32[6,4,2,3] gather(op, idx), offset_dims={2,3}, collapsed_slice_dims={0,1}, start_index_map={0,1},
    index_vector_dim=0, slice_sizes={1,1,2,3}, sharding={replicated}
}
)";
    std::string why;
    auto r = Run(hlo, 8, -2, 7, &why);
    QVERIFY2(r.has_value(), why.c_str());
    const Instruction* cp = Only(*r->module, Opcode::kCollectivePermute);
    QVERIFY(cp);
    QCOMPARE(cp->shape().ToString(false), std::string("s32[2,3,4]"));
    const Instruction* g = Only(*r->module, Opcode::kGather);
    QVERIFY(g);
    QCOMPARE(g->operand(0)->opcode(), Opcode::kParameter);
    QCOMPARE(g->operand(0)->shape().ToString(false), std::string("f32[6,4,1,3]"));
    QCOMPARE(g->operand(1), cp);
    QCOMPARE(g->shape().ToString(false), std::string("f32[3,4,1,3]"));
    QCOMPARE(Find(*r->module, Opcode::kAllGather).size(), size_t{2});  // the result: rows, then columns
    QCOMPARE(CountCollectives(*r->module), 3);
  }

  // The same preference for a scatter-add into a large operand split on its trivially sliced rows
  // (4 ways, 2 copies each), ids and updates split alike: rather than gathering all the ids and
  // updates into every row shard (no reduction needed), the ids are split over each shard's 2
  // copies — a partial split, 4 tiles moved to 2 (the largest split the copies can hold) — each
  // copy scatters half of them and an all-reduce over the pairs sums (XLA's
  // ScatterPreferTrivialIfSmallerThanIndices, where XLA all-reduces a 400 MB shard to save 100 KB
  // of indices; here f32[4,4,256] per device against 384 B of ids). The footprints differ by less
  // than 1/32, so XLA's memory order keeps them equal.
  void scatterIdsSplitOverTheOperandsCopies() {
    const std::string hlo = std::string("HloModule s, num_partitions=8\n") + kAdd + R"(
ENTRY main {
  op = f32[4,16,256] parameter(0), sharding={devices=[1,4,1,2]<=[8] last_tile_dim_replicate}
  idx = s32[4,16,3] parameter(1), sharding={devices=[1,4,1,2]<=[8] last_tile_dim_replicate}
  upd = f32[4,16] parameter(2), sharding={devices=[1,4,2]<=[8] last_tile_dim_replicate}
  ROOT sc = f32[4,16,256] scatter(op, idx, upd), update_window_dims={}, inserted_window_dims={0,1,2},
    scatter_dims_to_operand_dims={0,1,2}, index_vector_dim=2, to_apply=add,
    sharding={devices=[1,4,1,2]<=[8] last_tile_dim_replicate}
}
)";
    std::string why;
    auto r = Run(hlo, 8, -2, 17, &why);
    QVERIFY2(r.has_value(), why.c_str());
    const Instruction* s = Only(*r->module, Opcode::kScatter);
    QVERIFY(s);
    QCOMPARE(s->shape().ToString(false), std::string("f32[4,4,256]"));
    QCOMPARE(s->operand(1)->shape().ToString(false), std::string("s32[4,8,3]"));
    QCOMPARE(s->operand(2)->shape().ToString(false), std::string("f32[4,8]"));
    const Instruction* ar = Only(*r->module, Opcode::kAllReduce);
    QVERIFY(ar);
    QCOMPARE(ar->replica_groups.groups, (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
    QCOMPARE(ar->shape().ToString(false), std::string("f32[4,4,256]"));
    for (const Instruction* ag : Find(*r->module, Opcode::kAllGather))  // ids and updates only, never the operand
      QVERIFY2(ag->shape().ElementCount() <= 4 * 16 * 3, ag->shape().ToString(false).c_str());
  }

  // Equal footprints and index splits, then the operand moved least and the ids next: a
  // replicated operand, ids split on both batch dims and on index_vector_dim (which must be made
  // whole), updates split on their first batch dim and, over other devices, the second. Moving the
  // ids onto the updates' layout (a permute and a gather) is fewer bytes; XLA's index passthrough
  // takes the ids' layout as given: only their index_vector_dim is all-gathered (s32[3,2,2]) and
  // the updates' shard (f32[3,2,5]) is moved by one collective-permute (XLA's
  // IndexPassthroughScatterPartitionedIndexVectorDim; uneven here).
  void scatterIdsKeptUpdatesMoved() {
    const std::string hlo = std::string("HloModule s, num_partitions=8\n") + kAdd + R"(
ENTRY main {
  op = f32[3,7,5] parameter(0), sharding={replicated}
  idx = s32[6,2,4] parameter(1), sharding={devices=[2,2,2]<=[8]}
  upd = f32[6,4,5] parameter(2), sharding={devices=[2,2,1,2]<=[8] last_tile_dim_replicate}
  ROOT sc = f32[3,7,5] scatter(op, idx, upd), to_apply=add, update_window_dims={2}, inserted_window_dims={0,1},
    scatter_dims_to_operand_dims={0,1}, index_vector_dim=1, sharding={replicated}
}
)";
    std::string why;
    auto r = Run(hlo, 8, -2, 8, &why);
    QVERIFY2(r.has_value(), why.c_str());
    const Instruction* ag = Only(*r->module, Opcode::kAllGather);
    QVERIFY(ag);
    QCOMPARE(ag->shape().ToString(false), std::string("s32[3,2,2]"));
    QCOMPARE(ag->operand(0)->opcode(), Opcode::kParameter);
    const Instruction* cp = Only(*r->module, Opcode::kCollectivePermute);
    QVERIFY(cp);
    QCOMPARE(cp->shape().ToString(false), std::string("f32[3,2,5]"));
    const Instruction* s = Only(*r->module, Opcode::kScatter);
    QVERIFY(s);
    QCOMPARE(s->operand(1), ag);
    QCOMPARE(s->operand(2), cp);
    QVERIFY(!Find(*r->module, Opcode::kAllReduce).empty());
  }
};

QTEST_APPLESS_MAIN(SpmdGatherTest)
#include "test_spmd_gather.moc"
