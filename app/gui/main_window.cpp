#include "app/gui/main_window.h"

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
#include <QStatusBar>
#include <QStyle>
#include <QStyleFactory>
#include <QTableView>
#include <QTimer>
#include <QUndoStack>
#include <QUndoView>
#include <QVBoxLayout>

#include "app/gui/project_file.h"
#include "app/gui/session.h"
#include "app/pipeline/sources.h"
#include "shardscope_version.h"
#include "views/analysis_model.h"
#include "views/document_model.h"
#include "views/graph_view.h"
#include "views/inspector_panel.h"
#include "views/item_models.h"
#include "views/job_indicator.h"
#include "views/job_tracker.h"
#include "views/mesh_view.h"
#include "views/partitioned_view.h"
#include "views/collective_stepper.h"
#include "views/simulation_view.h"

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
  setCentralWidget(graph_);
  createDocks();
  createActions();
  createMenus();

  summary_label_ = new QLabel;
  engine_label_ = new QLabel;
  jobs_ = new views::JobIndicator;
  jobs_->setJobTracker(session_->jobs());
  statusBar()->addWidget(summary_label_, 1);
  statusBar()->addPermanentWidget(engine_label_);
  statusBar()->addPermanentWidget(jobs_);

  connect(doc_, &views::DocumentModel::moduleReset, this, [this] {
    updateTitle();
    updateStatus();
  });
  connect(doc_, &views::DocumentModel::modifiedChanged, this, &MainWindow::updateTitle);
  connect(doc_, &views::DocumentModel::shardingsUpdated, this, [this] {
    updateStatus();
    if (select_interesting_pending_) pickInteresting();
  });
  connect(doc_, &views::DocumentModel::annotationsChanged, this, &MainWindow::updateStatus);
  connect(doc_, &views::DocumentModel::meshChanged, this, &MainWindow::updateStatus);
  connect(session_, &Session::loadFinished, this, [this](const QString& path, bool ok, const QString& message) {
    if (!ok) {
      statusBar()->clearMessage();
      showError("Cannot open file", message);
      return;
    }
    addRecentFile(path);
    statusBar()->showMessage(QString("Opened %1").arg(path), 5000);
  });
  connect(doc_, &views::DocumentModel::errorOccurred, this, [this](const QString& m) { statusBar()->showMessage(m, 8000); });
  connect(mesh_, &views::MeshView::message, this, [this](const QString& m) { statusBar()->showMessage(m, 8000); });
  resize(1500, 940);
  updateTitle();
  updateStatus();
}

MainWindow::~MainWindow() = default;

// ---- Docks ------------------------------------------------------------------------------------------

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
  mesh_dock_ = make_dock("Mesh", "meshDock", mesh_, Qt::RightDockWidgetArea);

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
  tcol->addWidget(table_);
  connect(filter, &QLineEdit::textChanged, table_proxy_, &QSortFilterProxyModel::setFilterFixedString);
  connect(table_->selectionModel(), &QItemSelectionModel::currentRowChanged, this, [this](const QModelIndex& current) {
    if (!current.isValid()) return;
    const qint64 id = table_proxy_->data(current, views::InstructionTableModel::kIdRole).toLongLong();
    doc_->select(id);
  });
  connect(doc_, &views::DocumentModel::selectionChanged, this, [this](qint64 id) {
    const int row = table_model_->rowOf(id);
    if (row < 0) {
      table_->clearSelection();
      return;
    }
    const QModelIndex proxy = table_proxy_->mapFromSource(table_model_->index(row, 0));
    if (!proxy.isValid() || table_->currentIndex().row() == proxy.row()) return;
    QSignalBlocker block(table_->selectionModel());
    table_->selectionModel()->setCurrentIndex(proxy, QItemSelectionModel::ClearAndSelect | QItemSelectionModel::Rows);
    table_->scrollTo(proxy);
  });
  connect(doc_, &views::DocumentModel::moduleReset, this, [this] { table_->resizeColumnsToContents(); });
  table_dock_ = make_dock("Instructions", "instructionsDock", table_box, Qt::BottomDockWidgetArea);

  inspector_ = new views::InspectorPanel;
  inspector_->setDocument(doc_);
  inspector_->setAnalysis(session_->analysis());
  inspector_dock_ = make_dock("Inspector \u2014 why", "inspectorDock", inspector_, Qt::BottomDockWidgetArea);
  splitDockWidget(table_dock_, inspector_dock_, Qt::Horizontal);
  undo_view_ = new QUndoView(doc_->undoStack());
  undo_view_->setEmptyLabel("Opened");
  history_dock_ = make_dock("Edit history", "historyDock", undo_view_, Qt::BottomDockWidgetArea);
  tabifyDockWidget(inspector_dock_, history_dock_);
  inspector_dock_->raise();

  partitioned_ = new views::PartitionedView;
  partitioned_->setModels(doc_, session_->analysis(), session_->jobs());
  partitioned_->setAutoUpdate(true);
  partitioned_dock_ = make_dock("Partitioned program", "partitionedDock", partitioned_, Qt::BottomDockWidgetArea);
  tabifyDockWidget(table_dock_, partitioned_dock_);

  simulation_ = new views::SimulationView;
  simulation_->setModels(doc_, session_->analysis(), session_->runs());
  simulation_dock_ = make_dock("Simulation", "simulationDock", simulation_, Qt::BottomDockWidgetArea);
  tabifyDockWidget(partitioned_dock_, simulation_dock_);
  table_dock_->raise();
  createTeachingDock();

  // The mesh takes the whole right-hand column; the table and the inspector sit under the graph.
  setCorner(Qt::BottomRightCorner, Qt::RightDockWidgetArea);
}

