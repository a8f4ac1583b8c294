// The strategy search (app/search): pods and mesh placements on the torus, candidates and their
// identity, the strategy families, the bounds and pruning, depth extrapolation against full-depth
// simulations, ranking and the Pareto front, the stored runs (re-opened with their annotations),
// the explanation of two candidates, the sweep through the CLI (plan, tasks, a task killed and
// re-run, merge, report), and the published comparisons the search must reproduce (GSPMD Table 1
// and Table 4, the weight-update-sharding paper's §6.1).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>

#include "app/pipeline/pipeline.h"
#include "app/pipeline/weight_update_sharding_paper.h"
#include "app/search/report.h"
#include "app/search/search.h"
#include "core/ir/hlo_text.h"
#include "tests/built_paths.h"

using namespace shardscope;
using namespace shardscope::search;

namespace {

bool Contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// A Transformer small enough to search in a second or two, large enough that the strategies differ.
ZooOverrides SmallTransformer(int64_t layers = 12) {
  return {{"layers", std::to_string(layers)}, {"batch", "16"}, {"seq", "256"}, {"model", "1024"}, {"heads", "16"},
          {"head_dim", "64"}, {"hidden", "4096"}, {"act_dtype", "bf16"}};
}

// GSPMD Table 2's dense Transformer (M=8192, H=65536, N=128, D=256, S=1024; f32 weights, bf16
// activations), the 32 layers of its first column.
ZooOverrides Table2Transformer(int64_t batch) {
  return {{"layers", "32"}, {"batch", std::to_string(batch)}, {"seq", "1024"}, {"model", "8192"}, {"heads", "128"},
          {"head_dim", "256"}, {"hidden", "65536"}, {"dtype", "f32"}, {"act_dtype", "bf16"}};
}

const CandidateResult* Find(const std::vector<CandidateResult>& results, const std::string& strategy, const std::string& mesh) {
  for (const auto& r : results)
    if (r.candidate.strategy == strategy && r.candidate.mesh == mesh) return &r;
  return nullptr;
}

std::string CliPath() { return SHARDSCOPE_CLI_PATH; }

struct CliRun {
  int code = -1;
  std::string out, err;
};

// Runs `program` (default: the CLI) with `args`; `env` adds environment variables.
CliRun Run(const QString& program, const QStringList& args, const QStringList& env = {}, int timeout_ms = 300000) {
  QProcess p;
  if (!env.isEmpty()) {
    QProcessEnvironment e = QProcessEnvironment::systemEnvironment();
    for (const QString& kv : env) e.insert(kv.section('=', 0, 0), kv.section('=', 1));
    p.setProcessEnvironment(e);
  }
  p.start(program, args);
  CliRun r;
  if (!p.waitForFinished(timeout_ms)) {
    p.kill();
    p.waitForFinished();
    r.err = "timed out";
    return r;
  }
  r.code = p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1;
  r.out = p.readAllStandardOutput().toStdString();
  r.err = p.readAllStandardError().toStdString();
  return r;
}

CliRun Cli(const QStringList& args, int timeout_ms = 300000) {
  return Run(QString::fromStdString(CliPath()), args, {}, timeout_ms);
}

}  // namespace

class TestSearch : public QObject {
  Q_OBJECT
 private slots:
  void podShapes();
  void meshPlacementOnTheTorus();
  void meshEnumeration();
  void candidateIdentity();
  void dataParallelRule();
  void familiesGenerate();
  void boundsAndInvalidCandidates();
  void droppedModulesAreBuiltAgain();
  void boundsOnlyTakeTheCheapestDepths();
  void depthExtrapolationMatchesFullDepth();
  void extrapolationNeverBelowTheDeeperSample();
  void searchRanksStoresAndReopens();
  void exactCandidatesStoreTheBestTimelineOnly();
  void sharedMemoChangesNoFigure();
  void reopenedCandidateSimulatesAsRanked();
  void paretoFrontIsNonDominated();
  void overHbmCandidatesConfirmedWithRemat();
  void explanationNamesTheCollectives();
  void sideBySideComparison();
  void panelModel();
  void sweepThroughTheCli();
  void table1FinalizedWins();
  void weightUpdateShardingBeatsDataParallel();
  void table4FourStagesFourShards();
  void searchOfAPaperConfiguration();
};

void TestSearch::podShapes() {
  auto v4 = MakePod("tpu-v4", 256);
  QVERIFY2(v4.ok(), v4.ok() ? "" : v4.error().message.c_str());
  QCOMPARE(v4->SliceText(), std::string("4x8x8"));  // whole cubes: a torus on every axis
  QVERIFY(Contains(v4->Describe(), "torus"));
  QCOMPARE(MakePod("tpu-v5e", 256)->SliceText(), std::string("16x16"));
  auto v3 = MakePod("tpu-v3", 2048);  // GSPMD counts v3 cores: 1024 chips of 2
  QVERIFY(v3.ok());
  QCOMPARE(v3->SliceText(), std::string("32x32"));
  QCOMPARE(v3->chip.cores_per_chip, int64_t{2});
  QCOMPARE(v3->chip.device_hbm_bytes(), 16.0 * (1 << 30));
  QCOMPARE(MakePod("tpu-v4", 64, "4x4x4")->SliceText(), std::string("4x4x4"));
  // Errors a person can act on.
  auto odd = MakePod("tpu-v3", 3);
  QVERIFY(!odd.ok() && Contains(odd.error().message, "--cores-per-chip 1"));
  auto big = MakePod("tpu-v4", 8192);
  QVERIFY(!big.ok() && Contains(big.error().message, "more than a tpu-v4 pod"));
  auto wrong = MakePod("tpu-v4", 64, "4x4x8");
  QVERIFY(!wrong.ok() && Contains(wrong.error().message, "has 128 chips"));
  QVERIFY(!MakePod("tpu-v4", 64, "4xx4").ok());
}

void TestSearch::meshPlacementOnTheTorus() {
  const Pod pod = MakePod("tpu-v3", 2048).value();
  // The canonical placement is the row-major one: device d on chip d / 2.
  auto canonical = PlaceMesh(pod, DeviceMesh({{"X", 32}, {"Y", 64}}));
  QVERIFY2(canonical.ok(), canonical.ok() ? "" : canonical.error().message.c_str());
  QVERIFY(canonical->canonical);
  for (int64_t d = 0; d < 2048; ++d) QCOMPARE(canonical->device_to_chip[static_cast<size_t>(d)], d / 2);
  QCOMPARE(canonical->axis_text[1], std::string("32 (all) of axis 1 (ring) x 2 cores"));
  QCOMPARE(canonical->axis_text[0], std::string("32 (all) of axis 0 (ring)"));
  // X=64,Y=32: the canonical order leaves X strided; "X,Y" gives X the cores and axis 1.
  const DeviceMesh m({{"X", 64}, {"Y", 32}});
  QVERIFY(!PlaceMesh(pod, m).ok());
  auto swapped = PlaceMesh(pod, m, "X,Y");
  QVERIFY(swapped.ok());
  QVERIFY(!swapped->canonical);
  // X coordinate x, Y coordinate y: chip (row y, column x / 2).
  for (int64_t x : {0, 1, 5, 63})
    for (int64_t y : {0, 7, 31}) QCOMPARE(swapped->device_to_chip[static_cast<size_t>(x * 32 + y)], y * 32 + x / 2);
  auto topology = TopologyFor(pod, *swapped);
  QVERIFY(topology.ok());
  QCOMPARE(topology->ChipOfDevice(2 * 32 + 3), int64_t{3 * 32 + 1});
  // Bad orders.
  QVERIFY(!PlaceMesh(pod, m, "X").ok());
  QVERIFY(!PlaceMesh(pod, m, "X,Z").ok());
  QVERIFY(!PlaceMesh(pod, DeviceMesh({{"X", 3}, {"Y", 2}})).ok());
}

void TestSearch::meshEnumeration() {
  const Pod pod = MakePod("tpu-v3", 2048).value();
  const std::vector<MeshChoice> two = EnumerateMeshes(pod, {"X", "Y"});
  QCOMPARE(two.size(), size_t{12});  // 2^11 = X * Y
  std::set<std::string> strided;
  for (const MeshChoice& c : two) {
    QCOMPARE(c.mesh.num_devices(), int64_t{2048});
    for (const std::string& t : c.axis_text)
      if (Contains(t, "strided")) strided.insert(c.mesh.ToString());
  }
  // 32x32 chips of 2 cores: an axis of 4, 8 or 16 devices next to one of 512, 256 or 128 cannot
  // both be boxes of chips.
  QCOMPARE(strided, (std::set<std::string>{"X=4,Y=512", "X=8,Y=256", "X=16,Y=128", "X=128,Y=16", "X=256,Y=8", "X=512,Y=4"}));
  const Pod v4 = MakePod("tpu-v4", 256).value();  // 4x8x8
  const std::vector<MeshChoice> three = EnumerateMeshes(v4, {"L", "X", "Y"});
  QCOMPARE(three.size(), size_t{45});  // ordered factorisations of 2^8 into 3 factors: C(10, 2)
  // Axes made of whole physical axes (4, 8, 8 or their products) are rings or boxes; an axis that
  // takes the major part of a physical axis whose minor part another mesh axis took is strided
  // (2 of a ring of 4 after another 2: chips 0 and 2).
  std::map<std::string, bool> any_strided;
  for (const MeshChoice& c : three) {
    bool s = false;
    for (const std::string& t : c.axis_text) s = s || Contains(t, "strided");
    any_strided[c.mesh.ToString()] = s;
  }
  for (const char* whole : {"L=4,X=8,Y=8", "L=1,X=32,Y=8", "L=8,X=32,Y=1", "L=1,X=4,Y=64", "L=256,X=1,Y=1"})
    QVERIFY2(any_strided.count(whole) && !any_strided.at(whole), whole);
  for (const char* split : {"L=2,X=2,Y=64", "L=1,X=2,Y=128", "L=16,X=4,Y=4"})
    QVERIFY2(any_strided.count(split) && any_strided.at(split), split);
}

