// WhileLoopAllReduceCodeMotion (partitioner/while_loop_all_reduce_code_motion.h) on hand-written
// SPMD programs: which all-reduces leave the loop (accumulated by add through reshape and
// concatenate, by scatter-add with indices equal within the reduction groups, a non-zero initial
// value added after the loop) and which stay (used in the loop, other groups, indices that differ
// between the devices summed over, the condition reading the buffer) — and every program computes
// the same on 4 virtual devices before and after.
#include <QtTest>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "core/eval/numeric_verify.h"
#include "core/eval/virtual_cluster.h"
#include "tests/spmd_test_support.h"
#include "core/ir/hlo_text.h"
#include "core/ir/verifier.h"
#include "partitioner/while_loop_all_reduce_code_motion.h"

using namespace shardscope;

namespace {

constexpr int64_t kDevices = 4;

int64_t Count(const Computation& c, Opcode op) {
  int64_t n = 0;
  for (const auto& i : c.instructions()) n += i->opcode() == op;
  return n;
}

std::vector<Tensor> Run(const Module& m) { return testing::RunOnVirtualDevices(m, kDevices, 11); }
double MaxDifference(const std::vector<Tensor>& a, const std::vector<Tensor>& b) { return testing::MaxRelativeDifference(a, b); }

// A loop of 5 iterations carrying (i, x, acc, acc2, w): acc accumulates the all-reduce of x*x
// (reshaped twice and concatenated with a second all-reduce), acc2 by scatter-add at row
// `scatter_index` (an s32 expression), w keeps an all-reduce it also uses. `acc_init` is acc's
// initial value; `groups_b` the second accumulated all-reduce's groups.
std::string Program(const std::string& scatter_index, const std::string& acc_init, const std::string& groups_b,
                    bool cond_reads_acc = false) {
  const std::string carried = "(s32[], f32[2,3], f32[4,3], f32[4,3], f32[2,3])";
  return R"(HloModule acc, num_partitions=4

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

cond {
  p = )" + carried + R"( parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(5)
  lt = pred[] compare(i, n), direction=LT
)" + (cond_reads_acc ? R"(  acc = f32[4,3] get-tuple-element(p), index=2
  z = f32[] constant(0)
  corner = f32[1,1] slice(acc), slice={[0:1], [0:1]}
  first = f32[] reshape(corner)
  big = pred[] compare(first, z), direction=GT
  ROOT both = pred[] or(lt, big)
)" : "  ROOT r = pred[] copy(lt)\n") + R"(}

body {
  p = )" + carried + R"( parameter(0)
  i = s32[] get-tuple-element(p), index=0
  x = f32[2,3] get-tuple-element(p), index=1
  acc = f32[4,3] get-tuple-element(p), index=2
  acc2 = f32[4,3] get-tuple-element(p), index=3
  w = f32[2,3] get-tuple-element(p), index=4
  one = s32[] constant(1)
  next_i = s32[] add(i, one)
  sq = f32[2,3] multiply(x, x)
  ar_a = f32[2,3] all-reduce(sq), channel_id=1, replica_groups={{0,1},{2,3}}, use_global_device_ids=true, to_apply=add
  ar_b = f32[2,3] all-reduce(x), channel_id=2, replica_groups=)" + groups_b + R"(, use_global_device_ids=true, to_apply=add
  ra = f32[2,3] reshape(ar_a)
  rb = f32[2,3] transpose(ar_b), dimensions={0,1}
  cat = f32[4,3] concatenate(ra, rb), dimensions={0}
  acc_next = f32[4,3] add(acc, cat)
  row = f32[1,3] slice(x), slice={[0:1], [0:3]}
  ar_c = f32[1,3] all-reduce(row), channel_id=3, replica_groups={{0,1},{2,3}}, use_global_device_ids=true, to_apply=add
  pid = u32[] partition-id()
  pid_s = s32[] convert(pid)
)" + scatter_index + R"(
  idx = s32[1] reshape(row_index)
  acc2_next = f32[4,3] scatter(acc2, idx, ar_c), update_window_dims={0,1}, inserted_window_dims={}, scatter_dims_to_operand_dims={0}, index_vector_dim=0, to_apply=add
  ar_w = f32[2,3] all-reduce(w), channel_id=4, replica_groups={{0,1},{2,3}}, use_global_device_ids=true, to_apply=add
  half = f32[] constant(0.25)
  halves = f32[2,3] broadcast(half), dimensions={}
  w_next = f32[2,3] multiply(ar_w, halves)
  x_next = f32[2,3] add(x, w_next)
  ROOT t = )" + carried + R"( tuple(next_i, x_next, acc_next, acc2_next, w_next)
}

ENTRY main {
  x0 = f32[2,3] parameter(0)
  a0 = f32[4,3] parameter(1)
  w0 = f32[2,3] parameter(2)
  zero = f32[] constant(0)
  z = f32[4,3] broadcast(zero), dimensions={}
  i0 = s32[] constant(0)
  init = )" + carried + R"( tuple(i0, x0, )" + acc_init + R"(, z, w0)
  loop = )" + carried + R"( while(init), condition=cond, body=body
  acc_out = f32[4,3] get-tuple-element(loop), index=2
  acc2_out = f32[4,3] get-tuple-element(loop), index=3
  x_out = f32[2,3] get-tuple-element(loop), index=1
  ROOT out = (f32[4,3], f32[4,3], f32[2,3]) tuple(acc_out, acc2_out, x_out)
}
)";
}

