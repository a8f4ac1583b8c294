// The all-reduce combiner (partitioner/all_reduce_combiner.h, XLA's AllReduceCombiner) and the
// collective combiner under it (partitioner/collective_combiner.h): which all-reduces become one
// (same reduction, groups and type, none depending on another, within the threshold) and which do
// not, where the combined one is placed, the record of why, and that every program computes the
// same before and after — on a hand-written SPMD program on 4 virtual devices and on the zoo's
// data-parallel MLP training step through the pipeline, with its numerical verification.
#include <QtTest>

#include <QTemporaryDir>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "app/pipeline/pipeline.h"
#include "app/pipeline/sources.h"
#include "core/eval/virtual_cluster.h"
#include "tests/spmd_test_support.h"
#include "core/ir/hlo_text.h"
#include "core/ir/replica_groups.h"
#include "core/ir/verifier.h"
#include "partitioner/all_reduce_combiner.h"
#include "tests/cli_test_support.h"

using namespace shardscope;

namespace {

constexpr int64_t kDevices = 4;

std::vector<const Instruction*> AllReduces(const Module& m) {
  std::vector<const Instruction*> out;
  for (const auto& c : m.computations())
    for (const auto& i : c->instructions())
      if (i->opcode() == Opcode::kAllReduce) out.push_back(i.get());
  return out;
}

std::vector<Tensor> Run(const Module& m) { return testing::RunOnVirtualDevices(m, kDevices, 5); }
double MaxDifference(const std::vector<Tensor>& a, const std::vector<Tensor>& b) { return testing::MaxRelativeDifference(a, b); }

// Six all-reduces over 4 partitions:
//   s1, s2, s4: sums over {0,1,2,3} of f32 arrays (24, 32 and 16 bytes), independent;
//   s3: a sum over the same groups whose operand reads s1 (it cannot join s1's combined op);
//   m1: a max over the same groups (another reduction);
//   g1: a sum over {{0,1},{2,3}} (other groups);
//   big: a sum of 4 KiB (above the 1 KiB threshold the test uses: left alone).
constexpr const char* kProgram = R"(HloModule six, num_partitions=4

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

max {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] maximum(a, b)
}

ENTRY main {
  x = f32[2,3] parameter(0)
  y = f32[8] parameter(1)
  z = f32[4] parameter(2)
  w = f32[32,32] parameter(3)
  s1 = f32[2,3] all-reduce(x), channel_id=1, replica_groups={{0,1,2,3}}, use_global_device_ids=true, to_apply=add
  s2 = f32[8] all-reduce(y), channel_id=2, replica_groups={{0,1,2,3}}, use_global_device_ids=true, to_apply=add
  m1 = f32[8] all-reduce(y), channel_id=3, replica_groups={{0,1,2,3}}, use_global_device_ids=true, to_apply=max
  g1 = f32[4] all-reduce(z), channel_id=4, replica_groups={{0,1},{2,3}}, use_global_device_ids=true, to_apply=add
  big = f32[32,32] all-reduce(w), channel_id=5, replica_groups={{0,1,2,3}}, use_global_device_ids=true, to_apply=add
  sq = f32[2,3] multiply(s1, s1)
  s3 = f32[2,3] all-reduce(sq), channel_id=6, replica_groups={{0,1,2,3}}, use_global_device_ids=true, to_apply=add
  s4 = f32[4] all-reduce(z), channel_id=7, replica_groups={{0,1,2,3}}, use_global_device_ids=true, to_apply=add
  ROOT out = (f32[2,3], f32[8], f32[8], f32[4], f32[32,32], f32[2,3], f32[4]) tuple(s1, s2, m1, g1, big, s3, s4)
}
)";

}  // namespace

class TestAllReduceCombiner : public QObject {
  Q_OBJECT