void TestSearch::candidateIdentity() {
  Candidate c;
  c.family = "in-layer";
  c.strategy = "2D finalized";
  c.model = "transformer";
  c.settings = {{"layers", "32"}, {"annotations", "finalized"}, {"mesh_x", "32"}, {"mesh_y", "64"}};
  c.options = {{"weight_update_sharding", "1"}};
  c.chip = "tpu-v3";
  c.cores_per_chip = 2;
  c.slice = "32x32";
  c.mesh = "X=32,Y=64";
  c.placement = "Y,X";
  const Settings s = c.ToSettings();
  QCOMPARE(s.front(), (std::pair<std::string, std::string>{"search.model", "transformer"}));
  auto back = Candidate::FromSettings(s);
  QVERIFY(back.ok());
  QCOMPARE(back->ToSettings(), s);
  QCOMPARE(back->Key(), c.Key());
  QCOMPARE(c.Key().size(), std::string("search:").size() + 16);
  auto json = Candidate::FromJson(c.ToJson());
  QVERIFY2(json.ok(), json.ok() ? "" : json.error().message.c_str());
  QCOMPARE(json->Key(), c.Key());
  QCOMPARE(c.devices(), int64_t{2048});
  QVERIFY(c.OptionOn("weight_update_sharding"));
  QCOMPARE(c.Label(), std::string("2D finalized on X=32,Y=64, weight-update sharding"));
  // Any difference is another candidate; settings that are not the candidate's are ignored.
  Candidate d = c;
  d.settings["layers"] = "64";
  QVERIFY(d.Key() != c.Key());
  Settings extra = s;
  extra.emplace_back("schedule", "program-order");
  extra.emplace_back("result.evaluation", "exact");
  QCOMPARE(Candidate::FromSettings(extra)->Key(), c.Key());
  // Errors.
  QVERIFY(!Candidate::FromSettings({{"schedule", "x"}}).ok());
  QVERIFY(!Candidate::FromJson("[1]").ok());
  auto bad = Candidate::FromJson("{\"search.model\": 3}");
  QVERIFY(!bad.ok());
  QVERIFY2(Contains(bad.error().message, "1:18"), bad.error().message.c_str());
}

void TestSearch::dataParallelRule() {
  auto m = ZooBuild("transformer", {{"layers", "2"}, {"annotations", "none"}, {"mesh_x", "8"}, {"mesh_y", "1"}});
  QVERIFY(m.ok());
  QVERIFY(ApplyAnnotationRule(**m, "data-parallel").ok());
  int64_t replicated = 0, split = 0;
  for (const Instruction* p : (*m)->entry()->parameters()) {
    QVERIFY(p->has_sharding());
    if (p->name() == "x" || p->name() == "target") {
      QCOMPARE(p->sharding()->DimensionTiles(0), int64_t{8});
      ++split;
    } else {
      QVERIFY2(p->sharding()->IsReplicated(), p->name().c_str());
      ++replicated;
    }
  }
  QCOMPARE(split, int64_t{2});
  QVERIFY(replicated >= 2 * 6);  // two layers of weights, and their optimizer state
  for (const auto& comp : (*m)->computations())
    for (const auto& inst : comp->instructions())
      if (inst->opcode() != Opcode::kParameter) QVERIFY(!inst->has_sharding());
  auto unknown = ApplyAnnotationRule(**m, "model-parallel");
  QVERIFY(!unknown.ok() && Contains(unknown.error().message, "data-parallel"));
}

void TestSearch::familiesGenerate() {
  auto count = [](const std::vector<Candidate>& v, const std::string& family) {
    return std::count_if(v.begin(), v.end(), [&](const Candidate& c) { return c.family == family; });
  };
  {
    SearchSpace space("transformer", SmallTransformer(), MakePod("tpu-v4", 16).value());
    std::vector<std::string> notes;
    auto c = GenerateCandidates(space, {}, &notes).value();
    QCOMPARE(count(c, "in-layer"), 3 * 5);  // 16 = 1x16, 2x8, 4x4, 8x2, 16x1
    QCOMPARE(count(c, "data-parallel"), 1);
    QCOMPARE(count(c, "expert-parallel") + count(c, "spatial"), 0);
    // Pipelining: (L, X, Y) with L in {2, 4} dividing 12 layers; batch 16 in N = L..8L
    // microbatches whose size X divides, GPipe for each and circular at the smallest N.
    //   L=2: X=1 (N 2,4,8,16), X=2 (N 2,4,8), X=4 (N 2,4), X=8 (N 2): 10 GPipe + 4 circular
    //   L=4: X=1 (N 4,8,16), X=2 (N 4,8), X=4 (N 4): 6 GPipe + 3 circular
    QCOMPARE(count(c, "pipelining"), 10 + 4 + 6 + 3);
    for (const Candidate& p : c)
      if (p.family == "pipelining") {
        QCOMPARE(p.model, std::string("pipelined-transformer"));
        QCOMPARE(p.settings.at("layers"), std::string("12"));
        QCOMPARE(std::stoll(p.settings.at("microbatches")) * std::stoll(p.settings.at("microbatch")), 16LL);
        QVERIFY(!p.settings.count("batch"));
      }
    const Candidate& dp = *std::find_if(c.begin(), c.end(), [](const Candidate& x) { return x.family == "data-parallel"; });
    // The Transformer's own data-parallel set (the weight-update-sharding work added it), not the
    // search's annotation rule.
    QCOMPARE(dp.settings.at("annotations"), std::string("data-parallel"));
    QVERIFY(dp.annotate.empty());
    auto only = GenerateCandidates(space, {"data-parallel"}).value();
    QCOMPARE(only.size(), size_t{1});
    auto bad = GenerateCandidates(space, {"pipelining-ish"});
    QVERIFY(!bad.ok() && Contains(bad.error().message, "in-layer"));
    // With the vocabulary layers (vocab > 0) the pipelined Transformer, which has none, is no
    // candidate: the other families still are.
    auto settings = SmallTransformer();
    settings["vocab"] = "64";
    SearchSpace lm("transformer", settings, MakePod("tpu-v4", 16).value());
    std::vector<std::string> lm_notes;
    auto v = GenerateCandidates(lm, {}, &lm_notes).value();
    QCOMPARE(count(v, "pipelining"), 0);
    QCOMPARE(count(v, "in-layer"), 3 * 5);
    QCOMPARE(count(v, "data-parallel"), 1);
    QVERIFY(std::any_of(lm_notes.begin(), lm_notes.end(), [](const std::string& n) { return Contains(n, "no vocabulary layers (vocab=64)"); }));
  }
  {
    // 16 experts on 16 devices: GShard's 1-D sharding, and the hybrid on X in {2, 4, 8, 16}.
    SearchSpace space("moe-transformer", {{"experts", "16"}, {"layers", "2"}}, MakePod("tpu-v4", 16).value());
    auto c = GenerateCandidates(space, {"expert-parallel"}).value();
    QCOMPARE(c.size(), size_t{1 + 4});
    QCOMPARE(c.front().settings.at("annotations"), std::string("gshard"));
    // 4 experts cannot be split over 16 devices by GShard's 1-D sharding.
    SearchSpace few("moe-transformer", {{"experts", "4"}}, MakePod("tpu-v4", 16).value());
    std::vector<std::string> notes;
    auto f = GenerateCandidates(few, {"expert-parallel"}, &notes).value();
    QCOMPARE(f.size(), size_t{2});  // hybrid with X = 2, 4
    QVERIFY(!notes.empty() && Contains(notes.front(), "multiples of the devices"));
  }
  {
    // The pipelined Transformer searched directly: on a mesh without a stage axis its in-layer and
    // data-parallel candidates run it as one stage (the model's default 4 stages would need 4x the
    // devices), and they build; the pipelining family sets its own stages. A user's stages stay.
    SearchSpace space("pipelined-transformer", {}, MakePod("tpu-v4", 16).value());
    auto c = GenerateCandidates(space, {}).value();
    QVERIFY(count(c, "in-layer") > 0 && count(c, "pipelining") > 0);
    for (const Candidate& p : c) {
      if (p.family == "pipelining") {
        QVERIFY(std::stoll(p.settings.at("stages")) >= 2);
        continue;
      }
      QCOMPARE(p.settings.at("stages"), std::string("1"));
      auto built = BuildCandidateModule(p);
      QVERIFY2(built.ok(), built.ok() ? "" : (p.Label() + ": " + built.error().message).c_str());
    }
    SearchSpace fixed("pipelined-transformer", {{"stages", "2"}}, MakePod("tpu-v4", 16).value());
    const std::vector<Candidate> in_layer = GenerateCandidates(fixed, {"in-layer"}).value();
    QVERIFY(!in_layer.empty());
    for (const Candidate& p : in_layer) QCOMPARE(p.settings.at("stages"), std::string("2"));
  }
  {
    SearchSpace space("unet3d", {}, MakePod("tpu-v4", 16).value());
    auto c = GenerateCandidates(space, {}).value();
    QCOMPARE(count(c, "spatial"), 4);  // Y in {2, 4, 8, 16}
    QCOMPARE(count(c, "data-parallel"), 1);
    const Candidate& dp = *std::find_if(c.begin(), c.end(), [](const Candidate& x) { return x.family == "data-parallel"; });
    QCOMPARE(dp.settings.at("annotations"), std::string("data"));  // the model's own set
    QVERIFY(dp.annotate.empty());
  }
}

