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
#include "views/pipeline_stages.h"
#include "views/timeline_view.h"

namespace shardscope::views {

using namespace ::shardscope::sim;

namespace {

QString Q(const std::string& s) { return QString::fromStdString(s); }

enum CompareColumn { kFigure, kRunA, kRunB, kDifference, kRatio, kBetter, kCompareColumns };

QString FormatFigure(const ComparedFigure& f, double v) {
  if (f.unit == "s") return Q(FormatSeconds(v));
  if (f.unit == "bytes") return Q(FormatBytes(v));
  if (f.unit.find("fraction") != std::string::npos) return Q(FormatPercent(v));
  return QString::number(v, 'g', 4);
}

QString FormatDifference(const ComparedFigure& f) {
  const double d = f.difference();
  if (d == 0) return "0";
  const QString sign = d > 0 ? "+" : QString::fromUtf8("\u2212");
  if (f.unit.find("fraction") != std::string::npos) return sign + QString("%1 pt").arg(std::fabs(d) * 100, 0, 'f', 1);
  return sign + FormatFigure(f, std::fabs(d));
}

// The memory curve of the device class that holds the run's peak.
const DeviceClass* PeakClass(const RunResult& run) {
  const DeviceClass* peak = nullptr;
  for (const auto& c : run.classes) {
    if (!peak || c.peak_memory_bytes > peak->peak_memory_bytes) peak = &c;
  }
  return peak;
}

QString RunName(int64_t id) { return id < 0 ? QString("unsaved run %1").arg(-id) : QString("run %1").arg(id); }

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
      timeline_b_(new TimelineWidget),
      chart_(MemoryChart::Create()),
      history_(new RunHistoryModel(this)),
      proxy_(new QSortFilterProxyModel(this)),
      table_(new QTableView),
      details_(new QStackedWidget),
      summary_(new QTextBrowser),
      compare_title_(new QLabel),
      compare_table_(new QTableWidget(0, kCompareColumns)),
      tick_(new QTimer(this)),
      elapsed_(std::make_unique<QElapsedTimer>()) {
  setObjectName("simulationView");
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
  bar->addWidget(button_);
  bar->addWidget(cancel_);
  bar->addWidget(progress_);
  bar->addWidget(status_, 1);

  // Left: the timeline(s) over the memory chart.
  auto* lanes = new QWidget;
  auto* lanes_col = new QVBoxLayout(lanes);
  lanes_col->setContentsMargins(0, 0, 0, 0);
  lanes_col->setSpacing(2);
  lanes_col->addWidget(timeline_);
  lanes_col->addWidget(timeline_b_);
  lanes_col->addStretch(0);
  timeline_b_->setObjectName("comparedTimeline");
  timeline_b_->hide();
  auto* scroll = new QScrollArea;
  scroll->setWidget(lanes);
  scroll->setWidgetResizable(true);
  scroll->setFrameShape(QFrame::NoFrame);
  auto* left = new QSplitter(Qt::Vertical);
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
  table_->setToolTip("Select a run to show it, Ctrl-click a second one to compare them. Double-click a label to "
                     "rename it; Delete removes the selected runs from the store.");
  table_->installEventFilter(this);
  compare_table_->setObjectName("runComparison");
  compare_table_->setHorizontalHeaderLabels({"Figure", "Run A", "Run B", "B \u2212 A", "B / A", "Better"});
  compare_table_->verticalHeader()->hide();
  compare_table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  compare_table_->setSelectionMode(QAbstractItemView::NoSelection);
  compare_table_->horizontalHeader()->setStretchLastSection(true);
  compare_title_->setWordWrap(true);
  compare_title_->setTextFormat(Qt::RichText);
  auto* compare_page = new QWidget;
  auto* compare_col = new QVBoxLayout(compare_page);
  compare_col->setContentsMargins(4, 4, 4, 4);
  compare_col->addWidget(compare_title_);
  compare_col->addWidget(compare_table_, 1);
  details_->addWidget(summary_);
  details_->addWidget(compare_page);
  auto* right = new QSplitter(Qt::Vertical);
  right->addWidget(table_);
  right->addWidget(details_);
  right->setStretchFactor(0, 2);
  right->setStretchFactor(1, 3);
  auto* split = split_ = new QSplitter(Qt::Horizontal);
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
  connect(timeline_b_, &TimelineWidget::eventClicked, this, [this](const QString& name, int) {
    if (timeline_b_->run()) onEventClicked(timeline_b_->run()->id, name);
  });
  connect(timeline_, &TimelineWidget::rangeSelected, this, &SimulationView::onRangeSelected);
  // Compared timelines share one time window.
  connect(timeline_, &TimelineWidget::rangeChanged, this, [this](double a, double b) {
    if (timeline_b_->isVisible() && (timeline_b_->rangeStart() != a || timeline_b_->rangeEnd() != b)) timeline_b_->setRange(a, b);
  });
  connect(timeline_b_, &TimelineWidget::rangeChanged, this, [this](double a, double b) {
    if (timeline_b_->isVisible() && (timeline_->rangeStart() != a || timeline_->rangeEnd() != b)) timeline_->setRange(a, b);
  });
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
    if (compared_ && (compared_->first == id || compared_->second == id)) {
      compared_.reset();
      details_->setCurrentIndex(0);
      timeline_b_->hide();
    }
    if (shown_id_ == id) {
      shown_id_ = wanted_id_ = 0;
      timeline_->setRun(nullptr);
      chart_->clear();
      summary_->clear();
    }
  });
  connect(runs_, &RunHistory::runLabelChanged, this, [this](qint64 id) {
    if (const RunOverview* o = runs_->overview(id)) history_->setLabel(id, Q(o->label));
    if (id == shown_id_ && !compared_) {
      if (auto run = runs_->loadedRun(id)) summary_->setHtml(summaryHtml(*run));
    }
  });
  connect(runs_, &RunHistory::historyReset, this, &SimulationView::resetHistory);
  connect(runs_, &RunHistory::runLoaded, this, &SimulationView::onRunLoaded);
  connect(runs_, &RunHistory::comparisonReady, this, [this](qint64 a, qint64 b) {
    if (compared_ && compared_->first == a && compared_->second == b) displayComparison();
  });
  connect(runs_, &RunHistory::storeChanged, this, &SimulationView::updateStoreLabel);
  connect(runs_, &RunHistory::storeMessage, this, [this](const QString& message) { status_->setText(message); });
  connect(doc_, &DocumentModel::selectionChanged, this, &SimulationView::highlightSelection);
  connect(doc_, &DocumentModel::moduleReset, this, [this] {
    history_->setCurrentModule(doc_->module() ? Q(doc_->module()->name()) : QString());
    shown_id_ = wanted_id_ = 0;
    compared_.reset();
    queue_.clear();
    compare_after_queue_ = false;
    timeline_->setRun(nullptr);
    timeline_b_->setRun(nullptr);
    timeline_b_->hide();
    chart_->clear();
    summary_->clear();
    details_->setCurrentIndex(0);
    updating_selection_ = true;
    table_->clearSelection();
    updating_selection_ = false;
  });
  history_->setCurrentModule(doc_->module() ? Q(doc_->module()->name()) : QString());
  runs_->open();
  resetHistory();
  updateStoreLabel();
  updateBusy();
}

