// Method 2 of the strategy search: the auto-sharding integer program (app/search/auto_sharding.h)
// and its MILP solver wrapper (app/search/milp_solver.h). The programs here are small (the zoo's
// one-layer MLP training step on 8 TPU v4 chips); what they must choose follows from the sizes:
// large weights and a small batch -> Megatron (the first weight split on its output dim, the second
// on its input dim, an all-reduce of the activations instead of one of the weight gradients); a tiny
// model and a big batch -> data parallelism; HBM too small for replicated weights -> split weights.
#include <QTemporaryDir>
#include <QtTest>

#include <fstream>
#include <string>

#include "app/pipeline/pipeline.h"
#include "app/search/auto_sharding.h"
#include "app/search/candidate.h"
#include "app/search/milp_solver.h"
#include "core/ir/hlo_text.h"
#include "core/zoo/zoo.h"
#include "tests/cli_test_support.h"

using namespace shardscope;
using namespace shardscope::search;
using shardscope::testing::RunCli;

namespace {

std::unique_ptr<Module> Mlp(int64_t batch, int64_t model, int64_t hidden) {
  auto m = ZooBuild("mlp", {{"layers", "1"},
                            {"batch", std::to_string(batch)},
                            {"model", std::to_string(model)},
                            {"hidden", std::to_string(hidden)},
                            {"annotations", "none"}});
  if (!m.ok()) qFatal("%s", m.error().message.c_str());
  (*m)->num_partitions = 8;
  return std::move(m).value();
}

Pod MakePodOrDie(const std::string& chip, int64_t devices) {
  auto pod = MakePod(chip, devices);
  if (!pod.ok()) qFatal("%s", pod.error().message.c_str());
  return pod.value();
}

MeshChoice Mesh1D(const Pod& pod) {
  auto placed = PlaceMesh(pod, DeviceMesh({{"X", pod.devices}}), "", false);
  if (!placed.ok()) qFatal("%s", placed.error().message.c_str());
  return placed.value();
}

// The chosen sharding of an entry parameter, as text.
std::string ShardingOf(const AutoShardingPlan& plan, const std::string& name) {
  for (const ChosenSharding& c : plan.parameters)
    if (c.instruction == name) return c.sharding;
  return "<none>";
}

int64_t TilesOf(const AutoShardingPlan& plan, const std::string& name) {
  auto s = HloSharding::Parse(ShardingOf(plan, name));
  return s.ok() ? s->NumTiles() : -1;
}

double CountOf(const CandidateResult& r, const std::string& kind) {
  for (const CollectiveTotal& t : r.collectives)
    if (t.kind == kind) return t.count;
  return 0;
}

// A chip .json: TPU v4 with `hbm` bytes of HBM.
std::string SmallHbmChip(const QTemporaryDir& dir, double hbm) {
  const std::string path = dir.filePath("small-hbm.json").toStdString();
  std::ofstream(path) << "{ \"name\": \"v4-small-hbm\", \"base\": \"tpu-v4\", \"hbm_bytes\": " << hbm << " }\n";
  return path;
}

AutoShardingOptions OneMesh(const std::string& mesh = "X=8") {
  AutoShardingOptions o;
  o.meshes = {mesh};
  o.source.model = "mlp";
  return o;
}

}  // namespace

class TestAutoSharding : public QObject {
  Q_OBJECT

