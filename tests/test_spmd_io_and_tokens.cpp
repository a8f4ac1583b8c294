// Host transfers, tokens and manually partitioned code in the SPMD partitioner
// (partitioner/spmd/handlers/io_and_tokens.cpp, XLA's HandleInfeed / HandleOutfeed /
// HandlePartitionId and its manual collective-permute): per-partition infeed and outfeed shapes, the
// conditional over partition-id of an uneven tiling (its branches reading or sending each device's
// unpadded shape), the single-device outfeed, tokens threaded through unchanged, no collectives
// where XLA inserts none; partition-id and collective-permute kept in manual code; and the
// numerical check and the simulator on programs that read infeed (skipped with a reason, not a
// failure).
#include <QtTest>

#include <optional>
#include <string>
#include <vector>

#include "app/pipeline/pipeline.h"
#include "core/eval/evaluator.h"
#include "core/eval/numeric_verify.h"
#include "core/ir/hlo_text.h"
#include "partitioner/spmd/spmd_partitioner.h"
#include "tests/spmd_test_support.h"

using namespace shardscope;
using namespace shardscope::sim;

namespace {

using testing::Find;

std::unique_ptr<Module> Parse(const std::string& text) {
  auto m = ParseHloModule(text);
  if (!m.ok()) qFatal("%s", m.error().message.c_str());
  return std::move(m).value();
}

// Partitions `text` over `devices`; the error's message on failure (as a QFAIL would show it).
std::optional<PartitionResult> PartitionText(const std::string& text, int64_t devices, std::string* why) {
  auto m = ParseHloModule(text);
  if (!m.ok()) {
    *why = "parse: " + m.error().message;
    return std::nullopt;
  }
  SpmdOptions o;
  o.num_partitions = devices;
  auto r = PartitionModule(**m, o);
  if (!r.ok()) {
    *why = "partition: " + r.error().message;
    return std::nullopt;
  }
  return std::move(r).value();
}

std::string ShapeText(const Instruction* i) { return i ? i->shape().ToString(false) : std::string("(none)"); }

bool HasCollectives(const Module& m) {
  for (const auto& c : m.computations())
    for (const auto& i : c->instructions())
      if (IsCollective(i->opcode()) || i->opcode() == Opcode::kReduceScatter) return true;
  return false;
}

std::optional<std::string> RawAttr(const Instruction& i, const std::string& key) {
  for (const RawAttribute& a : i.raw_attributes)
    if (a.key == key) return a.value;
  return std::nullopt;
}

const Instruction* Operand(const Instruction* i, int64_t k) {
  return i && k < i->operand_count() ? i->operand(k) : nullptr;
}

// XLA's UnevenTiledInfeed: f32[9,2] split in 2 along dim 0 (shards of 5 and 4).
const char* kUnevenInfeed = R"(HloModule module

ENTRY entry {
  token0 = token[] after-all(), sharding={maximal device=0}
  infeed = (f32[9,2], token[]) infeed(token0), sharding={{devices=[2,1]<=[2]}, {maximal device=0}}
  ROOT infeed.data = f32[9,2] get-tuple-element(infeed), index=0, sharding={devices=[2,1]<=[2]}
}
)";

}  // namespace

class TestSpmdIoAndTokens : public QObject {
  Q_OBJECT
 private slots:
  // Evenly tiled data: every device reads its shard, no conditional, no collective (XLA's
  // TiledInfeed, before its maximal output).
  void evenInfeedReadsEachShard() {
    std::string why;
    auto r = PartitionText(R"(HloModule m
ENTRY e {
  t = token[] after-all()
  in = (f32[8,2], token[]) infeed(t), infeed_config="cfg", sharding={{devices=[2,1]<=[2]}, {maximal device=0}}
  ROOT d = f32[8,2] get-tuple-element(in), index=0, sharding={devices=[2,1]<=[2]}
})", 2, &why);
    QVERIFY2(r, why.c_str());
    const auto infeeds = Find(*r->module, Opcode::kInfeed);
    QCOMPARE(infeeds.size(), size_t{1});
    QCOMPARE(ShapeText(infeeds[0]), std::string("(f32[4,2], token[])"));
    QCOMPARE(RawAttr(*infeeds[0], "infeed_config").value_or(""), std::string("\"cfg\""));
    QVERIFY(Find(*r->module, Opcode::kConditional).empty());
    QVERIFY(!HasCollectives(*r->module));
    QCOMPARE(ShapeText(r->module->entry()->root()), std::string("f32[4,2]"));
    QVERIFY(r->replicated_fallbacks.empty());
  }

