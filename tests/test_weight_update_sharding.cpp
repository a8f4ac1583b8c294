// Automatic cross-replica sharding of the weight update (paper 000_7bf40aea6196c6f5, "Automatic
// Cross-Replica Sharding of Weight Update in Data-Parallel Training"): redundancy analysis (section
// 3.1), profitability (3.2), shard formats (4.1: the paper's [3,3,256,256] examples), the rewrite
// and its placement across loops and steps (2.2, 4, 4.2), topology (5.1 two phases, 5.2 partial
// sharding and batching). Every rewritten program is verified numerically on the virtual cluster
// against the unpartitioned data-parallel program: SGD, Adam, Adafactor, LARS; even shards and
// uneven ones (10 replicas, padded); inside a while loop.
#include <QtTest/QtTest>

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/eval/evaluator.h"
#include "core/eval/numeric_verify.h"
#include "core/eval/virtual_cluster.h"
#include "core/ir/hlo_text.h"
#include "core/zoo/model_zoo.h"
#include "partitioner/propagation/sharding_propagation.h"
#include "partitioner/spmd/spmd_partitioner.h"
#include "partitioner/weight_update_sharding/redundancy.h"
#include "partitioner/weight_update_sharding/shard_format.h"
#include "tests/cli_test_support.h"
#include "partitioner/weight_update_sharding/weight_update_sharding.h"
#include "simulator/engine.h"
#include "simulator/hardware.h"
#include "simulator/topology.h"

using namespace shardscope;
using namespace shardscope::sim;

namespace {

struct Pipeline {
  std::unique_ptr<Module> annotated;  // after propagation: the reference the rewrite is checked against
  PartitionResult partition;          // the plain data-parallel SPMD program
  WeightUpdateShardingResult wus;
  int64_t devices = 0;
};

std::unique_ptr<Module> Parse(const std::string& text) {
  auto m = ParseHloModule(text, "test.hlo");
  if (!m.ok()) qFatal("parse: %s", m.error().message.c_str());
  return std::move(m).value();
}

// Zoo model -> propagation (entry parameters and outputs may take inferred shardings, as the CLI
// does) -> SPMD partitioning -> weight-update sharding.
std::optional<Pipeline> RunModule(std::unique_ptr<Module> m, const WeightUpdateShardingOptions& o, std::string* why) {
  Pipeline p;
  PropagationOptions po;
  po.propagate_to_output = {true};
  po.propagate_to_parameters = {true};
  if (auto r = PropagateShardings(*m, po); !r.ok()) {
    *why = "propagate: " + r.error().message;
    return std::nullopt;
  }
  auto part = PartitionModule(*m);
  if (!part.ok()) {
    *why = "partition: " + part.error().message;
    return std::nullopt;
  }
  p.devices = part->module->num_partitions;
  auto w = ShardWeightUpdates(*part->module, o);
  if (!w.ok()) {
    *why = "weight-update sharding: " + w.error().message;
    return std::nullopt;
  }
  p.annotated = std::move(m);
  p.partition = std::move(part).value();
  p.wus = std::move(w).value();
  return p;
}

std::optional<Pipeline> RunZoo(const std::string& model, const ZooOverrides& overrides, const WeightUpdateShardingOptions& o,
                               std::string* why) {
  auto m = ZooBuild(model, overrides);
  if (!m.ok()) {
    *why = "zoo: " + m.error().message;
    return std::nullopt;
  }
  return RunModule(std::move(m).value(), o, why);
}

// Random inputs a training step can take: second moments and Adafactor factors >= 0, LayerNorm
// scales near 1, labels 0 / 1, ids within every table (>= 8 rows), the rest uniform in [-1, 1].
std::vector<Tensor> StepArguments(const Computation& c, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<Tensor> args;
  for (const Instruction* prm : c.parameters()) {
    const Shape& s = prm->shape();
    const std::string& n = prm->name();
    std::vector<double> v(static_cast<size_t>(s.ElementCount()));
    for (double& x : v) {
      x = u(rng);
      if (IsInteger(s.type)) x = std::floor((x + 1) * 4);  // 0..7
      if (n.find("scale") != std::string::npos) x = 1 + 0.3 * x;
      if ((n.size() > 2 && n.compare(n.size() - 2, 2, "_v") == 0) || n.find("adafactor") != std::string::npos) x = std::abs(x) + 0.01;
      if (n == "label") x = x > 0 ? 1 : 0;
    }
    auto t = Tensor::FromValues(s.type, s.dims, v);
    if (!t.ok()) qFatal("%s", t.error().message.c_str());
    args.push_back(std::move(t).value());
  }
  return args;
}

bool HasNaN(const Tensor& t) {
  if (t.IsTuple()) {
    for (const Tensor& e : t.elements())
      if (HasNaN(e)) return true;
    return false;
  }
  if (!IsFloatingPoint(t.type())) return false;
  for (int64_t i = 0; i < t.size(); ++i)
    if (std::isnan(t.GetDouble(i))) return true;
  return false;
}

// The rewritten program (the three step programs composed when split) against the unpartitioned
// module: the original runs on one device, the program on the virtual cluster with each device's
// shard of the same inputs, the outputs reassembled and compared (ints exactly, floats within the
// evaluator's tolerance). The reference must be free of NaN, so nothing compares vacuously.
std::string Verify(const Pipeline& p, uint64_t seed = 7) {
  const Module& original = *p.annotated;
  std::unique_ptr<Module> composed;
  if (p.wus.split) {
    auto c = ComposeStepPrograms(p.wus);
    if (!c.ok()) return "compose: " + c.error().message;
    composed = std::move(c).value();
  }
  const Module& program = composed ? *composed : *p.wus.module;
  const std::vector<Tensor> args = StepArguments(*original.entry(), seed);
  auto reference = Evaluate(original, args);
  if (!reference.ok()) return "reference: " + reference.error().message;
  if (HasNaN(*reference)) return "the reference has NaN: the inputs do not suit the optimizer";
  std::vector<std::vector<Tensor>> per_device(static_cast<size_t>(p.devices));
  for (size_t i = 0; i < args.size(); ++i) {
    const Instruction* prm = original.entry()->parameters()[i];
    const HloSharding sharding = prm->has_sharding() ? *prm->sharding() : HloSharding::Replicate();
    for (int64_t d = 0; d < p.devices; ++d) {
      auto piece = ShardForDevice(args[i], sharding, d);
      if (!piece.ok()) return "shard input " + prm->name() + ": " + piece.error().message;
      per_device[static_cast<size_t>(d)].push_back(std::move(piece).value());
    }
  }
  auto out = RunSpmd(program, p.devices, per_device);
  if (!out.ok()) return "run: " + out.error().message + "\n" + PrintHloModule(program);
  const Instruction* root = original.entry()->root();
  const HloSharding root_sharding = root->has_sharding() ? *root->sharding() : HloSharding::Replicate();
  auto full = AssembleFromDevices(*out, root_sharding, root->shape());
  if (!full.ok()) return "assemble: " + full.error().message;
  const VerifyReport v = CompareTensors(*reference, *full, MaxReductionSize(original));
  if (!v.match) return "mismatch: " + v.detail;
  return "";
}

int64_t Count(const Module& m, Opcode op, const Computation* in = nullptr) {
  int64_t n = 0;
  for (const auto& c : m.computations()) {
    if (in && c.get() != in) continue;
    for (const auto& i : c->instructions()) n += i->opcode() == op ? 1 : 0;
  }
  return n;
}

// Collective instructions of `op` in `m`, counting each operand of a combined one.
int64_t CountOperands(const Module& m, Opcode op, const std::string& computation = "") {
  int64_t n = 0;
  for (const auto& c : m.computations()) {
    if (!computation.empty() && c->name() != computation) continue;
    for (const auto& i : c->instructions())
      if (i->opcode() == op) n += i->operand_count();
  }
  return n;
}

const WeightUpdateDecision* Decision(const WeightUpdateShardingResult& r, const std::string& weight) {
  for (const auto& d : r.decisions)
    if (d.weight == weight) return &d;
  return nullptr;
}

std::string S(int64_t v) { return std::to_string(v); }

WeightUpdateShardingOptions Forced() {
  WeightUpdateShardingOptions o;
  o.force = true;
  return o;
}

}  // namespace

class TestWeightUpdateSharding : public QObject {
  Q_OBJECT

 private slots:
  // ---- section 4.1: data formatting ---------------------------------------------------------------

