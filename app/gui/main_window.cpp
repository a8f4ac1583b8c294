#include "app/gui/main_window.h"

#include <algorithm>
#include <cstdlib>
#include <utility>

#include <QAction>
#include <QActionGroup>
#include <QApplication>
#include <QCloseEvent>
#include <QDockWidget>
#include <QFileDialog>
#include <QFileInfo>
#include <QHeaderView>
#include <QImageWriter>
#include <QKeySequence>
#include <QLabel>
#include <QLineEdit>
#include <QMenuBar>
#include <QMessageBox>
#include <QPainter>
#include <QSaveFile>
#include <QScrollArea>
#include <QSettings>
#include <QSortFilterProxyModel>
#include <QSplitter>
#include <QTabWidget>
#include <QStatusBar>
#include <QStyle>
#include <QStyleFactory>
#include <QTableView>
#include <QGuiApplication>
#include <QScreen>
#include <QTimer>
#include <QUndoStack>
#include <QUndoView>
#include <QVBoxLayout>

#include "app/gui/exports.h"
#include "app/gui/project_file.h"
#include "app/gui/search_jobs.h"
#include "app/gui/session.h"
#include "app/pipeline/reproduce.h"
#include "app/pipeline/sources.h"
#include "shardscope_version.h"
#include "simulator/pipeline_shifting_buffer.h"
#include "views/analysis_model.h"
#include "views/narrow_layout.h"
#include "views/pipeline_stages.h"
#include "views/shifting_buffer_view.h"
#include "views/document_model.h"
#include "views/graph_view.h"
#include "views/inspector_panel.h"
#include "views/item_models.h"
#include "views/job_indicator.h"
#include "views/job_tracker.h"
#include "views/mesh_view.h"
#include "views/partitioned_view.h"
#include "views/collective_stepper.h"
#include "views/comparison_view.h"
#include "views/simulation_view.h"
#include "views/strategies_panel.h"
#include "views/timeline_view.h"
#include "simulator/trace_export.h"