 private slots:
  // The wrapper: a knapsack (optimal), and rows no assignment meets (infeasible).
  void milpSolver() {
    MilpProblem p;
    // maximise 5a + 4b + 3c (minimise the negative) subject to 2a + 3b + c <= 4, binaries.
    const int a = p.AddBinary(-5), b = p.AddBinary(-4), c = p.AddBinary(-3);
    p.AddRow({{a, 2}, {b, 3}, {c, 1}}, MilpProblem::Sense::kLessEqual, 4);
    auto s = SolveMilp(p);
    QVERIFY(s.ok());
    QCOMPARE(s->status, MilpSolution::Status::kOptimal);
    QCOMPARE(s->objective, -8.0);  // a and c
    QCOMPARE(s->values[static_cast<size_t>(a)], 1.0);
    QCOMPARE(s->values[static_cast<size_t>(b)], 0.0);
    QCOMPARE(s->values[static_cast<size_t>(c)], 1.0);
    p.AddRow({{a, 1}, {b, 1}, {c, 1}}, MilpProblem::Sense::kGreaterEqual, 3);
    auto inf = SolveMilp(p);
    QVERIFY(inf.ok());
    QCOMPARE(inf->status, MilpSolution::Status::kInfeasible);
    QVERIFY(!inf->has_solution());
    QVERIFY(!SolveMilp(MilpProblem{}).ok());
  }

  // Large weights (2048 x 512 floats each), batch 64, 8 devices: Megatron. The partitioned step
  // computes what the unpartitioned one does (the virtual-device evaluator).
  void megatronOnLargeWeights() {
    const Pod pod = MakePodOrDie("tpu-v4", 8);
    auto module = Mlp(64, 512, 2048);
    auto plan = SolveAutoSharding(*module, pod, Mesh1D(pod), OneMesh());
    QVERIFY2(plan.ok(), plan.ok() ? "" : plan.error().message.c_str());
    QVERIFY(plan->solved);
    QCOMPARE(plan->status, std::string("optimal"));
    QCOMPARE(ShardingOf(*plan, "layer0_w1"), std::string("{devices=[1,8]<=[8]}"));  // [M, H_X]: output dim
    QCOMPARE(ShardingOf(*plan, "layer0_w2"), std::string("{devices=[8,1]<=[8]}"));  // [H_X, M]: input dim
    QCOMPARE(ShardingOf(*plan, "x"), std::string("{replicated}"));
    QVERIFY(plan->objective_s > 0);
    QVERIFY(plan->communication_s > 0);  // the all-reduces of the activations
    QVERIFY(plan->variables > 0 && plan->constraints > 0);

    pipeline::PipelineOptions o;
    o.spmd.num_partitions = 8;
    o.verify = pipeline::VerifyOptions::Unlimited(3);
    auto original = plan->module->Clone();
    auto run = pipeline::RunPipeline(std::move(plan->module), o);
    QVERIFY2(run.ok(), run.FailureText().c_str());
    QCOMPARE(run.verification.state, VerificationVerdict::State::kMatch);

    // Through AutoShard: simulated, with one all-reduce of the activations forward and one
    // backward, and no all-gather of a weight.
    auto r = AutoShard(*Mlp(64, 512, 2048), pod, OneMesh());
    QVERIFY2(r.ok(), r.ok() ? "" : r.error().message.c_str());
    QCOMPARE(r->ranked.size(), size_t{1});
    const CandidateResult& c = r->ranked[0];
    QVERIFY(c.simulated());
    QCOMPARE(c.candidate.family, std::string("auto-sharding"));
    QCOMPARE(c.candidate.Label(), std::string("ILP on X=8"));
    QCOMPARE(CountOf(c, "all-reduce"), 2.0);
    QCOMPARE(CountOf(c, "all-gather"), 0.0);
  }

  // A tiny model (64 x 64 weights) and a big batch (8192): the batch split, the weights replicated.
  void dataParallelOnBigBatch() {
    const Pod pod = MakePodOrDie("tpu-v4", 8);
    auto plan = SolveAutoSharding(*Mlp(8192, 64, 64), pod, Mesh1D(pod), OneMesh());
    QVERIFY2(plan.ok(), plan.ok() ? "" : plan.error().message.c_str());
    QVERIFY(plan->solved);
    QCOMPARE(ShardingOf(*plan, "x"), std::string("{devices=[8,1]<=[8]}"));
    QCOMPARE(ShardingOf(*plan, "target"), std::string("{devices=[8,1]<=[8]}"));
    QCOMPARE(ShardingOf(*plan, "layer0_w1"), std::string("{replicated}"));
    QCOMPARE(ShardingOf(*plan, "layer0_w2"), std::string("{replicated}"));
  }