  // The paper's own examples: ResNet's [3,3,256,256] kernel reshaped to [9,256,256] and padded to
  // [10,256,256] for 10 replicas (not [10,3,256,256] or [4,5,256,256]); bitcast to [576,8,128] on
  // TPU (8 x 128 tiles) for 64 replicas, no padding.
  void paperShardFormats() {
    auto ten = wus::ChooseShardFormat({3, 3, 256, 256}, 10, {}, 8, 128);
    QVERIFY(ten);
    QVERIFY(!ten->bitcast);
    QCOMPARE(ten->merge, int64_t(2));
    QCOMPARE(ten->FormattedDims(), (std::vector<int64_t>{9, 256, 256}));
    QCOMPARE(ten->PaddedDims(), (std::vector<int64_t>{10, 256, 256}));
    QCOMPARE(ten->ShardDims(), (std::vector<int64_t>{1, 256, 256}));
    QCOMPARE(QString::fromStdString(ten->Describe()),
             QString("[3,3,256,256] -> merge [9,256,256] -> pad [10,256,256] -> 10 x [1,256,256]"));
    auto sixty_four = wus::ChooseShardFormat({3, 3, 256, 256}, 64, {}, 8, 128);
    QVERIFY(sixty_four);
    QVERIFY(sixty_four->bitcast);
    QCOMPARE(sixty_four->FormattedDims(), (std::vector<int64_t>{576, 8, 128}));
    QVERIFY(!sixty_four->padding());
    QCOMPARE(sixty_four->ShardDims(), (std::vector<int64_t>{9, 8, 128}));
    // Without the tiled layout's bitcast, 64 replicas pad the merged dims: 9 -> 64.
    auto no_tiles = wus::ChooseShardFormat({3, 3, 256, 256}, 64, {}, 0, 0);
    QVERIFY(no_tiles && !no_tiles->bitcast);
    QCOMPARE(no_tiles->PaddedDims(), (std::vector<int64_t>{64, 256, 256}));
    // An even split needs no reformatting: a Transformer's [1024,4096] over 16.
    auto even = wus::ChooseShardFormat({1024, 4096}, 16, {}, 8, 128);
    QVERIFY(even && !even->bitcast && even->merge == 1 && !even->padding());
    QCOMPARE(even->ShardDims(), (std::vector<int64_t>{64, 4096}));
    // The fewest dims merged that divide: [3,16,...] over 3 keeps dim 0 alone.
    auto three = wus::ChooseShardFormat({3, 16, 2, 4}, 3, {}, 8, 128);
    QVERIFY(three && three->merge == 1 && !three->padding());
  }

  // Section 4.1: a reduce may not see a collapsed dim merged with a kept one; a bitcast only suits a
  // reduce over every dim.
  void reduceConstraintsOnFormats() {
    // A reduce over dim 1 of [3,3,256,256] (keeps dim 0): dims 0 and 1 may not merge, and the bitcast
    // is out; 10 replicas then pad dim 0 alone: 3 -> 10.
    auto f = wus::ChooseShardFormat({3, 3, 256, 256}, 10, {{{1}}}, 8, 128);
    QVERIFY(f);
    QCOMPARE(f->merge, int64_t(1));
    QCOMPARE(f->PaddedDims(), (std::vector<int64_t>{10, 3, 256, 256}));
    auto g = wus::ChooseShardFormat({3, 3, 256, 256}, 64, {{{1}}}, 8, 128);
    QVERIFY(g && !g->bitcast);
    // A reduce over all dims (a norm) allows everything.
    auto h = wus::ChooseShardFormat({3, 3, 256, 256}, 64, {{{0, 1, 2, 3}}}, 8, 128);
    QVERIFY(h && h->bitcast);
    // Scalars are not shardable.
    QVERIFY(!wus::ChooseShardFormat({}, 4, {}, 8, 128));
  }

  // ---- section 5: schemes -----------------------------------------------------------------------