  // Replicated and single-device data is read whole on every device (XLA: "evenly partitioned").
  void wholeDataInfeedReadsTheWhole_data() {
    QTest::addColumn<QString>("sharding");
    QTest::newRow("replicated") << "{{replicated}, {replicated}}";
    QTest::newRow("maximal") << "{{maximal device=1}, {maximal device=0}}";
    QTest::newRow("manual") << "{{manual}, {manual}}";
  }
  void wholeDataInfeedReadsTheWhole() {
    QFETCH(QString, sharding);
    std::string why;
    auto r = PartitionText(R"(HloModule m
ENTRY e {
  t = token[] after-all()
  ROOT in = (f32[8,2], token[]) infeed(t), sharding=)" + sharding.toStdString() + R"(
})", 2, &why);
    QVERIFY2(r, why.c_str());
    const auto infeeds = Find(*r->module, Opcode::kInfeed);
    QCOMPARE(infeeds.size(), size_t{1});
    QCOMPARE(ShapeText(infeeds[0]), std::string("(f32[8,2], token[])"));
    QVERIFY(Find(*r->module, Opcode::kConditional).empty());
    QVERIFY(!HasCollectives(*r->module));
  }

  // XLA's UnevenTiledInfeed: a conditional on convert(partition-id) (each device a branch of its
  // own); branch 0 reads f32[5,2] as is, branch 1 reads f32[4,2] and pads it to f32[5,2].
  void unevenInfeedBranchesOnPartitionId() {
    std::string why;
    auto r = PartitionText(kUnevenInfeed, 2, &why);
    QVERIFY2(r, why.c_str());
    const Instruction* root = r->module->entry()->root();
    QCOMPARE(root->opcode(), Opcode::kGetTupleElement);
    QCOMPARE(ShapeText(root), std::string("f32[5,2]"));
    const Instruction* cond = Operand(root, 0);
    QVERIFY(cond && cond->opcode() == Opcode::kConditional);
    QCOMPARE(ShapeText(cond), std::string("(f32[5,2], token[])"));
    QCOMPARE(cond->operand_count(), int64_t{3});
    QCOMPARE(cond->operand(0)->opcode(), Opcode::kConvert);
    QCOMPARE(ShapeText(cond->operand(0)), std::string("s32[]"));
    QCOMPARE(cond->operand(0)->operand(0)->opcode(), Opcode::kPartitionId);
    // The token reaches both branches unchanged.
    QCOMPARE(cond->operand(1)->opcode(), Opcode::kAfterAll);
    QCOMPARE(cond->operand(2), cond->operand(1));
    QCOMPARE(cond->called_computations().size(), size_t{2});
    const Instruction* b0 = cond->called_computations()[0]->root();
    QCOMPARE(b0->opcode(), Opcode::kInfeed);
    QCOMPARE(ShapeText(b0), std::string("(f32[5,2], token[])"));
    QCOMPARE(Operand(b0, 0)->opcode(), Opcode::kParameter);
    const Instruction* b1 = cond->called_computations()[1]->root();
    QCOMPARE(b1->opcode(), Opcode::kTuple);
    QCOMPARE(ShapeText(b1), std::string("(f32[5,2], token[])"));
    const Instruction* pad = Operand(b1, 0);
    QVERIFY(pad && pad->opcode() == Opcode::kPad);
    QCOMPARE(pad->padding[0].high, int64_t{1});
    const Instruction* in1 = Operand(pad, 0)->operand(0);
    QCOMPARE(in1->opcode(), Opcode::kInfeed);
    QCOMPARE(ShapeText(in1), std::string("(f32[4,2], token[])"));
    QCOMPARE(Operand(Operand(b1, 1), 0), in1);  // the token out of the branch is its infeed's
    QVERIFY(!HasCollectives(*r->module));
    // The program prints and parses back.
    QVERIFY(ParseHloModule(PrintHloModule(*r->module)).ok());
  }