void TestSearch::boundsAndInvalidCandidates() {
  const Pod pod = MakePod("tpu-v4", 16).value();
  SearchSpace space("transformer", SmallTransformer(), pod);
  auto candidates = GenerateCandidates(space, {"in-layer", "data-parallel"}).value();
  EvaluationOptions eo;
  for (const Candidate& c : candidates) {
    auto p = PrepareCandidate(c, eo);
    QVERIFY2(p.ok(), p.ok() ? "" : p.error().message.c_str());
    QCOMPARE(p->depths, (std::vector<int64_t>{1, 2}));
    QCOMPARE(p->full_depth, int64_t{12});
    // Every strategy computes the same useful work: the compute bound is the same for all.
    QVERIFY(p->bounds.step_time_s > 0);
  }
  // Data parallelism keeps every weight and its Adam moments whole on every device: 12 layers of
  // 4 MND + 2 MH weights (M=1024, N*D=1024, H=4096: 12.6 M) x 3 copies x 4 bytes.
  const Candidate& dp = *std::find_if(candidates.begin(), candidates.end(), [](const Candidate& x) { return x.family == "data-parallel"; });
  auto p = PrepareCandidate(dp, eo).value();
  const double weights = 12.0 * (4 * 1024 * 1024 + 2 * 1024 * 4096);
  QVERIFY2(p.bounds.memory_bytes >= 3 * 4 * weights, std::to_string(p.bounds.memory_bytes / (4 * weights)).c_str());
  QVERIFY(p.bounds.memory_bytes < 3 * 4 * weights * 1.01);
  // Over-split: a batch of 16 cannot be split 32 ways.
  Candidate over = dp;
  over.settings["batch"] = "8";
  auto o = PrepareCandidate(over, eo);
  QVERIFY(!o.ok());
  QVERIFY2(Contains(o.error().message, "splits its dim 0 (8) 16 ways"), o.error().message.c_str());
  // A pod too small for the weights: pruned by memory before anything is simulated.
  SearchOptions so;
  so.model = "transformer";
  so.settings = Table2Transformer(128);
  so.chip = "tpu-v3";
  so.devices = 128;
  so.families = {"data-parallel"};
  auto r = RunSearch(so);
  QVERIFY2(r.ok(), r.ok() ? "" : r.error().message.c_str());
  QVERIFY2(r->stats.pruned_memory == 1, (r->ranked.front().message + " " + std::to_string(r->ranked.front().bounds.memory_bytes)).c_str());
  QCOMPARE(r->stats.simulated, int64_t{0});
  QVERIFY(Contains(r->ranked.front().message, "HBM holds 17.2 GB"));
  // Settings the model refuses (an optimizer without the backward pass): the search says why no
  // family has a candidate, not only that none has.
  SearchOptions refused;
  refused.model = "transformer-layer";
  refused.settings = {{"backward", "0"}, {"optimizer", "adam"}};
  refused.chip = "tpu-v4";
  refused.devices = 16;
  auto e = RunSearch(refused);
  QVERIFY(!e.ok());
  QVERIFY2(Contains(e.error().message, "transformer-layer: an optimizer step needs backward=1 (so no strategy family has a candidate)"),
           e.error().message.c_str());
  // A model too small for the pod (NCF's default batch of 64 over 256 TPU v4 chips): every
  // candidate is invalid, and the search says at which smaller device count some are valid
  // (halving: 128 still splits the batch of 64 too far, 64 does not).
  SearchOptions small;
  small.model = "ncf";
  small.chip = "tpu-v4";
  small.devices = 256;
  auto s = RunSearch(small);
  QVERIFY2(s.ok(), s.ok() ? "" : s.error().message.c_str());
  QCOMPARE(s->stats.invalid, s->stats.generated);
  QVERIFY(s->valid_at_fewer_devices.has_value());
  QCOMPARE(s->valid_at_fewer_devices->devices, int64_t{64});
  QCOMPARE(s->valid_at_fewer_devices->valid, s->stats.generated);  // both data-parallel candidates
  QVERIFY(std::any_of(s->notes.begin(), s->notes.end(), [](const std::string& n) {
    return Contains(n, "no candidate can split this model's dimensions over 256 devices; on 64 devices 2 of 2 candidates are valid");
  }));
  // A search with valid candidates has no such note.
  small.devices = 64;
  auto fits = RunSearch(small);
  QVERIFY(fits.ok() && !fits->valid_at_fewer_devices && fits->stats.invalid == 0);
  // --mesh: one of another size than the pod is refused as such; one no family uses is named with
  // the meshes the families do use.
  SearchOptions meshed;
  meshed.model = "mlp";
  meshed.chip = "tpu-v4";
  meshed.devices = 8;
  meshed.meshes = {"X=3"};
  auto wrong = RunSearch(meshed);
  QVERIFY(!wrong.ok());
  QCOMPARE(wrong.error().message, std::string("mesh 'X=3' has 3 devices, the pod 8"));
  meshed.meshes = {"A=8"};
  auto unused = RunSearch(meshed);
  QVERIFY(!unused.ok());
  QVERIFY2(Contains(unused.error().message, "no candidate of mlp runs on the mesh(es) given by --mesh") &&
               Contains(unused.error().message, "X=2,Y=4") && Contains(unused.error().message, "X=8"),
           unused.error().message.c_str());
  meshed.meshes = {"X=2,Y=4"};
  auto one = RunSearch(meshed);
  QVERIFY2(one.ok(), one.ok() ? "" : one.error().message.c_str());
  QVERIFY(!one->ranked.empty());
  for (const CandidateResult& c : one->ranked) QCOMPARE(c.candidate.mesh, std::string("X=2,Y=4"));
}