  void shardingSchemes() {
    // Two phases on a 2 x 4 replica mesh: rows {0..3},{4..7}, then columns; device (r, c) holds
    // shard c * 2 + r.
    auto two = wus::TwoPhaseScheme(2, 4);
    QCOMPARE(two.shards, int64_t(8));
    QCOMPARE(two.phases.size(), size_t(2));
    QCOMPARE(two.phases[0], (wus::Groups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
    QCOMPARE(two.phases[1], (wus::Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
    QCOMPARE(two.shard_index, (std::vector<int64_t>{0, 2, 4, 6, 1, 3, 5, 7}));
    // Partial: each row shards on its own (4 shards), an all-reduce across rows per column.
    auto part = wus::PartialScheme(2, 4);
    QCOMPARE(part.shards, int64_t(4));
    QCOMPARE(part.shard_index, (std::vector<int64_t>{0, 1, 2, 3, 0, 1, 2, 3}));
    QCOMPARE(part.cross_groups, (wus::Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
    QCOMPARE(part.shard_groups, (wus::Groups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  }

  // ---- section 3.1: redundancy ----------------------------------------------------------------

  void redundancyAnalysis() {
    // w replicated (annotated), x per replica. A full all-reduce is a source, a subgroup one is
    // not; the loop carries w (redundant), a counter (redundant) and an x-derived accumulator
    // (not); a conditional on a redundant predicate returns redundant values.
    const std::string text = R"(HloModule r, num_partitions=4
%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}
%body (p: (s32[], f32[8], f32[8])) -> (s32[], f32[8], f32[8]) {
  %p = (s32[], f32[8], f32[8]) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %w = f32[8] get-tuple-element(%p), index=1
  %acc = f32[8] get-tuple-element(%p), index=2
  %one = s32[] constant(1)
  %i1 = s32[] add(%i, %one)
  %w1 = f32[8] multiply(%w, %w)
  %acc1 = f32[8] add(%acc, %w1)
  ROOT %t = (s32[], f32[8], f32[8]) tuple(%i1, %w1, %acc1)
}
%cond (p: (s32[], f32[8], f32[8])) -> pred[] {
  %p = (s32[], f32[8], f32[8]) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %n = s32[] constant(3)
  ROOT %lt = pred[] compare(%i, %n), direction=LT
}
%yes (q: f32[8]) -> f32[8] {
  %q = f32[8] parameter(0)
  ROOT %n = f32[8] negate(%q)
}
%no (q: f32[8]) -> f32[8] {
  ROOT %q = f32[8] parameter(0)
}
ENTRY %main (w: f32[8], x: f32[8]) -> (f32[8], f32[8], f32[8], f32[8], f32[8]) {
  %w = f32[8] parameter(0), sharding={replicated}
  %x = f32[8] parameter(1), sharding={devices=[4]<=[4]}
  %full = f32[8] all-reduce(%x), channel_id=1, replica_groups={{0,1,2,3}}, use_global_device_ids=true, to_apply=%add
  %sub = f32[8] all-reduce(%x), channel_id=2, replica_groups={{0,1},{2,3}}, use_global_device_ids=true, to_apply=%add
  %upd = f32[8] subtract(%w, %full)
  %mixed = f32[8] add(%upd, %sub)
  %zero = s32[] constant(0)
  %init = (s32[], f32[8], f32[8]) tuple(%zero, %upd, %x)
  %loop = (s32[], f32[8], f32[8]) while(%init), condition=%cond, body=%body
  %lw = f32[8] get-tuple-element(%loop), index=1
  %lacc = f32[8] get-tuple-element(%loop), index=2
  %c = f32[] constant(1)
  %cs = f32[1] reshape(%c)
  %pr = pred[1] compare(%cs, %cs), direction=EQ
  %pred = pred[] reshape(%pr)
  %br = f32[8] conditional(%pred, %upd, %upd), true_computation=%yes, false_computation=%no
  ROOT %out = (f32[8], f32[8], f32[8], f32[8], f32[8]) tuple(%upd, %mixed, %lw, %lacc, %br)
}
)";
    auto m = Parse(text);
    auto r = wus::RedundancyAnalysis::Run(*m, {true, false});
    QVERIFY2(r.ok(), r.ok() ? "" : r.error().message.c_str());
    auto at = [&](const char* n) { return m->FindInstruction(n); };
    QVERIFY(r->IsRedundant(at("w")));
    QVERIFY(!r->IsRedundant(at("x")));
    QVERIFY(r->IsRedundant(at("full")));
    QVERIFY(r->IsFullCollective(at("full")));
    QVERIFY(!r->IsRedundant(at("sub")));
    QVERIFY(r->IsRedundant(at("upd")));
    QVERIFY(!r->IsRedundant(at("mixed")));
    QVERIFY(r->IsRedundant(at("lw")));     // fixed point: w stays redundant through the loop
    QVERIFY(!r->IsRedundant(at("lacc")));  // the accumulator starts from x
    QVERIFY(r->IsLeafRedundant(at("loop"), 0));
    QVERIFY(!r->IsLeafRedundant(at("loop"), 2));
    QVERIFY(r->IsRedundant(m->FindInstruction("body/w1")));
    QVERIFY(!r->IsRedundant(m->FindInstruction("body/acc1")));
    QVERIFY(r->IsRedundant(at("br")));
  }

  // A loop whose condition reads a per-replica value: nothing in it is redundant (the replicas
  // need not agree on the trip count).
  void redundancyNonRedundantCondition() {
    const std::string text = R"(HloModule r, num_partitions=2
%body (p: (f32[], f32[4])) -> (f32[], f32[4]) {
  %p = (f32[], f32[4]) parameter(0)
  %s = f32[] get-tuple-element(%p), index=0
  %w = f32[4] get-tuple-element(%p), index=1
  %w2 = f32[4] add(%w, %w)
  ROOT %t = (f32[], f32[4]) tuple(%s, %w2)
}
%cond (p: (f32[], f32[4])) -> pred[] {
  %p = (f32[], f32[4]) parameter(0)
  %s = f32[] get-tuple-element(%p), index=0
  %z = f32[] constant(0)
  ROOT %lt = pred[] compare(%s, %z), direction=LT
}
ENTRY %main (s: f32[], w: f32[4]) -> (f32[], f32[4]) {
  %s = f32[] parameter(0)
  %w = f32[4] parameter(1), sharding={replicated}
  %init = (f32[], f32[4]) tuple(%s, %w)
  ROOT %loop = (f32[], f32[4]) while(%init), condition=%cond, body=%body
}
)";
    auto m = Parse(text);
    auto r = wus::RedundancyAnalysis::Run(*m, {false, true});
    QVERIFY(r.ok());
    QVERIFY(!r->IsLeafRedundant(m->FindInstruction("loop"), 1));
    QVERIFY(!r->IsRedundant(m->FindInstruction("body/w2")));
  }

  // ---- the rewrite, every optimizer, even and uneven shards ---------------------------------------

  void optimizersVerified_data() {
    QTest::addColumn<QString>("optimizer");
    QTest::addColumn<int>("mesh_x");
    QTest::addColumn<int>("mesh_y");
    for (const char* opt : {"sgd", "adam", "adafactor", "lars"}) {
      QTest::newRow((std::string(opt) + ", 2x2 replicas").c_str()) << opt << 2 << 2;
      QTest::newRow((std::string(opt) + ", 10 replicas (uneven, padded)").c_str()) << opt << 10 << 1;
    }
  }
  void optimizersVerified() {
    QFETCH(QString, optimizer);
    QFETCH(int, mesh_x);
    QFETCH(int, mesh_y);
    const int64_t n = mesh_x * mesh_y;
    std::string why;
    // One Transformer layer (weights [16], [3,16,2,4], [2,4,16], [16], [16,32], [32,16]), data-parallel.
    auto p = RunZoo("transformer",
                    {{"annotations", "data-parallel"}, {"layers", "1"}, {"batch", S(2 * n)}, {"seq", "4"}, {"model", "16"},
                     {"heads", "2"}, {"head_dim", "4"}, {"hidden", "32"}, {"mesh_x", S(mesh_x)}, {"mesh_y", S(mesh_y)},
                     {"optimizer", optimizer.toStdString()}},
                    Forced(), &why);
    QVERIFY2(p, why.c_str());
    const std::string err = Verify(*p);
    QVERIFY2(err.empty(), err.c_str());
    // Every gradient all-reduce (6 weights) became a reduce-scatter.
    QCOMPARE(p->wus.replaced_all_reduces.size(), size_t(6));
    QCOMPARE(CountOperands(*p->wus.module, Opcode::kReduceScatter), int64_t(6));
    // What remains: the loss's all-reduce, plus (LARS, Adafactor) the batched all-reduces of the
    // norms and moments computed on shards.
    const int64_t left = Count(*p->wus.module, Opcode::kAllReduce) - (Count(*p->partition.module, Opcode::kAllReduce) - 6);
    if (optimizer == "sgd" || optimizer == "adam") QCOMPARE(left, int64_t(0));
    else QVERIFY(left >= 1);
    for (const auto& d : p->wus.decisions) QVERIFY2(d.sharded, d.reason.c_str());
    // The formats: wi [16,32] splits evenly over 2x2; over 10 its 16 rows pad to 20, W_qkv
    // [3,16,2,4] merges to [48,2,4] and pads to [50,2,4] (section 4.1).
    const WeightUpdateDecision* wi = Decision(p->wus, "layer0_wi");
    const WeightUpdateDecision* wqkv = Decision(p->wus, "layer0_wqkv");
    QVERIFY(wi && wqkv);
    if (n == 4) {
      QCOMPARE(QString::fromStdString(wi->format), QString("[16,32] -> 4 x [4,32]"));
    } else {
      QCOMPARE(QString::fromStdString(wi->format), QString("[16,32] -> pad [20,32] -> 10 x [2,32]"));
      QCOMPARE(QString::fromStdString(wqkv->format), QString("[3,16,2,4] -> merge [48,2,4] -> pad [50,2,4] -> 10 x [5,2,4]"));
    }
    // Non-elementwise optimizer ops run on shards (section 4.1): LARS's norms, Adafactor's
    // factored moments and RMS.
    if (optimizer == "lars") {
      QVERIFY(wi->non_elementwise.size() >= 2);  // |w| and |g|
      for (const auto& r : wi->non_elementwise) QVERIFY(r.find("masked") != std::string::npos);
    }
    if (optimizer == "adafactor") {
      // Row factor [16] kept on the shard (reduce over the columns keeps the shard dim), column
      // factor [32] and the RMS reduced over it: masked + all-reduce.
      int keep = 0, masked = 0;
      for (const auto& r : wi->non_elementwise) {
        keep += r.find("keeping the shard dims") != std::string::npos;
        masked += r.find("masked") != std::string::npos;
      }
      QVERIFY(keep >= 1);
      QVERIFY(masked >= 2);
    }
    // The step is split (no loop): the main program takes the auxiliaries and weights sharded.
    QVERIFY(p->wus.split);
    const Computation* main = p->wus.module->entry();
    const Instruction* wi_param = nullptr;
    for (const Instruction* prm : main->parameters())
      if (prm->name() == "layer0_wi") wi_param = prm;
    QVERIFY(wi_param);
    QCOMPARE(wi_param->shape().dims, (std::vector<int64_t>{n == 4 ? 4 : 2, 32}));
  }

  // Section 4.2: inside a compiler-visible training loop, weights and auxiliaries stay sharded
  // across iterations; the weight is all-gathered in the body before the forward pass, the
  // auxiliaries only after the loop.
  void trainingLoop_data() {
    QTest::addColumn<QString>("optimizer");
    QTest::addColumn<int>("replicas");
    QTest::newRow("adam, 4 replicas") << "adam" << 4;
    QTest::newRow("adam, 10 replicas") << "adam" << 10;
    QTest::newRow("lars, 10 replicas") << "lars" << 10;
    QTest::newRow("adafactor, 4 replicas") << "adafactor" << 4;
  }
  void trainingLoop() {
    QFETCH(QString, optimizer);
    QFETCH(int, replicas);
    std::string why;
    auto p = RunZoo("mlp",
                    {{"annotations", "data-parallel"}, {"layers", "2"}, {"batch", S(2 * replicas)}, {"model", "8"},
                     {"hidden", "16"}, {"mesh_x", S(replicas)}, {"mesh_y", "1"}, {"optimizer", optimizer.toStdString()},
                     {"steps", "3"}},
                    Forced(), &why);
    QVERIFY2(p, why.c_str());
    const std::string err = Verify(*p);
    QVERIFY2(err.empty(), err.c_str());
    QVERIFY(!p->wus.split);  // the loop keeps the state sharded: no step split
    const Module& m = *p->wus.module;
    const Instruction* loop = nullptr;
    for (const auto& i : m.entry()->instructions())
      if (i->opcode() == Opcode::kWhile) loop = i.get();
    QVERIFY(loop);
    const Computation* body = loop->while_body();
    // The loop state holds shards: w1 [8,16] (state element 3: after the counter, x, target) over
    // `replicas` devices, padded for 10.
    const int64_t rows = replicas == 4 ? 2 : 1;
    QCOMPARE(loop->shape().tuple[3].dims, (std::vector<int64_t>{rows, 16}));
    QCOMPARE(body->parameter(0)->shape().tuple[3].dims, (std::vector<int64_t>{rows, 16}));
    // Reduce-scatters in the body for the 8 weights (2 layers of w1, b1, w2, b2).
    QCOMPARE(CountOperands(m, Opcode::kReduceScatter, body->name()), int64_t(8));
    // The body gathers the 8 weights (before the forward pass), the entry gathers the final
    // weights and every sharded auxiliary after the loop, and nothing gathers those in the body.
    // Adam: m and v of each; LARS: momentum; Adafactor: the row factors of w1 and w2 and the v of
    // the biases (the column factors come out of a masked reduce + all-reduce whole).
    const int64_t aux = optimizer == "adam" ? 16 : optimizer == "lars" ? 8 : 8;
    QCOMPARE(CountOperands(m, Opcode::kAllGather, body->name()), int64_t(8));
    QCOMPARE(CountOperands(m, Opcode::kAllGather, m.entry()->name()), int64_t(8) + aux);
    // The all-gathers in the body say why they are there.
    int in_body = 0;
    for (const auto& c : p->wus.collectives)
      if (c.kind == Opcode::kAllGather && c.reason.find("kept sharded across iterations") != std::string::npos) ++in_body;
    QVERIFY(in_body >= 1);
    bool after_loop = false;
    for (const auto& c : p->wus.collectives)
      after_loop = after_loop || (c.kind == Opcode::kAllGather && c.reason.find("after the loop") != std::string::npos);
    QVERIFY(after_loop);
  }

  // Section 4.2: a shard passed to a rarely taken branch (remainder(step, 4) == 0: a checkpoint
  // every 4 steps) is all-gathered inside that branch, where it runs a quarter of the time; the
  // loop keeps the weight sharded and both programs give every device the same results. (Each
  // branch has its own operand here: when both branches take one tuple, the branch that does not
  // read the weight still receives it whole, gathered every iteration.)
  void gatherInRarelyTakenBranch() {
    const std::string text = R"(HloModule ckpt, num_partitions=4
%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}
%save (sp: (f32[16,8], f32[16,8])) -> f32[16,8] {
  %sp = (f32[16,8], f32[16,8]) parameter(0)
  ROOT %sw = f32[16,8] get-tuple-element(%sp), index=0
}
%keep (kp: (f32[16,8])) -> f32[16,8] {
  %kp = (f32[16,8]) parameter(0)
  ROOT %kc = f32[16,8] get-tuple-element(%kp), index=0
}
%body (p: (s32[], f32[16,8], f32[16,8], f32[16,8])) -> (s32[], f32[16,8], f32[16,8], f32[16,8]) {
  %p = (s32[], f32[16,8], f32[16,8], f32[16,8]) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %w = f32[16,8] get-tuple-element(%p), index=1
  %ck = f32[16,8] get-tuple-element(%p), index=2
  %x = f32[16,8] get-tuple-element(%p), index=3
  %g0 = f32[16,8] multiply(%x, %w)
  %g = f32[16,8] all-reduce(%g0), replica_groups={{0,1,2,3}}, to_apply=%add
  %lr = f32[] constant(0.1)
  %lrb = f32[16,8] broadcast(%lr), dimensions={}
  %step = f32[16,8] multiply(%g, %lrb)
  %w1 = f32[16,8] subtract(%w, %step)
  %one = s32[] constant(1)
  %i1 = s32[] add(%i, %one)
  %four = s32[] constant(4)
  %r = s32[] remainder(%i1, %four)
  %zero = s32[] constant(0)
  %pr = pred[] compare(%r, %zero), direction=EQ
  %args = (f32[16,8], f32[16,8]) tuple(%w1, %ck)
  %old = (f32[16,8]) tuple(%ck)
  %ck1 = f32[16,8] conditional(%pr, %args, %old), true_computation=%save, false_computation=%keep
  ROOT %t = (s32[], f32[16,8], f32[16,8], f32[16,8]) tuple(%i1, %w1, %ck1, %x)
}
%cond (cp: (s32[], f32[16,8], f32[16,8], f32[16,8])) -> pred[] {
  %cp = (s32[], f32[16,8], f32[16,8], f32[16,8]) parameter(0)
  %ci = s32[] get-tuple-element(%cp), index=0
  %n = s32[] constant(6)
  ROOT %lt = pred[] compare(%ci, %n), direction=LT
}
ENTRY %main (weight: f32[16,8], saved: f32[16,8], data: f32[16,8]) -> (f32[16,8], f32[16,8]) {
  %weight = f32[16,8] parameter(0)
  %saved = f32[16,8] parameter(1)
  %data = f32[16,8] parameter(2)
  %i0 = s32[] constant(0)
  %init = (s32[], f32[16,8], f32[16,8], f32[16,8]) tuple(%i0, %weight, %saved, %data)
  %loop = (s32[], f32[16,8], f32[16,8], f32[16,8]) while(%init), condition=%cond, body=%body
  %wf = f32[16,8] get-tuple-element(%loop), index=1
  %ckf = f32[16,8] get-tuple-element(%loop), index=2
  ROOT %out = (f32[16,8], f32[16,8]) tuple(%wf, %ckf)
}
)";
    auto input = Parse(text);
    WeightUpdateShardingOptions o = Forced();
    o.redundant_parameters = {"weight", "saved"};
    auto r = ShardWeightUpdates(*input, o);
    QVERIFY2(r.ok(), r.ok() ? "" : r.error().message.c_str());
    QCOMPARE(r->replaced_all_reduces.size(), size_t(1));
    // The true branch gathers the updated weight's shard; the false branch gathers nothing.
    const Module& m = *r->module;
    const Computation* save = nullptr;
    const Computation* keep = nullptr;
    for (const auto& c : m.computations()) {
      if (c->name().find("save") != std::string::npos) save = c.get();
      if (c->name().find("keep") != std::string::npos) keep = c.get();
    }
    QVERIFY(save && keep);
    QCOMPARE(Count(m, Opcode::kAllGather, save), int64_t(1));
    QCOMPARE(Count(m, Opcode::kAllGather, keep), int64_t(0));
    // The body gathers the weight once, for the forward pass; the loop state keeps the shard.
    for (const auto& c : m.computations())
      if (c->name().find("body") != std::string::npos) QCOMPARE(Count(m, Opcode::kAllGather, c.get()), int64_t(1));
    std::string reasons;
    for (const auto& c : r->collectives)
      if (c.kind == Opcode::kAllGather) reasons += c.reason + "\n";
    QVERIFY2(reasons.find("inside the branch taken every 4 steps") != std::string::npos, reasons.c_str());
    // Same results on every device: the input program and the rewritten one on the virtual cluster,
    // each device with its own x.
    std::mt19937_64 rng(11);
    std::uniform_real_distribution<double> u(-1, 1);
    auto random = [&] {
      std::vector<double> v(16 * 8);
      for (double& e : v) e = u(rng);
      return Tensor::FromValues(PrimitiveType::kF32, {16, 8}, v).value();
    };
    const Tensor w = random();
    const Tensor ck = random();
    std::vector<std::vector<Tensor>> per_device;
    for (int d = 0; d < 4; ++d) per_device.push_back({w, ck, random()});
    auto before = RunSpmd(*input, 4, per_device);
    auto after = RunSpmd(m, 4, per_device);
    QVERIFY2(before.ok(), before.ok() ? "" : before.error().message.c_str());
    QVERIFY2(after.ok(), after.ok() ? "" : after.error().message.c_str());
    for (int d = 0; d < 4; ++d) {
      const VerifyReport v = CompareTensors((*before)[static_cast<size_t>(d)], (*after)[static_cast<size_t>(d)], 4);
      QVERIFY2(v.match, v.detail.c_str());
    }
  }

  // Figure 4 left: without keeping weights sharded, the updated weight is all-gathered at the end
  // of the body (the loop carries it whole) and only the auxiliaries stay sharded.
  void weightsGatheredAtEndOfStep() {
    WeightUpdateShardingOptions o = Forced();
    o.keep_weights_sharded = false;
    std::string why;
    auto p = RunZoo("mlp",
                    {{"annotations", "data-parallel"}, {"layers", "1"}, {"batch", "8"}, {"model", "8"}, {"hidden", "16"},
                     {"mesh_x", "4"}, {"mesh_y", "1"}, {"optimizer", "adam"}, {"steps", "2"}},
                    o, &why);
    QVERIFY2(p, why.c_str());
    const std::string err = Verify(*p);
    QVERIFY2(err.empty(), err.c_str());
    const Instruction* loop = nullptr;
    for (const auto& i : p->wus.module->entry()->instructions())
      if (i->opcode() == Opcode::kWhile) loop = i.get();
    QVERIFY(loop);
    // State: (i, x, target, w1, b1, w2, b2, m x4, v x4, loss): weights whole, auxiliaries sharded.
    QCOMPARE(loop->shape().tuple[3].dims, (std::vector<int64_t>{8, 16}));
    QCOMPARE(loop->shape().tuple[7].dims, (std::vector<int64_t>{2, 16}));
  }

  // Figure 7: a weight the forward pass casts to bf16 is all-gathered in bf16, after the cast.
  void gatherInComputeType() {
    std::string why;
    auto p = RunZoo("mlp",
                    {{"annotations", "data-parallel"}, {"layers", "1"}, {"batch", "8"}, {"model", "8"}, {"hidden", "16"},
                     {"mesh_x", "4"}, {"mesh_y", "1"}, {"optimizer", "sgd"}, {"act_dtype", "bf16"}, {"steps", "2"}},
                    Forced(), &why);
    QVERIFY2(p, why.c_str());
    const std::string err = Verify(*p);
    QVERIFY2(err.empty(), err.c_str());
    const Instruction* loop = nullptr;
    for (const auto& i : p->wus.module->entry()->instructions())
      if (i->opcode() == Opcode::kWhile) loop = i.get();
    QVERIFY(loop);
    int bf16_gathers = 0, f32_gathers = 0;
    for (const auto& i : loop->while_body()->instructions()) {
      if (i->opcode() != Opcode::kAllGather) continue;
      for (const Instruction* o : i->operands()) {
        bf16_gathers += o->shape().type == PrimitiveType::kBF16;
        f32_gathers += o->shape().type == PrimitiveType::kF32;
      }
    }
    QCOMPARE(bf16_gathers, 4);
    QCOMPARE(f32_gathers, 0);
    bool noted = false;
    for (const auto& f : p->wus.formatting) noted = noted || f.reason.find("Figure 7") != std::string::npos;
    QVERIFY(noted);
  }

  // ---- section 3.2: profitability ----------------------------------------------------------------

  void profitability() {
    // A batch large enough that the partitioner all-reduces gradients (data parallelism), weights
    // of [64,256] f32 = 64 KiB.
    const ZooOverrides model = {{"annotations", "data-parallel"}, {"layers", "1"}, {"batch", "512"}, {"model", "64"},
                                {"hidden", "256"}, {"mesh_x", "4"}, {"mesh_y", "1"}, {"optimizer", "adam"}};
    std::string why;
    // Defaults: a 16 KiB shard is below the 64 KiB latency-bound threshold: nothing changes.
    auto tiny = RunZoo("mlp", model, {}, &why);
    QVERIFY2(tiny, why.c_str());
    QVERIFY(tiny->wus.replaced_all_reduces.empty());
    QVERIFY(!tiny->wus.split);
    QCOMPARE(tiny->wus.decisions.size(), size_t(4));
    for (const auto& d : tiny->wus.decisions) {
      QVERIFY(!d.sharded);
      QVERIFY2(d.reason.find("latency-bound") != std::string::npos, d.reason.c_str());
    }
    // With a 4 KiB threshold the weights qualify (the biases, 256 and 1024 bytes, do not): sharded,
    // the step split so the auxiliaries stay sharded between steps.
    WeightUpdateShardingOptions o;
    o.min_shard_bytes = 4096;
    auto split = RunZoo("mlp", model, o, &why);
    QVERIFY2(split, why.c_str());
    const WeightUpdateDecision* w1 = Decision(split->wus, "layer0_w1");
    QVERIFY(w1);
    QVERIFY2(w1->sharded, w1->reason.c_str());
    QVERIFY(w1->saved_seconds > w1->added_seconds);
    QVERIFY(split->wus.split);
    QCOMPARE(split->wus.replaced_all_reduces.size(), size_t(2));
    std::string err = Verify(*split);
    QVERIFY2(err.empty(), err.c_str());
    // Without the split, Adam's two auxiliaries would be all-gathered every step: more
    // communication than the update saves, so the rule keeps the weight replicated...
    o.split_step_program = false;
    auto adam = RunZoo("mlp", model, o, &why);
    QVERIFY2(adam, why.c_str());
    const WeightUpdateDecision* aw1 = Decision(adam->wus, "layer0_w1");
    QVERIFY(aw1);
    QVERIFY2(!aw1->sharded, aw1->reason.c_str());
    QVERIFY(aw1->reason.find("kept replicated") != std::string::npos);
    QVERIFY(aw1->added_seconds > aw1->saved_seconds);
    // ... while SGD (no auxiliaries: reduce-scatter + all-gather replace the all-reduce) is sharded.
    ZooOverrides sgd_model = model;
    sgd_model["optimizer"] = "sgd";
    auto sgd = RunZoo("mlp", sgd_model, o, &why);
    QVERIFY2(sgd, why.c_str());
    const WeightUpdateDecision* sw1 = Decision(sgd->wus, "layer0_w1");
    QVERIFY(sw1);
    QVERIFY2(sw1->sharded, sw1->reason.c_str());
    err = Verify(*sgd);
    QVERIFY2(err.empty(), err.c_str());
  }

  // ---- section 5: two phases, partial sharding, batching -----------------------------------------

  void twoPhaseAndPartialSharding() {
    const ZooOverrides model = {{"annotations", "data-parallel"}, {"layers", "1"}, {"batch", "16"}, {"model", "16"},
                                {"hidden", "64"}, {"mesh_x", "2"}, {"mesh_y", "4"}, {"optimizer", "adam"}};
    std::string why;
    // Two phases on the 2x4 replica mesh when asked (off by default: one phase over both axes at
    // once is never slower in the simulator's collective model): rows then columns.
    WeightUpdateShardingOptions two = Forced();
    QVERIFY(!two.two_phase);
    two.two_phase = true;
    two.replica_mesh = {2, 4};
    two.combine_threshold_bytes = 0;
    auto p = RunZoo("mlp", model, two, &why);
    QVERIFY2(p, why.c_str());
    std::string err = Verify(*p);
    QVERIFY2(err.empty(), err.c_str());
    int64_t row_rs = 0, col_rs = 0;
    for (const auto& c : p->wus.module->entry()->instructions()) {
      if (c->opcode() != Opcode::kReduceScatter) continue;
      const auto& g = c->replica_groups.groups;
      if (g == wus::Groups{{0, 1, 2, 3}, {4, 5, 6, 7}}) ++row_rs;
      if (g == wus::Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}) ++col_rs;
    }
    QCOMPARE(row_rs, int64_t(4));
    QCOMPARE(col_rs, int64_t(4));
    // By default one phase over all 8 replicas (the simulator runs it on both mesh axes at once).
    WeightUpdateShardingOptions one = Forced();
    one.replica_mesh = {2, 4};
    one.combine_threshold_bytes = 0;
    auto o = RunZoo("mlp", model, one, &why);
    QVERIFY2(o, why.c_str());
    err = Verify(*o);
    QVERIFY2(err.empty(), err.c_str());
    int64_t whole_rs = 0, other_rs = 0;
    for (const auto& c : o->wus.module->entry()->instructions()) {
      if (c->opcode() != Opcode::kReduceScatter) continue;
      (c->replica_groups.groups == wus::Groups{{0, 1, 2, 3, 4, 5, 6, 7}} ? whole_rs : other_rs) += 1;
    }
    QCOMPARE(whole_rs, int64_t(4));
    QCOMPARE(other_rs, int64_t(0));
    // Partial sharding: w1 [16,64] f32 = 4 KiB; with a 1 KiB minimum a full shard (512 B) is
    // latency-bound but a row's (1 KiB) is not: shard within rows, all-reduce across them.
    WeightUpdateShardingOptions partial;
    partial.replica_mesh = {2, 4};
    partial.min_shard_bytes = 1024;
    partial.hbm_bytes_per_second = 1e6;  // make the update worth it at this size
    partial.combine_threshold_bytes = 0;
    auto q = RunZoo("mlp", model, partial, &why);
    QVERIFY2(q, why.c_str());
    err = Verify(*q);
    QVERIFY2(err.empty(), err.c_str());
    const WeightUpdateDecision* w1 = Decision(q->wus, "layer0_w1");
    QVERIFY(w1 && w1->sharded);
    QVERIFY2(w1->scheme.find("partial") != std::string::npos, w1->scheme.c_str());
    QCOMPARE(QString::fromStdString(w1->format), QString("[16,64] -> 4 x [4,64]"));
    bool cross = false;
    for (const auto& c : q->wus.collectives)
      cross = cross || (c.kind == Opcode::kAllReduce && c.replica_groups == "{{0,4},{1,5},{2,6},{3,7}}" &&
                        c.reason.find("section 5.2") != std::string::npos);
    QVERIFY(cross);
    // The biases [64] and [16] (256 and 64 bytes) stay replicated: even a row's shard is too small.
    const WeightUpdateDecision* b2 = Decision(q->wus, q->wus.decisions.front().weight);
    QVERIFY(b2);
  }

  void batching() {
    std::string why;
    const ZooOverrides model = {{"annotations", "data-parallel"}, {"layers", "3"}, {"batch", "8"}, {"model", "8"},
                                {"hidden", "16"}, {"mesh_x", "4"}, {"mesh_y", "1"}, {"optimizer", "adam"}};
    WeightUpdateShardingOptions off = Forced();
    off.combine_threshold_bytes = 0;
    auto a = RunZoo("mlp", model, off, &why);
    QVERIFY2(a, why.c_str());
    auto b = RunZoo("mlp", model, Forced(), &why);
    QVERIFY2(b, why.c_str());
    // 12 reduce-scatters unbatched; batched into one (12 x small << 32 MiB).
    QCOMPARE(Count(*a->wus.module, Opcode::kReduceScatter), int64_t(12));
    QCOMPARE(Count(*b->wus.module, Opcode::kReduceScatter), int64_t(1));
    QCOMPARE(CountOperands(*b->wus.module, Opcode::kReduceScatter), int64_t(12));
    QVERIFY(b->wus.combined_collectives >= 11);
    const std::string err = Verify(*b);
    QVERIFY2(err.empty(), err.c_str());
    // A threshold below two operands' size keeps them apart.
    WeightUpdateShardingOptions tight = Forced();
    tight.combine_threshold_bytes = 600;  // w1's partial gradient [8,16] f32 = 512 bytes
    auto c = RunZoo("mlp", model, tight, &why);
    QVERIFY2(c, why.c_str());
    for (const auto& i : c->wus.module->entry()->instructions())
      if (i->opcode() == Opcode::kReduceScatter) {
        int64_t bytes = 0;
        for (const Instruction* o : i->operands()) bytes += o->shape().ByteSize();
        QVERIFY(bytes <= 600);
      }
  }

  // Section 5.2's batched decision (batch_small_updates): one Transformer layer whose six weights
  // (64 B to 2 KiB) are each too small to shard alone — every shard below min_shard_bytes — but
  // together make a shard above it. With the batched rule the six updates are judged as one and
  // sharded together, their reduce-scatters combined into one; the rewritten step is verified
  // numerically (SGD, Adam, LARS, Adafactor; even and padded shards; a single step and a loop).
  // Without it every weight stays replicated as latency-bound; with a threshold the batch cannot
  // reach either, it stays replicated as a batch.
  void batchedProfitability_data() {
    QTest::addColumn<QString>("optimizer");
    QTest::addColumn<int>("replicas");
    QTest::addColumn<int>("steps");  // 0: one step (split into three programs); n: a loop of n
    QTest::newRow("sgd, 4 replicas") << "sgd" << 4 << 0;
    QTest::newRow("adam, 10 replicas (padded)") << "adam" << 10 << 0;
    QTest::newRow("lars, 10 replicas (padded)") << "lars" << 10 << 0;
    QTest::newRow("adafactor, 4 replicas") << "adafactor" << 4 << 0;
    QTest::newRow("adam, 4 replicas, loop") << "adam" << 4 << 3;
    QTest::newRow("lars, 4 replicas, loop") << "lars" << 4 << 3;
  }
  void batchedProfitability() {
    QFETCH(QString, optimizer);
    QFETCH(int, replicas);
    QFETCH(int, steps);
    ZooOverrides model = {{"annotations", "data-parallel"}, {"layers", "1"}, {"batch", S(2 * replicas)}, {"seq", "4"},
                          {"model", "16"}, {"heads", "2"}, {"head_dim", "4"}, {"hidden", "32"}, {"mesh_x", S(replicas)},
                          {"mesh_y", "1"}, {"optimizer", optimizer.toStdString()}};
    if (steps > 0) model["steps"] = S(steps);
    // The gradients: [16] x2 (64 B), [3,16,2,4] (1.5 KiB), [2,4,16] (512 B), [16,32] and [32,16]
    // (2 KiB): 6,272 bytes. The largest alone makes a shard of 512 B (4 replicas) or 205 B (10):
    // below the minimum; all six together 1,568 B or 627 B: above it.
    const int64_t min_shard = replicas == 4 ? 1024 : 512;
    WeightUpdateShardingOptions o;
    o.min_shard_bytes = min_shard;
    o.hbm_bytes_per_second = 1e6;  // make updates this small worth sharding at all
    std::string why;
    auto alone = RunZoo("transformer", model, o, &why);
    QVERIFY2(alone, why.c_str());
    QVERIFY(alone->wus.replaced_all_reduces.empty());
    for (const auto& d : alone->wus.decisions) {
      QVERIFY2(!d.sharded && d.reason.find("latency-bound") != std::string::npos, d.reason.c_str());
      QCOMPARE(d.batch, int64_t(0));
    }
    o.batch_small_updates = true;
    auto batched = RunZoo("transformer", model, o, &why);
    QVERIFY2(batched, why.c_str());
    QCOMPARE(batched->wus.replaced_all_reduces.size(), size_t(6));
    int64_t sharded = 0;
    for (const auto& d : batched->wus.decisions) {
      if (!d.sharded) continue;
      ++sharded;
      QCOMPARE(d.batch, int64_t(6));
      QVERIFY2(d.reason.find("with a batch of 6 small updates (section 5.2)") != std::string::npos, d.reason.c_str());
    }
    QCOMPARE(sharded, int64_t(6));
    // One combined reduce-scatter carries the six gradients (the batch the rule judged).
    QCOMPARE(CountOperands(*batched->wus.module, Opcode::kReduceScatter), int64_t(6));
    QCOMPARE(Count(*batched->wus.module, Opcode::kReduceScatter), int64_t(1));
    QCOMPARE(batched->wus.split, steps == 0);
    const std::string err = Verify(*batched);
    QVERIFY2(err.empty(), err.c_str());
    // A minimum the batch cannot reach either: kept replicated, as a batch.
    o.min_shard_bytes = 8192;
    auto tight = RunZoo("transformer", model, o, &why);
    QVERIFY2(tight, why.c_str());
    QVERIFY(tight->wus.replaced_all_reduces.empty());
    for (const auto& d : tight->wus.decisions)
      QVERIFY2(!d.sharded && d.reason.find("latency-bound even batched: 6 small updates") != std::string::npos, d.reason.c_str());
  }

  // ---- formatting on real data: a tiled bitcast and the paper's reshape + pad -------------------

  void bitcastAndMergeFormatsVerified_data() {
    QTest::addColumn<int>("replicas");
    QTest::addColumn<QString>("format");
    // [3,3,16,128]: 6 replicas divide neither 3 nor 9 but the 18 tiles of 8 x 128: bitcast.
    QTest::newRow("6 replicas: bitcast") << 6 << "[3,3,16,128] -> bitcast [18,8,128] -> 6 x [3,8,128]";
    // 10 replicas: [9,16,128] padded to [10,16,128] (the paper's choice for [3,3,256,256]).
    QTest::newRow("10 replicas: merge + pad") << 10 << "[3,3,16,128] -> merge [9,16,128] -> pad [10,16,128] -> 10 x [1,16,128]";
  }
  void bitcastAndMergeFormatsVerified() {
    QFETCH(int, replicas);
    QFETCH(QString, format);
    // A convolution-like kernel trained data-parallel with LARS-free SGD: y = x . reshape(w),
    // loss = sum(y^2)/2; its gradient is all-reduced as [144,128] and reshaped to the kernel's
    // shape (the pass moves the reshape before the reduce-scatter).
    const int64_t b = 64 * replicas;  // a batch large enough that the partitioner all-reduces the gradient
    const std::string text = "HloModule conv_like, num_partitions=" + S(replicas) + R"(
%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}
ENTRY %main (x: f32[)" + S(b) + R"(,144], kernel: f32[3,3,16,128]) -> (f32[], f32[3,3,16,128]) {
  %x = f32[)" + S(b) + R"(,144] parameter(0), sharding={devices=[)" + S(replicas) + R"(,1]<=[)" + S(replicas) + R"(]}
  %kernel = f32[3,3,16,128] parameter(1), sharding={replicated}
  %k2 = f32[144,128] reshape(%kernel)
  %y = f32[)" + S(b) + R"(,128] dot(%x, %k2), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %yy = f32[)" + S(b) + R"(,128] multiply(%y, %y)
  %zero = f32[] constant(0)
  %sum = f32[] reduce(%yy, %zero), dimensions={0,1}, to_apply=%add
  %half = f32[] constant(0.5)
  %loss = f32[] multiply(%sum, %half)
  %g2 = f32[144,128] dot(%x, %y), lhs_contracting_dims={0}, rhs_contracting_dims={0}
  %g = f32[3,3,16,128] reshape(%g2)
  %lr = f32[] constant(0.01)
  %lrb = f32[3,3,16,128] broadcast(%lr), dimensions={}
  %step = f32[3,3,16,128] multiply(%g, %lrb)
  %new = f32[3,3,16,128] subtract(%kernel, %step)
  ROOT %out = (f32[], f32[3,3,16,128]) tuple(%loss, %new)
}
)";
    std::string why;
    auto p = RunModule(Parse(text), Forced(), &why);
    QVERIFY2(p, why.c_str());
    const std::string err = Verify(*p);
    QVERIFY2(err.empty(), err.c_str());
    QCOMPARE(p->wus.decisions.size(), size_t(1));
    QCOMPARE(QString::fromStdString(p->wus.decisions[0].format), format);
    QCOMPARE(p->wus.decisions[0].weight, std::string("kernel"));
    if (replicas == 6) QVERIFY(Count(*p->wus.module, Opcode::kBitcast) >= 1);
  }