// The program's row index for the scatter: equal on both devices of each group {0,1}, {2,3}.
const char* kUniformIndex = "  two = s32[] constant(2)\n  row_index = s32[] divide(pid_s, two)";
// ... and one that differs within the groups.
const char* kDeviceIndex = "  row_index = s32[] copy(pid_s)";

// A loop whose accumulated all-reduce (over {0,1},{2,3}) is resharded by an all-to-all over
// `a2a_groups` before it is added.
std::string ResharedProgram(const std::string& a2a_groups) {
  return R"(HloModule reshard, num_partitions=4

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

cond {
  p = (s32[], f32[2,3], f32[2,3]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(3)
  ROOT lt = pred[] compare(i, n), direction=LT
}

body {
  p = (s32[], f32[2,3], f32[2,3]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  x = f32[2,3] get-tuple-element(p), index=1
  acc = f32[2,3] get-tuple-element(p), index=2
  one = s32[] constant(1)
  next_i = s32[] add(i, one)
  sq = f32[2,3] multiply(x, x)
  ar = f32[2,3] all-reduce(sq), channel_id=1, replica_groups={{0,1},{2,3}}, use_global_device_ids=true, to_apply=add
  moved = f32[2,3] all-to-all(ar), dimensions={0}, channel_id=2, replica_groups=)" + a2a_groups + R"(
  acc_next = f32[2,3] add(acc, moved)
  x_next = f32[2,3] add(x, x)
  ROOT t = (s32[], f32[2,3], f32[2,3]) tuple(next_i, x_next, acc_next)
}

ENTRY main {
  x0 = f32[2,3] parameter(0)
  a0 = f32[2,3] parameter(1)
  i0 = s32[] constant(0)
  init = (s32[], f32[2,3], f32[2,3]) tuple(i0, x0, a0)
  loop = (s32[], f32[2,3], f32[2,3]) while(init), condition=cond, body=body
  ROOT acc_out = f32[2,3] get-tuple-element(loop), index=2
}
)";
}

struct Outcome {
  WhileLoopAllReduceCodeMotionResult result;
  std::unique_ptr<Module> before, after;
};

std::optional<Outcome> Apply(const std::string& hlo, std::string* why) {
  auto parsed = ParseHloModule(hlo);
  if (!parsed.ok()) {
    *why = "parse: " + parsed.error().message;
    return std::nullopt;
  }
  Outcome o;
  o.before = std::move(parsed).value();
  o.after = o.before->Clone();
  auto r = WhileLoopAllReduceCodeMotion(*o.after);
  if (!r.ok()) {
    *why = r.error().message;
    return std::nullopt;
  }
  if (Status s = VerifyModule(*o.after); !s.ok()) {
    *why = "the rewritten module is invalid: " + s.error().message + "\n" + PrintHloModule(*o.after);
    return std::nullopt;
  }
  o.result = std::move(r).value();
  return o;
}

}  // namespace

class WhileLoopAllReduceCodeMotionTest : public QObject {
  Q_OBJECT

 private slots:
  // Accumulated through reshape / transpose / concatenate and by scatter-add with indices equal
  // within the groups: three all-reduces leave the loop as two (one per buffer); the one whose
  // result feeds the next iteration stays. Same numbers on every device.
  void sinksAccumulatedAllReduces() {
    std::string why;
    auto o = Apply(Program(kUniformIndex, "z", "{{0,1},{2,3}}"), &why);
    QVERIFY2(o.has_value(), why.c_str());
    const auto& r = o->result;
    QVERIFY(r.changed);
    QCOMPARE(r.sunk.size(), size_t{2});
    QCOMPARE(r.sunk[0].tuple_index, int64_t{2});
    QCOMPARE(r.sunk[0].accumulation, std::string("add"));
    QCOMPARE(r.sunk[0].removed, (std::vector<std::string>{"ar_a", "ar_b"}));
    QCOMPARE(r.sunk[0].bytes_per_device, int64_t{4 * 3 * 4});
    QCOMPARE(r.sunk[1].tuple_index, int64_t{3});
    QCOMPARE(r.sunk[1].accumulation, std::string("scatter-add"));
    QCOMPARE(r.sunk[1].removed, (std::vector<std::string>{"ar_c"}));
    QCOMPARE(r.kept.size(), size_t{1});
    QCOMPARE(r.kept[0].all_reduce, std::string("ar_w"));
    const Module& m = *o->after;
    QCOMPARE(Count(*m.FindComputation("body"), Opcode::kAllReduce), int64_t{1});
    QCOMPARE(Count(*m.entry(), Opcode::kAllReduce), int64_t{2});
    // The inserted all-reduce sums over the first one's groups, with a channel id of its own.
    const Instruction* moved = m.FindInstruction(r.sunk[0].all_reduce);
    QVERIFY(moved);
    QCOMPARE(moved->replica_groups.groups, (std::vector<std::vector<int64_t>>{{0, 1}, {2, 3}}));
    QCOMPARE(moved->channel_id, std::optional<int64_t>(5));
    QCOMPARE(moved->operand(0)->opcode(), Opcode::kGetTupleElement);
    QVERIFY(m.entry()->Find("acc_out")->users()[0] == moved);
    const double diff = MaxDifference(Run(*o->before), Run(m));
    QVERIFY2(diff <= 1e-4, std::to_string(diff).c_str());
  }

