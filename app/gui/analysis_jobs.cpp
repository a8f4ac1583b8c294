#include "app/gui/analysis_jobs.h"

#include <chrono>
#include <cstdio>
#include <unordered_map>

#include <QDateTime>
#include <QTimer>

#include "app/gui/run_store_jobs.h"
#include "app/pipeline/pipeline.h"
#include "app/pipeline/simulated_sizes.h"
#include "app/pipeline/small_twin.h"
#include "app/pipeline/step_figures.h"
#include "app/pipeline/weight_update_sharding_paper.h"
#include "core/ir/hlo_text.h"
#include "simulator/hardware.h"
#include "simulator/schedule.h"
#include "views/document_model.h"
#include "views/run_history.h"

namespace shardscope::gui {

using namespace ::shardscope::sim;

namespace {

using Lane = views::JobTracker::Lane;

QString Q(const std::string& s) { return QString::fromStdString(s); }

const QString kPropagationKey = "propagation";
const QString kPartitionKey = "partition";
const QString kSimulationKey = "simulation";
const QString kSimulationSaveKey = "simulation-save";

double MillisSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// The module with the user's annotations and the propagated shardings on its instructions.
std::unique_ptr<Module> Annotated(const Module& module, const std::map<int64_t, HloSharding>& annotations,
                                  const std::unordered_map<int64_t, HloSharding>* propagated) {
  // Propagation's result where there is one: it may refine a partially replicated annotation (as
  // XLA's does, e.g. an entry parameter's with propagation to parameters on), and the CLI and the
  // strategy search partition that result; the annotation where propagation has not run.
  auto clone = module.Clone();
  for (const auto& comp : clone->computations()) {
    for (const auto& inst : comp->instructions()) {
      if (propagated) {
        if (auto p = propagated->find(inst->id()); p != propagated->end()) {
          inst->set_sharding(p->second);
          continue;
        }
      }
      if (auto a = annotations.find(inst->id()); a != annotations.end()) inst->set_sharding(a->second);
    }
  }
  return clone;
}

// The slice the document's mesh is simulated on: the generation's, or the user's override (the
// same pipeline::SliceOptions the CLI's --topology/--placement/--wraparound fill).
Result<Topology> SliceFor(const std::string& chip, const DeviceMesh& mesh, const ProjectSliceOverride& slice) {
  auto options = pipeline::SliceOptionsFromProject(slice);
  if (!options.ok()) return options.error();
  return pipeline::SliceForMesh(chip, mesh, *options);
}

// The pass's options for `mesh` on `topology` (its chip's figures, a 2-D mesh as the replica
// mesh), as `simulate --weight-update-sharding` takes them; the defaults without a topology.
WeightUpdateShardingOptions WeightUpdateOptions(const Result<Topology>& topology, const DeviceMesh& mesh) {
  return topology.ok() ? pipeline::WeightUpdateShardingOptionsFor(*topology, mesh) : WeightUpdateShardingOptions{};
}

views::StepFigures Figures(const Module& program, const RunResult& run) {
  views::StepFigures f;
  f.step_time_s = run.summary.step_time_s;
  f.weight_update_s = pipeline::WeightUpdateSeconds(program, run);
  f.peak_memory_bytes = run.summary.peak_memory_bytes;
  f.peak_by_category = pipeline::PeakMemoryByCategory(run);
  return f;
}

struct PropagationOutcome {
  bool ok = false;
  pipeline::PropagatedShardings shardings;
  QString summary;  // or the error
};

QString Summary(const pipeline::PropagatedShardings& s) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "%s propagation: %lld annotated, %lld inferred, %lld unsharded (%.1f ms)",
                s.report.incremental ? "incremental" : "full", static_cast<long long>(s.annotated),
                static_cast<long long>(s.inferred), static_cast<long long>(s.unsharded), s.millis);
  QString out = buf;
  if (!s.report.unsupported_ops.empty()) {
    out += "; no rule for:";
    for (const auto& op : s.report.unsupported_ops) out += " " + Q(op);
  }
  return out;
}

}  // namespace