  // ---- the "why" record ------------------------------------------------------------------------

  void everyInsertionHasItsReason() {
    std::string why;
    auto p = RunZoo("transformer",
                    {{"annotations", "data-parallel"}, {"layers", "4"}, {"batch", "8"}, {"seq", "4"}, {"model", "16"},
                     {"heads", "2"}, {"head_dim", "4"}, {"hidden", "32"}, {"mesh_x", "2"}, {"mesh_y", "2"}, {"optimizer", "adam"}},
                    [] {
                      WeightUpdateShardingOptions o = Forced();
                      o.combine_threshold_bytes = 0;
                      return o;
                    }(),
                    &why);
    QVERIFY2(p, why.c_str());
    // "weight-update sharding: gradient of layer3_wi reduce-scattered ..., section 4"
    bool found = false;
    for (const auto& c : p->wus.collectives) {
      QVERIFY2(c.reason.rfind("weight-update sharding: ", 0) == 0, c.reason.c_str());
      QVERIFY2(c.reason.find("section") != std::string::npos || c.reason.find("Figure") != std::string::npos, c.reason.c_str());
      found = found || (c.kind == Opcode::kReduceScatter && c.reason.find("gradient of layer3_wi reduce-scattered") != std::string::npos);
    }
    QVERIFY(found);
    for (const auto& f : p->wus.formatting) QVERIFY(f.reason.rfind("weight-update sharding: ", 0) == 0);
    // Every inserted collective of the record exists in one of the programs.
    std::set<std::string> names;
    for (const Module* m : {p->wus.module.get(), p->wus.sharding_program.get(), p->wus.unsharding_program.get()})
      for (const auto& c : m->computations())
        for (const auto& i : c->instructions())
          if (IsCollective(i->opcode())) names.insert(i->name());
    for (const auto& c : p->wus.collectives) QVERIFY2(names.count(c.instruction), c.instruction.c_str());
    const std::string err = Verify(*p);
    QVERIFY2(err.empty(), err.c_str());
  }

