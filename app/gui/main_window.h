// The ShardScope main window. The centre holds one task at a time, each with the whole central area
// (modes, as Qt Creator or KCachegrind have them): the graph, the partitioned program (or both
// graphs side by side), the simulation (timeline and memory), the comparison of two runs and the
// teaching panel. Docks hold what accompanies every task: the mesh, the inspector ("why"), the
// instruction table and the edit history. Menus and standard shortcuts (window-wide, whatever has
// the focus); exports; settings (window state, recent files, theme) persisted with QSettings, and
// View ▸ Reset Layout to go back to the default arrangement.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include <QMainWindow>
#include <QSize>
#include <QStringList>

class QAction;
class QDockWidget;
class QLabel;
class QMenu;
class QSortFilterProxyModel;
class QSplitter;
class QTableView;
class QTabWidget;
class QTimer;
class QUndoView;

namespace shardscope {
struct InsertedCollective;
}  // namespace shardscope

namespace shardscope::views {
class DocumentModel;
class ElidingLabel;
class GraphPane;
class JobIndicator;
class InspectorPanel;
class InstructionTableModel;
class MeshView;
class PartitionedView;
class SimulationView;
class CollectiveStepper;
class ShiftingBufferView;
class ComparisonView;
class StrategiesPanel;
}  // namespace shardscope::views

namespace shardscope::gui {

class SearchJobs;
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
  // File ▸ Examples ▸ Paper configurations: a published configuration of `reproduce` (its case and
  // column label) opened at the paper's sizes on its slice, and one step of it simulated on its chip.
  bool openPaperConfiguration(const QString& case_name, const QString& column, QString* error);
  // Shows a mode ("graph", "partitioned", "side-by-side", "simulation", "compare", "teaching") or
  // raises a dock ("mesh", "inspector", "instructions", "history", "strategies"). Returns false for an
  // unknown name.
  bool showView(const QString& name);

  // The modes of the central area, in tab order.
  enum class Mode { kGraph, kPartitioned, kSimulation, kCompare, kTeaching };
  Mode mode() const;
  void setMode(Mode mode);
  QTabWidget* modes() const { return modes_; }
  // The original and the partitioned graph next to each other in the Graph mode.
  void setSideBySide(bool on);
  bool sideBySide() const { return side_by_side_; }
  // The default arrangement of the docks and modes (View ▸ Reset Layout).
  void resetLayout();

  // ---- Exports (File ▸ Export); each returns "" on success, else why it failed ----
  QString exportAnnotatedHlo(const QString& path);
  // The partitioned program as HLO text; partitions first when the shown program is not current
  // (the file is written when the partitioner is done: `done` says how it went).
  void exportPartitionedHlo(const QString& path, std::function<void(const QString& error)> done = {});
  // The run shown in the Simulation mode: a Chrome/Perfetto trace (.json) or its timeline as CSV.
  QString exportRunTrace(const QString& path);
  QString exportRunCsv(const QString& path);
  // The graph of the current mode (the whole scene), or the charts of the current mode, as PNG or SVG.
  QString exportGraphImageTo(const QString& path);
  QString exportChartImageTo(const QString& path);
  // Where a save dialog for `suffix` starts (the document's folder, a name from the module).
  QString suggestedExportPath(const QString& suffix) const;

  views::PartitionedView* partitionedView() const { return partitioned_; }
  views::SimulationView* simulationView() const { return simulation_; }
  views::ComparisonView* comparisonView() const { return comparison_; }
  views::CollectiveStepper* teachingPanel() const { return teaching_; }
  // The teaching panel's shifting buffer of a pipelined module (hidden for other modules).
  views::ShiftingBufferView* shiftingBuffer() const { return shifting_buffer_; }
  views::MeshView* meshView() const { return mesh_; }
  views::InspectorPanel* inspector() const { return inspector_; }
  views::StrategiesPanel* strategiesPanel() const { return strategies_; }
  SearchJobs* searchJobs() const { return search_jobs_; }
  QTableView* instructionTable() const { return table_; }
  // The module summary at the left of the status bar (messages have a place of their own).
  views::ElidingLabel* summaryLabel() const { return summary_label_; }
  views::ElidingLabel* messageLabel() const { return message_label_; }
  // A message in the status bar (its own label, never over the summary), cleared after `ms`.
  void showMessage(const QString& text, int ms = 6000);
  // Selects an instruction by name; false when there is none.
  bool selectInstruction(const QString& name);
  // Steps through a collective of the partitioned program in the teaching panel: `name` is its SPMD
  // instruction ("all-to-all.3") or the instruction that caused it (the first collective for it).
  // Opens it at step 1 (the first transfers drawn). Partitions first when needed (then returns true
  // at once and shows it when done); false when it is known that there is no such collective.
  bool teachCollective(const QString& name);
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
  bool event(QEvent* event) override;