  // The program's objective orders two choices as the simulator does: the free optimum against the
  // other strategy forced on the parameters (keep_annotations), for both models.
  void objectiveRanksLikeSimulator() {
    const Pod pod = MakePodOrDie("tpu-v4", 8);
    struct Case {
      int64_t batch, model, hidden;
      bool force_megatron;  // else force data parallelism
    };
    for (const Case& k : {Case{64, 512, 2048, false}, Case{8192, 64, 64, true}}) {
      auto free = AutoShard(*Mlp(k.batch, k.model, k.hidden), pod, OneMesh());
      QVERIFY2(free.ok(), free.ok() ? "" : free.error().message.c_str());
      auto forced_module = Mlp(k.batch, k.model, k.hidden);
      if (k.force_megatron) {
        forced_module->FindInstruction("layer0_w1")->set_sharding(HloSharding::Parse("{devices=[1,8]<=[8]}").value());
        forced_module->FindInstruction("layer0_w2")->set_sharding(HloSharding::Parse("{devices=[8,1]<=[8]}").value());
      } else {
        QVERIFY(ApplyAnnotationRule(*forced_module, "data-parallel").ok());
      }
      AutoShardingOptions o = OneMesh();
      o.keep_annotations = true;
      auto forced = AutoShard(*forced_module, pod, o);
      QVERIFY2(forced.ok(), forced.ok() ? "" : forced.error().message.c_str());
      const AutoShardingPlan& pf = free->plans[0];
      const AutoShardingPlan& pc = forced->plans[0];
      QVERIFY(ShardingOf(pf, "layer0_w1") != ShardingOf(pc, "layer0_w1"));
      const double sim_free = free->ranked[0].summary.step_time_s, sim_forced = forced->ranked[0].summary.step_time_s;
      qInfo("batch %lld: objective %.3g s vs %.3g s (forced), simulated %.3g s vs %.3g s", static_cast<long long>(k.batch),
            pf.objective_s, pc.objective_s, sim_free, sim_forced);
      QVERIFY(pf.objective_s < pc.objective_s);
      QVERIFY(sim_free < sim_forced);
    }
  }

  // Replicated weights do not fit a chip with 2.3 MB of HBM (the batch inputs alone take 2.1 MB per
  // device): the program splits the weights; with 100 kB nothing fits and it says so.
  void memoryForcesWeightSharding() {
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    auto module = Mlp(8192, 256, 256);
    const Pod roomy = MakePodOrDie("tpu-v4", 8);
    auto unconstrained = SolveAutoSharding(*module, roomy, Mesh1D(roomy), OneMesh());
    QVERIFY(unconstrained.ok() && unconstrained->solved);
    QCOMPARE(TilesOf(*unconstrained, "layer0_w1"), int64_t{1});
    QCOMPARE(TilesOf(*unconstrained, "layer0_w2"), int64_t{1});
    QVERIFY(unconstrained->parameter_bytes > 2300000);

    const Pod small = MakePodOrDie(SmallHbmChip(dir, 2.3e6), 8);
    QCOMPARE(small.chip.device_hbm_bytes(), 2.3e6);
    auto plan = SolveAutoSharding(*module, small, Mesh1D(small), OneMesh());
    QVERIFY2(plan.ok(), plan.ok() ? "" : plan.error().message.c_str());
    QVERIFY(plan->solved);
    QCOMPARE(TilesOf(*plan, "layer0_w1"), int64_t{8});
    QCOMPARE(TilesOf(*plan, "layer0_w2"), int64_t{8});
    QVERIFY(plan->parameter_bytes <= 2300000);
    QVERIFY(plan->objective_s >= unconstrained->objective_s);

    const Pod tiny = MakePodOrDie(SmallHbmChip(dir, 1e5), 8);
    auto none = SolveAutoSharding(*module, tiny, Mesh1D(tiny), OneMesh());
    QVERIFY(none.ok());
    QVERIFY(!none->solved);
    QVERIFY2(none->status.rfind("infeasible", 0) == 0, none->status.c_str());
    auto all = AutoShard(*module, tiny, AutoShardingOptions{});
    QVERIFY(!all.ok());
    QVERIFY2(all.error().message.find("infeasible") != std::string::npos, all.error().message.c_str());
  }