int64_t SimulationView::instructionForEvent(int64_t run_id, const QString& spmd_instruction) const {
  if (!doc_ || !runs_ || !doc_->module()) return -1;
  const Module* module = doc_->module();
  if (const RunOverview* o = runs_->overview(run_id); o && !o->inputs.module_name.empty() && RunModuleName(o->inputs) != module->name()) {
    return -1;  // another module's run: its names mean nothing here
  }
  std::string name = spmd_instruction.toStdString();
  while (!name.empty() && name.back() == ']') {  // "[i]" per enclosing loop
    const auto open = name.rfind('[');
    if (open == std::string::npos) break;
    name.erase(open);
  }
  if (name.empty()) return -1;
  // The name as the event gives it, with the partitioner's ".spmd" computation suffix dropped, and
  // without its computation.
  std::vector<std::string> candidates{name};
  for (auto pos = name.find(".spmd/"); pos != std::string::npos; pos = std::string::npos) {
    candidates.push_back(name.substr(0, pos) + name.substr(pos + 5));
  }
  if (const auto slash = name.rfind('/'); slash != std::string::npos) candidates.push_back(name.substr(slash + 1));
  auto find = [module](const std::string& n) -> int64_t {
    const Instruction* inst = module->FindInstruction(n);
    return inst ? inst->id() : -1;
  };
  // 1. The partitioner's own map, kept with the run (in the store too).
  if (auto run = runs_->loadedRun(run_id)) {
    for (const auto& c : candidates) {
      auto it = run->origins.find(c);
      if (it == run->origins.end()) continue;
      if (int64_t id = find(it->second); id >= 0) return id;
    }
  }
  // 2. The last partitioned program of this document.
  if (analysis_ && analysis_->partition().ok()) {
    const PartitionResult& p = *analysis_->partition().result;
    for (const auto& c : candidates) {
      for (const auto& [original, spmd_names] : p.origin_map) {
        if (std::find(spmd_names.begin(), spmd_names.end(), c) == spmd_names.end()) continue;
        if (int64_t id = find(original); id >= 0) return id;
      }
      for (const auto& col : p.collectives) {
        if (col.instruction != c) continue;
        if (int64_t id = find(col.origin); id >= 0) return id;
      }
    }
  }
  // 3. The same name (the partitioner keeps the names of the instructions it partitions).
  for (const auto& c : candidates) {
    if (int64_t id = find(c); id >= 0) return id;
  }
  return -1;
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
  if (!s.ok()) {
    status_->setText(Q(s.message));
    queue_.clear();
    compare_after_queue_ = false;
    return;
  }
  const RunSummary& sum = s.run->summary;
  status_->setText(QString("Step %1 \u00B7 MFU %2 \u00B7 peak %3/device \u00B7 %4 collectives (%5 ms) \u00B7 %6")
                       .arg(Q(FormatSeconds(sum.step_time_s)))
                       .arg(Q(FormatPercent(sum.mfu)))
                       .arg(Q(FormatBytes(static_cast<double>(sum.peak_memory_bytes))))
                       .arg(s.collectives)
                       .arg(s.millis, 0, 'f', 0)
                       .arg(s.run->id > 0 ? QString("stored as run %1").arg(s.run->id) : QString("not stored")));
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
      compareRuns(last[0], last[1]);
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
    compareRuns(ids[0], ids[1]);
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
  else if (chosen == compare) compareRuns(ids[0], ids[1]);
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
  compared_.reset();
  details_->setCurrentIndex(0);
  timeline_b_->hide();
  timeline_b_->setRun(nullptr);
  timeline_->setMinimumSpan(0);
  if (!saved_split_.isEmpty()) {  // give back the room a comparison took
    split_->setSizes(saved_split_);
    saved_split_.clear();
  }
  wanted_id_ = run_id;
  if (selectedRunIds() != std::vector<int64_t>{run_id}) selectRuns({run_id});
  runs_->requestRun(run_id);  // runLoaded follows (at once when it is in memory)
  return true;
}