 private slots:
  // What is combined and what is not, the placement, and the numbers.
  void combinesOnlyIndependentAlikeAllReduces() {
    auto parsed = ParseHloModule(kProgram, "six");
    QVERIFY2(parsed.ok(), parsed.ok() ? "" : parsed.error().message.c_str());
    auto before = (*parsed)->Clone();
    const std::vector<Tensor> expected = Run(*before);
    QVERIFY(!expected.empty());

    AllReduceCombinerOptions o;
    o.threshold_bytes = 1024;
    auto r = CombineAllReduces(**parsed, o);
    QVERIFY2(r.ok(), r.ok() ? "" : r.error().message.c_str());
    QVERIFY(VerifyModule(**parsed).ok());
    QCOMPARE(r->all_reduces_before, int64_t{7});
    // s1 and s2 (56 bytes) are one all-reduce; s3 reads s1, so it cannot join them: it closes that
    // bucket and opens the next, which s4 joins (40 bytes); m1, g1 and big are the only ones of
    // their kind or too large.
    QCOMPARE(r->combined.size(), size_t{2});
    const CombinedCollective& c = r->combined[0];
    QCOMPARE(c.members, (std::vector<std::string>{"s1", "s2"}));
    QCOMPARE(c.bytes_per_device, int64_t{24 + 32});
    QCOMPARE(c.kind, Opcode::kAllReduce);
    QCOMPARE(r->combined[1].members, (std::vector<std::string>{"s3", "s4"}));
    QCOMPARE(r->combined[1].bytes_per_device, int64_t{24 + 16});
    QCOMPARE(r->Summary(), std::string("combined 4 of 7 all-reduce(s) into 2; 3 left as they were"));

    const std::vector<const Instruction*> ars = AllReduces(**parsed);
    QCOMPARE(ars.size(), size_t{5});  // the two combined ones, m1, g1, big
    const Instruction* combined = (*parsed)->FindInstruction(c.instruction);
    const Instruction* second = (*parsed)->FindInstruction(r->combined[1].instruction);
    QVERIFY(combined && second);
    QVERIFY(combined->shape().IsTuple());
    QCOMPARE(combined->operand_count(), int64_t{2});
    QCOMPARE(combined->operand(0)->name(), std::string("x"));
    QCOMPARE(combined->operand(1)->name(), std::string("y"));
    QCOMPARE(ReplicaGroupsText(combined->replica_groups), std::string("{{0,1,2,3}}"));
    QCOMPARE(second->operand(0)->name(), std::string("sq"));
    // Each is placed where its last input is ready: right after it (y; sq).
    const auto& list = (*parsed)->entry()->instructions();
    auto at = [&](const std::string& name) {
      for (size_t k = 0; k < list.size(); ++k)
        if (list[k]->name() == name) return static_cast<int64_t>(k);
      return int64_t{-1};
    };
    QCOMPARE(at(c.instruction), at("y") + 1);
    QCOMPARE(at(second->name()), at("sq") + 1);
    // sq reads s1's value through the first combined op; the second one reads sq.
    const Instruction* sq = (*parsed)->FindInstruction("sq");
    QVERIFY(sq);
    QCOMPARE(sq->operand(0)->opcode(), Opcode::kGetTupleElement);
    QCOMPARE(sq->operand(0)->operand(0), combined);

    // The same results on 4 devices.
    QCOMPARE(MaxDifference(expected, Run(**parsed)), 0.0);

    // The reason names what was combined.
    const std::string why = CombinedAllReduceReason(c, o.threshold_bytes);
    QVERIFY2(why.find("all-reduce-combiner: 2 independent all-reduces") == 0, why.c_str());
    QVERIFY2(why.find(": s1, s2") != std::string::npos, why.c_str());

    // Threshold 0: nothing combined.
    auto again = before->Clone();
    o.threshold_bytes = 0;
    auto none = CombineAllReduces(*again, o);
    QVERIFY(none.ok());
    QVERIFY(!none->changed());
    QCOMPARE(AllReduces(*again).size(), size_t{7});
    // A negative threshold is an error, not a crash.
    o.threshold_bytes = -1;
    QVERIFY(!CombineAllReduces(*again, o).ok());
  }