  // Fewer distinct shapes than devices: the branch index is a table of partition-id. f32[10,2]
  // over 4 devices: shards of 3, 3, 3 and 1 rows.
  void unevenInfeedOverATable() {
    std::string why;
    auto r = PartitionText(R"(HloModule m
ENTRY e {
  t = token[] after-all()
  in = (f32[10,2], token[]) infeed(t), sharding={{devices=[4,1]<=[4]}, {maximal device=0}}
  ROOT d = f32[10,2] get-tuple-element(in), index=0, sharding={devices=[4,1]<=[4]}
})", 4, &why);
    QVERIFY2(r, why.c_str());
    const auto conds = Find(*r->module, Opcode::kConditional);
    QCOMPARE(conds.size(), size_t{1});
    QCOMPARE(conds[0]->called_computations().size(), size_t{2});
    QCOMPARE(ShapeText(conds[0]), std::string("(f32[3,2], token[])"));
    const Instruction* index = conds[0]->operand(0);
    QCOMPARE(index->opcode(), Opcode::kReshape);
    const Instruction* ds = index->operand(0);
    QCOMPARE(ds->opcode(), Opcode::kDynamicSlice);
    QCOMPARE(ds->operand(0)->literal.values, (std::vector<double>{0, 0, 0, 1}));
    QCOMPARE(ds->operand(1)->opcode(), Opcode::kPartitionId);
    std::vector<std::string> read;
    for (const Instruction* i : Find(*r->module, Opcode::kInfeed)) read.push_back(ShapeText(i));
    QCOMPARE(read, (std::vector<std::string>{"(f32[3,2], token[])", "(f32[1,2], token[])"}));
  }

  // XLA's UnevenTiledTupleInfeed: the tiled leaf of a nested tuple padded, the replicated one not.
  void unevenTupleInfeedPadsTheTiledLeaf() {
    std::string why;
    auto r = PartitionText(R"(HloModule m
ENTRY e {
  t = token[] after-all(), sharding={maximal device=0}
  in = ((f32[9,2], f32[2]), token[]) infeed(t), sharding={{devices=[2,1]<=[2]}, {replicated}, {maximal device=0}}
  ROOT d = (f32[9,2], f32[2]) get-tuple-element(in), index=0, sharding={{devices=[2,1]<=[2]}, {replicated}}
})", 2, &why);
    QVERIFY2(r, why.c_str());
    const auto conds = Find(*r->module, Opcode::kConditional);
    QCOMPARE(conds.size(), size_t{1});
    QCOMPARE(ShapeText(conds[0]), std::string("((f32[5,2], f32[2]), token[])"));
    const Instruction* b1 = conds[0]->called_computations()[1]->root();
    QCOMPARE(ShapeText(b1), std::string("((f32[5,2], f32[2]), token[])"));
    const Instruction* data = Operand(b1, 0);
    QCOMPARE(data->opcode(), Opcode::kTuple);
    QCOMPARE(Operand(data, 0)->opcode(), Opcode::kPad);
    QCOMPARE(Operand(data, 1)->opcode(), Opcode::kGetTupleElement);
    QCOMPARE(ShapeText(Operand(data, 1)), std::string("f32[2]"));
    QCOMPARE(Find(*r->module, Opcode::kPad).size(), size_t{1});
    QCOMPARE(ShapeText(r->module->entry()->root()), std::string("(f32[5,2], f32[2])"));
    QVERIFY(!HasCollectives(*r->module));
  }

