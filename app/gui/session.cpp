#include "app/gui/session.h"

#include <memory>

#include <QFile>
#include <QTimer>

#include "app/gui/analysis_jobs.h"
#include "app/gui/project_file.h"
#include "app/gui/release_memory.h"
#include "app/gui/run_store_jobs.h"
#include "app/pipeline/reproduce.h"
#include "app/pipeline/sources.h"
#include "views/analysis_model.h"
#include "views/document_model.h"
#include "views/job_tracker.h"
#include "views/run_history.h"

namespace shardscope::gui {

using namespace ::shardscope::sim;

namespace {

using Lane = views::JobTracker::Lane;

QString Q(const std::string& s) { return QString::fromStdString(s); }

const QString kLoadKey = "load";

}  // namespace

Session::Session(QObject* parent)
    : QObject(parent),
      jobs_(new views::JobTracker(this)),
      doc_(new views::DocumentModel(this)),
      analysis_(new views::AnalysisModel(this)),
      runs_(new views::RunHistory(this)),
      store_(new RunStoreJobs(runs_, jobs_, this)),
      analysis_jobs_(new AnalysisJobs(doc_, analysis_, runs_, store_, jobs_, this)) {
  connect(jobs_, &views::JobTracker::idleChanged, this, [this] { emit idleChanged(idle()); });
  connect(analysis_jobs_, &AnalysisJobs::propagationBusyChanged, this, [this] { emit idleChanged(idle()); });
  connect(doc_, &views::DocumentModel::moduleReset, this, [this] {
    // The run history stays (it is the store's); only the document's link to a project store goes.
    store_->setProject(QString(), false);
    // The old module is gone once the views have let it go: its pages go back to the system.
    QTimer::singleShot(0, this, &ReleaseFreedMemory);
  });
  connect(doc_, &views::DocumentModel::shardingsUpdated, this, [this] {
    // The first propagation of a module has replaced the old module's propagation session.
    if (released_after_propagation_ == doc_->moduleGeneration()) return;
    released_after_propagation_ = doc_->moduleGeneration();
    QTimer::singleShot(0, this, &ReleaseFreedMemory);
  });
}

Session::~Session() {
  // Workers first: no job may outlive the models its results go to.
  delete jobs_;
  jobs_ = nullptr;
}

bool Session::idle() const {
  return jobs_->idle() && !analysis_jobs_->propagationBusy() && !store_->refreshScheduled();
}

// ---- Loading -----------------------------------------------------------------------------------------

Status Session::loadExample(const QString& name) {
  auto built = pipeline::BuildZooModel(name.toStdString());
  if (!built.ok()) return built.error();
  doc_->setModule(std::move(built->module), built->mesh, "example", name);
  doc_->setZooSettings({});  // the defaults
  return Status::Ok();
}

Status Session::loadPaperConfiguration(const QString& case_name, const QString& column, QString* chip) {
  auto found = pipeline::FindReproduceCase(case_name.toStdString());
  if (!found.ok()) return found.error();
  const pipeline::ReproduceColumn* col = nullptr;
  for (const pipeline::ReproduceColumn& c : (*found)->columns)
    if (c.label == column.toStdString()) col = &c;
  if (!col) return Error(case_name.toStdString() + ": no column '" + column.toStdString() + "'");
  if (!col->weight_update_sharding_case.empty() || !col->book_collective_case.empty())
    return Error(case_name.toStdString() + " / " + col->label + " is not a zoo configuration");
  auto built = pipeline::BuildZooModel(col->model, col->settings);
  if (!built.ok()) return built.error();
  doc_->setModule(std::move(built->module), built->mesh, "example", Q(col->model));
  doc_->setZooSettings(col->settings);
  ProjectSliceOverride slice;
  slice.cores_per_chip = col->cores_per_chip;
  slice.shape = col->slice;
  doc_->applySliceOverride(slice);  // part of opening it, no undo step
  if (chip) *chip = Q(col->chip);
  return Status::Ok();
}

Status Session::loadHloText(const QString& text, const QString& filename) {
  auto parsed = pipeline::ParseModel(text.toStdString(), filename.toStdString());
  if (!parsed.ok()) return parsed.error();
  doc_->setModule(std::move(parsed->module), parsed->mesh, "hlo", filename);
  return Status::Ok();
}

Status Session::loadHloFile(const QString& path) {
  QFile f(path);
  if (!f.open(QIODevice::ReadOnly)) {
    return Error(QString("%1: cannot open: %2").arg(path, f.errorString()).toStdString());
  }
  auto parsed = pipeline::ParseModel(QString::fromUtf8(f.readAll()).toStdString(), path.toStdString());
  if (!parsed.ok()) return parsed.error();
  doc_->setModule(std::move(parsed->module), parsed->mesh, "hlo", path, path);
  return Status::Ok();
}

void Session::adopt(Project p, const QString& path) {
  const ProjectContents& c = p.contents;
  doc_->setModule(std::move(p.module), c.mesh, Q(c.source_kind), Q(c.source), path);
  if (c.zoo_settings) doc_->setZooSettings(*c.zoo_settings);
  doc_->applyWeightUpdateSharding(c.weight_update_sharding);  // as saved, no undo step
  doc_->applySliceOverride(c.slice);
  doc_->applySimulatedSizes(c.simulated_sizes);
  if (!c.selected.empty()) {
    if (const Instruction* sel = doc_->findInstruction(Q(c.selected))) doc_->select(sel->id());
  }
  if (!path.isEmpty()) store_->setProject(path, /*carry_session_runs=*/false);
}

void Session::close() {
  cancelLoad();
  doc_->clear();
}

Status Session::loadProject(const QString& path) {
  auto parsed = ReadProject(path);
  if (!parsed.ok()) return parsed.error();
  adopt(std::move(parsed).value(), path);
  return Status::Ok();
}

Status Session::loadProjectJson(const QByteArray& json, const QString& where) {
  auto parsed = ParseProject(json, where);
  if (!parsed.ok()) return parsed.error();
  adopt(std::move(parsed).value(), QString());
  return Status::Ok();
}

namespace {

// A file read and parsed on the files' lane. Copyable holders: the job's result is moved once.
struct Loaded {
  std::shared_ptr<pipeline::LoadedModel> model;  // an HLO file
  std::shared_ptr<Project> project;              // a project file
  QString error;
};

}  // namespace

void Session::requestLoadFile(const QString& path) {
  const bool project = IsProjectFile(path);
  const views::JobTracker::Spec spec{
      .label = "loading", .lane = Lane::kFiles, .key = kLoadKey, .cancellable = true, .context = this};
  jobs_->run<Loaded>(
      spec,
      [path, project](const CancellationToken& token) {
        Loaded r;
        QFile f(path);
        if (!f.open(QIODevice::ReadOnly)) {
          r.error = QString("%1: cannot open: %2").arg(path, f.errorString());
          return r;
        }
        const QByteArray bytes = f.readAll();
        if (token.cancelled()) return r;
        if (project) {
          auto parsed = ParseProject(bytes, path);
          if (!parsed.ok()) r.error = Q(parsed.error().message);
          else r.project = std::make_shared<Project>(std::move(parsed).value());
          return r;
        }
        auto parsed = pipeline::ParseModel(QString::fromUtf8(bytes).toStdString(), path.toStdString());
        if (!parsed.ok()) r.error = Q(parsed.error().message);
        else r.model = std::make_shared<pipeline::LoadedModel>(std::move(parsed).value());
        return r;
      },
      [this, path](Loaded r) {
        if (r.project) {
          adopt(std::move(*r.project), path);
        } else if (r.model) {
          doc_->setModule(std::move(r.model->module), r.model->mesh, "hlo", path, path);
        } else {
          emit loadFinished(path, false, r.error);
          return;
        }
        emit loadFinished(path, true, QString());
      });
}

void Session::cancelLoad() { jobs_->cancelKey(kLoadKey); }

bool Session::loadBusy() const { return jobs_->hasKey(kLoadKey); }

// ---- Saving ------------------------------------------------------------------------------------------

QByteArray Session::projectJson() const { return ProjectJson(*doc_); }

Status Session::saveProject(const QString& path) {
  if (Status st = WriteProject(*doc_, path); !st.ok()) return st;
  doc_->setFilePath(path);
  doc_->setClean();
  store_->setProject(path, /*carry_session_runs=*/true);
  return Status::Ok();
}

}  // namespace shardscope::gui