  // Control edges: an all-reduce ordered after another through a control edge depends on it and is
  // not combined with it; a control edge from a combined all-reduce moves to the combined op.
  void controlEdges() {
    constexpr const char* kText = R"(HloModule ctl, num_partitions=4

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY main {
  x = f32[4] parameter(0)
  y = f32[4] parameter(1)
  ar_a = f32[4] all-reduce(x), channel_id=1, replica_groups={{0,1,2,3}}, use_global_device_ids=true, to_apply=add
  n = f32[4] negate(y), control-predecessors={ar_a}
  ar_b = f32[4] all-reduce(y), channel_id=2, replica_groups={{0,1,2,3}}, use_global_device_ids=true, to_apply=add, control-predecessors={n}
  ar_c = f32[4] all-reduce(n), channel_id=3, replica_groups={{0,1,2,3}}, use_global_device_ids=true, to_apply=add
  ROOT out = (f32[4], f32[4], f32[4]) tuple(ar_a, ar_b, ar_c)
}
)";
    auto parsed = ParseHloModule(kText, "ctl");
    QVERIFY2(parsed.ok(), parsed.ok() ? "" : parsed.error().message.c_str());
    const std::vector<Tensor> expected = Run(**parsed);
    auto r = CombineAllReduces(**parsed);
    QVERIFY(r.ok());
    // ar_b runs after n, which runs after ar_a: ar_b and ar_c (which reads n) open a second bucket.
    QCOMPARE(r->combined.size(), size_t{1});
    QCOMPARE(r->combined[0].members, (std::vector<std::string>{"ar_b", "ar_c"}));
    QVERIFY(VerifyModule(**parsed).ok());
    const Instruction* combined = (*parsed)->FindInstruction(r->combined[0].instruction);
    QVERIFY(combined);
    // ar_b's control predecessor n is the combined op's; n still runs after ar_a.
    QCOMPARE(combined->control_predecessors.size(), size_t{1});
    QCOMPARE(combined->control_predecessors[0]->name(), std::string("n"));
    QCOMPARE((*parsed)->FindInstruction("n")->control_predecessors[0]->name(), std::string("ar_a"));
    QCOMPARE(MaxDifference(expected, Run(**parsed)), 0.0);