  // Inputs the program cannot take: errors that say why.
  void badInput() {
    const Pod pod = MakePodOrDie("tpu-v4", 8);
    auto odd = ParseHloModule(R"(HloModule odd, num_partitions=8
ENTRY %main (a: f32[3,5], b: f32[5,7]) -> f32[3,7] {
  %a = f32[3,5] parameter(0)
  %b = f32[5,7] parameter(1)
  ROOT %d = f32[3,7] dot(%a, %b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
)");
    QVERIFY(odd.ok());
    auto r = SolveAutoSharding(**odd, pod, Mesh1D(pod), OneMesh());
    QVERIFY(!r.ok());
    QVERIFY2(r.error().message.find("divides no dimension") != std::string::npos, r.error().message.c_str());
    AutoShardingOptions limit = OneMesh();
    limit.max_variables = 10;
    auto big = SolveAutoSharding(*Mlp(64, 512, 2048), pod, Mesh1D(pod), limit);
    QVERIFY(!big.ok());
    QVERIFY2(big.error().message.find("over the limit of 10") != std::string::npos, big.error().message.c_str());
    AutoShardingOptions wrong = OneMesh("X=4");
    QVERIFY(!AutoShard(*Mlp(64, 512, 2048), pod, wrong).ok());
  }

  // A module without parameters: every group is eliminated before the program is built, and the
  // empty program's solution is the eliminations' own.
  void moduleWithoutParameters() {
    const Pod pod = MakePodOrDie("tpu-v4", 8);
    auto m = ParseHloModule(R"(HloModule consts, num_partitions=8
ENTRY %main () -> f32[8,16] {
  %i = f32[8,16] iota(), iota_dimension=0
  ROOT %e = f32[8,16] exponential(%i)
}
)");
    QVERIFY(m.ok());
    auto plan = SolveAutoSharding(**m, pod, Mesh1D(pod), OneMesh());
    QVERIFY2(plan.ok(), plan.ok() ? "" : plan.error().message.c_str());
    QVERIFY(plan->solved);
    QCOMPARE(plan->variables, int64_t{0});
    QVERIFY(plan->parameters.empty());
    auto r = AutoShard(**m, pod, OneMesh());
    QVERIFY2(r.ok(), r.ok() ? "" : r.error().message.c_str());
    QVERIFY(r->ranked[0].simulated());
  }

  // The CLI: `search FILE.hlo` runs method 2, prints the program and the ranked table, stores the
  // run; `runs open` gives back the file's module with the chosen annotations; bad input exits != 0.
  void cliSearchStoresAndReopens() {
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    const QString hlo = dir.filePath("mlp.hlo"), db = dir.filePath("runs.sqlite"), reopened = dir.filePath("best.hlo");
    auto built = RunCli({"zoo", "build", "mlp", "--set", "layers=1", "--set", "batch=64", "--set", "model=512", "--set",
                         "hidden=2048", "--set", "annotations=none", "-o", hlo});
    QCOMPARE(built.code, 0);
    auto s = RunCli({"search", hlo, "--chip", "tpu-v4", "--devices", "8", "--mesh", "X=8", "--db", db});
    QVERIFY2(s.code == 0, qPrintable(s.err));
    QVERIFY(s.out.contains("integer program"));
    QVERIFY(s.out.contains("variables"));
    QVERIFY(s.out.contains("optimal"));
    QVERIFY(s.out.contains("layer0_w1 A[I, J_X]"));
    QVERIFY(s.out.contains("layer0_w2 A[I_X, J]"));
    QVERIFY(s.out.contains("1*  ILP on X=8"));
    QVERIFY(s.out.contains("objective"));
    auto list = RunCli({"runs", "list", db});
    QCOMPARE(list.code, 0);
    QCOMPARE(list.out.count('\n'), 1);
    auto open = RunCli({"runs", "open", db, "1", "-o", reopened});
    QVERIFY2(open.code == 0, qPrintable(open.err));
    std::ifstream in(reopened.toStdString());
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    auto m = ParseHloModule(text);
    QVERIFY(m.ok());
    QCOMPARE((*m)->num_partitions, int64_t{8});
    QCOMPARE((*m)->FindInstruction("layer0_w1")->sharding()->ToString(), std::string("{devices=[1,8]<=[8]}"));
    QCOMPARE((*m)->FindInstruction("layer0_w2")->sharding()->ToString(), std::string("{devices=[8,1]<=[8]}"));
    // The same zoo model through --method ilp.
    auto zoo = RunCli({"search", "mlp", "--method", "ilp", "--set", "layers=1", "--set", "batch=64", "--set", "model=512", "--set",
                       "hidden=2048", "--chip", "tpu-v4", "--devices", "8", "--mesh", "X=8"});
    QVERIFY2(zoo.code == 0, qPrintable(zoo.err));
    QVERIFY(zoo.out.contains("layer0_w1 A[I, J_X]"));
    // The file changed: re-opening refuses it.
    std::ofstream(hlo.toStdString(), std::ios::app) << "\n";
    auto stale = RunCli({"runs", "open", db, "1"});
    QVERIFY(stale.code != 0);
    QVERIFY(stale.err.contains("changed since the run was stored"));
    // Bad input.
    const QString junk = dir.filePath("junk.hlo");
    std::ofstream(junk.toStdString()) << "HloModule junk\nENTRY {\n";
    auto bad = RunCli({"search", junk, "--chip", "tpu-v4", "--devices", "8"});
    QVERIFY(bad.code != 0);
    QVERIFY(bad.err.contains("junk.hlo"));
    auto missing = RunCli({"search", dir.filePath("none.hlo"), "--chip", "tpu-v4", "--devices", "8"});
    QVERIFY(missing.code != 0);
    QVERIFY2(missing.err.contains("is neither a model of the zoo (mlp,") && missing.err.contains("nor an HLO file"),
             qPrintable(missing.err));
    // A zoo setting no candidate can build with: an error naming it, not an empty ranking.
    auto invalid = RunCli({"search", "mlp", "--chip", "tpu-v4", "--devices", "8", "--set", "layers=-1"});
    QCOMPARE(invalid.code, 2);
    QVERIFY2(invalid.err.contains("every candidate is invalid; the first: layers = '-1' is not a positive integer"),
             qPrintable(invalid.err));
    QVERIFY2(invalid.out.contains("(no candidate was simulated"), qPrintable(invalid.out));
    QVERIFY(RunCli({"search", hlo, "--chip", "tpu-v4", "--devices", "0"}).code != 0);
    const QString odd = dir.filePath("odd.hlo");
    std::ofstream(odd.toStdString()) << "HloModule odd\nENTRY %main (a: f32[3,5]) -> f32[3,5] {\n  ROOT %a = f32[3,5] parameter(0)\n}\n";
    auto nodiv = RunCli({"search", odd, "--chip", "tpu-v4", "--devices", "8"});
    QVERIFY(nodiv.code != 0);
    QVERIFY2(nodiv.err.contains("divides no dimension"), qPrintable(nodiv.err));
  }
};

QTEST_GUILESS_MAIN(TestAutoSharding)
#include "test_auto_sharding.moc"