  // A TPU training loop: the infeed inside the while body reads the shard each iteration.
  void infeedInsideALoopBody() {
    std::string why;
    auto r = PartitionText(R"(HloModule m
cond {
  s = (s32[], f32[8,4], token[]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(3)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  s = (s32[], f32[8,4], token[]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  acc = f32[8,4] get-tuple-element(s), index=1
  t = token[] get-tuple-element(s), index=2
  in = (f32[8,4], token[]) infeed(t), sharding={{devices=[2,1]<=[2]}, {maximal device=0}}
  x = f32[8,4] get-tuple-element(in), index=0, sharding={devices=[2,1]<=[2]}
  t2 = token[] get-tuple-element(in), index=1
  sum = f32[8,4] add(acc, x), sharding={devices=[2,1]<=[2]}
  one = s32[] constant(1)
  j = s32[] add(i, one)
  ROOT r = (s32[], f32[8,4], token[]) tuple(j, sum, t2), sharding={{replicated}, {devices=[2,1]<=[2]}, {maximal device=0}}
}
ENTRY e {
  zero = s32[] constant(0)
  p = f32[8,4] parameter(0), sharding={devices=[2,1]<=[2]}
  t = token[] after-all()
  init = (s32[], f32[8,4], token[]) tuple(zero, p, t), sharding={{replicated}, {devices=[2,1]<=[2]}, {maximal device=0}}
  ROOT w = (s32[], f32[8,4], token[]) while(init), condition=cond, body=body, sharding={{replicated}, {devices=[2,1]<=[2]}, {maximal device=0}}
})", 2, &why);
    QVERIFY2(r, why.c_str());
    const auto infeeds = Find(*r->module, Opcode::kInfeed);
    QCOMPARE(infeeds.size(), size_t{1});
    QCOMPARE(ShapeText(infeeds[0]), std::string("(f32[4,4], token[])"));
    QVERIFY(infeeds[0]->parent() != r->module->entry());
    QVERIFY(!HasCollectives(*r->module));
  }

  // XLA's OutfeedTupleEvenlyTiled: each device sends its shards; outfeed_shape says so and keeps
  // the original's layouts.
  void evenOutfeedSendsShards() {
    std::string why;
    auto r = PartitionText(R"(HloModule m
ENTRY e {
  t = token[] after-all()
  data = (f32[1024,2], f32[2]) parameter(0), sharding={{devices=[2,1]<=[2]}, {devices=[2]<=[2]}}
  ROOT o = token[] outfeed(data, t), outfeed_shape=(f32[1024,2]{0,1}, f32[2]{0}), sharding={{devices=[2,1]<=[2]}, {devices=[2]<=[2]}}
})", 2, &why);
    QVERIFY2(r, why.c_str());
    const Instruction* root = r->module->entry()->root();
    QCOMPARE(root->opcode(), Opcode::kOutfeed);
    QCOMPARE(ShapeText(root), std::string("token[]"));
    QCOMPARE(ShapeText(Operand(root, 0)), std::string("(f32[512,2], f32[1])"));
    QCOMPARE(Operand(root, 0)->opcode(), Opcode::kParameter);
    QCOMPARE(Operand(root, 1)->opcode(), Opcode::kAfterAll);
    QCOMPARE(RawAttr(*root, "outfeed_shape").value_or(""), std::string("(f32[512,2]{0,1}, f32[1]{0})"));
    QVERIFY(!HasCollectives(*r->module));
  }

  // XLA's OutfeedEvenlyTiled / OutfeedReplicated: a sharded operand is resharded to the outfeed's
  // sharding first (here gathered), then sent; a replicated leaf is sent whole.
  void outfeedReshardsItsOperand() {
    std::string why;
    auto r = PartitionText(R"(HloModule m
ENTRY e {
  t = token[] after-all()
  data = (f32[16,2], f32[2]) parameter(0), sharding={{devices=[2,1]<=[2]}, {replicated}}
  ROOT o = token[] outfeed(data, t), sharding={{replicated}, {replicated}}
})", 2, &why);
    QVERIFY2(r, why.c_str());
    const Instruction* root = r->module->entry()->root();
    QCOMPARE(root->opcode(), Opcode::kOutfeed);
    QCOMPARE(ShapeText(Operand(root, 0)), std::string("(f32[16,2], f32[2])"));
    QCOMPARE(Find(*r->module, Opcode::kAllGather).size(), size_t{1});
  }

  // XLA's OutfeedSingleDevice: conditional(partition-id == 0, (data, token), (data, token)); the
  // device sends, the others make a token by after-all.
  void singleDeviceOutfeed() {
    std::string why;
    auto r = PartitionText(R"(HloModule m
ENTRY e {
  t = token[] after-all()
  data = f32[1024] parameter(0), sharding={maximal device=0}
  ROOT o = token[] outfeed(data, t), sharding={maximal device=0}
})", 2, &why);
    QVERIFY2(r, why.c_str());
    const Instruction* root = r->module->entry()->root();
    QCOMPARE(root->opcode(), Opcode::kConditional);
    QCOMPARE(ShapeText(root), std::string("token[]"));
    const Instruction* pred = Operand(root, 0);
    QCOMPARE(pred->opcode(), Opcode::kCompare);
    QCOMPARE(pred->comparison, ComparisonDirection::kEq);
    QCOMPARE(Operand(pred, 0)->opcode(), Opcode::kPartitionId);
    QCOMPARE(Operand(pred, 1)->literal.values, (std::vector<double>{0}));
    QCOMPARE(Operand(root, 1)->opcode(), Opcode::kTuple);
    QCOMPARE(Operand(root, 2), Operand(root, 1));
    QCOMPARE(ShapeText(Operand(root, 1)), std::string("(f32[1024], token[])"));
    QCOMPARE(root->called_computations().size(), size_t{2});
    const Instruction* sends = root->called_computations()[0]->root();
    QCOMPARE(sends->opcode(), Opcode::kOutfeed);
    QCOMPARE(ShapeText(Operand(sends, 0)), std::string("f32[1024]"));
    QCOMPARE(Operand(sends, 0)->opcode(), Opcode::kGetTupleElement);
    QCOMPARE(Operand(sends, 1)->opcode(), Opcode::kGetTupleElement);
    QCOMPARE(root->called_computations()[1]->root()->opcode(), Opcode::kAfterAll);
    QCOMPARE(Find(*r->module, Opcode::kOutfeed).size(), size_t{1});
    QVERIFY(!HasCollectives(*r->module));
  }

  // An uneven tiling sends each device's shard without its padding: f32[9,2] over 2, the second
  // device's 4 rows sliced off its padded shard of 5.
  void unevenOutfeedSlicesOffThePadding() {
    std::string why;
    auto r = PartitionText(R"(HloModule m
ENTRY e {
  t = token[] after-all()
  data = f32[9,2] parameter(0), sharding={devices=[2,1]<=[2]}
  ROOT o = token[] outfeed(data, t), outfeed_shape=f32[9,2]{1,0}, sharding={devices=[2,1]<=[2]}
})", 2, &why);
    QVERIFY2(r, why.c_str());
    const Instruction* root = r->module->entry()->root();
    QCOMPARE(root->opcode(), Opcode::kConditional);
    QCOMPARE(Operand(root, 0)->opcode(), Opcode::kConvert);
    QCOMPARE(ShapeText(Operand(root, 1)), std::string("(f32[5,2], token[])"));
    QCOMPARE(root->called_computations().size(), size_t{2});
    const Instruction* o0 = root->called_computations()[0]->root();
    const Instruction* o1 = root->called_computations()[1]->root();
    QCOMPARE(o0->opcode(), Opcode::kOutfeed);
    QCOMPARE(o1->opcode(), Opcode::kOutfeed);
    QCOMPARE(ShapeText(Operand(o0, 0)), std::string("f32[5,2]"));
    QCOMPARE(ShapeText(Operand(o1, 0)), std::string("f32[4,2]"));
    QCOMPARE(Operand(o1, 0)->opcode(), Opcode::kSlice);
    QCOMPARE(RawAttr(*o0, "outfeed_shape").value_or(""), std::string("f32[5,2]{1,0}"));
    QCOMPARE(RawAttr(*o1, "outfeed_shape").value_or(""), std::string("f32[4,2]{1,0}"));
    QVERIFY(!HasCollectives(*r->module));
  }

  // XLA's OutfeedChainedManualPartitioned: manual outfeeds stay as written, chained by their tokens.
  void manualOutfeedsStayChained() {
    std::string why;
    auto r = PartitionText(R"(HloModule Test
ENTRY %entry (p0: f32[8], p1: f32[1]) -> (f32[1], token[]) {
  %p1 = f32[1]{0} parameter(1), sharding={replicated}
  %p0 = f32[8]{0} parameter(0), sharding={manual}
  %tuple.1 = (f32[8]{0}) tuple(f32[8]{0} %p0), sharding={{manual}}
  %constant.8 = u32[2]{0} constant({3, 12})
  %tuple.10 = (u32[2]{0}) tuple(u32[2]{0} %constant.8), sharding={{manual}}
  %aa.1 = token[] after-all()
  %outfeed.1 = token[] outfeed((u32[2]{0}) %tuple.10, token[] %aa.1), outfeed_shape=(u32[2]{0}), sharding={{manual}, {manual}}
  %outfeed.2 = token[] outfeed((f32[8]{0}) %tuple.1, token[] %outfeed.1), outfeed_shape=(f32[8]{0}), sharding={{manual}, {manual}}
  ROOT %tuple.15 = (f32[1]{0}, token[]) tuple(f32[1]{0} %p1, token[] %outfeed.2), sharding={{replicated}, {manual}}
})", 8, &why);
    QVERIFY2(r, why.c_str());
    const auto outfeeds = Find(*r->module, Opcode::kOutfeed);
    QCOMPARE(outfeeds.size(), size_t{2});
    QCOMPARE(ShapeText(Operand(outfeeds[0], 0)), std::string("(u32[2])"));
    QCOMPARE(ShapeText(Operand(outfeeds[1], 0)), std::string("(f32[8])"));
    QCOMPARE(Operand(outfeeds[0], 1)->opcode(), Opcode::kAfterAll);
    QCOMPARE(Operand(outfeeds[1], 1), outfeeds[0]);
    const Instruction* root = r->module->entry()->root();
    QCOMPARE(Operand(root, 1), outfeeds[1]);
    QVERIFY(Find(*r->module, Opcode::kConditional).empty());
    QVERIFY(!HasCollectives(*r->module));
  }

  // after-all joins its tokens; an infeed's token feeds an outfeed unchanged.
  void tokensThreadThrough() {
    std::string why;
    auto r = PartitionText(R"(HloModule m
ENTRY e {
  a = token[] after-all()
  b = token[] after-all()
  t = token[] after-all(a, b)
  in = (f32[8], token[]) infeed(t), sharding={{devices=[2]<=[2]}, {maximal device=0}}
  x = f32[8] get-tuple-element(in), index=0, sharding={devices=[2]<=[2]}
  t2 = token[] get-tuple-element(in), index=1, sharding={maximal device=0}
  y = f32[8] multiply(x, x), sharding={devices=[2]<=[2]}
  ROOT o = token[] outfeed(y, t2), sharding={devices=[2]<=[2]}
})", 2, &why);
    QVERIFY2(r, why.c_str());
    const auto joins = Find(*r->module, Opcode::kAfterAll);
    QCOMPARE(joins.size(), size_t{3});
    QCOMPARE(joins[2]->operand_count(), int64_t{2});
    QCOMPARE(joins[2]->operand(0), joins[0]);
    QCOMPARE(joins[2]->operand(1), joins[1]);
    const Instruction* infeed = Find(*r->module, Opcode::kInfeed).at(0);
    QCOMPARE(Operand(infeed, 0), joins[2]);
    const Instruction* out = r->module->entry()->root();
    QCOMPARE(out->opcode(), Opcode::kOutfeed);
    QCOMPARE(ShapeText(Operand(out, 0)), std::string("f32[4]"));
    const Instruction* token = Operand(out, 1);
    QCOMPARE(token->opcode(), Opcode::kGetTupleElement);
    QCOMPARE(token->tuple_index, int64_t{1});
    QCOMPARE(Operand(token, 0), infeed);
    QVERIFY(!HasCollectives(*r->module));
  }

  // XLA's ManualPartitionId: partition-id in manual code stays; elsewhere it is refused.
  void partitionIdOnlyInManualCode() {
    std::string why;
    auto r = PartitionText(R"(HloModule m
ENTRY e {
  ROOT id = u32[] partition-id(), sharding={manual}
})", 8, &why);
    QVERIFY2(r, why.c_str());
    QCOMPARE(r->module->entry()->root()->opcode(), Opcode::kPartitionId);
    QCOMPARE(r->module->entry()->instruction_count(), int64_t{1});
    QVERIFY(!HasCollectives(*r->module));
    for (const char* sharding : {", sharding={replicated}", ""}) {
      auto refused = PartitionText(std::string(R"(HloModule m
ENTRY e {
  ROOT id = u32[] partition-id())") + sharding + "\n}\n", 8, &why);
      QVERIFY(!refused);
      QVERIFY2(QString::fromStdString(why).contains("partition-id outside manually partitioned code"), why.c_str());
    }
  }

  // XLA's PartitionCollectivePermute: in a manual subgroup (4 manual groups of 2 devices, the data
  // split over the 2), the permute moves each device's s32[1] with its own pairs; the program
  // computes what the original does.
  void collectivePermuteInAManualSubgroup() {
    const std::string hlo = R"(HloModule jit_f, num_partitions=8
ENTRY main.12 {
  Arg_0.1 = s32[8]{0} parameter(0), sharding={devices=[8]<=[8]}
  copy.2 = s32[8]{0} copy(Arg_0.1), sharding={devices=[4,2]<=[8] last_tile_dim_replicate}
  custom-call.3 = s32[2]{0} custom-call(copy.2), custom_call_target="SPMDFullToShardShape", sharding={devices=[1,4,2]<=[8] last_tile_dims={manual, replicated}}
  copy.1 = s32[2]{0} copy(custom-call.3), sharding={devices=[2,4]<=[4,2]T(1,0) last_tile_dims={manual}}
  multiply.0 = s32[2]{0} multiply(copy.1, copy.1), sharding={devices=[2,4]<=[4,2]T(1,0) last_tile_dims={manual}}
  collective-permute.0 = s32[2]{0} collective-permute(multiply.0), channel_id=1, source_target_pairs={{0,6},{2,0},{4,2},{6,4},{1,7},{3,1},{5,3},{7,5}}, sharding={devices=[2,4]<=[4,2]T(1,0) last_tile_dims={manual}}
  ROOT custom-call.11 = s32[8]{0} custom-call(collective-permute.0), custom_call_target="SPMDShardToFullShape", sharding={devices=[8]<=[8]}
})";
    std::string why;
    auto r = testing::PartitionAndVerify(hlo, 8, &why);
    QVERIFY2(r, why.c_str());
    const auto permutes = Find(*r->module, Opcode::kCollectivePermute);
    QCOMPARE(permutes.size(), size_t{1});
    QCOMPARE(ShapeText(permutes[0]), std::string("s32[1]"));
    QCOMPARE(permutes[0]->source_target_pairs,
             (std::vector<std::pair<int64_t, int64_t>>{{0, 6}, {2, 0}, {4, 2}, {6, 4}, {1, 7}, {3, 1}, {5, 3}, {7, 5}}));
    QCOMPARE(permutes[0]->channel_id, std::optional<int64_t>(1));
    QVERIFY(r->replicated_fallbacks.empty());
  }

  // A fully manual region: the permute runs on each device's own value, shape as written.
  void collectivePermuteInAManualRegion() {
    const std::string hlo = R"(HloModule m, num_partitions=4
ENTRY e {
  p = f32[8,3] parameter(0), sharding={devices=[4,1]<=[4]}
  s = f32[2,3] custom-call(p), custom_call_target="SPMDFullToShardShape", sharding={manual}
  c = f32[2,3] collective-permute(s), channel_id=5, source_target_pairs={{0,1},{1,2},{2,3},{3,0}}, sharding={manual}
  ROOT f = f32[8,3] custom-call(c), custom_call_target="SPMDShardToFullShape", sharding={devices=[4,1]<=[4]}
})";
    std::string why;
    auto r = testing::PartitionAndVerify(hlo, 4, &why);
    QVERIFY2(r, why.c_str());
    const auto permutes = Find(*r->module, Opcode::kCollectivePermute);
    QCOMPARE(permutes.size(), size_t{1});
    QCOMPARE(ShapeText(permutes[0]), std::string("f32[2,3]"));
    QCOMPARE(permutes[0]->source_target_pairs.size(), size_t{4});
    QVERIFY(r->collectives.empty());  // nothing inserted: the permute is the program's own
  }

  // A permute naming a device beyond the partitions is refused, naming it.
  void collectivePermuteOutsideThePartitionsIsRefused() {
    std::string why;
    auto r = PartitionText(R"(HloModule m, num_partitions=2
ENTRY e {
  p = f32[4] parameter(0), sharding={manual}
  ROOT c = f32[4] collective-permute(p), channel_id=1, source_target_pairs={{0,5}}, sharding={manual}
})", 2, &why);
    QVERIFY(!r);
    QVERIFY2(QString::fromStdString(why).contains("device 5"), why.c_str());
  }

  // The numerical check cannot run a program reading infeed (its data comes from the host): it
  // says so (skipped, with the reason) instead of failing; the simulator runs the program.
  void checkAndSimulationOfAnInfeedProgram() {
    auto m = Parse(kUnevenInfeed);
    SpmdOptions so;
    so.num_partitions = 2;
    auto part = PartitionModule(*m, so);
    QVERIFY(part.ok());
    auto why = WhyNotNumericallyVerifiable(*m);
    QVERIFY(why.has_value());
    QVERIFY(QString::fromStdString(*why).contains("infeed"));
    auto direct = VerifyPartitioned(*m, *part->module, 2, 7);
    QVERIFY(!direct.ok());
    QVERIFY2(QString::fromStdString(direct.error().message).contains("reads infeed"), direct.error().message.c_str());
    VerificationVerdict v = pipeline::Verify(*m, *part->module, 2, pipeline::VerifyOptions::Unlimited(7));
    QCOMPARE(v.state, VerificationVerdict::State::kSkipped);
    QVERIFY2(QString::fromStdString(v.reason).contains("reads infeed"), v.reason.c_str());

    // The whole pipeline: partitioned, check skipped, simulated.
    pipeline::PipelineOptions o;
    o.propagation.reset();
    o.verify = pipeline::VerifyOptions{};
    o.topology = *pipeline::SliceForMesh("tpu-v4", DeviceMesh({{"X", 2}}));
    o.simulation = SimulationOptions{};
    auto r = pipeline::RunPipeline(Parse(kUnevenInfeed), o);
    QVERIFY2(r.ok(), r.FailureText().c_str());
    QCOMPARE(r.verification.state, VerificationVerdict::State::kSkipped);
    QVERIFY(r.simulation.has_value());
    QVERIFY(r.simulation->run.summary.step_time_s > 0);
    QCOMPARE(r.simulation->run.collectives.size(), size_t{0});
  }

  // Outfeed: what the program sends is not compared, so the check is skipped as well; the
  // evaluator itself runs an outfeed (its token) rather than failing on it.
  void checkOfAnOutfeedProgramIsSkipped() {
    auto m = Parse(R"(HloModule m
ENTRY e {
  t = token[] after-all()
  data = f32[8] parameter(0), sharding={devices=[2]<=[2]}
  o = token[] outfeed(data, t), sharding={devices=[2]<=[2]}
  ROOT d = f32[8] negate(data), sharding={devices=[2]<=[2]}
})");
    SpmdOptions so;
    so.num_partitions = 2;
    auto part = PartitionModule(*m, so);
    QVERIFY(part.ok());
    VerificationVerdict v = pipeline::Verify(*m, *part->module, 2, pipeline::VerifyOptions::Unlimited(7));
    QCOMPARE(v.state, VerificationVerdict::State::kSkipped);
    QVERIFY2(QString::fromStdString(v.reason).contains("outfeed"), v.reason.c_str());
    auto args = MakeRandomArguments(*m->entry(), 3);
    auto out = Evaluate(*m, args);
    QVERIFY2(out.ok(), out.ok() ? "" : out.error().message.c_str());
  }
};

QTEST_GUILESS_MAIN(TestSpmdIoAndTokens)
#include "test_spmd_io_and_tokens.moc"