    // Without the edge n -> ar_b, ar_a and ar_b are combined and n's edge from ar_a moves to the combined op.
    std::string text = kText;
    text.replace(text.find(", control-predecessors={n}"), std::string(", control-predecessors={n}").size(), "");
    auto free = ParseHloModule(text, "ctl2");
    QVERIFY(free.ok());
    auto r2 = CombineAllReduces(**free);
    QVERIFY(r2.ok());
    QCOMPARE(r2->combined.size(), size_t{1});
    QCOMPARE(r2->combined[0].members, (std::vector<std::string>{"ar_a", "ar_b"}));
    QVERIFY(VerifyModule(**free).ok());
    const Instruction* n = (*free)->FindInstruction("n");
    QCOMPARE(n->control_predecessors.size(), size_t{1});
    QCOMPARE(n->control_predecessors[0]->name(), r2->combined[0].instruction);
  }

  // The zoo's data-parallel MLP training step (2 layers, SGD, 4 devices): the loss and the eight
  // gradients are all-reduced (the weight gradients too: both operands of each gradient dot are
  // split over every device along the batch, and XLA reduces the products). The pipeline's
  // combiner makes the nine one all-reduce under XLA's threshold; under a threshold of 2 KiB the
  // loss and the four bias gradients (2564 bytes) become two and the four weight gradients (64 KiB
  // each) stay as they are. The step still verifies on virtual devices.
  void dataParallelMlpStepVerifies() {
    struct Want {
      std::optional<AllReduceCombinerOptions> combiner;
      size_t all_reduces, combined, members;
    };
    AllReduceCombinerOptions low;
    low.threshold_bytes = 2048;
    for (const Want& want : {Want{std::nullopt, 9, 0, 0}, Want{AllReduceCombinerOptions{}, 1, 1, 9}, Want{low, 6, 2, 5}}) {
      auto model = pipeline::BuildZooModel("mlp", {{"annotations", "data-parallel"}, {"mesh_x", "2"}, {"mesh_y", "2"}});
      QVERIFY2(model.ok(), model.ok() ? "" : model.error().message.c_str());
      pipeline::PipelineOptions o;
      o.propagation = pipeline::StandardPropagationOptions();
      o.partitioning = pipeline::Partitioning::kAlways;
      o.spmd.num_partitions = 4;
      o.verify = pipeline::VerifyOptions{};
      o.all_reduce_combiner = want.combiner;
      auto r = pipeline::RunPipeline(std::move(model->module), o);
      QVERIFY2(r.ok(), r.FailureText().c_str());
      const std::vector<const Instruction*> ars = AllReduces(*r.partition->module);
      QCOMPARE(ars.size(), want.all_reduces);
      QCOMPARE(r.verification.state, VerificationVerdict::State::kMatch);
      if (!want.combiner) {
        QVERIFY(!r.all_reduce_combiner);
        continue;
      }
      QVERIFY(r.all_reduce_combiner);
      QCOMPARE(r.all_reduce_combiner->all_reduces_before, int64_t{9});
      QCOMPARE(r.all_reduce_combiner->combined.size(), want.combined);
      size_t members = 0, tuples = 0;
      for (const Instruction* a : ars) {
        if (!a->shape().IsTuple()) continue;
        ++tuples;
        members += a->shape().tuple.size();
      }
      QCOMPARE(tuples, want.combined);
      QCOMPARE(members, want.members);
      // The partition's record: one entry per combined all-reduce, saying what it combined; the
      // members' own records are gone (the all-reduces left as they were keep theirs).
      size_t records = 0;
      for (const InsertedCollective& c : r.partition->collectives) {
        if (c.kind != Opcode::kAllReduce) continue;
        const Instruction* inst = r.partition->module->FindInstruction(c.instruction);
        QVERIFY2(inst, c.instruction.c_str());
        QCOMPARE(c.reason.find("all-reduce-combiner: ") == 0, inst->shape().IsTuple());
        if (!inst->shape().IsTuple()) continue;
        ++records;
        for (const auto& combined : r.all_reduce_combiner->combined)
          if (combined.instruction == c.instruction)
            for (const std::string& m : combined.members) QVERIFY2(c.reason.find(m) != std::string::npos, c.reason.c_str());
      }
      QCOMPARE(records, want.combined);
    }
  }

  // The CLI: off unless asked (--all-reduce-combiner, or a threshold), the stage's summary in
  // `simulate` and `partition --summary`, contradictory flags refused.
  void cliFlags() {
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    const QString mlp = dir.filePath("mlp.hlo");
    auto b = testing::RunCli({"zoo", "build", "mlp", "--set", "annotations=data-parallel", "--set", "mesh_x=2", "--set", "mesh_y=2",
                              "-o", mlp});
    QVERIFY2(b.code == 0, qPrintable(b.err));
    const QStringList sim = {"simulate", mlp, "--chip", "tpu-v3", "--mesh", "X=2,Y=2"};
    auto off = testing::RunCli(sim);
    QVERIFY2(off.code == 0, qPrintable(off.err));
    QVERIFY2(!off.out.contains("all-reduce-combiner"), qPrintable(off.out));
    auto on = testing::RunCli(sim + QStringList{"--all-reduce-combiner"});
    QVERIFY2(on.code == 0, qPrintable(on.err));
    QVERIFY2(on.out.contains("all-reduce-combiner: combined 9 of 9 all-reduce(s) into 1;"), qPrintable(on.out));
    auto low = testing::RunCli(sim + QStringList{"--all-reduce-combine-threshold-bytes", "2048"});
    QVERIFY2(low.code == 0, qPrintable(low.err));
    QVERIFY2(low.out.contains("all-reduce-combiner: combined 5 of 9 all-reduce(s) into 2; 4 left as they were"),
             qPrintable(low.out));
    auto part = testing::RunCli({"partition", mlp, "--summary", "--all-reduce-combiner"});
    QVERIFY2(part.code == 0, qPrintable(part.err));
    QVERIFY2(part.err.contains("all-reduce.combined = all-reduce (264708 bytes/device"), qPrintable(part.err));
    QVERIFY2(part.err.contains("all-reduce-combiner: 9 independent all-reduces"), qPrintable(part.err));
    auto both = testing::RunCli(sim + QStringList{"--no-all-reduce-combiner", "--all-reduce-combiner"});
    QCOMPARE(both.code, 2);
    QVERIFY2(both.err.contains("contradicts"), qPrintable(both.err));
    auto bad = testing::RunCli(sim + QStringList{"--all-reduce-combine-threshold-bytes", "-5"});
    QCOMPARE(bad.code, 2);
    QVERIFY2(bad.err.contains("non-negative integer"), qPrintable(bad.err));
  }
};

QTEST_GUILESS_MAIN(TestAllReduceCombiner)
#include "test_all_reduce_combiner.moc"