  // A non-zero initial value: the loop starts from zero and the value is added after the sum.
  void nonZeroInitialValueIsAddedAfter() {
    std::string why;
    auto o = Apply(Program(kUniformIndex, "a0", "{{0,1},{2,3}}"), &why);
    QVERIFY2(o.has_value(), why.c_str());
    QCOMPARE(o->result.sunk.size(), size_t{2});
    const Module& m = *o->after;
    const Instruction* moved = m.FindInstruction(o->result.sunk[0].all_reduce);
    QCOMPARE(moved->users().size(), size_t{1});
    const Instruction* add = moved->users()[0];
    QCOMPARE(add->opcode(), Opcode::kAdd);
    QCOMPARE(add->operand(0)->name(), std::string("a0"));
    const Instruction* loop = m.entry()->Find("loop");
    QCOMPARE(loop->operand(0)->operand(2)->opcode(), Opcode::kBroadcast);
    const double diff = MaxDifference(Run(*o->before), Run(m));
    QVERIFY2(diff <= 1e-4, std::to_string(diff).c_str());
  }

  // An all-to-all between the sum and the accumulation: over the other mesh axis it commutes with
  // the sum (moved, same numbers); within the summed groups it does not (kept).
  void reshardingOnTheWay() {
    std::string why;
    auto other = Apply(ResharedProgram("{{0,2},{1,3}}"), &why);
    QVERIFY2(other.has_value(), why.c_str());
    QCOMPARE(other->result.sunk.size(), size_t{1});
    QCOMPARE(other->result.sunk[0].removed, (std::vector<std::string>{"ar"}));
    const double diff = MaxDifference(Run(*other->before), Run(*other->after));
    QVERIFY2(diff <= 1e-4, std::to_string(diff).c_str());

    auto same = Apply(ResharedProgram("{{0,1},{2,3}}"), &why);
    QVERIFY2(same.has_value(), why.c_str());
    QVERIFY(!same->result.changed);
    QCOMPARE(same->result.kept.size(), size_t{1});
    QVERIFY2(same->result.kept[0].reason.find("moves data between devices") != std::string::npos,
             same->result.kept[0].reason.c_str());
  }

  // What stays: scatter indices that differ between the devices summed over; a second
  // all-reduce over other groups (the whole buffer stays); a buffer the condition reads.
  void keepsWhatCannotMove() {
    std::string why;
    auto o = Apply(Program(kDeviceIndex, "z", "{{0,2},{1,3}}"), &why);
    QVERIFY2(o.has_value(), why.c_str());
    QVERIFY(!o->result.changed);
    QCOMPARE(o->result.kept.size(), size_t{4});
    for (const KeptAllReduce& k : o->result.kept) {
      if (k.all_reduce == "ar_c")
        QVERIFY2(k.reason.find("indices differ") != std::string::npos, k.reason.c_str());
      if (k.all_reduce == "ar_b" || k.all_reduce == "ar_a")
        QVERIFY2(k.reason.find("other groups") != std::string::npos, k.reason.c_str());
    }
    QCOMPARE(Count(*o->after->FindComputation("body"), Opcode::kAllReduce), int64_t{4});

    auto c = Apply(Program(kUniformIndex, "z", "{{0,1},{2,3}}", /*cond_reads_acc=*/true), &why);
    QVERIFY2(c.has_value(), why.c_str());
    QCOMPARE(c->result.sunk.size(), size_t{1});  // acc2 only
    QCOMPARE(c->result.sunk[0].tuple_index, int64_t{3});
    bool cond_reason = false;
    for (const KeptAllReduce& k : c->result.kept) cond_reason = cond_reason || k.reason.find("condition") != std::string::npos;
    QVERIFY(cond_reason);
  }
};

QTEST_APPLESS_MAIN(WhileLoopAllReduceCodeMotionTest)
#include "test_while_loop_all_reduce_code_motion.moc"