  // ---- the partitioner's record -----------------------------------------------------------------

  void partitionResultKeepsOneRecord() {
    auto m = ZooBuild("mlp", {{"annotations", "data-parallel"}, {"layers", "1"}, {"batch", "8"}, {"model", "8"}, {"hidden", "16"},
                              {"mesh_x", "4"}, {"mesh_y", "1"}, {"optimizer", "sgd"}});
    QVERIFY(m.ok());
    PropagationOptions po;
    po.propagate_to_output = {true};
    po.propagate_to_parameters = {true};
    QVERIFY(PropagateShardings(**m, po).ok());
    auto part = PartitionModule(**m);
    QVERIFY(part.ok());
    const size_t before = part->collectives.size();  // loss + 4 gradient all-reduces
    QCOMPARE(before, size_t(5));
    auto r = ShardWeightUpdatesOf(*part, Forced());
    QVERIFY2(r.ok(), r.ok() ? "" : r.error().message.c_str());
    // The 4 gradient all-reduces left the record; the loss all-reduce stays; the pass's joined.
    int64_t all_reduces = 0, pass = 0;
    for (const auto& c : part->collectives) {
      all_reduces += c.kind == Opcode::kAllReduce;
      pass += c.reason.rfind("weight-update sharding", 0) == 0;
    }
    QCOMPARE(all_reduces, int64_t(1));
    QCOMPARE(pass, static_cast<int64_t>(r->collectives.size()));
    QCOMPARE(part->module->name(), std::string("mlp.spmd.main"));
  }