void SimulationView::onRunLoaded(qint64 run_id) {
  if (!runs_) return;
  if (compared_) {
    if (run_id != compared_->first && run_id != compared_->second) return;
    auto a = runs_->loadedRun(compared_->first);
    auto b = runs_->loadedRun(compared_->second);
    if (!a || !b) return;
    // Both timelines on one time scale, one above the other, and both memory curves overlaid.
    const double span = std::max(a->summary.step_time_s, b->summary.step_time_s);
    timeline_->setRun(a);
    timeline_->setTitle("A \u00B7 " + RunName(a->id));
    timeline_b_->setRun(b);
    timeline_b_->setTitle("B \u00B7 " + RunName(b->id));
    timeline_b_->show();
    timeline_->setMinimumSpan(span);
    timeline_b_->setMinimumSpan(span);
    for (TimelineWidget* t : {timeline_, timeline_b_}) {
      const int64_t id = t->run()->id;
      QPointer<const SimulationView> self(this);
      t->setOriginResolver([self, id](const QString& name) {
        if (!self || !self->doc_) return QString();
        return self->doc_->qualifiedName(self->doc_->instruction(self->instructionForEvent(id, name)));
      });
    }
    highlightSelection();
    std::vector<MemoryChart::Series> series;
    std::vector<MemoryChart::Marker> markers;
    const bool dark = IsDarkPalette(palette());
    const QColor colors[2] = {dark ? QColor(110, 170, 255) : QColor(30, 90, 200), dark ? QColor(255, 150, 90) : QColor(210, 90, 20)};
    const char* names[2] = {"A", "B"};
    int i = 0;
    for (const auto& run : {a, b}) {
      const DeviceClass* peak = PeakClass(*run);
      if (peak) {
        MemoryChart::Series s;
        s.name = QString("%1: %2").arg(names[i], RunName(run->id));
        s.color = colors[i];
        s.emphasise = true;
        for (const auto& m : peak->memory) s.points.push_back({m.time_s, static_cast<double>(m.total())});
        series.push_back(std::move(s));
        markers.push_back({peak->peak_memory_time_s, QString("%1 peak").arg(names[i]), colors[i]});
      }
      ++i;
    }
    chart_->setSeries(QString("Memory per device: A peak %1, B peak %2")
                          .arg(Q(FormatBytes(static_cast<double>(a->summary.peak_memory_bytes))),
                               Q(FormatBytes(static_cast<double>(b->summary.peak_memory_bytes)))),
                      std::move(series), std::move(markers));
    return;
  }
  if (run_id != wanted_id_) return;
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

void SimulationView::display(std::shared_ptr<const RunResult> run) {
  shown_id_ = run ? run->id : 0;
  timeline_->setRun(run);
  timeline_->setTitle(run ? RunName(run->id) : QString());
  if (!run) return;
  const int64_t id = run->id;
  QPointer<const SimulationView> self(this);
  timeline_->setOriginResolver([self, id](const QString& name) {
    if (!self || !self->doc_) return QString();
    return self->doc_->qualifiedName(self->doc_->instruction(self->instructionForEvent(id, name)));
  });
  highlightSelection();
  showPipelineBubble(*run);
  // Memory of the device class holding the peak.
  if (const DeviceClass* peak = PeakClass(*run)) {
    std::vector<MemoryChart::Series> series;
    for (int c = 0; c < kNumMemoryCategories; ++c) {
      MemoryChart::Series s;
      s.name = Q(std::string(MemoryCategoryName(static_cast<MemoryCategory>(c))));
      s.color = QColor::fromHsl((c * 67 + 200) % 360, 160, IsDarkPalette(palette()) ? 120 : 110);
      bool any = false;
      for (const auto& m : peak->memory) {
        s.points.push_back({m.time_s, static_cast<double>(m.bytes[static_cast<size_t>(c)])});
        any |= m.bytes[static_cast<size_t>(c)] > 0;
      }
      if (any) series.push_back(std::move(s));
    }
    MemoryChart::Series total;
    total.name = "total";
    total.color = palette().color(QPalette::Text);
    total.emphasise = true;
    for (const auto& m : peak->memory) total.points.push_back({m.time_s, static_cast<double>(m.total())});
    series.push_back(std::move(total));
    chart_->setSeries(QString("Memory per device (peak %1)").arg(Q(FormatBytes(peak->peak_memory_bytes))), std::move(series),
                      peak->peak_memory_time_s);
  } else {
    chart_->clear();
  }
  summary_->setHtml(summaryHtml(*run));
}

QString SimulationView::summaryHtml(const RunResult& run) const {
  const RunSummary& s = run.summary;
  QString h = QString("<h4>%1</h4><p><small>%2<br>%3</small></p>")
                  .arg(RunName(run.id).toHtmlEscaped(), Q(run.label).toHtmlEscaped(),
                       QDateTime::fromMSecsSinceEpoch(run.created_unix_ms).toString("yyyy-MM-dd hh:mm:ss"));
  h += "<table cellspacing=2>";
  auto row = [&](const QString& k, const QString& v) { h += QString("<tr><td>%1</td><td align=right><b>%2</b></td></tr>").arg(k, v); };
  row("step time", Q(FormatSeconds(s.step_time_s)));
  row("compute", Q(FormatSeconds(s.compute_time_s)));
  row("communication", Q(FormatSeconds(s.communication_time_s)));
  row("exposed communication", Q(FormatSeconds(s.exposed_communication_s)));
  row("idle", Q(FormatSeconds(s.idle_time_s)));
  row("MFU", Q(FormatPercent(s.mfu)));
  row("peak memory / device", Q(FormatBytes(s.peak_memory_bytes)));
  row("bytes communicated", Q(FormatBytes(s.bytes_communicated)));
  row("device classes", QString::number(run.classes.size()));
  h += "</table>";
  const DeviceClass* peak = PeakClass(run);
  if (peak && !peak->peak_buffers.empty()) {
    auto buffers = peak->peak_buffers;
    std::sort(buffers.begin(), buffers.end(), [](const PeakBuffer& a, const PeakBuffer& b) { return a.bytes > b.bytes; });
    int64_t total = 0;
    for (const auto& b : buffers) total += b.bytes;
    h += QString("<p><b>Live at the peak</b> (%1, %2 buffers, at %3)</p><table cellspacing=2>")
             .arg(Q(FormatBytes(total))).arg(buffers.size()).arg(Q(FormatSeconds(peak->peak_memory_time_s)));
    for (size_t i = 0; i < buffers.size() && i < 12; ++i) {
      h += QString("<tr><td>%1</td><td align=right>%2</td><td><small>%3</small></td></tr>")
               .arg(Q(buffers[i].name).toHtmlEscaped(), Q(FormatBytes(buffers[i].bytes)),
                    Q(std::string(MemoryCategoryName(buffers[i].category))));
    }
    if (buffers.size() > 12) h += QString("<tr><td colspan=3><small>and %1 more</small></td></tr>").arg(buffers.size() - 12);
    h += "</table>";
  }
  if (!run.collectives.empty()) {
    h += "<p><b>Collectives</b></p><table cellspacing=2>";
    for (const auto& c : run.collectives) {
      h += QString("<tr><td>%1</td><td>%2</td><td align=right>%3</td><td align=right>%4</td><td><small>%5</small></td></tr>")
               .arg(Q(c.kind).toHtmlEscaped(), Q(c.instruction).toHtmlEscaped(), Q(FormatBytes(c.bytes)), Q(FormatSeconds(c.time_s)),
                    Q(c.regime).toHtmlEscaped());
    }
    h += "</table>";
  }
  const SimulatedStep& sim = analysis_->simulation();
  if (sim.run && sim.run->id == run.id && !sim.warnings.empty()) {
    h += "<p><b>Warnings</b><br>";
    for (const auto& w : sim.warnings) h += Q(w).toHtmlEscaped() + "<br>";
    h += "</p>";
  }
  return h;
}

// ---- Two runs ----------------------------------------------------------------------------------------

bool SimulationView::compareRuns(int64_t run_a, int64_t run_b) {
  if (!runs_ || !runs_->overview(run_a) || !runs_->overview(run_b) || run_a == run_b) return false;
  compared_ = std::make_pair(run_a, run_b);
  shown_id_ = wanted_id_ = 0;
  details_->setCurrentIndex(1);
  compare_title_->setText(QString("<b>A</b> = %1 vs <b>B</b> = %2 \u2026").arg(RunName(run_a), RunName(run_b)));
  compare_table_->setRowCount(0);
  const auto ids = selectedRunIds();
  if (ids != std::vector<int64_t>{run_a, run_b} && ids != std::vector<int64_t>{run_b, run_a}) selectRuns({run_a, run_b});
  runs_->requestComparison(run_a, run_b);
  runs_->requestRun(run_a);
  runs_->requestRun(run_b);
  return true;
}

void SimulationView::displayComparison() {
  if (!runs_ || !runs_->comparison()) return;
  const RunComparison& c = *runs_->comparison();
  auto describe = [](const RunOverview& o) {
    return QString("%1 <small>\u00B7 %2</small>")
        .arg(RunName(o.id).toHtmlEscaped(), Q(o.label.empty() ? RunModuleName(o.inputs) : o.label).toHtmlEscaped());
  };
  compare_title_->setText(QString("<b>A</b> %1<br><b>B</b> %2").arg(describe(c.a), describe(c.b)));
  compare_table_->setRowCount(static_cast<int>(c.figures.size()));
  QColor better_bg = palette().color(QPalette::Highlight);
  better_bg.setAlpha(60);
  for (int r = 0; r < static_cast<int>(c.figures.size()); ++r) {
    const ComparedFigure& f = c.figures[static_cast<size_t>(r)];
    auto item = [&](int col, const QString& text, const QVariant& raw) {
      auto* it = new QTableWidgetItem(text);
      if (raw.isValid()) it->setData(Qt::UserRole, raw);
      if (col != kFigure) it->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
      compare_table_->setItem(r, col, it);
      return it;
    };
    item(kFigure, Q(f.name), QVariant());
    auto* ia = item(kRunA, FormatFigure(f, f.a), f.a);
    auto* ib = item(kRunB, FormatFigure(f, f.b), f.b);
    item(kDifference, FormatDifference(f), f.difference());
    item(kRatio, f.a != 0 ? QString::fromUtf8("\u00D7%1").arg(f.ratio(), 0, 'f', 3) : QString("\u2013"), f.ratio());
    QString better = "=";
    if (f.a != f.b) {
      const bool b_better = SmallerIsBetter(f) ? f.b < f.a : f.b > f.a;
      better = b_better ? "B" : "A";
      QTableWidgetItem* winner = b_better ? ib : ia;
      QFont bold = winner->font();
      bold.setBold(true);
      winner->setFont(bold);
      winner->setBackground(better_bg);
    }
    item(kBetter, better, QVariant())->setTextAlignment(Qt::AlignCenter);
  }
  compare_table_->resizeColumnsToContents();
  // The figures need their width: widen the details side for them (given back with one run).
  const int need = compare_table_->horizontalHeader()->length() + 2 * compare_table_->frameWidth() +
                   style()->pixelMetric(QStyle::PM_ScrollBarExtent) + 16;
  const QList<int> sizes = split_->sizes();
  if (sizes.size() == 2 && sizes[1] < need) {
    if (saved_split_.isEmpty()) saved_split_ = sizes;
    const int total = sizes[0] + sizes[1];
    const int right = std::min(need, total * 65 / 100);
    split_->setSizes({total - right, right});
  }
  status_->setText(QString("Comparing %1 and %2: step time B/A \u00D7%3, peak memory B/A \u00D7%4")
                       .arg(RunName(c.a.id), RunName(c.b.id))
                       .arg(c.step_time.ratio(), 0, 'f', 3)
                       .arg(c.peak_memory.ratio(), 0, 'f', 3));
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
  timeline_b_->setHighlightedOrigin(name);
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
