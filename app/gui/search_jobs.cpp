#include "app/gui/search_jobs.h"

#include <algorithm>
#include <atomic>

#include <QRegularExpression>
#include <QThread>

#include "app/gui/session.h"
#include "app/pipeline/sources.h"
#include "app/search/auto_sharding.h"
#include "app/search/candidate.h"
#include "app/search/report.h"
#include "app/search/search.h"
#include "core/base/units.h"
#include "simulator/topology.h"
#include "views/analysis_model.h"
#include "views/document_model.h"
#include "views/strategies_panel.h"

namespace shardscope::gui {

namespace {

using Lane = views::JobTracker::Lane;

QString Q(const std::string& s) { return QString::fromStdString(s); }

const QString kSearchKey = "strategy-search";
const QString kLoadKey = "strategy-load";

bool IsZooModel(const QString& name) {
  for (const ZooModel& m : ZooList())
    if (Q(m.name) == name) return true;
  return false;
}

// "layers=2 batch=16" (spaces or commas between) into settings; `error` says what does not parse.
bool ParseSettings(const QString& text, ZooOverrides* out, QString* error) {
  for (const QString& part : text.split(QRegularExpression("[\\s,]+"), Qt::SkipEmptyParts)) {
    const qsizetype eq = part.indexOf('=');
    if (eq <= 0 || eq + 1 >= part.size()) {
      *error = QString("model settings: \"%1\" is not NAME=VALUE").arg(part);
      return false;
    }
    (*out)[part.left(eq).toStdString()] = part.mid(eq + 1).toStdString();
  }
  return true;
}

QString StatsText(const search::SearchResult& r) {
  const search::SearchStats& s = r.stats;
  QString text = QString("%1 candidates in %2: %3 simulated, %4 pruned by the memory bound, %5 by the step-time bound")
                     .arg(s.generated)
                     .arg(Q(FormatSeconds(s.wall_s)))
                     .arg(s.simulated)
                     .arg(s.pruned_memory)
                     .arg(s.pruned_bound);
  if (s.invalid) text += QString(", %1 invalid").arg(s.invalid);
  if (s.failed) text += QString(", %1 failed").arg(s.failed);
  text += ".";
  if (!r.ranked.empty() && r.ranked.front().fits())
    text += QString(" Fastest that fits: %1, %2.").arg(Q(r.ranked.front().candidate.Label()), Q(FormatSeconds(r.ranked.front().summary.step_time_s)));
  else if (s.generated > 0 && s.invalid == s.generated && !r.ranked.empty())
    text += QString(" No candidate is valid: %1.").arg(Q(r.ranked.front().message));
  else
    text += " No candidate fits in HBM.";
  if (r.valid_at_fewer_devices) {
    const search::ValidAtFewerDevices& v = *r.valid_at_fewer_devices;
    text += QString(" On %1 devices %2 of %3 candidates are valid: search a larger model or fewer devices.")
                .arg(v.devices)
                .arg(v.valid)
                .arg(v.generated);
  }
  text += " Pod: " + Q(r.pod.Describe()) + ".";
  return text;
}

views::StrategyResults ToDisplay(const search::StrategyPanelModel& m, const QString& summary) {
  views::StrategyResults d;
  d.summary = summary;
  d.hbm_bytes = m.hbm_bytes;
  for (const std::string& f : m.families) d.families << Q(f);
  for (size_t i = 0; i < m.rows.size(); ++i) {
    const search::StrategyRow& r = m.rows[i];
    views::StrategyEntry e;
    e.label = Q(r.label);
    e.family = Q(r.family);
    e.outcome = Q(r.outcome);
    e.collectives = Q(r.collectives);
    e.step_time_s = r.step_time_s;
    e.mfu = r.mfu;
    e.peak_bytes = r.peak_bytes;
    e.communication_share = r.communication_share;
    e.bubble_share = r.bubble_share;
    e.simulated = m.results[i].simulated();
    e.fits = m.results[i].fits();
    e.extrapolated = r.extrapolated;
    e.pareto = r.pareto;
    d.rows.push_back(std::move(e));
  }
  for (const search::ScatterPoint& p : m.points)
    d.points.push_back({p.step_time_s, p.peak_bytes, static_cast<int>(p.family), static_cast<int>(p.row), p.pareto});
  for (size_t r : m.pareto) d.pareto.push_back(static_cast<int>(r));
  return d;
}

struct BuiltCandidate {
  std::shared_ptr<pipeline::LoadedModel> model;
  QString error;
};

}  // namespace

struct SearchOutcome {
  std::shared_ptr<const search::StrategyPanelModel> model;
  QString summary;
  QString error;
  std::vector<std::shared_ptr<const Module>> annotated;  // method 2: per ranked row
};

SearchJobs::SearchJobs(Session* session, views::StrategiesPanel* panel, QObject* parent)
    : QObject(parent), session_(session), panel_(panel) {
  QStringList chips;
  for (const std::string& c : session_->analysis()->chips()) chips << Q(c);
  panel_->setChips(chips, Q(session_->analysis()->defaultChip()));
  QStringList families, summaries;
  for (const search::StrategyFamily* f : search::StrategyFamilies()) {
    families << Q(std::string(f->name()));
    summaries << Q(std::string(f->summary()));
  }
  panel_->setFamilies(families, summaries);
  connect(panel_, &views::StrategiesPanel::searchRequested, this, &SearchJobs::start);
  connect(panel_, &views::StrategiesPanel::cancelRequested, this, &SearchJobs::cancel);
  connect(panel_, &views::StrategiesPanel::candidateChosen, this, &SearchJobs::choose);
  connect(panel_, &views::StrategiesPanel::comparisonRequested, this, &SearchJobs::compare);
  connect(session_->document(), &views::DocumentModel::moduleReset, this, &SearchJobs::onModuleReset);
  // The simulation's sizes set on a zoo model: the search is offered at them too (the settings
  // field, which the user may still change), since "which strategy" is asked at real size.
  connect(session_->document(), &views::DocumentModel::simulatedSizesChanged, this, [this] {
    const views::DocumentModel* doc = session_->document();
    if (module_mode_ || model_.isEmpty() || !doc->hasModule()) return;
    const auto& zoo = doc->simulatedSizes().zoo_settings;
    QStringList settings;
    for (const auto& [k, v] : zoo) settings << Q(k + "=" + v);
    const QString text = settings.join(' ');
    if (panel_->settingsText() != sizes_settings_text_) return;  // the user's own text stays
    panel_->setSettingsText(text);
    sizes_settings_text_ = text;
  });
  onModuleReset();
}

SearchJobs::~SearchJobs() = default;

void SearchJobs::onModuleReset() {
  const views::DocumentModel* doc = session_->document();
  if (loading_candidate_) {
    // A chosen candidate: searching it again starts from the settings its search had.
    loading_candidate_ = false;
    model_ = search_model_;
    module_mode_ = search_module_mode_;
    panel_->setSettingsText(search_settings_text_);
    chosen_row_ = pending_row_;
  } else {
    chosen_row_ = -1;
    offered_ = {};
    const QString kind = doc->sourceKind();
    model_ = doc->hasModule() && (kind == "example" || kind == "zoo") && IsZooModel(doc->source()) ? doc->source() : QString();
    module_mode_ = doc->hasModule() && model_.isEmpty();
    panel_->setSettingsText(QString());
  }
  sizes_settings_text_ = panel_->settingsText();
  if (!doc->hasModule()) {
    panel_->setSubject(QString(), false, "Open a model of the zoo (File \u25b8 Examples) or an HLO module to search its strategies.");
  } else if (module_mode_) {
    panel_->setSubject("this module", true,
                       "Search this module's shardings: an integer program over its per-instruction sharding choices on "
                       "every mesh of the pod (method 2, solved with CBC), each solution partitioned and simulated. "
                       "Choose the chip and the device count.",
                       /*takes_settings=*/false);
  } else {
    panel_->setSubject(model_, true, QString());
  }
}

bool SearchJobs::offerPaperSearch(const QString& case_name, const QString& column) {
  auto o = search::SearchOfPaperColumn(case_name.toStdString(), column.toStdString());
  if (!o.ok() || module_mode_ || model_ != Q(o->model)) return false;
  QStringList settings;
  for (const auto& [k, v] : o->settings) settings << Q(k + "=" + v);
  panel_->setChip(Q(o->chip));
  panel_->setDevices(static_cast<int>(o->devices));
  panel_->setSettingsText(settings.join(' '));
  offered_ = {Q(o->chip), static_cast<int>(o->devices), o->slice, o->cores_per_chip};
  panel_->setStatus(QString("Search the strategies of %1 at the sizes of %2, %3, on its pod (%4 %5 devices); the "
                            "annotations, mesh and pipeline stages are the search's to choose.")
                        .arg(model_, case_name, column)
                        .arg(o->devices)
                        .arg(Q(o->chip)),
                    /*wrap=*/true);
  return true;
}

bool SearchJobs::startAutoSharding(const QString& chip, int devices) {
  std::shared_ptr<const Module> module = session_->document()->sharedModule();
  if (!module) return false;
  cancel();
  panel_->setRunning(true);
  panel_->setProgress(0, 1, "solving the integer program, mesh by mesh");
  panel_->setStatus(QString("Solving this module's shardings on %1 %2 devices (method 2)\u2026").arg(devices).arg(chip));
  auto current = std::make_shared<std::atomic<bool>>(true);
  const views::JobTracker::Spec spec{
      .label = "solving shardings", .lane = Lane::kSearch, .key = kSearchKey, .cancellable = true, .context = this};
  const std::string chip_name = chip.toStdString();
  search_job_ = session_->jobs()->run<SearchOutcome>(
      spec,
      [module, chip_name, devices](const CancellationToken& token) {
        SearchOutcome out;
        auto pod = search::MakePod(chip_name, devices);
        if (!pod.ok()) {
          out.error = Q(pod.error().message);
          return out;
        }
        search::AutoShardingOptions options;
        options.keep_modules = true;
        options.time_limit_s = 60;
        auto r = search::AutoShard(*module, *pod, options, token);
        if (!r.ok()) {
          out.error = Q(r.error().message);
          return out;
        }
        out.annotated.resize(r->ranked.size());
        for (const auto& [ranked, plan] : r->plan_of_ranked)
          if (ranked < out.annotated.size()) out.annotated[ranked] = r->plans[plan].annotated;
        int solved = 0;
        for (const search::AutoShardingPlan& p : r->plans) solved += p.solved;
        out.summary = QString("Method 2 (integer program, CBC): %1 of %2 meshes solved in %3.")
                          .arg(solved)
                          .arg(r->plans.size())
                          .arg(Q(FormatSeconds(r->wall_s)));
        if (!r->ranked.empty() && r->ranked.front().fits())
          out.summary += QString(" Fastest that fits: %1, %2.")
                             .arg(Q(r->ranked.front().candidate.Label()), Q(FormatSeconds(r->ranked.front().summary.step_time_s)));
        else
          out.summary += " No solution fits in HBM.";
        out.summary += " Pod: " + Q(r->pod.Describe()) + ".";
        out.model = std::make_shared<const search::StrategyPanelModel>(search::StrategyPanelModel::FromResults(r->ranked, r->pareto));
        return out;
      },
      [this, current](SearchOutcome out) {
        current->store(false);
        if (!searchFinished(out)) return;
        annotated_ = std::move(out.annotated);
        search_model_.clear();
        search_settings_text_.clear();
        search_module_mode_ = true;
        search_source_kind_ = session_->document()->sourceKind();
        search_source_ = session_->document()->source();
        chosen_row_ = -1;
        panel_->setResults(ToDisplay(*results_, out.summary));
      },
      [this, current] {
        current->store(false);
        searchCancelled();
      });
  return true;
}

bool SearchJobs::start(const QString& chip, int devices, const QString& settings_text, const QStringList& families) {
  if (module_mode_) return startAutoSharding(chip, devices);
  if (model_.isEmpty()) return false;
  ZooOverrides settings;
  QString error;
  if (!ParseSettings(settings_text, &settings, &error)) {
    panel_->setError(error);
    return false;
  }
  cancel();
  search::SearchOptions so;
  so.model = model_.toStdString();
  so.settings = settings;
  so.chip = chip.toStdString();
  so.devices = devices;
  if (chip == offered_.chip && devices == offered_.devices) {  // a paper configuration's own pod
    so.slice = offered_.slice;
    so.cores_per_chip = offered_.cores_per_chip;
  }
  for (const QString& f : families) so.families.push_back(f.toStdString());
  so.jobs = std::max(1, QThread::idealThreadCount() - 1);
  const QString model = model_;
  panel_->setRunning(true);
  panel_->setStatus(QString("Searching the strategies of %1 on %2 %3 devices\u2026").arg(model).arg(devices).arg(chip));
  // Progress comes from the search's threads; only the current search's reaches the panel.
  auto current = std::make_shared<std::atomic<bool>>(true);
  const views::JobTracker::Spec spec{
      .label = "searching strategies", .lane = Lane::kSearch, .key = kSearchKey, .cancellable = true, .context = this};
  search_job_ = session_->jobs()->run<SearchOutcome>(
      spec,
      [so, current, this](const CancellationToken& token) {
        SearchOutcome out;
        auto progress = [current, this](const search::SearchProgress& p) {
          if (!current->load()) return;
          const int done = static_cast<int>(p.done), total = static_cast<int>(p.total);
          const QString stage = Q(p.stage);
          // Queued to the GUI thread; dropped by Qt when this object is gone.
          QMetaObject::invokeMethod(
              this,
              [this, current, done, total, stage] {
                if (current->load()) panel_->setProgress(done, total, stage);
              },
              Qt::QueuedConnection);
        };
        auto r = search::RunSearch(so, progress, token);
        if (!r.ok()) {
          out.error = Q(r.error().message);
          return out;
        }
        out.summary = StatsText(*r);
        out.model = std::make_shared<const search::StrategyPanelModel>(search::StrategyPanelModel::FromResults(r->ranked, r->pareto));
        return out;
      },
      [this, current, model, settings_text](SearchOutcome out) {
        current->store(false);
        if (!searchFinished(out)) return;
        annotated_.clear();
        search_module_mode_ = false;
        search_model_ = model;
        search_settings_text_ = settings_text;
        chosen_row_ = -1;
        panel_->setResults(ToDisplay(*results_, out.summary));
      },
      [this, current] {
        current->store(false);
        searchCancelled();
      });
  return true;
}

bool SearchJobs::searchFinished(const SearchOutcome& out) {
  search_job_ = 0;
  panel_->setRunning(false);
  if (!out.model) {
    panel_->setError(out.error);
    return false;
  }
  results_ = out.model;
  return true;
}

void SearchJobs::searchCancelled() {
  search_job_ = 0;
  panel_->setRunning(false);
  panel_->setProgress(0, 1, QString());
  panel_->setStatus("Search cancelled.");
}

void SearchJobs::cancel() {
  if (search_job_) session_->jobs()->cancel(search_job_);
  search_job_ = 0;
}

bool SearchJobs::busy() const { return search_job_ != 0 && session_->jobs()->isActive(search_job_); }

void SearchJobs::choose(int row) {
  if (!results_ || row < 0 || static_cast<size_t>(row) >= results_->results.size() || row == chosen_row_) return;
  const search::Candidate candidate = results_->results[static_cast<size_t>(row)].candidate;
  if (search_module_mode_) {
    // Method 2: the row's annotated module (kept by the search) becomes the document.
    const std::shared_ptr<const Module> annotated =
        static_cast<size_t>(row) < annotated_.size() ? annotated_[static_cast<size_t>(row)] : nullptr;
    auto mesh = DeviceMesh::Parse(candidate.mesh);
    if (!annotated || !mesh.ok()) {
      panel_->setStatus(QString("Cannot open %1: it has no solution.").arg(Q(candidate.Label())));
      return;
    }
    loading_candidate_ = true;
    pending_row_ = row;
    session_->document()->setModule(annotated->Clone(), *mesh, search_source_kind_, search_source_);
    emit candidateOpened(row, Q(candidate.Label()));
    session_->analysis()->requestSimulation(Q(candidate.chip));
    return;
  }
  const views::JobTracker::Spec spec{
      .label = "opening the candidate", .lane = Lane::kFiles, .key = kLoadKey, .cancellable = true, .context = this};
  session_->jobs()->run<BuiltCandidate>(
      spec,
      [candidate](const CancellationToken&) {
        BuiltCandidate out;
        // As a zoo example is built, with the candidate's settings; then its annotation rule.
        auto built = pipeline::BuildZooModel(candidate.model, candidate.settings);
        if (!built.ok()) {
          out.error = Q(built.error().message);
          return out;
        }
        if (Status s = search::ApplyAnnotationRule(*built->module, candidate.annotate); !s.ok()) {
          out.error = Q(s.error().message);
          return out;
        }
        out.model = std::make_shared<pipeline::LoadedModel>(std::move(built).value());
        return out;
      },
      [this, row, candidate](BuiltCandidate out) {
        if (!out.model) {
          panel_->setStatus(QString("Cannot open %1: %2").arg(Q(candidate.Label()), out.error));
          return;
        }
        loading_candidate_ = true;
        pending_row_ = row;
        session_->document()->setModule(std::move(out.model->module), out.model->mesh, "example", Q(candidate.model));
        session_->document()->setZooSettings(candidate.settings);
        // The candidate's pipeline options: a weight-update-sharding candidate switches the
        // partitioned view's toggle on (as the search evaluated it); any other leaves it off. Part
        // of opening the document, not an undo step.
        session_->document()->applyWeightUpdateSharding(candidate.OptionOn("weight_update_sharding"));
        // The pod it was ranked on: the search's slice, cores per chip and mesh order, so the
        // simulated step is the one in the table. Also part of opening, not an undo step.
        ProjectSliceOverride slice;
        if (auto shape = sim::ParseSliceShape(candidate.slice); shape.ok()) slice.shape = *shape;
        slice.cores_per_chip = candidate.cores_per_chip;
        slice.mesh_order = candidate.placement;
        session_->document()->applySliceOverride(slice);
        emit candidateOpened(row, Q(candidate.Label()));
        // The timeline follows: one step of the candidate on its chip.
        session_->analysis()->requestSimulation(Q(candidate.chip));
      });
}

void SearchJobs::compare(int a, int b) {
  if (!results_) return;
  const search::Comparison c = results_->SideBySide(static_cast<size_t>(a), static_cast<size_t>(b));
  views::StrategyComparison d;
  d.a_label = Q(c.a_label);
  d.b_label = Q(c.b_label);
  for (const search::ComparisonLine& l : c.lines) d.lines.push_back({Q(l.what), Q(l.a), Q(l.b)});
  d.explanation = Q(c.explanation);
  panel_->setComparison(d);
}

}  // namespace shardscope::gui