// The incremental propagation session, kept on the engine's lane between edits.
struct AnalysisJobs::Worker {
  std::unique_ptr<pipeline::PropagationSession> session;
  quint64 generation = 0;  // the session generation it was made for
};

AnalysisJobs::AnalysisJobs(views::DocumentModel* doc, views::AnalysisModel* analysis, views::RunHistory* runs,
                           RunStoreJobs* store, views::JobTracker* jobs, QObject* parent)
    : QObject(parent),
      doc_(doc),
      analysis_(analysis),
      runs_(runs),
      store_(store),
      jobs_(jobs),
      worker_(std::make_shared<Worker>()) {
  analysis_->setChips(ChipPresetNames(), pipeline::DefaultChip());
  connect(doc_, &views::DocumentModel::moduleReset, this, &AnalysisJobs::onModuleReset);
  connect(doc_, &views::DocumentModel::meshChanged, this, [this] {
    ++session_generation_;  // a new mesh re-expresses every annotation: propagate from scratch
  });
  connect(doc_, &views::DocumentModel::annotationsChanged, this, &AnalysisJobs::schedulePropagation);
  connect(analysis_, &views::AnalysisModel::partitionRequested, this, &AnalysisJobs::requestPartition);
  connect(analysis_, &views::AnalysisModel::partitionCancelRequested, this, &AnalysisJobs::cancelPartition);
  connect(analysis_, &views::AnalysisModel::simulationRequested, this, &AnalysisJobs::requestSimulation);
  connect(analysis_, &views::AnalysisModel::simulationCancelRequested, this, &AnalysisJobs::cancelSimulation);
}

AnalysisJobs::~AnalysisJobs() = default;

bool AnalysisJobs::propagationBusy() const { return propagation_scheduled_ || jobs_->hasKey(kPropagationKey); }

void AnalysisJobs::onModuleReset() {
  ++session_generation_;
  // What runs for the old module is of no use any more.
  jobs_->cancelKey(kPartitionKey);
  jobs_->cancelKey(kSimulationKey);
  jobs_->cancelKey(kSimulationSaveKey);
  last_partition_.reset();
  pending_simulation_.reset();
  pending_partition_ = false;
  partitionings_ = 0;
  analysis_->reset();
  // annotationsChanged follows and schedules the propagation.
}

// ---- Propagation -----------------------------------------------------------------------------------

void AnalysisJobs::schedulePropagation() {
  if (!doc_->module() || !doc_->propagationEnabled()) return;
  // Coalesce bursts of edits (undo of a macro, a mesh change) into one job.
  if (propagation_scheduled_) return;
  propagation_scheduled_ = true;
  emit propagationBusyChanged(true);
  QTimer::singleShot(0, this, [this] {
    propagation_scheduled_ = false;
    startPropagation();
    if (!propagationBusy()) {
      startPendingSimulation();
      emit propagationBusyChanged(false);
    }
  });
}

void AnalysisJobs::startPropagation() {
  if (!doc_->module()) return;
  const quint64 module_gen = doc_->moduleGeneration();
  const quint64 edit = doc_->editGeneration();
  const quint64 session_gen = session_generation_;
  std::shared_ptr<const Module> module = doc_->sharedModule();
  auto annotations = doc_->annotations();
  auto worker = worker_;
  // A newer edit supersedes it (the key): the session catches up in one run.
  const views::JobTracker::Spec spec{
      .label = "propagating", .lane = Lane::kEngine, .key = kPropagationKey, .context = this};
  propagation_job_ = jobs_->run<PropagationOutcome>(
      spec,
      [worker, module, annotations = std::move(annotations), session_gen](const CancellationToken& token) {
        PropagationOutcome out;
        if (!worker->session || worker->generation != session_gen) {
          worker->session = std::make_unique<pipeline::PropagationSession>(module->Clone());
          worker->generation = session_gen;
        }
        auto report = worker->session->Run(annotations, token);
        if (!report.ok()) {
          out.summary = "sharding propagation failed: " + Q(report.error().message);
          return out;
        }
        if (token.cancelled()) return out;  // superseded: its result is dropped anyway
        out.ok = true;
        out.shardings = worker->session->Snapshot(*module);
        out.summary = Summary(out.shardings);
        return out;
      },
      [this, module_gen, edit](PropagationOutcome out) {
        if (out.ok) {
          doc_->setPropagation(module_gen, edit, std::move(out.shardings.shardings), std::move(out.shardings.why),
                               out.summary);
        } else {
          doc_->setPropagationFailed(module_gen, edit, out.summary);
        }
        if (!propagationBusy()) {
          startPendingSimulation();
          emit propagationBusyChanged(false);
        }
      });
}

