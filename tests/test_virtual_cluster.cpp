// Virtual cluster: SPMD programs on N devices in lockstep with real collective semantics (per-device
// results asserted by hand), collectives inside loops and conditionals, XLA's replica-group modes,
// and numerical verification of hand-written SPMD programs against their unpartitioned originals.
#include <QtTest>

#include <cmath>
#include <string>
#include <vector>

#include "core/eval/evaluator.h"
#include "core/ir/hlo_text.h"
#include "core/eval/numeric_verify.h"
#include "core/eval/virtual_cluster.h"

using namespace shardscope;

namespace {

Tensor T(PrimitiveType t, std::vector<int64_t> dims, std::vector<double> v) {
  auto r = Tensor::FromValues(t, std::move(dims), v);
  if (!r.ok()) qFatal("bad tensor: %s", r.error().message.c_str());
  return *r;
}
Tensor F32(std::vector<int64_t> dims, std::vector<double> v) { return T(PrimitiveType::kF32, std::move(dims), std::move(v)); }

// Parses with the verifier; a parse failure fails the test (not fatal: the other tests still run).
std::unique_ptr<Module> ParseOrFail(const std::string& text, const char* file, int line, bool verify = true) {
  ParseOptions po;
  po.verify = verify;
  auto m = ParseHloModule(text, "test.hlo", po);
  if (!m.ok()) {
    QTest::qFail(("parse failed: " + m.error().message).c_str(), file, line);
    return nullptr;
  }
  return std::move(m).value();
}
#define PARSE(var, text)                                   \
  auto var = ParseOrFail(text, __FILE__, __LINE__);        \
  if (!var) return;

// Runs `text` on `n` devices; args[d] for device d.
Result<std::vector<Tensor>> Run(const std::string& text, int64_t n, const std::vector<std::vector<Tensor>>& args,
                                const ClusterOptions& o = {}, bool verify = true) {
  ParseOptions po;
  po.verify = verify;
  auto m = ParseHloModule(text, "test.hlo", po);
  if (!m.ok()) return Error("parse failed: " + m.error().message);
  return RunSpmd(**m, n, args, o);
}

// One f32 argument per device built by `f(d)`.
template <typename F>
std::vector<std::vector<Tensor>> PerDevice(int64_t n, F f) {
  std::vector<std::vector<Tensor>> a;
  for (int64_t d = 0; d < n; ++d) a.push_back({f(d)});
  return a;
}

std::string Diff(const std::vector<double>& got, const std::vector<double>& want) {
  if (got.size() != want.size()) return "size " + std::to_string(got.size()) + " != expected " + std::to_string(want.size());
  for (size_t i = 0; i < got.size(); ++i)
    if (!(std::fabs(got[i] - want[i]) <= 1e-6))
      return "element " + std::to_string(i) + ": got " + std::to_string(got[i]) + ", expected " + std::to_string(want[i]);
  return {};
}

#define EXPECT_OK(r) QVERIFY2((r).ok(), (r).ok() ? "" : (r).error().message.c_str())
#define EXPECT_VALUES(tensor, ...)                                                 \
  do {                                                                             \
    const std::string _d = Diff((tensor).ToDoubles(), std::vector<double>__VA_ARGS__); \
    QVERIFY2(_d.empty(), _d.c_str());                                              \
  } while (0)

const std::string kAdd = R"(
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
)";


// C[4,3] = X[4,k] . W[k,3] with the contracting dim split over 2 devices (W row-sharded), f32: the
// original and the SPMD program whose all-reduce completes each device's partial sum.
std::pair<std::string, std::string> RowShardedMatmul(int64_t k) {
  const std::string K = std::to_string(k), H = std::to_string(k / 2);
  return {"HloModule matmul, num_partitions=2\nENTRY e {\n"
          "  x = f32[4," + K + "] parameter(0), sharding={devices=[1,2]0,1}\n"
          "  w = f32[" + K + ",3] parameter(1), sharding={devices=[2,1]0,1}\n"
          "  ROOT d = f32[4,3] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}, sharding={replicated}\n}\n",
          "HloModule matmul_spmd, num_partitions=2\n" + kAdd + "\nENTRY e {\n"
          "  x = f32[4," + H + "] parameter(0), sharding={devices=[1,2]0,1}\n"
          "  w = f32[" + H + ",3] parameter(1), sharding={devices=[2,1]0,1}\n"
          "  d = f32[4,3] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
          "  ROOT ar = f32[4,3] all-reduce(d), channel_id=1, replica_groups={{0,1}}, use_global_device_ids=true, to_apply=add\n}\n"};
}

}  // namespace

class TestVirtualCluster : public QObject {
  Q_OBJECT

 private slots:
  void allReduceOverGroups() {
    const std::string text = "HloModule m, num_partitions=4\n" + kAdd + R"(
ENTRY e {
  x = f32[2] parameter(0)
  ROOT r = f32[2] all-reduce(x), channel_id=1, replica_groups={{0,1},{2,3}}, use_global_device_ids=true, to_apply=add
})";
    auto r = Run(text, 4, PerDevice(4, [](int64_t d) { return F32({2}, {double(d), 10.0 * d}); }));
    EXPECT_OK(r);
    EXPECT_VALUES((*r)[0], {1, 10});
    EXPECT_VALUES((*r)[1], {1, 10});
    EXPECT_VALUES((*r)[2], {5, 50});
    EXPECT_VALUES((*r)[3], {5, 50});

