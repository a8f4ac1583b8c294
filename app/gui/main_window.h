// The ShardScope main window: the graph in the centre, docks for the mesh, the inspector ("why"),
// the instruction table, the partitioned program, the simulation and the undo history; menus and
// standard shortcuts; settings (dock layout, recent files, theme) persisted with QSettings.
#pragma once

#include <functional>

#include <QMainWindow>
#include <QStringList>

class QAction;
class QDockWidget;
class QLabel;
class QMenu;
class QSortFilterProxyModel;
class QTableView;
class QUndoView;

namespace shardscope::views {
class DocumentModel;
class GraphPane;
class JobIndicator;
class InspectorPanel;
class InstructionTableModel;
class MeshView;
class PartitionedView;
class SimulationView;
class CollectiveStepper;
}  // namespace shardscope::views

namespace shardscope::gui {

class Session;

class MainWindow : public QMainWindow {
  Q_OBJECT
 public:
  explicit MainWindow(QWidget* parent = nullptr);
  ~MainWindow() override;

  Session* session() const { return session_; }
  views::DocumentModel* document() const { return doc_; }
  views::GraphPane* graphPane() const { return graph_; }

  // Open an HLO file or a project (.shardscope / .json). On failure `error` says why (with
  // FILE:LINE:COLUMN for parse errors) and the current document is unchanged.
  // Opens a file the user chose (HLO or project) off the GUI thread (progress and Cancel in the
  // status bar).
  void openInBackground(const QString& path);
  bool openPath(const QString& path, QString* error);
  bool openExample(const QString& name, QString* error);
  // Raises a dock: "graph", "mesh", "inspector", "instructions", "partitioned", "simulation",
  // "history". Returns false for an unknown name.
  bool showView(const QString& name);
  // Selects an instruction by name; false when there is none.
  bool selectInstruction(const QString& name);
  // Selects the first dot whose sharding propagation inferred (so a new user sees the mesh tiles
  // and a "why" chain at once), as soon as propagation has run; does nothing when something is
  // selected by then.
  void selectInteresting();
  // True when no job runs and the graphs are laid out.
  bool isReady() const;
  // Calls `done(true)` once the window has been ready (no job, no pending layout) for a short settle
  // time, or `done(false)` after `timeout_ms`. Event-driven: it returns at once.
  void whenReady(int timeout_ms, std::function<void(bool)> done);
  // No dialogs, no settings written (for --screenshot).
  void setBatchMode(bool on) { batch_ = on; }
  // "system", "light" or "dark".
  void applyTheme(const QString& theme);
  // Dock layout, geometry and theme from QSettings (not in batch mode).
  void restoreSettings();

 protected:
  void closeEvent(QCloseEvent* event) override;
  void showEvent(QShowEvent* event) override;
  void resizeEvent(QResizeEvent* event) override;

 private:
  void createDocks();
  // Teaching: step through a collective on the mesh (opened from the partitioned program's list).
  void createTeachingDock();
  void raiseTeachingDock();
  void applyDefaultDockSizes();
  void createActions();
  void createMenus();
  void updateTitle();
  void updateStatus();
  void addRecentFile(const QString& path);
  void rebuildRecentMenu();
  void rebuildExamplesMenu();
  bool maybeSave();
  bool saveProjectTo(const QString& path);
  void showError(const QString& title, const QString& message);
  void saveSettings();

  void openFileDialog();
  void openProjectDialog();
  bool saveProject();
  bool saveProjectAs();
  void exportHlo();
  void exportGraphImage();
  void about();

  void pickInteresting();
  // Sizes the docks for a raised panel now and again whenever the default sizes are applied.
  void arrange(std::function<void()> arrangement);

  Session* session_;
  views::DocumentModel* doc_;
  views::GraphPane* graph_;
  views::MeshView* mesh_;
  views::InspectorPanel* inspector_;
  views::InstructionTableModel* table_model_;
  QSortFilterProxyModel* table_proxy_;
  QTableView* table_;
  views::PartitionedView* partitioned_;
  views::SimulationView* simulation_;
  QUndoView* undo_view_;
  QDockWidget *mesh_dock_, *inspector_dock_, *table_dock_, *partitioned_dock_, *simulation_dock_, *history_dock_;
  views::CollectiveStepper* teaching_ = nullptr;
  QDockWidget* teaching_dock_ = nullptr;

  QMenu* recent_menu_ = nullptr;
  QMenu* examples_menu_ = nullptr;
  QMenu* view_menu_ = nullptr;
  QAction *open_act_, *open_project_act_, *save_act_, *save_as_act_, *export_hlo_act_, *export_image_act_, *quit_act_;
  QAction *undo_act_, *redo_act_, *find_act_;
  QAction *fit_act_, *zoom_in_act_, *zoom_out_act_, *reset_zoom_act_, *partition_act_;
  QAction *about_act_;
  QLabel* summary_label_;
  QLabel* engine_label_;
  views::JobIndicator* jobs_;
  QString theme_ = "system";
  bool batch_ = false;
  bool first_show_done_ = false;
  bool state_restored_ = false;
  bool select_interesting_pending_ = false;
  std::function<void()> arrangement_;
};

}  // namespace shardscope::gui