// ---- Partitioning ----------------------------------------------------------------------------------

std::shared_ptr<const PartitionResult> AnalysisJobs::currentPartition() const {
  if (last_partition_ && last_partition_module_ == doc_->moduleGeneration() &&
      last_partition_edit_ == doc_->editGeneration() && last_partition_result_ == doc_->resultGeneration() &&
      last_partition_wus_ == doc_->weightUpdateSharding()) {
    return last_partition_;
  }
  return nullptr;
}

void AnalysisJobs::requestPartition() {
  if (!doc_->module()) return;
  if (propagationBusy()) {
    // Partitioned once the shardings are inferred (not with the annotations alone).
    pending_partition_ = true;
    jobs_->cancelKey(kPartitionKey);
    analysis_->setPartitionBusy(true);
    return;
  }
  pending_partition_ = false;
  std::shared_ptr<const Module> module = doc_->sharedModule();
  auto annotations = doc_->annotations();
  auto propagated = doc_->propagatedShardings();
  const DeviceMesh mesh = doc_->mesh();
  const std::string chip = analysis_->defaultChip();
  const bool wus = doc_->weightUpdateSharding();
  const ProjectSliceOverride slice = doc_->sliceOverride();
  // A zoo model too large to evaluate is verified on its small twin (app/pipeline/small_twin.h).
  const std::string zoo_model = doc_->zooSettings() ? doc_->source().toStdString() : std::string();
  const views::DocumentModel::ZooSettings zoo_settings = doc_->zooSettings().value_or(views::DocumentModel::ZooSettings{});
  const quint64 module_gen = doc_->moduleGeneration(), edit = doc_->editGeneration(), result = doc_->resultGeneration();
  analysis_->setPartitionBusy(true);
  const views::JobTracker::Spec spec{
      .label = "partitioning and verifying", .lane = Lane::kAnalysis, .key = kPartitionKey, .cancellable = true,
      .context = this};
  jobs_->run<views::PartitionedProgram>(
      spec,
      [module, annotations = std::move(annotations), propagated, mesh, chip, slice, edit, wus, zoo_model,
       zoo_settings](const CancellationToken& token) {
        const auto t0 = std::chrono::steady_clock::now();
        views::PartitionedProgram out;
        out.edit_generation = edit;
        out.devices = mesh.num_devices();
        auto annotated = Annotated(*module, annotations, propagated.get());
        annotated->num_partitions = mesh.num_devices();
        pipeline::PipelineOptions o;
        o.propagation.reset();  // the shardings are complete already
        o.spmd.num_partitions = mesh.num_devices();
        o.verify = pipeline::VerifyOptions{};
        auto topology = SliceFor(chip, mesh, slice);
        if (wus) o.weight_update_sharding = WeightUpdateOptions(topology, mesh);
        if (topology.ok()) {
          o.topology = std::move(topology).value();
          o.estimate_collectives = true;
          out.chip = chip;
        }
        std::optional<double> partition_ms;
        auto r = pipeline::RunPipeline(std::move(annotated), o, token);
        if (auto it = r.millis.find(pipeline::Stage::kPartition); it != r.millis.end()) partition_ms = it->second;
        if (!r.partition || r.failed == pipeline::Stage::kWeightUpdateSharding) {
          out.message = r.FailureText();
          return out;
        }
        if (r.weight_update_sharding) {
          out.weight_update_sharding = true;
          out.weight_update_summary = r.weight_update_sharding->summary;
          out.weight_update_decisions = r.weight_update_sharding->decisions;
        }
        out.millis = partition_ms.value_or(MillisSince(t0));
        out.verification = r.verification;
        // Too large for the evaluator: the small twin (not with weight-update sharding: the pass's
        // program is not the twin's) — the zoo model at smaller settings, or any other module with
        // its dimensions shrunk.
        const bool skipped = r.verification.state == VerificationVerdict::State::kSkipped;
        const bool too_large = skipped && r.verification.reason.rfind("too large", 0) == 0;
        // A zoo twin is also shallower, so it may decide what the module's depth left ill-conditioned.
        const bool ill = skipped && r.verification.reason.rfind("ill-conditioned", 0) == 0;
        if ((too_large || (ill && !zoo_model.empty())) && !wus) {
          auto full = Annotated(*module, annotations, propagated.get());
          full->num_partitions = mesh.num_devices();
          auto twin = !zoo_model.empty() ? pipeline::VerifySmallTwin(zoo_model, zoo_settings, *full, mesh.num_devices(),
                                                                     pipeline::TwinVerifyLimits(), token)
                                         : pipeline::VerifyShrunkTwin(*full, mesh.num_devices(),
                                                                      pipeline::TwinVerifyLimits(), token);
          if (twin.ok() && twin->verdict.state != VerificationVerdict::State::kSkipped) {
            out.verification_full_skipped = r.verification.reason;
            out.verification_twin = twin->changes.empty() ? std::string("the same sizes") : twin->changes;
            out.verification = twin->verdict;
          } else if (!twin.ok()) {
            out.verification.reason += "; no small twin: " + twin.error().message;
          }
        }
        out.estimates = std::move(r.estimates);
        out.result = std::make_shared<const PartitionResult>(std::move(*r.partition));
        out.message = "partitioned into " + std::to_string(out.devices) + " devices with " +
                      std::to_string(out.result->collectives.size()) + " collectives";
        return out;
      },
      [this, module_gen, edit, result, wus](views::PartitionedProgram out) {
        if (out.result) {
          ++partitionings_;
          last_partition_ = out.result;
          last_partition_module_ = module_gen;
          last_partition_edit_ = edit;
          last_partition_result_ = result;
          last_partition_wus_ = wus;
        }
        analysis_->setPartition(std::move(out));
      },
      [this] { analysis_->setPartitionCancelled(); });
}

