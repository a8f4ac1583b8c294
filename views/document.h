// The open document: the module, the device mesh, the user's annotations and the engines' results.
// Views read it and edit it only through its undoable operations. Heavy work (propagation,
// partitioning) runs on a worker thread on a snapshot; every request carries a generation number and
// a result that arrives after something changed is dropped (hotspot's pattern).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <unordered_map>

#include <QObject>
#include <QString>
#include <QStringList>

#include "core/ir.h"
#include "core/mesh.h"
#include "core/sharding.h"
#include "core/status.h"
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
  bool partitionBusy() const { return partition_pending_ > 0; }

  // A document that only displays a module (the partitioned program) runs no propagation.
  void setPropagationEnabled(bool on) { propagation_enabled_ = on; }
  bool propagationEnabled() const { return propagation_enabled_; }

  // ---- Simulation (on demand, off the GUI thread) ----
  // Partitions the current shardings and simulates one step on `chip` (DefaultChip() when empty).
  void requestSimulation(const QString& chip = QString());
  bool simulationBusy() const { return simulation_pending_ > 0; }
  const SimulationOutput& simulation() const { return simulation_; }
  // Every successful run of this document, oldest first (ids 1, 2, ...).
  const std::vector<std::shared_ptr<const RunResult>>& runs() const { return runs_; }

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
  void simulationUpdated();
  void runAdded(qint64 run_id);
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

  SimulationOutput simulation_;
  std::vector<std::shared_ptr<const RunResult>> runs_;
  int simulation_pending_ = 0;
  quint64 simulation_generation_ = 0;
  PartitionOutput partition_;
  int partition_pending_ = 0;
  quint64 partition_generation_ = 0;
};

}  // namespace shardscope::views