    // Iota groups [2,2]<=[2,2]T(1,0) = {{0,2},{1,3}}.
    const std::string iota = "HloModule m, num_partitions=4\n" + kAdd + R"(
ENTRY e {
  x = f32[2] parameter(0)
  ROOT r = f32[2] all-reduce(x), channel_id=1, replica_groups=[2,2]<=[2,2]T(1,0), use_global_device_ids=true, to_apply=add
})";
    r = Run(iota, 4, PerDevice(4, [](int64_t d) { return F32({2}, {double(d), 10.0 * d}); }));
    EXPECT_OK(r);
    EXPECT_VALUES((*r)[0], {2, 20});
    EXPECT_VALUES((*r)[1], {4, 40});
    EXPECT_VALUES((*r)[2], {2, 20});
    EXPECT_VALUES((*r)[3], {4, 40});

    // Empty groups: all devices; a reducer the fast path does not recognise (max written as select).
    const std::string all = std::string("HloModule m, num_partitions=4\n") + R"(
mx {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  gt = pred[] compare(a, b), direction=GT
  ROOT s = f32[] select(gt, a, b)
}
ENTRY e {
  x = f32[2] parameter(0)
  ROOT r = f32[2] all-reduce(x), channel_id=1, replica_groups={}, to_apply=mx
})";
    r = Run(all, 4, PerDevice(4, [](int64_t d) { return F32({2}, {double(d), -1.0 * d}); }));
    EXPECT_OK(r);
    for (int d = 0; d < 4; ++d) EXPECT_VALUES((*r)[static_cast<size_t>(d)], {3, 0});
  }

  void groupModes() {
    PARSE(m, "HloModule m, num_partitions=4\n" + kAdd + R"(
ENTRY e {
  x = f32[2] parameter(0)
  ar_a = f32[2] all-reduce(x), replica_groups={{0,1},{2,3}}, to_apply=add
  ar_b = f32[2] all-reduce(x), channel_id=2, replica_groups={{0}}, to_apply=add
  ar_c = f32[2] all-reduce(x), replica_groups={{0}}, to_apply=add
  ar_d = f32[2] all-reduce(x), replica_groups={}, to_apply=add
  ROOT t = (f32[2], f32[2], f32[2], f32[2]) tuple(ar_a, ar_b, ar_c, ar_d)
})");
    const Computation* e = m->entry();
    const Instruction* a = e->Find("ar_a");
    const Instruction* b = e->Find("ar_b");
    const Instruction* c = e->Find("ar_c");
    QVERIFY(a && b && c);
    // Single replica: replica-id groups that only make sense as partition ids are partition ids.
    auto ga = CollectiveParticipantGroups(*a, 1, 4);
    EXPECT_OK(ga);
    QCOMPARE(ga.value(), (std::vector<std::vector<int64_t>>{{0, 1}, {2, 3}}));
    // channel_id without use_global_device_ids: replica groups spanning all partitions.
    auto gb = CollectiveParticipantGroups(*b, 1, 4);
    EXPECT_OK(gb);
    QCOMPARE(gb.value(), (std::vector<std::vector<int64_t>>{{0, 1, 2, 3}}));
    // No channel_id, {{0}}: cross-replica, each partition alone.
    auto gc = CollectiveParticipantGroups(*c, 1, 4);
    EXPECT_OK(gc);
    QCOMPARE(gc.value(), (std::vector<std::vector<int64_t>>{{0}, {1}, {2}, {3}}));
    // 2 replicas x 2 partitions: cross-replica groups {{0,1}} pair device r*2+p across replicas.
    auto g2 = CollectiveParticipantGroups(*a, 4, 1);
    EXPECT_OK(g2);
    QCOMPARE(g2.value(), (std::vector<std::vector<int64_t>>{{0, 1}, {2, 3}}));
    auto g3 = CollectiveParticipantGroups(*b, 2, 2);  // replica 0 -> devices 0,1
    EXPECT_OK(g3);
    QCOMPARE(g3.value(), (std::vector<std::vector<int64_t>>{{0, 1}}));

    auto r = RunSpmd(*m, 4, PerDevice(4, [](int64_t d) { return F32({2}, {double(d + 1), 0}); }));
    EXPECT_OK(r);
    EXPECT_VALUES((*r)[2].element(0), {7, 0});
    EXPECT_VALUES((*r)[2].element(1), {10, 0});
    EXPECT_VALUES((*r)[2].element(2), {3, 0});
    // Without channel_id, replica_groups={} is all replicas: with one replica each partition keeps
    // its value (XLA's TiledAllReduce case relies on this).
    EXPECT_VALUES((*r)[2].element(3), {3, 0});

    // Replicas: 2 replicas x 2 partitions, cross-replica all-reduce over all replicas sums the
    // devices with the same partition id (0+2, 1+3).
    ClusterOptions o;
    o.num_replicas = 2;
    auto rr = Run("HloModule m\n" + kAdd + R"(
ENTRY e {
  x = f32[1] parameter(0)
  s = f32[1] all-reduce(x), replica_groups={}, to_apply=add
  rid = u32[] replica-id()
  pid = u32[] partition-id()
  ROOT t = (f32[1], u32[], u32[]) tuple(s, rid, pid)
})",
                  4, PerDevice(4, [](int64_t d) { return F32({1}, {std::pow(10.0, double(d))}); }), o);
    EXPECT_OK(rr);
    EXPECT_VALUES((*rr)[0].element(0), {101});
    EXPECT_VALUES((*rr)[1].element(0), {1010});
    EXPECT_VALUES((*rr)[3].element(1), {1});
    EXPECT_VALUES((*rr)[3].element(2), {1});
    EXPECT_VALUES((*rr)[2].element(1), {1});
    EXPECT_VALUES((*rr)[2].element(2), {0});
  }

  void allGather() {
    const std::string text = R"(HloModule m, num_partitions=4
ENTRY e {
  x = f32[1,2] parameter(0)
  g = f32[4,2] all-gather(x), channel_id=1, replica_groups={{0,1,2,3}}, dimensions={0}, use_global_device_ids=true
  h = f32[1,4] all-gather(x), channel_id=2, replica_groups={{0,2},{1,3}}, dimensions={1}, use_global_device_ids=true
  ROOT t = (f32[4,2], f32[1,4]) tuple(g, h)
})";
    auto r = Run(text, 4, PerDevice(4, [](int64_t d) { return F32({1, 2}, {double(d), d + 0.5}); }));
    EXPECT_OK(r);
    for (int d = 0; d < 4; ++d) EXPECT_VALUES((*r)[static_cast<size_t>(d)].element(0), {0, 0.5, 1, 1.5, 2, 2.5, 3, 3.5});
    EXPECT_VALUES((*r)[0].element(1), {0, 0.5, 2, 2.5});
    EXPECT_VALUES((*r)[3].element(1), {1, 1.5, 3, 3.5});
  }

  void reduceScatter() {
    const std::string text = "HloModule m, num_partitions=2\n" + kAdd + R"(
ENTRY e {
  x = f32[4] parameter(0)
  ROOT r = f32[2] reduce-scatter(x), channel_id=1, replica_groups={{0,1}}, dimensions={0}, use_global_device_ids=true, to_apply=add
})";
    auto r = Run(text, 2, PerDevice(2, [](int64_t d) { return F32({4}, {1.0 * (d + 1), 2.0 * (d + 1), 3.0 * (d + 1), 4.0 * (d + 1)}); }));
    EXPECT_OK(r);
    EXPECT_VALUES((*r)[0], {3, 6});
    EXPECT_VALUES((*r)[1], {9, 12});
  }

  void allToAll() {
    auto r = Run(R"(HloModule m, num_partitions=2
ENTRY e {
  x = f32[4] parameter(0)
  ROOT a = f32[4] all-to-all(x), channel_id=1, replica_groups={{0,1}}, dimensions={0}
})",
                 2, {{F32({4}, {0, 1, 2, 3})}, {F32({4}, {10, 11, 12, 13})}});
    EXPECT_OK(r);
    EXPECT_VALUES((*r)[0], {0, 1, 10, 11});
    EXPECT_VALUES((*r)[1], {2, 3, 12, 13});

    // 4 devices, 2-D, split/concat along dim 1: device j receives column j of every device.
    r = Run(R"(HloModule m, num_partitions=4
ENTRY e {
  x = f32[1,4] parameter(0)
  ROOT a = f32[1,4] all-to-all(x), channel_id=1, replica_groups={{0,1,2,3}}, dimensions={1}
})",
            4, PerDevice(4, [](int64_t d) { return F32({1, 4}, {10.0 * d, 10.0 * d + 1, 10.0 * d + 2, 10.0 * d + 3}); }));
    EXPECT_OK(r);
    EXPECT_VALUES((*r)[0], {0, 10, 20, 30});
    EXPECT_VALUES((*r)[2], {2, 12, 22, 32});

    // Tuple form: participant j's output i is participant i's operand j.
    r = Run(R"(HloModule m, num_partitions=2
ENTRY e {
  a = f32[1] parameter(0)
  b = f32[1] parameter(1)
  ROOT t = (f32[1], f32[1]) all-to-all(a, b), channel_id=1, replica_groups={{0,1}}
})",
            2, {{F32({1}, {0}), F32({1}, {1})}, {F32({1}, {10}), F32({1}, {11})}});
    EXPECT_OK(r);
    EXPECT_VALUES((*r)[0].element(0), {0});
    EXPECT_VALUES((*r)[0].element(1), {10});
    EXPECT_VALUES((*r)[1].element(0), {1});
    EXPECT_VALUES((*r)[1].element(1), {11});
  }

  void collectivePermuteRingAndPartial() {
    auto r = Run(R"(HloModule m, num_partitions=4
ENTRY e {
  x = f32[2] parameter(0)
  ring = f32[2] collective-permute(x), channel_id=1, source_target_pairs={{0,1},{1,2},{2,3},{3,0}}
  part = f32[2] collective-permute(x), channel_id=2, source_target_pairs={{0,1}}
  ROOT t = (f32[2], f32[2]) tuple(ring, part)
})",
                 4, PerDevice(4, [](int64_t d) { return F32({2}, {d + 1.0, -(d + 1.0)}); }));
    EXPECT_OK(r);
    EXPECT_VALUES((*r)[0].element(0), {4, -4});  // from device 3
    EXPECT_VALUES((*r)[1].element(0), {1, -1});
    EXPECT_VALUES((*r)[2].element(0), {2, -2});
    EXPECT_VALUES((*r)[3].element(0), {3, -3});
    EXPECT_VALUES((*r)[1].element(1), {1, -1});
    EXPECT_VALUES((*r)[0].element(1), {0, 0});  // receives nothing: zeros
    EXPECT_VALUES((*r)[2].element(1), {0, 0});
    EXPECT_VALUES((*r)[3].element(1), {0, 0});
  }

  void asyncPairs() {
    auto r = Run("HloModule m, num_partitions=2\n" + kAdd + R"(
ENTRY e {
  x = f32[2] parameter(0)
  ars = f32[2] all-reduce-start(x), channel_id=1, replica_groups={{0,1}}, use_global_device_ids=true, to_apply=add
  ard = f32[2] all-reduce-done(ars)
  cps = (f32[2], f32[2], u32[], u32[]) collective-permute-start(x), channel_id=2, source_target_pairs={{0,1},{1,0}}
  cpd = f32[2] collective-permute-done(cps)
  ags = (f32[2], f32[4]) all-gather-start(x), channel_id=3, replica_groups={{0,1}}, dimensions={0}, use_global_device_ids=true
  agd = f32[4] all-gather-done(ags)
  ROOT t = (f32[2], f32[2], f32[4]) tuple(ard, cpd, agd)
})",
                 2, {{F32({2}, {1, 2})}, {F32({2}, {3, 4})}}, {}, /*verify=*/false);
    EXPECT_OK(r);
    EXPECT_VALUES((*r)[0].element(0), {4, 6});
    EXPECT_VALUES((*r)[0].element(1), {3, 4});
    EXPECT_VALUES((*r)[1].element(1), {1, 2});
    EXPECT_VALUES((*r)[1].element(2), {1, 2, 3, 4});
  }

  void partitionIdPerDevice() {
    auto r = Run(R"(HloModule m, num_partitions=4
ENTRY e {
  x = f32[8] parameter(0)
  pid = u32[] partition-id()
  two = u32[] constant(2)
  off = u32[] multiply(pid, two)
  ROOT s = f32[2] dynamic-slice(x, off), dynamic_slice_sizes={2}
})",
                 4, PerDevice(4, [](int64_t) { return F32({8}, {0, 1, 2, 3, 4, 5, 6, 7}); }));
    EXPECT_OK(r);
    EXPECT_VALUES((*r)[0], {0, 1});
    EXPECT_VALUES((*r)[3], {6, 7});
  }

  void collectivesInsideLoopsAndConditionals() {
    // x = all-reduce(x) three times on 2 devices starting at 1 and 2: 3, 6, 12.
    const std::string loop = "HloModule m, num_partitions=2\n" + kAdd + R"(
cond {
  p = (s32[], f32[1]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(3)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  p = (s32[], f32[1]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  x = f32[1] get-tuple-element(p), index=1
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  s = f32[1] all-reduce(x), channel_id=1, replica_groups={{0,1}}, use_global_device_ids=true, to_apply=add
  ROOT t = (s32[], f32[1]) tuple(i1, s)
}
ENTRY e {
  x = f32[1] parameter(0)
  z = s32[] constant(0)
  init = (s32[], f32[1]) tuple(z, x)
  w = (s32[], f32[1]) while(init), condition=cond, body=body
  ROOT r = f32[1] get-tuple-element(w), index=1
})";
    auto r = Run(loop, 2, {{F32({1}, {1})}, {F32({1}, {2})}});
    EXPECT_OK(r);
    EXPECT_VALUES((*r)[0], {12});
    EXPECT_VALUES((*r)[1], {12});

    // A loop whose trip count depends on the device cannot run collectives in lockstep: an Error.
    const std::string diverge = "HloModule m, num_partitions=2\n" + kAdd + R"(
cond {
  p = (u32[], f32[1]) parameter(0)
  i = u32[] get-tuple-element(p), index=0
  pid = u32[] partition-id()
  ROOT lt = pred[] compare(i, pid), direction=LE
}
body {
  p = (u32[], f32[1]) parameter(0)
  i = u32[] get-tuple-element(p), index=0
  x = f32[1] get-tuple-element(p), index=1
  one = u32[] constant(1)
  i1 = u32[] add(i, one)
  s = f32[1] all-reduce(x), channel_id=1, replica_groups={{0,1}}, use_global_device_ids=true, to_apply=add
  ROOT t = (u32[], f32[1]) tuple(i1, s)
}
ENTRY e {
  x = f32[1] parameter(0)
  z = u32[] constant(0)
  init = (u32[], f32[1]) tuple(z, x)
  w = (u32[], f32[1]) while(init), condition=cond, body=body
  ROOT r = f32[1] get-tuple-element(w), index=1
})";
    auto d = Run(diverge, 2, {{F32({1}, {1})}, {F32({1}, {2})}});
    QVERIFY(!d.ok());
    QVERIFY2(d.error().message.find("disagree") != std::string::npos, d.error().message.c_str());

    // Conditional whose branch holds a collective; all devices take branch 1.
    const std::string cond = "HloModule m, num_partitions=2\n" + kAdd + R"(
b0 {
  x = f32[1] parameter(0)
  ROOT n = f32[1] negate(x)
}
b1 {
  x = f32[1] parameter(0)
  ROOT s = f32[1] all-reduce(x), channel_id=1, replica_groups={{0,1}}, use_global_device_ids=true, to_apply=add
}
ENTRY e {
  x = f32[1] parameter(0)
  i = s32[] constant(1)
  ROOT c = f32[1] conditional(i, x, x), branch_computations={b0, b1}
})";
    r = Run(cond, 2, {{F32({1}, {1})}, {F32({1}, {2})}});
    EXPECT_OK(r);
    EXPECT_VALUES((*r)[0], {3});
    EXPECT_VALUES((*r)[1], {3});
  }

  void badGroupsAreErrors() {
    const std::string out_of_range = "HloModule m, num_partitions=4\n" + kAdd + R"(
ENTRY e {
  x = f32[1] parameter(0)
  ROOT r = f32[1] all-reduce(x), channel_id=1, replica_groups={{0,5}}, use_global_device_ids=true, to_apply=add
})";
    auto m = ParseHloModule(out_of_range, "t.hlo", ParseOptions{false});
    EXPECT_OK(m);
    auto r = RunSpmd(**m, 4, PerDevice(4, [](int64_t) { return F32({1}, {1}); }));
    QVERIFY(!r.ok());
    QVERIFY2(r.error().message.find("device id 5") != std::string::npos && r.error().message.find("%r") != std::string::npos,
             r.error().message.c_str());

    const std::string uncovered = "HloModule m, num_partitions=4\n" + kAdd + R"(