void AnalysisJobs::cancelPartition() {
  if (pending_partition_) {
    pending_partition_ = false;
    analysis_->setPartitionCancelled();
    return;
  }
  if (!jobs_->cancelKey(kPartitionKey) && analysis_->partitionBusy()) analysis_->setPartitionCancelled();
}

// ---- Simulation -----------------------------------------------------------------------------------

namespace {

struct SimulationOutcome {
  views::SimulatedStep step;
  std::shared_ptr<RunResult> run;                 // to be stored
  std::shared_ptr<const PartitionResult> partition;  // partitioned here
  bool weight_update_sharding = false;               // ... with the pass
};

}  // namespace

void AnalysisJobs::startPendingSimulation() {
  if (pending_partition_) requestPartition();
  if (!pending_simulation_) return;
  const QString chip = *pending_simulation_;
  pending_simulation_.reset();
  requestSimulation(chip, views::AnalysisModel::SimulationInput::kShardings);
}

void AnalysisJobs::requestSimulation(const QString& chip_name, views::AnalysisModel::SimulationInput input) {
  if (!doc_->module()) return;
  if (input == views::AnalysisModel::SimulationInput::kShardings && propagationBusy()) {
    // The shardings are still being inferred (a module just opened, an edit): simulated once they
    // are, not with the annotations alone.
    pending_simulation_ = chip_name;
    jobs_->cancelKey(kSimulationKey);
    analysis_->setSimulationBusy(true);
    return;
  }
  pending_simulation_.reset();
  store_->open();
  const std::string chip = chip_name.isEmpty() ? analysis_->defaultChip() : chip_name.toStdString();
  const bool replicated = input == views::AnalysisModel::SimulationInput::kReplicated;
  // Weight-update sharding simulates the step before the pass too: the program is partitioned here
  // (a partition made earlier is kept without the program before the pass).
  const bool wus = !replicated && doc_->weightUpdateSharding();
  std::shared_ptr<const Module> module = doc_->sharedModule();
  auto annotations = doc_->annotations();
  auto propagated = doc_->propagatedShardings();
  const DeviceMesh mesh = doc_->mesh();
  const ProjectSliceOverride slice = doc_->sliceOverride();
  // Other sizes than the document's: the model rebuilt or scaled in the job (the document, and
  // its partitioned program and numerical check, stay as they are).
  const ProjectSimulatedSizes sizes = doc_->simulatedSizes();
  const std::string zoo_model = doc_->zooSettings() ? doc_->source().toStdString() : std::string();
  const std::optional<views::DocumentModel::ZooSettings> built_with = doc_->zooSettings();
  // The partitioned program of these very shardings, when there is one: simulated as it is.
  std::shared_ptr<const PartitionResult> partitioned = replicated || wus || !sizes.empty() ? nullptr : currentPartition();
  QString what = replicated ? QString("replicated (no shardings)") : QString("%1 annotations").arg(annotations.size());
  if (wus) what += ", weight-update sharding";
  if (!sizes.empty()) what += ", at " + Q(sizes.Describe());
  const std::string label = QString("%1 on %2, mesh %3, %4")
                                .arg(Q(module->name()), Q(chip), Q(mesh.ToString()), what)
                                .toStdString();
  const quint64 module_gen = doc_->moduleGeneration(), edit = doc_->editGeneration(), result = doc_->resultGeneration();
  jobs_->cancelKey(kSimulationSaveKey);
  analysis_->setSimulationBusy(true);
  const views::JobTracker::Spec spec{
      .label = "simulating", .lane = Lane::kAnalysis, .key = kSimulationKey, .cancellable = true, .context = this};
  jobs_->run<SimulationOutcome>(
      spec,
      [module, annotations = std::move(annotations), propagated, mesh, chip, slice, label, replicated, wus,
       partitioned, sizes, zoo_model, built_with](const CancellationToken& token) {
        const auto t0 = std::chrono::steady_clock::now();
        SimulationOutcome out;
        auto topology = SliceFor(chip, mesh, slice);
        if (!topology.ok()) {
          out.step.message = topology.error().message;
          out.step.slice_failed = true;
          return out;
        }
        SimulationOptions so;
        so.mesh_text = mesh.ToString();
        so.label = label;
        so.model_flops = CountModuleFlops(*module);  // the FLOPs do not depend on the shardings
        Result<Simulation> sim = Error("");
        std::string o_sizes;  // the simulated sizes, as the run keeps them
        if (partitioned) {
          sim = pipeline::SimulateStep(*partitioned->module, *topology, so, pipeline::SpmdOrigins(*partitioned), token);
          if (!sim.ok()) sim = Error("simulation failed: " + sim.error().message);
          out.step.collectives = static_cast<int64_t>(partitioned->collectives.size());
        } else {
          // The module replicated (no shardings: every device holds and computes everything), or
          // its shardings partitioned here.
          auto input = replicated ? module->Clone() : Annotated(*module, annotations, propagated.get());
          if (!sizes.empty()) {
            auto sized = pipeline::ModuleAtSimulatedSizes(*input, zoo_model, built_with, sizes, token);
            if (!sized.ok()) {
              out.step.message = "at the simulated sizes: " + sized.error().message;
              out.step.sizes_failed = true;
              return out;
            }
            input = std::move(sized->module);
            out.step.sizes = sized->description;
            so.model_flops = CountModuleFlops(*input);
            o_sizes = sized->description;
          }
          input->num_partitions = topology->num_devices();
          pipeline::PipelineOptions o;
          o.propagation.reset();
          o.topology = *topology;
          o.simulation = so;
          if (wus) o.weight_update_sharding = WeightUpdateOptions(topology, mesh);
          auto r = pipeline::RunPipeline(std::move(input), o, token);
          if (!r.ok()) {
            sim = Error(r.FailureText());
          } else {
            if (r.weight_update_sharding && r.simulation_before && r.weight_update_sharding->input) {
              views::WeightUpdateComparison c;
              c.before = Figures(*r.weight_update_sharding->input, r.simulation_before->run);
              c.after = Figures(*r.program(), r.simulation->run);
              c.all_reduces = static_cast<int64_t>(r.weight_update_sharding->decisions.size());
              c.sharded = static_cast<int64_t>(r.weight_update_sharding->replaced_all_reduces.size());
              c.summary = r.weight_update_sharding->summary;
              out.step.weight_update = std::move(c);
              r.simulation->run.inputs.settings.emplace_back("option.weight_update_sharding", "1");
            }
            if (!o_sizes.empty()) r.simulation->run.inputs.settings.emplace_back("option.simulated_sizes", o_sizes);
            sim = std::move(*r.simulation);
            out.step.collectives = static_cast<int64_t>(r.partition->collectives.size());
            // The program at other sizes is not the document's: its partitioned view stays.
            if (!replicated && sizes.empty()) out.partition = std::make_shared<const PartitionResult>(std::move(*r.partition));
            out.weight_update_sharding = r.weight_update_sharding.has_value();
          }
        }
        if (!sim.ok()) {
          out.step.message = sim.error().message;
          return out;
        }
        out.step.warnings = sim->warnings;
        out.step.millis = MillisSince(t0);
        out.step.message = "simulated one step on " + std::to_string(topology->num_devices()) + " " + chip + " devices";
        if (!out.step.sizes.empty()) out.step.message += " at the simulated sizes (" + out.step.sizes + ")";
        out.run = std::make_shared<RunResult>(std::move(sim->run));
        out.run->created_unix_ms = QDateTime::currentMSecsSinceEpoch();
        return out;
      },
      [this, module_gen, edit, result](SimulationOutcome out) {
        if (out.partition) {
          ++partitionings_;
          last_partition_ = out.partition;
          last_partition_module_ = module_gen;
          last_partition_edit_ = edit;
          last_partition_result_ = result;
          last_partition_wus_ = out.weight_update_sharding;
        }
        if (!out.run) {
          analysis_->setSimulation(std::move(out.step));
          return;
        }
        // Saved on the store's lane; the run is adopted once it has its id (cancelling the
        // simulation now cancels the save: nothing is stored).
        auto run = out.run;
        auto step = std::make_shared<views::SimulatedStep>(std::move(out.step));
        store_->save(
            run, kSimulationSaveKey, "saving the run",
            [this, run, step](Result<int64_t> id) {
              if (id.ok()) run->id = *id;
              runs_->addRun(run, id.ok() ? QString() : Q(id.error().message));
              step->run = run;
              analysis_->setSimulation(std::move(*step));
            },
            [this] { analysis_->setSimulationCancelled(); });
      },
      [this] { analysis_->setSimulationCancelled(); });
}

void AnalysisJobs::cancelSimulation() {
  if (pending_simulation_) {
    pending_simulation_.reset();
    analysis_->setSimulationCancelled();
    return;
  }
  // Both jobs are cancelled (no short circuit).
  const bool cancelled_simulation = jobs_->cancelKey(kSimulationKey);
  const bool cancelled_save = jobs_->cancelKey(kSimulationSaveKey);
  const bool any = cancelled_simulation || cancelled_save;
  if (!any && analysis_->simulationBusy()) analysis_->setSimulationCancelled();
}

}  // namespace shardscope::gui