 private:
  void createModes();
  void createDocks();
  void raiseTeaching();
  // Plans the document's pipeline's shifting buffer (simulator/pipeline_shifting_buffer.h) for the
  // teaching panel; clears it when the module is not pipelined.
  void updateShiftingBuffer();
  void teach(const InsertedCollective& c, const std::vector<std::vector<int64_t>>& participants);
  bool teachFromList(const QString& name);
  void applyDefaultDockSizes();
  // Keeps the docks' share of the window across resizes (a shrink never sticks).
  void noteDockShares(QSize window = QSize());
  void applyDockShares();
  // The Strategies dock about half the window's height (never more than the modes leave); with
  // only_grow, never smaller than it is.
  void giveStrategiesRoom(bool only_grow);
  // When another tab of the bottom area is raised: the height the Strategies dock took, given back
  // (unless the user has sized the area since).
  void giveBackStrategiesRoom();
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
  void about();
  // A save dialog for an export (not in batch mode): the chosen path, or "" when cancelled.
  QString askExportPath(const QString& title, const QString& suffix, const QString& filter);
  void reportExport(const QString& path, const QString& error);

  void pickInteresting();

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
  std::vector<QMetaObject::Connection> paper_comparison_;  // openPaperConfiguration's watch on its steps
  views::ComparisonView* comparison_;
  views::CollectiveStepper* teaching_ = nullptr;
  views::ShiftingBufferView* shifting_buffer_ = nullptr;
  QUndoView* undo_view_;
  QTabWidget* modes_;
  QSplitter* graph_split_;   // the graph (and the partitioned program, side by side)
  QWidget* partitioned_page_;
  bool side_by_side_ = false;
  views::StrategiesPanel* strategies_;
  SearchJobs* search_jobs_;
  QDockWidget *mesh_dock_, *inspector_dock_, *table_dock_, *history_dock_, *strategies_dock_;
  QByteArray default_state_;  // the docks as first arranged (Reset Layout)
  // The docks' share of the window: mesh width / width, table height / height.
  double mesh_share_ = 0, table_share_ = 0;
  QTimer* dock_shares_timer_ = nullptr;  // applies them once a resize has settled

  QMenu* recent_menu_ = nullptr;
  QMenu* examples_menu_ = nullptr;
  QMenu* view_menu_ = nullptr;
  QAction *open_act_, *open_project_act_, *close_act_, *save_act_, *save_as_act_, *quit_act_;
  QAction *export_hlo_act_, *export_spmd_act_, *export_trace_act_, *export_csv_act_, *export_image_act_, *export_chart_act_;
  QAction *side_by_side_act_, *reset_layout_act_;
  QAction *undo_act_, *redo_act_, *find_act_;
  QAction *fit_act_, *zoom_in_act_, *zoom_out_act_, *reset_zoom_act_, *partition_act_;
  QAction *about_act_;
  views::ElidingLabel* summary_label_;
  views::ElidingLabel* message_label_;
  QTimer* message_timer_;
  QLabel* engine_label_;
  views::JobIndicator* jobs_;
  QString theme_ = "system";
  bool batch_ = false;
  bool first_show_done_ = false;
  bool layout_settled_ = false;  // after the first show's layout (sizes restored or defaulted)
  int strategies_room_before_ = -1;  // the bottom area's height before giveStrategiesRoom grew it
  int strategies_room_given_ = -1;   // and the height it gave
  int strategies_room_frame_ = 0;    // what resizeDocks counted beyond the dock's height
  bool state_restored_ = false;
  bool select_interesting_pending_ = false;
};

}  // namespace shardscope::gui