  // ---- validation.md M1: the memory formula, from a plain data-parallel program ------------------

  // validation.md M1 (paper 000, section 4.2): with the auxiliaries kept sharded across the
  // training loop, peak memory goes from W + V + P to max(W + V/N + P, W + V). Produced
  // automatically: the zoo's data-parallel MLP training loop (Adam, 3 steps) partitioned, then
  // rewritten by the pass (Figure 4 left, as M1 states it: weights whole in the loop, auxiliaries
  // sharded), both programs simulated with collectives started as early as they can (the update
  // then follows the backward pass, as the formula assumes). W and V are the weights' and Adam
  // state's bytes, P the live activations and gradients at the plain program's peak. Checked per
  // category at the rewritten program's peak, and in total up to the step's few scalars (loss,
  // loop counter, shard-offset tables: under 1 KiB). The training data, an entry parameter here
  // (the paper's programs read it from the host each step), is live beside W + V before the loop.
  void m1PeakMemory_data() {
    QTest::addColumn<int>("batch");
    QTest::addColumn<bool>("loop_term");
    QTest::newRow("W + V/N + P dominates (large batch)") << 4096 << true;
    QTest::newRow("W + V dominates (small batch)") << 256 << false;
  }
  void m1PeakMemory() {
    QFETCH(int, batch);
    QFETCH(bool, loop_term);
    const int64_t n = 4, steps = 3, model = 128;
    WeightUpdateShardingOptions o = Forced();
    o.keep_weights_sharded = false;
    std::string why;
    auto p = RunZoo("mlp",
                    {{"annotations", "data-parallel"}, {"layers", "2"}, {"batch", S(batch)}, {"model", S(model)}, {"hidden", "512"},
                     {"mesh_x", S(n)}, {"mesh_y", "1"}, {"optimizer", "adam"}, {"steps", S(steps)}},
                    o, &why);
    QVERIFY2(p, why.c_str());
    QCOMPARE(p->wus.replaced_all_reduces.size(), size_t(8));
    auto chip = ChipPreset("tpu-v5e");
    QVERIFY(chip.ok());
    auto topo = Topology::ForMesh(*chip, DeviceMesh({{"X", n}}));
    QVERIFY(topo.ok());
    SimulationOptions so;
    so.program.schedule = ScheduleKind::kCollectivesEarly;
    // M1 is a statement about logical sizes (W, V and P are the tensors' bytes). With the TPU's
    // layout padding on (simulator/buffer_layout.h) the sharded state is 1536 bytes (0.3%) larger:
    // the bias shards of 32 f32 each take a whole 128-lane row (docs/simulator-engine.md).
    so.program.pad_to_layout_tiles = false;
    auto before = Simulate(*p->partition.module, *topo, so);
    auto after = Simulate(*p->wus.module, *topo, so);
    QVERIFY2(before.ok(), before.ok() ? "" : before.error().message.c_str());
    QVERIFY2(after.ok(), after.ok() ? "" : after.error().message.c_str());
    int64_t W = 0, V = 0;
    for (const Instruction* prm : p->annotated->entry()->parameters()) {
      const std::string& nm = prm->name();
      if (nm == "x" || nm == "target") continue;
      const bool state = nm.size() > 2 && (nm.compare(nm.size() - 2, 2, "_m") == 0 || nm.compare(nm.size() - 2, 2, "_v") == 0);
      (state ? V : W) += prm->shape().ByteSize();
    }
    QCOMPARE(V, 2 * W);
    const int64_t D = 2 * steps * (batch / n) * model * 4;  // x and target, this device's rows
    auto peak = [](const Simulation& s) {
      std::array<int64_t, kNumMemoryCategories> by{};
      for (const PeakBuffer& b : s.run.classes[0].peak_buffers) by[static_cast<size_t>(b.category)] += b.bytes;
      return by;
    };
    auto cat = [](const std::array<int64_t, kNumMemoryCategories>& by, MemoryCategory c) { return by[static_cast<size_t>(c)]; };
    const auto b = peak(*before), a = peak(*after);
    // The plain program: W + V + P at its peak, inside the loop.
    QCOMPARE(cat(b, MemoryCategory::kParameters), W);
    QCOMPARE(cat(b, MemoryCategory::kOptimizerState), V);
    const int64_t P = cat(b, MemoryCategory::kActivations) + cat(b, MemoryCategory::kGradients);
    QVERIFY(before->run.summary.peak_memory_bytes - (W + V + P) < 1024);
    QCOMPARE(W + V / n + P > W + V + D, loop_term);
    QCOMPARE(cat(a, MemoryCategory::kParameters), W);
    if (loop_term) {
      // Inside the loop: the auxiliaries' shards only.
      QCOMPARE(cat(a, MemoryCategory::kOptimizerState), V / n);
      // P up to one bias's gradient (512 f32): the two programs' peaks are instants of different
      // schedules, and a layer's bias gradient may be live at one and not yet at the other.
      const int64_t bias_grad = 512 * 4;
      const int64_t Pa = cat(a, MemoryCategory::kActivations) + cat(a, MemoryCategory::kGradients);
      QVERIFY2(std::abs(Pa - P) <= bias_grad, (std::to_string(Pa) + " vs " + std::to_string(P)).c_str());
      const int64_t gap = after->run.summary.peak_memory_bytes - (W + V / n + P);
      QVERIFY2(gap >= -bias_grad && gap < 1024, std::to_string(gap).c_str());
    } else {
      // Outside the loop: the whole state (and the training data).
      QCOMPARE(cat(a, MemoryCategory::kOptimizerState), V);
      QCOMPARE(cat(a, MemoryCategory::kActivations) + cat(a, MemoryCategory::kGradients), D);
      const int64_t gap = after->run.summary.peak_memory_bytes - (W + V + D);
      QVERIFY2(gap >= 0 && gap < 1024, std::to_string(gap).c_str());
    }
  }