ENTRY e {
  x = f32[1] parameter(0)
  ROOT r = f32[1] all-reduce(x), channel_id=1, replica_groups={{0,1}}, use_global_device_ids=true, to_apply=add
})";
    r = Run(uncovered, 4, PerDevice(4, [](int64_t) { return F32({1}, {1}); }));
    QVERIFY(!r.ok());
    QVERIFY2(r.error().message.find("device 2") != std::string::npos, r.error().message.c_str());

    // Wrong number of argument lists / argument shapes.
    PARSE(m2, uncovered);
    QVERIFY(!RunSpmd(*m2, 4, PerDevice(3, [](int64_t) { return F32({1}, {1}); })).ok());
    auto bad = RunSpmd(*m2, 4, PerDevice(4, [](int64_t) { return F32({2}, {1, 2}); }));
    QVERIFY(!bad.ok());
    QVERIFY2(bad.error().message.find("device 0") != std::string::npos, bad.error().message.c_str());
  }

  void singleDeviceEvaluateWithCollectives() {
    PARSE(m, "HloModule m\n" + kAdd + R"(
ENTRY e {
  x = f32[2] parameter(0)
  ROOT r = f32[2] all-reduce(x), channel_id=1, replica_groups={{0}}, use_global_device_ids=true, to_apply=add
})");
    auto r = Evaluate(*m, {F32({2}, {3, 4})});
    EXPECT_OK(r);
    EXPECT_VALUES(*r, {3, 4});
  }

  // ---- numerical verification ---------------------------------------------------------------------

  void verifyRowShardedMatmulWithAllReduce() {
    // C[4,3] = X[4,6] . W[6,3], contracting dim split over 2 devices (W row-sharded): each device
    // computes a partial sum that an all-reduce completes.
    const auto [original_text, spmd_text] = RowShardedMatmul(6);
    PARSE(original, original_text);
    PARSE(spmd, spmd_text);
    auto rep = VerifyPartitioned(*original, *spmd, 2, 42);
    EXPECT_OK(rep);
    QVERIFY2(rep->match, rep->detail.c_str());
    QVERIFY(rep->max_abs_error < 1e-5);
    QVERIFY(rep->tolerance > 0);
    QVERIFY2(rep->detail.find("match on 2 devices") != std::string::npos, rep->detail.c_str());

    // The same program without the all-reduce returns partial sums: a mismatch, reported with the
    // first differing element.
    PARSE(wrong, R"(HloModule matmul_wrong, num_partitions=2
ENTRY e {
  x = f32[4,3] parameter(0), sharding={devices=[1,2]0,1}
  w = f32[3,3] parameter(1), sharding={devices=[2,1]0,1}
  ROOT d = f32[4,3] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
})");
    auto bad = VerifyPartitioned(*original, *wrong, 2, 42);
    EXPECT_OK(bad);
    QVERIFY(!bad->match);
    QVERIFY(bad->max_abs_error > bad->tolerance);
    QVERIFY2(bad->detail.find("MISMATCH") != std::string::npos && bad->detail.find("first at [") != std::string::npos,
             bad->detail.c_str());

    // Different seeds give different inputs, the verdict holds for each.
    for (uint64_t seed : {1, 2, 3}) {
      auto again = VerifyPartitioned(*original, *spmd, 2, seed);
      EXPECT_OK(again);
      QVERIFY(again->match);
    }
  }

  // Mixed precision: an f32 result computed through bf16 (activations in bf16, as the papers'
  // configurations run) is held to bf16's tolerance, the least precise type it passed through:
  // the partitioned program sums its bf16 partial products in another order than the original
  // (device 0's four terms, device 1's four, then the two), which bf16's 8-bit mantissa shows. The
  // f32 tolerance alone reported such programs as mismatches. A wrong program still mismatches.
  void verifyMixedPrecisionUsesTheLeastPreciseType() {
    PARSE(original, R"(HloModule mixed, num_partitions=2
ENTRY e {
  x = f32[4,64] parameter(0), sharding={devices=[1,2]0,1}
  w = f32[64,3] parameter(1), sharding={devices=[2,1]0,1}
  xb = bf16[4,64] convert(x), sharding={devices=[1,2]0,1}
  wb = bf16[64,3] convert(w), sharding={devices=[2,1]0,1}
  d = bf16[4,3] dot(xb, wb), lhs_contracting_dims={1}, rhs_contracting_dims={0}, sharding={replicated}
  ROOT f = f32[4,3] convert(d), sharding={replicated}
})");
    const std::string body = R"(
ENTRY e {
  x = f32[4,32] parameter(0), sharding={devices=[1,2]0,1}
  w = f32[32,3] parameter(1), sharding={devices=[2,1]0,1}
  xb = bf16[4,32] convert(x)
  wb = bf16[32,3] convert(w)
  d = bf16[4,3] dot(xb, wb), lhs_contracting_dims={1}, rhs_contracting_dims={0}
)";
    const std::string kAddBf16 = "add_bf16 {\n  a = bf16[] parameter(0)\n  b = bf16[] parameter(1)\n  ROOT s = bf16[] add(a, b)\n}\n";
    PARSE(spmd, "HloModule mixed_spmd, num_partitions=2\n" + kAddBf16 + body +
                    "  ar = bf16[4,3] all-reduce(d), channel_id=1, replica_groups={{0,1}}, use_global_device_ids=true, to_apply=add_bf16\n"
                    "  ROOT f = f32[4,3] convert(ar)\n}\n");
    // The same in f32 throughout: its tolerance is f32's.
    const auto [original32_text, spmd32_text] = RowShardedMatmul(64);
    PARSE(original32, original32_text);
    PARSE(spmd32, spmd32_text);
    int differing = 0;
    for (uint64_t seed = 1; seed <= 8; ++seed) {
      auto rep = VerifyPartitioned(*original, *spmd, 2, seed);
      EXPECT_OK(rep);
      QVERIFY2(rep->match, rep->detail.c_str());
      auto rep32 = VerifyPartitioned(*original32, *spmd32, 2, seed);
      EXPECT_OK(rep32);
      QVERIFY2(rep32->match, rep32->detail.c_str());
      // bf16's relative tolerance (1e-2), about 100x f32's (1e-4) at about the same magnitudes.
      QVERIFY2(rep->tolerance > 50 * rep32->tolerance,
               (std::to_string(rep->tolerance) + " vs f32 " + std::to_string(rep32->tolerance)).c_str());
      if (rep->max_abs_error > 0) ++differing;
    }
    QVERIFY2(differing > 0, "the two orders of summation never differed: the test shows nothing");
    // Partial sums without the all-reduce: still a mismatch under bf16's tolerance.
    PARSE(wrong, "HloModule mixed_wrong, num_partitions=2\n" + body + "  ROOT f = f32[4,3] convert(d)\n}\n");
    auto bad = VerifyPartitioned(*original, *wrong, 2, 1);
    EXPECT_OK(bad);
    QVERIFY2(!bad->match, bad->detail.c_str());
  }

  void verifyOutputShardedWithPartitionIdSlicing() {
    // The original's x is replicated and its result is row-sharded: each device slices its rows
    // with dynamic-slice at partition-id * 2 and multiplies them.
    PARSE(original, R"(HloModule rows, num_partitions=2
ENTRY e {
  x = f32[4,6] parameter(0), sharding={replicated}
  w = f32[6,3] parameter(1), sharding={replicated}
  ROOT d = f32[4,3] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}, sharding={devices=[2,1]0,1}
})");
    PARSE(spmd, R"(HloModule rows_spmd, num_partitions=2
ENTRY e {
  x = f32[4,6] parameter(0)
  w = f32[6,3] parameter(1)
  pid = u32[] partition-id()
  two = u32[] constant(2)
  off = u32[] multiply(pid, two)
  zero = u32[] constant(0)
  xs = f32[2,6] dynamic-slice(x, off, zero), dynamic_slice_sizes={2,6}
  ROOT d = f32[2,3] dot(xs, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
})");
    auto rep = VerifyPartitioned(*original, *spmd, 2, 7);
    EXPECT_OK(rep);
    QVERIFY2(rep->match, rep->detail.c_str());
    // Reversed device order in the output sharding: device 1 holds rows 0-1, so the same program
    // now reassembles the halves swapped.
    PARSE(swapped, R"(HloModule rows, num_partitions=2
ENTRY e {
  x = f32[4,6] parameter(0), sharding={replicated}
  w = f32[6,3] parameter(1), sharding={replicated}
  ROOT d = f32[4,3] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}, sharding={devices=[2,1]1,0}
})");
    auto bad = VerifyPartitioned(*swapped, *spmd, 2, 7);
    EXPECT_OK(bad);
    QVERIFY(!bad->match);
  }

  void verifyUnevenAndPartiallyReplicatedShards() {
    // f32[5] over 2 devices: shards of 3, device 1 holds elements 3,4 and one padding element.
    PARSE(original, R"(HloModule uneven, num_partitions=2
ENTRY e {
  x = f32[5] parameter(0), sharding={devices=[2]0,1}
  i = s32[5] parameter(1), sharding={devices=[2]0,1}
  y = f32[5] multiply(x, x), sharding={devices=[2]0,1}
  j = s32[5] add(i, i), sharding={devices=[2]0,1}
  ROOT t = (f32[5], s32[5]) tuple(y, j), sharding={{devices=[2]0,1}, {devices=[2]0,1}}
})");
    PARSE(spmd, R"(HloModule uneven_spmd, num_partitions=2
ENTRY e {
  x = f32[3] parameter(0)
  i = s32[3] parameter(1)
  y = f32[3] multiply(x, x)
  j = s32[3] add(i, i)
  ROOT t = (f32[3], s32[3]) tuple(y, j)
})");
    auto rep = VerifyPartitioned(*original, *spmd, 2, 11);
    EXPECT_OK(rep);
    QVERIFY2(rep->match, rep->detail.c_str());
    QVERIFY2(rep->detail.find("result{1} s32[5]: exact match") != std::string::npos, rep->detail.c_str());

    // An integer off by one is a mismatch (ints compare exactly).
    PARSE(off, R"(HloModule uneven_off, num_partitions=2
ENTRY e {
  x = f32[3] parameter(0)
  i = s32[3] parameter(1)
  y = f32[3] multiply(x, x)
  one = s32[] constant(1)
  ones = s32[3] broadcast(one), dimensions={}
  j0 = s32[3] add(i, i)
  j = s32[3] add(j0, ones)
  ROOT t = (f32[3], s32[3]) tuple(y, j)
})");
    auto bad = VerifyPartitioned(*original, *off, 2, 11);
    EXPECT_OK(bad);
    QVERIFY(!bad->match);
    QCOMPARE(bad->max_abs_error, 1.0);
    QCOMPARE(bad->tolerance, 0.0);

    // Partially replicated over 4 devices: rows split in 2, each half on 2 devices.
    PARSE(orig4, R"(HloModule partial, num_partitions=4
ENTRY e {
  x = f32[4,2] parameter(0), sharding={devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}
  ROOT n = f32[4,2] negate(x), sharding={devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}
})");
    PARSE(spmd4, R"(HloModule partial_spmd, num_partitions=4
ENTRY e {
  x = f32[2,2] parameter(0)
  ROOT n = f32[2,2] negate(x)
})");
    rep = VerifyPartitioned(*orig4, *spmd4, 4, 5);
    EXPECT_OK(rep);
    QVERIFY2(rep->match, rep->detail.c_str());
  }

  void verifyBf16UsesBf16Tolerance() {
    // bf16 matmul with K = 64 split over 4 devices: the partial sums are rounded to bf16 on each
    // device, so the result differs from the one-device result in the last bits but matches within
    // the bf16 tolerance.
    PARSE(original, R"(HloModule bf, num_partitions=4
ENTRY e {
  x = bf16[8,64] parameter(0), sharding={devices=[1,4]0,1,2,3}
  w = bf16[64,8] parameter(1), sharding={devices=[4,1]0,1,2,3}
  ROOT d = bf16[8,8] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}, sharding={replicated}
})");
    PARSE(spmd, R"(HloModule bf_spmd, num_partitions=4
add {
  a = bf16[] parameter(0)
  b = bf16[] parameter(1)
  ROOT s = bf16[] add(a, b)
}
ENTRY e {
  x = bf16[8,16] parameter(0)
  w = bf16[16,8] parameter(1)
  d = bf16[8,8] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT ar = bf16[8,8] all-reduce(d), channel_id=1, replica_groups={{0,1,2,3}}, use_global_device_ids=true, to_apply=add
})");
    auto rep = VerifyPartitioned(*original, *spmd, 4, 3);
    EXPECT_OK(rep);
    QVERIFY2(rep->match, rep->detail.c_str());
    QVERIFY(rep->max_abs_error > 0);  // bf16 rounding of partial sums is visible...
    QVERIFY(rep->tolerance >= 1e-2);  // ...and covered by the bf16 tolerance
  }

  void manualRegionsInTheOriginal() {
    // An original that is already partly manual: each device negates its half of x, the halves
    // are summed across devices, and SPMDShardToFullShape reassembles the full array.
    const std::string manual = "HloModule manual, num_partitions=2\n" + kAdd + R"(
ENTRY e {
  x = f32[4,2] parameter(0), sharding={replicated}
  s = f32[4,2] custom-call(x), custom_call_target="Sharding", sharding={devices=[2,1]0,1}
  m = f32[2,2] custom-call(s), custom_call_target="SPMDFullToShardShape", sharding={manual}
  n = f32[2,2] negate(m), sharding={manual}
  ar = f32[2,2] all-reduce(n), channel_id=1, replica_groups={{0,1}}, use_global_device_ids=true, to_apply=add, sharding={manual}
  ROOT f = f32[4,2] custom-call(ar), custom_call_target="SPMDShardToFullShape", sharding={devices=[2,1]0,1}
})";
    Tensor x = F32({4, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
    auto r = Run(manual, 2, {{x}, {x}}, {}, /*verify=*/false);
    EXPECT_OK(r);
    EXPECT_VALUES((*r)[0], {-6, -8, -10, -12, -6, -8, -10, -12});
    EXPECT_VALUES((*r)[1], {-6, -8, -10, -12, -6, -8, -10, -12});

    // Its SPMD form: slice by partition-id, negate, all-reduce; the result stays row-sharded.
    auto original = ParseOrFail(manual, __FILE__, __LINE__, /*verify=*/false);
    QVERIFY(original);
    PARSE(spmd, "HloModule manual_spmd, num_partitions=2\n" + kAdd + R"(
ENTRY e {
  x = f32[4,2] parameter(0)
  pid = u32[] partition-id()
  two = u32[] constant(2)
  off = u32[] multiply(pid, two)
  zero = u32[] constant(0)
  m = f32[2,2] dynamic-slice(x, off, zero), dynamic_slice_sizes={2,2}
  n = f32[2,2] negate(m)
  ROOT ar = f32[2,2] all-reduce(n), channel_id=1, replica_groups={{0,1}}, use_global_device_ids=true, to_apply=add
})");
    auto rep = VerifyPartitioned(*original, *spmd, 2, 9);
    EXPECT_OK(rep);
    QVERIFY2(rep->match, rep->detail.c_str());
  }

  // Ill-conditioning (VerifyReport::ill_conditioned): a recurrent map x <- tanh(0.6 x.W) iterated
  // 100 times amplifies rounding differences without bound. The SPMD program splits the
  // contracting dim over the two devices (partial products + an all-reduce, another order of
  // sums), which the iterations amplify past any tolerance. The check finds that its own
  // unpartitioned program moves there as much when its sums are rounded in another order, and
  // says it cannot decide rather than reporting a mismatch. The same SPMD program with the
  // all-reduce dropped (a wrong partitioning) at 3 iterations, where nothing is ill-conditioned, is
  // a dense mismatch; the correct one at 3 iterations matches without the probe.
  void verifyLeavesIllConditionedOutputsUndecided() {
    auto module_text = [](int iterations, bool spmd, bool all_reduce) {
      const std::string dot =
          spmd ? std::string(R"(
  pid = u32[] partition-id()
  pid32 = s32[] convert(pid)
  k32 = s32[] constant(32)
  off = s32[] multiply(pid32, k32)
  z0 = s32[] constant(0)
  xs = f32[4,32] dynamic-slice(x, z0, off), dynamic_slice_sizes={4,32}
  ws = f32[32,64] dynamic-slice(w, off, z0), dynamic_slice_sizes={32,64}
  part = f32[4,64] dot(xs, ws), lhs_contracting_dims={1}, rhs_contracting_dims={0})") +
                     (all_reduce ? "\n  y = f32[4,64] all-reduce(part), replica_groups={{0,1}}, to_apply=add"
                                 : "\n  y = f32[4,64] copy(part)")
               : std::string("\n  y = f32[4,64] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}");
      return R"(HloModule chaos, num_partitions=2

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

body {
  p = (s32[], f32[4,64], f32[64,64]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  x = f32[4,64] get-tuple-element(p), index=1
  w = f32[64,64] get-tuple-element(p), index=2)" +
             dot + R"(
  c = f32[] constant(0.6)
  cb = f32[4,64] broadcast(c), dimensions={}
  ym = f32[4,64] multiply(y, cb)
  t = f32[4,64] tanh(ym)
  one = s32[] constant(1)
  i2 = s32[] add(i, one)
  ROOT r = (s32[], f32[4,64], f32[64,64]) tuple(i2, t, w)
}

cond {
  p = (s32[], f32[4,64], f32[64,64]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant()" + std::to_string(iterations) + R"()
  ROOT lt = pred[] compare(i, n), direction=LT
}

ENTRY e {
  x = f32[4,64] parameter(0), sharding={replicated}
  w = f32[64,64] parameter(1), sharding={replicated}
  zero = s32[] constant(0)
  init = (s32[], f32[4,64], f32[64,64]) tuple(zero, x, w)
  l = (s32[], f32[4,64], f32[64,64]) while(init), condition=cond, body=body
  ROOT out = f32[4,64] get-tuple-element(l), index=1, sharding={replicated}
})";
    };
    NumericVerifyOptions one_magnitude;
    one_magnitude.float_exponent_spread = 0;
    {
      PARSE(original, module_text(100, false, true));
      PARSE(spmd, module_text(100, true, true));
      auto rep = VerifyPartitioned(*original, *spmd, 2, 1, one_magnitude);
      EXPECT_OK(rep);
      QVERIFY2(rep->inconclusive && !rep->match, rep->detail.c_str());
      QVERIFY2(rep->ill_conditioned * 10 > rep->float_elements, rep->detail.c_str());
      QVERIFY2(rep->detail.rfind("INCONCLUSIVE on 2 devices", 0) == 0, rep->detail.c_str());
      // Without the probe the same comparison is a plain mismatch.
      NumericVerifyOptions unjudged = one_magnitude;
      unjudged.judge_conditioning = false;
      auto plain = VerifyPartitioned(*original, *spmd, 2, 1, unjudged);
      EXPECT_OK(plain);
      QVERIFY(!plain->match && !plain->inconclusive && plain->ill_conditioned == 0);
    }
    {
      PARSE(original, module_text(3, false, true));
      PARSE(spmd, module_text(3, true, true));
      auto rep = VerifyPartitioned(*original, *spmd, 2, 1, one_magnitude);
      EXPECT_OK(rep);
      QVERIFY2(rep->match && rep->ill_conditioned == 0, rep->detail.c_str());
      PARSE(wrong, module_text(3, true, false));
      auto bad = VerifyPartitioned(*original, *wrong, 2, 1, one_magnitude);
      EXPECT_OK(bad);
      QVERIFY2(!bad->match && !bad->inconclusive && bad->dense_difference, bad->detail.c_str());
    }
  }

  void verifyReportsModulesThatDoNotFit() {
    PARSE(original, R"(HloModule m, num_partitions=2
ENTRY e {
  x = f32[4] parameter(0), sharding={devices=[2]0,1}
  ROOT n = f32[4] negate(x), sharding={devices=[2]0,1}
})");
    PARSE(spmd, R"(HloModule s, num_partitions=2
ENTRY e {
  x = f32[4] parameter(0)
  ROOT n = f32[4] negate(x)
})");
    // The SPMD program wants the full array per device where the original's sharding gives halves.
    auto r = VerifyPartitioned(*original, *spmd, 2, 1);
    QVERIFY(!r.ok());
    QVERIFY2(r.error().message.find("parameter 0") != std::string::npos && r.error().message.find("f32[2]") != std::string::npos,
             r.error().message.c_str());
  }

  void shardAndAssembleRoundTrip() {
    // f32[5,3] on a 2x2 mesh, dim 0 over 2 (uneven: 3 + 2), dim 1 over 2 (2 + 1).
    auto sh = HloSharding::Parse("{devices=[2,2]0,1,2,3}");
    EXPECT_OK(sh);
    std::vector<double> v(15);
    for (int i = 0; i < 15; ++i) v[static_cast<size_t>(i)] = i;
    Tensor full = F32({5, 3}, v);
    std::vector<Tensor> pieces;
    for (int64_t d = 0; d < 4; ++d) {
      auto p = ShardForDevice(full, *sh, d);
      EXPECT_OK(p);
      QCOMPARE(p->dims(), (std::vector<int64_t>{3, 2}));
      pieces.push_back(*p);
    }
    EXPECT_VALUES(pieces[3], {11, 0, 14, 0, 0, 0});  // rows 3-4, col 2, zero padding
    auto back = AssembleFromDevices(pieces, *sh, full.shape());
    EXPECT_OK(back);
    QVERIFY(back->Identical(full));
  }
};

QTEST_APPLESS_MAIN(TestVirtualCluster)
#include "test_virtual_cluster.moc"
