// The open document: the module, the device mesh, the user's annotations and the engines' results.
// Views read it and edit it only through its undoable operations. Heavy work (propagation,
// partitioning) runs on a worker thread on a snapshot; every request carries a generation number and
// a result that arrives after something changed is dropped (hotspot's pattern).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <unordered_map>

#include <QObject>
#include <QString>
#include <QStringList>

#include "core/ir/ir.h"
#include "core/sharding/mesh.h"
#include "core/sharding/sharding.h"
#include "core/base/status.h"
#include "views/engine.h"

class QUndoStack;
class QThreadPool;

namespace shardscope::views {

enum class TensorOrigin { kNone, kUser, kInferred };

class Document : public QObject {
  Q_OBJECT

 public:
  explicit Document(QObject* parent = nullptr);
  ~Document() override;

  // ---- Loading and saving (each clears the undo history) ----
  Status loadExample(const QString& name);
  Status loadHloText(const QString& text, const QString& filename);
  Status loadHloFile(const QString& path);
  // Opens an HLO file or a project (IsProjectFile) off the GUI thread: the file is read and parsed
  // on the worker; loadFinished reports the outcome. On an error the current module stays as it
  // was. A newer request or cancelLoad() drops an older one's result.
  void requestLoadFile(const QString& path);
  static bool IsProjectFile(const QString& path);  // .shardscope or .json
  void cancelLoad();
  bool loadBusy() const { return load_active_; }
  // Takes a built module; its instruction shardings become the user annotations.
  void setModule(std::unique_ptr<Module> module, const DeviceMesh& mesh, const QString& source_kind,
                 const QString& source);
  // Project: JSON with the module text, the mesh, the annotations (by instruction name) and the
  // selection. Written atomically (QSaveFile).
  Status saveProject(const QString& path);
  Status loadProject(const QString& path);
  QByteArray projectJson() const;
  Status loadProjectJson(const QByteArray& json, const QString& path_for_messages);

  // The file the document was last loaded from or saved to ("" for an example).
  QString filePath() const { return file_path_; }
  QString sourceKind() const { return source_kind_; }  // "example", "hlo", "project", ""
  QString source() const { return source_; }           // example name or path
  QString title() const;
  bool isModified() const;

  // ---- The module ----
  const Module* module() const { return module_.get(); }
  bool hasModule() const { return module_ != nullptr; }
  // Increments whenever a different module is loaded (views lay out again only then).
  quint64 moduleGeneration() const { return module_generation_; }
  const Instruction* instruction(int64_t id) const;
  const Instruction* findInstruction(const QString& name) const;
  // Name as used in project files: "name" in the entry computation, "computation/name" elsewhere.
  QString qualifiedName(const Instruction* inst) const;
  // The HLO text of the module with the current annotations (and, when `with_inferred`, the
  // propagated shardings) on its instructions.
  QString moduleText(bool with_inferred = false) const;

  // ---- Mesh and annotations ----
  const DeviceMesh& mesh() const { return mesh_; }
  const std::map<int64_t, HloSharding>& annotations() const { return annotations_; }
  std::optional<HloSharding> annotation(int64_t id) const;

  // Undoable edits. Return false (and emit errorOccurred) when the edit is invalid.
  bool annotate(int64_t id, const HloSharding& sharding);
  bool clearAnnotation(int64_t id);
  bool setMesh(const DeviceMesh& mesh);
  QUndoStack* undoStack() const { return undo_stack_; }

  // Raw setters used by the undo commands (no undo entry). Both schedule propagation.
  void applyAnnotation(int64_t id, const std::optional<HloSharding>& sharding);
  void applyMeshState(const DeviceMesh& mesh, const std::map<int64_t, HloSharding>& annotations);
  // The annotations re-expressed over `new_mesh` (same named axes where they still exist).
  std::map<int64_t, HloSharding> remapAnnotations(const DeviceMesh& new_mesh) const;

  // ---- Propagated shardings ----
  // The sharding every tensor ends up with: the propagated one, else the user's, else nullopt.
  std::optional<HloSharding> sharding(int64_t id) const;
  TensorOrigin origin(int64_t id) const;
  std::vector<WhyStep> why(int64_t id) const;
  const PropagationOutput& propagation() const { return propagation_; }
  // True while a propagation request is queued or running.
  bool isBusy() const { return pending_ > 0; }
  // Incremented each time new propagation results are applied.
  quint64 resultGeneration() const { return result_generation_; }
  // Blocks (processing events) until no request is pending or `timeout_ms` passes.
  bool waitUntilIdle(int timeout_ms = 30000);