void MainWindow::createTeachingDock() {
  teaching_ = new views::CollectiveStepper;
  teaching_->setChips(session_->analysis()->chips(), session_->analysis()->defaultChip());
  teaching_dock_ = new QDockWidget("Teaching", this);
  teaching_dock_->setObjectName("teachingDock");
  // In a scroll area: the panel needs room for the mesh and the formula, but it shares a column
  // with the inspector, which must be able to stay narrow while the timeline or the SPMD graph is wide.
  auto* teaching_scroll = new QScrollArea;
  teaching_scroll->setWidget(teaching_);
  teaching_scroll->setWidgetResizable(true);
  teaching_scroll->setFrameShape(QFrame::NoFrame);
  teaching_dock_->setWidget(teaching_scroll);
  addDockWidget(Qt::BottomDockWidgetArea, teaching_dock_);
  tabifyDockWidget(inspector_dock_, teaching_dock_);
  inspector_dock_->raise();
  // Double-clicking a collective of the partitioned program steps through it on the document's mesh.
  connect(partitioned_, &views::PartitionedView::collectiveActivated, this,
          [this](const InsertedCollective& c, const std::vector<std::vector<int64_t>>& participants) {
            teaching_->showCollective(c, participants, doc_->mesh());
            raiseTeachingDock();
          });
}

void MainWindow::raiseTeachingDock() {
  if (!teaching_->hasPlan()) {
    // Nothing chosen yet (--view teaching): an example, part-way through, so there is something to see.
    teaching_->showExample("all-reduce");
    teaching_->setStep(std::min(3, teaching_->stepCount()));
  }
  teaching_dock_->show();
  teaching_dock_->raise();
  // Room for the mesh and the formula: the bottom row grows and the teaching panel takes most of it.
  arrange([this] {
    const int bottom = std::max(400, width() - mesh_dock_->width());
    resizeDocks({table_dock_, inspector_dock_, history_dock_, teaching_dock_},
                {bottom * 26 / 100, bottom * 74 / 100, bottom * 74 / 100, bottom * 74 / 100}, Qt::Horizontal);
    resizeDocks({table_dock_}, {height() * 68 / 100}, Qt::Vertical);
  });
}

void MainWindow::arrange(std::function<void()> arrangement) {
  arrangement_ = std::move(arrangement);
  arrangement_();
}

// ---- Actions and menus --------------------------------------------------------------------------------