  // The CLI: one phase by default, the paper's two with --two-phase, and the two flags refused
  // together.
  void cliTwoPhaseFlag() {
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    const QString hlo = dir.filePath("mlp.hlo");
    auto b = testing::RunCli({"zoo", "build", "mlp", "--set", "annotations=data-parallel", "--set", "layers=1", "--set",
                              "batch=16", "--set", "model=16", "--set", "hidden=64", "--set", "mesh_x=2", "--set", "mesh_y=4",
                              "--set", "optimizer=adam", "-o", hlo});
    QVERIFY2(b.code == 0, qPrintable(b.err));
    const QStringList part = {"partition", hlo, "--weight-update-sharding", "--replica-mesh", "2x4", "--wus-force",
                              "--combine-threshold-bytes", "0", "--summary"};
    auto one = testing::RunCli(part);
    QVERIFY2(one.code == 0, qPrintable(one.err));
    QVERIFY2(one.err.contains("groups {{0,1,2,3,4,5,6,7}}) from all-reduce.1"), qPrintable(one.err));
    QVERIFY(!one.err.contains("phase 1 of 2"));
    auto two = testing::RunCli(part + QStringList{"--two-phase"});
    QVERIFY2(two.code == 0, qPrintable(two.err));
    QVERIFY2(two.err.contains("groups {{0,1,2,3},{4,5,6,7}}) from all-reduce.1"), qPrintable(two.err));
    QVERIFY2(two.err.contains("phase 2 of 2 (columns) (section 5.1)"), qPrintable(two.err));
    auto both = testing::RunCli(part + QStringList{"--two-phase", "--no-two-phase"});
    QCOMPARE(both.code, 2);
    QVERIFY2(both.err.contains("--two-phase contradicts --no-two-phase"), qPrintable(both.err));
  }