  // ---- Partitioning (on demand, off the GUI thread) ----
  void requestPartition();
  const PartitionOutput& partition() const { return partition_; }
  // True from a request until its result arrives or it is cancelled.
  bool partitionBusy() const { return partition_active_; }
  // Drops the pending partitioning: its result is discarded when it arrives (the engine cannot be
  // interrupted mid-run), partitionBusy() is false at once; emits partitionCancelled.
  void cancelPartition();

  // A document that only displays a module (the partitioned program) runs no propagation.
  void setPropagationEnabled(bool on) { propagation_enabled_ = on; }
  bool propagationEnabled() const { return propagation_enabled_; }

  // ---- Simulation (on demand, off the GUI thread) ----
  // Partitions the current shardings and simulates one step on `chip` (DefaultChip() when empty).
  // The run is then saved to the run store (on the store's worker) and simulationUpdated() and
  // runAdded() follow; when the store cannot be used the run is kept in memory (negative id).
  // kReplicated simulates the module with no shardings at all (every device holds everything and
  // does all the work): the baseline a sharding is compared with.
  enum class SimulationInput { kShardings, kReplicated };
  void requestSimulation(const QString& chip = QString(), SimulationInput input = SimulationInput::kShardings);
  // Drops the pending simulation: its result is discarded (it is not saved), simulationBusy() is
  // false at once and simulationCancelled() is emitted. The worker finishes the step it started.
  void cancelSimulation();
  bool simulationBusy() const { return simulation_active_; }
  const SimulationOutput& simulation() const { return simulation_; }

  // ---- Run store (SQLite; every call returns at once, the work runs on a worker thread) ----
  // Runs are stored in $SHARDSCOPE_RUN_DB when it is set, else in the project's store next to a
  // saved or opened project file ("dir/name.runs.sqlite"), else in runs.sqlite in the per-user data
  // folder. The store is opened on first use: openRunStore() or the first simulation.
  static QString chooseRunStorePath(const QString& project_file);
  void openRunStore();
  // Opens the store again when its path changed (project saved or opened) and lists its runs.
  void refreshRunStore();
  QString runStorePath() const { return store_path_; }    // the store in use; "" when none
  QString runStoreError() const { return store_error_; }  // why runs are not stored; "" when fine
  bool runStoreBusy() const { return store_pending_ > 0; }
  // Every run of the store, then the runs kept in memory only; oldest first.
  const std::vector<RunOverview>& runHistory() const { return history_; }
  const RunOverview* runOverview(int64_t run_id) const;
  // The full run when it is in memory (made in this session or loaded recently), else nullptr.
  std::shared_ptr<const RunResult> loadedRun(int64_t run_id) const;
  // Loads a run from the store; runLoaded(run_id) follows (at once when it is in memory) or
  // runStoreMessage() with the reason.
  void requestRun(int64_t run_id);
  // Persist to the store; runLabelChanged / runRemoved are emitted at once. False: no such run.
  bool setRunLabel(int64_t run_id, const QString& label);
  bool deleteRun(int64_t run_id);
  // The figures of two runs (RunStore::CompareRuns); comparisonReady(a, b) follows.
  void requestComparison(int64_t run_a, int64_t run_b);
  const std::optional<RunComparison>& comparison() const { return comparison_; }
  // The instruction of this document a timeline event of run `run_id` came from, by the SPMD
  // instruction name the event carries (loop suffixes "[i]" ignored): through the partitioner's
  // map of that run when it was made in this session, else the last partitioning, else the same
  // name. -1 when none (another module's run, or an instruction the partitioner inserted).
  int64_t instructionForEvent(int64_t run_id, const QString& spmd_instruction) const;

  // ---- Selection ----
  int64_t selected() const { return selected_; }
  void select(int64_t id);