void MainWindow::createActions() {
  open_act_ = new QAction("&Open HLO\u2026", this);
  open_act_->setShortcut(QKeySequence::Open);
  connect(open_act_, &QAction::triggered, this, &MainWindow::openFileDialog);
  open_project_act_ = new QAction("Open &Project\u2026", this);
  open_project_act_->setShortcut(QKeySequence("Ctrl+Shift+O"));
  connect(open_project_act_, &QAction::triggered, this, &MainWindow::openProjectDialog);
  save_act_ = new QAction("&Save Project", this);
  save_act_->setShortcut(QKeySequence::Save);
  connect(save_act_, &QAction::triggered, this, &MainWindow::saveProject);
  save_as_act_ = new QAction("Save Project &As\u2026", this);
  save_as_act_->setShortcut(QKeySequence::SaveAs);
  connect(save_as_act_, &QAction::triggered, this, &MainWindow::saveProjectAs);
  export_hlo_act_ = new QAction("Export Annotated &HLO\u2026", this);
  connect(export_hlo_act_, &QAction::triggered, this, &MainWindow::exportHlo);
  export_image_act_ = new QAction("Export Graph &Image\u2026", this);
  connect(export_image_act_, &QAction::triggered, this, &MainWindow::exportGraphImage);
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
  connect(find_act_, &QAction::triggered, graph_, &views::GraphPane::focusSearch);
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
  reset_zoom_act_->setShortcut(QKeySequence("Ctrl+1"));
  connect(reset_zoom_act_, &QAction::triggered, graph_->view(), &views::GraphView::resetZoom);
  partition_act_ = new QAction("&Partition Now", this);
  partition_act_->setShortcut(QKeySequence("Ctrl+P"));
  connect(partition_act_, &QAction::triggered, this, [this] {
    partitioned_dock_->show();
    partitioned_dock_->raise();
    partitioned_->partitionNow();
  });
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
  file->addSeparator();
  file->addAction(save_act_);
  file->addAction(save_as_act_);
  file->addSeparator();
  file->addAction(export_hlo_act_);
  file->addAction(export_image_act_);
  file->addSeparator();
  file->addAction(quit_act_);

  QMenu* edit = menuBar()->addMenu("&Edit");
  edit->addAction(undo_act_);
  edit->addAction(redo_act_);
  edit->addSeparator();
  edit->addAction(find_act_);

  view_menu_ = menuBar()->addMenu("&View");
  view_menu_->addAction(fit_act_);
  view_menu_->addAction(zoom_in_act_);
  view_menu_->addAction(zoom_out_act_);
  view_menu_->addAction(reset_zoom_act_);
  view_menu_->addSeparator();
  auto* expand = view_menu_->addAction("E&xpand All Scopes");
  connect(expand, &QAction::triggered, graph_->view(), &views::GraphView::expandAll);
  auto* collapse = view_menu_->addAction("&Collapse All Scopes");
  connect(collapse, &QAction::triggered, graph_->view(), &views::GraphView::collapseAll);
  view_menu_->addSeparator();
  QMenu* docks = view_menu_->addMenu("&Panels");
  for (QDockWidget* d : {mesh_dock_, inspector_dock_, table_dock_, partitioned_dock_, simulation_dock_, history_dock_, teaching_dock_}) {
    docks->addAction(d->toggleViewAction());
  }
  QMenu* theme = view_menu_->addMenu("&Theme");
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

  QMenu* help = menuBar()->addMenu("&Help");
  help->addAction(about_act_);
  auto* about_qt = help->addAction("About &Qt");
  connect(about_qt, &QAction::triggered, qApp, &QApplication::aboutQt);
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
  statusBar()->showMessage(QString("Opened %1").arg(path), 5000);
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
  statusBar()->showMessage(QString("Opening %1\u2026").arg(path));
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
  statusBar()->showMessage(QString("Saved %1").arg(path), 5000);
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

void MainWindow::exportHlo() {
  const QString path = QFileDialog::getSaveFileName(this, "Export annotated HLO", doc_->title() + ".hlo", "HLO text (*.hlo)");
  if (path.isEmpty()) return;
  QSaveFile f(path);
  const QByteArray text = doc_->moduleText(/*with_inferred=*/true).toUtf8();
  if (!f.open(QIODevice::WriteOnly) || f.write(text) != text.size() || !f.commit()) {
    showError("Cannot export", QString("%1: %2").arg(path, f.errorString()));
  }
}

void MainWindow::exportGraphImage() {
  const QString path = QFileDialog::getSaveFileName(this, "Export graph image", doc_->title() + ".png", "PNG image (*.png)");
  if (path.isEmpty()) return;
  QGraphicsScene* scene = graph_->view()->scene();
  const QRectF r = scene->sceneRect();
  QImage image(r.size().toSize() * 2, QImage::Format_ARGB32);
  image.fill(graph_->view()->palette().color(QPalette::Base));
  QPainter p(&image);
  p.setRenderHint(QPainter::Antialiasing);
  scene->render(&p, QRectF(QPointF(0, 0), image.size()), r);
  p.end();
  if (!image.save(path)) showError("Cannot export", QString("%1: cannot write the image").arg(path));
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
    graph_->view()->setFocus();
    return true;
  }
  if (n == "teaching" || n == "teach") {
    raiseTeachingDock();
    return true;
  }
  if (n == "mesh") dock = mesh_dock_;
  else if (n == "inspector" || n == "why") dock = inspector_dock_;
  else if (n == "instructions" || n == "table") dock = table_dock_;
  else if (n == "partitioned" || n == "spmd" || n == "collectives") dock = partitioned_dock_;
  else if (n == "simulation" || n == "timeline" || n == "compare") dock = simulation_dock_;
  else if (n == "history") dock = history_dock_;
  if (!dock) return false;
  dock->show();
  dock->raise();
  if (dock == partitioned_dock_ || dock == simulation_dock_) {
    // Room for a graph or a timeline: the bottom row grows and the inspector narrows.
    const int share = dock == partitioned_dock_ ? 45 : 50;
    arrange([this, share] {
      const int bottom = std::max(400, width() - mesh_dock_->width());
      resizeDocks({table_dock_, inspector_dock_, history_dock_}, {bottom * 72 / 100, bottom * 28 / 100, bottom * 28 / 100},
                  Qt::Horizontal);
      resizeDocks({table_dock_}, {height() * share / 100}, Qt::Vertical);
    });
  }
  if (dock == partitioned_dock_) {
    partitioned_->partitionNow();
    if (n == "collectives") partitioned_->showCollectives();
  }
  if (dock == simulation_dock_) {
    if (n == "compare") {
      // Two configurations side by side: A the module replicated on every device, B its shardings.
      const QString chip = QString::fromStdString(session_->analysis()->defaultChip());
      simulation_->simulateAndCompare({{chip, /*replicated=*/true}, {chip, /*replicated=*/false}});
    } else {
      simulation_->simulate();
    }
  }
  return true;
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

void MainWindow::updateTitle() {
  setWindowTitle(QString("%1[*] \u2014 ShardScope").arg(doc_->title()));
  setWindowModified(doc_->isModified());
}

void MainWindow::updateStatus() {
  const Module* m = doc_->module();
  if (!m) {
    summary_label_->setText("No module");
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
  summary_label_->setText(QString("%1 \u00B7 %2 instructions in %3 computation%4 \u00B7 mesh %5 (%6 devices) \u00B7 %7 "
                                  "annotations \u00B7 %8/%2 sharded")
                              .arg(Q(m->name()))
                              .arg(total)
                              .arg(m->computations().size())
                              .arg(m->computations().size() == 1 ? "" : "s")
                              .arg(Q(doc_->mesh().ToString()))
                              .arg(doc_->mesh().num_devices())
                              .arg(doc_->annotations().size())
                              .arg(sharded));
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

void MainWindow::restoreSettings() {
  QSettings s;
  if (s.contains("geometry")) restoreGeometry(s.value("geometry").toByteArray());
  if (s.contains("windowState")) state_restored_ = restoreState(s.value("windowState").toByteArray(), 1);
  const QString theme = s.value("theme", "system").toString();
  if (theme != "system") applyTheme(theme);
}

void MainWindow::saveSettings() {
  if (batch_) return;
  QSettings s;
  s.setValue("geometry", saveGeometry());
  s.setValue("windowState", saveState(1));
  s.setValue("theme", theme_);
}

void MainWindow::applyDefaultDockSizes() {
  const int w = std::max(900, width());
  resizeDocks({mesh_dock_}, {std::min(460, w / 3)}, Qt::Horizontal);
  resizeDocks({table_dock_}, {std::max(220, height() / 4)}, Qt::Vertical);
  const int bottom = w - std::min(460, w / 3);
  // (A tabified dock is resized through the first dock of its tab group.)
  resizeDocks({table_dock_, inspector_dock_, history_dock_}, {bottom * 55 / 100, bottom * 45 / 100, bottom * 45 / 100},
              Qt::Horizontal);
  // A panel raised on purpose (showView) keeps the room it was given.
  if (arrangement_) arrangement_();
}

void MainWindow::showEvent(QShowEvent* event) {
  QMainWindow::showEvent(event);
  if (!first_show_done_) {
    first_show_done_ = true;
    if (!state_restored_) QTimer::singleShot(0, this, &MainWindow::applyDefaultDockSizes);
  }
}

void MainWindow::resizeEvent(QResizeEvent* event) {
  QMainWindow::resizeEvent(event);
  // Until the user arranges the docks, keep the default proportions when the window is resized.
  if (first_show_done_ && !state_restored_ && batch_) applyDefaultDockSizes();
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