namespace shardscope::gui {

using namespace ::shardscope::sim;

namespace {

QString Q(const std::string& s) { return QString::fromStdString(s); }
constexpr int kMaxRecent = 10;

bool IsProjectPath(const QString& path) { return IsProjectFile(path); }

QPalette DarkPalette() {
  QPalette p;
  const QColor window(45, 47, 51), base(32, 34, 37), text(225, 227, 230), button(55, 58, 63);
  p.setColor(QPalette::Window, window);
  p.setColor(QPalette::WindowText, text);
  p.setColor(QPalette::Base, base);
  p.setColor(QPalette::AlternateBase, QColor(42, 44, 48));
  p.setColor(QPalette::ToolTipBase, QColor(60, 63, 68));
  p.setColor(QPalette::ToolTipText, text);
  p.setColor(QPalette::PlaceholderText, QColor(140, 140, 140));
  p.setColor(QPalette::Text, text);
  p.setColor(QPalette::Button, button);
  p.setColor(QPalette::ButtonText, text);
  p.setColor(QPalette::BrightText, Qt::white);
  p.setColor(QPalette::Light, QColor(80, 83, 88));
  p.setColor(QPalette::Midlight, QColor(66, 69, 74));
  p.setColor(QPalette::Mid, QColor(95, 98, 104));
  p.setColor(QPalette::Dark, QColor(25, 26, 28));
  p.setColor(QPalette::Shadow, Qt::black);
  p.setColor(QPalette::Highlight, QColor(66, 133, 214));
  p.setColor(QPalette::HighlightedText, Qt::white);
  p.setColor(QPalette::Link, QColor(110, 170, 255));
  p.setColor(QPalette::LinkVisited, QColor(170, 140, 255));
  p.setColor(QPalette::Disabled, QPalette::Text, QColor(120, 120, 120));
  p.setColor(QPalette::Disabled, QPalette::ButtonText, QColor(120, 120, 120));
  p.setColor(QPalette::Disabled, QPalette::WindowText, QColor(120, 120, 120));
  return p;
}

}  // namespace

MainWindow::MainWindow(QWidget* parent)
    : QMainWindow(parent), session_(new Session(this)), doc_(session_->document()) {
  setObjectName("mainWindow");
  setWindowIcon(QIcon(":/icons/shardscope.svg"));
  setDockNestingEnabled(true);
  graph_ = new views::GraphPane(this);
  graph_->setJobTracker(session_->jobs());
  graph_->setDocument(doc_);
  createModes();
  createDocks();
  createActions();
  createMenus();

  // The summary is permanent and messages have a label of their own: a message never covers it.
  // Both elide with "…" where the window is narrow (1024 px), the whole text in the tooltip.
  summary_label_ = new views::ElidingLabel;
  summary_label_->setObjectName("moduleSummary");
  message_label_ = new views::ElidingLabel;
  message_label_->setObjectName("statusMessage");
  message_timer_ = new QTimer(this);
  message_timer_->setSingleShot(true);
  connect(message_timer_, &QTimer::timeout, message_label_, [this] { message_label_->setFullText(QString()); });
  engine_label_ = new QLabel;
  jobs_ = new views::JobIndicator;
  jobs_->setJobTracker(session_->jobs());
  statusBar()->addWidget(summary_label_, 3);
  statusBar()->addWidget(message_label_, 2);
  statusBar()->addPermanentWidget(engine_label_);
  statusBar()->addPermanentWidget(jobs_);

  connect(doc_, &views::DocumentModel::moduleReset, this, [this] {
    updateTitle();
    updateStatus();
    message_label_->setFullText(QString());
  });
  connect(doc_, &views::DocumentModel::modifiedChanged, this, &MainWindow::updateTitle);
  connect(doc_, &views::DocumentModel::filePathChanged, this, &MainWindow::updateTitle);
  connect(doc_, &views::DocumentModel::shardingsUpdated, this, [this] {
    updateStatus();
    if (select_interesting_pending_) pickInteresting();
  });
  connect(doc_, &views::DocumentModel::annotationsChanged, this, &MainWindow::updateStatus);
  connect(doc_, &views::DocumentModel::meshChanged, this, &MainWindow::updateStatus);
  connect(session_, &Session::loadFinished, this, [this](const QString& path, bool ok, const QString& message) {
    if (!ok) {
      message_label_->setFullText(QString());
      showError("Cannot open file", message);
      return;
    }
    addRecentFile(path);
    showMessage(QString("Opened %1").arg(path), 5000);
  });
  connect(doc_, &views::DocumentModel::errorOccurred, this, [this](const QString& m) { showMessage(m, 8000); });
  connect(mesh_, &views::MeshView::message, this, [this](const QString& m) { showMessage(m, 8000); });
  dock_shares_timer_ = new QTimer(this);
  dock_shares_timer_->setSingleShot(true);
  dock_shares_timer_->setInterval(60);
  connect(dock_shares_timer_, &QTimer::timeout, this, &MainWindow::applyDockShares);
  // 1500x940, or what the screen has room for (a 1024x768 laptop): a larger window would leave its
  // docks off the screen.
  QSize initial(1500, 940);
  if (const QScreen* screen = QGuiApplication::primaryScreen())
    initial = initial.boundedTo(screen->availableGeometry().size());
  resize(initial);
  updateTitle();
  updateStatus();
}

MainWindow::~MainWindow() {
  // ~QWidget hides the docks after this object's members are gone: nothing may reach them then
  // (the Strategies dock's visibility handler reads the layout state).
  disconnect(strategies_dock_, nullptr, this, nullptr);
}

void MainWindow::showMessage(const QString& text, int ms) {
  message_label_->setFullText(text);
  if (ms > 0) message_timer_->start(ms);
  else message_timer_->stop();
}

// ---- Modes and docks -----------------------------------------------------------------------------------

void MainWindow::createModes() {
  modes_ = new QTabWidget(this);
  modes_->setObjectName("modes");
  modes_->setDocumentMode(true);
  modes_->setTabPosition(QTabWidget::North);

  // Graph: the graph, and the partitioned program beside it on demand.
  graph_split_ = new QSplitter(Qt::Horizontal);
  graph_split_->setObjectName("graphSplit");
  graph_split_->setChildrenCollapsible(false);
  graph_split_->addWidget(graph_);
  graph_->setMinimumSize(320, 200);
  modes_->addTab(graph_split_, "Graph");

  partitioned_ = new views::PartitionedView;
  partitioned_->setModels(doc_, session_->analysis(), session_->jobs());
  partitioned_->setAutoUpdate(true);
  partitioned_->setMinimumSize(320, 200);
  partitioned_page_ = new QWidget;
  auto* pcol = new QVBoxLayout(partitioned_page_);
  pcol->setContentsMargins(0, 0, 0, 0);
  pcol->addWidget(partitioned_);
  modes_->addTab(partitioned_page_, "Partitioned");

  simulation_ = new views::SimulationView;
  simulation_->setModels(doc_, session_->analysis(), session_->runs());
  modes_->addTab(simulation_, "Simulation");

  comparison_ = new views::ComparisonView;
  comparison_->setModels(doc_, session_->analysis(), session_->runs());
  modes_->addTab(comparison_, "Compare");

  // Teaching: step through a collective on the mesh (opened from the partitioned program's list).
  teaching_ = new views::CollectiveStepper;
  teaching_->setChips(session_->analysis()->chips(), session_->analysis()->defaultChip());
  // A pipelined module's shifting buffer above the collective, one iteration at a time.
  shifting_buffer_ = new views::ShiftingBufferView;
  auto* teaching_page = new QWidget;
  auto* teaching_col = new QVBoxLayout(teaching_page);
  teaching_col->setContentsMargins(0, 0, 0, 0);
  teaching_col->setSpacing(0);
  teaching_col->addWidget(shifting_buffer_);
  teaching_col->addWidget(teaching_, 1);
  auto* teaching_scroll = new QScrollArea;  // never cut off: scrolls when the window is small
  teaching_scroll->setObjectName("teachingScroll");
  teaching_scroll->setWidget(teaching_page);
  teaching_scroll->setWidgetResizable(true);
  teaching_scroll->setFrameShape(QFrame::NoFrame);
  modes_->addTab(teaching_scroll, "Teaching");
  setCentralWidget(modes_);

  const char* tips[] = {"The module's graph: annotate tensors, follow propagation (Ctrl+1)",
                        "The program every device runs, its collectives and the numerical check (Ctrl+2)",
                        "One simulated step: per-device timelines, memory, the runs kept (Ctrl+3)",
                        "Two runs side by side (Ctrl+4)", "Step through a collective on the mesh (Ctrl+5)"};
  for (int i = 0; i < modes_->count(); ++i) modes_->setTabToolTip(i, tips[i]);

  // Only the page shown sets the central area's minimum height: a tab widget otherwise takes the
  // largest of all its pages' (the Compare page's two timelines, chart and table: about 400 px),
  // and at 1024x700 the docks below (Strategies, Instructions) could not grow past ~200 px even
  // while the 200 px graph is what is shown.
  auto fit_modes_to_page = [this](int index) {
    for (int i = 0; i < modes_->count(); ++i) {
      const QSizePolicy::Policy p = i == index ? QSizePolicy::Preferred : QSizePolicy::Ignored;
      modes_->widget(i)->setSizePolicy(p, p);
    }
    modes_->updateGeometry();
  };
  fit_modes_to_page(modes_->currentIndex());
  connect(modes_, &QTabWidget::currentChanged, this, [this, fit_modes_to_page](int index) {
    fit_modes_to_page(index);
    const Mode m = static_cast<Mode>(index);
    if (m == Mode::kPartitioned) {
      if (side_by_side_) setSideBySide(false);
      partitioned_->partitionNow();
    }
    if (m == Mode::kTeaching) raiseTeaching();
  });
  connect(partitioned_, &views::PartitionedView::sideBySideRequested, this, [this] { setSideBySide(!side_by_side_); });
  connect(partitioned_, &views::PartitionedView::exportRequested, this, [this] {
    const QString path = askExportPath("Export partitioned HLO", ".spmd.hlo", "HLO text (*.hlo)");
    if (!path.isEmpty()) exportPartitionedHlo(path, [this, path](const QString& error) { reportExport(path, error); });
  });
  connect(simulation_, &views::SimulationView::compareRequested, this, [this](qint64 a, qint64 b) {
    if (comparison_->compareRuns(a, b)) setMode(Mode::kCompare);
  });
  // Double-clicking a collective of the partitioned program steps through it on the document's mesh.
  connect(partitioned_, &views::PartitionedView::collectiveActivated, this,
          [this](const InsertedCollective& c, const std::vector<std::vector<int64_t>>& participants) { teach(c, participants); });
  // A new module: the teaching panel forgets the old one's collective.
  connect(doc_, &views::DocumentModel::moduleReset, this, [this] {
    teaching_->clear();
    updateShiftingBuffer();
    if (side_by_side_) setSideBySide(false);
  });
}

MainWindow::Mode MainWindow::mode() const { return static_cast<Mode>(modes_->currentIndex()); }

void MainWindow::setMode(Mode mode) {
  if (modes_->currentIndex() == static_cast<int>(mode)) {
    if (mode == Mode::kTeaching) raiseTeaching();
    return;
  }
  modes_->setCurrentIndex(static_cast<int>(mode));  // currentChanged does the rest
}

void MainWindow::setSideBySide(bool on) {
  if (on == side_by_side_) {
    if (on) setMode(Mode::kGraph);
    return;
  }
  side_by_side_ = on;
  if (on) {
    graph_split_->addWidget(partitioned_);  // reparented from its own page
    const int half = std::max(200, graph_split_->width() / 2);
    graph_split_->setSizes({half, half});
    setMode(Mode::kGraph);
    partitioned_->partitionNow();
  } else {
    partitioned_page_->layout()->addWidget(partitioned_);
  }
  partitioned_->show();
  if (side_by_side_act_) side_by_side_act_->setChecked(on);
}

void MainWindow::teach(const InsertedCollective& c, const std::vector<std::vector<int64_t>>& participants) {
  // With the document's module and shardings, an all-to-all's pieces are named in its tensor's terms.
  teaching_->showCollective(c, participants, doc_->mesh(), doc_->module(),
                            [this](const Instruction& i) { return doc_->sharding(i.id()); });
  setMode(Mode::kTeaching);
}

bool MainWindow::teachFromList(const QString& name) {
  views::CollectiveTableModel* list = partitioned_->collectives();
  for (int row = 0; row < list->rowCount(); ++row) {
    const InsertedCollective* c = list->at(row);
    if (c && (Q(c->instruction) == name || Q(c->origin) == name)) {
      teach(*c, list->participants(row));
      teaching_->setStep(std::min(1, teaching_->stepCount()));  // the first transfers drawn
      return true;
    }
  }
  return false;
}

bool MainWindow::teachCollective(const QString& name) {
  if (teachFromList(name)) return true;
  if (!doc_->module()) return false;
  // Not partitioned yet (or not with these shardings): once the list is filled.
  auto* once = new QObject(this);
  connect(partitioned_->collectives(), &QAbstractItemModel::modelReset, once, [this, name, once] {
    if (partitioned_->collectives()->rowCount() == 0) return;  // cleared before the new program
    if (!teachFromList(name)) showMessage(QString("No collective \"%1\" in the partitioned program").arg(name), 0);
    once->deleteLater();
  });
  partitioned_->partitionNow();
  return true;
}

void MainWindow::updateShiftingBuffer() {
  const Module* module = doc_->module();
  std::optional<views::PipelineStageLayout> stages;
  if (module)
    stages = views::DerivePipelineStages(*module, doc_->mesh(), [this](const Instruction& i) { return doc_->sharding(i.id()); });
  if (!stages) {
    shifting_buffer_->setSchedule(std::nullopt);
    return;
  }
  auto n = sim::PipelineMicrobatches(*module);
  if (!n.ok()) {
    shifting_buffer_->setSchedule(std::nullopt);
    return;
  }
  sim::ShiftingBufferSettings settings;
  settings.stages = stages->stages;
  settings.microbatches = *n;
  settings.layers_per_stage = stages->layers_per_stage;
  settings.circular = stages->circular;
  settings.mesh = doc_->mesh();
  settings.stage_axis = stages->axis;
  auto plan = sim::PlanShiftingBuffer(settings);
  if (!plan.ok()) {
    shifting_buffer_->setSchedule(std::nullopt);
    showMessage("Shifting buffer: " + Q(plan.error().message), 0);
    return;
  }
  // Same pipeline as shown: keep the iteration the user stepped to.
  const bool same = shifting_buffer_->hasSchedule() && shifting_buffer_->schedule()->trips == plan->trips &&
                    shifting_buffer_->schedule()->settings.stages == settings.stages &&
                    shifting_buffer_->schedule()->settings.circular == settings.circular;
  const int keep = shifting_buffer_->currentIteration();
  shifting_buffer_->setSchedule(std::move(*plan));
  if (same) shifting_buffer_->setIteration(keep);
}

void MainWindow::raiseTeaching() {
  updateShiftingBuffer();
  if (!teaching_->hasPlan() && shifting_buffer_->hasSchedule()) {
    // A pipelined module: the collective to step through is the shift itself, one
    // collective-permute along the stage axis, with the per-device bytes of the buffer it moves.
    const sim::ShiftingBufferSchedule& plan = *shifting_buffer_->schedule();
    views::TeachingRequest r;
    r.kind = sim::CollectiveKind::kCollectivePermute;
    r.mesh = doc_->mesh();
    r.pairs = plan.iterations.front().device_pairs;
    r.pipeline_shift = true;
    r.title = std::string("The shift of the shifting buffer: one collective-permute, every stage to the next") +
              (plan.settings.circular ? " (the last wraps round to the first)" : "");
    if (const Instruction* shift = doc_->module()->FindInstruction("shift"); shift && shift->shape().IsArray()) {
      double bytes = static_cast<double>(shift->shape().ByteSize());
      if (const auto sh = doc_->sharding(shift->id()); sh && sh->IsTiled()) {
        const auto shard = sh->ShardShape(shift->shape().dims);
        for (size_t k = 0; k < shard.size() && k < shift->shape().dims.size(); ++k)
          if (shift->shape().dims[k] > 0) bytes *= static_cast<double>(shard[k]) / static_cast<double>(shift->shape().dims[k]);
      }
      r.operand_bytes = bytes;
    }
    if (teaching_->setRequest(r)) teaching_->setStep(std::min(1, teaching_->stepCount()));
  }
  if (!teaching_->hasPlan()) {
    // Nothing chosen yet: an example, part-way through, so there is something to see.
    teaching_->showExample("all-reduce");
    teaching_->setStep(std::min(3, teaching_->stepCount()));
  }
  if (modes_->currentIndex() != static_cast<int>(Mode::kTeaching)) {
    modes_->setCurrentIndex(static_cast<int>(Mode::kTeaching));
  }
  // Its keys (→, ←, Space) work at once, whatever had the focus before.
  teaching_->setFocus(Qt::OtherFocusReason);
}

void MainWindow::createDocks() {
  auto make_dock = [this](const QString& title, const QString& name, QWidget* w, Qt::DockWidgetArea area) {
    auto* dock = new QDockWidget(title, this);
    dock->setObjectName(name);
    dock->setWidget(w);
    addDockWidget(area, dock);
    return dock;
  };
  mesh_ = new views::MeshView;
  mesh_->setDocument(doc_);
  mesh_->setAnalysis(session_->analysis());
  mesh_dock_ = make_dock("Mesh", "meshDock", mesh_, Qt::RightDockWidgetArea);

  inspector_ = new views::InspectorPanel;
  inspector_->setDocument(doc_);
  inspector_->setAnalysis(session_->analysis());
  inspector_->setMinimumSize(200, 120);
  inspector_dock_ = make_dock("Inspector \u2014 why", "inspectorDock", inspector_, Qt::RightDockWidgetArea);
  splitDockWidget(mesh_dock_, inspector_dock_, Qt::Vertical);

  // Instruction table with a filter.
  auto* table_box = new QWidget;
  auto* tcol = new QVBoxLayout(table_box);
  tcol->setContentsMargins(0, 0, 0, 0);
  auto* filter = new QLineEdit;
  filter->setPlaceholderText("Filter instructions (name, opcode, shape, sharding)");
  filter->setClearButtonEnabled(true);
  tcol->addWidget(filter);
  table_model_ = new views::InstructionTableModel(this);
  table_model_->setDocument(doc_);
  table_proxy_ = new QSortFilterProxyModel(this);
  table_proxy_->setSourceModel(table_model_);
  table_proxy_->setFilterKeyColumn(-1);
  table_proxy_->setFilterCaseSensitivity(Qt::CaseInsensitive);
  table_proxy_->setSortRole(views::InstructionTableModel::kSortRole);
  table_ = new QTableView;
  table_->setObjectName("instructionTable");
  table_->setModel(table_proxy_);
  table_->setSortingEnabled(true);
  table_->sortByColumn(-1, Qt::AscendingOrder);
  table_->setSelectionBehavior(QAbstractItemView::SelectRows);
  table_->setSelectionMode(QAbstractItemView::SingleSelection);
  table_->verticalHeader()->hide();
  table_->verticalHeader()->setDefaultSectionSize(table_->fontMetrics().height() + 6);
  table_->horizontalHeader()->setStretchLastSection(true);
  table_->setAlternatingRowColors(true);
  table_->setMinimumHeight(60);
  tcol->addWidget(table_);
  connect(filter, &QLineEdit::textChanged, table_proxy_, &QSortFilterProxyModel::setFilterFixedString);
  connect(table_->selectionModel(), &QItemSelectionModel::currentRowChanged, this, [this](const QModelIndex& current) {
    if (!current.isValid()) return;
    const qint64 id = table_proxy_->data(current, views::InstructionTableModel::kIdRole).toLongLong();
    doc_->select(id);
  });
  // One row selected, the document's: the selection model's current row and its selection move together.
  connect(doc_, &views::DocumentModel::selectionChanged, this, [this](qint64 id) {
    const int row = table_model_->rowOf(id);
    QSignalBlocker block(table_->selectionModel());
    if (row < 0) {
      table_->selectionModel()->clear();
      table_->viewport()->update();
      return;
    }
    const QModelIndex proxy = table_proxy_->mapFromSource(table_model_->index(row, 0));
    if (!proxy.isValid()) {
      table_->selectionModel()->clear();
      table_->viewport()->update();
      return;
    }
    table_->selectionModel()->setCurrentIndex(proxy, QItemSelectionModel::ClearAndSelect | QItemSelectionModel::Rows);
    table_->viewport()->update();
    table_->scrollTo(proxy);
  });
  connect(doc_, &views::DocumentModel::moduleReset, this, [this] {
    table_->selectionModel()->clear();
    table_->resizeColumnsToContents();
  });
  table_dock_ = make_dock("Instructions", "instructionsDock", table_box, Qt::BottomDockWidgetArea);

  undo_view_ = new QUndoView(doc_->undoStack());
  undo_view_->setEmptyLabel("Opened");
  history_dock_ = make_dock("Edit history", "historyDock", undo_view_, Qt::BottomDockWidgetArea);
  tabifyDockWidget(table_dock_, history_dock_);
  // The strategy search: a tab beside the table (it takes more height when raised: showView).
  strategies_ = new views::StrategiesPanel;
  search_jobs_ = new SearchJobs(session_, strategies_, session_);
  connect(search_jobs_, &SearchJobs::candidateOpened, this,
          [this](int row, const QString& label) { showMessage(QString("Opened candidate %1: %2").arg(row + 1).arg(label)); });
  strategies_dock_ = make_dock("Strategies", "strategiesDock", strategies_, Qt::BottomDockWidgetArea);
  tabifyDockWidget(history_dock_, strategies_dock_);
  // Raised by a click on its tab: the room View > Strategies gives it (grown, never shrunk; not
  // while the window is set up or a saved layout is restored). Another tab raised gets the height
  // the area had before back.
  connect(strategies_dock_, &QDockWidget::visibilityChanged, this, [this](bool visible) {
    if (!layout_settled_) return;
    if (visible) QTimer::singleShot(0, this, [this] { giveStrategiesRoom(/*only_grow=*/true); });
    else if (strategies_room_before_ >= 0) QTimer::singleShot(0, this, &MainWindow::giveBackStrategiesRoom);
  });
  table_dock_->raise();

  // The mesh and the inspector take the whole right-hand column; the table sits under the modes.
  setCorner(Qt::BottomRightCorner, Qt::RightDockWidgetArea);
  setCorner(Qt::TopRightCorner, Qt::RightDockWidgetArea);
  default_state_ = saveState(1);
}

// ---- Actions and menus --------------------------------------------------------------------------------

void MainWindow::createActions() {
  open_act_ = new QAction("&Open HLO\u2026", this);
  open_act_->setShortcut(QKeySequence::Open);
  connect(open_act_, &QAction::triggered, this, &MainWindow::openFileDialog);
  open_project_act_ = new QAction("Open &Project\u2026", this);
  open_project_act_->setShortcut(QKeySequence("Ctrl+Shift+O"));
  connect(open_project_act_, &QAction::triggered, this, &MainWindow::openProjectDialog);
  close_act_ = new QAction("&Close", this);
  close_act_->setShortcut(QKeySequence::Close);
  connect(close_act_, &QAction::triggered, this, [this] {
    if (maybeSave()) session_->close();
  });
  save_act_ = new QAction("&Save Project", this);
  save_act_->setShortcut(QKeySequence::Save);
  connect(save_act_, &QAction::triggered, this, &MainWindow::saveProject);
  save_as_act_ = new QAction("Save Project &As\u2026", this);
  save_as_act_->setShortcut(QKeySequence::SaveAs);
  connect(save_as_act_, &QAction::triggered, this, &MainWindow::saveProjectAs);
  export_hlo_act_ = new QAction("Annotated &HLO\u2026", this);
  connect(export_hlo_act_, &QAction::triggered, this, [this] {
    const QString path = askExportPath("Export annotated HLO", ".hlo", "HLO text (*.hlo)");
    if (!path.isEmpty()) reportExport(path, exportAnnotatedHlo(path));
  });
  export_spmd_act_ = new QAction("&Partitioned HLO\u2026", this);
  connect(export_spmd_act_, &QAction::triggered, this, [this] {
    const QString path = askExportPath("Export partitioned HLO", ".spmd.hlo", "HLO text (*.hlo)");
    if (!path.isEmpty()) exportPartitionedHlo(path, [this, path](const QString& error) { reportExport(path, error); });
  });
  export_trace_act_ = new QAction("Run as &Trace (Perfetto)\u2026", this);
  connect(export_trace_act_, &QAction::triggered, this, [this] {
    const QString path = askExportPath("Export the run as a Chrome/Perfetto trace", ".trace.json", "Trace JSON (*.json)");
    if (!path.isEmpty()) reportExport(path, exportRunTrace(path));
  });
  export_csv_act_ = new QAction("Run as &CSV\u2026", this);
  connect(export_csv_act_, &QAction::triggered, this, [this] {
    const QString path = askExportPath("Export the run's timeline as CSV", ".timeline.csv", "CSV (*.csv)");
    if (!path.isEmpty()) reportExport(path, exportRunCsv(path));
  });
  export_image_act_ = new QAction("&Graph Image\u2026", this);
  connect(export_image_act_, &QAction::triggered, this, [this] {
    const QString path = askExportPath("Export graph image", ".graph.png", "PNG image (*.png);;SVG image (*.svg)");
    if (!path.isEmpty()) reportExport(path, exportGraphImageTo(path));
  });
  export_chart_act_ = new QAction("Chart &Image\u2026", this);
  connect(export_chart_act_, &QAction::triggered, this, [this] {
    const QString path = askExportPath("Export the charts of this view", ".chart.png", "PNG image (*.png);;SVG image (*.svg)");
    if (!path.isEmpty()) reportExport(path, exportChartImageTo(path));
  });
  quit_act_ = new QAction("&Quit", this);
  quit_act_->setShortcut(QKeySequence::Quit);
  quit_act_->setMenuRole(QAction::QuitRole);
  connect(quit_act_, &QAction::triggered, this, &QWidget::close);

  undo_act_ = doc_->undoStack()->createUndoAction(this, "&Undo");
  undo_act_->setShortcut(QKeySequence::Undo);
  redo_act_ = doc_->undoStack()->createRedoAction(this, "&Redo");
  redo_act_->setShortcut(QKeySequence::Redo);
  find_act_ = new QAction("&Find\u2026", this);
  find_act_->setShortcut(QKeySequence::Find);
  connect(find_act_, &QAction::triggered, this, [this] {
    setMode(Mode::kGraph);
    graph_->focusSearch();
  });
  auto* find_next = new QAction("Find &Next", this);
  find_next->setShortcut(QKeySequence::FindNext);
  connect(find_next, &QAction::triggered, graph_, &views::GraphPane::findNext);
  auto* find_prev = new QAction("Find Pre&vious", this);
  find_prev->setShortcut(QKeySequence::FindPrevious);
  connect(find_prev, &QAction::triggered, graph_, &views::GraphPane::findPrevious);
  addAction(find_next);
  addAction(find_prev);
  find_act_->setData(QVariant::fromValue<QObject*>(find_next));  // keep for the menu
  fit_act_ = new QAction("&Fit Graph", this);
  fit_act_->setShortcut(QKeySequence("Ctrl+0"));
  connect(fit_act_, &QAction::triggered, graph_->view(), &views::GraphView::fitAll);
  zoom_in_act_ = new QAction("Zoom &In", this);
  zoom_in_act_->setShortcuts({QKeySequence::ZoomIn, QKeySequence("Ctrl+=")});
  connect(zoom_in_act_, &QAction::triggered, graph_->view(), &views::GraphView::zoomIn);
  zoom_out_act_ = new QAction("Zoom &Out", this);
  zoom_out_act_->setShortcut(QKeySequence::ZoomOut);
  connect(zoom_out_act_, &QAction::triggered, graph_->view(), &views::GraphView::zoomOut);
  reset_zoom_act_ = new QAction("&Actual Size", this);
  reset_zoom_act_->setShortcut(QKeySequence("Ctrl+9"));
  connect(reset_zoom_act_, &QAction::triggered, graph_->view(), &views::GraphView::resetZoom);
  partition_act_ = new QAction("&Partition Now", this);
  partition_act_->setShortcut(QKeySequence("Ctrl+P"));
  connect(partition_act_, &QAction::triggered, this, [this] {
    if (!side_by_side_) setMode(Mode::kPartitioned);
    partitioned_->partitionNow();
  });
  side_by_side_act_ = new QAction("&Side by Side: Original and Partitioned", this);
  side_by_side_act_->setCheckable(true);
  side_by_side_act_->setShortcut(QKeySequence("Ctrl+Shift+B"));
  connect(side_by_side_act_, &QAction::triggered, this, [this](bool on) { setSideBySide(on); });
  reset_layout_act_ = new QAction("&Reset Layout", this);
  connect(reset_layout_act_, &QAction::triggered, this, &MainWindow::resetLayout);
  about_act_ = new QAction("&About ShardScope", this);
  about_act_->setMenuRole(QAction::AboutRole);
  connect(about_act_, &QAction::triggered, this, &MainWindow::about);
}

void MainWindow::createMenus() {
  QMenu* file = menuBar()->addMenu("&File");
  file->addAction(open_act_);
  file->addAction(open_project_act_);
  recent_menu_ = file->addMenu("Open &Recent");
  connect(recent_menu_, &QMenu::aboutToShow, this, &MainWindow::rebuildRecentMenu);
  examples_menu_ = file->addMenu("&Examples");
  rebuildExamplesMenu();
  file->addAction(close_act_);
  file->addSeparator();
  file->addAction(save_act_);
  file->addAction(save_as_act_);
  file->addSeparator();
  QMenu* exports = file->addMenu("E&xport");
  exports->addAction(export_hlo_act_);
  exports->addAction(export_spmd_act_);
  exports->addSeparator();
  exports->addAction(export_trace_act_);
  exports->addAction(export_csv_act_);
  exports->addSeparator();
  exports->addAction(export_image_act_);
  exports->addAction(export_chart_act_);
  connect(exports, &QMenu::aboutToShow, this, [this] {
    const bool module = doc_->hasModule();
    export_hlo_act_->setEnabled(module);
    export_spmd_act_->setEnabled(module);
    const bool run = simulation_->timeline()->run() != nullptr;
    export_trace_act_->setEnabled(run);
    export_csv_act_->setEnabled(run);
    export_image_act_->setEnabled(module);
    export_chart_act_->setEnabled(mode() == Mode::kSimulation || mode() == Mode::kCompare || mode() == Mode::kTeaching);
  });
  file->addSeparator();
  file->addAction(quit_act_);

  QMenu* edit = menuBar()->addMenu("&Edit");
  edit->addAction(undo_act_);
  edit->addAction(redo_act_);
  edit->addSeparator();
  edit->addAction(find_act_);

  view_menu_ = menuBar()->addMenu("&View");
  const char* names[] = {"&Graph", "&Partitioned Program", "&Simulation", "&Compare Runs", "&Teaching"};
  for (int i = 0; i < modes_->count(); ++i) {
    QAction* a = view_menu_->addAction(names[i]);
    a->setShortcut(QKeySequence(QString("Ctrl+%1").arg(i + 1)));
    connect(a, &QAction::triggered, this, [this, i] { setMode(static_cast<Mode>(i)); });
  }
  view_menu_->addAction(side_by_side_act_);
  view_menu_->addSeparator();
  view_menu_->addAction(fit_act_);
  view_menu_->addAction(zoom_in_act_);
  view_menu_->addAction(zoom_out_act_);
  view_menu_->addAction(reset_zoom_act_);
  view_menu_->addSeparator();
  auto* expand = view_menu_->addAction("E&xpand All Scopes");
  connect(expand, &QAction::triggered, graph_->view(), &views::GraphView::requestExpandAll);
  auto* collapse = view_menu_->addAction("C&ollapse All Scopes");
  connect(collapse, &QAction::triggered, graph_->view(), &views::GraphView::collapseAll);
  view_menu_->addSeparator();
  QMenu* docks = view_menu_->addMenu("&Panels");
  for (QDockWidget* d : {mesh_dock_, inspector_dock_, table_dock_, history_dock_, strategies_dock_})
    docks->addAction(d->toggleViewAction());
  view_menu_->addAction(reset_layout_act_);
  QMenu* theme = view_menu_->addMenu("T&heme");
  auto* group = new QActionGroup(this);
  for (const auto& [key, label] : {std::pair<QString, QString>{"system", "&System"}, {"light", "&Light"}, {"dark", "&Dark"}}) {
    QAction* a = theme->addAction(label);
    a->setCheckable(true);
    a->setData(key);
    group->addAction(a);
    connect(a, &QAction::triggered, this, [this, key = key] { applyTheme(key); });
  }
  connect(theme, &QMenu::aboutToShow, this, [this, group] {
    for (QAction* a : group->actions()) a->setChecked(a->data().toString() == theme_);
  });

  QMenu* tools = menuBar()->addMenu("&Tools");
  tools->addAction(partition_act_);
  QAction* simulate = tools->addAction("&Simulate Step");
  simulate->setShortcut(QKeySequence("Ctrl+R"));
  connect(simulate, &QAction::triggered, this, [this] { showView("simulation"); });
  QAction* compare = tools->addAction("&Compare With Replicated");
  compare->setToolTip("Simulate the module replicated (A) and as annotated (B), and compare the two runs");
  compare->setShortcut(QKeySequence("Ctrl+Shift+R"));
  connect(compare, &QAction::triggered, this, [this] { showView("compare"); });

  QMenu* help = menuBar()->addMenu("&Help");
  help->addAction(about_act_);
  auto* about_qt = help->addAction("About &Qt");
  connect(about_qt, &QAction::triggered, qApp, &QApplication::aboutQt);

  // Window-wide shortcuts: they work whatever has the focus, floating docks included.
  for (QAction* a : findChildren<QAction*>()) {
    if (!a->shortcut().isEmpty()) a->setShortcutContext(Qt::ApplicationShortcut);
  }
}

void MainWindow::rebuildExamplesMenu() {
  examples_menu_->clear();
  const auto examples = pipeline::Examples();
  if (examples.empty()) {
    examples_menu_->addAction("(no examples in this build)")->setEnabled(false);
    return;
  }
  for (const auto& e : examples) {
    QAction* a = examples_menu_->addAction(Q(e.name));
    a->setToolTip(Q(e.description));
    a->setStatusTip(Q(e.description));
    const QString name = Q(e.name);
    connect(a, &QAction::triggered, this, [this, name] {
      if (!maybeSave()) return;
      QString error;
      if (!openExample(name, &error)) showError("Cannot open example", error);
    });
  }
  // The published configurations `shardscope-cli reproduce` checks, at the paper's sizes: a case
  // per submenu, a column per entry (those built from the zoo).
  QMenu* papers = examples_menu_->addMenu("Paper configurations");
  papers->setToolTipsVisible(true);
  for (const pipeline::ReproduceCase& c : pipeline::ReproduceCases()) {
    QMenu* sub = nullptr;
    for (const pipeline::ReproduceColumn& col : c.columns) {
      if (!col.weight_update_sharding_case.empty() || !col.book_collective_case.empty()) continue;
      if (!sub) {
        sub = papers->addMenu(Q(c.name + " \u2014 " + c.title));
        sub->setToolTipsVisible(true);
      }
      QStringList published;
      for (const pipeline::PublishedFigure& f : col.published)
        published << Q(std::string(pipeline::ReproduceMetricName(f.metric)));
      const QString tip = QString("%1 (%2): the zoo's %3 at the paper's sizes on %4, %5 device%6 per %7 chip; the "
                                  "paper publishes its %8. Opening it simulates one step (real sizes: it may take a "
                                  "while); `shardscope-cli reproduce %9` prints published vs simulated.")
                              .arg(Q(col.label), Q(c.source), Q(col.model), Q(col.mesh))
                              .arg(col.cores_per_chip)
                              .arg(col.cores_per_chip == 1 ? "" : "s")
                              .arg(Q(col.chip), published.join(", "), Q(c.name));
      QAction* a = sub->addAction(Q(col.label));
      a->setToolTip(tip);
      a->setStatusTip(tip);
      const QString case_name = Q(c.name), column = Q(col.label);
      connect(a, &QAction::triggered, this, [this, case_name, column] {
        if (!maybeSave()) return;
        QString error;
        if (!openPaperConfiguration(case_name, column, &error)) showError("Cannot open the configuration", error);
      });
    }
  }
}

bool MainWindow::openPaperConfiguration(const QString& case_name, const QString& column, QString* error) {
  QString chip;
  Status st = session_->loadPaperConfiguration(case_name, column, &chip);
  if (!st.ok()) {
    *error = Q(st.error().message);
    return false;
  }
  showMessage(QString("Opened %1, %2 (the paper's sizes); simulating one step on %3\u2026").arg(case_name, column, chip), 8000);
  search_jobs_->offerPaperSearch(case_name, column);
  // Each step simulated of this configuration as opened (the paper's chip, the document unedited)
  // shows the paper's figures beside it; an edit or another module ends that.
  for (const QMetaObject::Connection& c : paper_comparison_) disconnect(c);
  paper_comparison_.clear();
  views::AnalysisModel* analysis = session_->analysis();
  auto stop = [this] {
    for (const QMetaObject::Connection& c : paper_comparison_) disconnect(c);
    paper_comparison_.clear();
  };
  for (auto signal : {&views::DocumentModel::moduleReset, &views::DocumentModel::meshChanged,
                      &views::DocumentModel::annotationsChanged, &views::DocumentModel::sliceOverrideChanged})
    paper_comparison_.push_back(connect(doc_, signal, this, stop));
  paper_comparison_.push_back(connect(doc_, &views::DocumentModel::weightUpdateShardingChanged, this, stop));
  paper_comparison_.push_back(connect(analysis, &views::AnalysisModel::simulationUpdated, this, [this, analysis, case_name, column] {
    const views::SimulatedStep& step = analysis->simulation();
    // A step at other sizes than the configuration's (the simulation panel's Sizes) is not the paper's.
    if (!step.ok() || !step.sizes.empty()) return;
    auto found = pipeline::FindReproduceCase(case_name.toStdString());
    if (!found.ok()) return;
    for (const pipeline::ReproduceColumn& col : (*found)->columns) {
      if (col.label != column.toStdString() || step.run->inputs.chip_preset != col.chip) continue;
      const pipeline::ReproducedColumn r = pipeline::CompareWithPublished(col, *step.run);
      QList<views::SimulationView::PublishedRow> rows;
      for (const pipeline::ReproducedValue& v : r.values) {
        views::SimulationView::PublishedRow row;
        row.figure = Q(std::string(pipeline::ReproduceMetricName(v.published.metric)));
        row.published = Q(pipeline::ReproduceFigureText(v.published.metric, v.published.value));
        row.simulated = Q(pipeline::ReproduceFigureText(v.published.metric, v.simulated));
        row.difference = Q(pipeline::ReproduceDifferenceText(v));
        row.within = v.within_tolerance;
        rows.push_back(row);
      }
      simulation_->setPublishedComparison(step.run->created_unix_ms,
                                          QString("%1, %2; %3").arg(case_name, column, Q((*found)->source)), rows);
    }
  }));
  simulation_->setChip(chip);
  analysis->requestSimulation(chip);
  return true;
}

void MainWindow::rebuildRecentMenu() {
  recent_menu_->clear();
  const QStringList files = QSettings().value("recentFiles").toStringList();
  for (const QString& f : files) {
    QAction* a = recent_menu_->addAction(QFileInfo(f).fileName());
    a->setToolTip(f);
    a->setStatusTip(f);
    connect(a, &QAction::triggered, this, [this, f] {
      if (!maybeSave()) return;
      openInBackground(f);
    });
  }
  if (files.isEmpty()) recent_menu_->addAction("(none)")->setEnabled(false);
  recent_menu_->addSeparator();
  QAction* clear = recent_menu_->addAction("Clear List");
  clear->setEnabled(!files.isEmpty());
  connect(clear, &QAction::triggered, this, [] { QSettings().remove("recentFiles"); });
}

void MainWindow::addRecentFile(const QString& path) {
  if (batch_) return;
  QSettings s;
  QStringList files = s.value("recentFiles").toStringList();
  const QString abs = QFileInfo(path).absoluteFilePath();
  files.removeAll(abs);
  files.prepend(abs);
  while (files.size() > kMaxRecent) files.removeLast();
  s.setValue("recentFiles", files);
}

// ---- Opening and saving -------------------------------------------------------------------------------

bool MainWindow::openPath(const QString& path, QString* error) {
  if (!QFileInfo::exists(path)) {
    *error = QString("%1: no such file").arg(path);
    return false;
  }
  Status st = IsProjectPath(path) ? session_->loadProject(path) : session_->loadHloFile(path);
  if (!st.ok()) {
    *error = Q(st.error().message);
    return false;
  }
  addRecentFile(path);
  showMessage(QString("Opened %1").arg(path), 5000);
  return true;
}

bool MainWindow::openExample(const QString& name, QString* error) {
  Status st = session_->loadExample(name);
  if (!st.ok()) {
    *error = Q(st.error().message);
    return false;
  }
  return true;
}

void MainWindow::openFileDialog() {
  if (!maybeSave()) return;
  const QString dir = QSettings().value("lastDir").toString();
  const QString path = QFileDialog::getOpenFileName(this, "Open HLO module", dir,
                                                    "HLO text (*.hlo *.txt);;ShardScope project (*.shardscope *.json);;All files (*)");
  if (path.isEmpty()) return;
  QSettings().setValue("lastDir", QFileInfo(path).absolutePath());
  openInBackground(path);
}

void MainWindow::openInBackground(const QString& path) {
  // Read and parsed on the worker (large modules take a while); loadFinished says how it went.
  showMessage(QString("Opening %1\u2026").arg(path), 0);
  session_->requestLoadFile(path);
}

void MainWindow::openProjectDialog() {
  if (!maybeSave()) return;
  const QString dir = QSettings().value("lastDir").toString();
  const QString path = QFileDialog::getOpenFileName(this, "Open project", dir, "ShardScope project (*.shardscope *.json);;All files (*)");
  if (path.isEmpty()) return;
  QSettings().setValue("lastDir", QFileInfo(path).absolutePath());
  openInBackground(path);
}

bool MainWindow::saveProjectTo(const QString& path) {
  Status st = session_->saveProject(path);
  if (!st.ok()) {
    showError("Cannot save project", Q(st.error().message));
    return false;
  }
  addRecentFile(path);
  updateTitle();
  showMessage(QString("Saved %1").arg(path), 5000);
  return true;
}

bool MainWindow::saveProject() {
  if (doc_->sourceKind() == "project" || IsProjectPath(doc_->filePath())) return saveProjectTo(doc_->filePath());
  return saveProjectAs();
}

bool MainWindow::saveProjectAs() {
  QString suggestion = doc_->filePath().isEmpty() ? doc_->title() : QFileInfo(doc_->filePath()).completeBaseName();
  const QString dir = QSettings().value("lastDir").toString();
  QString path = QFileDialog::getSaveFileName(this, "Save project", QDir(dir).filePath(suggestion + ".shardscope"),
                                              "ShardScope project (*.shardscope)");
  if (path.isEmpty()) return false;
  if (QFileInfo(path).suffix().isEmpty()) path += ".shardscope";
  QSettings().setValue("lastDir", QFileInfo(path).absolutePath());
  return saveProjectTo(path);
}

// ---- Exports -----------------------------------------------------------------------------------------------

QString MainWindow::suggestedExportPath(const QString& suffix) const {
  return ExportPath(*doc_, QSettings().value("lastDir").toString(), suffix);
}

QString MainWindow::askExportPath(const QString& title, const QString& suffix, const QString& filter) {
  if (batch_) return QString();
  const QString path = QFileDialog::getSaveFileName(this, title, suggestedExportPath(suffix), filter);
  if (!path.isEmpty()) QSettings().setValue("lastDir", QFileInfo(path).absolutePath());
  return path;
}

void MainWindow::reportExport(const QString& path, const QString& error) {
  if (!error.isEmpty()) {
    showError("Cannot export", error);
    return;
  }
  showMessage(QString("Wrote %1").arg(path), 6000);
}

QString MainWindow::exportAnnotatedHlo(const QString& path) {
  if (!doc_->hasModule()) return "No module is open.";
  Status st = WriteFileAtomically(path, doc_->moduleText(/*with_inferred=*/true).toUtf8());
  return st.ok() ? QString() : Q(st.error().message);
}

void MainWindow::exportPartitionedHlo(const QString& path, std::function<void(const QString&)> done) {
  if (!done) done = [](const QString&) {};
  if (!doc_->hasModule()) {
    done("No module is open.");
    return;
  }
  views::AnalysisModel* analysis = session_->analysis();
  auto write = [path, done, analysis] {
    const views::PartitionedProgram& p = analysis->partition();
    if (!p.ok()) {
      done(QString("The module could not be partitioned: %1").arg(Q(p.message)));
      return;
    }
    Status st = WriteFileAtomically(path, QByteArray::fromStdString(p.Text()));
    done(st.ok() ? QString() : Q(st.error().message));
  };
  if (analysis->partition().ok() && analysis->partition().edit_generation == doc_->editGeneration()) {
    write();
    return;
  }
  // Not current: partition first, then write (once; a cancel or a new module drops the export).
  auto links = std::make_shared<std::vector<QMetaObject::Connection>>();
  auto finish = [links] {
    for (const auto& c : *links) QObject::disconnect(c);
  };
  links->push_back(connect(analysis, &views::AnalysisModel::partitionUpdated, this, [this, finish, write, analysis] {
    if (analysis->partition().edit_generation != doc_->editGeneration()) return;  // an older edit's
    finish();
    write();
  }));
  links->push_back(connect(analysis, &views::AnalysisModel::analysisReset, this, [finish, done] {
    finish();
    done("The export was dropped: another module was opened.");
  }));
  links->push_back(connect(analysis, &views::AnalysisModel::partitionCancelled, this, [finish, done] {
    finish();
    done("The export was dropped: partitioning was cancelled.");
  }));
  showMessage("Partitioning before the export\u2026", 0);
  partitioned_->partitionNow();
}

QString MainWindow::exportRunTrace(const QString& path) {
  const RunResult* run = simulation_->timeline()->run();
  if (!run) return "No simulation run is shown: simulate a step first (Ctrl+R).";
  Status st = sim::ExportChromeTrace(*run, path.toStdString());
  return st.ok() ? QString() : Q(st.error().message);
}

QString MainWindow::exportRunCsv(const QString& path) {
  const RunResult* run = simulation_->timeline()->run();
  if (!run) return "No simulation run is shown: simulate a step first (Ctrl+R).";
  Status st = sim::ExportCsv(*run, "timeline", path.toStdString());
  return st.ok() ? QString() : Q(st.error().message);
}

QString MainWindow::exportGraphImageTo(const QString& path) {
  views::GraphView* view = mode() == Mode::kPartitioned ? partitioned_->graphPane()->view() : graph_->view();
  if (!doc_->hasModule()) return "No module is open.";
  Status st = ExportSceneImage(view->scene(), view->palette().color(QPalette::Base), path);
  return st.ok() ? QString() : Q(st.error().message);
}

QString MainWindow::exportChartImageTo(const QString& path) {
  QWidget* what = nullptr;
  switch (mode()) {
    case Mode::kSimulation: what = simulation_; break;
    case Mode::kCompare: what = comparison_; break;
    case Mode::kTeaching: what = teaching_; break;
    default: return "Charts are exported from the Simulation, Compare or Teaching view.";
  }
  Status st = ExportWidgetImage(what, path);
  return st.ok() ? QString() : Q(st.error().message);
}

bool MainWindow::maybeSave() {
  if (batch_ || !doc_->isModified()) return true;
  const auto answer = QMessageBox::warning(this, "ShardScope", "The annotations were changed. Save the project first?",
                                           QMessageBox::Save | QMessageBox::Discard | QMessageBox::Cancel);
  if (answer == QMessageBox::Save) return saveProject();
  return answer == QMessageBox::Discard;
}

void MainWindow::showError(const QString& title, const QString& message) {
  if (batch_) {
    qWarning("%s: %s", qPrintable(title), qPrintable(message));
    return;
  }
  QMessageBox box(QMessageBox::Critical, title, message, QMessageBox::Ok, this);
  box.setTextInteractionFlags(Qt::TextSelectableByMouse);
  box.exec();
}

void MainWindow::about() {
  QMessageBox::about(this, "About ShardScope",
                     QString("<h3>ShardScope %1</h3><p>Explore how an ML computation graph is sharded across a device "
                             "mesh: annotate a few tensors, watch GSPMD sharding propagation complete the rest, see the "
                             "partitioned per-device program and its collectives.</p><p>Follows <i>GSPMD: General and "
                             "Scalable Parallelization for ML Computation Graphs</i> (Xu et al.) and <i>How To Scale "
                             "Your Model</i>, part 3.</p><p>Graph layout by Graphviz; built with Qt %2.</p>")
                         .arg(SHARDSCOPE_VERSION, qVersion()));
}

// ---- Views and readiness ------------------------------------------------------------------------------

bool MainWindow::showView(const QString& name) {
  const QString n = name.toLower();
  QDockWidget* dock = nullptr;
  if (n == "graph") {
    setMode(Mode::kGraph);
    graph_->view()->setFocus();
    return true;
  }
  if (n == "teaching" || n == "teach") {
    setMode(Mode::kTeaching);
    return true;
  }
  if (n == "shifting-buffer" || n == "pipeline") {
    // The teaching panel with a pipelined module's shifting buffer, a few iterations in (the
    // pipeline filling up: some stages still on padding).
    setMode(Mode::kTeaching);
    if (!shifting_buffer_->hasSchedule()) {
      showMessage("No shifting buffer: the module is not pipelined (no weights stacked along a stage dim sharded over "
                  "one mesh axis of its size, as the zoo's pipelined-transformer has)", 0);
      return true;
    }
    shifting_buffer_->setIteration(std::min(1, shifting_buffer_->iterationCount() - 1));
    shifting_buffer_->setFocus(Qt::OtherFocusReason);
    return true;
  }
  if (n == "side-by-side" || n == "sidebyside" || n == "both") {
    setSideBySide(true);
    return true;
  }
  if (n == "partitioned" || n == "spmd" || n == "collectives") {
    setMode(Mode::kPartitioned);
    partitioned_->partitionNow();
    if (n == "collectives") partitioned_->showCollectives();
    return true;
  }
  if (n == "simulation" || n == "timeline") {
    setMode(Mode::kSimulation);
    simulation_->simulate();
    return true;
  }
  if (n == "compare") {
    // Two configurations side by side: A the module replicated on every device, B its shardings.
    setMode(Mode::kCompare);
    const QString chip = QString::fromStdString(session_->analysis()->defaultChip());
    simulation_->simulateAndCompare({{chip, /*replicated=*/true}, {chip, /*replicated=*/false}});
    return true;
  }
  if (n == "mesh" || n == "halo") dock = mesh_dock_;
  if (n == "halo") mesh_->revealHalo();  // a convolution's halo, under the device grid
  else if (n == "inspector" || n == "why") dock = inspector_dock_;
  else if (n == "instructions" || n == "table") dock = table_dock_;
  else if (n == "history") dock = history_dock_;
  else if (n == "strategies" || n == "search" || n == "strategies-compare") dock = strategies_dock_;
  if (!dock) return false;
  dock->show();
  dock->raise();
  if (dock == strategies_dock_ && !dock->isFloating()) {
    // The table, the chart and the comparison need room (after the first show's default sizes).
    QTimer::singleShot(0, this, [this] { giveStrategiesRoom(/*only_grow=*/false); });
  }
  return true;
}

void MainWindow::giveStrategiesRoom(bool only_grow) {
  if (strategies_dock_->isFloating() || !strategies_dock_->isVisible()) return;
  // Never more than the modes leave (a window that grows past the screen helps nobody).
  const int room = height() - menuBar()->height() - statusBar()->height() - modes_->minimumSizeHint().height() - 24;
  const int h = std::min(std::clamp(height() * 50 / 100, 260, 600), std::max(160, room));
  if (only_grow && strategies_dock_->height() >= h) return;
  if (strategies_room_before_ < 0) strategies_room_before_ = strategies_dock_->height();
  resizeDocks({strategies_dock_}, {h}, Qt::Vertical);
  layout()->activate();  // the height the area really took (the separators and the modes' minimum)
  strategies_room_given_ = strategies_dock_->height();
  strategies_room_frame_ = h - strategies_room_given_;  // what resizeDocks counts beyond the dock (the tab bar)
  table_share_ = double(h) / std::max(1, height());
}

void MainWindow::giveBackStrategiesRoom() {
  // A tab that is not raised stays "visible" to Qt; what shows is what has a visible region. (A
  // hide while the area is laid out again is no tab switch: the panel still shows.)
  if (strategies_room_before_ < 0 || !strategies_dock_->visibleRegion().isEmpty()) return;
  const int before = std::exchange(strategies_room_before_, -1);
  QDockWidget* shown = nullptr;
  for (QDockWidget* d : tabifiedDockWidgets(strategies_dock_)) {
    if (!d->isFloating() && !d->visibleRegion().isEmpty()) shown = d;  // the tab raised in its place
  }
  // A height the user dragged to since (or a window resized) is theirs: kept.
  if (!shown || std::abs(shown->height() - strategies_room_given_) > 16) return;
  resizeDocks({shown}, {before + strategies_room_frame_}, Qt::Vertical);
  table_share_ = double(before + strategies_room_frame_) / std::max(1, height());
}

bool MainWindow::selectInstruction(const QString& name) {
  const Instruction* inst = doc_->findInstruction(name);
  if (!inst) return false;
  doc_->select(inst->id());
  return true;
}

void MainWindow::selectInteresting() {
  if (!doc_->module() || doc_->selected() >= 0) return;
  select_interesting_pending_ = true;
  // Propagation may have run already; else the pick waits for its results (shardingsUpdated).
  if (doc_->resultGeneration() > 0 && doc_->propagatedEdit() == doc_->editGeneration()) pickInteresting();
}

void MainWindow::pickInteresting() {
  select_interesting_pending_ = false;
  const Module* m = doc_->module();
  if (!m || !m->entry() || doc_->selected() >= 0) return;
  const Instruction* pick = nullptr;
  for (const auto& inst : m->entry()->instructions()) {
    if (inst->opcode() != Opcode::kDot) continue;
    if (!pick) pick = inst.get();
    if (doc_->origin(inst->id()) == views::TensorOrigin::kInferred) {
      pick = inst.get();
      break;
    }
  }
  if (pick) doc_->select(pick->id());
}

bool MainWindow::isReady() const {
  return session_->idle() && !graph_->view()->isLayoutPending() && !partitioned_->graphPane()->view()->isLayoutPending();
}

void MainWindow::whenReady(int timeout_ms, std::function<void(bool)> done) {
  // Ready once nothing has happened for a short settle time (follow-up jobs, such as the second
  // simulation of a comparison or the layout of the partitioned program, start within it).
  auto* settle = new QTimer(this);
  settle->setSingleShot(true);
  settle->setInterval(150);
  auto* deadline = new QTimer(this);
  deadline->setSingleShot(true);
  auto finish = std::make_shared<std::function<void(bool)>>();
  *finish = [settle, deadline, done = std::move(done), finish](bool ok) mutable {
    settle->stop();
    deadline->stop();
    settle->deleteLater();
    deadline->deleteLater();
    auto call = std::move(done);
    *finish = [](bool) {};
    if (call) call(ok);
  };
  auto poke = [this, settle] {
    if (isReady()) settle->start();
    else settle->stop();
  };
  connect(settle, &QTimer::timeout, this, [this, finish] {
    if (isReady()) (*finish)(true);
  });
  connect(deadline, &QTimer::timeout, this, [finish] { (*finish)(false); });
  connect(session_->jobs(), &views::JobTracker::jobsChanged, settle, poke);
  connect(session_, &Session::idleChanged, settle, poke);
  connect(graph_->view(), &views::GraphView::layoutFinished, settle, poke);
  connect(partitioned_->graphPane()->view(), &views::GraphView::layoutFinished, settle, poke);
  connect(doc_, &views::DocumentModel::shardingsUpdated, settle, poke);
  deadline->start(timeout_ms);
  QTimer::singleShot(0, settle, poke);
}

// ---- Title, status, settings ------------------------------------------------------------------------------
// ---- Title, status, settings ------------------------------------------------------------------------------

void MainWindow::updateTitle() {
  const QString title = doc_->title();
  setWindowTitle(title.isEmpty() ? QString("ShardScope") : QString("%1[*] \u2014 ShardScope").arg(title));
  setWindowModified(doc_->hasModule() && doc_->isModified());
  const bool module = doc_->hasModule();
  for (QAction* a : {close_act_, save_act_, save_as_act_, partition_act_}) a->setEnabled(module);
}

void MainWindow::updateStatus() {
  const Module* m = doc_->module();
  if (!m) {
    summary_label_->setFullText("No module open \u2014 File \u25B8 Open (Ctrl+O) or File \u25B8 Examples");
    engine_label_->clear();
    return;
  }
  int64_t sharded = 0, total = 0;
  for (const auto& comp : m->computations()) {
    for (const auto& inst : comp->instructions()) {
      ++total;
      if (doc_->sharding(inst->id())) ++sharded;
    }
  }
  const int64_t devices = doc_->mesh().num_devices();
  const QString text = QString("%1 \u00B7 %2 instructions in %3 computation%4 \u00B7 mesh %5 (%6 device%7) \u00B7 %8 "
                               "annotations \u00B7 %9/%2 sharded")
                           .arg(Q(m->name()))
                           .arg(total)
                           .arg(m->computations().size())
                           .arg(m->computations().size() == 1 ? "" : "s")
                           .arg(Q(doc_->mesh().ToString()))
                           .arg(devices)
                           .arg(devices == 1 ? "" : "s")
                           .arg(doc_->annotations().size())
                           .arg(sharded);
  summary_label_->setFullText(text);
  engine_label_->setText(doc_->propagationSummary());
}

void MainWindow::applyTheme(const QString& theme) {
  static const QPalette system_palette = QApplication::palette();
  static const QString system_style = QApplication::style()->name();
  theme_ = theme;
  if (theme == "dark") {
    QApplication::setStyle(QStyleFactory::create("Fusion"));
    QApplication::setPalette(DarkPalette());
  } else if (theme == "light") {
    QApplication::setStyle(QStyleFactory::create("Fusion"));
    QApplication::setPalette(QApplication::style()->standardPalette());
  } else {
    theme_ = "system";
    if (QStyle* s = QStyleFactory::create(system_style)) QApplication::setStyle(s);
    QApplication::setPalette(system_palette);
  }
}

// Version 2 of the saved window state: the modes replaced the docks of the partitioned program,
// the simulation and the teaching panel (a version-1 state is ignored).
constexpr int kStateVersion = 2;

void MainWindow::restoreSettings() {
  QSettings s;
  if (s.contains("geometry")) restoreGeometry(s.value("geometry").toByteArray());
  if (s.contains("windowState")) state_restored_ = restoreState(s.value("windowState").toByteArray(), kStateVersion);
  if (s.contains("mode")) setMode(static_cast<Mode>(std::clamp(s.value("mode").toInt(), 0, modes_->count() - 1)));
  const QString theme = s.value("theme", "system").toString();
  if (theme != "system") applyTheme(theme);
}

void MainWindow::saveSettings() {
  if (batch_) return;
  QSettings s;
  s.setValue("geometry", saveGeometry());
  s.setValue("windowState", saveState(kStateVersion));
  s.setValue("mode", static_cast<int>(mode()));
  s.setValue("theme", theme_);
}

void MainWindow::resetLayout() {
  if (side_by_side_) setSideBySide(false);
  restoreState(default_state_, 1);
  for (QDockWidget* d : {mesh_dock_, inspector_dock_, table_dock_, history_dock_, strategies_dock_}) {
    d->setFloating(false);
    d->show();
  }
  table_dock_->raise();
  mesh_share_ = table_share_ = 0;
  applyDefaultDockSizes();
  setMode(Mode::kGraph);
  showMessage("Layout reset", 3000);
}

void MainWindow::applyDefaultDockSizes() {
  const int w = std::max(800, width()), h = std::max(500, height());
  // The right column: the mesh over the inspector, about a third of the width (at most 460 px).
  const int right = std::clamp(w * 30 / 100, 300, 460);
  resizeDocks({mesh_dock_}, {right}, Qt::Horizontal);
  resizeDocks({mesh_dock_, inspector_dock_}, {h * 55 / 100, h * 45 / 100}, Qt::Vertical);
  // The instruction table under the modes: a fifth of the height.
  const int table = std::clamp(h * 20 / 100, 110, 260);
  resizeDocks({table_dock_}, {table}, Qt::Vertical);
  // (The docks take these sizes at the next layout: the shares are the targets, not today's sizes.)
  mesh_share_ = double(right) / std::max(1, width());
  table_share_ = double(table) / std::max(1, height());
}

void MainWindow::noteDockShares(QSize window) {
  if (!window.isValid()) window = size();
  if (window.width() <= 0 || window.height() <= 0) return;
  if (!mesh_dock_->isFloating() && mesh_dock_->isVisible()) mesh_share_ = double(mesh_dock_->width()) / window.width();
  if (!table_dock_->isFloating() && table_dock_->isVisible()) table_share_ = double(table_dock_->height()) / window.height();
}

void MainWindow::applyDockShares() {
  if (mesh_share_ > 0 && !mesh_dock_->isFloating() && mesh_dock_->isVisible()) {
    resizeDocks({mesh_dock_}, {std::max(220, static_cast<int>(mesh_share_ * width()))}, Qt::Horizontal);
  }
  if (table_share_ > 0 && !table_dock_->isFloating() && table_dock_->isVisible()) {
    resizeDocks({table_dock_}, {std::max(90, static_cast<int>(table_share_ * height()))}, Qt::Vertical);
  }
}

void MainWindow::showEvent(QShowEvent* event) {
  QMainWindow::showEvent(event);
  if (!first_show_done_) {
    first_show_done_ = true;
    if (!state_restored_) QTimer::singleShot(0, this, &MainWindow::applyDefaultDockSizes);
    else QTimer::singleShot(0, this, [this] { noteDockShares(); });
    QTimer::singleShot(0, this, [this] { layout_settled_ = true; });
  }
}

void MainWindow::resizeEvent(QResizeEvent* event) {
  QMainWindow::resizeEvent(event);
  // The docks keep their share of the window (what the user arranged comes back when the window
  // grows again), once the dock layout has taken the new size.
  if (first_show_done_) dock_shares_timer_->start();
}

bool MainWindow::event(QEvent* event) {
  // A separator between docks was dragged (the window gets the mouse): that is the user's arrangement.
  if (event->type() == QEvent::MouseButtonRelease) {
    QMetaObject::invokeMethod(this, [this] { noteDockShares(); }, Qt::QueuedConnection);
  }
  return QMainWindow::event(event);
}

void MainWindow::closeEvent(QCloseEvent* event) {
  if (!maybeSave()) {
    event->ignore();
    return;
  }
  saveSettings();
  event->accept();
}

}  // namespace shardscope::gui