 signals:
  void moduleReset();           // a different module: lay out again
  void meshChanged();
  void annotationsChanged();
  void shardingsUpdated();      // new propagation results: recolour
  void selectionChanged(qint64 id);
  void busyChanged(bool busy);
  void partitionUpdated();
  void partitionCancelled();
  // A requestLoadHloFile finished: ok, or the error ("FILE:LINE:COLUMN: error: ..." for parse errors).
  void loadFinished(const QString& path, bool ok, const QString& message);
  void simulationUpdated();
  void simulationCancelled();
  void runAdded(qint64 run_id);
  void runHistoryReset();          // the history was replaced (store opened, or listed again)
  void runRemoved(qint64 run_id);
  void runLabelChanged(qint64 run_id);
  void runLoaded(qint64 run_id);
  void comparisonReady(qint64 run_a, qint64 run_b);
  void runStoreChanged();          // runStorePath() or runStoreError() changed
  void runStoreMessage(const QString& message);  // a store operation failed
  void runStoreBusyChanged(bool busy);
  void errorOccurred(const QString& message);
  void modifiedChanged(bool modified);

 private:
  void rebuildIndex();
  void resetSession();
  void schedulePropagation();
  void startPropagation();
  std::unique_ptr<Module> annotatedClone(bool with_inferred) const;

  std::unique_ptr<Module> module_;  // shardings stripped: annotations_ holds the user's
  DeviceMesh mesh_;
  std::map<int64_t, HloSharding> annotations_;
  std::unordered_map<int64_t, const Instruction*> by_id_;
  quint64 module_generation_ = 0;
  QString file_path_, source_kind_, source_;
  QUndoStack* undo_stack_ = nullptr;
  int64_t selected_ = -1;
  bool propagation_enabled_ = true;

  QThreadPool* pool_ = nullptr;  // one thread: requests run in order
  std::shared_ptr<PropagationSession> session_;
  std::shared_ptr<std::atomic<quint64>> latest_request_;
  quint64 request_generation_ = 0;
  quint64 result_generation_ = 0;
  int pending_ = 0;
  bool propagation_scheduled_ = false;
  PropagationOutput propagation_;

  // Simulation and run store (document.cpp, "Simulation" and "Run store").
  struct StoreSlot;
  struct StoreReply;
  void finishSimulation(quint64 gen, SimulationOutput out);
  void adoptRun(std::shared_ptr<RunResult> run);
  struct ParsedProject;  // a project file read into plain data (parsed on a worker thread)
  static Result<ParsedProject> ParseProject(const QByteArray& json, const QString& where);
  void adoptProject(ParsedProject p);
  void scheduleRunStoreRefresh();
  void setRunStoreProject(const QString& project_file, bool carry_session_runs);
  void relistRuns();
  void cacheRun(std::shared_ptr<const RunResult> run);
  template <typename Work, typename Done>
  void onStore(Work work, Done done);
  // A change to a stored run (relabel, delete) on the store's thread; when it fails, says
  // "Cannot <what>: <why>" and lists the store again so the history shows what is really there.
  void writeToStore(const QString& what, std::function<Status(RunDatabase&)> write);

  SimulationOutput simulation_;
  bool simulation_active_ = false;
  quint64 simulation_generation_ = 0;
  std::shared_ptr<std::atomic<quint64>> simulation_latest_;
  QThreadPool* store_pool_ = nullptr;  // one thread: store operations run in order
  std::shared_ptr<StoreSlot> store_slot_;  // touched only on the store's thread
  bool store_enabled_ = false;
  bool store_refresh_scheduled_ = false;
  bool carry_on_refresh_ = false;
  QString run_project_file_;  // the project whose store is used ("" for the per-user store)
  QString store_requested_;   // path of the last open request
  QString store_path_, store_error_;
  quint64 store_generation_ = 0;
  int store_pending_ = 0;
  int64_t next_memory_id_ = -1;
  std::vector<RunOverview> history_;
  std::vector<std::shared_ptr<const RunResult>> run_cache_;  // most recently used last
  std::vector<int64_t> session_runs_;  // made in this session (carried into a newly saved project's store)
  std::optional<RunComparison> comparison_;
  PartitionOutput partition_;
  int partition_pending_ = 0;
  bool partition_active_ = false;
  bool load_active_ = false;
  quint64 load_generation_ = 0;
  quint64 partition_generation_ = 0;
};

}  // namespace shardscope::views