// Extrapolating from depths 2 and 3 gives the step time of the full-depth simulation, and its
// peak memory (closely: the memory of async collectives' buffers depends on how they overlap).
// Two shallow runs whose peak falls with depth (a different schedule or rematerialisation at each)
// put the line through them below zero at 32 layers; the extrapolated peak stays at the larger
// sample's, so such a candidate is not ranked as fitting in 0 bytes. Figures that grow with depth
// are on the line.
void TestSearch::extrapolationNeverBelowTheDeeperSample() {
  sim::RunSummary a, b;
  a.step_time_s = 2.0;
  b.step_time_s = 3.0;
  a.peak_memory_bytes = 9'000'000'000;
  b.peak_memory_bytes = 8'000'000'000;
  a.total_flops = 1e15;
  b.total_flops = 1.5e15;
  const double k = (32.0 - 2.0) / (3.0 - 2.0);
  const sim::RunSummary s = search::ExtrapolateSummary(a, b, k);
  QCOMPARE(s.peak_memory_bytes, int64_t{9'000'000'000});  // the line: 9 GB - 30 x 1 GB, clamped at 0 before
  QVERIFY(std::abs(s.step_time_s - 32.0) < 1e-9);        // 2 + 30 x 1
  QVERIFY(std::abs(s.total_flops - 1.6e16) < 1e3);
  // A step that falls between the samples stays at the slower one.
  b.step_time_s = 1.5;
  QVERIFY(std::abs(search::ExtrapolateSummary(a, b, k).step_time_s - 2.0) < 1e-9);
  // Growing peaks are extrapolated.
  b.peak_memory_bytes = 9'500'000'000;
  QCOMPARE(search::ExtrapolateSummary(a, b, k).peak_memory_bytes, int64_t{24'000'000'000});
}

// The search computes a candidate's bounds from depths of one and two units (PrepareFor::
// kBoundsOnly) instead of the evaluation depths two and three: every unit adds the same weights
// and FLOPs, so the extrapolated bounds are the same (to the rounding of FLOP counts above 2^53),
// for the dense Transformer (unit: a layer), the pipelined one (unit: a layer per stage) and the
// MoE Transformer with alternating MoE layers (unit: two layers). Those modules are not kept.
void TestSearch::boundsOnlyTakeTheCheapestDepths() {
  const Pod pod = MakePod("tpu-v4", 16).value();
  std::vector<Candidate> candidates;
  for (const char* family : {"in-layer", "data-parallel", "pipelining"}) {
    SearchSpace space("transformer", SmallTransformer(24), pod);  // 4 stages extrapolate: 24 > 5 x 4
    auto c = GenerateCandidates(space, {family}).value();
    candidates.insert(candidates.end(), c.begin(), c.end());
  }
  {
    SearchSpace space("moe-transformer", {{"layers", "12"}, {"moe_layers", "alternate"}}, pod);
    auto c = GenerateCandidates(space, {}).value();
    candidates.insert(candidates.end(), c.begin(), c.end());
  }
  EvaluationOptions eo;
  int compared = 0;
  std::set<int64_t> units;
  for (const Candidate& c : candidates) {
    auto full = PrepareCandidate(c, eo);
    auto cheap = PrepareCandidate(c, eo, PrepareFor::kBoundsOnly);
    QCOMPARE(cheap.ok(), full.ok());
    if (!full.ok() || full->exact()) continue;
    QVERIFY(cheap->modules.empty());
    QCOMPARE(cheap->depths, full->depths);  // evaluated at the same depths
    QCOMPARE(cheap->bounds.memory_bytes, full->bounds.memory_bytes);
    QVERIFY2(std::abs(cheap->bounds.flops - full->bounds.flops) <= 1e-12 * full->bounds.flops, c.Label().c_str());
    QVERIFY(full->bounds.flops > 0);
    units.insert(full->depths[1] - full->depths[0]);
    ++compared;
  }
  QVERIFY2(compared >= 20, std::to_string(compared).c_str());
  // A layer (dense), two (alternating MoE; also a layer on each of 2 stages), four (a layer on each of 4 stages).
  QCOMPARE(units, (std::set<int64_t>{1, 2, 4}));
}

// The search drops each candidate's modules once its bounds are known and EvaluateCandidate builds
// them again (search.cpp, PrepareAll): the figures are those of the modules kept.
void TestSearch::droppedModulesAreBuiltAgain() {
  const Pod pod = MakePod("tpu-v4", 16).value();
  SearchSpace space("transformer", SmallTransformer(), pod);
  auto candidates = GenerateCandidates(space, {"in-layer"}).value();
  QVERIFY(!candidates.empty());
  EvaluationOptions eo;
  auto kept = PrepareCandidate(candidates.front(), eo).value();
  auto dropped = PrepareCandidate(candidates.front(), eo).value();
  QCOMPARE(dropped.modules.size(), size_t{2});  // layers 2 and 3
  dropped.modules.clear();
  const Evaluation a = EvaluateCandidate(kept, eo);
  const Evaluation b = EvaluateCandidate(dropped, eo);
  QVERIFY2(a.result.simulated(), a.result.message.c_str());
  QVERIFY2(b.result.simulated(), b.result.message.c_str());
  QVERIFY(a.result.summary.step_time_s > 0);
  QCOMPARE(b.result.summary.step_time_s, a.result.summary.step_time_s);
  QCOMPARE(b.result.summary.peak_memory_bytes, a.result.summary.peak_memory_bytes);
  QCOMPARE(b.result.summary.total_flops, a.result.summary.total_flops);
  QCOMPARE(b.result.collectives.size(), a.result.collectives.size());
  // A module given to the search (method 2's solution) cannot be built again: evaluating it a
  // second time says so instead of evaluating nothing.
  auto module = BuildCandidateModule(candidates.front(), {{"layers", "2"}});
  QVERIFY(module.ok());
  auto given = PrepareGivenModule(candidates.front(), pod, kept.mesh, std::move(module).value()).value();
  QVERIFY(EvaluateCandidate(given, eo).result.simulated());
  const Evaluation again = EvaluateCandidate(given, eo);
  QCOMPARE(again.result.outcome, Outcome::kFailed);
  QVERIFY2(Contains(again.result.message, "evaluated twice"), again.result.message.c_str());
}

void TestSearch::depthExtrapolationMatchesFullDepth() {
  SearchOptions so;
  so.model = "transformer";
  so.settings = SmallTransformer(12);
  so.chip = "tpu-v4";
  so.devices = 16;
  so.families = {"in-layer", "data-parallel"};
  so.confirm = 0;
  so.jobs = 2;
  auto extrapolated = RunSearch(so);
  so.evaluation.extrapolate = false;
  auto exact = RunSearch(so);
  QVERIFY(extrapolated.ok() && exact.ok());
  int64_t compared = 0, memory_exact = 0;
  for (const CandidateResult& e : extrapolated->ranked) {
    if (!e.simulated()) continue;
    QVERIFY(e.extrapolated);
    QCOMPARE(e.evaluation, std::string("extrapolated from layers=1,2 to 12"));
    const CandidateResult* x = Find(exact->ranked, e.candidate.strategy, e.candidate.mesh);
    QVERIFY(x && x->simulated() && !x->extrapolated);
    QVERIFY2(std::fabs(e.summary.step_time_s / x->summary.step_time_s - 1) < 1e-3, e.candidate.Label().c_str());
    QVERIFY2(std::fabs(e.summary.total_flops / x->summary.total_flops - 1) < 1e-6, e.candidate.Label().c_str());
    QVERIFY2(std::fabs(e.summary.mfu / x->summary.mfu - 1) < 1e-3, e.candidate.Label().c_str());
    const double mem = static_cast<double>(e.summary.peak_memory_bytes) / static_cast<double>(x->summary.peak_memory_bytes) - 1;
    QVERIFY2(std::fabs(mem) < 0.05, (e.candidate.Label() + ": " + std::to_string(mem)).c_str());
    memory_exact += std::fabs(mem) < 1e-3 ? 1 : 0;
    // Collectives by kind: the same counts.
    for (const CollectiveTotal& t : x->collectives) {
      auto it = std::find_if(e.collectives.begin(), e.collectives.end(), [&](const CollectiveTotal& u) { return u.kind == t.kind; });
      QVERIFY(it != e.collectives.end());
      QVERIFY(std::fabs(it->count - t.count) < 1e-6);
    }
    ++compared;
  }
  QCOMPARE(compared, int64_t{16});
  QVERIFY2(memory_exact >= 14, std::to_string(memory_exact).c_str());

  // The pipelined Transformer's depth steps by one layer per stage (2 stages: layers 4 and 6
  // extrapolated to 12): the loop's iterations stay (GPipe), each does one more layer's work.
  so.families = {"pipelining"};
  so.meshes = {"L=2,X=2,Y=4"};
  so.evaluation.extrapolate = true;
  auto pe = RunSearch(so);
  so.evaluation.extrapolate = false;
  auto px = RunSearch(so);
  QVERIFY(pe.ok() && px.ok());
  int64_t pipelined = 0;
  for (const CandidateResult& e : pe->ranked) {
    if (!e.simulated()) continue;
    QCOMPARE(e.evaluation, std::string("extrapolated from layers=4,6 to 12"));
    const CandidateResult* x = Find(px->ranked, e.candidate.strategy, e.candidate.mesh);
    QVERIFY(x && x->simulated() && !x->extrapolated);
    const double t = e.summary.step_time_s / x->summary.step_time_s - 1;
    const double mem = static_cast<double>(e.summary.peak_memory_bytes) / static_cast<double>(x->summary.peak_memory_bytes) - 1;
    qInfo("%s: step %+.4f%%, memory %+.4f%%", e.candidate.Label().c_str(), 100 * t, 100 * mem);
    // Within 2%: the circular schedule's per-round weight gather over R is not quite linear in R
    // (-0.7% before the simulator's calibration; -1.4% with its per-op overhead and matrix-unit
    // padding and the weight gradients' all-reduces moved out of the loop; GPipe within 0.6%).
    QVERIFY2(std::fabs(t) < 0.02, e.candidate.Label().c_str());
    QVERIFY2(std::fabs(mem) < 0.05, e.candidate.Label().c_str());
    ++pipelined;
  }
  QVERIFY(pipelined >= 3);

  // The MoE Transformer (alternating: a unit is a dense + MoE pair) from one pair and two, as the
  // dense one from one layer and two: the first pair is not a special case.
  so.model = "moe-transformer";
  so.settings = {{"layers", "12"}, {"batch", "64"}, {"experts", "16"}, {"seq", "64"}, {"model", "64"}, {"hidden", "256"}};
  so.families = {"expert-parallel"};
  so.meshes = {};
  so.evaluation.extrapolate = true;
  auto me = RunSearch(so);
  so.evaluation.extrapolate = false;
  auto mx = RunSearch(so);
  QVERIFY2(me.ok() && mx.ok(), me.ok() ? (mx.ok() ? "" : mx.error().message.c_str()) : me.error().message.c_str());
  int64_t moe = 0;
  for (const CandidateResult& e : me->ranked) {
    if (!e.simulated() || !e.extrapolated) continue;
    QCOMPARE(e.evaluation, std::string("extrapolated from layers=2,4 to 12"));
    const CandidateResult* x = Find(mx->ranked, e.candidate.strategy, e.candidate.mesh);
    QVERIFY(x && x->simulated() && !x->extrapolated);
    qInfo("%s: step %+.4f%%, memory %+.4f%%", e.candidate.Label().c_str(), 100 * (e.summary.step_time_s / x->summary.step_time_s - 1), 100 * (static_cast<double>(e.summary.peak_memory_bytes) / static_cast<double>(x->summary.peak_memory_bytes) - 1));
    // Within 0.3%: the hybrid on X=4,Y=4 is 0.15% short from pairs 1 and 2 (0.11% from 2 and 3;
    // how its collectives overlap the compute is not quite the same in every layer), the others
    // on the line.
    QVERIFY2(std::fabs(e.summary.step_time_s / x->summary.step_time_s - 1) < 3e-3, e.candidate.Label().c_str());
    const double mem = static_cast<double>(e.summary.peak_memory_bytes) / static_cast<double>(x->summary.peak_memory_bytes) - 1;
    QVERIFY2(std::fabs(mem) < 0.05, e.candidate.Label().c_str());
    ++moe;
  }
  QVERIFY(moe >= 2);
}

// The search evaluates a mesh's candidates together and lets a thread's candidates on one mesh
// share the partitioner's memo: each candidate evaluated alone, with a memo of its own, gives the
// same figures to the last bit (GPipe and circular, several microbatch counts, two depths each).
void TestSearch::sharedMemoChangesNoFigure() {
  SearchOptions so;
  so.model = "transformer";
  so.settings = SmallTransformer(12);
  so.chip = "tpu-v4";
  so.devices = 16;
  so.families = {"pipelining"};
  so.meshes = {"L=2,X=2,Y=4", "L=4,X=2,Y=2"};
  so.confirm = 0;
  so.jobs = 1;
  so.prune = false;
  auto searched = RunSearch(so);
  QVERIFY2(searched.ok(), searched.ok() ? "" : searched.error().message.c_str());
  int64_t compared = 0;
  std::set<std::string> meshes;
  for (const CandidateResult& r : searched->ranked) {
    if (!r.simulated()) continue;
    auto p = PrepareCandidate(r.candidate, so.evaluation);
    QVERIFY(p.ok());
    Evaluation alone = EvaluateCandidate(p.value(), so.evaluation);
    QVERIFY(alone.result.simulated());
    QCOMPARE(alone.result.summary.step_time_s, r.summary.step_time_s);
    QCOMPARE(alone.result.summary.peak_memory_bytes, r.summary.peak_memory_bytes);
    QCOMPARE(alone.result.summary.bytes_communicated, r.summary.bytes_communicated);
    meshes.insert(r.candidate.mesh);
    ++compared;
  }
  QCOMPARE(meshes.size(), size_t{2});
  QVERIFY2(compared >= 6, std::to_string(compared).c_str());
}

void TestSearch::searchRanksStoresAndReopens() {
  QTemporaryDir dir;
  const std::string db = dir.filePath("search.sqlite").toStdString();
  SearchOptions so;
  so.model = "transformer";
  so.settings = SmallTransformer(8);
  so.chip = "tpu-v4";
  so.devices = 16;
  so.families = {"in-layer", "data-parallel"};
  so.jobs = 2;
  so.confirm = 1;
  so.store = pipeline::RunDatabase::Open(db).value();
  int64_t progress_calls = 0, last_done = 0;
  auto r = RunSearch(so, [&](const SearchProgress& p) {
    ++progress_calls;
    QVERIFY(p.done <= p.total);
    last_done = std::max(last_done, p.done);
  });
  QVERIFY2(r.ok(), r.ok() ? "" : r.error().message.c_str());
  QCOMPARE(r->stats.generated, int64_t{16});
  QCOMPARE(last_done, int64_t{16});
  QVERIFY(progress_calls >= 16);
  QCOMPARE(r->stats.confirmed, int64_t{1});
  // Ranked: the ones that fit by step time (to the nanosecond: a tie goes to the candidate
  // simulated at full depth).
  for (size_t i = 1; i < r->ranked.size(); ++i)
    if (r->ranked[i].fits() && r->ranked[i - 1].fits())
      QVERIFY(r->ranked[i - 1].summary.step_time_s <= r->ranked[i].summary.step_time_s + 1e-9);
  const CandidateResult& best = r->ranked.front();
  QVERIFY(best.fits());
  QVERIFY(!best.extrapolated);  // confirmed at full depth
  QVERIFY(Contains(best.message, "confirmed at full depth"));
  // Every simulated candidate is a stored run, under its key; the best one with its timeline.
  auto runs = so.store->List().value();
  QCOMPARE(static_cast<int64_t>(runs.size()), r->stats.simulated);
  std::set<std::string> keys;
  for (const RunOverview& o : runs) keys.insert(o.key);
  for (const CandidateResult& c : r->ranked)
    if (c.simulated()) QVERIFY(keys.count(c.candidate.Key()));
  RunResult stored = so.store->Load(best.run_id).value();
  QCOMPARE(stored.key, best.candidate.Key());
  QVERIFY(stored.has_detail());
  QCOMPARE(stored.summary.step_time_s, best.summary.step_time_s);
  QVERIFY(!stored.annotations.empty());
  // It re-opens: the model rebuilt at full depth with the stored annotations.
  auto reopened = ReopenCandidate(stored.inputs.settings, stored.annotations);
  QVERIFY2(reopened.ok(), reopened.ok() ? "" : reopened.error().message.c_str());
  QCOMPARE(AnnotationList(**reopened), stored.annotations);
  auto built = BuildCandidateModule(best.candidate);
  QCOMPARE(PrintHloModule(**reopened), PrintHloModule(**built));
  // An extrapolated run carries its figures, no timeline, and re-opens from its settings alone.
  const CandidateResult* other = nullptr;
  for (const CandidateResult& c : r->ranked)
    if (c.simulated() && c.extrapolated) other = &c;
  QVERIFY(other);
  RunResult summary_only = so.store->Load(other->run_id).value();
  QVERIFY(!summary_only.has_detail());
  QCOMPARE(summary_only.summary.peak_memory_bytes, other->summary.peak_memory_bytes);
  auto from_run = ResultFromRun(OverviewOf(summary_only));
  QVERIFY(from_run.ok());
  QCOMPARE(from_run->candidate.Key(), other->candidate.Key());
  QCOMPARE(from_run->evaluation, other->evaluation);
  QCOMPARE(from_run->collectives.size(), other->collectives.size());
  QVERIFY(ReopenCandidate(summary_only.inputs.settings).ok());
  // A run no search made does not re-open as a candidate.
  auto not_search = ReopenCandidate({{"schedule", "program-order"}});
  QVERIFY(!not_search.ok() && Contains(not_search.error().message, "search.model"));
}

// A stored candidate re-opened with `runs open` says how to simulate it on the pod it was ranked
// on (slice, cores per chip, mesh order: `simulate --mesh-order`), and that simulation gives the
// ranked figures exactly — also for a candidate whose mesh the search laid in another order than
// the mesh's own (the GUI applies the same slice when a candidate is chosen, test_gui_strategies).
void TestSearch::reopenedCandidateSimulatesAsRanked() {
  QTemporaryDir dir;
  const QString db = dir.filePath("ranked.sqlite");
  SearchOptions so;
  so.model = "transformer";
  so.settings = SmallTransformer(4);  // exact: too shallow to extrapolate
  so.chip = "tpu-v3";                 // two cores per chip
  so.devices = 32;
  so.families = {"in-layer"};
  so.jobs = 2;
  so.confirm = 0;
  so.store = pipeline::RunDatabase::Open(db.toStdString()).value();
  auto r = RunSearch(so);
  QVERIFY2(r.ok(), r.ok() ? "" : r.error().message.c_str());
  int checked = 0, reordered = 0;
  for (const CandidateResult& c : r->ranked) {
    if (!c.simulated() || c.extrapolated) continue;
    const QString hlo = dir.filePath(QString("c%1.hlo").arg(c.run_id));
    CliRun open = Cli({"runs", "open", db, QString::number(c.run_id), "-o", hlo});
    QVERIFY2(open.code == 0, (open.out + open.err).c_str());
    const std::string marker = "simulate it on the pod it was ranked on: shardscope-cli ";
    const size_t at = open.err.find(marker);
    QVERIFY2(at != std::string::npos, open.err.c_str());
    const std::string cmd = open.err.substr(at + marker.size(), open.err.find('\n', at) - at - marker.size());
    QVERIFY2(Contains(cmd, "--topology " + c.candidate.slice + " --cores-per-chip 2 --mesh-order " + c.candidate.placement),
             cmd.c_str());
    const DeviceMesh mesh = DeviceMesh::Parse(c.candidate.mesh).value();
    std::string own;
    for (int64_t a = mesh.num_axes(); a-- > 0;) own += (own.empty() ? "" : ",") + mesh.axes()[static_cast<size_t>(a)].name;
    if (c.candidate.placement != own) ++reordered;
    CliRun sim = Cli(QString::fromStdString(cmd).split(' ', Qt::SkipEmptyParts));
    QVERIFY2(sim.code == 0, (cmd + "\n" + sim.out + sim.err).c_str());
    double step_us = 0, peak = 0;
    QVERIFY2(std::sscanf(sim.out.substr(sim.out.rfind("step_time_us:")).c_str(), "step_time_us: %lf peak_memory_bytes: %lf",
                         &step_us, &peak) == 2,
             sim.out.c_str());
    QVERIFY2(std::abs(step_us * 1e-6 - c.summary.step_time_s) <= 1e-6 * c.summary.step_time_s,
             (c.candidate.Label() + ": " + std::to_string(step_us) + " us, ranked " + std::to_string(c.summary.step_time_s)).c_str());
    QCOMPARE(static_cast<int64_t>(peak), c.summary.peak_memory_bytes);
    if (++checked == 6) break;
  }
  QVERIFY(checked >= 4);
  QVERIFY2(reordered >= 1, "some candidate's mesh is laid in another order than its own");
}

// At 4 layers every candidate is simulated at full depth in step 3 (too shallow to extrapolate):
// their runs are stored with figures only, and the best one is simulated again in step 4 to store
// its timeline, with the same figures.
void TestSearch::exactCandidatesStoreTheBestTimelineOnly() {
  QTemporaryDir dir;
  SearchOptions so;
  so.model = "transformer";
  so.settings = SmallTransformer(4);
  so.chip = "tpu-v4";
  so.devices = 16;
  so.families = {"in-layer", "data-parallel"};
  so.jobs = 2;
  so.confirm = 1;
  so.store = pipeline::RunDatabase::Open(dir.filePath("exact.sqlite").toStdString()).value();
  auto r = RunSearch(so);
  QVERIFY2(r.ok(), r.ok() ? "" : r.error().message.c_str());
  QCOMPARE(r->stats.confirmed, int64_t{0});
  QVERIFY(r->stats.simulated >= 4);
  const CandidateResult& best = r->ranked.front();
  QVERIFY(best.fits() && !best.extrapolated);
  int64_t with_detail = 0, without = 0;
  for (const CandidateResult& c : r->ranked) {
    if (!c.simulated()) continue;
    QVERIFY(!c.extrapolated);
    RunResult stored = so.store->Load(c.run_id).value();
    QCOMPARE(stored.key, c.candidate.Key());
    QCOMPARE(stored.summary.step_time_s, c.summary.step_time_s);
    QCOMPARE(stored.summary.peak_memory_bytes, c.summary.peak_memory_bytes);
    QVERIFY(!stored.annotations.empty());
    if (stored.has_detail()) ++with_detail;
    else ++without;
    QCOMPARE(stored.has_detail(), &c == &best);
  }
  QCOMPARE(with_detail, int64_t{1});
  QCOMPARE(without, r->stats.simulated - 1);
  // One run per candidate: the best one's was replaced, not added.
  QCOMPARE(static_cast<int64_t>(so.store->List().value().size()), r->stats.simulated);
}

void TestSearch::paretoFrontIsNonDominated() {
  std::vector<CandidateResult> results;
  auto add = [&](double t, int64_t mem, double hbm = 100) {
    CandidateResult r;
    r.candidate.strategy = "s" + std::to_string(results.size());
    r.candidate.mesh = "X=1";
    r.summary.step_time_s = t;
    r.summary.peak_memory_bytes = mem;
    r.hbm_bytes = hbm;
    results.push_back(r);
  };
  add(5, 10);
  add(4, 20);
  add(6, 5);
  add(4.5, 30);   // dominated by (4, 20)
  add(7, 50);     // dominated
  add(3, 200);    // fastest but over HBM: not on the front
  add(4, 20);     // a tie of (4, 20): only one of them
  auto front = RankResults(results);
  std::vector<std::pair<double, int64_t>> points;
  for (size_t i : front) points.emplace_back(results[i].summary.step_time_s, results[i].summary.peak_memory_bytes);
  QCOMPARE(points, (std::vector<std::pair<double, int64_t>>{{6, 5}, {5, 10}, {4, 20}}));
  QCOMPARE(results.front().summary.step_time_s, 4.0);  // the fastest that fits ranks first
  QCOMPARE(results.back().summary.step_time_s, 3.0);   // the one over HBM after every one that fits
}

// Step 4: the shallow depths never reach the memory limit, so an extrapolated peak has no
// rematerialisation in it; a candidate over the HBM by extrapolation but faster than the best one
// that fits is simulated at full depth too, where the simulator recomputes values to fit.
void TestSearch::overHbmCandidatesConfirmedWithRemat() {
  std::vector<CandidateResult> results;
  auto add = [&](double t, int64_t mem, bool extrapolated) {
    CandidateResult r;
    r.candidate.strategy = "s" + std::to_string(results.size());
    r.candidate.mesh = "X=1";
    r.summary.step_time_s = t;
    r.summary.peak_memory_bytes = mem;
    r.hbm_bytes = 100;
    r.extrapolated = extrapolated;
    results.push_back(r);
  };
  add(10, 50, true);   // 0: the best that fits
  add(12, 60, true);   // 1: fits, slower
  add(8, 120, true);   // 2: over the HBM, faster than 0
  add(9, 110, false);  // 3: over, faster, but simulated at full depth already
  add(7, 130, true);   // 4: over, the fastest
  add(11, 105, true);  // 5: over, slower than 0: cannot win even if it fits
  QCOMPARE(ConfirmationOrder(results, 1), (std::vector<size_t>{0, 4}));
  QCOMPARE(ConfirmationOrder(results, 2), (std::vector<size_t>{0, 1, 4, 2}));
  QCOMPARE(ConfirmationOrder(results, 0), std::vector<size_t>{});
  results[0].summary.peak_memory_bytes = 101;  // nothing fits: the fastest, then the next over one
  results[1].summary.peak_memory_bytes = 101;
  QCOMPARE(ConfirmationOrder(results, 1), (std::vector<size_t>{4, 2}));

  // GSPMD Table 2's model at 33 layers and batch 72 on 128 v3 cores (SGD): 2D finalized
  // extrapolates to a peak over the 17.2 GB of HBM; at full depth it fits by recomputing.
  SearchOptions so;
  so.model = "transformer";
  so.settings = Table2Transformer(72);
  so.settings["layers"] = "33";
  so.settings["optimizer"] = "sgd";
  so.chip = "tpu-v3";
  so.devices = 128;
  so.families = {"in-layer"};
  so.meshes = {"X=8,Y=16"};
  so.confirm = 0;
  auto shallow = RunSearch(so);
  QVERIFY2(shallow.ok(), shallow.ok() ? "" : shallow.error().message.c_str());
  const CandidateResult* e = Find(shallow->ranked, "2D finalized", "X=8,Y=16");
  QVERIFY(e && e->simulated() && e->extrapolated);
  QVERIFY2(!e->fits(), std::to_string(e->summary.peak_memory_bytes).c_str());
  so.confirm = 1;
  auto confirmed = RunSearch(so);
  QVERIFY(confirmed.ok());
  const CandidateResult* f = Find(confirmed->ranked, "2D finalized", "X=8,Y=16");
  QVERIFY(f && f->simulated() && !f->extrapolated);
  QVERIFY2(f->fits(), std::to_string(f->summary.peak_memory_bytes).c_str());
  QVERIFY2(Contains(f->message, "without rematerialisation"), f->message.c_str());
  QVERIFY(f->summary.recompute_time_s > 0);
  // The recompute costs little: within 2% of the extrapolated step.
  QVERIFY(std::fabs(f->summary.step_time_s / e->summary.step_time_s - 1) < 0.02);
  QCOMPARE(confirmed->ranked.front().candidate.strategy, std::string("2D finalized"));
}

void TestSearch::explanationNamesTheCollectives() {
  CandidateResult a, b;
  a.candidate.strategy = "2D Attempt 2";
  a.candidate.mesh = "X=8,Y=16";
  b.candidate.strategy = "2D finalized";
  b.candidate.mesh = "X=8,Y=16";
  for (CandidateResult* r : {&a, &b}) {
    r->hbm_bytes = 16e9;
    r->summary.compute_time_s = 4.0;
  }
  a.summary.step_time_s = 5.0;
  a.summary.peak_memory_bytes = 12000000000;
  a.collectives = {{"all-reduce", 64, 64 * 96e6, 1.0}, {"all-gather", 32, 32 * 8e6, 0.2}};
  b.summary.step_time_s = 4.1;
  b.summary.peak_memory_bytes = 9000000000;
  b.collectives = {{"reduce-scatter", 64, 64 * 48e6, 0.3}, {"all-gather", 96, 96 * 8e6, 0.6}};
  const std::string text = ExplainDifference(a, b);
  QVERIFY2(Contains(text, "B is 18.0% faster than A (4.10 s vs 5.00 s per step)"), text.c_str());
  QVERIFY2(Contains(text, "B replaces 64 all-reduces of 96.0 MB (1.00 s) by 64 reduce-scatters of 48.0 MB (300 ms)"), text.c_str());
  QVERIFY2(Contains(text, "its all-gathers take 600 ms instead of 200 ms (96 of 8.00 MB vs 32 of 8.00 MB)"), text.c_str());
  QVERIFY2(Contains(text, "Peak memory per device: 9.00 GB vs 12.0 GB (-3.00 GB)"), text.c_str());
  const std::string reverse = ExplainDifference(b, a);
  QVERIFY2(Contains(reverse, "B is 22.0% slower than A"), reverse.c_str());
  CandidateResult pruned;
  pruned.outcome = Outcome::kPrunedBound;
  QVERIFY(Contains(ExplainDifference(a, pruned), "must be simulated"));
}

// The Strategies panel's comparison of two candidates: a line per figure and per collective kind
// either has, and the explanation in words.
void TestSearch::sideBySideComparison() {
  CandidateResult a, b;
  a.candidate.family = b.candidate.family = "in-layer";
  a.candidate.strategy = "2D Attempt 2";
  b.candidate.strategy = "2D finalized";
  a.candidate.mesh = b.candidate.mesh = "X=8,Y=16";
  for (CandidateResult* r : {&a, &b}) {
    r->hbm_bytes = 16e9;
    r->summary.compute_time_s = 4.0;
  }
  a.summary.step_time_s = 5.0;
  a.summary.mfu = 0.4;
  a.summary.peak_memory_bytes = 12000000000;
  a.collectives = {{"all-reduce", 64, 64 * 96e6, 1.0}, {"all-gather", 32, 32 * 8e6, 0.2}};
  b.summary.step_time_s = 4.1;
  b.summary.mfu = 0.5;
  b.summary.peak_memory_bytes = 9000000000;
  b.extrapolated = true;
  b.collectives = {{"reduce-scatter", 64, 64 * 48e6, 0.3}, {"all-gather", 96, 96 * 8e6, 0.6}};
  const Comparison c = CompareSideBySide(a, b);
  QCOMPARE(c.a_label, std::string("2D Attempt 2 on X=8,Y=16"));
  QCOMPARE(c.b_label, std::string("2D finalized on X=8,Y=16"));
  std::map<std::string, std::pair<std::string, std::string>> line;
  std::vector<std::string> order;
  for (const ComparisonLine& l : c.lines) {
    line[l.what] = {l.a, l.b};
    order.push_back(l.what);
  }
  QCOMPARE(line["step time"], std::make_pair(std::string("5.00 s"), std::string("~4.10 s")));  // ~ extrapolated
  QCOMPARE(line["MFU"], std::make_pair(std::string("40.0%"), std::string("50.0%")));
  QCOMPARE(line["peak memory / HBM"], std::make_pair(std::string("12.0 GB / 16.0 GB"), std::string("9.00 GB / 16.0 GB")));
  // One line per collective kind of either, the longest first; "none" where a candidate has none.
  const std::vector<std::string> kinds(order.end() - 3, order.end());
  QCOMPARE(kinds, (std::vector<std::string>{"all-reduces", "all-gathers", "reduce-scatters"}));
  QCOMPARE(line["all-reduces"], std::make_pair(std::string("64 \u00d7 96.0 MB (1.00 s)"), std::string("none")));
  QCOMPARE(line["reduce-scatters"], std::make_pair(std::string("none"), std::string("64 \u00d7 48.0 MB (300 ms)")));
  QCOMPARE(line["all-gathers"].second, std::string("96 \u00d7 8.00 MB (600 ms)"));
  QVERIFY2(Contains(c.explanation, "B is 18.0% faster than A"), c.explanation.c_str());
  QVERIFY(Contains(c.explanation, "B replaces 64 all-reduces of 96.0 MB (1.00 s) by 64 reduce-scatters of 48.0 MB (300 ms)"));
  // A candidate that was not simulated: "-" and its outcome.
  CandidateResult pruned = b;
  pruned.outcome = Outcome::kPrunedMemory;
  pruned.message = "needs 20 GB";
  const Comparison p = CompareSideBySide(a, pruned);
  std::map<std::string, std::string> pb;
  for (const ComparisonLine& l : p.lines) pb[l.what] = l.b;
  QCOMPARE(pb["step time"], std::string("-"));
  QVERIFY2(Contains(pb["outcome"], "needs 20 GB"), pb["outcome"].c_str());
  QVERIFY(Contains(p.explanation, "must be simulated"));
  // The panel model's rows.
  const StrategyPanelModel m = StrategyPanelModel::FromResults({a, b}, {});
  QCOMPARE(m.SideBySide(0, 1).b_label, c.b_label);
  QVERIFY(m.SideBySide(0, 5).lines.empty());
  QVERIFY(Contains(m.SideBySide(0, 5).explanation, "choose two"));
}

void TestSearch::panelModel() {
  SearchOptions so;
  so.model = "transformer";
  so.settings = SmallTransformer(4);
  so.chip = "tpu-v4";
  so.devices = 8;
  so.families = {"in-layer", "data-parallel"};
  so.confirm = 0;
  auto r = RunSearch(so).value();
  const StrategyPanelModel m = StrategyPanelModel::FromResults(r.ranked, r.pareto);
  QCOMPARE(m.rows.size(), r.ranked.size());
  QCOMPARE(m.families, (std::vector<std::string>{"in-layer", "data-parallel"}));
  QCOMPARE(m.hbm_bytes, 32.0 * (1 << 30));
  size_t simulated = 0;
  for (const auto& row : m.rows) simulated += row.outcome == "fits" || row.outcome == "over HBM" ? 1 : 0;
  QCOMPARE(m.points.size(), simulated);
  for (const ScatterPoint& p : m.points) {
    QCOMPARE(p.step_time_s, m.rows[p.row].step_time_s);
    QCOMPARE(m.families[p.family], m.rows[p.row].family);
    QCOMPARE(p.pareto, m.rows[p.row].pareto);
  }
  QCOMPARE(m.pareto, r.pareto);
  QVERIFY(Contains(m.Compare(0, 1), "A ("));
  QVERIFY(Contains(m.Compare(0, 999), "choose two"));
  // The table and the CSV.
  const std::string table = RankedTable(r.ranked, r.pareto);
  QVERIFY(Contains(table, "1*"));
  QVERIFY(Contains(table, "dominant collectives"));
  const std::string csv = CsvText(r.ranked, r.pareto);
  QCOMPARE(static_cast<size_t>(std::count(csv.begin(), csv.end(), '\n')), r.ranked.size() + 1);
  QVERIFY(Contains(csv.substr(0, csv.find('\n')), "step_time_s,mfu,peak_memory_bytes"));
}

// The sweep recipe without a scheduler: plan, one CLI task per candidate into its own store, a
// task killed half way and re-run, merges repeated, and the report checking every task arrived.
void TestSearch::sweepThroughTheCli() {
  QTemporaryDir dir;
  const QString plan = dir.filePath("plan.jsonl"), all = dir.filePath("all.sqlite");
  const QStringList model = {"transformer", "--chip", "tpu-v4", "--devices", "8", "--family", "in-layer,data-parallel", "--set", "layers=4", "--set", "batch=16",
                             "--set", "seq=256", "--set", "model=1024", "--set", "heads=16", "--set", "head_dim=64", "--set",
                             "hidden=4096"};
  CliRun p = Cli(QStringList{"search", "plan"} + model + QStringList{"-o", plan});
  QVERIFY2(p.code == 0, (p.out + p.err).c_str());
  std::ifstream in(plan.toStdString());
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  QCOMPARE(lines.size(), size_t{13});  // 3 x 4 meshes + data parallel
  QVERIFY(Contains(p.out, "13 planned as tasks 1..13"));
  // The Slurm array script: one array task per plan line, each into its own store. Slurm itself
  // is not needed to check it: run with SLURM_ARRAY_TASK_ID set, it is that array task.
  const QString tasks = dir.filePath("tasks"), sbatch = dir.filePath("sweep.sbatch");
  const QString generator = QString(SHARDSCOPE_SOURCE_DIR) + "/scripts/sweep-slurm.sh";
  CliRun g = Run("bash", {generator, plan, tasks, "--cli", QString::fromStdString(CliPath()), "--max-running", "4", "--time",
                          "00:10:00"});
  QVERIFY2(g.code == 0, (g.out + g.err).c_str());
  QVERIFY2(Contains(g.out, "#SBATCH --array=1-13%4\n"), g.out.c_str());
  QVERIFY(Contains(g.out, "#SBATCH --time=00:10:00\n"));
  QVERIFY(Contains(g.out, "#SBATCH --output=" + tasks.toStdString() + "/logs/task-%a.out\n"));
  QVERIFY(Contains(g.out, "search task " + plan.toStdString() + " --index \"$SLURM_ARRAY_TASK_ID\""));
  {
    std::ofstream f(sbatch.toStdString());
    f << g.out;
  }
  // A re-run of chosen tasks, and the generator's errors.
  CliRun again = Run("bash", {generator, plan, tasks, "--array", "5,7-9"});
  QVERIFY(Contains(again.out, "#SBATCH --array=5,7-9\n"));
  QCOMPARE(Run("bash", {generator, plan, tasks, "--array", "5;rm"}).code, 1);
  QCOMPARE(Run("bash", {generator, dir.filePath("none.jsonl"), tasks}).code, 1);
  QCOMPARE(Run("bash", {generator, plan}).code, 2);
  QVERIFY(Run("bash", {sbatch}).code != 0);  // no SLURM_ARRAY_TASK_ID: refuses
  QStringList task_files;
  for (size_t k = 1; k <= lines.size(); ++k) {
    const QString db = tasks + QString("/task-%1.sqlite").arg(k);
    task_files << db;
    if (k == 5) continue;  // "lost": never ran
    CliRun t = Run("bash", {sbatch}, {"SLURM_ARRAY_TASK_ID=" + QString::number(k)});
    QVERIFY2(t.code == 0, (t.out + t.err).c_str());
    QVERIFY(Contains(t.out, "task " + std::to_string(k) + ": "));
  }
  // Merge what is there: one task missing, the report says which.
  CliRun m = Cli(QStringList{"runs", "merge", all} + task_files);
  QCOMPARE(m.code, 1);  // task-5.sqlite does not exist
  CliRun rep = Cli({"search", "report", all, "--plan", plan});
  QCOMPARE(rep.code, 1);
  QVERIFY2(Contains(rep.out, "12 of 13 tasks have a run; missing: 5"), rep.out.c_str());
  // Task 5 runs, but is killed half way (SIGKILL while it works); its file holds nothing.
  {
    QProcess killed;
    killed.start(QString::fromStdString(CliPath()), {"search", "task", plan, "--index", "5", "--db", task_files[4]});
    QVERIFY(killed.waitForStarted());
    QTest::qWait(150);
    // Only a task still running is killed: processId() is 0 once it has finished, and kill(0, ...)
    // would signal this test's whole process group (the test runner included).
    const qint64 pid = killed.processId();
    if (killed.state() != QProcess::NotRunning && pid > 0) ::kill(static_cast<pid_t>(pid), SIGKILL);
    killed.waitForFinished();
  }
  m = Cli(QStringList{"runs", "merge", all} + task_files);
  rep = Cli({"search", "report", all, "--plan", plan});
  QVERIFY2(Contains(rep.out, "12 of 13 tasks have a run") || Contains(rep.out, "13 of 13 tasks have a run"), rep.out.c_str());
  // Re-run task 5 and task 1 (whose run is already merged), merge everything again, twice.
  for (int k : {5, 1}) {
    CliRun t = Run("bash", {sbatch}, {"SLURM_ARRAY_TASK_ID=" + QString::number(k)});
    QVERIFY2(t.code == 0, (t.out + t.err).c_str());
  }
  for (int again = 0; again < 2; ++again) {
    m = Cli(QStringList{"runs", "merge", all} + task_files);
    QVERIFY2(m.code == 0, (m.out + m.err).c_str());
    // The first merge adds task 5's run unless the kill came after it had finished; the second
    // only replaces.
    const bool replaced_all = Contains(m.out, "13 runs read, 0 added, 13 replaced; 13 runs in");
    QVERIFY2(replaced_all || (again == 0 && Contains(m.out, "13 runs read, 1 added, 12 replaced; 13 runs in")), m.out.c_str());
  }
  rep = Cli({"search", "report", all, "--plan", plan, "--csv", dir.filePath("all.csv")});
  QVERIFY2(rep.code == 0, (rep.out + rep.err).c_str());
  QVERIFY(Contains(rep.out, "13 search runs"));
  QVERIFY(Contains(rep.out, "13 of 13 tasks have a run"));
  // Nothing duplicated: 13 distinct keys, the plan's.
  auto store = RunStore::Open(all.toStdString()).value();
  std::set<std::string> keys;
  const std::vector<RunOverview> runs = store.ListRuns().value();
  for (const RunOverview& o : runs) keys.insert(o.key);
  QCOMPARE(keys.size(), size_t{13});
  for (const std::string& line : lines) {
    auto c = Candidate::FromJson(line);
    QVERIFY2(c.ok(), c.ok() ? "" : c.error().message.c_str());
    QVERIFY2(keys.count(c->Key()), (c->Key() + " " + *keys.begin()).c_str());
  }
  // A stored candidate re-opens through the CLI.
  const int64_t first = runs.front().id;
  CliRun open = Cli({"runs", "open", all, QString::number(first), "-o", dir.filePath("reopened.hlo")});
  QVERIFY2(open.code == 0, (open.out + open.err).c_str());
  QVERIFY(std::filesystem::file_size(dir.filePath("reopened.hlo").toStdString()) > 1000);
  // Usage errors.
  QCOMPARE(Cli({"search", "task", plan, "--index", "99", "--db", dir.filePath("x.sqlite")}).code, 2);
  QCOMPARE(Cli({"search", "transformer", "--chip", "tpu-v4"}).code, 2);
  QCOMPARE(Cli({"runs", "merge", all}).code, 2);
}

// GSPMD Table 1 / §5.1 (validation.md G3): for the Table 2 model on Table 2's 128-device mesh
// (8, 16), "2D finalized" is faster than 2D Attempt 1 and 2D Attempt 2, and keeps the least memory
// (every long-lived tensor fully sharded); over every mesh of the pod the fastest in-layer
// candidate is a "2D finalized" one.
void TestSearch::table1FinalizedWins() {
  SearchOptions so;
  so.model = "transformer";
  so.settings = Table2Transformer(128);
  so.chip = "tpu-v3";
  so.devices = 128;
  so.families = {"in-layer"};
  so.jobs = 2;
  so.confirm = 0;
  auto r = RunSearch(so);
  QVERIFY2(r.ok(), r.ok() ? "" : r.error().message.c_str());
  const CandidateResult* fin = Find(r->ranked, "2D finalized", "X=8,Y=16");
  const CandidateResult* a1 = Find(r->ranked, "2D Attempt 1", "X=8,Y=16");
  const CandidateResult* a2 = Find(r->ranked, "2D Attempt 2", "X=8,Y=16");
  QVERIFY(fin && a1 && a2 && fin->simulated() && a1->simulated() && a2->simulated());
  QVERIFY2(fin->summary.step_time_s < a2->summary.step_time_s && a2->summary.step_time_s < a1->summary.step_time_s,
           (RankedTable(r->ranked, r->pareto)).c_str());
  QVERIFY(fin->summary.peak_memory_bytes < a2->summary.peak_memory_bytes);
  QVERIFY(fin->summary.peak_memory_bytes < a1->summary.peak_memory_bytes);
  // Over every mesh: the fastest simulated candidate is 2D finalized.
  const CandidateResult* fastest = nullptr;
  for (const CandidateResult& c : r->ranked)
    if (c.simulated() && (!fastest || c.summary.step_time_s < fastest->summary.step_time_s)) fastest = &c;
  QVERIFY(fastest);
  QCOMPARE(fastest->candidate.strategy, std::string("2D finalized"));
}

// Paper 000 §6.1 (validation.md W1): on 1024 TPU v3 chips (2048 cores, batch 2048, Adam),
// weight-update sharding takes the Transformer's step from 46.5 ms to 25.6 ms — it beats plain
// data parallelism — and the replicas no longer each hold the whole optimizer state. The search
// over the two families on that pod ranks the weight-update-sharding candidate first, faster and
// with less memory. The model is the paper case's (app/pipeline/weight_update_sharding_paper.h),
// evaluated at 2 and 3 layers and extrapolated to its 16.
void TestSearch::weightUpdateShardingBeatsDataParallel() {
  QVERIFY(FindFamily("weight-update-sharding"));
  const auto cases = pipeline::WeightUpdateShardingPaperCases();
  auto w1 = std::find_if(cases.begin(), cases.end(), [](const auto& c) { return c.id == "wus-6.1-transformer-1024"; });
  QVERIFY(w1 != cases.end());
  SearchOptions so;
  so.model = w1->model;
  so.settings = w1->settings;
  for (const char* k : {"annotations", "mesh_x", "mesh_y"}) so.settings.erase(k);  // the families set these
  so.chip = "tpu-v3";
  so.devices = 2048;
  so.families = {"data-parallel", "weight-update-sharding"};
  so.jobs = 2;
  so.confirm = 0;
  auto r = RunSearch(so);
  QVERIFY2(r.ok(), r.ok() ? "" : r.error().message.c_str());
  const std::string table = RankedTable(r->ranked, r->pareto);
  qInfo("%s", table.c_str());
  QCOMPARE(r->pod.SliceText(), std::string("32x32"));
  const CandidateResult* dp = Find(r->ranked, "data parallel", "X=2048");
  const CandidateResult* wus = Find(r->ranked, "data parallel, weight-update sharding", "X=2048");
  QVERIFY2(dp && wus && dp->simulated() && wus->simulated(), table.c_str());
  QVERIFY(wus->candidate.OptionOn("weight_update_sharding") && !dp->candidate.OptionOn("weight_update_sharding"));
  QVERIFY2(wus->extrapolated && Contains(wus->evaluation, "to 16"), wus->evaluation.c_str());
  // Ranked above plain data parallelism (earlier in `ranked`): a shorter step, a lower peak.
  QVERIFY2(wus < dp, table.c_str());
  QVERIFY2(wus->summary.step_time_s < dp->summary.step_time_s, table.c_str());
  QVERIFY2(wus->summary.peak_memory_bytes < dp->summary.peak_memory_bytes, table.c_str());
  // The gradient all-reduces became reduce-scatters and all-gathers.
  auto kind = [](const CandidateResult& c, const std::string& k) {
    for (const CollectiveTotal& t : c.collectives)
      if (t.kind == k) return t.count;
    return 0.0;
  };
  QVERIFY2(kind(*wus, "reduce-scatter") > 0 && kind(*wus, "all-gather") > 0, table.c_str());
  QCOMPARE(kind(*dp, "reduce-scatter"), 0.0);
  QVERIFY2(kind(*wus, "all-reduce") < kind(*dp, "all-reduce"), table.c_str());
}

// GSPMD Table 4 (§5.2): the 64-layer narrower Transformer of Table 3 (M=4096, H=16384, N=64,
// D=128, S=1024, batch 1024) pipelined on meshes (L, X, Y) of 256 TPU v3 cores: 4 stages x 4
// model shards is the fastest of its meshes. The paper trains with Adafactor, whose factored
// second moments are small: SGD (weights and gradients only) stands in for it; with Adam's two
// full moments, weights not split over X leave no Table 4 mesh within 16 GiB.
void TestSearch::table4FourStagesFourShards() {
  SearchOptions so;
  so.model = "transformer";
  so.settings = {{"layers", "64"}, {"batch", "1024"}, {"seq", "1024"}, {"model", "4096"}, {"heads", "64"},
                 {"head_dim", "128"}, {"hidden", "16384"}, {"dtype", "f32"}, {"act_dtype", "bf16"},
                 {"optimizer", "sgd"}};
  so.chip = "tpu-v3";
  so.devices = 256;
  so.families = {"pipelining"};
  so.meshes = {"L=2,X=16,Y=8", "L=4,X=16,Y=4", "L=8,X=16,Y=2", "L=8,X=8,Y=4"};
  so.jobs = 2;
  so.confirm = 0;
  auto r = RunSearch(so);
  QVERIFY2(r.ok(), r.ok() ? "" : r.error().message.c_str());
  const std::string table = RankedTable(r->ranked, r->pareto);
  qInfo("%s", table.c_str());
  // Table 4's own batches (16x64 and 32x32) are among the candidates.
  QVERIFY2(Find(r->ranked, "GPipe, 4 stages, 16x64, remat", "L=4,X=16,Y=4"), table.c_str());
  QVERIFY2(Find(r->ranked, "GPipe, 8 stages, 32x32, remat", "L=8,X=8,Y=4"), table.c_str());
  // Table 4's five configurations: (4, 16, 4) is the fastest (paper: 22.3 s and 22.2 s against
  // 23.4-24.0 s for the others).
  const std::pair<const char*, const char*> rows[] = {{"GPipe, 2 stages, 16x64, remat", "L=2,X=16,Y=8"},
                                                      {"GPipe, 4 stages, 16x64, remat", "L=4,X=16,Y=4"},
                                                      {"GPipe, 4 stages, 32x32, remat", "L=4,X=16,Y=4"},
                                                      {"GPipe, 8 stages, 32x32, remat", "L=8,X=16,Y=2"},
                                                      {"GPipe, 8 stages, 32x32, remat", "L=8,X=8,Y=4"}};
  const CandidateResult* fastest = nullptr;
  for (const auto& [strategy, mesh] : rows) {
    const CandidateResult* c = Find(r->ranked, strategy, mesh);
    QVERIFY2(c && c->simulated(), (std::string(strategy) + " on " + mesh + "\n" + table).c_str());
    if (!fastest || c->summary.step_time_s < fastest->summary.step_time_s) fastest = c;
  }
  QVERIFY2(fastest->candidate.mesh == "L=4,X=16,Y=4", table.c_str());
  // The search's winner over these meshes (every schedule and microbatch count it tries, among
  // those that fit) has 4 stages and 4 model shards too.
  QVERIFY2(!r->ranked.empty() && r->ranked.front().fits(), table.c_str());
  QVERIFY2(r->ranked.front().candidate.mesh == "L=4,X=16,Y=4", table.c_str());
  // The bubble the family states is the schedule's: GPipe, 4 stages, 16 microbatches: 3/19.
  const CandidateResult* t4 = Find(r->ranked, "GPipe, 4 stages, 16x64, remat", "L=4,X=16,Y=4");
  QVERIFY(std::fabs(t4->candidate.bubble_fraction - 3.0 / 19.0) < 1e-9);
}

// `search --paper CASE:COLUMN` and the GUI's Strategies panel after a paper configuration was
// opened: the column's model at its sizes on its pod, the strategy choices left to the search, so
// the published configuration is one of the candidates (GSPMD Table 4's (4,16,4) 32x32, the GPipe
// schedule with 32 microbatches of 32 on 256 TPU v3 cores).
void TestSearch::searchOfAPaperConfiguration() {
  auto t4 = SearchOfPaperColumn("gspmd-table4:(4,16,4) 32x32");
  QVERIFY2(t4.ok(), t4.ok() ? "" : t4.error().message.c_str());
  QCOMPARE(t4->model, std::string("pipelined-transformer"));
  QCOMPARE(t4->chip, std::string("tpu-v3"));
  QCOMPARE(t4->devices, int64_t{256});
  QCOMPARE(t4->cores_per_chip, int64_t{2});
  const ZooOverrides want = {{"act_dtype", "bf16"}, {"dtype", "f32"},          {"head_dim", "128"},  {"heads", "64"},
                             {"hidden", "16384"},   {"layers", "64"},          {"microbatch", "32"}, {"microbatches", "32"},
                             {"model", "4096"},     {"optimizer", "adafactor"}, {"remat", "1"},       {"seq", "1024"}};
  QCOMPARE(t4->settings, want);  // no annotations, mesh axes, stages or schedule: the search's choices
  auto plan = PlanSearch(*t4);
  QVERIFY2(plan.ok(), plan.ok() ? "" : plan.error().message.c_str());
  QCOMPARE(plan->pod.SliceText(), std::string("8x16"));
  bool published = false;
  for (const Candidate& c : plan->candidates)
    published = published || (c.mesh == "L=4,X=16,Y=4" && c.settings.at("schedule") == "gpipe" &&
                              c.settings.at("stages") == "4" && c.settings.at("microbatches") == "32" &&
                              c.settings.at("microbatch") == "32" && c.settings.at("annotations") == "finalized");
  QVERIFY2(published, "Table 4's (4,16,4) 32x32 among the planned candidates");
  // Table 2's 64B column on 2048 cores: its batch and vocabulary, 2048 devices on the 32x32 torus.
  auto t2 = SearchOfPaperColumn("gspmd-table2", "64B, 2048 devices");
  QVERIFY2(t2.ok(), t2.ok() ? "" : t2.error().message.c_str());
  QCOMPARE(t2->model, std::string("transformer"));
  QCOMPARE(t2->devices, int64_t{2048});
  QCOMPARE(t2->settings.at("batch"), std::string("1024"));
  QCOMPARE(t2->settings.at("vocab"), std::string("32000"));
  QVERIFY(!t2->settings.count("annotations") && !t2->settings.count("mesh_x") && !t2->settings.count("mesh_y"));
  QCOMPARE(MakePod(t2->chip, t2->devices, t2->slice, t2->cores_per_chip)->SliceText(), std::string("32x32"));
  // What cannot be searched says why.
  auto no_colon = SearchOfPaperColumn("gspmd-table4");
  QVERIFY(!no_colon.ok() && Contains(no_colon.error().message, "expected CASE:COLUMN"));
  auto no_column = SearchOfPaperColumn("gspmd-table4:(3,16,4) 32x32");
  QVERIFY(!no_column.ok());
  QVERIFY2(Contains(no_column.error().message, "no column '(3,16,4) 32x32'") &&
               Contains(no_column.error().message, "\"(8,8,4) 32x32\""),
           no_column.error().message.c_str());
  QVERIFY(!SearchOfPaperColumn("gspmd-table99:x").ok());
  auto wus = SearchOfPaperColumn("wus-6.1:transformer 1024 chips");
  QVERIFY(!wus.ok() && Contains(wus.error().message, "not a zoo configuration"));
  // The CLI: a plan of the column's search, its model named or not; a different model is an error.
  QTemporaryDir dir;
  const QString out = dir.filePath("plan.jsonl");
  CliRun p = Cli({"search", "plan", "--paper", "gspmd-table4:(4,16,4) 32x32", "--family", "pipelining", "--mesh",
                  "L=4,X=16,Y=4", "-o", out});
  QVERIFY2(p.code == 0, (p.out + p.err).c_str());
  QVERIFY2(Contains(p.out, "pod: tpu-v3: 256 devices (128 chips x 2 cores), slice 8x16"), p.out.c_str());
  std::ifstream in(out.toStdString());
  std::string lines((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  QVERIFY2(Contains(lines, "\"model.microbatches\":\"32\"") && Contains(lines, "\"search.mesh\":\"L=4,X=16,Y=4\""), lines.c_str());
  CliRun named = Cli({"search", "plan", "pipelined-transformer", "--paper", "gspmd-table4:(4,16,4) 32x32", "--family",
                      "pipelining", "--mesh", "L=4,X=16,Y=4", "-o", dir.filePath("named.jsonl")});
  QVERIFY2(named.code == 0, (named.out + named.err).c_str());
  CliRun other = Cli({"search", "transformer", "--paper", "gspmd-table4:(4,16,4) 32x32"});
  QCOMPARE(other.code, 2);
  QVERIFY2(Contains(other.err, "is a pipelined-transformer, not transformer"), other.err.c_str());
  CliRun bare = Cli({"search", "--paper"});
  QCOMPARE(bare.code, 2);
  QVERIFY2(Contains(bare.err, "--paper takes CASE:COLUMN"), bare.err.c_str());
  CliRun bad = Cli({"search", "--paper", "gspmd-table4:(3,16,4) 32x32"});
  QCOMPARE(bad.code, 2);
  QVERIFY2(Contains(bad.err, "no column"), bad.err.c_str());
}

QTEST_GUILESS_MAIN(TestSearch)
#include "test_search.moc"
