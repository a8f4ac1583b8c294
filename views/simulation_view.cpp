#include "core/base/units.h"
#include "views/simulation_view.h"

#include <algorithm>
#include <cmath>

#include <QComboBox>
#include <QDateTime>
#include <QElapsedTimer>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QItemSelectionModel>
#include <QKeyEvent>
#include <QLabel>
#include <QMenu>
#include <QMessageBox>
#include <QProgressBar>
#include <QPushButton>
#include <QScrollArea>
#include <QSortFilterProxyModel>
#include <QSplitter>
#include <QStackedWidget>
#include <QStyle>
#include <QTableView>
#include <QTableWidget>
#include <QTextBrowser>
#include <QTimer>
#include <QVBoxLayout>

#include "views/analysis_model.h"
#include "views/document_model.h"
#include "views/run_history.h"
#include "views/item_models.h"
#include "views/memory_chart.h"
#include "views/sharding_style.h"
#include "views/pipeline_figures.h"
#include "views/pipeline_stages.h"
#include "views/run_display.h"
#include "views/simulated_sizes_control.h"
#include "views/slice_placement_bar.h"
#include "views/timeline_view.h"
#include "views/weight_update_panel.h"

namespace shardscope::views {

using namespace ::shardscope::sim;

namespace {

QString Q(const std::string& s) { return QString::fromStdString(s); }

}  // namespace

SimulationView::SimulationView(QWidget* parent)
    : QWidget(parent),
      chip_(new QComboBox),
      button_(new QPushButton("Simulate")),
      cancel_(new QPushButton("Cancel")),
      progress_(new QProgressBar),
      status_(new QLabel),
      store_label_(new QLabel),
      timeline_(new TimelineWidget),
      chart_(MemoryChart::Create()),
      history_(new RunHistoryModel(this)),
      proxy_(new QSortFilterProxyModel(this)),
      table_(new QTableView),
      summary_(new QTextBrowser),
      wus_panel_(new WeightUpdatePanel),
      pipeline_figures_(new PipelineFigures),
      slice_bar_(new SlicePlacementBar),
      sizes_(new SimulatedSizesControl),
      tick_(new QTimer(this)),
      elapsed_(std::make_unique<QElapsedTimer>()) {
  setObjectName("simulationView");
  chip_->setObjectName("simulationChip");
  chip_->setToolTip("The chip generation of the simulated pod (a slice shaped like the mesh)");
  button_->setToolTip("Partition the current shardings and simulate one step (F5)");
  button_->setShortcut(QKeySequence("F5"));
  cancel_->setToolTip("Stop waiting for the simulation: its result is dropped and not stored");
  cancel_->setObjectName("simulationCancel");
  cancel_->hide();
  progress_->setRange(0, 0);  // busy indicator: the engine reports no fraction
  progress_->setMaximumWidth(120);
  progress_->setTextVisible(false);
  progress_->hide();
  status_->setWordWrap(true);
  status_->setObjectName("simulationStatus");
  store_label_->setObjectName("runStoreStatus");
  store_label_->setWordWrap(true);
  store_label_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  auto* bar = new QHBoxLayout;
  bar->setContentsMargins(6, 4, 6, 0);
  bar->addWidget(new QLabel("Chip:"));
  bar->addWidget(chip_);
  bar->addWidget(sizes_);
  bar->addWidget(button_);
  bar->addWidget(cancel_);
  bar->addWidget(progress_);
  bar->addWidget(status_, 1);

  // Left: the timeline over the memory chart.
  auto* scroll = new QScrollArea;
  scroll->setWidget(timeline_);
  scroll->setWidgetResizable(true);
  scroll->setFrameShape(QFrame::NoFrame);
  scroll->setMinimumHeight(100);
  chart_->setMinimumSize(240, 150);
  auto* left = new QSplitter(Qt::Vertical);
  left->setChildrenCollapsible(false);
  left->addWidget(scroll);
  left->addWidget(chart_);
  left->setStretchFactor(0, 1);
  left->setStretchFactor(1, 1);

  // Right: the history over the details (one run's summary, or the comparison).
  proxy_->setSourceModel(history_);
  proxy_->setSortRole(RunHistoryModel::kSortRole);
  table_->setObjectName("runHistory");
  table_->setModel(proxy_);
  table_->setSortingEnabled(true);
  table_->sortByColumn(-1, Qt::AscendingOrder);  // oldest first, as stored
  table_->setSelectionBehavior(QAbstractItemView::SelectRows);
  table_->setSelectionMode(QAbstractItemView::ExtendedSelection);
  table_->setEditTriggers(QAbstractItemView::DoubleClicked | QAbstractItemView::EditKeyPressed);
  table_->verticalHeader()->hide();
  table_->horizontalHeader()->setStretchLastSection(true);
  table_->setContextMenuPolicy(Qt::CustomContextMenu);
  table_->setToolTip("Select a run to show it, Ctrl-click a second one to compare them side by side. Double-click a "
                     "label to rename it; Delete removes the selected runs from the store.");
  table_->installEventFilter(this);
  auto* right = new QSplitter(Qt::Vertical);
  right->setChildrenCollapsible(false);
  right->addWidget(table_);
  // The run's summary, with the pipelining figures above it for a pipelined run.
  auto* details = new QWidget;
  auto* details_col = new QVBoxLayout(details);
  details_col->setContentsMargins(0, 0, 0, 0);
  details_col->setSpacing(0);
  details_col->addWidget(pipeline_figures_);
  details_col->addWidget(summary_, 1);
  right->addWidget(details);
  right->setStretchFactor(0, 2);
  right->setStretchFactor(1, 3);
  auto* split = new QSplitter(Qt::Horizontal);
  split->setChildrenCollapsible(false);
  split->addWidget(left);
  split->addWidget(right);
  split->setStretchFactor(0, 3);
  split->setStretchFactor(1, 2);
  auto* col = new QVBoxLayout(this);
  col->setContentsMargins(0, 0, 0, 0);
  col->addLayout(bar);
  auto* store_row = new QHBoxLayout;
  store_row->setContentsMargins(6, 0, 6, 0);
  store_row->addWidget(store_label_, 1);
  col->addLayout(store_row);
  col->addWidget(slice_bar_);  // how the mesh sits on the physical slice, and its override
  col->addWidget(wus_panel_);  // the step before and after weight-update sharding, when it ran
  col->addWidget(split, 1);

  connect(button_, &QPushButton::clicked, this, &SimulationView::simulate);
  connect(cancel_, &QPushButton::clicked, this, &SimulationView::cancel);
  connect(tick_, &QTimer::timeout, this, [this] {
    if (analysis_ && analysis_->simulationBusy()) {
      status_->setText(QString("Simulating on %1\u2026 %2 s").arg(chip_->currentText()).arg(elapsed_->elapsed() / 1000.0, 0, 'f', 1));
    }
  });
  connect(table_->selectionModel(), &QItemSelectionModel::selectionChanged, this, [this] {
    if (!updating_selection_) onHistorySelectionChanged();
  });
  connect(table_, &QWidget::customContextMenuRequested, this, &SimulationView::showHistoryMenu);
  connect(history_, &RunHistoryModel::labelEdited, this, [this](qint64 id, const QString& label) {
    if (runs_) runs_->setLabel(id, label);
  });
  connect(timeline_, &TimelineWidget::eventClicked, this, [this](const QString& name, int) {
    if (timeline_->run()) onEventClicked(timeline_->run()->id, name);
  });
  connect(timeline_, &TimelineWidget::rangeSelected, this, &SimulationView::onRangeSelected);
  button_->setEnabled(false);
  status_->setText("Press Simulate to run one step of the partitioned program on a simulated pod.");
}

SimulationView::~SimulationView() = default;

void SimulationView::setModels(DocumentModel* doc, AnalysisModel* analysis, RunHistory* runs) {
  for (QObject* o : {static_cast<QObject*>(doc_.data()), static_cast<QObject*>(analysis_.data()), static_cast<QObject*>(runs_.data())}) {
    if (o) o->disconnect(this);
  }
  doc_ = doc;
  analysis_ = analysis;
  runs_ = runs;
  if (!doc_ || !analysis_ || !runs_) return;
  chip_->clear();
  for (const auto& c : analysis_->chips()) chip_->addItem(Q(c));
  chip_->setCurrentText(Q(analysis_->defaultChip()));
  connect(analysis_, &AnalysisModel::simulationUpdated, this, &SimulationView::onSimulationUpdated);
  connect(analysis_, &AnalysisModel::simulationCancelled, this, [this] {
    updateBusy();
    status_->setText("Cancelled: the result of that simulation is dropped and not stored.");
  });
  connect(analysis_, &AnalysisModel::busyChanged, this, &SimulationView::updateBusy);
  connect(runs_, &RunHistory::runAdded, this, [this](qint64 id) {
    if (const RunOverview* o = runs_->overview(id)) history_->addRun(*o);
  });
  connect(runs_, &RunHistory::runRemoved, this, [this](qint64 id) {
    history_->removeRun(id);
    if (shown_id_ == id) {
      shown_id_ = wanted_id_ = 0;
      timeline_->setRun(nullptr);
      chart_->clear();
      summary_->clear();
      pipeline_figures_->setSummary(nullptr);
    }
  });
  connect(runs_, &RunHistory::runLabelChanged, this, [this](qint64 id) {
    if (const RunOverview* o = runs_->overview(id)) history_->setLabel(id, Q(o->label));
    if (id == shown_id_) {
      if (auto run = runs_->loadedRun(id)) summary_->setHtml(summaryHtml(*run));
    }
  });
  connect(runs_, &RunHistory::historyReset, this, &SimulationView::resetHistory);
  connect(runs_, &RunHistory::runLoaded, this, &SimulationView::onRunLoaded);
  connect(runs_, &RunHistory::storeChanged, this, &SimulationView::updateStoreLabel);
  connect(runs_, &RunHistory::storeMessage, this, [this](const QString& message) { status_->setText(message); });
  connect(doc_, &DocumentModel::selectionChanged, this, &SimulationView::highlightSelection);
  connect(doc_, &DocumentModel::moduleReset, this, &SimulationView::reset);
  // Weight-update sharding turned on or off: the step shown is simulated again with it.
  connect(doc_, &DocumentModel::weightUpdateShardingChanged, this, [this] {
    if (analysis_ && !analysis_->simulationBusy() && analysis_->simulation().ok()) simulate();
  });
  // The slice override changed (the placement row): the step shown — or the one the last override
  // could not place — is simulated again on the new slice (a project being opened simulates nothing).
  slice_bar_->setDocument(doc_);
  connect(doc_, &DocumentModel::sliceOverrideChanged, this, [this] {
    if (!analysis_ || !doc_->module() || analysis_->simulationBusy()) return;
    if (analysis_->simulation().ok() || analysis_->simulation().slice_failed) simulate();
  });
  // The simulated sizes changed: simulated again at them (a project being opened simulates nothing).
  sizes_->setDocument(doc_);
  connect(doc_, &DocumentModel::simulatedSizesChanged, this, [this] {
    if (!analysis_ || !doc_->module() || analysis_->simulationBusy()) return;
    if (analysis_->simulation().ok() || analysis_->simulation().sizes_failed) simulate();
  });
  history_->setCurrentModule(doc_->module() ? Q(doc_->module()->name()) : QString());
  runs_->open();
  resetHistory();
  updateStoreLabel();
  updateBusy();
}

int64_t SimulationView::instructionForEvent(int64_t run_id, const QString& spmd_instruction) const {
  return InstructionForRunEvent(doc_, runs_, analysis_, run_id, spmd_instruction);
}

void SimulationView::reset() {
  if (doc_) history_->setCurrentModule(doc_->module() ? Q(doc_->module()->name()) : QString());
  shown_id_ = wanted_id_ = 0;
  shown_run_.reset();
  published_run_ms_ = 0;
  published_title_.clear();
  published_rows_.clear();
  queue_.clear();
  compare_after_queue_ = false;
  timeline_->setRun(nullptr);
  timeline_->setTitle(QString());
  chart_->clear();
  summary_->clear();
  pipeline_figures_->setSummary(nullptr);
  wus_panel_->setComparison(std::nullopt);
  slice_bar_->showRun(nullptr);
  updating_selection_ = true;
  table_->clearSelection();
  updating_selection_ = false;
  updateBusy();
  status_->setText(doc_ && doc_->module()
                       ? QString("Press Simulate to run one step of %1 on a simulated pod.").arg(Q(doc_->module()->name()))
                       : QString("Open a module to simulate it."));
}

// ---- Simulating ------------------------------------------------------------------------------------

void SimulationView::simulate() {
  if (!doc_ || !doc_->module() || !analysis_ || analysis_->chips().empty()) return;
  status_->setText(QString("Simulating on %1\u2026").arg(chip_->currentText()));
  elapsed_->start();
  analysis_->requestSimulation(chip_->currentText());
  updateBusy();
}

void SimulationView::simulateAndCompare(const QList<Configuration>& configurations) {
  if (!doc_ || !doc_->module() || !analysis_ || configurations.isEmpty() || analysis_->chips().empty()) return;
  queue_ = configurations;
  compare_after_queue_ = configurations.size() >= 2;
  queue_runs_ = 0;
  const Configuration next = queue_.takeFirst();
  chip_->setCurrentText(next.chip);
  status_->setText(QString("Simulating on %1%2\u2026").arg(next.chip, next.replicated ? " (replicated)" : ""));
  elapsed_->start();
  analysis_->requestSimulation(next.chip, next.replicated ? AnalysisModel::SimulationInput::kReplicated
                                                          : AnalysisModel::SimulationInput::kShardings);
  updateBusy();
}

void SimulationView::cancel() {
  queue_.clear();
  compare_after_queue_ = false;
  if (analysis_) analysis_->cancelSimulation();
  updateBusy();
}

void SimulationView::updateBusy() {
  const bool busy = analysis_ && analysis_->simulationBusy();
  button_->setEnabled(!busy && analysis_ && !analysis_->chips().empty());
  cancel_->setVisible(busy);
  cancel_->setEnabled(busy);
  progress_->setVisible(busy);
  if (busy && !tick_->isActive()) tick_->start(200);
  if (!busy) tick_->stop();
}

void SimulationView::onSimulationUpdated() {
  updateBusy();
  const SimulatedStep& s = analysis_->simulation();
  wus_panel_->setComparison(s.weight_update);
  if (!s.ok()) {
    status_->setText(Q(s.message));
    if (s.slice_failed) slice_bar_->showFailure(Q(s.message));
    queue_.clear();
    compare_after_queue_ = false;
    return;
  }
  // The chip shown is the run's (a strategy candidate or a paper configuration simulates on its own).
  if (!s.run->inputs.chip_preset.empty()) setChip(Q(s.run->inputs.chip_preset));
  const RunSummary& sum = s.run->summary;
  status_->setText(QString("Step %1 \u00B7 MFU %2 \u00B7 peak %3/device \u00B7 %4 collectives (%5 ms) \u00B7 %6")
                       .arg(Q(FormatSeconds(sum.step_time_s)))
                       .arg(Q(FormatPercent(sum.mfu)))
                       .arg(Q(FormatBytes(static_cast<double>(sum.peak_memory_bytes))))
                       .arg(s.collectives)
                       .arg(s.millis, 0, 'f', 0)
                       .arg(s.run->id > 0 ? QString("stored as run %1").arg(s.run->id) : QString("not stored")) +
                   (sum.fits() ? QString() : QString(" \u00B7 DOES NOT FIT: %1 over the HBM").arg(Q(FormatBytes(sum.missing_bytes())))) +
                   (s.sizes.empty() ? QString() : QString(" \u00B7 at the simulated sizes")));
  // The sizes in full where the line has no room for them (the Sizes button says which they are).
  status_->setToolTip(s.sizes.empty() ? QString() : "Simulated at other sizes than the document's: " + Q(s.sizes));
  ++queue_runs_;
  if (!queue_.isEmpty()) {
    const QList<Configuration> rest = queue_;
    const bool compare = compare_after_queue_;
    const int done = queue_runs_;
    simulateAndCompare(rest);
    compare_after_queue_ = compare;
    queue_runs_ = done;
    return;
  }
  if (compare_after_queue_ && queue_runs_ >= 2) {
    compare_after_queue_ = false;
    const auto& h = runs_->runs();
    std::vector<int64_t> ids;
    for (const auto& o : h) ids.push_back(o.id);
    // The two newest runs of this session (the store lists them last; unsaved runs come after).
    std::vector<int64_t> last;
    for (auto it = ids.rbegin(); it != ids.rend() && last.size() < 2; ++it) last.insert(last.begin(), *it);
    if (last.size() == 2) {
      selectRuns(last);
      status_->setText(QString("Simulated both: %1 and %2 are compared side by side.").arg(RunName(last[0]), RunName(last[1])));
      emit compareRequested(last[0], last[1]);
      return;
    }
  }
  selectRuns({s.run->id});
  showRun(s.run->id);
}

// ---- History -----------------------------------------------------------------------------------------

void SimulationView::resetHistory() {
  if (!runs_) return;
  const auto selected = selectedRunIds();
  history_->setRuns(runs_->runs());
  table_->resizeColumnsToContents();
  if (table_->columnWidth(RunHistoryModel::kLabel) > 260) table_->setColumnWidth(RunHistoryModel::kLabel, 260);
  selectRuns(selected);
}

std::vector<int64_t> SimulationView::selectedRunIds() const {
  std::vector<std::pair<int, int64_t>> rows;  // (source row, id): oldest first
  for (const QModelIndex& i : table_->selectionModel()->selectedRows()) {
    const QModelIndex src = proxy_->mapToSource(i);
    if (const RunOverview* o = history_->at(src.row())) rows.emplace_back(src.row(), o->id);
  }
  std::sort(rows.begin(), rows.end());
  std::vector<int64_t> ids;
  for (const auto& r : rows) ids.push_back(r.second);
  return ids;
}

void SimulationView::selectRuns(const std::vector<int64_t>& ids) {
  updating_selection_ = true;
  QItemSelection sel;
  for (int64_t id : ids) {
    const int row = history_->rowOf(id);
    if (row < 0) continue;
    const QModelIndex i = proxy_->mapFromSource(history_->index(row, 0));
    sel.select(i, i.siblingAtColumn(RunHistoryModel::kColumnCount - 1));
  }
  table_->selectionModel()->select(sel, QItemSelectionModel::ClearAndSelect | QItemSelectionModel::Rows);
  if (!ids.empty()) {
    const int row = history_->rowOf(ids.back());
    if (row >= 0) {
      const QModelIndex i = proxy_->mapFromSource(history_->index(row, 0));
      table_->selectionModel()->setCurrentIndex(i, QItemSelectionModel::NoUpdate);
      table_->scrollTo(i);
    }
  }
  updating_selection_ = false;
}

void SimulationView::onHistorySelectionChanged() {
  const auto ids = selectedRunIds();
  if (ids.size() == 1) {
    showRun(ids.front());
  } else if (ids.size() == 2) {
    status_->setText(QString("%1 and %2 are compared side by side in the Compare view.").arg(RunName(ids[0]), RunName(ids[1])));
    emit compareRequested(ids[0], ids[1]);
  } else if (ids.size() > 2) {
    status_->setText("Select one run to show it, or two (Ctrl-click) to compare them.");
  }
}

bool SimulationView::eventFilter(QObject* watched, QEvent* event) {
  if (watched == table_ && event->type() == QEvent::KeyPress) {
    auto* ke = static_cast<QKeyEvent*>(event);
    if ((ke->key() == Qt::Key_Delete || ke->key() == Qt::Key_Backspace)) {
      deleteSelectedRuns();
      return true;
    }
  }
  return QWidget::eventFilter(watched, event);
}

void SimulationView::deleteSelectedRuns() {
  if (!runs_) return;
  const auto ids = selectedRunIds();
  if (ids.empty()) return;
  if (confirm_deletes_) {
    QStringList names;
    for (int64_t id : ids) names << RunName(id);
    const QString where = runs_->storePath().isEmpty() ? QString("memory") : runs_->storePath();
    const auto answer = QMessageBox::question(
        this, "Delete runs", QString("Delete %1 from %2? This cannot be undone.").arg(names.join(", "), where),
        QMessageBox::Yes | QMessageBox::Cancel, QMessageBox::Cancel);
    if (answer != QMessageBox::Yes) return;
  }
  for (int64_t id : ids) runs_->deleteRun(id);
  status_->setText(QString("Deleted %1 run%2.").arg(ids.size()).arg(ids.size() == 1 ? "" : "s"));
}

void SimulationView::showHistoryMenu(const QPoint& pos) {
  const auto ids = selectedRunIds();
  QMenu menu(this);
  QAction* show = menu.addAction("Show");
  show->setEnabled(ids.size() == 1);
  QAction* compare = menu.addAction("Compare the two selected runs");
  compare->setEnabled(ids.size() == 2);
  QAction* rename = menu.addAction("Rename\u2026");
  rename->setEnabled(ids.size() == 1);
  menu.addSeparator();
  QAction* del = menu.addAction(ids.size() > 1 ? QString("Delete %1 runs\u2026").arg(ids.size()) : QString("Delete\u2026"));
  del->setShortcut(QKeySequence::Delete);
  del->setEnabled(!ids.empty());
  QAction* chosen = menu.exec(table_->viewport()->mapToGlobal(pos));
  if (!chosen) return;
  if (chosen == show) showRun(ids.front());
  else if (chosen == compare) emit compareRequested(ids[0], ids[1]);
  else if (chosen == rename) {
    const int row = history_->rowOf(ids.front());
    table_->edit(proxy_->mapFromSource(history_->index(row, RunHistoryModel::kLabel)));
  } else if (chosen == del) {
    deleteSelectedRuns();
  }
}

void SimulationView::updateStoreLabel() {
  if (!runs_) return;
  const QString error = runs_->storeError();
  if (!error.isEmpty()) {
    store_label_->setText(QString("<b>\u26A0 Run history not saved.</b> %1").arg(error.toHtmlEscaped()));
    store_label_->setToolTip(error);
    return;
  }
  const QString path = runs_->storePath();
  if (path.isEmpty()) {
    store_label_->setText("<small>Opening the run store\u2026</small>");
    return;
  }
  store_label_->setText(QString("<small>Runs are stored in %1</small>").arg(path.toHtmlEscaped()));
  store_label_->setToolTip("The SQLite run store (set SHARDSCOPE_RUN_DB to use another file)");
}

// ---- One run -----------------------------------------------------------------------------------------

bool SimulationView::showRun(int64_t run_id) {
  if (!runs_ || !runs_->overview(run_id)) return false;
  timeline_->setMinimumSpan(0);
  wanted_id_ = run_id;
  if (selectedRunIds() != std::vector<int64_t>{run_id}) selectRuns({run_id});
  runs_->requestRun(run_id);  // runLoaded follows (at once when it is in memory)
  return true;
}

void SimulationView::onRunLoaded(qint64 run_id) {
  if (!runs_ || run_id != wanted_id_) return;
  if (auto run = runs_->loadedRun(run_id)) display(run);
}

void SimulationView::showPipelineBubble(const RunResult& run) {
  // A pipelined module's bubble (pipeline_stages.h): the iterations each stage computes on padding.
  std::vector<TimelineWidget::RowMarks> marks;
  if (doc_ && doc_->module()) {
    const DocumentModel* doc = doc_;
    auto stages = DerivePipelineStages(*doc->module(), doc->mesh(),
                                       [doc](const Instruction& i) { return doc->sharding(i.id()); });
    if (stages)
      for (const StepBubble& b : ClassBubbles(run, *stages)) {
        TimelineWidget::RowMarks m;
        m.caption = QString::fromStdString(b.Caption());
        for (const BubbleSpan& s : b.spans) m.spans.emplace_back(s.start_s, s.end_s);
        marks.push_back(std::move(m));
      }
  }
  timeline_->setRowMarks(std::move(marks));
}

void SimulationView::setPublishedComparison(int64_t created_unix_ms, const QString& title,
                                            const QList<PublishedRow>& rows) {
  published_run_ms_ = created_unix_ms;
  published_title_ = title;
  published_rows_ = rows;
  if (shown_run_) summary_->setHtml(summaryHtml(*shown_run_));
}

void SimulationView::setChip(const QString& chip) {
  const int i = chip_->findText(chip);
  if (i >= 0) chip_->setCurrentIndex(i);
}

QString SimulationView::summaryText() const { return summary_->toPlainText(); }

void SimulationView::display(std::shared_ptr<const RunResult> run) {
  shown_run_ = run;
  shown_id_ = run ? run->id : 0;
  timeline_->setRun(run);
  timeline_->setTitle(run ? RunName(run->id) : QString());
  pipeline_figures_->setSummary(run ? &run->summary : nullptr);
  if (!run) return;
  const int64_t id = run->id;
  QPointer<const SimulationView> self(this);
  timeline_->setOriginResolver([self, id](const QString& name) {
    if (!self || !self->doc_) return QString();
    return self->doc_->qualifiedName(self->doc_->instruction(self->instructionForEvent(id, name)));
  });
  highlightSelection();
  slice_bar_->showRun(run.get());
  showPipelineBubble(*run);
  ShowRunMemory(chart_, *run, palette());
  summary_->setHtml(summaryHtml(*run));
}

QString SimulationView::summaryHtml(const RunResult& run) const {
  const RunSummary& s = run.summary;
  QString h = QString("<h4>%1</h4><p><small>%2<br>%3</small></p>")
                  .arg(RunName(run.id).toHtmlEscaped(), Q(run.label).toHtmlEscaped(),
                       QDateTime::fromMSecsSinceEpoch(run.created_unix_ms).toString("yyyy-MM-dd hh:mm:ss"));
  // A paper configuration's published figures first: what the user opened it to compare.
  if (!published_title_.isEmpty() && run.created_unix_ms == published_run_ms_) {
    // One line per figure, not a four-column table: the panel is often narrow (a 1024x700
    // window gives it under 200 px), where a table broke its headers and numbers mid-word.
    h += QString("<p><b>Published</b> (%1)</p>").arg(published_title_.toHtmlEscaped());
    for (const PublishedRow& r : published_rows_) {
      h += QString("<p style=\"margin-top:0; margin-bottom:2px\">%1: paper %2, simulated <b>%3</b> (%4%5)</p>")
               .arg(r.figure.toHtmlEscaped(), r.published.toHtmlEscaped(), r.simulated.toHtmlEscaped(),
                    r.difference.toHtmlEscaped(), r.within ? QString(", within") : QString(", <b>outside</b>"));
    }
  }
  // The step's figures one per line ("communication: 1.2 s"), not a two-column table, for the same
  // reason as the published figures: in a narrow panel the table squeezed its first column and
  // broke "communication" mid-word.
  h += "<p>";
  auto row = [&](const QString& k, const QString& v) { h += QString("%1: <b>%2</b><br>").arg(k, v); };
  row("step time", Q(FormatSeconds(s.step_time_s)));
  row("compute", Q(FormatSeconds(s.compute_time_s)));
  row("communication", Q(FormatSeconds(s.communication_time_s)));
  row("exposed communication", Q(FormatSeconds(s.exposed_communication_s)));
  row("idle", Q(FormatSeconds(s.idle_time_s)));
  row("MFU", Q(FormatPercent(s.mfu)));
  row("peak memory / device", PeakMemoryText(s));
  row("bytes communicated", Q(FormatBytes(s.bytes_communicated)));
  row("device classes", QString::number(run.classes.size()));
  h += "</p>";
  h += MemoryFitWarningHtml(s);

  const DeviceClass* peak = PeakClass(run);
  if (peak && !peak->peak_buffers.empty()) {
    auto buffers = peak->peak_buffers;
    std::sort(buffers.begin(), buffers.end(), [](const PeakBuffer& a, const PeakBuffer& b) { return a.bytes > b.bytes; });
    int64_t total = 0;
    for (const auto& b : buffers) total += b.bytes;
    // Lines, not a table (narrow panels; see the figures above).
    h += QString("<p><b>Live at the peak</b> (%1, %2 buffers, at %3)<br>")
             .arg(Q(FormatBytes(total))).arg(buffers.size()).arg(Q(FormatSeconds(peak->peak_memory_time_s)));
    for (size_t i = 0; i < buffers.size() && i < 12; ++i) {
      h += QString("%1: <b>%2</b> <small>%3</small><br>")
               .arg(Q(buffers[i].name).toHtmlEscaped(), Q(FormatBytes(buffers[i].bytes)),
                    Q(std::string(MemoryCategoryName(buffers[i].category))));
    }
    if (buffers.size() > 12) h += QString("<small>and %1 more</small>").arg(buffers.size() - 12);
    h += "</p>";
  }
  if (!run.collectives.empty()) {
    h += "<p><b>Collectives</b><br>";
    for (const auto& c : run.collectives) {
      h += QString("%1 %2: <b>%3</b>, %4 <small>%5</small><br>")
               .arg(Q(c.kind).toHtmlEscaped(), Q(c.instruction).toHtmlEscaped(), Q(FormatBytes(c.bytes)), Q(FormatSeconds(c.time_s)),
                    Q(c.regime).toHtmlEscaped());
    }
    h += "</p>";
  }
  const SimulatedStep& sim = analysis_->simulation();
  if (sim.run && sim.run->id == run.id && !sim.warnings.empty()) {
    h += "<p><b>Warnings</b><br>";
    for (const auto& w : sim.warnings) h += Q(w).toHtmlEscaped() + "<br>";
    h += "</p>";
  }
  return h;
}

// ---- Timeline -> instruction ---------------------------------------------------------------------------

void SimulationView::onEventClicked(int64_t run_id, const QString& instruction) {
  if (!doc_) return;
  const int64_t id = instructionForEvent(run_id, instruction);
  if (id < 0) {
    status_->setText(QString("%1 has no instruction in this module: the partitioner inserted it, or the run is of "
                             "another module.").arg(instruction));
    return;
  }
  doc_->select(id);
  const QString name = doc_->qualifiedName(doc_->instruction(id));
  status_->setText(name == instruction ? QString("Selected %1.").arg(name)
                                       : QString("Selected %1 (the timeline shows %2 of the partitioned program).").arg(name, instruction));
}

void SimulationView::highlightSelection() {
  if (!doc_) return;
  const QString name = doc_->qualifiedName(doc_->instruction(doc_->selected()));
  timeline_->setHighlightedOrigin(name);
}

void SimulationView::onRangeSelected(double start_s, double end_s) {
  if (end_s <= start_s) return;
  const auto t = timeline_->rangeTotals(timeline_->selectionRow(), start_s, end_s);
  status_->setText(QString("%1 to %2 (%3): compute %4, communication %5, both %6, idle %7, %8 events, %9 moved")
                       .arg(Q(FormatSeconds(start_s)), Q(FormatSeconds(end_s)), Q(FormatSeconds(t.span_s)), Q(FormatSeconds(t.compute_s)),
                            Q(FormatSeconds(t.communication_s)), Q(FormatSeconds(t.overlapped_s)), Q(FormatSeconds(t.idle_s)))
                       .arg(t.events)
                       .arg(Q(FormatBytes(static_cast<double>(t.bytes)))));
}

}  // namespace shardscope::views