  // ---- the zoo: LARS and Adafactor follow their papers ------------------------------------------

  // One MLP step: the gradients (optimizer none) and the update (lars / adafactor) from the same
  // inputs; w1's update recomputed here by the formulas.
  void optimizerFormulas_data() {
    QTest::addColumn<QString>("optimizer");
    QTest::newRow("lars") << "lars";
    QTest::newRow("adafactor") << "adafactor";
  }
  void optimizerFormulas() {
    QFETCH(QString, optimizer);
    const ZooOverrides base = {{"annotations", "none"}, {"layers", "1"}, {"batch", "4"}, {"model", "3"}, {"hidden", "5"},
                               {"learning_rate", "0.1"}};
    ZooOverrides none = base, opt = base;
    none["optimizer"] = "none";
    opt["optimizer"] = optimizer.toStdString();
    auto g = ZooBuild("mlp", none);
    auto u = ZooBuild("mlp", opt);
    QVERIFY(g.ok() && u.ok());
    const std::vector<Tensor> args = StepArguments(*(*u)->entry(), 3);
    std::vector<Tensor> gargs(args.begin(), args.begin() + 6);  // x, target, w1, b1, w2, b2
    auto grads = Evaluate(**g, gargs);
    auto out = Evaluate(**u, args);
    QVERIFY(grads.ok() && out.ok());
    const Tensor& w = args[2];
    const Tensor& gw = grads->element(1);
    const Tensor& neww = out->element(1);
    const int64_t R = 3, C = 5;
    auto at = [](const Tensor& t, int64_t i) { return t.GetDouble(i); };
    if (optimizer == "lars") {
      // trust = eta |w| / (|g| + wd |w|); momentum' = mu momentum + lr trust (g + wd w); w' = w - momentum'.
      double wn = 0, gn = 0;
      for (int64_t i = 0; i < R * C; ++i) {
        wn += at(w, i) * at(w, i);
        gn += at(gw, i) * at(gw, i);
      }
      wn = std::sqrt(wn);
      gn = std::sqrt(gn);
      const double trust = 0.001 * wn / (gn + 1e-4 * wn);
      const Tensor& mom = args[6];
      for (int64_t i = 0; i < R * C; ++i) {
        const double m1 = 0.9 * at(mom, i) + 0.1 * trust * (at(gw, i) + 1e-4 * at(w, i));
        QVERIFY(std::abs(at(out->element(5), i) - m1) < 1e-6);
        QVERIFY(std::abs(at(neww, i) - (at(w, i) - m1)) < 1e-6);
      }
      return;
    }
    // Adafactor: state parameters w1_row [3], b1_v [5], w2_row [5], b2_v [3], w1_col [5], w2_col [3].
    const Tensor& row = args[6];
    const Tensor& col = args[10];
    std::vector<double> row1(R), col1(C);
    for (int64_t r = 0; r < R; ++r) {
      double m = 0;
      for (int64_t c = 0; c < C; ++c) m += at(gw, r * C + c) * at(gw, r * C + c) + 1e-30;
      row1[static_cast<size_t>(r)] = 0.999 * at(row, r) + 0.001 * m / C;
    }
    for (int64_t c = 0; c < C; ++c) {
      double m = 0;
      for (int64_t r = 0; r < R; ++r) m += at(gw, r * C + c) * at(gw, r * C + c) + 1e-30;
      col1[static_cast<size_t>(c)] = 0.999 * at(col, c) + 0.001 * m / R;
    }
    double row_mean = 0;
    for (double v : row1) row_mean += v / R;
    std::vector<double> upd(R * C);
    double sq = 0;
    for (int64_t r = 0; r < R; ++r)
      for (int64_t c = 0; c < C; ++c) {
        const double v = row1[static_cast<size_t>(r)] * col1[static_cast<size_t>(c)] / row_mean;
        upd[static_cast<size_t>(r * C + c)] = at(gw, r * C + c) / std::sqrt(v);
        sq += upd[static_cast<size_t>(r * C + c)] * upd[static_cast<size_t>(r * C + c)];
      }
    const double clip = std::max(1.0, std::sqrt(sq / (R * C)));
    for (int64_t i = 0; i < R * C; ++i) {
      const double expect = at(w, i) - 0.1 * upd[static_cast<size_t>(i)] / clip;
      QVERIFY2(std::abs(at(neww, i) - expect) < 1e-4 * std::max(1.0, std::abs(expect)),
               (std::to_string(at(neww, i)) + " vs " + std::to_string(expect)).c_str());
    }
    for (int64_t r = 0; r < R; ++r) QVERIFY(std::abs(at(out->element(5), r) - row1[static_cast<size_t>(r)]) < 1e-5);
    for (int64_t c = 0; c < C; ++c) QVERIFY(std::abs(at(out->element(9), c) - col1[static_cast<size_t>(c)]) < 1e-5);
  }

  // NCF (MLPerf 0.6's recommendation model, Adam): the embedding tables' dense gradients are
  // all-reduced in data parallelism; the pass shards their update, the auxiliaries kept sharded.
  void ncfEmbeddingUpdateSharded() {
    std::string why;
    auto p = RunZoo("ncf", {{"batch", "32"}, {"users", "64"}, {"items", "32"}, {"factors", "8"}, {"mlp", "16,16,8"},
                            {"mesh_x", "4"}, {"mesh_y", "1"}},
                    Forced(), &why);
    QVERIFY2(p, why.c_str());
    const std::string err = Verify(*p);
    QVERIFY2(err.empty(), err.c_str());
    const WeightUpdateDecision* users = Decision(p->wus, "ncf_gmf_user");
    QVERIFY(users);
    QVERIFY(users->sharded);
    QCOMPARE(QString::fromStdString(users->format), QString("[64,8] -> 4 x [16,8]"));
    QVERIFY(p->wus.split);
    // The tables' Adam state arrives sharded in the main program.
    for (const Instruction* prm : p->wus.module->entry()->parameters())
      if (prm->name() == "ncf_gmf_user_m" || prm->name() == "ncf_gmf_user_v") QCOMPARE(prm->shape().dims, (std::vector<int64_t>{16, 8}));
  }

  // ---- errors are values ------------------------------------------------------------------------

  void errors() {
    auto m = Parse("HloModule e, num_partitions=4\nENTRY %main (w: f32[8]) -> f32[8] {\n  ROOT %w = f32[8] parameter(0)\n}\n");
    WeightUpdateShardingOptions o;
    o.replica_mesh = {3, 2};
    auto r = ShardWeightUpdates(*m, o);
    QVERIFY(!r.ok());
    QVERIFY(r.error().message.find("replica mesh 3x2") != std::string::npos);
    WeightUpdateShardingOptions named;
    named.redundant_parameters = {"nope"};
    auto s = ShardWeightUpdates(*m, named);
    QVERIFY(!s.ok());
    QVERIFY(s.error().message.find("'nope'") != std::string::npos);
    // A program without gradient all-reduces comes back unchanged in meaning.
    auto t = ShardWeightUpdates(*m);
    QVERIFY(t.ok());
    QVERIFY(t->decisions.empty());
    QVERIFY(!t->split);
  }
};

QTEST_MAIN(TestWeightUpdateSharding)
#include "test_weight_update_sharding.moc"
